#include "loom/io/safetensors.h"

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_set>

#include "loom/core/error.h"
#include "loom/core/utf8.h"
#include "loom/io/atomic_file.h"

namespace loom {

namespace {

// ref: safetensors/src/tensor.rs MAX_HEADER_SIZE
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;
// serde_json's recursion limit; only unknown fields of an entry can nest this deep.
constexpr std::size_t kMaxJsonDepth = 128;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeEntry {
    DType dtype;
    const char* name;
    int bits;
};

// ref: safetensors/src/tensor.rs enum Dtype, bitsize()
constexpr DTypeEntry kDTypeTable[] = {
    {DType::kBool, "BOOL", 8},
    {DType::kF4, "F4", 4},
    {DType::kF6E2M3, "F6_E2M3", 6},
    {DType::kF6E3M2, "F6_E3M2", 6},
    {DType::kU8, "U8", 8},
    {DType::kI8, "I8", 8},
    {DType::kF8E5M2, "F8_E5M2", 8},
    {DType::kF8E4M3, "F8_E4M3", 8},
    {DType::kF8E8M0, "F8_E8M0", 8},
    {DType::kF8E4M3Fnuz, "F8_E4M3FNUZ", 8},
    {DType::kF8E5M2Fnuz, "F8_E5M2FNUZ", 8},
    {DType::kI16, "I16", 16},
    {DType::kU16, "U16", 16},
    {DType::kF16, "F16", 16},
    {DType::kBF16, "BF16", 16},
    {DType::kI32, "I32", 32},
    {DType::kU32, "U32", 32},
    {DType::kF32, "F32", 32},
    {DType::kC64, "C64", 64},
    {DType::kF64, "F64", 64},
    {DType::kI64, "I64", 64},
    {DType::kU64, "U64", 64},
};
static_assert(sizeof(kDTypeTable) / sizeof(kDTypeTable[0]) == kAllDTypes.size());

const DTypeEntry& dtype_entry(DType dtype) {
    return kDTypeTable[static_cast<std::size_t>(dtype)];
}

std::string all_dtype_names() {
    std::string names;
    for (const DTypeEntry& e : kDTypeTable) {
        if (!names.empty()) names += ", ";
        names += e.name;
    }
    return names;
}

// Names and keys in messages: quoted, with control characters (and, in text that is not UTF-8,
// every non-ASCII byte) shown as \xNN so that messages stay printable UTF-8.
std::string quote_text(std::string_view text) {
    constexpr std::size_t kMaxShown = 200;
    const bool utf8 = !find_invalid_utf8(text).has_value();
    std::size_t shown = std::min(text.size(), kMaxShown);
    // Cut long text on a character boundary.
    while (utf8 && shown < text.size() && shown > 0 && (text[shown] & 0xC0) == 0x80) --shown;
    std::string out = "'";
    for (std::size_t i = 0; i < shown; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c < 0x20 || c == 0x7F || (c >= 0x80 && !utf8)) {
            static const char kHex[] = "0123456789abcdef";
            out += "\\x";
            out += kHex[c >> 4];
            out += kHex[c & 0xF];
        } else {
            out += static_cast<char>(c);
        }
    }
    if (shown < text.size()) out += "...";
    return out + "'";
}

std::string tensor_label(std::string_view name) {
    return "tensor " + quote_text(name);
}

template <typename Int>
std::string join_numbers(const std::vector<Int>& values) {
    std::string out = "[";
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (i > 0) out += ", ";
        out += std::to_string(values[i]);
    }
    return out + "]";
}

std::string bytes_text(std::uint64_t n) {
    return std::to_string(n) + (n == 1 ? " byte" : " bytes");
}

std::string offsets_text(std::uint64_t begin, std::uint64_t end) {
    return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

std::string dtype_shape_text(DType dtype, const std::vector<std::int64_t>& shape) {
    return std::string(dtype_name(dtype)) + " shape " + join_numbers(shape);
}

bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
    if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return false;
    *out = a * b;
    return true;
}

