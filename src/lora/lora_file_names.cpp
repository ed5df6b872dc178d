#include "loom/lora/lora_file_names.h"

#include <array>
#include <cstring>
#include <tuple>
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

// One Linear of a Flux block under Black Forest Labs' names: the fused Linear it is part of
// (q, k and v are one "qkv"; a single block's q, k, v and MLP input one "linear1") and which
// rows of that Linear's output it is.
struct FluxOriginalName {
    const char* diffusers;
    const char* original;
    int part;
    int parts;
};

// After "transformer_blocks.N." / "double_blocks.N.".
constexpr std::array<FluxOriginalName, 14> kFluxDoubleNames = {{
    {"attn.to_q", "img_attn.qkv", 0, 3},
    {"attn.to_k", "img_attn.qkv", 1, 3},
    {"attn.to_v", "img_attn.qkv", 2, 3},
    {"attn.add_q_proj", "txt_attn.qkv", 0, 3},
    {"attn.add_k_proj", "txt_attn.qkv", 1, 3},
    {"attn.add_v_proj", "txt_attn.qkv", 2, 3},
    {"attn.to_out.0", "img_attn.proj", 0, 1},
    {"attn.to_add_out", "txt_attn.proj", 0, 1},
    {"ff.net.0.proj", "img_mlp.0", 0, 1},
    {"ff.net.2", "img_mlp.2", 0, 1},
    {"ff_context.net.0.proj", "txt_mlp.0", 0, 1},
    {"ff_context.net.2", "txt_mlp.2", 0, 1},
    {"norm1.linear", "img_mod.lin", 0, 1},
    {"norm1_context.linear", "txt_mod.lin", 0, 1},
}};
// After "single_transformer_blocks.N." / "single_blocks.N.".
constexpr std::array<FluxOriginalName, 6> kFluxSingleNames = {{
    {"attn.to_q", "linear1", 0, 4},
    {"attn.to_k", "linear1", 1, 4},
    {"attn.to_v", "linear1", 2, 4},
    {"proj_mlp", "linear1", 3, 4},
    {"proj_out", "linear2", 0, 1},
    {"norm.linear", "modulation.lin", 0, 1},
}};

bool starts_with(const std::string& s, const std::string& p) {
    return s.compare(0, p.size(), p) == 0;
}

// "<kind>N." of a path ("blocks.3."), or "" when it is not inside a block of that kind.
std::string block_of(const std::string& path, const std::string& kind = "blocks.") {
    if (!starts_with(path, kind)) return "";
    const std::size_t first = kind.size();
    const std::size_t dot = path.find('.', first);
    if (dot == std::string::npos || dot == first) return "";
    for (std::size_t i = first; i < dot; ++i) {
        if (path[i] < '0' || path[i] > '9') return "";
    }
    return path.substr(0, dot + 1);
}

// The slot of a diffusers Flux path under BFL's names; nullopt outside the blocks' Linears.
std::optional<LoRAFileSlot> flux_original_slot(const std::string& path) {
    for (const auto& [kind, original_kind, table, count] :
         {std::make_tuple("transformer_blocks.", "double_blocks.", kFluxDoubleNames.data(),
                          kFluxDoubleNames.size()),
          std::make_tuple("single_transformer_blocks.", "single_blocks.", kFluxSingleNames.data(),
                          kFluxSingleNames.size())}) {
        const std::string block = block_of(path, kind);
        if (block.empty()) continue;
        const std::string rest = path.substr(block.size());
        const std::string index = block.substr(std::string(kind).size());
        for (std::size_t i = 0; i < count; ++i) {
            if (rest == table[i].diffusers) {
                return LoRAFileSlot{original_kind + index + table[i].original, table[i].part,
                                    table[i].parts};
            }
        }
    }
    return std::nullopt;
}

