// loom eval COMPONENT --model DIR --inputs IN.safetensors --out OUT.safetensors: runs one model
// component on given inputs, to check a checkpoint against a reference implementation (the
// parity tests drive it).

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "command.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/io/safetensors.h"
#include "loom/model/component_eval.h"
#include "loom/model/family_registry.h"
#include "loom/model/loading/model_location.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/text/t5_encoder.h"
#include "options.h"

namespace loom::cli {

namespace {

// "t5-encoder" is a bare T5EncoderModel / UMT5EncoderModel folder (config.json and weights, no
// model_index.json); every other component is its family's (model/family_registry.h).
constexpr const char* kBareT5 = "t5-encoder";

// Each family's components, for the help and the error naming what a folder offers.
std::string component_help() {
    std::string out;
    for (const FamilyEntry& family : family_table()) {
        for (const EvalComponent& c : family.eval_components()) {
            out +=
                std::string("\n  ") + config::to_string(family.kind) + " " + c.name + ": " + c.help;
        }
    }
    return out + "\n  " + kBareT5 +
           ": --model is a T5EncoderModel / UMT5EncoderModel folder (config.json and weights); "
           "inputs as a T5 text encoder's";
}

cxxopts::Options eval_options() {
    cxxopts::Options options(
        "loom eval",
        "Run one model component on inputs from a safetensors file and write its outputs. The "
        "components, by family:" +
            component_help());
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

EvalInputs eval_inputs(const cxxopts::ParseResult& parsed) {
    const long long n = parsed["max-sequence-length"].as<long long>();
    if (n < 1) throw UsageError("loom eval: --max-sequence-length must be at least 1");
    std::optional<std::string> prompt;
    if (parsed.count("prompt")) prompt = parsed["prompt"].as<std::string>();
    if (!parsed.count("inputs")) {
        return EvalInputs("--inputs", {}, std::move(prompt), static_cast<std::size_t>(n));
    }
    const std::string path = parsed["inputs"].as<std::string>();
    return EvalInputs(path, read_all_tensors(path), std::move(prompt), static_cast<std::size_t>(n));
}

// The folder's family's component `name`: a UsageError listing the family's components when it
// has none of that name.
NamedTensors run_component(const std::string& name, const DiffusersFolder& folder,
                           const EvalInputs& in) {
    const config::Arch arch = detect_arch(folder);
    const FamilyEntry& family = family_entry(config::arch_info(arch).family);
    std::string names;
    for (const EvalComponent& c : family.eval_components()) {
        if (c.name == name) return c.run(folder, in);
        names += (names.empty() ? "" : ", ") + std::string(c.name);
    }
    throw UsageError("loom eval: unknown component '" + name + "' for a " +
                     config::arch_info(arch).display_name + " folder (use " + names + ", or " +
                     kBareT5 + " on a T5 folder)");
}

int run_eval(const std::vector<std::string>& args) {
    cxxopts::Options options = eval_options();
    const cxxopts::ParseResult parsed = parse_options(options, "eval", args);
    const std::string component = required(parsed, "component");
    const std::string model_dir = locate_model(required(parsed, "model")).string();
    const std::string out_path = required(parsed, "out");
    const EvalInputs in = eval_inputs(parsed);
    torch::NoGradGuard no_grad;
    NamedTensors out;
    if (component == kBareT5) {
        T5EncoderModel encoder(read_t5_config(std::filesystem::path(model_dir) / "config.json"));
        load_t5_weights(*encoder, find_weight_files(model_dir), kBareT5);
        encoder->eval();
        out = eval_t5(encoder, model_dir, in);
    } else {
        out = run_component(component, read_diffusers_folder(model_dir), in);
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
