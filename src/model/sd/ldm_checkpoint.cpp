#include "ldm_checkpoint.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <utility>

#include "loom/core/error.h"
#include "loom/io/safetensors.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/loading/weight_files.h"

namespace loom::ldm {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
    return s.compare(0, prefix.size(), prefix) == 0;
}

bool has(const SafetensorsFile& f, const std::string& name) {
    return f.find(name) != nullptr;
}

bool has_prefix(const SafetensorsFile& f, const std::string& prefix) {
    return std::any_of(f.tensors().begin(), f.tensors().end(),
                       [&](const TensorInfo& t) { return starts_with(t.name, prefix); });
}

[[noreturn]] void fail(const SafetensorsFile& f, const std::string& message) {
    throw FormatError(f.path().string(), message);
}

const std::vector<int64_t>& shape_of(const SafetensorsFile& f, const std::string& name) {
    const TensorInfo* info = f.find(name);
    if (info == nullptr) {
        fail(f, "has no tensor " + name +
                    ", which a Stable Diffusion checkpoint of this kind holds; the file is "
                    "incomplete or of another model");
    }
    return info->shape;
}

int64_t dim(const SafetensorsFile& f, const std::string& name, std::size_t axis) {
    const auto& shape = shape_of(f, name);
    if (shape.size() <= axis) fail(f, "tensor " + name + " has too few dimensions");
    return shape[axis];
}

// One more than the largest N of the tensors named "<prefix>N.…"; 0 when there is none.
int64_t count_indexed(const SafetensorsFile& f, const std::string& prefix) {
    int64_t count = 0;
    for (const TensorInfo& t : f.tensors()) {
        if (!starts_with(t.name, prefix)) continue;
        std::size_t end = prefix.size();
        while (end < t.name.size() && std::isdigit(static_cast<unsigned char>(t.name[end]))) ++end;
        if (end == prefix.size() || end >= t.name.size() || t.name[end] != '.') continue;
        count = std::max<int64_t>(count, std::stoll(t.name.substr(prefix.size())) + 1);
    }
    return count;
}

// "<head>N.rest" -> N and rest; false when `name` is not of that form.
bool take_index(const std::string& name, const std::string& head, int64_t& n, std::string& rest) {
    if (!starts_with(name, head)) return false;
    std::size_t end = head.size();
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    if (end == head.size() || end >= name.size() || name[end] != '.') return false;
    n = std::stoll(name.substr(head.size(), end - head.size()));
    rest = name.substr(end + 1);
    return true;
}

// Replaces the first of `parts` that `rest` starts with.
std::string rename_head(const std::string& rest,
                        const std::vector<std::pair<const char*, const char*>>& parts) {
    for (const auto& [from, to] : parts) {
        if (starts_with(rest, from)) return to + rest.substr(std::string(from).size());
    }
    return rest;
}

std::string unet_resnet(const std::string& rest) {
    return rename_head(rest, {{"in_layers.0.", "norm1."},
                              {"in_layers.2.", "conv1."},
                              {"out_layers.0.", "norm2."},
                              {"out_layers.3.", "conv2."},
                              {"emb_layers.1.", "time_emb_proj."},
                              {"skip_connection.", "conv_shortcut."}});
}

