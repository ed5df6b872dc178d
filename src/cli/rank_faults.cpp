#include "rank_faults.h"

#include <cstdlib>

#include "loom/core/error.h"
#include "loom/dist/rank.h"

namespace loom::cli {

std::optional<std::string> faults_in_this_rank(const std::optional<std::string>& flag) {
    std::string rules;
    if (flag) {
        rules = *flag;
    } else if (const char* env = std::getenv("LOOM_FAULTS"); env != nullptr) {
        rules = env;
    }
    int rank = 0;
    try {
        rank = dist::rank_from_environment(dist::process_environment()).rank;
    } catch (const UsageError&) {
        // `loom train` names the bad variable; the faults wait for it.
    }
    return dist::faults_for_rank(rules, rank);
}

}  // namespace loom::cli
