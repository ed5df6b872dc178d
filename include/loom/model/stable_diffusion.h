#pragma once

// A Stable Diffusion model (SD 1.x / 2.x, SDXL) loaded from a diffusers folder: its components,
// its arch, and the text encoding both training and sampling use.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/model/autoencoder_kl.h"
#include "loom/model/clip_text_model.h"
#include "loom/model/clip_tokenizer.h"
#include "loom/model/diffusers_folder.h"
#include "loom/model/noise_schedule.h"
#include "loom/model/text_conditioning.h"
#include "loom/model/unet_2d_condition.h"

namespace loom {

// Registry entry of an architecture loom implements (config/arch.h names every ai-toolkit arch).
struct ArchSpec {
    const char* name;            // "sd1", "sdxl"
    const char* pipeline_class;  // model_index.json _class_name
    bool two_text_encoders;
    int64_t bucket_divisibility;  // image sides are multiples of this (ai-toolkit: 16 for SD)
    bool trainable;
    // Previews run a classifier-free pass beside the conditional one (a guidance scale above 1
    // doubles the sampling batch); Flux.1's distilled guidance is an embedding instead.
    bool cfg_previews;
    // A video model: clips have frames, and frames are the ladder's first rungs (Wan).
    bool video = false;
};

const std::vector<ArchSpec>& arch_registry();
const ArchSpec* find_arch_spec(const std::string& name);

// "sd1", "sd2" or "sdxl" from the pipeline class and the text encoder's width.
std::string detect_arch(const DiffusersFolder& folder);

struct StableDiffusion {
    std::string arch;
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
