#pragma once

// A Qwen-Image model loaded from a diffusers QwenImagePipeline folder: the transformer,
// AutoencoderKLQwenImage (loom's Wan VAE, vae/wan_vae.h), Qwen2.5-VL's language model as the text
// encoder (the shared decoder LM, model/text/decoder_lm.h; the vision tower is not loaded) with
// its Qwen2 tokenizer, and the flow-matching scheduler config; and the prompt encoding
// QwenImagePipeline does: the prompt in its describe-the-image template, padded to the batch's
// longest (at most 1024 + 34 tokens), hidden_states[-1] of the real tokens, the template's first
// 34 dropped, padded again to the longest with its mask.
//
// ref: diffusers
// pipelines/qwenimage/pipeline_qwenimage.py::QwenImagePipeline._get_qwen_prompt_embeds

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/qwenimage/qwenimage_transformer.h"
#include "loom/model/schedules/flow_match.h"
#include "loom/model/text/decoder_lm.h"
#include "loom/model/text/text_conditioning.h"
#include "loom/model/tokenizers/qwen2_tokenizer.h"
#include "loom/model/vae/wan_vae.h"

namespace loom {

struct QwenImageLoadOptions {
    at::ScalarType dtype = at::kFloat;
    bool load_vae = true;
    bool load_text_encoder = true;
};

// QwenImagePipeline.prompt_template_encode around `prompt`.
std::string qwenimage_prompt(const std::string& prompt);

struct QwenImageModel {
    DiffusersFolder folder;
    QwenImageTransformer2DModel transformer{nullptr};
    AutoencoderKLWan vae{nullptr};
    DecoderLM text_encoder{nullptr};
    std::shared_ptr<Qwen2Tokenizer> tokenizer;
    FlowMatchConfig scheduler;

    // As QwenImagePipeline.encode_prompt: context [B, L, hidden] with L the longest prompt's
    // token count after the template's prefix (at most max_sequence_length), each prompt's rows
    // first and zeros after; context_mask [B, L] float32, 1 on its rows.
    TextConditioning encode_prompts(const std::vector<std::string>& prompts,
                                    std::size_t max_sequence_length = 1024);
};

// Every component of a QwenImagePipeline folder. A component missing from model_index.json or
// from the folder is a FormatError naming the file and the component, before anything is loaded.
QwenImageModel load_qwenimage(const std::filesystem::path& root,
                              const QwenImageLoadOptions& options = {});

}  // namespace loom
