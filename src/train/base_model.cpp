#include "loom/train/base_model.h"

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/host_memory.h"
#include "loom/model/diffusers_folder.h"
#include "loom/model/flux_model.h"
#include "loom/model/model_location.h"
#include "loom/model/single_file.h"
#include "loom/model/wan_model.h"

namespace loom {

namespace {

// The pipeline family of an arch, and of a folder: they must agree (an SD job given a Flux
// folder would otherwise train something else than the job says).
const char* family_of_arch(const std::string& arch) {
    if (arch == "flux") return "Flux.1";
    if (arch == "wan21") return "Wan 2.1";
    return "Stable Diffusion";
}

const char* family_of_folder(const std::string& path) {
    // A single file is an SD 1.x / SDXL checkpoint (model/single_file.h), or refused there.
    if (is_single_file_checkpoint(path)) return "Stable Diffusion";
    const DiffusersFolder folder = read_diffusers_folder(path);
    if (is_flux_pipeline(folder)) return "Flux.1";
    if (is_wan_pipeline(folder)) return "Wan 2.1";
    return "Stable Diffusion";
}

}  // namespace

std::unique_ptr<ModelFamily> load_frozen_base(const config::ProcessConfig& process) {
    const std::string& arch = *process.model.arch;
    const ArchSpec* spec = find_arch_spec(arch);
    if (spec == nullptr || !spec->trainable) {
        throw ConfigError(
            "", "config.process.model.arch",
            "model.arch '" + arch + "' is not one loom can train (sd1, sdxl, flux, wan21)");
    }
    // A folder, or a hub id found in the local Hugging Face cache.
    const std::string path = locate_model(process.model.name_or_path).string();
    const std::string folder_family = family_of_folder(path);
    if (folder_family != family_of_arch(arch)) {
        throw ConfigError("", "config.process.model.arch",
                          "model.arch '" + arch + "' but " + path + " holds a " + folder_family +
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
