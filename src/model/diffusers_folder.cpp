#include "loom/model/diffusers_folder.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "loom/core/error.h"
#include "loom/model/flow_match.h"
#include "loom/model/flux_transformer.h"
#include "loom/model/t5_encoder.h"
#include "loom/model/tensor_file.h"
#include "loom/model/wan_transformer.h"
#include "loom/model/wan_vae.h"

namespace loom {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path& path) {
    std::ifstream in(path);
    if (!in) {
        std::error_code ec;
        throw IoError(path.string(),
                      fs::exists(path, ec) ? "cannot be opened for reading" : "does not exist");
    }
    try {
        json j = json::parse(in);
        if (!j.is_object()) throw FormatError(path.string(), "the top level must be a JSON object");
        return j;
    } catch (const json::parse_error& e) {
        throw FormatError(path.string(), std::string("is not valid JSON: ") + e.what());
    }
}

// Reads config values with type checks that name the file and key.
class ConfigReader {
  public:
    explicit ConfigReader(const fs::path& path) : path_(path), j_(read_json(path)) {}

    const json& raw() const { return j_; }
    bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

    int64_t integer(const char* key, int64_t fallback) const {
        if (!has(key)) return fallback;
        if (!j_[key].is_number_integer()) fail(key, "must be an integer");
        return j_[key].get<int64_t>();
    }
    double number(const char* key, double fallback) const {
        if (!has(key)) return fallback;
        if (!j_[key].is_number()) fail(key, "must be a number");
        return j_[key].get<double>();
    }
    bool boolean(const char* key, bool fallback) const {
        if (!has(key)) return fallback;
        if (!j_[key].is_boolean()) fail(key, "must be true or false");
        return j_[key].get<bool>();
    }
    std::string text(const char* key, const std::string& fallback) const {
        if (!has(key)) return fallback;
        if (!j_[key].is_string()) fail(key, "must be a string");
        return j_[key].get<std::string>();
    }
    std::vector<std::string> texts(const char* key, std::vector<std::string> fallback) const {
        return list<std::string>(key, std::move(fallback), "a list of strings",
                                 [](const json& e) { return e.is_string(); });
    }
    // A list whose entries all pass `valid`, else "must be <what>"; `fallback` when absent.
    template <class T, class Valid>
    std::vector<T> list(const char* key, std::vector<T> fallback, const std::string& what,
                        Valid valid) const {
        if (!has(key)) return fallback;
        const json& v = j_[key];
        if (!v.is_array()) fail(key, "must be " + what);
        std::vector<T> out;
        for (const json& e : v) {
            if (!valid(e)) fail(key, "must be " + what);
            out.push_back(e.get<T>());
        }
        return out;
    }
    // An int (repeated `n` times) or a list of `n` ints.
    std::vector<int64_t> per_block(const char* key, std::size_t n, int64_t fallback) const {
        if (!has(key)) return std::vector<int64_t>(n, fallback);
        const json& v = j_[key];
        if (v.is_number_integer()) return std::vector<int64_t>(n, v.get<int64_t>());
        if (!v.is_array() || v.size() != n) {
            fail(key, "must be an integer or a list of " + std::to_string(n) + " integers");
        }
        std::vector<int64_t> out;
        for (const json& e : v) {
            if (!e.is_number_integer()) fail(key, "must be an integer or a list of integers");
            out.push_back(e.get<int64_t>());
        }
        return out;
    }
    // A key loom does not implement: only its default value is accepted.
    template <class T>
    void require_default(const char* key, const T& expected) const {
        if (!has(key)) return;
        bool ok = false;
        try {
            ok = j_[key].get<T>() == expected;
        } catch (const json::exception&) {
            ok = false;
        }
        if (!ok) {
            fail(key, "is " + j_[key].dump() + ", which loom does not support (only " +
                          json(expected).dump() + ")");
        }
    }
    void require_null(const char* key) const {
        if (has(key))
            fail(key, "is " + j_[key].dump() + ", which loom does not support (only null)");
    }

