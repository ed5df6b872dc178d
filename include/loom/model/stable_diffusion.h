#pragma once

// A Stable Diffusion model (SD 1.x / 2.x, SDXL) loaded from a diffusers folder: its components,
// its arch, and the text encoding both training and sampling use.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/config/arch.h"
#include "loom/model/autoencoder_kl.h"
#include "loom/model/clip_text_model.h"
#include "loom/model/clip_tokenizer.h"
#include "loom/model/diffusers_folder.h"
#include "loom/model/noise_schedule.h"
#include "loom/model/text_conditioning.h"
#include "loom/model/unet_2d_condition.h"

namespace loom {

// The arch of a diffusers folder, from its pipeline class (config/arch.h's table) and, for
// StableDiffusionPipeline, the text encoder's width (1024: SD 2.x). FormatError naming
// model_index.json for a pipeline class loom does not load.
config::Arch detect_arch(const DiffusersFolder& folder);

struct StableDiffusion {
    config::Arch arch = config::Arch::kSd1;
    DiffusersFolder folder;
    UNet2DConditionModel unet{nullptr};
    AutoencoderKL vae{nullptr};
    CLIPTextModel text_encoder{nullptr};
    CLIPTextModel text_encoder_2{nullptr};  // SDXL only
    std::shared_ptr<CLIPTokenizer> tokenizer;
    std::shared_ptr<CLIPTokenizer> tokenizer_2;
    NoiseScheduleConfig scheduler;

    // Tokenizes and encodes prompts the way the arch's pipeline does: SD 1.x uses the last
    // hidden state; SDXL concatenates both encoders' penultimate hidden states and uses the
    // second encoder's projected pooled output.
    TextConditioning encode_prompts(const std::vector<std::string>& prompts);
    // SDXL micro-conditioning ids: original size, crop top-left, target size -> [B, 6].
    static at::Tensor time_ids(int64_t height, int64_t width, int64_t batch);
};

struct LoadOptions {
    at::ScalarType dtype = at::kFloat;
    bool load_vae = true;
    bool load_text_encoders = true;
};

// One component built from its config.json with its weights loaded, in eval mode.
UNet2DConditionModel load_unet(const DiffusersFolder& folder, at::ScalarType dtype = at::kFloat);
AutoencoderKL load_vae(const DiffusersFolder& folder, at::ScalarType dtype = at::kFloat);
// "text_encoder" (CLIPTextModel) or "text_encoder_2" (CLIPTextModelWithProjection).
CLIPTextModel load_text_encoder(const DiffusersFolder& folder, const std::string& component,
                                at::ScalarType dtype = at::kFloat);

// Builds every component from its config.json and loads its weights; a file is a single-file
// checkpoint (model/single_file.h).
StableDiffusion load_stable_diffusion(const std::filesystem::path& root,
                                      const LoadOptions& options = {});

}  // namespace loom
