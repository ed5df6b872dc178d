#include "loom/model/qwenimage/qwenimage_model.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "loom/core/error.h"

namespace loom {

namespace {

// QwenImagePipeline.prompt_template_encode_start_idx: the template's tokens before the prompt.
constexpr int64_t kDropIndex = 34;
// QwenImagePipeline.tokenizer_max_length.
constexpr std::size_t kTokenizerMaxLength = 1024;

}  // namespace

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
    // The real tokens first, then those past the template's prefix.
    const at::Tensor real = real_tokens_first(states, mask_tensor).first;
    const int64_t width = *std::max_element(lengths.begin(), lengths.end());
    TextConditioning out;
    out.context = at::zeros({batch, width, states.size(2)}, states.options());
    out.context_mask = at::zeros({batch, width}, at::kFloat);
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t n = lengths[static_cast<std::size_t>(b)];
        if (n == 0) continue;
        out.context[b].narrow(0, 0, n).copy_(real[b].narrow(0, kDropIndex, n));
        out.context_mask[b].narrow(0, 0, n).fill_(1);
    }
    return out;
}

QwenImageModel load_qwenimage(const std::filesystem::path& root, const QwenImageLoadOptions& o) {
    QwenImageModel model;
    model.folder = read_diffusers_folder(root);
    model.folder.require_pipeline("QwenImagePipeline");
    std::vector<std::string> needed = {"transformer", "scheduler"};
    if (o.load_vae) needed.push_back("vae");
    if (o.load_text_encoder) needed.insert(needed.end(), {"text_encoder", "tokenizer"});
    model.folder.require(needed);
    model.scheduler =
        read_flow_match_config(model.folder.dir("scheduler") / "scheduler_config.json");
    model.transformer = load_qwenimage_transformer(model.folder.dir("transformer"), o.dtype);
    if (o.load_vae) model.vae = load_wan_vae(model.folder.dir("vae"), o.dtype);
    if (o.load_text_encoder) {
        model.tokenizer = std::make_shared<Qwen2Tokenizer>(
            Qwen2Tokenizer::from_folder(model.folder.dir("tokenizer")));
        model.text_encoder = load_decoder_lm(model.folder.dir("text_encoder"), o.dtype);
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
