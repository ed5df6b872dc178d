#include "loom/model/loading/model_fingerprint.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/sha256.h"
#include "loom/io/safetensors.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

bool has_extension(const fs::path& p, const char* ext) {
    return p.extension() == ext;
}

std::string read_text(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw IoError(file.string(), "cannot read it (model fingerprint)");
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

// "name|F32|320,4,3,3\n" per tensor, by name: what the weights' memory depends on.
std::string header_summary(const fs::path& file) {
    const SafetensorsFile st = SafetensorsFile::open(file);
    std::vector<const TensorInfo*> tensors;
    for (const TensorInfo& t : st.tensors()) tensors.push_back(&t);
    std::sort(tensors.begin(), tensors.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->name < b->name; });
    std::string out;
    for (const TensorInfo* t : tensors) {
        out += t->name;
        out += '|';
        out += dtype_name(t->dtype);
        out += '|';
        for (std::size_t i = 0; i < t->shape.size(); ++i) {
            if (i > 0) out += ',';
            out += std::to_string(t->shape[i]);
        }
        out += '\n';
    }
    return out;
}

}  // namespace

std::string model_fingerprint(const fs::path& model) {
    std::error_code ec;
    if (!fs::exists(model, ec)) {
        throw IoError(model.string(), "no such model folder or file (model.name_or_path)");
    }
    Sha256 sha;
    if (!fs::is_directory(model, ec)) {
        sha.update(header_summary(model));
    } else {
        std::vector<fs::path> files;
        for (const auto& entry : fs::recursive_directory_iterator(model)) {
            if (!entry.is_regular_file()) continue;
            if (has_extension(entry.path(), ".json") || has_extension(entry.path(), ".safetensors"))
                files.push_back(entry.path().lexically_relative(model));
        }
        std::sort(files.begin(), files.end());
        for (const fs::path& relative : files) {
            const fs::path file = model / relative;
            sha.update(relative.generic_string());
            sha.update(std::string(1, '\0'));
            sha.update(has_extension(file, ".json") ? read_text(file) : header_summary(file));
            sha.update(std::string(1, '\0'));
        }
    }
    return sha.finish_hex();
}

}  // namespace loom
