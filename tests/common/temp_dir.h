#pragma once

// A folder under the system temp dir for one test, removed with everything in it on destruction
// (also when a test took its own permissions away). Shared by the test suites that write files.

#include <filesystem>
#include <string_view>

namespace loom::test {

class TempDir {
  public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }
    std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

  private:
    std::filesystem::path path_;
};

}  // namespace loom::test
