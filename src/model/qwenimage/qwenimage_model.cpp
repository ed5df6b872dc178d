#include "loom/model/qwenimage/qwenimage_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "loading/config_reader.h"
#include "loom/core/error.h"
#include "loom/core/py_round.h"
#include "loom/device/host_memory.h"
#include "loom/model/nn/pil_resize.h"

namespace loom {

namespace {

// QwenImagePipeline.prompt_template_encode_start_idx: the template's tokens before the prompt.
constexpr int64_t kDropIndex = 34;
// QwenImagePipeline.tokenizer_max_length.
constexpr std::size_t kTokenizerMaxLength = 1024;
// The Edit pipelines' prompt_template_encode_start_idx.
constexpr int64_t kEditDropIndex = 64;

// The Edit pipelines' prompt_template_encode around `images` vision placeholders and `prompt`.
std::string edit_prompt(QwenImageVariant variant, const std::string& prompt, std::size_t images) {
    const std::string vision = "<|vision_start|><|image_pad|><|vision_end|>";
    std::string pictures;
    if (variant == QwenImageVariant::kEdit) {
        pictures = vision;
    } else {
        for (std::size_t i = 0; i < images; ++i)
            pictures += "Picture " + std::to_string(i + 1) + ": " + vision;
    }
    return "<|im_start|>system\nDescribe the key features of the input image (color, shape, "
           "size, texture, objects, background), then explain how the user's text instruction "
           "should alter or modify the image. Generate a new image that meets the user's "
           "requirements while maintaining consistency with the original input where "
           "appropriate.<|im_end|>\n<|im_start|>user\n" +
           pictures + prompt + "<|im_end|>\n<|im_start|>assistant\n";
}

// The real tokens of `states` [B, T, hidden] (mask [B, T] 1), the first `drop` of each row
// dropped, at most `lengths[b]` kept, padded to the longest with the mask.
TextConditioning after_template(const at::Tensor& states, const at::Tensor& mask, int64_t drop,
                                const std::vector<int64_t>& lengths) {
    const int64_t batch = states.size(0);
    const at::Tensor real = real_tokens_first(states, mask).first;
    const int64_t width = *std::max_element(lengths.begin(), lengths.end());
    TextConditioning out;
    out.context = at::zeros({batch, width, states.size(2)}, states.options());
    out.context_mask = at::zeros({batch, width}, at::kFloat);
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t n = lengths[static_cast<std::size_t>(b)];
        if (n == 0) continue;
        out.context[b].narrow(0, 0, n).copy_(real[b].narrow(0, drop, n));
        out.context_mask[b].narrow(0, 0, n).fill_(1);
    }
    return out;
}

// get_rope_index for one prompt's real `ids`: text tokens count on from the position before
// them on all three rows; a run of image tokens (`grids[i]` in merged tokens, t x h x w) sits at
// (start + t, start + row, start + column) and moves the count on by max(h, w).
at::Tensor mrope_positions(const std::vector<int64_t>& ids, int64_t image_token,
                           const std::vector<std::array<int64_t, 3>>& grids) {
    std::vector<int64_t> rows[3];
    int64_t position = 0;
    std::size_t image = 0;
    for (std::size_t i = 0; i < ids.size();) {
        if (ids[i] != image_token) {
            for (auto& r : rows) r.push_back(position);
            ++position;
            ++i;
            continue;
        }
        TORCH_CHECK(image < grids.size(), "more image placeholders than images");
        const auto [t, h, w] = grids[image++];
        for (int64_t f = 0; f < t; ++f)
            for (int64_t y = 0; y < h; ++y)
                for (int64_t x = 0; x < w; ++x) {
                    rows[0].push_back(position + f);
                    rows[1].push_back(position + y);
                    rows[2].push_back(position + x);
                }
        i += static_cast<std::size_t>(t * h * w);
        position += std::max(h, w);
    }
    return at::stack({at::tensor(rows[0], at::kLong), at::tensor(rows[1], at::kLong),
                      at::tensor(rows[2], at::kLong)});
}

}  // namespace

std::pair<int64_t, int64_t> qwen_edit_dimensions(int64_t area, double aspect) {
    const double width = std::sqrt(static_cast<double>(area) * aspect);
    const double height = width / aspect;
    return {py_round(width / 32) * 32, py_round(height / 32) * 32};
}

std::string qwenimage_prompt(const std::string& prompt) {
    return "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
           "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
           "<|im_start|>user\n" +
           prompt + "<|im_end|>\n<|im_start|>assistant\n";
}

