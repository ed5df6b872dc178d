#include "loom/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "loom/core/error.h"

namespace loom {

namespace {

std::string os_error(int err) {
    return std::strerror(err);
}

std::filesystem::path temp_path_for(const std::filesystem::path& path) {
    std::filesystem::path temp = path;
    temp += ".tmp." + std::to_string(::getpid());
    return temp;
}

// The folder whose entry the rename changes ("." for a bare file name).
std::filesystem::path folder_of(const std::filesystem::path& path) {
    const std::filesystem::path parent = path.parent_path();
    return parent.empty() ? std::filesystem::path(".") : parent;
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
    AtomicFileWriter out(path);
    out.write(bytes);
    out.commit();
}

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path)
    : path_(std::move(path)), temp_path_(temp_path_for(path_)) {
    // O_TRUNC rather than O_EXCL: a temp file left by a crashed process that had our pid is
    // garbage, not a conflict.
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0) {
        const int err = errno;
        throw IoError(path_.string(), "cannot create temporary file " + temp_path_.string() + ": " +
                                          os_error(err) +
                                          " (does the folder exist and is it writable?)");
    }
}

AtomicFileWriter::~AtomicFileWriter() {
    if (!committed_) discard();
}

void AtomicFileWriter::discard() noexcept {
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
    if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, std::size_t size) {
    if (committed_ || failed_ || fd_ < 0) {
        throw IoError(path_.string(), "write after the file was committed or a write failed");
    }
    const char* p = static_cast<const char*>(data);
    std::size_t left = size;
    while (left > 0) {
        const ssize_t n = ::write(fd_, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            failed_ = true;
            throw IoError(path_.string(), "cannot write " + temp_path_.string() + ": " +
                                              os_error(err) + " (is the disk full?)");
        }
        p += n;
        left -= static_cast<std::size_t>(n);
        bytes_written_ += static_cast<std::uint64_t>(n);
    }
}

void AtomicFileWriter::commit() {
    if (committed_ || failed_ || fd_ < 0) {
        throw IoError(path_.string(), "commit after the file was committed or a write failed");
    }
    if (::fsync(fd_) != 0) {
        const int err = errno;
        failed_ = true;
        throw IoError(path_.string(), "cannot sync " + temp_path_.string() + ": " + os_error(err));
    }
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) {
        const int err = errno;
        failed_ = true;
        throw IoError(path_.string(), "cannot close " + temp_path_.string() + ": " + os_error(err));
    }
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
        const int err = errno;
        failed_ = true;
        throw IoError(path_.string(),
                      "cannot rename " + temp_path_.string() + " over it: " + os_error(err));
    }
    committed_ = true;

    // The rename is durable only once the folder is synced. Some filesystems cannot sync a
    // folder (EINVAL); the data itself is already on disk then, so that is not an error.
    const std::filesystem::path folder = folder_of(path_);
    const int dir_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
        const int err = errno;
        throw IoError(path_.string(),
                      "cannot open folder " + folder.string() + " to sync it: " + os_error(err));
    }
    const int synced = ::fsync(dir_fd);
    const int err = errno;
    ::close(dir_fd);
    if (synced != 0 && err != EINVAL) {
        throw IoError(path_.string(),
                      "cannot sync folder " + folder.string() + ": " + os_error(err));
    }
}

}  // namespace loom
