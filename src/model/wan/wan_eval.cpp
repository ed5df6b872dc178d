// The components `loom eval` runs for a WanPipeline folder (model/component_eval.h): UMT5.

#include <ATen/ATen.h>

#include "loom/model/text/t5_encoder.h"
#include "loom/model/wan/wan_family.h"

namespace loom {

const std::vector<EvalComponent>& WanFamily::eval_components() {
    static const std::vector<EvalComponent> components = {
        {"text-encoder",
         "UMT5: input input_ids (or --prompt, --max-sequence-length tokens) and optional "
         "attention_mask; outputs input_ids, last_hidden_state",
         [](const DiffusersFolder& folder, const EvalInputs& in) {
             T5EncoderModel encoder = load_t5_encoder(folder, "text_encoder");
             return eval_t5(encoder, folder.dir("tokenizer"), in);
         }}};
    return components;
}

}  // namespace loom