// A UNet tensor's diffusers name; `per_level` is layers_per_block + 1 (the resnets and the
// down/upsampler of one level). Names of no known place come back unchanged, so that loading
// reports them as unexpected.
std::string unet_name(const std::string& name, int64_t per_level) {
    static const std::vector<std::pair<const char*, const char*>> kTop = {
        {"time_embed.0.", "time_embedding.linear_1."},
        {"time_embed.2.", "time_embedding.linear_2."},
        {"label_emb.0.0.", "add_embedding.linear_1."},
        {"label_emb.0.2.", "add_embedding.linear_2."},
        {"input_blocks.0.0.", "conv_in."},
        {"out.0.", "conv_norm_out."},
        {"out.2.", "conv_out."}};
    const std::string top = rename_head(name, kTop);
    if (top != name) return top;
    int64_t n = 0, k = 0;
    std::string rest, inner;
    if (take_index(name, "input_blocks.", n, rest) && n >= 1 && take_index(rest, "", k, inner)) {
        const std::string block = "down_blocks." + std::to_string((n - 1) / per_level) + ".";
        const std::string layer = std::to_string((n - 1) % per_level) + ".";
        if (k == 0 && starts_with(inner, "op.")) {
            return block + "downsamplers.0.conv." + inner.substr(3);
        }
        if (k == 0) return block + "resnets." + layer + unet_resnet(inner);
        if (k == 1) return block + "attentions." + layer + inner;
    }
    if (take_index(name, "middle_block.", n, rest)) {
        if (n == 0) return "mid_block.resnets.0." + unet_resnet(rest);
        if (n == 1) return "mid_block.attentions.0." + rest;
        if (n == 2) return "mid_block.resnets.1." + unet_resnet(rest);
    }
    if (take_index(name, "output_blocks.", n, rest) && take_index(rest, "", k, inner)) {
        const std::string block = "up_blocks." + std::to_string(n / per_level) + ".";
        const std::string layer = std::to_string(n % per_level) + ".";
        if ((k == 1 || k == 2) && starts_with(inner, "conv.")) {
            return block + "upsamplers.0.conv." + inner.substr(5);
        }
        if (k == 0) return block + "resnets." + layer + unet_resnet(inner);
        if (k == 1) return block + "attentions." + layer + inner;
    }
    return name;
}

std::string vae_shortcut(const std::string& rest) {
    return rename_head(rest, {{"nin_shortcut.", "conv_shortcut."}});
}

// A VAE tensor's diffusers name (`levels` down/up blocks: the original decoder numbers its
// levels from the bottom), and whether it is an attention projection held as a 1x1 conv.
std::pair<std::string, bool> vae_name(const std::string& name, int64_t levels) {
    for (const char* side : {"encoder.", "decoder."}) {
        if (!starts_with(name, side)) continue;
        const std::string s = side;
        const std::string rest = name.substr(s.size());
        int64_t i = 0, j = 0;
        std::string tail, inner;
        if (starts_with(rest, "norm_out.")) return {s + "conv_norm_out." + rest.substr(9), false};
        if (take_index(rest, "down.", i, tail)) {
            const std::string block = s + "down_blocks." + std::to_string(i) + ".";
            if (take_index(tail, "block.", j, inner)) {
                return {block + "resnets." + std::to_string(j) + "." + vae_shortcut(inner), false};
            }
            if (starts_with(tail, "downsample.")) {
                return {block + "downsamplers.0." + tail.substr(11), false};
            }
        }
        if (take_index(rest, "up.", i, tail)) {
            const std::string block = s + "up_blocks." + std::to_string(levels - 1 - i) + ".";
            if (take_index(tail, "block.", j, inner)) {
                return {block + "resnets." + std::to_string(j) + "." + vae_shortcut(inner), false};
            }
            if (starts_with(tail, "upsample.")) {
                return {block + "upsamplers.0." + tail.substr(9), false};
            }
        }
        if (starts_with(rest, "mid.block_1.")) {
            return {s + "mid_block.resnets.0." + vae_shortcut(rest.substr(12)), false};
        }
        if (starts_with(rest, "mid.block_2.")) {
            return {s + "mid_block.resnets.1." + vae_shortcut(rest.substr(12)), false};
        }
        if (starts_with(rest, "mid.attn_1.")) {
            const std::string attn = rename_head(rest.substr(11), {{"norm.", "group_norm."},
                                                                   {"q.", "to_q."},
                                                                   {"k.", "to_k."},
                                                                   {"v.", "to_v."},
                                                                   {"proj_out.", "to_out.0."}});
            return {s + "mid_block.attentions.0." + attn, !starts_with(attn, "group_norm.")};
        }
    }
    return {name, false};
}

StoredTensor renamed(const File& file, const TensorInfo& info, std::string name) {
    return {std::move(name), info.shape, [file, &info] { return read_tensor(*file, info); }};
}