TextConditioning QwenImageModel::encode_prompts(const std::vector<std::string>& prompts,
                                                std::size_t max_sequence_length) {
    TORCH_CHECK(text_encoder && tokenizer, "the Qwen-Image text encoder was not loaded");
    const auto batch = static_cast<int64_t>(prompts.size());
    // padding=True, truncation to 1024 + 34: each prompt cut, then all padded to the longest.
    std::vector<std::vector<int64_t>> tokenized;
    std::size_t longest = 0;
    for (const std::string& p : prompts) {
        std::vector<int64_t> ids = tokenizer->truncated(tokenizer->tokenize(qwenimage_prompt(p)),
                                                        kTokenizerMaxLength + kDropIndex);
        longest = std::max(longest, ids.size());
        tokenized.push_back(std::move(ids));
    }
    std::vector<int64_t> ids;
    std::vector<int64_t> mask;
    std::vector<int64_t> lengths;
    for (const std::vector<int64_t>& t : tokenized) {
        const Qwen2Tokenizer::Encoding e = tokenizer->padded(t, longest);
        ids.insert(ids.end(), e.ids.begin(), e.ids.end());
        mask.insert(mask.end(), e.mask.begin(), e.mask.end());
        // The real tokens after the template's prefix, at most max_sequence_length of them.
        lengths.push_back(std::clamp<int64_t>(static_cast<int64_t>(t.size()) - kDropIndex, 0,
                                              static_cast<int64_t>(max_sequence_length)));
    }
    const auto tokens = static_cast<int64_t>(longest);
    const at::Device device = text_encoder->parameters().front().device();
    const at::Tensor id_tensor = at::tensor(ids, at::kLong).view({batch, tokens}).to(device);
    const at::Tensor mask_tensor = at::tensor(mask, at::kLong).view({batch, tokens}).to(device);
    const at::Tensor states = text_encoder->forward(id_tensor, mask_tensor, -1);
    return after_template(states, mask_tensor, kDropIndex, lengths);
}

TextConditioning QwenImageModel::encode_edit_prompts(
    const std::vector<std::string>& prompts, const std::vector<std::vector<at::Tensor>>& images) {
    TORCH_CHECK(text_encoder && tokenizer && vision,
                "the Qwen-Image-Edit text encoder was not loaded");
    TORCH_CHECK(variant != QwenImageVariant::kQwenImage && images.size() == prompts.size(),
                "an Edit prompt encoding needs each prompt's control images");
    const int64_t condition_area =
        variant == QwenImageVariant::kEdit ? kQwenEditVaeArea : kQwenEditConditionArea;
    const int64_t merge = vision->config().spatial_merge_size;
    // Each prompt's ids with every image placeholder expanded to its image's tokens, and the
    // images' patches in order.
    std::vector<std::vector<int64_t>> tokenized;
    std::vector<std::vector<std::array<int64_t, 3>>> grids;
    std::vector<VisionPatches> patches;
    std::size_t longest = 0;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        const std::vector<at::Tensor>& mine = images[i];
        if (mine.empty() || (variant == QwenImageVariant::kEdit && mine.size() != 1) ||
            mine.size() > kQwenEditPlusMaxImages) {
            throw Error("a Qwen-Image-Edit prompt takes " +
                        std::string(variant == QwenImageVariant::kEdit ? "one control image"
                                                                       : "one to three control "
                                                                         "images") +
                        "; got " + std::to_string(mine.size()));
        }
        std::vector<std::array<int64_t, 3>> g;
        for (const at::Tensor& image : mine) {
            const auto [w, h] = qwen_edit_dimensions(
                condition_area, static_cast<double>(image.size(1)) / image.size(0));
            {
                // The pipeline's resizes and its processor are host work (PIL, numpy); what the
                // vision tower reads comes to the device in its forward.
                HostAllocations host;
                patches.push_back(qwen2_vl_patches(image_processor,
                                                   pil_resize(image, w, h, PilFilter::kLanczos)));
            }
            const VisionPatches& p = patches.back();
            g.push_back({p.grid_t, p.grid_h / merge, p.grid_w / merge});
        }
        std::vector<int64_t> ids;
        std::size_t next = 0;
        for (int64_t id : tokenizer->tokenize(edit_prompt(variant, prompts[i], mine.size()))) {
            if (id != image_token_id) {
                ids.push_back(id);
                continue;
            }
            TORCH_CHECK(next < g.size(), "the Edit template has more placeholders than images");
            const auto& [t, h, w] = g[next++];
            ids.insert(ids.end(), static_cast<std::size_t>(t * h * w), image_token_id);
        }
        longest = std::max(longest, ids.size());
        tokenized.push_back(std::move(ids));
        grids.push_back(std::move(g));
    }
    const auto batch = static_cast<int64_t>(prompts.size());
    const auto tokens = static_cast<int64_t>(longest);
    std::vector<int64_t> ids, mask, lengths;
    at::Tensor positions = at::zeros({3, batch, tokens}, at::kLong);
    for (int64_t b = 0; b < batch; ++b) {
        const std::vector<int64_t>& t = tokenized[static_cast<std::size_t>(b)];
        const Qwen2Tokenizer::Encoding e = tokenizer->padded(t, longest);
        ids.insert(ids.end(), e.ids.begin(), e.ids.end());
        mask.insert(mask.end(), e.mask.begin(), e.mask.end());
        lengths.push_back(std::max<int64_t>(static_cast<int64_t>(t.size()) - kEditDropIndex, 0));
        // The real tokens' positions, wherever the padding side puts them.
        const at::Tensor real = at::tensor(e.mask, at::kLong).to(at::kBool);
        positions.select(1, b).index_put_(
            {at::indexing::Slice(), real},
            mrope_positions(t, image_token_id, grids[static_cast<std::size_t>(b)]));
    }
    const at::Device device = text_encoder->parameters().front().device();
    const at::Tensor id_tensor = at::tensor(ids, at::kLong).view({batch, tokens}).to(device);
    const at::Tensor mask_tensor = at::tensor(mask, at::kLong).view({batch, tokens}).to(device);
    at::Tensor embeds = text_encoder->embed(id_tensor);
    // The image placeholders' embeddings are the vision tower's tokens, in order.
    const at::Tensor features = vision->forward(patches).to(embeds.scalar_type());
    const at::Tensor is_image = (id_tensor == image_token_id).unsqueeze(-1).expand_as(embeds);
    embeds = embeds.masked_scatter(is_image, features);
    const at::Tensor states =
        text_encoder->forward_embeds(embeds, mask_tensor, positions.to(device), -1);
    return after_template(states, mask_tensor, kEditDropIndex, lengths);
}

