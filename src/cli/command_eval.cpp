// loom eval COMPONENT --model DIR --inputs IN.safetensors --out OUT.safetensors: runs one model
// component on given inputs, to check a checkpoint against a reference implementation (the
// parity tests drive it).

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <iostream>

#include "command.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/io/safetensors.h"
#include "loom/model/flux_model.h"
#include "loom/model/model_location.h"
#include "loom/model/stable_diffusion.h"
#include "loom/model/tensor_file.h"
#include "options.h"

namespace loom::cli {

namespace {

const char* const kComponents =
    "unet, transformer, vae-encode, vae-decode, text-encoder, text-encoder-2, prompt-embeds, "
    "t5-encoder";

cxxopts::Options eval_options() {
    cxxopts::Options options(
        "loom eval",
        "Run one model component on inputs from a safetensors file and write its outputs.\n"
        "  unet           inputs sample, timestep, encoder_hidden_states (+ text_embeds, "
        "time_ids for sdxl); output sample\n"
        "  vae-encode     input sample (image in [-1, 1]); outputs mean, logvar\n"
        "  vae-decode     input latents (unscaled); output sample\n"
        "  text-encoder   input input_ids (or --prompt); outputs last_hidden_state, "
        "pooler_output, penultimate_hidden_state (+ text_embeds with a projection)\n"
        "  text-encoder-2 the same for SDXL's second encoder; for Flux, T5: input input_ids (or "
        "--prompt, --max-sequence-length tokens) and optional attention_mask; outputs input_ids, "
        "last_hidden_state\n"
        "  transformer    Flux: inputs hidden_states (packed), encoder_hidden_states, "
        "pooled_projections, timestep (sigma), img_ids, txt_ids (+ guidance for dev); output "
        "sample\n"
        "  prompt-embeds  Flux: --prompt as FluxPipeline.encode_prompt; outputs prompt_embeds, "
        "pooled_prompt_embeds\n"
        "  t5-encoder     --model is a T5EncoderModel / UMT5EncoderModel folder (config.json and "
        "weights); inputs as text-encoder-2");
    options.positional_help("COMPONENT");
    options.add_options()("component", "Component", cxxopts::value<std::string>())(
        "model", "Diffusers model folder (required)", cxxopts::value<std::string>(), "DIR")(
        "inputs", "Input tensors (safetensors; default: none)", cxxopts::value<std::string>(),
        "FILE")("out", "Output file (safetensors, required)", cxxopts::value<std::string>(),
                "FILE")(
        "prompt",
        "Text encoders: tokenize this prompt instead of reading input_ids (default: none)",
        cxxopts::value<std::string>(),
        "TEXT")("max-sequence-length", "T5 tokens for --prompt (the Flux pipeline's 512)",
                cxxopts::value<long long>()->default_value("512"), "N");
    options.parse_positional({"component"});
    return options;
}

std::string required(const cxxopts::ParseResult& parsed, const char* key) {
    if (!parsed.count(key)) {
        throw UsageError(std::string("loom eval: --") + key +
                         " is required (see `loom help eval`)");
    }
    return parsed[key].as<std::string>();
}

class Inputs {
  public:
    explicit Inputs(const std::string& path) : path_(path) {
        if (!path.empty()) tensors_ = read_all_tensors(path);
    }
    at::Tensor get(const std::string& name, bool needed = true) const {
        for (const auto& [n, t] : tensors_) {
            if (n == name) return t;
        }
        if (needed) {
            throw FormatError(path_.empty() ? "--inputs" : path_,
                              "has no tensor '" + name + "' (this component needs it)");
        }
        return {};
    }

