#pragma once

// The ranks of a data-parallel run deciding as one (issue 23). Every attempt the guard runs ends
// with a collective outcome: if any rank ran out of memory, every rank discards the attempt; the
// failing ranks' events go to rank 0, which takes the one decision (the ladder's, from the first
// failing rank's event) and sends it to all; every rank applies the same rung and retries the
// same work. The guard knows this interface only: dist/ implements it over c10d, and a test can
// implement it over threads.
//
// The texts exchanged are JSON made and read here, between ranks of one loom build.

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/guard/ladder_policy.h"

namespace loom::guard {

class RankAgreement {
  public:
    virtual ~RankAgreement() = default;
    virtual int rank() const = 0;
    bool leader() const { return rank() == 0; }
    // Whether any rank failed; `failed_here` is this rank's outcome.
    virtual bool any(bool failed_here) = 0;
    // Every rank's text, in rank order.
    virtual std::vector<std::string> gather(const std::string& mine) = 0;
    // Rank 0's text on every rank (the others' is ignored).
    virtual std::string from_leader(const std::string& text) = 0;
};

// Thrown inside an attempt by Guard::agree_so_far when the group said another rank failed: the
// outcome is known to every rank already, so the guard does not ask for it again (the ranks'
// collectives stay in step), and this rank drops its attempt as the failing ones do.
class PeersFailed : public std::runtime_error {
  public:
    PeersFailed() : std::runtime_error("another rank's attempt failed") {}
};

// An OOM event as a rank sends it to rank 0, and back (FormatError on a text that is not one).
std::string event_to_text(const OomEvent& event);
OomEvent event_from_text(const std::string& text);

// Rank 0's decision as it sends it to the others, and back. The changes are not sent: each rank
// computes them against the plan it runs.
std::string decision_to_text(const Decision& decision);
Decision decision_from_text(const std::string& text, const Plan& current);

}  // namespace loom::guard