at::Tensor qwen_edit_vae_pixels(const at::Tensor& image) {
    const auto [w, h] =
        qwen_edit_dimensions(kQwenEditVaeArea, static_cast<double>(image.size(1)) / image.size(0));
    // VaeImageProcessor.preprocess: bytes / 255 in float32, then 2x - 1.
    const at::Tensor resized = pil_resize(image, w, h, PilFilter::kLanczos);
    return (resized.permute({2, 0, 1}).to(at::kFloat) / 255.0) * 2 - 1;
}

QwenImageModel load_qwenimage(const std::filesystem::path& root, const QwenImageLoadOptions& o) {
    QwenImageModel model;
    model.folder = read_diffusers_folder(root);
    const std::string& pipeline = model.folder.pipeline_class;
    model.variant = pipeline == "QwenImageEditPipeline"       ? QwenImageVariant::kEdit
                    : pipeline == "QwenImageEditPlusPipeline" ? QwenImageVariant::kEditPlus
                                                              : QwenImageVariant::kQwenImage;
    if (model.variant == QwenImageVariant::kQwenImage)
        model.folder.require_pipeline("QwenImagePipeline");
    const bool edit = model.variant != QwenImageVariant::kQwenImage;
    std::vector<std::string> needed = {"transformer", "scheduler"};
    if (o.load_vae) needed.push_back("vae");
    // The Edit pipelines tokenize with their processor's tokenizer.
    if (o.load_text_encoder)
        needed.insert(needed.end(), {"text_encoder", edit ? "processor" : "tokenizer"});
    model.folder.require(needed);
    model.scheduler =
        read_flow_match_config(model.folder.dir("scheduler") / "scheduler_config.json");
    model.transformer = load_qwenimage_transformer(model.folder.dir("transformer"), o.dtype);
    if (o.load_vae) model.vae = load_wan_vae(model.folder.dir("vae"), o.dtype);
    if (o.load_text_encoder) {
        model.tokenizer = std::make_shared<Qwen2Tokenizer>(
            Qwen2Tokenizer::from_folder(model.folder.dir(edit ? "processor" : "tokenizer")));
        model.text_encoder = load_decoder_lm(model.folder.dir("text_encoder"), o.dtype);
        if (edit) {
            const std::filesystem::path te = model.folder.dir("text_encoder");
            model.vision = load_qwen2_5_vision(te, o.dtype);
            model.image_processor = read_qwen2_vl_image_processor(model.folder.dir("processor"));
            model.image_token_id =
                ConfigReader(te / "config.json").integer("image_token_id", model.image_token_id);
            if (model.vision->config().out_hidden_size != model.text_encoder->config().hidden_size)
                throw FormatError((te / "config.json").string(),
                                  "vision_config.out_hidden_size differs from the language "
                                  "model's hidden_size");
        }
        const int64_t hidden = model.text_encoder->config().hidden_size;
        if (hidden != model.transformer->config().blocks.joint_attention_dim) {
            throw FormatError(
                (model.folder.dir("transformer") / "config.json").string(),
                "'joint_attention_dim' is " +
                    std::to_string(model.transformer->config().blocks.joint_attention_dim) +
                    " but the text encoder's hidden_size is " + std::to_string(hidden));
        }
    }
    return model;
}

}  // namespace loom