    [[noreturn]] void fail(const std::string& key, const std::string& what) const {
        throw FormatError(path_.string(), "'" + key + "' " + what);
    }

  private:
    fs::path path_;
    json j_;
};

std::string join_first(const std::vector<std::string>& items, std::size_t limit) {
    std::string out;
    for (std::size_t i = 0; i < items.size() && i < limit; ++i) out += (i ? ", " : "") + items[i];
    if (items.size() > limit) out += ", ...";
    return out;
}

}  // namespace

bool DiffusersFolder::has(const std::string& component) const {
    return std::any_of(components.begin(), components.end(),
                       [&](const DiffusersComponent& c) { return c.name == component; });
}

DiffusersFolder read_diffusers_folder(const fs::path& root) {
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
        throw IoError(root.string(),
                      "is not a folder; give a diffusers model folder (with "
                      "model_index.json)");
    }
    const fs::path index = root / "model_index.json";
    const json j = read_json(index);
    DiffusersFolder folder;
    folder.root = root;
    if (!j.contains("_class_name") || !j["_class_name"].is_string()) {
        throw FormatError(index.string(), "'_class_name' (the pipeline class) is missing");
    }
    folder.pipeline_class = j["_class_name"].get<std::string>();
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (it.key().empty() || it.key()[0] == '_') continue;
        const json& v = it.value();
        if (v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string()) {
            folder.components.push_back(
                {it.key(), v[0].get<std::string>(), v[1].get<std::string>()});
        }
    }
    return folder;
}

void DiffusersFolder::require(const std::vector<std::string>& needed) const {
    for (const std::string& component : needed) {
        std::error_code ec;
        if (!has(component)) {
            throw FormatError((root / "model_index.json").string(),
                              "has no '" + component + "' component");
        }
        if (!fs::is_directory(dir(component), ec)) {
            throw IoError(dir(component).string(),
                          "does not exist (model_index.json lists '" + component + "')");
        }
    }
}

UNetConfig read_unet_config(const fs::path& path) {
    const ConfigReader r(path);
    UNetConfig c;
    c.in_channels = r.integer("in_channels", 4);
    c.out_channels = r.integer("out_channels", 4);
    c.sample_size = r.integer("sample_size", 64);
    c.down_block_types = r.texts("down_block_types", c.down_block_types);
    c.up_block_types = r.texts("up_block_types", c.up_block_types);
    if (r.has("block_out_channels")) {
        c.block_out_channels = r.raw()["block_out_channels"].get<std::vector<int64_t>>();
    }
    const std::size_t n = c.block_out_channels.size();
    if (c.down_block_types.size() != n || c.up_block_types.size() != n) {
        r.fail("down_block_types", "and up_block_types must have one entry per block_out_channels");
    }
    c.layers_per_block = r.per_block("layers_per_block", n, 2);
    // The diffusers trap: "attention_head_dim" is the number of heads unless
    // num_attention_heads is given.
    c.num_attention_heads = r.has("num_attention_heads") ? r.per_block("num_attention_heads", n, 8)
                                                         : r.per_block("attention_head_dim", n, 8);
    c.cross_attention_dim = r.per_block("cross_attention_dim", n, 1280);
    c.transformer_layers_per_block = r.per_block("transformer_layers_per_block", n, 1);
    if (r.has("reverse_transformer_layers_per_block")) {
        r.fail("reverse_transformer_layers_per_block", "is not supported by loom");
    }
    c.downsample_padding = r.integer("downsample_padding", 1);
    c.mid_block_scale_factor = r.number("mid_block_scale_factor", 1.0);
    c.norm_num_groups = r.integer("norm_num_groups", 32);
    c.norm_eps = r.number("norm_eps", 1e-5);
    c.use_linear_projection = r.boolean("use_linear_projection", false);
    c.flip_sin_to_cos = r.boolean("flip_sin_to_cos", true);
    c.freq_shift = r.number("freq_shift", 0.0);
    if (r.has("addition_embed_type")) c.addition_embed_type = r.text("addition_embed_type", "");
    c.addition_time_embed_dim = r.integer("addition_time_embed_dim", 256);
    c.projection_class_embeddings_input_dim =
        r.integer("projection_class_embeddings_input_dim", 2816);
    r.require_default<std::string>("mid_block_type", "UNetMidBlock2DCrossAttn");
    r.require_default<std::string>("act_fn", "silu");
    r.require_default<std::string>("time_embedding_type", "positional");
    r.require_default<std::string>("resnet_time_scale_shift", "default");
    r.require_default<std::string>("attention_type", "default");
    r.require_default<bool>("center_input_sample", false);
    r.require_default<bool>("dual_cross_attention", false);
    r.require_default<bool>("only_cross_attention", false);
    r.require_default<bool>("resnet_skip_time_act", false);
    r.require_default<bool>("class_embeddings_concat", false);
    r.require_default<int64_t>("conv_in_kernel", 3);
    r.require_default<int64_t>("conv_out_kernel", 3);
    r.require_default<double>("resnet_out_scale_factor", 1.0);
    for (const char* key : {"class_embed_type", "encoder_hid_dim", "encoder_hid_dim_type",
                            "num_class_embeds", "time_embedding_dim", "time_embedding_act_fn",
                            "timestep_post_act", "time_cond_proj_dim", "cross_attention_norm"}) {
        r.require_null(key);
    }
    return c;
}

