#include "loom/model/component_eval.h"

#include <ATen/ATen.h>

#include <utility>

#include "loom/core/error.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/sd/stable_diffusion.h"
#include "loom/model/text/t5_encoder.h"
#include "loom/model/tokenizers/t5_tokenizer.h"

namespace loom {

EvalInputs::EvalInputs(std::string source, NamedTensors tensors, std::optional<std::string> prompt,
                       std::size_t max_sequence_length)
    : source_(std::move(source)),
      tensors_(std::move(tensors)),
      prompt_(std::move(prompt)),
      max_sequence_length_(max_sequence_length) {}

at::Tensor EvalInputs::get(const std::string& name, bool needed) const {
    for (const auto& [n, t] : tensors_) {
        if (n == name) return t;
    }
    if (needed)
        throw FormatError(source_, "has no tensor '" + name + "' (this component needs it)");
    return {};
}

EvalComponent vae_encode_component() {
    return {"vae-encode", "input sample (image in [-1, 1]); outputs mean, logvar",
            [](const DiffusersFolder& folder, const EvalInputs& in) {
                AutoencoderKL vae = load_vae(folder);
                const LatentDistribution d = vae->encode(in.get("sample"));
                return NamedTensors{{"mean", d.mean}, {"logvar", d.logvar}};
            }};
}

EvalComponent vae_decode_component() {
    return {"vae-decode", "input latents (unscaled); output sample",
            [](const DiffusersFolder& folder, const EvalInputs& in) {
                AutoencoderKL vae = load_vae(folder);
                return NamedTensors{{"sample", vae->decode(in.get("latents"))}};
            }};
}

EvalComponent clip_text_encoder_component(bool second) {
    return {second ? "text-encoder-2" : "text-encoder",
            second ? "the same for SDXL's second encoder (text_encoder_2, tokenizer_2)"
                   : "input input_ids (or --prompt); outputs last_hidden_state, pooler_output, "
                     "penultimate_hidden_state (+ text_embeds with a projection)",
            [second](const DiffusersFolder& folder, const EvalInputs& in) {
                CLIPTextModel encoder =
                    load_text_encoder(folder, second ? "text_encoder_2" : "text_encoder");
                at::Tensor ids;
                if (in.prompt()) {
                    const CLIPTokenizer tok = CLIPTokenizer::from_folder(
                        folder.dir(second ? "tokenizer_2" : "tokenizer"));
                    ids = at::tensor(tok.encode(*in.prompt()), at::kLong).unsqueeze(0);
                } else {
                    ids = in.get("input_ids");
                }
                const CLIPTextOutput o = encoder->forward(ids);
                NamedTensors out{{"input_ids", ids},
                                 {"last_hidden_state", o.last_hidden_state},
                                 {"pooler_output", o.pooler_output},
                                 {"penultimate_hidden_state", o.penultimate_hidden_state}};
                if (o.text_embeds.defined()) out.emplace_back("text_embeds", o.text_embeds);
                return out;
            }};
}

NamedTensors eval_t5(T5EncoderModel& encoder, const std::filesystem::path& tokenizer_dir,
                     const EvalInputs& in) {
    at::Tensor ids;
    at::Tensor mask;
    if (in.prompt()) {
        const T5Tokenizer tok = T5Tokenizer::from_folder(tokenizer_dir);
        ids =
            at::tensor(tok.encode(*in.prompt(), in.max_sequence_length()), at::kLong).unsqueeze(0);
    } else {
        ids = in.get("input_ids");
        mask = in.get("attention_mask", false);
    }
    return {{"input_ids", ids}, {"last_hidden_state", encoder->forward(ids, mask)}};
}

}  // namespace loom
