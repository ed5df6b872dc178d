#pragma once

// The guard's agreement across the ranks of a data-parallel run (guard/rank_agreement.h) over
// the c10d process group that joins them (dist/process_group.h): the attempt's outcome is an
// all-reduce, the failing ranks' events an all-gather, rank 0's decision a broadcast.

#include <string>
#include <vector>

#include "loom/guard/rank_agreement.h"

namespace loom {

namespace dist {
class ProcessGroup;
}

class GroupAgreement final : public guard::RankAgreement {
  public:
    explicit GroupAgreement(dist::ProcessGroup& group) : group_(group) {}

    int rank() const override;
    bool any(bool failed_here) override;
    std::vector<std::string> gather(const std::string& mine) override;
    std::string from_leader(const std::string& text) override;

  private:
    dist::ProcessGroup& group_;
};

}  // namespace loom
