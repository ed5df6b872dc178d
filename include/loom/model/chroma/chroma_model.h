#pragma once

// A Chroma model loaded from a diffusers ChromaPipeline folder: the transformer, Flux's
// 16-channel VAE, T5 (the only text encoder: Chroma has no CLIP) with its tokenizer, and the
// flow-matching scheduler config; and the prompt encoding ChromaPipeline does, which — unlike
// Flux's — runs T5 with the tokenizer's attention mask and hands the transformer a mask of the
// tokens it attends to.
//
// ref: diffusers pipelines/chroma/pipeline_chroma.py::ChromaPipeline._get_t5_prompt_embeds

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/chroma/chroma_transformer.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/schedules/flow_match.h"
#include "loom/model/text/t5_encoder.h"
#include "loom/model/text/text_conditioning.h"
#include "loom/model/tokenizers/t5_tokenizer.h"
#include "loom/model/vae/autoencoder_kl.h"

namespace loom {

struct ChromaLoadOptions {
    at::ScalarType dtype = at::kFloat;
    bool load_vae = true;
    bool load_text_encoder = true;
};

struct ChromaModel {
    DiffusersFolder folder;
    ChromaTransformer2DModel transformer{nullptr};
    AutoencoderKL vae{nullptr};
    T5EncoderModel text_encoder{nullptr};
    std::shared_ptr<T5Tokenizer> tokenizer;
    FlowMatchConfig scheduler;

    // As ChromaPipeline._get_t5_prompt_embeds: each prompt padded to `max_sequence_length`
    // tokens and encoded by T5 under the tokenizer's mask (padding not attended to); context is
    // the last hidden state, context_mask the transformer's text mask: 1 for the prompt's tokens
    // and the first padding one after them (the pipeline's "index <= length"), 0 for the rest.
    TextConditioning encode_prompts(const std::vector<std::string>& prompts,
                                    std::size_t max_sequence_length);
};

// ChromaPipeline's attention mask over the joint sequence: the text mask [B, T] followed by ones
// for each of the `image_tokens` [B, T + image_tokens], float32 like the pipeline's.
at::Tensor chroma_joint_mask(const at::Tensor& context_mask, int64_t image_tokens);

// Every component of a ChromaPipeline folder. A component missing from model_index.json or from
// the folder is a FormatError naming the file and the component, before anything is loaded.
ChromaModel load_chroma(const std::filesystem::path& root, const ChromaLoadOptions& options = {});

}  // namespace loom
