#pragma once

// A Wan 2.1 text-to-video model loaded from a diffusers WanPipeline folder: the transformer, the
// video VAE, UMT5 with its tokenizer; the prompt encoding the Wan pipeline does; and the
// flow-matching config ai-toolkit trains and samples Wan with (shift 3, no dynamic shifting,
// whatever the folder's UniPC scheduler says).
//
// ref: diffusers pipelines/wan/pipeline_wan.py::WanPipeline.{_get_t5_prompt_embeds,
//      prompt_clean}; ai-toolkit toolkit/models/wan21/wan21.py (scheduler_config,
//      get_train_scheduler, get_bucket_divisibility 16)

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/schedules/flow_match.h"
#include "loom/model/text/t5_encoder.h"
#include "loom/model/text/text_conditioning.h"
#include "loom/model/tokenizers/t5_tokenizer.h"
#include "loom/model/vae/wan_vae.h"
#include "loom/model/wan/wan_transformer.h"

namespace loom {

struct WanLoadOptions {
    at::ScalarType dtype = at::kFloat;
    bool load_vae = true;
    bool load_text_encoder = true;
};

struct WanModel {
    // ai-toolkit's Wan training and sampling scheduler: FlowMatchEuler, shift 3.0.
    static constexpr double kShift = 3.0;

    DiffusersFolder folder;
    WanTransformer3DModel transformer{nullptr};
    AutoencoderKLWan vae{nullptr};
    T5EncoderModel text_encoder{nullptr};  // UMT5
    std::shared_ptr<T5Tokenizer> tokenizer;
    FlowMatchConfig scheduler;

    // As WanPipeline._get_t5_prompt_embeds: each prompt cleaned, tokenized to
    // `max_sequence_length` ids with its attention mask, encoded, cut to its own length and
    // padded back with zeros. context: [B, max_sequence_length, d_model].
    TextConditioning encode_prompts(const std::vector<std::string>& prompts,
                                    std::size_t max_sequence_length);

    // What a Wan family does with its VAE and UMT5 (Wan 2.1 and 2.2 alike): the loaded
    // encoders; the latent distribution of images [B, 3, H, W] (each a one-frame clip) or clips
    // [B, 3, F, H, W]; the VAE's dtype.
    std::vector<torch::nn::Module*> encoders();
    LatentDistribution encode_pixels(const at::Tensor& pixels);
    at::ScalarType vae_dtype() const;
};

// The pipeline's prompt_clean without ftfy (which the reference uses only when installed):
// HTML entities unescaped twice (the named ones a caption uses: amp, lt, gt, quot, apos, nbsp,
// and numeric references), whitespace runs to one space, trimmed.
std::string wan_prompt_clean(const std::string& text);

// The Wan pipeline classes loom loads (model_index.json _class_name).
bool is_wan_pipeline(const DiffusersFolder& folder);

// Every component of a WanPipeline folder (transformer, vae, text_encoder, tokenizer). A
// component missing from model_index.json or from the folder is a FormatError naming the file
// and the component before anything is loaded; Wan 2.2's two-transformer layout (transformer_2)
// is refused: it is arch wan22_14b (model/wan22/wan22_model.h).
WanModel load_wan(const std::filesystem::path& root, const WanLoadOptions& options = {});

// What Wan 2.2 shares: the components of a folder already read (load_wan without its checks of
// the layout), and one transformer component ("transformer", "transformer_2") from its
// config.json with its weights, in `dtype`, in eval mode.
WanModel load_wan_components(DiffusersFolder folder, const WanLoadOptions& options);
WanTransformer3DModel load_wan_transformer(const DiffusersFolder& folder,
                                           const std::string& component, at::ScalarType dtype);

}  // namespace loom
