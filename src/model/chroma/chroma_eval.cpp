// The components `loom eval` runs for a ChromaPipeline folder (model/component_eval.h): its
// transformer, T5 and the pipeline's prompt encoding with its mask, and Flux's VAE.

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/chroma/chroma_family.h"
#include "loom/model/text/t5_encoder.h"

namespace loom {

namespace {

EvalComponent transformer_component() {
    return {"transformer",
            "inputs hidden_states (packed), encoder_hidden_states, timestep (sigma), img_ids, "
            "txt_ids and optional attention_mask (text then image tokens, float); output sample",
            [](const DiffusersFolder& folder, const EvalInputs& in) {
                ChromaTransformer2DModel transformer =
                    load_chroma_transformer(folder.dir("transformer"));
                ChromaInputs inputs;
                inputs.hidden_states = in.get("hidden_states");
                inputs.encoder_hidden_states = in.get("encoder_hidden_states");
                inputs.timestep = in.get("timestep");
                inputs.img_ids = in.get("img_ids");
                inputs.txt_ids = in.get("txt_ids");
                inputs.attention_mask = in.get("attention_mask", false);
                return NamedTensors{{"sample", transformer->forward(inputs)}};
            }};
}

EvalComponent prompt_embeds_component() {
    return {
        "prompt-embeds",
        "--prompt as ChromaPipeline.encode_prompt; outputs prompt_embeds, attention_mask "
        "(the text mask the transformer is given)",
        [](const DiffusersFolder& folder, const EvalInputs& in) {
            if (!in.prompt()) throw UsageError("loom eval prompt-embeds: --prompt is required");
            ChromaLoadOptions options;
            options.load_vae = false;
            ChromaModel chroma = load_chroma(folder.root, options);
            const TextConditioning c =
                chroma.encode_prompts({*in.prompt()}, in.max_sequence_length());
            return NamedTensors{{"prompt_embeds", c.context}, {"attention_mask", c.context_mask}};
        }};
}

}  // namespace

const std::vector<EvalComponent>& ChromaFamily::eval_components() {
    static const std::vector<EvalComponent> components = {
        transformer_component(),
        {"text-encoder",
         "T5: input input_ids (or --prompt, --max-sequence-length tokens) and optional "
         "attention_mask; outputs input_ids, last_hidden_state",
         [](const DiffusersFolder& folder, const EvalInputs& in) {
             T5EncoderModel encoder = load_t5_encoder(folder, "text_encoder");
             return eval_t5(encoder, folder.dir("tokenizer"), in);
         }},
        prompt_embeds_component(),
        vae_encode_component(),
        vae_decode_component()};
    return components;
}

}  // namespace loom