VAEConfig read_vae_config(const fs::path& path) {
    const ConfigReader r(path);
    VAEConfig c;
    c.in_channels = r.integer("in_channels", 3);
    c.out_channels = r.integer("out_channels", 3);
    if (r.has("block_out_channels")) {
        c.block_out_channels = r.raw()["block_out_channels"].get<std::vector<int64_t>>();
    }
    const std::size_t n = c.block_out_channels.size();
    for (const std::string& t :
         r.texts("down_block_types", std::vector<std::string>(n, "DownEncoderBlock2D"))) {
        if (t != "DownEncoderBlock2D")
            r.fail("down_block_types", "entry '" + t + "' is not supported");
    }
    for (const std::string& t :
         r.texts("up_block_types", std::vector<std::string>(n, "UpDecoderBlock2D"))) {
        if (t != "UpDecoderBlock2D") r.fail("up_block_types", "entry '" + t + "' is not supported");
    }
    c.layers_per_block = r.integer("layers_per_block", 1);
    c.latent_channels = r.integer("latent_channels", 4);
    c.norm_num_groups = r.integer("norm_num_groups", 32);
    c.sample_size = r.integer("sample_size", 32);
    c.scaling_factor = r.number("scaling_factor", 0.18215);
    if (r.has("shift_factor")) c.shift_factor = r.number("shift_factor", 0.0);
    c.use_quant_conv = r.boolean("use_quant_conv", true);
    c.use_post_quant_conv = r.boolean("use_post_quant_conv", true);
    c.mid_block_add_attention = r.boolean("mid_block_add_attention", true);
    r.require_default<std::string>("act_fn", "silu");
    r.require_null("latents_mean");
    r.require_null("latents_std");
    return c;
}

CLIPTextConfig read_clip_text_config(const fs::path& path, bool with_projection) {
    const ConfigReader r(path);
    CLIPTextConfig c;
    c.vocab_size = r.integer("vocab_size", 49408);
    c.hidden_size = r.integer("hidden_size", 512);
    c.intermediate_size = r.integer("intermediate_size", 2048);
    c.num_hidden_layers = r.integer("num_hidden_layers", 12);
    c.num_attention_heads = r.integer("num_attention_heads", 8);
    c.max_position_embeddings = r.integer("max_position_embeddings", 77);
    c.hidden_act = r.text("hidden_act", "quick_gelu");
    c.layer_norm_eps = r.number("layer_norm_eps", 1e-5);
    c.eos_token_id = r.integer("eos_token_id", 2);
    if (with_projection) c.projection_dim = r.integer("projection_dim", 512);
    return c;
}