int64_t heads_of_64_channels(const SafetensorsFile& f, int64_t channels, const std::string& what) {
    if (channels % 64 != 0) {
        fail(f, what + " has " + std::to_string(channels) +
                    " channels, not a multiple of the 64-channel heads its kind of checkpoint "
                    "uses; loom cannot tell its attention heads from the file");
    }
    return channels / 64;
}

}  // namespace

config::Arch detect_arch(const SafetensorsFile& f) {
    const std::string unet = kUNet;
    if (!has(f, unet + "input_blocks.0.0.weight")) {
        std::string instead;
        const bool lora = std::any_of(f.tensors().begin(), f.tensors().end(), [](const auto& t) {
            return t.name.find("lora_") != std::string::npos ||
                   t.name.find(".lora.") != std::string::npos;
        });
        if (lora) {
            instead = "; it holds a LoRA, not a base model";
        } else if (has_prefix(f, unet + "double_blocks.") || has_prefix(f, "double_blocks.")) {
            instead = "; it looks like a Flux checkpoint, which loom reads as a diffusers folder";
        } else if (has_prefix(f, "down_blocks.") || has_prefix(f, "text_model.") ||
                   has_prefix(f, "encoder.down_blocks.") || has_prefix(f, "transformer_blocks.")) {
            instead =
                "; it holds the weights of one diffusers component: give model.name_or_path the "
                "diffusers folder that holds it";
        }
        fail(f, "is not a Stable Diffusion checkpoint in the single-file layout (it has no " +
                    unet + "input_blocks.0.0.weight)" + instead);
    }
    const int64_t in_channels = dim(f, unet + "input_blocks.0.0.weight", 1);
    if (in_channels != 4) {
        fail(f, "has a UNet with " + std::to_string(in_channels) +
                    " input channels (an inpainting or otherwise conditioned model); loom trains "
                    "text-to-image models, whose UNet takes the 4 latent channels");
    }
    if (has_prefix(f, kOpenClipSdxl)) {
        if (!has_prefix(f, kClipSdxl)) {
            fail(f, std::string("has SDXL's second text encoder (") + kOpenClipSdxl +
                        "*) but not its first (" + kClipSdxl + "*); the file is incomplete");
        }
        return config::Arch::kSdxl;
    }
    if (has_prefix(f, kOpenClipSdxlRefiner)) {
        fail(f, "is an SDXL refiner checkpoint; loom trains LoRAs on SDXL base models");
    }
    if (has_prefix(f, kOpenClipSd2)) return config::Arch::kSd2;
    if (has_prefix(f, kClipSd1)) return config::Arch::kSd1;
    fail(f, std::string("has a UNet but no text encoder (") + kClipSd1 + "* or conditioner." +
                "embedders.*); loom needs the whole checkpoint, UNet, VAE and text encoders");
}

