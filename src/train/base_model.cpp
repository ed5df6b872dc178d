#include "loom/train/base_model.h"

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/host_memory.h"
#include "loom/model/loading/model_location.h"

namespace loom {

std::unique_ptr<ModelFamily> load_frozen_base(const config::ProcessConfig& process) {
    const std::string& arch = *process.model.arch;
    if (!process.choices.arch || !config::arch_info(*process.choices.arch).trainable) {
        throw ConfigError("", "config.process.model.arch",
                          "model.arch '" + arch + "' is not one loom can train (" +
                              config::trainable_arch_list() + ")");
    }
    const config::ArchInfo& job_arch = config::arch_info(*process.choices.arch);
    // A folder, or a hub id found in the local Hugging Face cache.
    const std::string path = locate_model(process.model.name_or_path).string();
    // The folder's family must be the job's: an SD job given a Flux folder would otherwise
    // train something else than the job says.
    const config::ArchInfo& held = config::arch_info(detect_model_arch(path));
    if (held.family != job_arch.family) {
        throw ConfigError("", "config.process.model.arch",
                          "model.arch '" + arch + "' but " + path + " holds a " +
                              held.display_name +
                              " pipeline; set model.arch (or is_flux/is_xl) to the folder's model");
    }
    FamilyLoadOptions options;
    options.v_prediction = process.model.is_v_pred;
    options.bypass_guidance_embedding = process.train.bypass_guidance_embedding;
    options.match_target_res = process.model.model_kwargs.match_target_res;
    options.trained_experts = {process.model.model_kwargs.train_high_noise,
                               process.model.model_kwargs.train_low_noise};
    options.dtype =
        process.choices.precision == config::Precision::kBFloat16 ? at::kBFloat16 : at::kFloat;
    std::unique_ptr<ModelFamily> model;
    {
        // Weights are read into host memory and placed by LowVramMode, as on a real device.
        HostAllocations host;
        model = load_model_family(path, options);
    }
    // sd1 names SD 1.x and 2.x alike in ai-toolkit (is_v2 is a flag on top).
    const bool same_arch = model->arch() == job_arch.arch || (job_arch.arch == config::Arch::kSd1 &&
                                                              model->arch() == config::Arch::kSd2);
    if (!same_arch) {
        const char* loaded = config::to_string(model->arch());
        logger("train").warn("the job says arch '{}' but {} is '{}'; using '{}'", arch, path,
                             loaded, loaded);
    }
    if (process.model.is_v_pred && model->objective_kind() != ObjectiveKind::kDdpm) {
        logger("train").warn("model.is_v_pred does not apply to '{}' (flow matching); ignored",
                             config::to_string(model->arch()));
    }
    for (torch::nn::Module* m : model->encoders()) {
        for (auto& p : m->parameters()) p.requires_grad_(false);
    }
    for (auto& p : model->denoiser().parameters()) p.requires_grad_(false);
    return model;
}

}  // namespace loom
