#include "loom/model/chroma/chroma_model.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"

namespace loom {

TextConditioning ChromaModel::encode_prompts(const std::vector<std::string>& prompts,
                                             std::size_t max_sequence_length) {
    TORCH_CHECK(text_encoder && tokenizer, "the Chroma text encoder was not loaded");
    const auto batch = static_cast<int64_t>(prompts.size());
    const auto tokens = static_cast<int64_t>(max_sequence_length);
    std::vector<int64_t> ids;
    std::vector<int64_t> lengths;  // the tokenizer mask's sum: the prompt's ids and its "</s>"
    for (const std::string& p : prompts) {
        const auto t = tokenizer->encode(p, max_sequence_length);
        int64_t length = 0;
        for (int64_t id : t) length += id != tokenizer->pad_id() ? 1 : 0;
        ids.insert(ids.end(), t.begin(), t.end());
        lengths.push_back(length);
    }
    const at::Device device = text_encoder->parameters().front().device();
    const at::Tensor index = at::arange(tokens, at::kLong).unsqueeze(0);
    const at::Tensor length = at::tensor(lengths, at::kLong).unsqueeze(1);
    const at::Tensor tokenizer_mask = (index < length).to(at::kLong);
    TextConditioning out;
    out.context = text_encoder->forward(at::tensor(ids, at::kLong).view({batch, tokens}).to(device),
                                        tokenizer_mask.to(device));
    // The first padding token stays visible to the transformer (index <= length): Chroma was
    // trained so, its end-of-prompt marker being that token's attention.
    out.context_mask = (index <= length).to(at::kFloat).expand({batch, tokens}).contiguous();
    return out;
}

at::Tensor chroma_joint_mask(const at::Tensor& context_mask, int64_t image_tokens) {
    return at::cat(
        {context_mask.to(at::kFloat),
         at::ones({context_mask.size(0), image_tokens}, context_mask.options().dtype(at::kFloat))},
        1);
}

ChromaModel load_chroma(const std::filesystem::path& root, const ChromaLoadOptions& o) {
    ChromaModel chroma;
    chroma.folder = read_diffusers_folder(root);
    chroma.folder.require_pipeline("ChromaPipeline");
    std::vector<std::string> needed = {"transformer", "scheduler"};
    if (o.load_vae) needed.push_back("vae");
    if (o.load_text_encoder) needed.insert(needed.end(), {"text_encoder", "tokenizer"});
    chroma.folder.require(needed);
    chroma.scheduler =
        read_flow_match_config(chroma.folder.dir("scheduler") / "scheduler_config.json");
    chroma.transformer = load_chroma_transformer(chroma.folder.dir("transformer"), o.dtype);
    if (o.load_vae) chroma.vae = load_vae(chroma.folder, o.dtype);
    if (o.load_text_encoder) {
        chroma.tokenizer =
            std::make_shared<T5Tokenizer>(T5Tokenizer::from_folder(chroma.folder.dir("tokenizer")));
        chroma.text_encoder = load_t5_encoder(chroma.folder, "text_encoder", o.dtype);
    }
    return chroma;
}

}  // namespace loom
