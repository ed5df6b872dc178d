#include "loom/store/store_location.h"

#include <cstdlib>
#include <optional>
#include <string>

#include "loom/core/error.h"

namespace loom::store {

namespace {

// An empty variable counts as unset: `LOOM_HOME= loom ...` must not put the store in the
// current folder by accident.
std::optional<std::filesystem::path> env_path(const char* name) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::filesystem::path(value);
}

}  // namespace

std::filesystem::path default_store_path() {
    if (auto home = env_path("LOOM_HOME")) return *home / "stable.db";
    if (auto data = env_path("XDG_DATA_HOME")) return *data / "loom" / "stable.db";
    if (auto home = env_path("HOME")) return *home / ".local" / "share" / "loom" / "stable.db";
    throw Error(
        "cannot place the stable store: none of LOOM_HOME, XDG_DATA_HOME or HOME is set; set "
        "LOOM_HOME to a folder for loom's files or pass --store PATH");
}

}  // namespace loom::store