NoiseScheduleConfig read_scheduler_config(const fs::path& path) {
    const ConfigReader r(path);
    NoiseScheduleConfig c;
    c.num_train_timesteps = r.integer("num_train_timesteps", 1000);
    c.beta_start = r.number("beta_start", 0.0001);
    c.beta_end = r.number("beta_end", 0.02);
    c.beta_schedule = r.text("beta_schedule", "linear");
    c.prediction_type = r.text("prediction_type", "epsilon");
    c.steps_offset = r.integer("steps_offset", 0);
    c.set_alpha_to_one = r.boolean("set_alpha_to_one", true);
    c.timestep_spacing = r.text("timestep_spacing", "leading");
    r.require_default<bool>("rescale_betas_zero_snr", false);
    if (r.has("trained_betas")) r.fail("trained_betas", "is not supported by loom");
    return c;
}

FlowMatchConfig read_flow_match_config(const fs::path& path) {
    const ConfigReader r(path);
    FlowMatchConfig c;
    c.num_train_timesteps = r.integer("num_train_timesteps", c.num_train_timesteps);
    c.shift = r.number("shift", c.shift);
    c.use_dynamic_shifting = r.boolean("use_dynamic_shifting", c.use_dynamic_shifting);
    c.base_shift = r.number("base_shift", c.base_shift);
    c.max_shift = r.number("max_shift", c.max_shift);
    c.base_image_seq_len = r.integer("base_image_seq_len", c.base_image_seq_len);
    c.max_image_seq_len = r.integer("max_image_seq_len", c.max_image_seq_len);
    for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                            "invert_sigmas", "stochastic_sampling"}) {
        r.require_default<bool>(key, false);
    }
    r.require_null("shift_terminal");
    r.require_default<std::string>("time_shift_type", "exponential");
    if (c.num_train_timesteps < 1 || c.max_image_seq_len <= c.base_image_seq_len) {
        r.fail("num_train_timesteps", "and max_image_seq_len > base_image_seq_len are required");
    }
    return c;
}

FluxConfig read_flux_config(const fs::path& path) {
    const ConfigReader r(path);
    r.require_default<int64_t>("patch_size", 1);
    FluxConfig c;
    c.in_channels = r.integer("in_channels", c.in_channels);
    c.out_channels = r.integer("out_channels", c.in_channels);  // null: in_channels
    c.num_layers = r.integer("num_layers", c.num_layers);
    c.num_single_layers = r.integer("num_single_layers", c.num_single_layers);
    c.attention_head_dim = r.integer("attention_head_dim", c.attention_head_dim);
    c.num_attention_heads = r.integer("num_attention_heads", c.num_attention_heads);
    c.joint_attention_dim = r.integer("joint_attention_dim", c.joint_attention_dim);
    c.pooled_projection_dim = r.integer("pooled_projection_dim", c.pooled_projection_dim);
    c.guidance_embeds = r.boolean("guidance_embeds", false);
    c.axes_dims_rope = r.per_block("axes_dims_rope", 3, 0);
    if (!r.has("axes_dims_rope")) c.axes_dims_rope = {16, 56, 56};
    int64_t rope = 0;
    for (const int64_t d : c.axes_dims_rope) {
        if (d <= 0 || d % 2 != 0) r.fail("axes_dims_rope", "entries must be positive and even");
        rope += d;
    }
    if (rope != c.attention_head_dim) {
        r.fail("axes_dims_rope", "must sum to attention_head_dim (" +
                                     std::to_string(c.attention_head_dim) + "), not " +
                                     std::to_string(rope));
    }
    if (c.in_channels % 4 != 0) {
        r.fail("in_channels", "must be 4 x the VAE's latent channels (2x2 packing)");
    }
    return c;
}

