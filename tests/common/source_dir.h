#pragma once

// The project's source tree, for tests that read fixtures kept beside their sources.
//
// Not __FILE__: the compiler runs with paths relative to the tree (ccache's CCACHE_BASEDIR,
// cmake/LoomCompilerCache.cmake, so that two clones share one cache), which makes __FILE__
// relative to the build folder. CTest sets LOOM_SOURCE_DIR for every test (tests/CMakeLists.txt);
// by hand, run a test from the tree's root or set it.

#include <cstdlib>
#include <filesystem>

namespace loom::testing {

inline std::filesystem::path source_dir() {
    if (const char* dir = std::getenv("LOOM_SOURCE_DIR"); dir != nullptr && *dir != '\0') {
        return dir;
    }
    return std::filesystem::current_path();
}

}  // namespace loom::testing