// Bits held by `shape` elements of `dtype`, or nullopt when the count overflows 64 bits.
// ref: safetensors/src/tensor.rs Metadata::validate (checked_mul over the shape, then bitsize)
std::optional<std::uint64_t> total_bits(DType dtype, const std::vector<std::int64_t>& shape) {
    std::uint64_t n = 1;
    for (const std::int64_t d : shape) {
        if (!checked_mul(n, static_cast<std::uint64_t>(d), &n)) return std::nullopt;
    }
    if (!checked_mul(n, static_cast<std::uint64_t>(dtype_bits(dtype)), &n)) return std::nullopt;
    return n;
}

std::uint64_t read_le64(const std::uint8_t* p) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

void append_le64(std::string& out, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

// ---------------------------------------------------------------------------------------------
// Header parsing: an nlohmann SAX handler that checks the schema while it streams, so a 100 MB
// header never becomes a DOM, and that sees duplicate keys (nlohmann's DOM keeps one silently).

struct RawEntry {
    std::string name;
    DType dtype = DType::kU8;
    std::vector<std::int64_t> shape;
    std::uint64_t offsets[2] = {0, 0};
    std::size_t offset_count = 0;
    unsigned seen = 0;  // kFieldDType | kFieldShape | kFieldOffsets
};

constexpr unsigned kFieldDType = 1;
constexpr unsigned kFieldShape = 2;
constexpr unsigned kFieldOffsets = 4;

// A JSON value as the SAX events report it, enough to validate it or say what it was.
struct Found {
    enum Kind { kNull, kBool, kNegative, kUnsigned, kFloat, kString, kObject, kArray } kind;
    bool boolean = false;
    std::int64_t negative = 0;
    std::uint64_t unsigned_value = 0;
    const std::string* text = nullptr;  // kFloat: the literal; kString: the value
};

std::string describe(const Found& v) {
    switch (v.kind) {
        case Found::kNull: return "null";
        case Found::kBool: return v.boolean ? "true" : "false";
        case Found::kNegative: return v.negative == 0 ? "-0" : std::to_string(v.negative);
        case Found::kUnsigned: return std::to_string(v.unsigned_value);
        case Found::kFloat: {
            const std::string& t = *v.text;
            const bool digits =
                std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
            return digits ? t + " (too large for 64 bits)" : t;
        }
        case Found::kString: return "the string " + quote_text(*v.text);
        case Found::kObject: return "an object";
        case Found::kArray: return "an array";
    }
    return "a value";
}

class HeaderParser {
  public:
    using json = nlohmann::json;

    std::string error;
    std::vector<RawEntry> entries;  // in header order
    std::vector<std::pair<std::string, std::string>> metadata;

    bool null() { return value(Found{Found::kNull}); }
    bool boolean(bool b) {
        Found v{Found::kBool};
        v.boolean = b;
        return value(v);
    }
    // nlohmann reports every literal with a leading '-' here (even -0), everything else below.
    bool number_integer(json::number_integer_t i) {
        Found v{Found::kNegative};
        v.negative = i;
        return value(v);
    }
    bool number_unsigned(json::number_unsigned_t u) {
        Found v{Found::kUnsigned};
        v.unsigned_value = u;
        return value(v);
    }
    bool number_float(json::number_float_t, const json::string_t& literal) {
        Found v{Found::kFloat};
        v.text = &literal;
        return value(v);
    }
    bool string(json::string_t& s) {
        Found v{Found::kString};
        v.text = &s;
        return value(v);
    }
    bool binary(json::binary_t&) { return fail("header holds binary data"); }
    bool start_object(std::size_t) { return value(Found{Found::kObject}); }
    bool start_array(std::size_t) { return value(Found{Found::kArray}); }
    bool end_object() { return end_container(); }
    bool end_array() { return end_container(); }
    bool key(json::string_t& k);
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
        // "[json.exception.parse_error.101] parse error at line 1, column 7: ..." without the tag.
        std::string what = ex.what();
        const std::size_t tag_end = what.find("] ");
        if (tag_end != std::string::npos) what.erase(0, tag_end + 2);
        return fail("header is not valid JSON: " + what);
    }

  private:
    enum class Frame : std::uint8_t { kTop, kMetadata, kEntry, kShape, kOffsets };
    // What the value after the current key is.
    enum class Slot : std::uint8_t {
        kNone,
        kTensor,
        kMetadataValue,
        kDType,
        kShape,
        kOffsets,
        kSkip
    };

    bool fail(std::string message) {
        if (error.empty()) error = std::move(message);
        return false;
    }
    bool value(const Found& v);
    bool entry_value(RawEntry& entry, Slot slot, const Found& v);
    bool array_element(RawEntry& entry, Frame frame, const Found& v);
    bool end_container();
    bool push(Frame frame) {
        if (depth() >= kMaxJsonDepth) return too_deep();
        stack_.push_back(frame);
        return true;
    }
    bool enter_skip() {
        if (depth() >= kMaxJsonDepth) return too_deep();
        ++skip_depth_;
        return true;
    }
    std::size_t depth() const { return stack_.size() + skip_depth_; }
    bool too_deep() {
        return fail("header JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }

    std::vector<Frame> stack_;
    std::size_t skip_depth_ = 0;  // levels inside an ignored (unknown-field) value
    Slot slot_ = Slot::kNone;
    std::string pending_key_;
    std::unordered_set<std::string> top_keys_;
    std::unordered_set<std::string> metadata_keys_;
};

bool HeaderParser::key(json::string_t& k) {
    if (skip_depth_ > 0) return true;
    switch (stack_.back()) {
        case Frame::kTop:
            if (!top_keys_.insert(k).second) {
                return fail(k == kMetadataKey ? "duplicate key '__metadata__'"
                                              : "duplicate " + tensor_label(k));
            }
            slot_ = k == kMetadataKey ? Slot::kMetadataValue : Slot::kTensor;
            pending_key_ = k;
            return true;
        case Frame::kMetadata:
            if (!metadata_keys_.insert(k).second) {
                return fail("duplicate __metadata__ key " + quote_text(k));
            }
            slot_ = Slot::kMetadataValue;
            pending_key_ = k;
            return true;
        case Frame::kEntry: {
            RawEntry& entry = entries.back();
            unsigned field = 0;
            if (k == "dtype") {
                field = kFieldDType;
                slot_ = Slot::kDType;
            } else if (k == "shape") {
                field = kFieldShape;
                slot_ = Slot::kShape;
            } else if (k == "data_offsets") {
                field = kFieldOffsets;
                slot_ = Slot::kOffsets;
            } else {
                slot_ = Slot::kSkip;  // the reference ignores unknown fields too
                return true;
            }
            if (entry.seen & field) {
                return fail(tensor_label(entry.name) + ": duplicate field " + quote_text(k));
            }
            entry.seen |= field;
            return true;
        }
        case Frame::kShape:
        case Frame::kOffsets: break;
    }
    return fail("internal error: key inside an array");
}

bool HeaderParser::value(const Found& v) {
    const bool container = v.kind == Found::kObject || v.kind == Found::kArray;
    if (skip_depth_ > 0) return container ? enter_skip() : true;
    if (stack_.empty()) {
        // The root; the '{' check before parsing makes anything else unreachable.
        if (v.kind != Found::kObject)
            return fail("header must be a JSON object, found " + describe(v));
        return push(Frame::kTop);
    }
    const Frame frame = stack_.back();
    if (frame == Frame::kShape || frame == Frame::kOffsets) {
        return array_element(entries.back(), frame, v);
    }
    const Slot slot = std::exchange(slot_, Slot::kNone);
    switch (slot) {
        case Slot::kTensor:
            if (v.kind != Found::kObject) {
                return fail(tensor_label(pending_key_) +
                            ": entry must be an object with dtype, shape and data_offsets, found " +
                            describe(v));
            }
            entries.emplace_back();
            entries.back().name = pending_key_;
            return push(Frame::kEntry);
        case Slot::kMetadataValue:
            if (frame == Frame::kTop) {
                // ref: the reference parses __metadata__ as Option<HashMap<String, String>>.
                if (v.kind == Found::kNull) return true;
                if (v.kind != Found::kObject) {
                    return fail("__metadata__ must be an object of string values, found " +
                                describe(v));
                }
                return push(Frame::kMetadata);
            }
            if (v.kind != Found::kString) {
                return fail("__metadata__ value of " + quote_text(pending_key_) +
                            " must be a string, found " + describe(v));
            }
            metadata.emplace_back(pending_key_, *v.text);
            return true;
        case Slot::kDType:
        case Slot::kShape:
        case Slot::kOffsets: return entry_value(entries.back(), slot, v);
        case Slot::kSkip: return container ? enter_skip() : true;
        case Slot::kNone: break;
    }
    return fail("internal error: value without a key");
}

bool HeaderParser::entry_value(RawEntry& entry, Slot slot, const Found& v) {
    const std::string label = tensor_label(entry.name);
    if (slot == Slot::kDType) {
        if (v.kind != Found::kString)
            return fail(label + ": dtype must be a string, found " + describe(v));
        const std::optional<DType> dtype = dtype_from_name(*v.text);
        if (!dtype) {
            return fail(label + ": unknown dtype " + quote_text(*v.text) + " (expected one of " +
                        all_dtype_names() + ")");
        }
        entry.dtype = *dtype;
        return true;
    }
    if (slot == Slot::kShape) {
        if (v.kind != Found::kArray) {
            return fail(label + ": shape must be an array of non-negative integers, found " +
                        describe(v));
        }
        return push(Frame::kShape);
    }
    if (v.kind != Found::kArray) {
        return fail(label + ": data_offsets must be an array [begin, end], found " + describe(v));
    }
    return push(Frame::kOffsets);
}

bool HeaderParser::array_element(RawEntry& entry, Frame frame, const Found& v) {
    const std::string label = tensor_label(entry.name);
    if (frame == Frame::kShape) {
        if (v.kind != Found::kUnsigned) {
            return fail(label + ": shape must be an array of non-negative integers, found " +
                        describe(v));
        }
        if (v.unsigned_value >
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
            return fail(label + ": shape dimension " + std::to_string(v.unsigned_value) +
                        " does not fit in int64");
        }
        entry.shape.push_back(static_cast<std::int64_t>(v.unsigned_value));
        return true;
    }
    if (v.kind != Found::kUnsigned) {
        return fail(label + ": data_offsets must be non-negative integers, found " + describe(v));
    }
    if (entry.offset_count < 2) entry.offsets[entry.offset_count] = v.unsigned_value;
    ++entry.offset_count;
    return true;
}

bool HeaderParser::end_container() {
    if (skip_depth_ > 0) {
        --skip_depth_;
        return true;
    }
    const Frame frame = stack_.back();
    stack_.pop_back();
    if (frame == Frame::kOffsets) {
        const RawEntry& entry = entries.back();
        if (entry.offset_count != 2) {
            return fail(tensor_label(entry.name) +
                        ": data_offsets must hold exactly 2 values [begin, end], found " +
                        std::to_string(entry.offset_count));
        }
    } else if (frame == Frame::kEntry) {
        const RawEntry& entry = entries.back();
        static const std::pair<unsigned, const char*> kRequired[] = {
            {kFieldDType, "dtype"}, {kFieldShape, "shape"}, {kFieldOffsets, "data_offsets"}};
        for (const auto& [bit, field] : kRequired) {
            if (!(entry.seen & bit)) {
                return fail(tensor_label(entry.name) + ": missing field '" + field + "'");
            }
        }
    }
    return true;
}

std::string describe_first_byte(char c) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7F) return std::string("'") + c + "'";
    static const char kHex[] = "0123456789abcdef";
    return std::string("byte 0x") + kHex[b >> 4] + kHex[b & 0xF];
}

