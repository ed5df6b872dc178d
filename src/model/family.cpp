#include "loom/model/family.h"

#include "loom/model/flux_family.h"
#include "loom/model/sd_family.h"
#include "loom/model/single_file.h"
#include "loom/model/wan_family.h"

namespace loom {

std::unique_ptr<ModelFamily> load_model_family(const std::filesystem::path& root,
                                               const FamilyLoadOptions& options) {
    // A file is an SD 1.x / SDXL checkpoint in the original single-file layout.
    if (!is_single_file_checkpoint(root)) {
        const DiffusersFolder folder = read_diffusers_folder(root);
        if (is_flux_pipeline(folder)) {
            FluxLoadOptions o;
            o.dtype = options.dtype;
            return std::make_unique<FluxFamily>(load_flux(root, o), config::Arch::kFlux);
        }
        if (is_wan_pipeline(folder)) {
            WanLoadOptions o;
            o.dtype = options.dtype;
            return std::make_unique<WanFamily>(load_wan(root, o), config::Arch::kWan21);
        }
    }
    LoadOptions o;
    o.dtype = options.dtype;
    StableDiffusion sd = load_stable_diffusion(root, o);
    if (options.v_prediction) sd.scheduler.prediction_type = "v_prediction";
    return std::make_unique<StableDiffusionFamily>(std::move(sd));
}

}  // namespace loom
