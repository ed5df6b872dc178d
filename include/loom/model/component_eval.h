#pragma once

// One model component run on given inputs, for `loom eval` (cli/command_eval.cpp): a
// checkpoint checked against a reference implementation, tensor for tensor — the parity tests
// drive it. Each family lists the components its folders hold (family_registry.h), sharing the
// ones it reuses (Flux's VAE and CLIP are Stable Diffusion's), so the command names no family.

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "loom/model/loading/tensor_file.h"

namespace loom {

struct DiffusersFolder;
class T5EncoderModel;

// The --inputs tensors (by name) and the prompt options of one evaluation.
class EvalInputs {
  public:
    // `source` names the inputs in errors (the --inputs file, or "--inputs" when none was given).
    EvalInputs(std::string source, NamedTensors tensors, std::optional<std::string> prompt,
               std::size_t max_sequence_length);

    // The tensor `name`; FormatError naming the source when it is absent and `needed`, else
    // an undefined tensor.
    at::Tensor get(const std::string& name, bool needed = true) const;
    // --prompt: text encoders tokenize it instead of reading input_ids.
    const std::optional<std::string>& prompt() const { return prompt_; }
    std::size_t max_sequence_length() const { return max_sequence_length_; }
    const std::string& source() const { return source_; }

  private:
    std::string source_;
    NamedTensors tensors_;
    std::optional<std::string> prompt_;
    std::size_t max_sequence_length_;
};

struct EvalComponent {
    const char* name;  // "unet", "vae-encode", ...
    const char* help;  // its inputs and outputs, for `loom help eval`
    std::function<NamedTensors(const DiffusersFolder& folder, const EvalInputs& inputs)> run;
};

// Components several families share: the AutoencoderKL ("vae-encode", "vae-decode") and a CLIP
// text encoder: "text-encoder" reads text_encoder and tokenizer, "text-encoder-2" (SDXL's
// OpenCLIP bigG, with its projection) text_encoder_2 and tokenizer_2.
EvalComponent vae_encode_component();
EvalComponent vae_decode_component();
EvalComponent clip_text_encoder_component(bool second);
// A T5 / UMT5 encoder's outputs for the prompt (tokenized from `tokenizer_dir`) or the
// input_ids (with an optional attention_mask): input_ids, last_hidden_state.
NamedTensors eval_t5(T5EncoderModel& encoder, const std::filesystem::path& tokenizer_dir,
                     const EvalInputs& inputs);

}  // namespace loom
