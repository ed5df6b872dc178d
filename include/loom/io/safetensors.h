#pragma once

// Strict safetensors reading and writing (reference/formats.md §1). No torch here: the model
// layer turns TensorInfo + bytes into tensors, and the fuzz target (fuzz/) builds this with plain
// clang.
//
// The reader enforces every rule of the reference Rust reader (safetensors/src/tensor.rs,
// formats.md §1.2) and is stricter in four places, all of which the format's README asks for or
// torch needs:
//   - duplicate keys are rejected (top-level names, __metadata__ keys, fields of an entry); the
//     reference keeps the last of a duplicated tensor or metadata key;
//   - the header must begin with '{' (no leading whitespace);
//   - a shape dimension must fit in int64 (torch's limit), even in a zero-element tensor;
//   - JSON nested deeper than 128 levels (only possible inside unknown fields) is rejected, as
//     serde_json's recursion limit does.
// Unknown fields in a tensor entry are ignored, as the reference does. `"__metadata__": null`
// means no metadata, as in the reference.

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom {

// Element types, in the reference's enum order ("increasing alignment order"), which the writer
// relies on when it sorts.
enum class DType : std::uint8_t {
    kBool,
    kF4,
    kF6E2M3,
    kF6E3M2,
    kU8,
    kI8,
    kF8E5M2,
    kF8E4M3,
    kF8E8M0,
    kF8E4M3Fnuz,
    kF8E5M2Fnuz,
    kI16,
    kU16,
    kF16,
    kBF16,
    kI32,
    kU32,
    kF32,
    kC64,
    kF64,
    kI64,
    kU64,
};

inline constexpr std::array<DType, 22> kAllDTypes = {
    DType::kBool,       DType::kF4,     DType::kF6E2M3, DType::kF6E3M2, DType::kU8,
    DType::kI8,         DType::kF8E5M2, DType::kF8E4M3, DType::kF8E8M0, DType::kF8E4M3Fnuz,
    DType::kF8E5M2Fnuz, DType::kI16,    DType::kU16,    DType::kF16,    DType::kBF16,
    DType::kI32,        DType::kU32,    DType::kF32,    DType::kC64,    DType::kF64,
    DType::kI64,        DType::kU64,
};

// The name used in safetensors headers: "F32", "BF16", "F8_E4M3", "F8_E4M3FNUZ", ...
const char* dtype_name(DType dtype);
// The DType with that exact (case-sensitive) header name, or nullopt.
std::optional<DType> dtype_from_name(std::string_view name);
// Bits per element: 4 (F4), 6 (F6_*), 8, 16, 32 or 64 (C64 is two F32s).
int dtype_bits(DType dtype);

// One tensor of a file. Offsets are relative to the data buffer (file offset 8 + header size).
struct TensorInfo {
    std::string name;
    DType dtype = DType::kU8;
    std::vector<std::int64_t> shape;  // empty for a rank-0 tensor, which holds one element
    std::uint64_t begin = 0;          // bytes
    std::uint64_t end = 0;            // bytes, one past the last

    std::uint64_t nbytes() const { return end - begin; }
    std::int64_t numel() const;  // product of shape; 1 for rank 0
};

// A read-only view of bytes owned by a SafetensorsFile; valid while that file object lives.
struct ByteView {
    const std::uint8_t* data = nullptr;
    std::size_t size = 0;
};

// A validated safetensors file. open() memory-maps the file read-only (reading it into memory
// only if mmap fails), so tensor bytes are not copied; they are little-endian, row-major, and
// not necessarily aligned to their element size in files from other writers.
//
// Every problem with the contents throws FormatError("<file>: <what is wrong>"), e.g.
//   model.safetensors: tensor 'a.weight': data_offsets [0, 12] hold 12 bytes but F32 shape
//   [2, 2] needs 16
// and an unreadable file throws IoError. Movable, not copyable; const methods are safe to call
// from several threads.
class SafetensorsFile {
  public:
    static SafetensorsFile open(const std::filesystem::path& path);
    // Parses a file image held in memory; `name` stands in for the path in error messages.
    static SafetensorsFile parse(std::string bytes, std::string name);

    SafetensorsFile(SafetensorsFile&& other) noexcept;
    SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;
    ~SafetensorsFile();

    const std::filesystem::path& path() const { return path_; }

    // In data-buffer order (ascending offsets; zero-size tensors sharing an offset by name).
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    // nullptr when there is no tensor of that name.
    const TensorInfo* find(std::string_view name) const;

    // The __metadata__ entries in file order; empty when the file has none.
    const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
    // The value of one __metadata__ key, or nullptr.
    const std::string* metadata_value(std::string_view key) const;

    // The raw bytes of a tensor of this file.
    ByteView data(const TensorInfo& tensor) const;
    // The raw bytes of the named tensor; throws FormatError when the file has no such tensor.
    ByteView data(std::string_view name) const;

    std::uint64_t header_size() const { return header_size_; }      // N, including any padding
    std::uint64_t data_offset() const { return 8 + header_size_; }  // file offset of the buffer
    std::uint64_t file_size() const { return size_; }
    bool is_memory_mapped() const { return map_ != nullptr; }

  private:
    SafetensorsFile() = default;
    void validate();
    void release() noexcept;

    std::filesystem::path path_;
    void* map_ = nullptr;  // mmap'ed file, or nullptr when the bytes live in owned_
    std::string owned_;
    const std::uint8_t* bytes_ = nullptr;
    std::uint64_t size_ = 0;
    std::uint64_t header_size_ = 0;
    std::vector<TensorInfo> tensors_;
    std::vector<std::size_t> by_name_;  // indices into tensors_, sorted by name
    std::vector<std::pair<std::string, std::string>> metadata_;
};

// One tensor to write. `data` points at `nbytes` little-endian, row-major bytes (not owned; it
// must stay valid during the call). nbytes must equal numel(shape) * dtype_bits / 8.
struct TensorToWrite {
    std::string name;
    DType dtype = DType::kU8;
    std::vector<std::int64_t> shape;
    const void* data = nullptr;
    std::uint64_t nbytes = 0;
};

using SafetensorsMetadata = std::vector<std::pair<std::string, std::string>>;

// The bytes of a safetensors file, laid out like the reference writer (formats.md §1.3): tensors
// sorted by descending dtype (alignment) and then by name, packed back to back; `__metadata__`
// first in the header (omitted when `metadata` is empty, otherwise in the given order); compact
// JSON padded with spaces to a multiple of 8 bytes, N counting the padding. So the data buffer
// starts 8-aligned and every tensor is aligned to its element size.
//
// Throws FormatError for a duplicate or reserved ("__metadata__") tensor name, a duplicate
// metadata key, text that is not UTF-8, a negative dimension, a bit count that is not a whole
// number of bytes, or nbytes that does not match dtype and shape.
std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const SafetensorsMetadata& metadata = {});

// serialize_safetensors streamed to `path` through AtomicFileWriter: the old file survives any
// failure. FormatError messages are prefixed with `path`; I/O failures throw IoError.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const SafetensorsMetadata& metadata = {});

}  // namespace loom
