#pragma once

// A Stable Diffusion model (SD 1.x / 2.x, SDXL) loaded from a diffusers folder: its components,
// its arch, and the text encoding both training and sampling use.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/config/arch.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/schedules/noise_schedule.h"
#include "loom/model/sd/unet_2d_condition.h"
#include "loom/model/text/clip_text_model.h"
#include "loom/model/text/text_conditioning.h"
#include "loom/model/tokenizers/clip_tokenizer.h"
#include "loom/model/vae/autoencoder_kl.h"

namespace loom {

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

// The UNet built from its config.json with its weights loaded, in eval mode (the VAE and the text
// encoders are loaded by their models: load_vae, load_text_encoder).
UNet2DConditionModel load_unet(const DiffusersFolder& folder, at::ScalarType dtype = at::kFloat);

// Builds every component from its config.json and loads its weights; a file is a single-file
// checkpoint (model/sd/single_file.h).
StableDiffusion load_stable_diffusion(const std::filesystem::path& root,
                                      const LoadOptions& options = {});

}  // namespace loom
