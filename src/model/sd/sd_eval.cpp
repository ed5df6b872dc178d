// The components `loom eval` runs for an SD 1.x / 2.x / SDXL folder (model/component_eval.h).

#include <ATen/ATen.h>

#include "loom/model/sd/sd_family.h"

namespace loom {

namespace {

EvalComponent unet_component() {
    return {"unet",
            "inputs sample, timestep, encoder_hidden_states (+ text_embeds, time_ids for sdxl); "
            "output sample",
            [](const DiffusersFolder& folder, const EvalInputs& in) {
                UNet2DConditionModel unet = load_unet(folder);
                return NamedTensors{{"sample", unet->forward(in.get("sample"), in.get("timestep"),
                                                             in.get("encoder_hidden_states"),
                                                             in.get("text_embeds", false),
                                                             in.get("time_ids", false))}};
            }};
}

}  // namespace

const std::vector<EvalComponent>& StableDiffusionFamily::eval_components() {
    static const std::vector<EvalComponent> components = {
        unet_component(), vae_encode_component(), vae_decode_component(),
        clip_text_encoder_component(false), clip_text_encoder_component(true)};
    return components;
}

}  // namespace loom