WanConfig read_wan_config(const fs::path& path) {
    const ConfigReader r(path);
    WanConfig c;
    const std::vector<int64_t> patch = r.per_block("patch_size", 3, 0);
    if (r.has("patch_size")) std::copy(patch.begin(), patch.end(), c.patch_size.begin());
    for (const int64_t p : c.patch_size) {
        if (p <= 0) r.fail("patch_size", "entries must be positive");
    }
    c.num_attention_heads = r.integer("num_attention_heads", c.num_attention_heads);
    c.attention_head_dim = r.integer("attention_head_dim", c.attention_head_dim);
    c.in_channels = r.integer("in_channels", c.in_channels);
    c.out_channels = r.integer("out_channels", c.in_channels);  // null: in_channels
    c.text_dim = r.integer("text_dim", c.text_dim);
    c.freq_dim = r.integer("freq_dim", c.freq_dim);
    c.ffn_dim = r.integer("ffn_dim", c.ffn_dim);
    c.num_layers = r.integer("num_layers", c.num_layers);
    c.cross_attn_norm = r.boolean("cross_attn_norm", c.cross_attn_norm);
    c.eps = r.number("eps", c.eps);
    c.rope_max_seq_len = r.integer("rope_max_seq_len", c.rope_max_seq_len);
    r.require_default<std::string>("qk_norm", "rms_norm_across_heads");
    // Wan 2.1's image-to-video transformers: CLIP image tokens through added k/v projections.
    for (const char* key : {"image_dim", "added_kv_proj_dim", "pos_embed_seq_len"}) {
        if (r.has(key)) {
            r.fail(key,
                   "is set: an image-to-video Wan transformer, which loom does not support "
                   "yet (text-to-video only)");
        }
    }
    return c;  // the transformer checks that its heads split for RoPE
}

WanVAEConfig read_wan_vae_config(const fs::path& path) {
    const ConfigReader r(path);
    WanVAEConfig c;
    c.base_dim = r.integer("base_dim", c.base_dim);
    c.decoder_base_dim = r.integer("decoder_base_dim", c.base_dim);  // null: base_dim
    c.z_dim = r.integer("z_dim", c.z_dim);
    c.num_res_blocks = r.integer("num_res_blocks", c.num_res_blocks);
    c.in_channels = r.integer("in_channels", c.in_channels);
    c.out_channels = r.integer("out_channels", c.out_channels);
    c.dim_mult = r.list<int64_t>(
        "dim_mult", c.dim_mult, "a non-empty list of positive integers",
        [](const json& e) { return e.is_number_integer() && e.get<int64_t>() >= 1; });
    if (c.dim_mult.empty()) r.fail("dim_mult", "must be a non-empty list of positive integers");
    c.temperal_downsample =
        r.list<bool>("temperal_downsample", c.temperal_downsample, "a list of true/false",
                     [](const json& e) { return e.is_boolean(); });
    if (c.temperal_downsample.size() + 1 != c.dim_mult.size()) {
        r.fail("temperal_downsample", "needs one entry per downsampling level (" +
                                          std::to_string(c.dim_mult.size() - 1) +
                                          ", one fewer than dim_mult)");
    }
    const auto per_channel = [&](const char* key, std::vector<double> fallback) {
        const std::vector<double> out =
            r.list<double>(key, std::move(fallback), "a list of numbers",
                           [](const json& e) { return e.is_number(); });
        if (static_cast<int64_t>(out.size()) != c.z_dim) {
            r.fail(key, "has " + std::to_string(out.size()) + " entries; z_dim is " +
                            std::to_string(c.z_dim));
        }
        return out;
    };
    c.latents_mean = per_channel("latents_mean", wan21_latents_mean());
    c.latents_std = per_channel("latents_std", wan21_latents_std());
    for (const double s : c.latents_std) {
        if (s <= 0) r.fail("latents_std", "entries must be positive");
    }
    if (r.has("attn_scales") && !r.raw()["attn_scales"].empty()) {
        r.fail("attn_scales",
               "is not empty; loom's Wan VAE has attention in its middle blocks "
               "only, as Wan 2.1's");
    }
    // Wan 2.2's VAE (TI2V-5B): residual up and down blocks over 2x2-patchified frames.
    r.require_default<bool>("is_residual", false);
    r.require_null("patch_size");
    if (r.integer("scale_factor_temporal", c.temporal_compression()) != c.temporal_compression()) {
        r.fail("scale_factor_temporal", "disagrees with temperal_downsample (" +
                                            std::to_string(c.temporal_compression()) +
                                            " frames per latent frame)");
    }
    if (r.integer("scale_factor_spatial", c.spatial_compression()) != c.spatial_compression()) {
        r.fail("scale_factor_spatial", "disagrees with dim_mult (" +
                                           std::to_string(c.spatial_compression()) +
                                           " pixels per latent cell)");
    }
    return c;
}

