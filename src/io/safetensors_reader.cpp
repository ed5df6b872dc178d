#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "loom/core/error.h"
#include "loom/io/safetensors.h"
#include "safetensors_format.h"

// The header is parsed and checked by SafetensorsFile::validate() (safetensors_header.cpp).

namespace loom {

using namespace safetensors_detail;

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
    SafetensorsFile file;
    file.path_ = path;
    const auto io_fail = [&](const std::string& what, int err) {
        throw IoError(path.string(), what + ": " + std::strerror(err));
    };
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) io_fail("cannot open for reading", errno);
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};

    struct stat st {};
    if (::fstat(fd, &st) != 0) io_fail("cannot stat", errno);
    if (S_ISDIR(st.st_mode)) throw IoError(path.string(), "is a folder, not a safetensors file");
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
        void* map =
            ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
        if (map != MAP_FAILED) {
            file.map_ = map;
            file.bytes_ = static_cast<const std::uint8_t*>(map);
            file.size_ = static_cast<std::uint64_t>(st.st_size);
        }
    }
    if (file.map_ == nullptr) {
        // No mmap (an empty file, a pipe, a filesystem without it): read everything instead.
        char buffer[1 << 16];
        for (;;) {
            const ssize_t n = ::read(fd, buffer, sizeof buffer);
            if (n < 0) {
                if (errno == EINTR) continue;
                io_fail("cannot read", errno);
            }
            if (n == 0) break;
            file.owned_.append(buffer, static_cast<std::size_t>(n));
        }
        file.bytes_ = reinterpret_cast<const std::uint8_t*>(file.owned_.data());
        file.size_ = file.owned_.size();
    }
    file.validate();
    return file;
}

SafetensorsFile SafetensorsFile::parse(std::string bytes, std::string name) {
    SafetensorsFile file;
    file.path_ = std::move(name);
    file.owned_ = std::move(bytes);
    file.bytes_ = reinterpret_cast<const std::uint8_t*>(file.owned_.data());
    file.size_ = file.owned_.size();
    file.validate();
    return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      owned_(std::move(other.owned_)),
      bytes_(std::exchange(other.bytes_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      header_size_(other.header_size_),
      tensors_(std::move(other.tensors_)),
      by_name_(std::move(other.by_name_)),
      metadata_(std::move(other.metadata_)) {
    // A short std::string keeps its bytes inline, so they move with the object.
    if (map_ == nullptr) bytes_ = reinterpret_cast<const std::uint8_t*>(owned_.data());
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
    if (this != &other) {
        release();
        path_ = std::move(other.path_);
        map_ = std::exchange(other.map_, nullptr);
        owned_ = std::move(other.owned_);
        bytes_ = std::exchange(other.bytes_, nullptr);
        size_ = std::exchange(other.size_, 0);
        header_size_ = other.header_size_;
        tensors_ = std::move(other.tensors_);
        by_name_ = std::move(other.by_name_);
        metadata_ = std::move(other.metadata_);
        if (map_ == nullptr) bytes_ = reinterpret_cast<const std::uint8_t*>(owned_.data());
    }
    return *this;
}

SafetensorsFile::~SafetensorsFile() {
    release();
}

void SafetensorsFile::release() noexcept {
    if (map_ != nullptr) {
        ::munmap(map_, static_cast<std::size_t>(size_));
        map_ = nullptr;
    }
    bytes_ = nullptr;
    size_ = 0;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
    const auto it = std::lower_bound(
        by_name_.begin(), by_name_.end(), name,
        [&](std::size_t index, std::string_view key) { return tensors_[index].name < key; });
    if (it == by_name_.end() || tensors_[*it].name != name) return nullptr;
    return &tensors_[*it];
}

const std::string* SafetensorsFile::metadata_value(std::string_view key) const {
    for (const auto& [k, v] : metadata_) {
        if (k == key) return &v;
    }
    return nullptr;
}

ByteView SafetensorsFile::data(const TensorInfo& tensor) const {
    return ByteView{bytes_ + data_offset() + tensor.begin,
                    static_cast<std::size_t>(tensor.nbytes())};
}

ByteView SafetensorsFile::data(std::string_view name) const {
    const TensorInfo* tensor = find(name);
    if (tensor == nullptr)
        throw FormatError(path_.string(), "no " + tensor_label(name) + " in the file");
    return data(*tensor);
}

}  // namespace loom
