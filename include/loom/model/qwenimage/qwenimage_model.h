#pragma once

// A Qwen-Image model loaded from a diffusers QwenImagePipeline, QwenImageEditPipeline or
// QwenImageEditPlusPipeline (Edit-2509) folder: the transformer, AutoencoderKLQwenImage (loom's
// Wan VAE, vae/wan_vae.h), Qwen2.5-VL's language model as the text encoder (the shared decoder
// LM, model/text/decoder_lm.h) with its Qwen2 tokenizer, and the flow-matching scheduler config;
// for the Edit pipelines also Qwen2.5-VL's vision tower (text/qwen2_5_vision.h) and the
// processor's image settings (text/qwen2_vl_image_processor.h). And the prompt encoding each
// pipeline does:
//   - Qwen-Image: the prompt in its describe-the-image template, padded to the batch's longest
//     (at most 1024 + 34 tokens), hidden_states[-1] of the real tokens, the template's first 34
//     dropped, padded again to the longest with its mask;
//   - Edit: the control image resized (PIL Lanczos) to about a megapixel, its vision tokens in
//     the describe-and-edit template before the prompt, every token at its multimodal rotary
//     position (an image's tokens at (time, row, column) after the text before it), the first 64
//     dropped;
//   - Edit-2509: each of up to three images at about 384 x 384, as "Picture i: <image>".
// The image tokens' positions are the ones transformers computes when the processor's
// mm_token_type_ids reach the model; diffusers 0.42.1's Edit pipelines do not pass them, so
// under transformers 5 they get text positions instead (diffusers issue #14194, a regression
// from the transformers 4 the models were released with). loom keeps the model's positions.
//
// ref: diffusers pipelines/qwenimage/pipeline_qwenimage.py::QwenImagePipeline;
//      pipeline_qwenimage_edit.py::QwenImageEditPipeline; pipeline_qwenimage_edit_plus.py::
//      QwenImageEditPlusPipeline (CONDITION_IMAGE_SIZE, VAE_IMAGE_SIZE, calculate_dimensions);
//      transformers models/qwen2_5_vl/modeling_qwen2_5_vl.py::Qwen2_5_VLModel.get_rope_index

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/qwenimage/qwenimage_transformer.h"
#include "loom/model/schedules/flow_match.h"
#include "loom/model/text/decoder_lm.h"
#include "loom/model/text/qwen2_5_vision.h"
#include "loom/model/text/qwen2_vl_image_processor.h"
#include "loom/model/text/text_conditioning.h"
#include "loom/model/tokenizers/qwen2_tokenizer.h"
#include "loom/model/vae/wan_vae.h"

namespace loom {

// Which pipeline a folder is: what its prompts are encoded with and how many control images a
// prompt has (none, one, up to three).
enum class QwenImageVariant { kQwenImage, kEdit, kEditPlus };

// QwenImageEditPlusPipeline's CONDITION_IMAGE_SIZE (what the vision tower reads) and
// VAE_IMAGE_SIZE (what becomes control latents), and QwenImageEditPipeline's one area for both.
constexpr int64_t kQwenEditConditionArea = 384 * 384;
constexpr int64_t kQwenEditVaeArea = 1024 * 1024;
// Edit-2509 takes up to three control images.
constexpr std::size_t kQwenEditPlusMaxImages = 3;

// calculate_dimensions: the (width, height), multiples of 32, of about `area` pixels at
// `width / height`.
std::pair<int64_t, int64_t> qwen_edit_dimensions(int64_t area, double aspect);

// An Edit pipeline's VAE image: `image` (uint8 [H, W, 3] on the host) resized (PIL Lanczos) to
// qwen_edit_dimensions(kQwenEditVaeArea, its aspect), [3, h, w] float32 in [-1, 1].
at::Tensor qwen_edit_vae_pixels(const at::Tensor& image);

struct QwenImageLoadOptions {
    at::ScalarType dtype = at::kFloat;
    bool load_vae = true;
    bool load_text_encoder = true;
};

// QwenImagePipeline.prompt_template_encode around `prompt`.
std::string qwenimage_prompt(const std::string& prompt);

struct QwenImageModel {
    DiffusersFolder folder;
    QwenImageVariant variant = QwenImageVariant::kQwenImage;
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

    // The Edit pipelines' encode_prompt: each prompt with its control images (uint8 [H, W, 3]
    // on the host, at their own size: resized here as the pipeline resizes them), the same
    // layout as encode_prompts. Edit takes exactly one image a prompt, Edit-2509 one to three.
    TextConditioning encode_edit_prompts(const std::vector<std::string>& prompts,
                                         const std::vector<std::vector<at::Tensor>>& images);

    // Edit variants: the vision tower, the processor's settings and the image token's id.
    Qwen2_5_Vision vision{nullptr};
    Qwen2VLImageProcessorConfig image_processor;
    int64_t image_token_id = 151655;
};

// Every component of a QwenImagePipeline, QwenImageEditPipeline or QwenImageEditPlusPipeline
// folder (an Edit folder's processor/ too). A component missing from model_index.json or
// from the folder is a FormatError naming the file and the component, before anything is loaded.
QwenImageModel load_qwenimage(const std::filesystem::path& root,
                              const QwenImageLoadOptions& options = {});

}  // namespace loom