T5Config read_t5_config(const fs::path& path) {
    const ConfigReader r(path);
    const std::string type = r.text("model_type", "t5");
    if (type != "t5" && type != "umt5") {
        r.fail("model_type", "is '" + type + "'; loom's T5 encoder reads t5 or umt5 configs");
    }
    T5Config c;
    c.bias_in_every_layer = type == "umt5";
    c.vocab_size = r.integer("vocab_size", c.vocab_size);
    c.d_model = r.integer("d_model", c.d_model);
    c.d_kv = r.integer("d_kv", c.d_kv);
    c.d_ff = r.integer("d_ff", c.d_ff);
    c.num_layers = r.integer("num_layers", c.num_layers);
    c.num_heads = r.integer("num_heads", c.num_heads);
    c.relative_attention_num_buckets =
        r.integer("relative_attention_num_buckets", c.relative_attention_num_buckets);
    c.relative_attention_max_distance =
        r.integer("relative_attention_max_distance", c.relative_attention_max_distance);
    c.layer_norm_epsilon = r.number("layer_norm_epsilon", c.layer_norm_epsilon);
    // transformers' rule: "gated-gelu" means gated gelu_new; otherwise "[gated-]ACT".
    const std::string proj = r.text("feed_forward_proj", "relu");
    c.gated_act = proj.rfind("gated-", 0) == 0;
    c.act = c.gated_act ? proj.substr(6) : proj;
    if (proj == "gated-gelu") c.act = "gelu_new";
    if (c.act != "gelu_new" && c.act != "gelu" && c.act != "relu" && c.act != "silu") {
        r.fail("feed_forward_proj", "is '" + proj +
                                        "'; loom implements relu, gelu, gelu_new and silu, "
                                        "gated or not");
    }
    if (c.num_layers < 1 || c.num_heads < 1 || c.d_kv < 1 || c.d_model < 1 ||
        c.relative_attention_num_buckets < 4) {
        r.fail("num_layers",
               "and num_heads, d_kv, d_model, relative_attention_num_buckets must "
               "be positive (buckets at least 4)");
    }
    return c;
}

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

std::size_t load_weights(torch::nn::Module& module, const std::vector<fs::path>& files,
                         const std::string& what, const std::string& base_prefix,
                         const std::map<std::string, std::string>& tied) {
    std::vector<StoredTensor> sources;
    for (const fs::path& path : files) {
        const auto file = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
        for (StoredTensor& s : stored_tensors_of(file)) sources.push_back(std::move(s));
    }
    return load_stored_tensors(module, sources, what,
                               files.empty() ? what : files.front().parent_path().string(),
                               "config.json", base_prefix, tied);
}

std::size_t load_t5_weights(T5EncoderModelImpl& model, const std::vector<fs::path>& files,
                            const std::string& what) {
    return load_weights(model, files, what, "", {{"encoder.embed_tokens.weight", "shared.weight"}});
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
