#include "loom/model/zimage/zimage_model.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"

namespace loom {

namespace {

// ZImagePipeline takes hidden_states[-2] of Qwen3: the last layer's input.
constexpr int64_t kHiddenState = -2;

}  // namespace

std::string zimage_chat_prompt(const std::string& prompt) {
    return "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n";
}

TextConditioning ZImageModel::encode_prompts(const std::vector<std::string>& prompts,
                                             std::size_t max_sequence_length) {
    TORCH_CHECK(text_encoder && tokenizer, "the Z-Image text encoder was not loaded");
    const auto batch = static_cast<int64_t>(prompts.size());
    const auto tokens = static_cast<int64_t>(max_sequence_length);
    std::vector<int64_t> ids;
    std::vector<int64_t> mask;
    for (const std::string& p : prompts) {
        const Qwen2Tokenizer::Encoding e =
            tokenizer->encode(zimage_chat_prompt(p), max_sequence_length);
        ids.insert(ids.end(), e.ids.begin(), e.ids.end());
        mask.insert(mask.end(), e.mask.begin(), e.mask.end());
    }
    const at::Device device = text_encoder->parameters().front().device();
    const at::Tensor id_tensor = at::tensor(ids, at::kLong).view({batch, tokens}).to(device);
    const at::Tensor mask_tensor = at::tensor(mask, at::kLong).view({batch, tokens}).to(device);
    const at::Tensor states = text_encoder->forward(id_tensor, mask_tensor, kHiddenState);
    auto [context, kept] = real_tokens_first(states, mask_tensor);
    TextConditioning out;
    out.context = std::move(context);
    out.context_mask = kept.to(at::kFloat).cpu();
    return out;
}

std::vector<int64_t> zimage_caption_lengths(const at::Tensor& context_mask) {
    TORCH_CHECK(context_mask.defined(), "Z-Image: the conditioning has no context mask");
    const at::Tensor sums = context_mask.to(at::kFloat).sum(1).round().to(at::kLong).cpu();
    return std::vector<int64_t>(sums.data_ptr<int64_t>(), sums.data_ptr<int64_t>() + sums.numel());
}

ZImageModel load_zimage(const std::filesystem::path& root, const ZImageLoadOptions& o) {
    ZImageModel model;
    model.folder = read_diffusers_folder(root);
    model.folder.require_pipeline("ZImagePipeline");
    std::vector<std::string> needed = {"transformer", "scheduler"};
    if (o.load_vae) needed.push_back("vae");
    if (o.load_text_encoder) needed.insert(needed.end(), {"text_encoder", "tokenizer"});
    model.folder.require(needed);
    model.scheduler =
        read_flow_match_config(model.folder.dir("scheduler") / "scheduler_config.json");
    model.transformer = load_zimage_transformer(model.folder.dir("transformer"), o.dtype);
    if (o.load_vae) model.vae = load_vae(model.folder, o.dtype);
    if (o.load_text_encoder) {
        model.tokenizer = std::make_shared<Qwen2Tokenizer>(
            Qwen2Tokenizer::from_folder(model.folder.dir("tokenizer")));
        model.text_encoder = load_decoder_lm(model.folder.dir("text_encoder"), o.dtype);
        const int64_t hidden = model.text_encoder->config().hidden_size;
        if (hidden != model.transformer->config().cap_feat_dim) {
            throw FormatError(
                (model.folder.dir("transformer") / "config.json").string(),
                "'cap_feat_dim' is " + std::to_string(model.transformer->config().cap_feat_dim) +
                    " but the text encoder's hidden_size is " + std::to_string(hidden));
        }
    }
    return model;
}

}  // namespace loom
