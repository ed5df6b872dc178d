#pragma once

// Fault injection in a data-parallel run: every rank reads the same LOOM_FAULTS / --faults, and
// a rule with a `rank=R` field applies in rank R only (dist::faults_for_rank), so a test can make
// one rank run out of memory while the others do not.

#include <optional>
#include <string>

namespace loom::cli {

// The rules of `flag` (else $LOOM_FAULTS) that apply in this process's rank ($RANK; 0 when it is
// unset or not a rank, which `loom train` reports itself), ready for configure_faults.
std::optional<std::string> faults_in_this_rank(const std::optional<std::string>& flag);

}  // namespace loom::cli
