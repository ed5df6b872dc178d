#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_set>
#include <utility>

#include "loom/core/error.h"
#include "loom/core/utf8.h"
#include "loom/io/safetensors.h"
#include "safetensors_format.h"

namespace loom {

using namespace safetensors_detail;

namespace {

// ref: safetensors/src/tensor.rs MAX_HEADER_SIZE
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;
// serde_json's recursion limit; only unknown fields of an entry can nest this deep.
constexpr std::size_t kMaxJsonDepth = 128;

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

}  // namespace

// ---------------------------------------------------------------------------------------------

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

}  // namespace loom