UNetConfig unet_config(const SafetensorsFile& f, config::Arch arch, int64_t pooled_dim) {
    const std::string u = kUNet;
    UNetConfig c;
    c.in_channels = dim(f, u + "input_blocks.0.0.weight", 1);
    c.out_channels = dim(f, u + "out.2.weight", 0);
    c.sample_size = arch == config::Arch::kSdxl ? 128 : arch == config::Arch::kSd2 ? 96 : 64;

    // input_blocks: conv_in, then per level its resnets and (but the last level) a downsampler.
    const int64_t inputs = count_indexed(f, u + "input_blocks.");
    int64_t resnets = inputs - 1;
    for (int64_t n = 1; n < inputs; ++n) {
        if (has(f, u + "input_blocks." + std::to_string(n) + ".0.op.weight")) {
            resnets = n - 1;
            break;
        }
    }
    if (resnets < 1 || inputs % (resnets + 1) != 0) {
        fail(f, "its UNet's " + std::to_string(inputs) +
                    " input_blocks do not form levels of equal size; the file is damaged or of "
                    "another architecture");
    }
    const int64_t per_level = resnets + 1;
    const int64_t levels = inputs / per_level;
    if (count_indexed(f, u + "output_blocks.") != levels * per_level) {
        fail(f, "its UNet has " + std::to_string(count_indexed(f, u + "output_blocks.")) +
                    " output_blocks for " + std::to_string(levels) + " levels of " +
                    std::to_string(resnets) + " resnets; the file is damaged");
    }
    c.layers_per_block.assign(levels, resnets);
    c.block_out_channels.clear();
    c.down_block_types.clear();
    c.up_block_types.clear();
    c.transformer_layers_per_block.clear();
    std::string first_attention;
    for (int64_t l = 0; l < levels; ++l) {
        const std::string block = u + "input_blocks." + std::to_string(1 + l * per_level) + ".";
        c.block_out_channels.push_back(dim(f, block + "0.out_layers.3.weight", 0));
        const bool attention = has(f, block + "1.proj_in.weight");
        if (attention && first_attention.empty()) first_attention = block + "1.";
        c.down_block_types.push_back(attention ? "CrossAttnDownBlock2D" : "DownBlock2D");
        c.transformer_layers_per_block.push_back(
            attention ? count_indexed(f, block + "1.transformer_blocks.") : 1);
    }
    std::vector<int64_t> up_depths;
    for (int64_t l = 0; l < levels; ++l) {
        const std::string block = u + "output_blocks." + std::to_string(l * per_level) + ".";
        const bool attention = has(f, block + "1.proj_in.weight");
        c.up_block_types.push_back(attention ? "CrossAttnUpBlock2D" : "UpBlock2D");
        up_depths.push_back(attention ? count_indexed(f, block + "1.transformer_blocks.")
                                      : c.transformer_layers_per_block[levels - 1 - l]);
    }
    // The mid block's depth is the last level's (diffusers' rule); a last level without
    // attention (SD 1.x) leaves the number free.
    if (!has(f, u + "middle_block.1.proj_in.weight")) {
        fail(f, "its UNet has no middle_block attention; loom loads the SD 1.x/2.x/SDXL UNets");
    }
    const int64_t mid_depth = count_indexed(f, u + "middle_block.1.transformer_blocks.");
    if (c.down_block_types.back() == "DownBlock2D") {
        c.transformer_layers_per_block.back() = mid_depth;
        if (c.up_block_types.front() == "UpBlock2D") up_depths.front() = mid_depth;
    } else if (c.transformer_layers_per_block.back() != mid_depth) {
        fail(f, "its UNet's middle block has " + std::to_string(mid_depth) +
                    " transformer layers and its last level " +
                    std::to_string(c.transformer_layers_per_block.back()) +
                    "; loom's UNet (as diffusers') gives both the same depth");
    }
    std::vector<int64_t> reversed(c.transformer_layers_per_block.rbegin(),
                                  c.transformer_layers_per_block.rend());
    if (up_depths != reversed) c.reverse_transformer_layers_per_block = up_depths;
    if (first_attention.empty()) first_attention = u + "middle_block.1.";

    const int64_t context = dim(f, first_attention + "transformer_blocks.0.attn2.to_k.weight", 1);
    c.cross_attention_dim.assign(levels, context);
    c.use_linear_projection = shape_of(f, first_attention + "proj_in.weight").size() == 2;
    c.num_attention_heads.clear();
    for (int64_t l = 0; l < levels; ++l) {
        const int64_t channels = c.block_out_channels[l];
        // SD 1.x's original config: 8 heads in every block; SD 2.x and SDXL: 64-channel heads.
        if (arch == config::Arch::kSd1) {
            if (channels % 8 != 0) {
                fail(f, "its UNet level " + std::to_string(l) + " has " + std::to_string(channels) +
                            " channels, which 8 heads do not divide");
            }
            c.num_attention_heads.push_back(8);
        } else {
            c.num_attention_heads.push_back(
                heads_of_64_channels(f, channels, "its UNet level " + std::to_string(l)));
        }
    }

    if (has(f, u + "label_emb.0.0.weight")) {
        if (arch != config::Arch::kSdxl) {
            fail(f, std::string("its UNet has a class embedding (label_emb) that loom's ") +
                        config::to_string(arch) + " UNet does not have");
        }
        const int64_t input = dim(f, u + "label_emb.0.0.weight", 1);
        if (input <= pooled_dim || (input - pooled_dim) % 6 != 0) {
            fail(f, "its UNet's label_emb takes " + std::to_string(input) +
                        " inputs, not the pooled text embedding (" + std::to_string(pooled_dim) +
                        ") and six time-id embeddings of SDXL");
        }
        c.addition_embed_type = "text_time";
        c.projection_class_embeddings_input_dim = input;
        c.addition_time_embed_dim = (input - pooled_dim) / 6;
    } else if (arch == config::Arch::kSdxl) {
        fail(f,
             "is an SDXL checkpoint whose UNet has no label_emb (the pooled-text and size "
             "embedding); the file is incomplete");
    }
    return c;
}

