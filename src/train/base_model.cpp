#include "loom/train/base_model.h"

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/host_memory.h"
#include "loom/model/diffusers_folder.h"
#include "loom/model/flux_model.h"
#include "loom/model/model_location.h"
#include "loom/model/single_file.h"

namespace loom {

namespace {

// The family an arch belongs to: the folder must hold the same one (an SD job given a Flux
// folder would otherwise train something else than the job says).
bool is_flux_arch(const std::string& arch) {
    return arch == "flux";
}

}  // namespace

std::unique_ptr<ModelFamily> load_frozen_base(const config::ProcessConfig& process) {
    const std::string& arch = *process.model.arch;
    const ArchSpec* spec = find_arch_spec(arch);
    if (spec == nullptr || !spec->trainable) {
        throw ConfigError("", "config.process.model.arch",
                          "model.arch '" + arch + "' is not one loom can train (sd1, sdxl, flux)");
    }
    // A folder, or a hub id found in the local Hugging Face cache.
    const std::string path = locate_model(process.model.name_or_path).string();
    // A single file is an SD 1.x / SDXL checkpoint (model/single_file.h), or refused there.
    const bool flux_folder =
        !is_single_file_checkpoint(path) && is_flux_pipeline(read_diffusers_folder(path));
    if (flux_folder != is_flux_arch(arch)) {
        throw ConfigError("", "config.process.model.arch",
                          "model.arch '" + arch + "' but " + path + " holds a " +
                              (flux_folder ? "Flux.1" : "Stable Diffusion") +
                              " pipeline; set model.arch (or is_flux/is_xl) to the folder's model");
    }
    FamilyLoadOptions options;
    options.v_prediction = process.model.is_v_pred;
    options.dtype =
        process.choices.precision == config::Precision::kBFloat16 ? at::kBFloat16 : at::kFloat;
    std::unique_ptr<ModelFamily> model;
    {
        // Weights are read into host memory and placed by LowVramMode, as on a real device.
        HostAllocations host;
        model = load_model_family(path, options);
    }
    if (model->arch() != arch && !(arch == "sd1" && model->arch() == "sd2")) {
        logger("train").warn("the job says arch '{}' but {} is '{}'; using '{}'", arch, path,
                             model->arch(), model->arch());
    }
    if (process.model.is_v_pred && model->objective_kind() != ObjectiveKind::kDdpm) {
        logger("train").warn("model.is_v_pred does not apply to '{}' (flow matching); ignored",
                             model->arch());
    }
    for (torch::nn::Module* m : model->encoders()) {
        for (auto& p : m->parameters()) p.requires_grad_(false);
    }
    for (auto& p : model->denoiser().parameters()) p.requires_grad_(false);
    return model;
}

}  // namespace loom
