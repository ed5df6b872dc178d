#include "loom/train/group_agreement.h"

#include "loom/dist/process_group.h"

namespace loom {

int GroupAgreement::rank() const {
    return group_.rank();
}

bool GroupAgreement::any(bool failed_here) {
    return group_.any(failed_here);
}

std::vector<std::string> GroupAgreement::gather(const std::string& mine) {
    return group_.all_gather(mine);
}

std::string GroupAgreement::from_leader(const std::string& text) {
    return group_.broadcast(text, 0);
}

}  // namespace loom
