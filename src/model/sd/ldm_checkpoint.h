#pragma once

// The original Stability layout of a Stable Diffusion checkpoint (one file holding
// model.diffusion_model.*, first_stage_model.* and cond_stage_model.* or conditioner.embedders.*),
// read as loom's diffusers-named modules: each config from the tensors' names and shapes, each
// tensor under its diffusers name (split or reshaped where the layouts differ).
//
// ref: diffusers loaders/single_file_utils.py — convert_ldm_unet_checkpoint,
// convert_ldm_vae_checkpoint, convert_ldm_clip_checkpoint, convert_open_clip_checkpoint and
// create_unet_diffusers_config_from_ldm (whose head rule comes from the original configs: SD 1.x
// 8 heads per block, SD 2.x and SDXL heads of 64 channels).

#include <memory>
#include <string>
#include <vector>

#include "loom/config/arch.h"
#include "loom/model/loading/diffusers_folder.h"
#include "loom/model/loading/weight_files.h"
#include "loom/model/sd/unet_2d_condition.h"
#include "loom/model/text/clip_text_model.h"
#include "loom/model/vae/autoencoder_kl.h"

namespace loom {

class SafetensorsFile;

namespace ldm {

// Prefixes of the components inside the file.
inline constexpr const char* kUNet = "model.diffusion_model.";
inline constexpr const char* kVae = "first_stage_model.";
inline constexpr const char* kClipSd1 = "cond_stage_model.transformer.";  // CLIP-L, transformers
inline constexpr const char* kOpenClipSd2 = "cond_stage_model.model.";    // OpenCLIP-H
inline constexpr const char* kClipSdxl = "conditioner.embedders.0.transformer.";
inline constexpr const char* kOpenClipSdxl = "conditioner.embedders.1.model.";
inline constexpr const char* kOpenClipSdxlRefiner = "conditioner.embedders.0.model.";

// SD 1.x, 2.x or SDXL from the file's tensors. FormatError naming the file, saying what it
// holds instead, for anything else (a LoRA, a diffusers component, an SDXL refiner, an
// inpainting model, a file without text encoders).
config::Arch detect_arch(const SafetensorsFile& file);

// Configs from the tensors' shapes. `pooled_dim` is the second text encoder's projection width
// (SDXL's add_embedding input is pooled_dim + 6 time-id embeddings).
UNetConfig unet_config(const SafetensorsFile& file, config::Arch arch, int64_t pooled_dim);
VAEConfig vae_config(const SafetensorsFile& file, config::Arch arch);
// CLIP-L in transformers' names under `prefix`.
CLIPTextConfig clip_config(const SafetensorsFile& file, const std::string& prefix);
// OpenCLIP under `prefix`, with its text projection.
CLIPTextConfig open_clip_config(const SafetensorsFile& file, const std::string& prefix);

// The component's tensors under diffusers' names.
using File = std::shared_ptr<const SafetensorsFile>;
std::vector<StoredTensor> unet_sources(const File& file, const UNetConfig& config);
std::vector<StoredTensor> vae_sources(const File& file, const VAEConfig& config);
std::vector<StoredTensor> clip_sources(const File& file, const std::string& prefix);
std::vector<StoredTensor> open_clip_sources(const File& file, const std::string& prefix);

}  // namespace ldm
}  // namespace loom
