// The components `loom eval` runs for a QwenImagePipeline folder (model/component_eval.h): its
// transformer and the pipeline's prompt encoding.

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/qwenimage/qwenimage_family.h"

namespace loom {

namespace {

EvalComponent qwenimage_transformer_component() {
    return {"transformer",
            "inputs hidden_states (packed), encoder_hidden_states, optional "
            "encoder_hidden_states_mask, timestep (sigma), height and width (the packed grid, "
            "int64 scalars); output sample",
            [](const DiffusersFolder& folder, const EvalInputs& in) {
                QwenImageTransformer2DModel transformer =
                    load_qwenimage_transformer(folder.dir("transformer"));
                QwenImageInputs inputs;
                inputs.hidden_states = in.get("hidden_states");
                inputs.encoder_hidden_states = in.get("encoder_hidden_states");
                inputs.encoder_hidden_states_mask = in.get("encoder_hidden_states_mask", false);
                inputs.timestep = in.get("timestep");
                inputs.height = in.get("height").item<int64_t>();
                inputs.width = in.get("width").item<int64_t>();
                return NamedTensors{{"sample", transformer->forward(inputs)}};
            }};
}

EvalComponent qwenimage_prompt_embeds_component() {
    return {"prompt-embeds",
            "--prompt as QwenImagePipeline.encode_prompt; outputs prompt_embeds, "
            "prompt_embeds_mask",
            [](const DiffusersFolder& folder, const EvalInputs& in) {
                if (!in.prompt()) throw UsageError("loom eval prompt-embeds: --prompt is required");
                QwenImageLoadOptions options;
                options.load_vae = false;
                QwenImageModel model = load_qwenimage(folder.root, options);
                const TextConditioning c = model.encode_prompts({*in.prompt()});
                return NamedTensors{{"prompt_embeds", c.context},
                                    {"prompt_embeds_mask", c.context_mask}};
            }};
}

}  // namespace

const std::vector<EvalComponent>& QwenImageFamily::eval_components() {
    static const std::vector<EvalComponent> components = {qwenimage_transformer_component(),
                                                          qwenimage_prompt_embeds_component()};
    return components;
}

}  // namespace loom
