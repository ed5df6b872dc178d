#include "loom/train/base_model.h"

#include <initializer_list>

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/host_memory.h"

namespace loom {

StableDiffusion load_frozen_base(const config::ProcessConfig& process) {
    const std::string& arch = *process.model.arch;
    const ArchSpec* spec = find_arch_spec(arch);
    if (spec == nullptr || !spec->trainable) {
        throw ConfigError("", "config.process.model.arch",
                          "model.arch '" + arch + "' is not one loom can train (sd1, sdxl)");
    }
    LoadOptions options;
    options.dtype =
        process.choices.precision == config::Precision::kBFloat16 ? at::kBFloat16 : at::kFloat;
    StableDiffusion model;
    {
        // Weights are read into host memory and placed by LowVramMode, as on a real device.
        HostAllocations host;
        model = load_stable_diffusion(process.model.name_or_path, options);
    }
    if (model.arch != arch && !(arch == "sd1" && model.arch == "sd2")) {
        logger("train").warn("the job says arch '{}' but {} is '{}'; using '{}'", arch,
                             process.model.name_or_path, model.arch, model.arch);
    }
    if (process.model.is_v_pred) model.scheduler.prediction_type = "v_prediction";
    for (torch::nn::Module* m : std::initializer_list<torch::nn::Module*>{
             model.unet.get(), model.vae.get(), model.text_encoder.get(),
             model.text_encoder_2 ? model.text_encoder_2.get() : nullptr}) {
        if (m == nullptr) continue;
        for (auto& p : m->parameters()) p.requires_grad_(false);
    }
    return model;
}

}  // namespace loom
