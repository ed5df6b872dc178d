#include "loom/lora/lora_file_names.h"

#include <array>
#include <utility>

#include "loom/core/error.h"

namespace loom {

namespace {

// A block's Linears: diffusers' name and the original checkpoint's, after "blocks.N.".
constexpr std::array<std::pair<const char*, const char*>, 12> kWanBlockNames = {{
    {"attn1.to_q", "self_attn.q"},
    {"attn1.to_k", "self_attn.k"},
    {"attn1.to_v", "self_attn.v"},
    {"attn1.to_out.0", "self_attn.o"},
    {"attn2.to_q", "cross_attn.q"},
    {"attn2.to_k", "cross_attn.k"},
    {"attn2.to_v", "cross_attn.v"},
    {"attn2.to_out.0", "cross_attn.o"},
    {"attn2.add_k_proj", "cross_attn.k_img"},
    {"attn2.add_v_proj", "cross_attn.v_img"},
    {"ffn.net.0.proj", "ffn.0"},
    {"ffn.net.2", "ffn.2"},
}};

bool starts_with(const std::string& s, const std::string& p) {
    return s.compare(0, p.size(), p) == 0;
}

// "blocks.N." of a path, or "" when it is not inside a block.
std::string block_of(const std::string& path) {
    if (!starts_with(path, "blocks.")) return "";
    const std::size_t dot = path.find('.', 7);
    if (dot == std::string::npos || dot == 7) return "";
    for (std::size_t i = 7; i < dot; ++i) {
        if (path[i] < '0' || path[i] > '9') return "";
    }
    return path.substr(0, dot + 1);
}

std::string renamed(const std::string& path, bool to_original) {
    const std::string block = block_of(path);
    if (!block.empty()) {
        const std::string rest = path.substr(block.size());
        for (const auto& [diffusers, original] : kWanBlockNames) {
            if (rest == (to_original ? diffusers : original))
                return block + (to_original ? original : diffusers);
        }
    }
    throw Error("'" + path + "' has no " + (to_original ? "original Wan" : "diffusers") +
                " name: only the attention and feed-forward Linears of a Wan block do");
}

std::string file_name_of(const LoRAModel& model, const std::string& path) {
    switch (model.module_names) {
        case config::LoRAModuleNames::kWanOriginal: return wan_original_name(path);
        case config::LoRAModuleNames::kDiffusers: break;
    }
    return path;
}

const std::string kExtension = ".safetensors";

// dir/name.safetensors -> (dir/name, ".safetensors"); another extension stays in the stem.
std::pair<std::string, std::string> split_extension(const std::filesystem::path& path) {
    const std::string s = path.string();
    if (s.size() > kExtension.size() &&
        s.compare(s.size() - kExtension.size(), kExtension.size(), kExtension) == 0) {
        return {s.substr(0, s.size() - kExtension.size()), kExtension};
    }
    return {s, ""};
}

}  // namespace

std::string wan_original_name(const std::string& diffusers_path) {
    return renamed(diffusers_path, true);
}

std::string wan_diffusers_name(const std::string& original_path) {
    return renamed(original_path, false);
}

std::string lora_key_stem(const LoRAModel& model, const std::string& module_path) {
    std::string path = module_path;
    if (const DenoiserExpert* e = model.blocks.expert_of(path))
        path.erase(0, e->module_prefix.size());
    return model.file_prefix + "." + file_name_of(model, path);
}

std::optional<std::string> module_path_of(const LoRAModel& model, const std::string& stem,
                                          const DenoiserExpert* expert) {
    const std::string prefix = model.file_prefix + ".";
    if (!starts_with(stem, prefix)) return std::nullopt;
    std::string path = stem.substr(prefix.size());
    if (model.module_names == config::LoRAModuleNames::kWanOriginal) {
        try {
            path = wan_diffusers_name(path);
        } catch (const Error&) {
            return std::nullopt;
        }
    }
    return expert ? expert->module_prefix + path : path;
}

std::filesystem::path expert_file(const std::filesystem::path& path, const DenoiserExpert& expert) {
    const auto [stem, extension] = split_extension(path);
    return stem + expert.file_suffix + (extension.empty() ? kExtension : extension);
}

const DenoiserExpert* expert_of_file(const LoRAModel& model, const std::filesystem::path& path) {
    const std::string stem = split_extension(path).first;
    for (const DenoiserExpert& e : model.blocks.experts) {
        if (stem.size() > e.file_suffix.size() &&
            stem.compare(stem.size() - e.file_suffix.size(), e.file_suffix.size(), e.file_suffix) ==
                0) {
            return &e;
        }
    }
    return nullptr;
}

std::vector<std::pair<std::filesystem::path, const DenoiserExpert*>> lora_files_of(
    const LoRAModel& model, const std::filesystem::path& path) {
    if (model.blocks.experts.empty()) return {{path, nullptr}};
    // The run's path: the given one without its expert's suffix.
    std::filesystem::path base = path;
    if (const DenoiserExpert* given = expert_of_file(model, path)) {
        const auto [stem, extension] = split_extension(path);
        base = stem.substr(0, stem.size() - given->file_suffix.size()) + extension;
    }
    std::vector<std::pair<std::filesystem::path, const DenoiserExpert*>> files;
    for (const DenoiserExpert& e : model.blocks.experts) {
        const std::filesystem::path file = expert_file(base, e);
        std::error_code ec;
        if (std::filesystem::exists(file, ec)) files.emplace_back(file, &e);
    }
    if (files.empty()) {
        std::string names;
        for (const DenoiserExpert& e : model.blocks.experts) {
            names += (names.empty() ? "" : " or ") + expert_file(base, e).filename().string();
        }
        throw IoError(path.string(), "is not one of an expert pair: neither " + names +
                                         " exists beside it (a Wan 2.2 LoRA is one file per "
                                         "expert)");
    }
    return files;
}

}  // namespace loom