  private:
    std::string path_;
    NamedTensors tensors_;
};

std::size_t max_sequence_length(const cxxopts::ParseResult& parsed) {
    const long long n = parsed["max-sequence-length"].as<long long>();
    if (n < 1) throw UsageError("loom eval: --max-sequence-length must be at least 1");
    return static_cast<std::size_t>(n);
}

// A T5 encoder's outputs for --prompt (tokenized with `tokenizer_dir`) or the input_ids.
void eval_t5(T5EncoderModel& encoder, const std::filesystem::path& tokenizer_dir,
             const cxxopts::ParseResult& parsed, const Inputs& in, NamedTensors& out) {
    at::Tensor ids;
    at::Tensor mask;
    if (parsed.count("prompt")) {
        const T5Tokenizer tok = T5Tokenizer::from_folder(tokenizer_dir);
        ids =
            at::tensor(tok.encode(parsed["prompt"].as<std::string>(), max_sequence_length(parsed)),
                       at::kLong)
                .unsqueeze(0);
    } else {
        ids = in.get("input_ids");
        mask = in.get("attention_mask", false);
    }
    out.emplace_back("input_ids", ids);
    out.emplace_back("last_hidden_state", encoder->forward(ids, mask));
}

// The components of a FluxPipeline folder; false for a component Flux does not have.
bool eval_flux(const std::string& component, const DiffusersFolder& folder,
               const cxxopts::ParseResult& parsed, const Inputs& in, NamedTensors& out) {
    if (component == "transformer") {
        FluxTransformer2DModel transformer = load_flux_transformer(folder);
        const FluxInputs inputs{in.get("hidden_states"),
                                in.get("encoder_hidden_states"),
                                in.get("pooled_projections"),
                                in.get("timestep"),
                                in.get("img_ids"),
                                in.get("txt_ids"),
                                in.get("guidance", false)};
        if (transformer->config().guidance_embeds && !inputs.guidance.defined()) {
            throw FormatError(parsed["inputs"].as<std::string>(),
                              "has no tensor 'guidance' (this Flux transformer has the guidance "
                              "embedding: dev)");
        }
        out.emplace_back("sample", transformer->forward(inputs));
        return true;
    }
    if (component == "text-encoder-2") {
        T5EncoderModel encoder = load_t5_encoder(folder, "text_encoder_2");
        eval_t5(encoder, folder.dir("tokenizer_2"), parsed, in, out);
        return true;
    }
    if (component == "prompt-embeds") {
        if (!parsed.count("prompt"))
            throw UsageError("loom eval prompt-embeds: --prompt is required");
        FluxLoadOptions options;
        options.load_vae = false;
        FluxModel flux = load_flux(folder.root, options);
        const TextConditioning c =
            flux.encode_prompts({parsed["prompt"].as<std::string>()}, max_sequence_length(parsed));
        out.emplace_back("prompt_embeds", c.context);
        out.emplace_back("pooled_prompt_embeds", c.text_embeds);
        return true;
    }
    return false;
}

// The components of an SD 1.x / SDXL folder (and Flux's VAE and CLIP, which are the same).
void eval_sd(const std::string& component, const DiffusersFolder& folder,
             const cxxopts::ParseResult& parsed, const Inputs& in, NamedTensors& out) {
    if (component == "unet") {
        UNet2DConditionModel unet = load_unet(folder);
        out.emplace_back(
            "sample",
            unet->forward(in.get("sample"), in.get("timestep"), in.get("encoder_hidden_states"),
                          in.get("text_embeds", false), in.get("time_ids", false)));
    } else if (component == "vae-encode") {
        AutoencoderKL vae = load_vae(folder);
        const LatentDistribution d = vae->encode(in.get("sample"));
        out.emplace_back("mean", d.mean);
        out.emplace_back("logvar", d.logvar);
    } else if (component == "vae-decode") {
        AutoencoderKL vae = load_vae(folder);
        out.emplace_back("sample", vae->decode(in.get("latents")));
    } else if (component == "text-encoder" || component == "text-encoder-2") {
        const bool second = component == "text-encoder-2";
        const std::string name = second ? "text_encoder_2" : "text_encoder";
        CLIPTextModel encoder = load_text_encoder(folder, name);
        at::Tensor ids;
        if (parsed.count("prompt")) {
            const CLIPTokenizer tok =
                CLIPTokenizer::from_folder(folder.dir(second ? "tokenizer_2" : "tokenizer"));
            ids =
                at::tensor(tok.encode(parsed["prompt"].as<std::string>()), at::kLong).unsqueeze(0);
        } else {
            ids = in.get("input_ids");
        }
        const CLIPTextOutput o = encoder->forward(ids);
        out.emplace_back("input_ids", ids);
        out.emplace_back("last_hidden_state", o.last_hidden_state);
        out.emplace_back("pooler_output", o.pooler_output);
        out.emplace_back("penultimate_hidden_state", o.penultimate_hidden_state);
        if (o.text_embeds.defined()) out.emplace_back("text_embeds", o.text_embeds);
    } else {
        throw UsageError("loom eval: unknown component '" + component + "' (use " + kComponents +
                         ")");
    }
}

int run_eval(const std::vector<std::string>& args) {
    cxxopts::Options options = eval_options();
    const cxxopts::ParseResult parsed = parse_options(options, "eval", args);
    const std::string component = required(parsed, "component");
    const std::string model_dir = locate_model(required(parsed, "model")).string();
    const std::string out_path = required(parsed, "out");
    const Inputs in(parsed.count("inputs") ? parsed["inputs"].as<std::string>() : "");
    torch::NoGradGuard no_grad;
    NamedTensors out;
    if (component == "t5-encoder") {  // a bare component folder, no model_index.json
        T5EncoderModel encoder(read_t5_config(std::filesystem::path(model_dir) / "config.json"));
        load_t5_weights(*encoder, find_weight_files(model_dir), "t5-encoder");
        encoder->eval();
        eval_t5(encoder, model_dir, parsed, in, out);
    } else {
        const DiffusersFolder folder = read_diffusers_folder(model_dir);
        if (!is_flux_pipeline(folder) || !eval_flux(component, folder, parsed, in, out)) {
            eval_sd(component, folder, parsed, in, out);
        }
    }
    write_tensors(out_path, out);
    std::cerr << "wrote " << out.size() << " tensor(s) to " << out_path << "\n";
    return to_int(ExitCode::kOk);
}

}  // namespace

Command make_eval_command() {
    return {"eval", "Run one model component on given inputs (checkpoint checks, parity tests)",
            [] { return eval_options().help(); }, run_eval};
}

}  // namespace loom::cli