VAEConfig vae_config(const SafetensorsFile& f, config::Arch arch) {
    const std::string v = kVae;
    VAEConfig c;
    const int64_t levels = count_indexed(f, v + "encoder.down.");
    if (levels == 0) fail(f, std::string("has no VAE (") + kVae + "encoder.down.*)");
    c.layers_per_block = count_indexed(f, v + "encoder.down.0.block.");
    c.block_out_channels.clear();
    for (int64_t i = 0; i < levels; ++i) {
        c.block_out_channels.push_back(
            dim(f, v + "encoder.down." + std::to_string(i) + ".block.0.conv1.weight", 0));
    }
    c.in_channels = dim(f, v + "encoder.conv_in.weight", 1);
    c.out_channels = dim(f, v + "decoder.conv_out.weight", 0);
    c.latent_channels = dim(f, v + "decoder.conv_in.weight", 1);
    c.use_quant_conv = has(f, v + "quant_conv.weight");
    c.use_post_quant_conv = has(f, v + "post_quant_conv.weight");
    c.mid_block_add_attention = has(f, v + "encoder.mid.attn_1.q.weight");
    c.norm_num_groups = 32;
    // The values of each kind's diffusers VAE config (not in the weights).
    c.sample_size = arch == config::Arch::kSdxl ? 1024 : arch == config::Arch::kSd2 ? 768 : 512;
    c.scaling_factor = arch == config::Arch::kSdxl ? 0.13025 : 0.18215;
    return c;
}

namespace {

// The tensors of a text tower that give its sizes (both towers have 64-channel heads, and SD's
// text encoder configs pool at the highest token id: eos_token_id 2).
CLIPTextConfig text_tower_config(const SafetensorsFile& f, const std::string& tokens,
                                 const std::string& positions, const std::string& layers,
                                 const std::string& first_fc, const std::string& what) {
    CLIPTextConfig c;
    c.vocab_size = dim(f, tokens, 0);
    c.hidden_size = dim(f, tokens, 1);
    c.max_position_embeddings = dim(f, positions, 0);
    c.num_hidden_layers = count_indexed(f, layers);
    c.intermediate_size = dim(f, first_fc, 0);
    c.num_attention_heads = heads_of_64_channels(f, c.hidden_size, what);
    c.eos_token_id = 2;
    c.projection_dim = 0;
    return c;
}

}  // namespace

CLIPTextConfig clip_config(const SafetensorsFile& f, const std::string& prefix) {
    const std::string tm = has(f, prefix + "text_model.embeddings.token_embedding.weight")
                               ? prefix + "text_model."
                               : prefix;
    // CLIP ViT-L/14's text tower, with quick GELU.
    CLIPTextConfig c = text_tower_config(
        f, tm + "embeddings.token_embedding.weight", tm + "embeddings.position_embedding.weight",
        tm + "encoder.layers.", tm + "encoder.layers.0.mlp.fc1.weight", "its CLIP text encoder");
    c.hidden_act = "quick_gelu";
    return c;
}

CLIPTextConfig open_clip_config(const SafetensorsFile& f, const std::string& prefix) {
    // OpenCLIP ViT-bigG/14 (and -H/14): exact GELU, and a text projection.
    CLIPTextConfig c = text_tower_config(
        f, prefix + "token_embedding.weight", prefix + "positional_embedding",
        prefix + "transformer.resblocks.", prefix + "transformer.resblocks.0.mlp.c_fc.weight",
        "its OpenCLIP text encoder");
    c.hidden_act = "gelu";
    c.projection_dim = dim(f, prefix + "text_projection", 1);
    return c;
}

