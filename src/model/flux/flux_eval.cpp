// The components `loom eval` runs for a FluxPipeline folder (model/component_eval.h): its
// transformer, T5 and the pipeline's prompt encoding, and the VAE and CLIP it shares with
// Stable Diffusion.

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/flux/flux_family.h"
#include "loom/model/text/t5_encoder.h"

namespace loom {

namespace {

EvalComponent transformer_component() {
    return {"transformer",
            "inputs hidden_states (packed), encoder_hidden_states, pooled_projections, timestep "
            "(sigma), img_ids, txt_ids (+ guidance for dev); output sample",
            [](const DiffusersFolder& folder, const EvalInputs& in) {
                FluxTransformer2DModel transformer = load_flux_transformer(folder);
                const FluxInputs inputs{in.get("hidden_states"),
                                        in.get("encoder_hidden_states"),
                                        in.get("pooled_projections"),
                                        in.get("timestep"),
                                        in.get("img_ids"),
                                        in.get("txt_ids"),
                                        in.get("guidance", false)};
                if (transformer->config().guidance_embeds && !inputs.guidance.defined()) {
                    throw FormatError(in.source(),
                                      "has no tensor 'guidance' (this Flux transformer has the "
                                      "guidance embedding: dev)");
                }
                return NamedTensors{{"sample", transformer->forward(inputs)}};
            }};
}

EvalComponent t5_component() {
    return {"text-encoder-2",
            "T5: input input_ids (or --prompt, --max-sequence-length tokens) and optional "
            "attention_mask; outputs input_ids, last_hidden_state",
            [](const DiffusersFolder& folder, const EvalInputs& in) {
                T5EncoderModel encoder = load_t5_encoder(folder, "text_encoder_2");
                return eval_t5(encoder, folder.dir("tokenizer_2"), in);
            }};
}

EvalComponent prompt_embeds_component() {
    return {"prompt-embeds",
            "--prompt as FluxPipeline.encode_prompt; outputs prompt_embeds, pooled_prompt_embeds",
            [](const DiffusersFolder& folder, const EvalInputs& in) {
                if (!in.prompt()) throw UsageError("loom eval prompt-embeds: --prompt is required");
                FluxLoadOptions options;
                options.load_vae = false;
                FluxModel flux = load_flux(folder.root, options);
                const TextConditioning c =
                    flux.encode_prompts({*in.prompt()}, in.max_sequence_length());
                return NamedTensors{{"prompt_embeds", c.context},
                                    {"pooled_prompt_embeds", c.text_embeds}};
            }};
}

}  // namespace

const std::vector<EvalComponent>& FluxFamily::eval_components() {
    static const std::vector<EvalComponent> components = {
        transformer_component(), t5_component(),         prompt_embeds_component(),
        vae_encode_component(),  vae_decode_component(), clip_text_encoder_component(false)};
    return components;
}

}  // namespace loom
