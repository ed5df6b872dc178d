#include <algorithm>
#include <unordered_set>

#include "loom/core/error.h"
#include "loom/core/utf8.h"
#include "loom/io/atomic_file.h"
#include "loom/io/safetensors.h"
#include "safetensors_format.h"

namespace loom {

using namespace safetensors_detail;

namespace {

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
