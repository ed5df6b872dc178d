#pragma once

// A Flux.1 model (dev or schnell) loaded from a diffusers FluxPipeline folder: the transformer,
// the 16-channel VAE, CLIP-L (pooled text) and T5 (per-token text) with their tokenizers, and the
// flow-matching scheduler config; and the prompt encoding the Flux pipeline does.
//
// ref: diffusers pipelines/flux/pipeline_flux.py::FluxPipeline.{encode_prompt,
//      _get_clip_prompt_embeds, _get_t5_prompt_embeds}

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/flux/flux_transformer.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/schedules/flow_match.h"
#include "loom/model/text/clip_text_model.h"
#include "loom/model/text/t5_encoder.h"
#include "loom/model/text/text_conditioning.h"
#include "loom/model/tokenizers/clip_tokenizer.h"
#include "loom/model/tokenizers/t5_tokenizer.h"
#include "loom/model/vae/autoencoder_kl.h"

namespace loom {

struct FluxLoadOptions {
    at::ScalarType dtype = at::kFloat;
    bool load_vae = true;
    bool load_text_encoders = true;
};

struct FluxModel {
    DiffusersFolder folder;
    FluxTransformer2DModel transformer{nullptr};
    AutoencoderKL vae{nullptr};
    CLIPTextModel text_encoder{nullptr};     // CLIP-L: the pooled embedding
    T5EncoderModel text_encoder_2{nullptr};  // T5 v1.1 XXL: the per-token embeddings
    std::shared_ptr<CLIPTokenizer> tokenizer;
    std::shared_ptr<T5Tokenizer> tokenizer_2;
    FlowMatchConfig scheduler;

    // dev has the guidance embedding; schnell does not.
    bool guidance_distilled() const { return transformer->config().guidance_embeds; }
    // Flex.2: the transformer takes the inpaint and control channels beside the latents
    // (flux/flex2_channels.h).
    bool flex2() const;

    // As FluxPipeline.encode_prompt with prompt_2 = prompt: context is T5's last hidden state of
    // the prompt padded to `max_sequence_length` tokens (no attention mask), text_embeds CLIP's
    // pooled output (77 tokens).
    TextConditioning encode_prompts(const std::vector<std::string>& prompts,
                                    std::size_t max_sequence_length);
};

// The Flux pipeline classes loom loads (model_index.json _class_name).
bool is_flux_pipeline(const DiffusersFolder& folder);

// One component from its config.json with its weights, in eval mode.
FluxTransformer2DModel load_flux_transformer(const DiffusersFolder& folder,
                                             at::ScalarType dtype = at::kFloat);

// Every component of a FluxPipeline folder. A component missing from model_index.json or from
// the folder is a FormatError naming the file and the component, before anything is loaded.
FluxModel load_flux(const std::filesystem::path& root, const FluxLoadOptions& options = {});

}  // namespace loom
