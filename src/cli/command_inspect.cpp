// loom inspect MODEL_DIR: arch, components, parameter counts and dtypes, from the folder's
// model_index.json, configs and safetensors headers (no weights are loaded).

#include <iomanip>
#include <iostream>
#include <map>

#include "command.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/io/safetensors.h"
#include "loom/model/family.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/loading/model_location.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/sd/single_file.h"
#include "options.h"

namespace loom::cli {

namespace {

cxxopts::Options inspect_options() {
    cxxopts::Options options("loom inspect",
                             "Describe a model — a diffusers folder, a single-file checkpoint or "
                             "a cached hub id: arch, components, parameter counts and dtypes "
                             "(read from the safetensors headers).");
    options.positional_help("MODEL");
    options.add_options()("model", "Model folder, .safetensors file or hub id",
                          cxxopts::value<std::string>());
    options.parse_positional({"model"});
    return options;
}

std::string human_count(std::int64_t n) {
    std::ostringstream out;
    out << std::fixed << std::setprecision(2);
    if (n >= 1000000000)
        out << n / 1e9 << "B";
    else if (n >= 1000000)
        out << n / 1e6 << "M";
    else if (n >= 1000)
        out << n / 1e3 << "K";
    else
        out << n;
    return out.str();
}

// A single-file checkpoint: its kind, and its components by their prefixes in the file.
int inspect_single_file(const std::filesystem::path& file) {
    const config::Arch arch = detect_single_file_arch(file);
    std::cout << "model:    " << file.string() << "\n"
              << "layout:   single file (original Stability layout)\n"
              << "arch:     " << config::to_string(arch)
              << (config::arch_info(arch).trainable ? "" : " (loom cannot load it yet)")
              << "\n\ncomponents:\n";
    static const std::vector<std::pair<const char*, const char*>> kPrefixes = {
        {"unet", "model.diffusion_model."},
        {"vae", "first_stage_model."},
        {"text_encoder", "cond_stage_model."},
        {"text_encoder", "conditioner.embedders.0."},
        {"text_encoder_2", "conditioner.embedders.1."}};
    const SafetensorsFile f = SafetensorsFile::open(file);
    std::int64_t total = 0;
    for (const auto& [name, prefix] : kPrefixes) {
        std::map<std::string, std::int64_t> by_dtype;
        std::int64_t count = 0;
        for (const TensorInfo& t : f.tensors()) {
            if (t.name.rfind(prefix, 0) != 0) continue;
            by_dtype[dtype_name(t.dtype)] += t.numel();
            count += t.numel();
        }
        if (count == 0) continue;
        total += count;
        std::cout << "  " << std::left << std::setw(16) << name << std::setw(28) << prefix
                  << std::setw(10) << human_count(count);
        for (const auto& [dtype, n] : by_dtype) std::cout << " " << dtype << ":" << n;
        std::cout << "\n";
    }
    std::cout << "\nparameters: " << total << " (" << human_count(total) << ")\n";
    return to_int(ExitCode::kOk);
}

int run_inspect(const std::vector<std::string>& args) {
    cxxopts::Options options = inspect_options();
    const cxxopts::ParseResult parsed = parse_options(options, "inspect", args);
    if (!parsed.count("model")) throw UsageError("loom inspect: give a model folder or file");
    const std::filesystem::path model = locate_model(parsed["model"].as<std::string>());
    if (is_single_file_checkpoint(model)) return inspect_single_file(model);
    const DiffusersFolder folder = read_diffusers_folder(model);
    const config::ArchInfo& arch = config::arch_info(detect_arch(folder));
    std::cout << "model:    " << folder.root.string() << "\n"
              << "pipeline: " << folder.pipeline_class << "\n"
              << "arch:     " << arch.name << (arch.trainable ? "" : " (loom cannot train it yet)")
              << "\n\ncomponents:\n";
    std::int64_t total = 0;
    for (const DiffusersComponent& c : folder.components) {
        std::cout << "  " << std::left << std::setw(16) << c.name << std::setw(46)
                  << (c.library + "." + c.class_name);
        std::map<std::string, std::int64_t> by_dtype;
        std::int64_t count = 0;
        try {
            for (const auto& file : find_weight_files(folder.dir(c.name))) {
                const SafetensorsFile f = SafetensorsFile::open(file);
                for (const TensorInfo& t : f.tensors()) {
                    by_dtype[dtype_name(t.dtype)] += t.numel();
                    count += t.numel();
                }
            }
        } catch (const IoError&) {
            std::cout << "(no weights)\n";  // tokenizer, scheduler
            continue;
        }
        total += count;
        std::cout << std::setw(10) << human_count(count);
        for (const auto& [dtype, n] : by_dtype) std::cout << " " << dtype << ":" << n;
        std::cout << "\n";
    }
    std::cout << "\nparameters: " << total << " (" << human_count(total) << ")\n";
    return to_int(ExitCode::kOk);
}

}  // namespace

Command make_inspect_command() {
    return {"inspect",
            "Describe a model: a diffusers folder or a single-file checkpoint (arch, components, "
            "parameters, dtypes)",
            [] { return inspect_options().help(); }, run_inspect};
}

}  // namespace loom::cli
