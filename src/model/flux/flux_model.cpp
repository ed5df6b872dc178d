#include "loom/model/flux/flux_model.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/flux/flex2_channels.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/text/clip_text_model.h"
#include "loom/model/vae/autoencoder_kl.h"

namespace loom {

// Kontext is Flux.1 dev fine-tuned on (target, control) pairs: the same folder layout and the
// same transformer, its control latents joined on the sequence at predict time.
bool is_flux_pipeline(const DiffusersFolder& folder) {
    return folder.pipeline_class == "FluxPipeline" ||
           folder.pipeline_class == "FluxKontextPipeline";
}

bool FluxModel::flex2() const {
    return is_flex2_transformer(transformer->config());
}

FluxTransformer2DModel load_flux_transformer(const DiffusersFolder& folder, at::ScalarType dtype) {
    return load_component(
        FluxTransformer2DModel(read_flux_config(folder.dir("transformer") / "config.json")),
        folder.dir("transformer"), dtype, "transformer");
}

FluxModel load_flux(const std::filesystem::path& root, const FluxLoadOptions& o) {
    FluxModel flux;
    flux.folder = read_diffusers_folder(root);
    const std::filesystem::path index = root / "model_index.json";
    if (!is_flux_pipeline(flux.folder)) {
        throw FormatError(index.string(), "pipeline class '" + flux.folder.pipeline_class +
                                              "' is neither FluxPipeline nor FluxKontextPipeline");
    }
    std::vector<std::string> needed = {"transformer", "scheduler"};
    if (o.load_vae) needed.push_back("vae");
    if (o.load_text_encoders) {
        needed.insert(needed.end(), {"text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2"});
    }
    flux.folder.require(needed);
    flux.scheduler = read_flow_match_config(flux.folder.dir("scheduler") / "scheduler_config.json");
    flux.transformer = load_flux_transformer(flux.folder, o.dtype);
    if (o.load_vae) flux.vae = load_vae(flux.folder, o.dtype);
    if (o.load_text_encoders) {
        flux.tokenizer = std::make_shared<CLIPTokenizer>(
            CLIPTokenizer::from_folder(flux.folder.dir("tokenizer")));
        flux.tokenizer_2 =
            std::make_shared<T5Tokenizer>(T5Tokenizer::from_folder(flux.folder.dir("tokenizer_2")));
        flux.text_encoder = load_text_encoder(flux.folder, "text_encoder", o.dtype);
        flux.text_encoder_2 = load_t5_encoder(flux.folder, "text_encoder_2", o.dtype);
    }
    return flux;
}

TextConditioning FluxModel::encode_prompts(const std::vector<std::string>& prompts,
                                           std::size_t max_sequence_length) {
    TORCH_CHECK(text_encoder && text_encoder_2 && tokenizer && tokenizer_2,
                "the Flux text encoders were not loaded");
    const auto batch = static_cast<int64_t>(prompts.size());
    std::vector<int64_t> clip_ids;
    std::vector<int64_t> t5_ids;
    for (const std::string& p : prompts) {
        const auto c = tokenizer->encode(p);
        clip_ids.insert(clip_ids.end(), c.begin(), c.end());
        const auto t = tokenizer_2->encode(p, max_sequence_length);
        t5_ids.insert(t5_ids.end(), t.begin(), t.end());
    }
    const at::Device clip_device = text_encoder->parameters().front().device();
    const at::Device t5_device = text_encoder_2->parameters().front().device();
    TextConditioning out;
    out.text_embeds =
        text_encoder->forward(at::tensor(clip_ids, at::kLong).view({batch, -1}).to(clip_device))
            .pooler_output;
    out.context =
        text_encoder_2->forward(at::tensor(t5_ids, at::kLong).view({batch, -1}).to(t5_device));
    return out;
}

}  // namespace loom
