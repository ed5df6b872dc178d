#pragma once

// Where the stable-config store lives when no --store is given: one file per user, shared by
// every run on the machine, so a plan found stable by one job is reused by the next job with
// the same key (DESIGN.md "Stability and reuse").

#include <filesystem>

namespace loom::store {

// $LOOM_HOME/stable.db when LOOM_HOME is set and not empty; else $XDG_DATA_HOME/loom/stable.db
// when XDG_DATA_HOME is set and not empty; else $HOME/.local/share/loom/stable.db. Throws
// loom::Error saying to set LOOM_HOME or pass --store when none of the three is set. Reads the
// environment only; creates nothing.
std::filesystem::path default_store_path();

}  // namespace loom::store
