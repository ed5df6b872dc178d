#pragma once

// Stable Diffusion single-file checkpoints: one .safetensors in the original Stability layout
// holding the UNet, the VAE and the text encoder(s) — the files most SD 1.x and SDXL users hold,
// which ai-toolkit and diffusers' from_single_file accept (formats.md §2). loom reads them as
// diffusers does: the kind from the tensors (sd1, sdxl; sd2 is recognised but not loaded), each
// component's config from the tensors' shapes and the kind's original config, each tensor under
// its diffusers name (model/sd/ldm_checkpoint.h), numerically equal to the converted folder.
//
// The tokenizer(s) and the scheduler are not in the file. As diffusers fetches them from the
// kind's default repo, loom takes them from that repo in the local Hugging Face cache
// (model_location.h: never over the network): stable-diffusion-v1-5/stable-diffusion-v1-5 (or
// runwayml/stable-diffusion-v1-5) for SD 1.x, stabilityai/stable-diffusion-xl-base-1.0 for SDXL.
// Only tokenizer/, tokenizer_2/ and scheduler/ are read; without scheduler/ the SD schedule
// (scaled_linear 0.00085..0.012 over 1000 steps) applies.

#include <filesystem>
#include <string>
#include <vector>

#include "loom/model/loading/model_location.h"
#include "loom/model/sd/stable_diffusion.h"

namespace loom {

// Whether `path` names a file rather than a diffusers folder (a single-file checkpoint, or a
// file loom will refuse with a reason: a .ckpt, a LoRA, ...).
bool is_single_file_checkpoint(const std::filesystem::path& path);

// The hub repos whose tokenizer(s) and scheduler a single file of `arch` uses, in the order
// tried.
const std::vector<std::string>& single_file_config_repos(config::Arch arch);

// The kind of a single file: SD 1.x, 2.x or SDXL. FormatError naming the file otherwise.
config::Arch detect_single_file_arch(const std::filesystem::path& file);

// Loads a single-file SD 1.x or SDXL checkpoint: components in `options.dtype`, in eval mode;
// `folder.root` is the file. FormatError naming the file for another kind of file (a pickle
// .ckpt, a LoRA, a diffusers component, SD 2.x, a refiner, an inpainting model); IoError naming
// the caches searched, and the command that downloads the few files needed, when the default
// repo's tokenizer is not in the local cache.
StableDiffusion load_stable_diffusion_single_file(
    const std::filesystem::path& file, const LoadOptions& options = {},
    const EnvironmentLookup& env = process_environment);

}  // namespace loom