std::vector<StoredTensor> unet_sources(const File& file, const UNetConfig& config) {
    const std::string prefix = kUNet;
    const int64_t per_level = config.layers_per_block.front() + 1;
    std::vector<StoredTensor> sources;
    for (const TensorInfo& info : file->tensors()) {
        if (!starts_with(info.name, prefix)) continue;
        sources.push_back(
            renamed(file, info, unet_name(info.name.substr(prefix.size()), per_level)));
    }
    return sources;
}

std::vector<StoredTensor> vae_sources(const File& file, const VAEConfig& config) {
    const std::string prefix = kVae;
    const auto levels = static_cast<int64_t>(config.block_out_channels.size());
    std::vector<StoredTensor> sources;
    for (const TensorInfo& info : file->tensors()) {
        if (!starts_with(info.name, prefix)) continue;
        auto [name, conv_projection] = vae_name(info.name.substr(prefix.size()), levels);
        StoredTensor s = renamed(file, info, std::move(name));
        if (conv_projection && s.shape.size() > 2) {
            // The original attention projects with 1x1 convolutions; diffusers with Linear.
            s.shape.resize(2);
            const std::vector<int64_t> shape = s.shape;
            s.read = [file, &info, shape] { return read_tensor(*file, info).reshape(shape); };
        }
        sources.push_back(std::move(s));
    }
    return sources;
}

std::vector<StoredTensor> clip_sources(const File& file, const std::string& prefix) {
    std::vector<StoredTensor> sources;
    for (const TensorInfo& info : file->tensors()) {
        if (!starts_with(info.name, prefix)) continue;
        sources.push_back(renamed(file, info, info.name.substr(prefix.size())));
    }
    return sources;
}

std::vector<StoredTensor> open_clip_sources(const File& file, const std::string& prefix) {
    std::vector<StoredTensor> sources;
    for (const TensorInfo& info : file->tensors()) {
        if (!starts_with(info.name, prefix)) continue;
        const std::string rest = info.name.substr(prefix.size());
        if (rest == "logit_scale" || rest == "attn_mask") continue;  // not in the text model
        if (rest == "text_projection") {
            // OpenCLIP multiplies x @ P; transformers' Linear holds P transposed.
            sources.push_back(
                {"text_projection.weight", {info.shape.at(1), info.shape.at(0)}, [file, &info] {
                     return read_tensor(*file, info).t().contiguous();
                 }});
            continue;
        }
        int64_t layer = 0;
        std::string inner;
        if (take_index(rest, "transformer.resblocks.", layer, inner)) {
            const std::string base = "text_model.encoder.layers." + std::to_string(layer) + ".";
            if (inner == "attn.in_proj_weight" || inner == "attn.in_proj_bias") {
                // q, k and v stacked along the first axis.
                const std::string kind = inner == "attn.in_proj_weight" ? "weight" : "bias";
                std::vector<int64_t> shape = info.shape;
                shape.at(0) /= 3;
                const int64_t rows = shape[0];
                const char* names[] = {"q_proj", "k_proj", "v_proj"};
                for (int64_t i = 0; i < 3; ++i) {
                    sources.push_back(
                        {base + "self_attn." + names[i] + "." + kind, shape,
                         [file, &info, i, rows] {
                             return read_tensor(*file, info).narrow(0, i * rows, rows);
                         }});
                }
                continue;
            }
            const std::string name = rename_head(inner, {{"ln_1.", "layer_norm1."},
                                                         {"ln_2.", "layer_norm2."},
                                                         {"attn.out_proj.", "self_attn.out_proj."},
                                                         {"mlp.c_fc.", "mlp.fc1."},
                                                         {"mlp.c_proj.", "mlp.fc2."}});
            sources.push_back(renamed(file, info, base + name));
            continue;
        }
        const std::string name =
            rename_head(rest, {{"token_embedding.", "text_model.embeddings.token_embedding."},
                               {"ln_final.", "text_model.final_layer_norm."}});
        sources.push_back(renamed(file, info,
                                  rest == "positional_embedding"
                                      ? "text_model.embeddings.position_embedding.weight"
                                      : name));
    }
    return sources;
}

}  // namespace loom::ldm