// The diffusers paths of a BFL Flux name, in part order; empty when it names none.
std::vector<std::string> flux_original_paths(const std::string& original) {
    std::vector<std::string> out;
    for (const auto& [kind, original_kind, table, count] :
         {std::make_tuple("transformer_blocks.", "double_blocks.", kFluxDoubleNames.data(),
                          kFluxDoubleNames.size()),
          std::make_tuple("single_transformer_blocks.", "single_blocks.", kFluxSingleNames.data(),
                          kFluxSingleNames.size())}) {
        const std::string block = block_of(original, original_kind);
        if (block.empty()) continue;
        const std::string rest = original.substr(block.size());
        const std::string index = block.substr(std::string(original_kind).size());
        for (std::size_t i = 0; i < count; ++i) {
            if (rest == table[i].original) out.push_back(kind + index + table[i].diffusers);
        }
    }
    return out;
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

LoRAFileSlot file_slot_of(const LoRAModel& model, const std::string& path) {
    switch (model.module_names) {
        case config::LoRAModuleNames::kWanOriginal: return {wan_original_name(path)};
        case config::LoRAModuleNames::kFluxOriginal: return flux_original_slot(path).value();
        case config::LoRAModuleNames::kDiffusers: break;
    }
    return {path};
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

bool ends_with(const std::string& s, const std::string& x) {
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

// The attention projections diffusers' processor names cover, as they end a module path.
constexpr std::array<std::pair<const char*, const char*>, 4> kProcessorProjections = {{
    {".to_q", ".processor.to_q"},
    {".to_k", ".processor.to_k"},
    {".to_v", ".processor.to_v"},
    {".to_out.0", ".processor.to_out"},
}};

}  // namespace

std::string unet_processor_stem(const std::string& module_path) {
    for (const auto& [path_end, stem_end] : kProcessorProjections) {
        if (ends_with(module_path, path_end)) {
            return module_path.substr(0, module_path.size() - std::strlen(path_end)) + stem_end +
                   "_lora";
        }
    }
    return module_path + ".lora";
}

std::optional<std::string> unet_module_of_processor_stem(const std::string& stem) {
    for (const auto& [path_end, stem_end] : kProcessorProjections) {
        const std::string end = std::string(stem_end) + "_lora";
        if (ends_with(stem, end)) return stem.substr(0, stem.size() - end.size()) + path_end;
    }
    const std::string lora = ".lora";
    if (ends_with(stem, lora) && stem.size() > lora.size()) {
        return stem.substr(0, stem.size() - lora.size());
    }
    return std::nullopt;
}

std::string wan_original_name(const std::string& diffusers_path) {
    return renamed(diffusers_path, true);
}

std::string wan_diffusers_name(const std::string& original_path) {
    return renamed(original_path, false);
}

std::optional<LoRAFileSlot> flux_original_name(const std::string& diffusers_path) {
    return flux_original_slot(diffusers_path);
}

std::vector<std::string> flux_diffusers_names(const std::string& original_path) {
    return flux_original_paths(original_path);
}

LoRAFileSlot lora_file_slot(const LoRAModel& model, const std::string& module_path) {
    std::string path = module_path;
    if (const DenoiserExpert* e = model.blocks.expert_of(path))
        path.erase(0, e->module_prefix.size());
    if (model.module_names == config::LoRAModuleNames::kFluxOriginal && !flux_original_slot(path)) {
        throw Error("'" + module_path +
                    "' has no name in a Black Forest Labs Flux LoRA: only the Linears of the "
                    "double and single blocks do (target those with network.only_if_contains)");
    }
    LoRAFileSlot slot = file_slot_of(model, path);
    slot.stem = model.file_prefix + "." + slot.stem;
    return slot;
}

std::string lora_key_stem(const LoRAModel& model, const std::string& module_path) {
    return lora_file_slot(model, module_path).stem;
}

std::vector<std::string> module_paths_of(const LoRAModel& model, const std::string& stem,
                                         const DenoiserExpert* expert) {
    const std::string prefix = model.file_prefix + ".";
    if (!starts_with(stem, prefix)) return {};
    std::vector<std::string> paths{stem.substr(prefix.size())};
    switch (model.module_names) {
        case config::LoRAModuleNames::kWanOriginal:
            try {
                paths = {wan_diffusers_name(paths.front())};
            } catch (const Error&) {
                return {};
            }
            break;
        case config::LoRAModuleNames::kFluxOriginal:
            paths = flux_original_paths(paths.front());
            break;
        case config::LoRAModuleNames::kDiffusers: break;
    }
    if (expert) {
        for (std::string& p : paths) p = expert->module_prefix + p;
    }
    return paths;
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
