#pragma once

// The error every stable-store operation throws: the database file could not be opened, read or
// written (damaged, written by a newer loom, locked past the busy timeout, on a read-only disk).
// The message names the file first, then what loom was doing, SQLite's own words and what to do.
//
// It is an IoError so that `loom stable ...` exits with code 3 (an unreadable input file) like
// any other file loom cannot use; StoreRecorder catches it so a training run never stops for it.

#include <filesystem>
#include <string>

#include "loom/core/error.h"

namespace loom::store {

class StoreError : public IoError {
  public:
    StoreError(const std::filesystem::path& file, const std::string& message)
        : IoError(file.string(), message) {}
};

}  // namespace loom::store