// ---------------------------------------------------------------------------------------------
// Writing

void append_json_string(std::string& out, std::string_view text) {
    // The escapes serde_json (the reference writer) uses; everything else is copied as UTF-8.
    static const char kHex[] = "0123456789abcdef";
    out += '"';
    for (const char ch : text) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (c < 0x20) {
                    out += "\\u00";
                    out += kHex[c >> 4];
                    out += kHex[c & 0xF];
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
}

struct PreparedFile {
    std::string header;  // the 8-byte length, the JSON and its padding
    std::vector<const TensorToWrite*> order;
    std::uint64_t data_size = 0;
};

PreparedFile prepare(const std::vector<TensorToWrite>& tensors, const SafetensorsMetadata& metadata,
                     const std::string& where) {
    const auto fail = [&](const std::string& message) { throw FormatError(where, message); };
    const auto check_utf8 = [&](std::string_view text, const std::string& what) {
        if (find_invalid_utf8(text)) fail(what + " is not valid UTF-8");
    };

    std::unordered_set<std::string_view> metadata_keys;
    for (const auto& [key, value] : metadata) {
        check_utf8(key, "__metadata__ key " + quote_text(key));
        check_utf8(value, "__metadata__ value of " + quote_text(key));
        if (!metadata_keys.insert(key).second)
            fail("duplicate __metadata__ key " + quote_text(key));
    }

    PreparedFile prepared;
    std::unordered_set<std::string_view> names;
    for (const TensorToWrite& t : tensors) {
        const std::string label = tensor_label(t.name);
        check_utf8(t.name, "tensor name " + quote_text(t.name));
        if (t.name == kMetadataKey) fail("tensor name '__metadata__' is reserved for metadata");
        if (!names.insert(t.name).second) fail("duplicate " + label);
        for (const std::int64_t d : t.shape) {
            if (d < 0)
                fail(label + ": shape " + join_numbers(t.shape) + " has a negative dimension");
        }
        const std::optional<std::uint64_t> bits = total_bits(t.dtype, t.shape);
        if (!bits)
            fail(label + ": " + dtype_shape_text(t.dtype, t.shape) +
                 " is too large: its size overflows 64 bits");
        if (*bits % 8 != 0) {
            fail(label + ": " + dtype_shape_text(t.dtype, t.shape) + " is " +
                 std::to_string(*bits) + " bits, not a whole number of bytes");
        }
        if (t.nbytes != *bits / 8) {
            fail(label + ": data holds " + std::to_string(t.nbytes) + " bytes but " +
                 dtype_shape_text(t.dtype, t.shape) + " needs " + std::to_string(*bits / 8));
        }
        if (t.data == nullptr && t.nbytes > 0) fail(label + ": data is null");
        prepared.order.push_back(&t);
    }

    // ref: safetensors/src/tensor.rs prepare: descending dtype (alignment), then name.
    std::sort(prepared.order.begin(), prepared.order.end(),
              [](const TensorToWrite* a, const TensorToWrite* b) {
                  if (a->dtype != b->dtype) return a->dtype > b->dtype;
                  return a->name < b->name;
              });

    std::string json = "{";
    if (!metadata.empty()) {
        json += "\"__metadata__\":{";
        for (std::size_t i = 0; i < metadata.size(); ++i) {
            if (i > 0) json += ',';
            append_json_string(json, metadata[i].first);
            json += ':';
            append_json_string(json, metadata[i].second);
        }
        json += '}';
    }
    std::uint64_t offset = 0;
    for (const TensorToWrite* t : prepared.order) {
        if (json.size() > 1) json += ',';
        append_json_string(json, t->name);
        json += ":{\"dtype\":\"";
        json += dtype_name(t->dtype);
        json += "\",\"shape\":[";
        for (std::size_t i = 0; i < t->shape.size(); ++i) {
            if (i > 0) json += ',';
            json += std::to_string(t->shape[i]);
        }
        json += "],\"data_offsets\":[" + std::to_string(offset) + ',' +
                std::to_string(offset + t->nbytes) + "]}";
        offset += t->nbytes;
    }
    json += '}';
    // "Force alignment to 8 bytes": pad with spaces, N counts the padding.
    json.append((8 - json.size() % 8) % 8, ' ');

    prepared.header.reserve(8 + json.size());
    append_le64(prepared.header, json.size());
    prepared.header += json;
    prepared.data_size = offset;
    return prepared;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

const char* dtype_name(DType dtype) {
    return dtype_entry(dtype).name;
}

std::optional<DType> dtype_from_name(std::string_view name) {
    for (const DTypeEntry& e : kDTypeTable) {
        if (name == e.name) return e.dtype;
    }
    return std::nullopt;
}

int dtype_bits(DType dtype) {
    return dtype_entry(dtype).bits;
}

std::int64_t TensorInfo::numel() const {
    std::int64_t n = 1;
    for (const std::int64_t d : shape) n *= d;
    return n;
}

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

// ref: safetensors/src/tensor.rs SafeTensors::read_metadata and Metadata::validate, in their
// order, so a file breaking several rules reports the one the reference would.
void SafetensorsFile::validate() {
    const std::string where = path_.string();
    const auto fail = [&](const std::string& message) { throw FormatError(where, message); };

    if (size_ == 0) fail("file is empty; a safetensors file starts with an 8-byte header length");
    if (size_ < 8) {
        fail("file is " + std::to_string(size_) +
             " bytes, too small to hold the 8-byte header length");
    }
    const std::uint64_t n = read_le64(bytes_);
    if (n > kMaxHeaderSize) {
        fail("header length " + std::to_string(n) + " exceeds the limit of " +
             std::to_string(kMaxHeaderSize) + " bytes");
    }
    if (8 + n > size_) {
        fail("header length " + std::to_string(n) + " runs past the end of the file (8 + " +
             std::to_string(n) + " > " + std::to_string(size_) + " bytes)");
    }
    header_size_ = n;
    const std::string_view header(reinterpret_cast<const char*>(bytes_ + 8),
                                  static_cast<std::size_t>(n));
    if (const std::optional<TextPosition> bad = find_invalid_utf8(header)) {
        fail("header is not valid UTF-8 (bad byte at file offset " +
             std::to_string(8 + bad->offset) + ")");
    }
    if (header.empty()) fail("header is empty; it must be a JSON object starting with '{'");
    if (header.front() != '{') {
        fail("header must start with '{', found " + describe_first_byte(header.front()));
    }

    // nlohmann stops at a NUL byte as if the input ended there; in JSON a raw NUL is never valid.
    if (const std::size_t nul = header.find('\0'); nul != std::string_view::npos) {
        fail("header is not valid JSON: NUL byte at file offset " + std::to_string(8 + nul) +
             " (pad headers with spaces)");
    }

    HeaderParser parser;
    const bool parsed = nlohmann::json::sax_parse(header.data(), header.data() + header.size(),
                                                  &parser, nlohmann::json::input_format_t::json,
                                                  /*strict=*/true, /*ignore_comments=*/false);
    if (!parsed) fail(parser.error.empty() ? "header is not valid JSON" : parser.error);
    metadata_ = std::move(parser.metadata);
    std::vector<RawEntry>& entries = parser.entries;

    // "We need to sort by offsets": key order in the JSON does not matter.
    std::vector<std::size_t> order(entries.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        const RawEntry& x = entries[a];
        const RawEntry& y = entries[b];
        if (x.offsets[0] != y.offsets[0]) return x.offsets[0] < y.offsets[0];
        if (x.offsets[1] != y.offsets[1]) return x.offsets[1] < y.offsets[1];
        return x.name < y.name;
    });

    std::uint64_t start = 0;
    const RawEntry* previous = nullptr;
    for (const std::size_t index : order) {
        const RawEntry& e = entries[index];
        const std::uint64_t begin = e.offsets[0];
        const std::uint64_t end = e.offsets[1];
        const std::string label = tensor_label(e.name) + ": ";
        const std::string offsets = "data_offsets " + offsets_text(begin, end);
        if (begin > start) {
            const std::string gap = bytes_text(begin - start);
            if (previous == nullptr) {
                fail(label + offsets + " leave a gap of " + gap +
                     " at the start of the data buffer (the first tensor must begin at 0)");
            }
            fail(label + offsets + " leave a gap of " + gap + " after " +
                 tensor_label(previous->name) + ", which ends at " + std::to_string(start));
        }
        if (begin < start) {
            fail(label + offsets + " overlap " + tensor_label(previous->name) + ", which ends at " +
                 std::to_string(start));
        }
        if (end < begin) fail(label + offsets + " end before they begin");
        start = end;
        previous = &e;

        const std::optional<std::uint64_t> bits = total_bits(e.dtype, e.shape);
        if (!bits) {
            fail(label + dtype_shape_text(e.dtype, e.shape) +
                 " is too large: its size overflows 64 bits");
        }
        if (*bits % 8 != 0) {
            fail(label + dtype_shape_text(e.dtype, e.shape) + " is " + std::to_string(*bits) +
                 " bits, not a whole number of bytes");
        }
        if (end - begin != *bits / 8) {
            fail(label + offsets + " hold " + bytes_text(end - begin) + " but " +
                 dtype_shape_text(e.dtype, e.shape) + " needs " + std::to_string(*bits / 8));
        }
    }

    // "The last offset **must** be the end of the file."
    const std::uint64_t available = size_ - 8 - n;
    if (start < available) {
        fail("file has " + bytes_text(available - start) +
             " trailing after the last tensor (the tensors cover " + std::to_string(start) +
             " of the " + std::to_string(available) + " data bytes)");
    }
    if (start > available) {
        fail("file is truncated: the tensors need " + std::to_string(start) +
             " bytes of data but " + std::to_string(available) + " follow the header");
    }

    tensors_.clear();
    tensors_.reserve(order.size());
    for (const std::size_t index : order) {
        RawEntry& e = entries[index];
        tensors_.push_back(
            TensorInfo{std::move(e.name), e.dtype, std::move(e.shape), e.offsets[0], e.offsets[1]});
    }
    by_name_.resize(tensors_.size());
    std::iota(by_name_.begin(), by_name_.end(), std::size_t{0});
    std::sort(by_name_.begin(), by_name_.end(),
              [&](std::size_t a, std::size_t b) { return tensors_[a].name < tensors_[b].name; });
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

std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const SafetensorsMetadata& metadata) {
    const PreparedFile prepared = prepare(tensors, metadata, "");
    std::string out;
    out.reserve(prepared.header.size() + prepared.data_size);
    out += prepared.header;
    for (const TensorToWrite* t : prepared.order) {
        if (t->nbytes > 0) {
            out.append(static_cast<const char*>(t->data), static_cast<std::size_t>(t->nbytes));
        }
    }
    return out;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const SafetensorsMetadata& metadata) {
    const PreparedFile prepared = prepare(tensors, metadata, path.string());
    AtomicFileWriter out(path);
    out.write(prepared.header);
    for (const TensorToWrite* t : prepared.order) {
        out.write(t->data, static_cast<std::size_t>(t->nbytes));
    }
    out.commit();
}

}  // namespace loom
