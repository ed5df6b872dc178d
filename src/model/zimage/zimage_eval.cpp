// The components `loom eval` runs for a ZImagePipeline folder (model/component_eval.h): its
// transformer, the pipeline's prompt encoding (chat template, Qwen3's hidden_states[-2] of the
// real tokens), and Flux's VAE.

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/zimage/zimage_family.h"

namespace loom {

namespace {

EvalComponent transformer_component() {
    return {"transformer",
            "inputs latents [B, C, H, W], captions [B, T, cap_feat_dim], caption_lengths [B] "
            "(int64) and timestep ((1000 - t) / 1000); output sample (before the pipeline "
            "negates it)",
            [](const DiffusersFolder& folder, const EvalInputs& in) {
                ZImageTransformer2DModel transformer =
                    load_zimage_transformer(folder.dir("transformer"));
                ZImageInputs inputs;
                inputs.latents = in.get("latents");
                inputs.captions = in.get("captions");
                const at::Tensor lengths = in.get("caption_lengths").to(at::kLong).contiguous();
                inputs.caption_lengths.assign(lengths.data_ptr<int64_t>(),
                                              lengths.data_ptr<int64_t>() + lengths.numel());
                inputs.timestep = in.get("timestep");
                return NamedTensors{{"sample", transformer->forward(inputs)}};
            }};
}

EvalComponent prompt_embeds_component() {
    return {"prompt-embeds",
            "--prompt as ZImagePipeline.encode_prompt; outputs prompt_embeds [T, hidden] (the "
            "real tokens' hidden_states[-2])",
            [](const DiffusersFolder& folder, const EvalInputs& in) {
                if (!in.prompt()) throw UsageError("loom eval prompt-embeds: --prompt is required");
                ZImageLoadOptions options;
                options.load_vae = false;
                ZImageModel model = load_zimage(folder.root, options);
                const TextConditioning c =
                    model.encode_prompts({*in.prompt()}, in.max_sequence_length());
                const int64_t length = zimage_caption_lengths(c.context_mask).front();
                return NamedTensors{{"prompt_embeds", c.context[0].narrow(0, 0, length)}};
            }};
}

}  // namespace

const std::vector<EvalComponent>& ZImageFamily::eval_components() {
    static const std::vector<EvalComponent> components = {
        transformer_component(), prompt_embeds_component(), vae_encode_component(),
        vae_decode_component()};
    return components;
}

}  // namespace loom
