#include "loom/model/loading/weight_files.h"

#include <ATen/ATen.h>

#include <set>
#include <sstream>

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/model/loading/tensor_file.h"

namespace loom {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string join_first(const std::vector<std::string>& items, std::size_t limit) {
    std::string out;
    for (std::size_t i = 0; i < items.size() && i < limit; ++i) out += (i ? ", " : "") + items[i];
    if (items.size() > limit) out += ", ...";
    return out;
}

}  // namespace

std::vector<fs::path> find_weight_files(const fs::path& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw IoError(dir.string(), "component folder does not exist");
    for (const char* index_name :
         {"diffusion_pytorch_model.safetensors.index.json", "model.safetensors.index.json"}) {
        const fs::path index = dir / index_name;
        if (!fs::exists(index, ec)) continue;
        const json j = read_json(index);
        if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
            throw FormatError(index.string(), "'weight_map' is missing");
        }
        std::set<std::string> shards;
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            if (!it.value().is_string()) {
                throw FormatError(index.string(),
                                  "weight_map['" + it.key() + "'] must be a file name");
            }
            shards.insert(it.value().get<std::string>());
        }
        std::vector<fs::path> files;
        for (const std::string& s : shards) {
            if (s.find('/') != std::string::npos || s.find("..") != std::string::npos) {
                throw FormatError(index.string(),
                                  "shard name '" + s + "' must be a plain file name");
            }
            if (!fs::exists(dir / s, ec)) {
                throw IoError((dir / s).string(),
                              "shard listed in " + index.filename().string() + " does not exist");
            }
            files.push_back(dir / s);
        }
        return files;
    }
    for (const char* name :
         {"diffusion_pytorch_model.safetensors", "model.safetensors",
          "diffusion_pytorch_model.fp16.safetensors", "model.fp16.safetensors",
          "diffusion_pytorch_model.bf16.safetensors", "model.bf16.safetensors"}) {
        if (fs::exists(dir / name, ec)) return {dir / name};
    }
    throw IoError(dir.string(),
                  "has no *.safetensors weights (loom reads safetensors only; convert "
                  ".bin/.ckpt weights with diffusers first)");
}

std::size_t load_stored_tensors(torch::nn::Module& module, const std::vector<StoredTensor>& sources,
                                const std::string& what, const std::string& where,
                                const std::string& config, const std::string& base_prefix,
                                const std::map<std::string, std::string>& tied) {
    std::map<std::string, at::Tensor> targets;
    for (const auto& item : module.named_parameters(true)) targets[item.key()] = item.value();
    for (const auto& item : module.named_buffers(true)) targets[item.key()] = item.value();
    // transformers stores this non-persistent buffer in older checkpoints; loom computes it.
    static const std::set<std::string> kIgnored = {"text_model.embeddings.position_ids"};

    std::set<std::string> loaded;
    std::vector<std::string> unexpected;
    std::vector<std::string> mismatched;
    torch::NoGradGuard no_grad;
    for (const StoredTensor& source : sources) {
        auto it = targets.find(source.name);
        if (it == targets.end()) {
            const auto alias = tied.find(source.name);
            if (alias != tied.end()) it = targets.find(alias->second);
        }
        if (it == targets.end() && !base_prefix.empty())
            it = targets.find(base_prefix + source.name);
        if (it == targets.end()) {
            if (!kIgnored.count(source.name) && !kIgnored.count(base_prefix + source.name))
                unexpected.push_back(source.name);
            continue;
        }
        at::Tensor& target = it->second;
        if (target.sizes().vec() != source.shape) {
            std::ostringstream m;
            m << source.name << " (file " << c10::IntArrayRef(source.shape) << ", model "
              << target.sizes() << ")";
            mismatched.push_back(m.str());
            continue;
        }
        target.copy_(source.read());  // casts fp16/bf16 to the module's dtype
        loaded.insert(it->first);
    }
    std::vector<std::string> missing;
    for (const auto& [name, _] : targets) {
        if (!loaded.count(name)) missing.push_back(name);
    }
    if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
        std::string msg = what + " weights do not match the model its " + config + " describes:";
        if (!missing.empty()) {
            msg +=
                " " + std::to_string(missing.size()) + " missing (" + join_first(missing, 3) + ");";
        }
        if (!unexpected.empty()) {
            msg += " " + std::to_string(unexpected.size()) + " unexpected (" +
                   join_first(unexpected, 3) + ");";
        }
        if (!mismatched.empty()) {
            msg += " " + std::to_string(mismatched.size()) + " with other shapes (" +
                   join_first(mismatched, 3) + ");";
        }
        msg += " check that " + config + " and the weights come from the same model";
        throw FormatError(where, msg);
    }
    return loaded.size();
}

std::vector<StoredTensor> stored_tensors_of(const std::shared_ptr<const SafetensorsFile>& file) {
    std::vector<StoredTensor> sources;
    sources.reserve(file->tensors().size());
    for (const TensorInfo& info : file->tensors()) {
        sources.push_back(
            {info.name, info.shape, [file, &info] { return read_tensor(*file, info); }});
    }
    return sources;
}

namespace {

std::vector<StoredTensor> stored_tensors_of_files(const std::vector<fs::path>& files) {
    std::vector<StoredTensor> sources;
    for (const fs::path& path : files) {
        const auto file = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
        for (StoredTensor& s : stored_tensors_of(file)) sources.push_back(std::move(s));
    }
    return sources;
}

}  // namespace

std::vector<StoredTensor> stored_tensors_in(const fs::path& component_dir) {
    return stored_tensors_of_files(find_weight_files(component_dir));
}

std::size_t load_weights(torch::nn::Module& module, const std::vector<fs::path>& files,
                         const std::string& what, const std::string& base_prefix,
                         const std::map<std::string, std::string>& tied) {
    const std::vector<StoredTensor> sources = stored_tensors_of_files(files);
    return load_stored_tensors(module, sources, what,
                               files.empty() ? what : files.front().parent_path().string(),
                               "config.json", base_prefix, tied);
}

void save_weights(const torch::nn::Module& module, const fs::path& file) {
    NamedTensors tensors;
    for (const auto& item : module.named_parameters(true))
        tensors.emplace_back(item.key(), item.value());
    for (const auto& item : module.named_buffers(true))
        tensors.emplace_back(item.key(), item.value());
    write_tensors(file, tensors);
}

}  // namespace loom
