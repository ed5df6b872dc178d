#pragma once

// A Z-Image model loaded from a diffusers ZImagePipeline folder: the transformer, Flux's
// 16-channel VAE (Z-Image's scale 0.3611 and shift 0.1159 in its config), Qwen3 as the text
// encoder (the shared decoder LM, model/text/decoder_lm.h) with its Qwen2 tokenizer, and the
// flow-matching scheduler config; and the prompt encoding ZImagePipeline does: Qwen3's chat
// template around the prompt, padded to max_sequence_length, hidden_states[-2] of the tokens
// that are not padding.
//
// ref: diffusers pipelines/z_image/pipeline_z_image.py::ZImagePipeline._encode_prompt;
//      ai-toolkit extensions_built_in/diffusion_models/z_image/z_image.py

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/schedules/flow_match.h"
#include "loom/model/text/decoder_lm.h"
#include "loom/model/text/text_conditioning.h"
#include "loom/model/tokenizers/qwen2_tokenizer.h"
#include "loom/model/vae/autoencoder_kl.h"
#include "loom/model/zimage/zimage_transformer.h"

namespace loom {

struct ZImageLoadOptions {
    at::ScalarType dtype = at::kFloat;
    bool load_vae = true;
    bool load_text_encoder = true;
};

// What Qwen3's chat template renders for one user message with add_generation_prompt and
// enable_thinking=True, as ZImagePipeline asks for it:
// "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n".
std::string zimage_chat_prompt(const std::string& prompt);

struct ZImageModel {
    DiffusersFolder folder;
    ZImageTransformer2DModel transformer{nullptr};
    AutoencoderKL vae{nullptr};
    DecoderLM text_encoder{nullptr};
    std::shared_ptr<Qwen2Tokenizer> tokenizer;
    FlowMatchConfig scheduler;

    // As ZImagePipeline._encode_prompt: each prompt in the chat template, padded to
    // `max_sequence_length` tokens and run through Qwen3 under the tokenizer's mask; context
    // [B, max_sequence_length, hidden] holds each prompt's real tokens' hidden_states[-2] first
    // (the pipeline's prompt_embeds[i][mask[i]]) and zeros after, context_mask 1 on those rows.
    TextConditioning encode_prompts(const std::vector<std::string>& prompts,
                                    std::size_t max_sequence_length);
};

// Each item's caption length: the rows of its context_mask that are set (a host read).
std::vector<int64_t> zimage_caption_lengths(const at::Tensor& context_mask);

// Every component of a ZImagePipeline folder. A component missing from model_index.json or from
// the folder is a FormatError naming the file and the component, before anything is loaded.
ZImageModel load_zimage(const std::filesystem::path& root, const ZImageLoadOptions& options = {});

}  // namespace loom
