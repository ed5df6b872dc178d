#pragma once

// Atomic file replacement: readers (and a crash) see either the old contents or the new ones,
// never a torn file. Data goes to `<name>.tmp.<pid>` in the target's folder; commit() fsyncs it,
// renames it over the target and fsyncs the folder so the rename itself survives a power cut.
// Checkpoints, LoRA files and state files are all written this way (DESIGN.md "Writes are
// atomic"), so bad input or a failed write never destroys what was already saved.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string_view>

namespace loom {

// Writes `bytes` to `path` atomically. Throws IoError (naming `path` and the OS error) when the
// temporary file cannot be created, written or synced, or the rename fails; the previous
// contents of `path`, if any, are then left as they were and no temporary file remains.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// The streaming form of write_file_atomic, for files too large to assemble in memory:
//
//     AtomicFileWriter out(path);  // creates <path>.tmp.<pid>
//     out.write(header);
//     out.write(data, size);
//     out.commit();                // fsync, rename over `path`, fsync the folder
//
// Destroying the writer without commit() (an exception on the way) removes the temporary file
// and leaves `path` untouched. All methods throw IoError naming `path`; after a failed write()
// the writer only accepts destruction (commit() throws). Not thread-safe; two writers for the
// same path in one process would share the temporary name and must not overlap.
class AtomicFileWriter {
  public:
    explicit AtomicFileWriter(std::filesystem::path path);
    ~AtomicFileWriter();

    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

    void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
    void write(const void* data, std::size_t size);

    // Makes the new contents visible at path(). Call once; the writer is finished afterwards.
    void commit();

    const std::filesystem::path& path() const { return path_; }
    const std::filesystem::path& temp_path() const { return temp_path_; }
    std::uint64_t bytes_written() const { return bytes_written_; }

  private:
    void discard() noexcept;

    std::filesystem::path path_;
    std::filesystem::path temp_path_;
    int fd_ = -1;
    bool failed_ = false;
    bool committed_ = false;
    std::uint64_t bytes_written_ = 0;
};

}  // namespace loom
