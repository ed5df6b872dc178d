#include "loom/lora/lora_file.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "loom/core/error.h"
#include "loom/lora/lora_file_names.h"
#include "loom/model/loading/tensor_file.h"

namespace loom {

namespace {

bool starts_with(const std::string& s, const std::string& p) {
    return s.rfind(p, 0) == 0;
}

bool ends_with(const std::string& s, const std::string& x) {
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

std::string first_items(const std::vector<std::string>& items) {
    std::string out;
    for (std::size_t i = 0; i < items.size() && i < 3; ++i) out += (i ? ", " : "") + items[i];
    if (items.size() > 3) out += ", ...";
    return out;
}

std::vector<std::string> keys_of(const NamedTensors& tensors) {
    std::vector<std::string> keys;
    keys.reserve(tensors.size());
    for (const auto& [key, tensor] : tensors) keys.push_back(key);
    return keys;
}

// A UNet file in diffusers' attention-processor layout (lora/lora_file_names.h) with its keys
// renamed to the PEFT layout's "unet.<path>.lora_A.weight" / ".lora_B.weight", as diffusers'
// loader converts it; any other file as it is.
NamedTensors in_peft_names(NamedTensors tensors, const LoRAModel& model) {
    if (!model.has_kohya_keys()) return tensors;
    const std::string prefix = model.file_prefix + ".";
    for (auto& [key, tensor] : tensors) {
        if (!starts_with(key, prefix)) continue;
        for (const auto& [suffix, peft] : {std::pair{".down.weight", ".lora_A.weight"},
                                           std::pair{".up.weight", ".lora_B.weight"}}) {
            if (!ends_with(key, suffix)) continue;
            const std::string stem =
                key.substr(prefix.size(), key.size() - prefix.size() - std::strlen(suffix));
            if (const auto path = unet_module_of_processor_stem(stem)) key = prefix + *path + peft;
            break;
        }
    }
    return tensors;
}

struct LoadedPair {
    at::Tensor down;
    at::Tensor up;
    std::optional<double> alpha;
};

// One module's share of a fused key (lora/lora_file_names.h).
struct PartWeights {
    at::Tensor down;
    at::Tensor up;
    std::optional<double> alpha;  // a kohya file's (one part only)
};

// A fused key's pair split among parts of `ranks` and output rows `outs`: block by block when
// lora_A stacks the parts' downs and lora_B is block-diagonal (as loom writes it), or lora_A
// shared and lora_B's rows split when every part has the key's rank (a LoRA trained on the fused
// Linear); nullopt when neither fits.
std::optional<std::vector<PartWeights>> split_fused(const LoadedPair& pair,
                                                    const std::vector<int64_t>& ranks,
                                                    const std::vector<int64_t>& outs) {
    int64_t total_rank = 0;
    int64_t total_out = 0;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
        total_rank += ranks[i];
        total_out += outs[i];
    }
    if (pair.up.dim() != 2 || pair.up.size(0) != total_out) return std::nullopt;
    const int64_t rank = pair.down.size(0);
    std::vector<PartWeights> parts;
    if (rank == total_rank) {
        bool diagonal = true;
        int64_t row = 0;
        int64_t column = 0;
        for (std::size_t i = 0; i < ranks.size() && diagonal; ++i) {
            const at::Tensor rows = pair.up.narrow(0, row, outs[i]);
            diagonal = rows.narrow(1, 0, column).count_nonzero().item<int64_t>() == 0 &&
                       rows.narrow(1, column + ranks[i], rank - column - ranks[i])
                               .count_nonzero()
                               .item<int64_t>() == 0;
            parts.push_back({pair.down.narrow(0, column, ranks[i]),
                             rows.narrow(1, column, ranks[i]), std::nullopt});
            row += outs[i];
            column += ranks[i];
        }
        if (diagonal) return parts;
    }
    if (std::all_of(ranks.begin(), ranks.end(), [&](int64_t r) { return r == rank; })) {
        parts.clear();
        int64_t row = 0;
        for (int64_t out : outs) {
            parts.push_back({pair.down, pair.up.narrow(0, row, out), std::nullopt});
            row += out;
        }
        return parts;
    }
    return std::nullopt;
}

// The output rows of the Linear at `path` in `model`; 0 when it has no such module.
int64_t out_features(torch::nn::Module& model, const std::string& path) {
    for (const auto& item : model.named_modules("", false)) {
        if (item.key() != path) continue;
        const auto weight = item.value()->named_parameters(false).find("weight");
        return weight ? weight->size(0) : 0;
    }
    return 0;
}

}  // namespace

LoRAFileLayout parse_lora_layout(const std::string& text) {
    if (text == "kohya") return LoRAFileLayout::kKohya;
    if (text == "peft") return LoRAFileLayout::kPeft;
    throw Error("unknown LoRA file layout '" + text + "' (kohya or peft)");
}

namespace {

// One file's tensors and metadata: the network's targets in `targets`.
void save_lora_file(const LoRANetwork& network, const std::vector<const LoRATarget*>& targets,
                    const std::filesystem::path& path, LoRAFileLayout layout, at::ScalarType dtype,
                    SafetensorsMetadata metadata) {
    const LoRAModel& model = network.target_model();
    const std::string prefix = model.file_prefix;
    NamedTensors tensors;
    nlohmann::json names = nlohmann::json::array();
    std::map<int64_t, std::size_t> rank_counts;
    // A fused key's parts (lora/lora_file_names.h), gathered before it is written.
    std::map<std::string, std::vector<const LoRATarget*>> fused;
    for (const LoRATarget* t : targets) {
        const LoRAAdapter& a = *t->adapter;
        ++rank_counts[a.rank()];
        if (layout == LoRAFileLayout::kKohya) {
            const std::string stem = kohya_name(t->path);
            tensors.emplace_back(stem + ".lora_down.weight", a.down.detach().to(dtype));
            tensors.emplace_back(stem + ".lora_up.weight", a.up.detach().to(dtype));
            tensors.emplace_back(stem + ".alpha",
                                 at::scalar_tensor(a.alpha(), at::kFloat).to(dtype));
            continue;
        }
        if (model.has_kohya_keys()) {
            // A UNet's PEFT file in the names both diffusers and ComfyUI read.
            const std::string stem = prefix + "." + unet_processor_stem(t->path);
            tensors.emplace_back(stem + ".down.weight", a.down.detach().to(dtype));
            tensors.emplace_back(stem + ".up.weight", (a.up.detach() * a.scale()).to(dtype));
            names.push_back(t->path);
            continue;
        }
        const LoRAFileSlot slot = lora_file_slot(model, t->path);
        if (slot.parts > 1) {
            auto& parts = fused[slot.stem];
            parts.resize(std::size_t(slot.parts));
            parts[std::size_t(slot.part)] = t;
            continue;
        }
        tensors.emplace_back(slot.stem + ".lora_A.weight", a.down.detach().to(dtype));
        // diffusers applies lora_B @ lora_A with scale 1 when no alpha is given.
        tensors.emplace_back(slot.stem + ".lora_B.weight", (a.up.detach() * a.scale()).to(dtype));
        names.push_back(slot.stem.substr(prefix.size() + 1));
    }
    for (const auto& [stem, parts] : fused) {
        std::vector<at::Tensor> downs;
        std::vector<at::Tensor> ups;
        for (const LoRATarget* t : parts) {
            if (t == nullptr) {
                throw Error("the LoRA file names " + stem.substr(prefix.size() + 1) +
                            " as one fused Linear, but the network trains only some of its "
                            "parts (q, k, v" +
                            std::string(parts.size() == 4 ? ", proj_mlp" : "") +
                            "): target all of them or none");
            }
            downs.push_back(t->adapter->down.detach());
            ups.push_back(t->adapter->up.detach() * t->adapter->scale());
        }
        // Stacked downs and block-diagonal ups: exactly the parts' changes on the fused rows.
        tensors.emplace_back(stem + ".lora_A.weight", at::cat(downs).to(dtype));
        tensors.emplace_back(stem + ".lora_B.weight", at::block_diag(ups).to(dtype));
    }
    metadata.emplace_back("format", "pt");
    // diffusers builds LoraConfig(**metadata) for its own module names under its own component
    // prefix; a file in the original Wan names, or under "diffusion_model." (ai-toolkit's Z-Image
    // layout), is converted by its loader, which reads the ranks from the shapes (scale 1, as
    // alpha is folded into lora_B), as it reads ai-toolkit's — given metadata, diffusers 0.42.1's
    // Z-Image loader fails on it (KeyError 'model_type').
    if (layout == LoRAFileLayout::kPeft &&
        model.module_names == config::LoRAModuleNames::kDiffusers &&
        (prefix == "unet" || prefix == "transformer")) {
        // r is the most common rank, and modules of another rank (3x3 convs with network.conv)
        // need rank_pattern, plus alpha_pattern to keep their scale at 1. "^" anchors the path.
        int64_t rank = 0;
        std::size_t most = 0;
        for (const auto& [r, n] : rank_counts) {
            if (n > most) std::tie(rank, most) = std::tie(r, n);
        }
        nlohmann::json rank_pattern = nlohmann::json::object();
        for (const LoRATarget* t : targets) {
            if (t->adapter->rank() != rank) rank_pattern["^" + t->path] = t->adapter->rank();
        }
        const nlohmann::json adapter = {{prefix + ".r", rank},
                                        {prefix + ".lora_alpha", rank},  // alpha folded into B
                                        {prefix + ".rank_pattern", rank_pattern},
                                        {prefix + ".alpha_pattern", rank_pattern},
                                        {prefix + ".target_modules", names}};
        metadata.emplace_back("lora_adapter_metadata", adapter.dump(2));
    }
    write_tensors(path, tensors, metadata);
}

}  // namespace

std::vector<std::filesystem::path> save_lora(const LoRANetwork& network,
                                             const std::filesystem::path& path,
                                             LoRAFileLayout layout, at::ScalarType dtype,
                                             SafetensorsMetadata metadata) {
    const LoRAModel& model = network.target_model();
    if (layout == LoRAFileLayout::kKohya && !model.has_kohya_keys()) {
        throw Error("a transformer LoRA is saved in the PEFT layout (" + model.file_prefix +
                    ".<module>.lora_A/B), as ai-toolkit saves it; the kohya layout is for SD 1.x "
                    "/ SDXL UNets");
    }
    if (model.blocks.experts.empty()) {
        std::vector<const LoRATarget*> all;
        for (const LoRATarget& t : network.targets()) all.push_back(&t);
        save_lora_file(network, all, path, layout, dtype, std::move(metadata));
        return {path};
    }
    // One file per expert that has a LoRA, its keys without the expert's prefix.
    std::vector<std::filesystem::path> written;
    for (const DenoiserExpert& expert : model.blocks.experts) {
        std::vector<const LoRATarget*> mine;
        for (const LoRATarget& t : network.targets()) {
            if (model.blocks.expert_of(t.path) == &expert) mine.push_back(&t);
        }
        if (mine.empty()) continue;
        written.push_back(expert_file(path, expert));
        save_lora_file(network, mine, written.back(), layout, dtype, metadata);
    }
    return written;
}

LoRANetwork load_lora_network(torch::nn::Module& model, const std::filesystem::path& given,
                              const LoRAModel& target_model) {
    const bool unet = target_model.has_kohya_keys();
    std::map<std::string, std::string> by_kohya;  // kohya stem -> module path
    for (const auto& item : model.named_modules("", false))
        by_kohya[kohya_name(item.key())] = item.key();
    std::map<std::string, LoRAOptions> per_module;
    const auto files = lora_files_of(target_model, given);
    for (const auto& [path, expert] : files) {
        const NamedTensors tensors = in_peft_names(read_all_tensors(path), target_model);
        const LoRAModel naming = lora_model_reading(target_model, keys_of(tensors));
        const std::string peft_prefix = naming.file_prefix + ".";
        for (const auto& [key, tensor] : tensors) {
            for (const char* suffix :
                 {".lora_down.weight", ".lora_A.weight", ".lora.down.weight"}) {
                if (!ends_with(key, suffix)) continue;
                const std::string stem = key.substr(0, key.size() - std::strlen(suffix));
                std::string module_path;
                if (unet && starts_with(stem, "lora_unet_")) {
                    auto it = by_kohya.find(stem);
                    if (it == by_kohya.end()) {
                        throw FormatError(path.string(),
                                          "'" + key + "' names no module of this model");
                    }
                    module_path = it->second;
                } else if (const auto named = module_paths_of(naming, stem, expert);
                           named.size() > 1) {
                    // A fused key: each part's rank from how its lora_B splits.
                    const auto up = std::find_if(tensors.begin(), tensors.end(), [&](auto& t) {
                        return t.first == stem + ".lora_B.weight";
                    });
                    std::vector<int64_t> outs;
                    for (const std::string& p : named) outs.push_back(out_features(model, p));
                    const int64_t rank = tensor.size(0);
                    const auto parts = named.size();
                    std::optional<std::vector<PartWeights>> split;
                    if (up != tensors.end() && rank % int64_t(parts) == 0) {
                        split =
                            split_fused({tensor, up->second, std::nullopt},
                                        std::vector<int64_t>(parts, rank / int64_t(parts)), outs);
                    }
                    for (const std::string& p : named) {
                        LoRAOptions o;
                        o.rank = split && split->front().down.size(0) != rank
                                     ? rank / int64_t(parts)
                                     : rank;
                        o.alpha = static_cast<double>(o.rank);
                        per_module[p] = o;
                    }
                    continue;
                } else if (named.size() == 1) {
                    module_path = named.front();
                } else if (unet) {
                    throw FormatError(path.string(), "'" + key +
                                                         "' is neither a kohya (lora_unet_...) "
                                                         "nor a PEFT (unet....) UNet LoRA key");
                } else {
                    throw FormatError(path.string(), "'" + key +
                                                         "' is not a transformer LoRA key (" +
                                                         peft_prefix + "<module>.lora_A.weight)");
                }
                LoRAOptions o;
                o.rank = tensor.size(0);
                o.alpha = static_cast<double>(o.rank);
                per_module[module_path] = o;
            }
        }
        for (const auto& [key, tensor] : tensors) {
            if (!ends_with(key, ".alpha")) continue;
            auto it = by_kohya.find(key.substr(0, key.size() - 6));
            if (it != by_kohya.end() && per_module.count(it->second)) {
                per_module[it->second].alpha = tensor.item<double>();
            }
        }
    }
    if (per_module.empty()) {
        throw FormatError(given.string(), unet ? "holds no UNet LoRA weights"
                                               : "holds no transformer LoRA weights");
    }
    LoRANetwork network = LoRANetwork::attach_at(model, per_module, target_model);
    load_lora(network, given);
    return network;
}

namespace {

// One file into the adapters of `targets` (the network's, or one expert's).
void load_lora_file(const LoRANetwork& network, const std::vector<const LoRATarget*>& targets,
                    const std::filesystem::path& path, LoRALoadReport& report) {
    const NamedTensors tensors = in_peft_names(read_all_tensors(path), network.target_model());
    const LoRAModel model = lora_model_reading(network.target_model(), keys_of(tensors));
    const bool kohya =
        model.has_kohya_keys() && std::any_of(tensors.begin(), tensors.end(), [](const auto& t) {
            return starts_with(t.first, "lora_unet_");
        });
    report.layout = kohya ? LoRAFileLayout::kKohya : LoRAFileLayout::kPeft;

    // Module path by the name the file uses for it. kohya names replace '.' with '_', so they are
    // looked up in a table built from the network's own paths, never split on '_'.
    // A stem's targets in part order: one, or a fused key's parts.
    std::map<std::string, std::vector<const LoRATarget*>> by_file_name;
    for (const LoRATarget* t : targets) {
        if (kohya) {
            by_file_name[kohya_name(t->path)] = {t};
            continue;
        }
        const LoRAFileSlot slot = lora_file_slot(model, t->path);
        auto& parts = by_file_name[slot.stem];
        parts.resize(std::size_t(slot.parts));
        parts[std::size_t(slot.part)] = t;
    }
    std::map<std::string, LoadedPair> pairs;
    std::vector<std::string> unknown;
    for (const auto& [key, tensor] : tensors) {
        std::string stem;
        int part = -1;  // 0 down, 1 up, 2 alpha
        for (const auto& [suffix, p] :
             std::vector<std::pair<std::string, int>>{{".lora_down.weight", 0},
                                                      {".lora_up.weight", 1},
                                                      {".alpha", 2},
                                                      {".lora_A.weight", 0},
                                                      {".lora_B.weight", 1},
                                                      {".lora.down.weight", 0},
                                                      {".lora.up.weight", 1}}) {
            if (ends_with(key, suffix)) {
                stem = key.substr(0, key.size() - suffix.size());
                part = p;
                break;
            }
        }
        if (part < 0 || !by_file_name.count(stem)) {
            unknown.push_back(key);
            continue;
        }
        LoadedPair& pair = pairs[stem];
        if (part == 0) pair.down = tensor;
        if (part == 1) pair.up = tensor;
        if (part == 2) pair.alpha = tensor.item<double>();
    }
    std::vector<std::string> missing;
    std::vector<std::string> mismatched;
    // Each target's weights from the file, in the adapters' shapes.
    std::vector<std::pair<const LoRATarget*, PartWeights>> weights;
    for (const auto& [stem, parts] : by_file_name) {
        auto it = pairs.find(stem);
        if (it == pairs.end() || !it->second.down.defined() || !it->second.up.defined()) {
            missing.push_back(stem);
            continue;
        }
        std::vector<PartWeights> split;
        if (std::find(parts.begin(), parts.end(), nullptr) != parts.end()) {
            mismatched.push_back(stem + " (the network trains only some of its fused parts)");
            continue;
        }
        if (parts.size() == 1) {
            split.push_back({it->second.down, it->second.up, it->second.alpha});
        } else {
            std::vector<int64_t> ranks;
            std::vector<int64_t> outs;
            for (const LoRATarget* t : parts) {
                ranks.push_back(t->adapter->rank());
                outs.push_back(t->adapter->up.size(0));
            }
            if (auto s = split_fused(it->second, ranks, outs)) split = std::move(*s);
        }
        bool fits = split.size() == parts.size();
        for (std::size_t i = 0; fits && i < parts.size(); ++i) {
            const LoRAAdapter& a = *parts[i]->adapter;
            fits = split[i].down.sizes() == a.down.sizes() && split[i].up.sizes() == a.up.sizes();
        }
        if (!fits) {
            std::ostringstream m;
            m << stem << " (file rank " << it->second.down.size(0) << ", network rank "
              << parts.front()->adapter->rank() << (parts.size() > 1 ? " per fused part" : "")
              << ")";
            mismatched.push_back(m.str());
            continue;
        }
        for (std::size_t i = 0; i < parts.size(); ++i) weights.emplace_back(parts[i], split[i]);
    }
    if (!unknown.empty() || !missing.empty() || !mismatched.empty()) {
        std::ostringstream msg;
        msg << "LoRA does not match the network:";
        if (!unknown.empty()) {
            msg << " " << unknown.size() << " unknown keys (" << first_items(unknown) << ");";
        }
        if (!missing.empty()) {
            msg << " " << missing.size() << " modules missing (" << first_items(missing) << ");";
        }
        if (!mismatched.empty()) {
            msg << " " << mismatched.size() << " with another rank (" << first_items(mismatched)
                << ");";
        }
        msg << " was it trained for this model with the same network settings?";
        throw FormatError(path.string(), msg.str());
    }
    torch::NoGradGuard no_grad;
    for (const auto& [target, w] : weights) {
        LoRAAdapter& a = *target->adapter;
        a.down.copy_(w.down);
        // The file's effective scale is alpha/rank (kohya) or 1 (PEFT, alpha folded): express it
        // in this adapter's alpha.
        const double file_scale =
            kohya ? w.alpha.value_or(static_cast<double>(a.rank())) / a.rank() : 1.0;
        a.up.copy_(w.up.to(at::kFloat) * (file_scale / a.scale()));
        ++report.loaded;
    }
}

}  // namespace

LoRALoadReport load_lora(LoRANetwork& network, const std::filesystem::path& path) {
    LoRALoadReport report;
    const LoRAModel& model = network.target_model();
    if (model.blocks.experts.empty()) {
        std::vector<const LoRATarget*> all;
        for (const LoRATarget& t : network.targets()) all.push_back(&t);
        load_lora_file(network, all, path, report);
        return report;
    }
    // Each expert with a LoRA from its own file beside `path`.
    const auto files = lora_files_of(model, path);
    for (const DenoiserExpert& expert : model.blocks.experts) {
        std::vector<const LoRATarget*> mine;
        for (const LoRATarget& t : network.targets()) {
            if (model.blocks.expert_of(t.path) == &expert) mine.push_back(&t);
        }
        if (mine.empty()) continue;
        const auto file = std::find_if(files.begin(), files.end(),
                                       [&](const auto& f) { return f.second == &expert; });
        if (file == files.end()) {
            throw IoError(expert_file(path, expert).string(),
                          "does not exist: the network trains this expert, so its LoRA is this "
                          "file beside " +
                              path.filename().string());
        }
        load_lora_file(network, mine, file->first, report);
    }
    return report;
}

}  // namespace loom
