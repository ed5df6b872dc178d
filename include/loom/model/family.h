#pragma once

// The model-family seam: everything the trainer needs from a diffusion model family, behind one
// interface, so that training, the ladder's rungs and previews never name a UNet or a
// transformer. A family is loaded from a diffusers folder (load_model_family picks the family
// from model_index.json) into host memory; the trainer places it (train/low_vram.h), encodes its
// data with it, asks it for predictions and samples previews through it.
//
// Implementations: StableDiffusionFamily (SD 1.x/2.x, SDXL: a UNet, DDPM), FluxFamily (Flux.1
// dev and schnell: a transformer over packed latents, flow matching), WanFamily (Wan 2.1
// text-to-video: a transformer over latent clips, flow matching) and Wan22Family (Wan 2.2 14B
// text-to-video: two such transformers, one per range of timesteps), as llama.cpp's graph builders
// hide each architecture behind llm_arch.

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/config/arch.h"
#include "loom/model/denoiser_blocks.h"
#include "loom/model/preview_sampler.h"
#include "loom/model/schedules/flow_match.h"
#include "loom/model/schedules/noise_schedule.h"
#include "loom/model/text/text_conditioning.h"

namespace loom {

struct LatentDistribution;

// How a family is trained: DDPM (epsilon or v-prediction over a beta schedule) or flow matching
// (x_t = (1 - t) x0 + t noise, the velocity noise - x0 as target).
enum class ObjectiveKind { kDdpm, kFlowMatch };

// A micro-batch's text conditioning on the device, in the denoiser's dtype.
struct StepConditioning {
    at::Tensor context;  // [B, tokens, width]
    at::Tensor pooled;   // [B, width], or undefined for a family without one (SD 1.x)
    // [B, tokens] float32: the text tokens the denoiser attends to (Chroma), or undefined: all.
    at::Tensor context_mask;
    at::Tensor extra;  // family-specific, made by extra_conditioning (SDXL's size ids)
    // The clean latents of the items' control images, [B, C, H, W] like the noisy ones, for a
    // family of an arch with control_images (Kontext); undefined otherwise.
    at::Tensor control;
    // The control latents of an arch with several control images, each at its own size
    // (Qwen-Image-Edit-2509): the i-th control of every item, [B, C, h_i, w_i]; empty otherwise.
    std::vector<at::Tensor> controls;
    // Flex.2's inpaint input, [B, C + 1, H, W]: the clean latents where the item's inpaint image
    // keeps them (zero where it inpaints) and the mask (1 where it inpaints); undefined: none
    // (the "inpaint everything" input).
    at::Tensor inpaint;
};

// The training timesteps of one expert of a denoiser made of several (Wan 2.2 14B: the
// high-noise expert above the boundary, the low-noise one at and below it), on the 0..1000 scale.
struct ExpertSpan {
    double above = 0;    // exclusive
    double upto = 1000;  // inclusive
    bool contains(double t) const { return t > above && t <= upto; }
};

class ModelFamily {
  public:
    virtual ~ModelFamily() = default;

    // The arch it was loaded as (its row in config/arch.h's table).
    virtual config::Arch arch() const = 0;
    virtual const std::filesystem::path& root() const = 0;

    // --- components ---
    virtual torch::nn::Module& denoiser() = 0;
    // The denoiser's repeated blocks: what low_vram's third level streams from the host and
    // where a LoRA's targets are (model/denoiser_blocks.h).
    virtual const DenoiserBlocks& blocks() const = 0;
    // The VAE and the text encoder(s): what low_vram's first level keeps on the host.
    virtual std::vector<torch::nn::Module*> encoders() = 0;
    virtual void set_gradient_checkpointing(bool on) = 0;
    // perf.channels_last: the convolutions' weights (denoiser and VAE) channels-last.
    virtual void set_channels_last(bool on) = 0;
    // The CUDA-graph path (perf.cuda_graphs) can capture predict: it must launch kernels only
    // (no host reads, no host-made tensors).
    virtual bool predict_is_capturable() const = 0;

    // --- data ---
    // Image sides (buckets) are multiples of this: the arch's row says.
    int64_t bucket_divisibility() const { return config::arch_info(arch()).bucket_divisibility; }
    // A clip's frame counts are 1 + k times this (its VAE's temporal compression: Wan 4); image
    // families see only one-frame items.
    virtual int64_t temporal_compression() const { return 1; }
    // The VAE's distribution for `pixels` in [-1, 1], on the VAE's device in vae_dtype():
    // images [B, 3, H, W] (a video family encodes each as a one-frame clip) or, for a video
    // family, clips [B, 3, F, H, W]. Latents are raw (not yet scaled for training).
    virtual LatentDistribution encode_pixels(const at::Tensor& pixels) = 0;
    // What training sees of a raw latent sample: SD z * scaling_factor, Flux (z - shift) *
    // scaling_factor, Wan (z - latents_mean) / latents_std.
    virtual at::Tensor training_latents(const at::Tensor& z) const = 0;
    virtual at::ScalarType vae_dtype() = 0;
    // The prompts' conditioning as the family's pipeline computes it.
    virtual TextConditioning encode_prompts(const std::vector<std::string>& prompts) = 0;
    // For an arch whose text encoder reads the control images (config::ArchInfo's
    // controls_in_prompt: Qwen-Image-Edit): the prompts' conditioning with each prompt's
    // control images (uint8 [H, W, 3] host tensors at their own sizes). Others throw.
    virtual TextConditioning encode_prompts_with_controls(
        const std::vector<std::string>& prompts,
        const std::vector<std::vector<at::Tensor>>& controls);
    // The pixel size (width, height) a `control_width` x `control_height` control image is
    // encoded at for a `target_width` x `target_height` item: the target's (Kontext, Flex.2 and
    // Qwen-Image-Edit fit it to the item's bucket), or a size of its own (Edit-2509).
    virtual std::pair<int64_t, int64_t> control_size(int64_t control_width, int64_t control_height,
                                                     int64_t target_width,
                                                     int64_t target_height) const {
        (void)control_width;
        (void)control_height;
        return {target_width, target_height};
    }
    // What predict needs beside the text for a batch of `batch` latents of a `height` x `width`
    // image (pixels), on the host; undefined when the family needs nothing more.
    virtual at::Tensor extra_conditioning(int64_t height, int64_t width, int64_t batch) const = 0;

    // --- training ---
    virtual ObjectiveKind objective_kind() const = 0;
    // The DDPM schedule (kDdpm families) or the flow-matching config (kFlowMatch families).
    virtual NoiseScheduleConfig ddpm_schedule() const = 0;
    virtual FlowMatchConfig flow_match() const = 0;
    // The denoiser's prediction for `noisy` latents [B, C, h, w] (in the denoiser's dtype) at
    // `timesteps` [B] (DDPM: int64 indices; flow matching: float t x 1000), in the latents'
    // layout: packing and position ids are the family's business.
    virtual at::Tensor predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                               const StepConditioning& conditioning) = 0;

    // --- experts (a denoiser of several, each for its own timesteps: Wan 2.2 14B) ---
    // Each expert's training timesteps, in blocks().experts' order; empty for one denoiser.
    virtual std::vector<ExpertSpan> expert_spans() const { return {}; }
    // Whether each expert trains (model.model_kwargs); empty for one denoiser.
    virtual std::vector<bool> trained_experts() const { return {}; }
    // Expert `index` as a module (what placement moves between the host and the device).
    virtual torch::nn::Module* expert(std::size_t /*index*/) { return nullptr; }
    // Called with an expert's index before it computes (predict, previews), or with
    // kEveryExpert before a batch on both sides of a boundary: the trainer's placement brings
    // it to the device and, with the idle expert on the host, sends the others there
    // (train/low_vram.h). Without one, every expert stays where it is.
    static constexpr std::size_t kEveryExpert = static_cast<std::size_t>(-1);
    void set_expert_placement(std::function<void(std::size_t)> place) {
        place_expert_ = std::move(place);
    }

    // --- previews ---
    // Images as uint8 [H, W, 3] CPU tensors, one per request, in request order; a video family
    // gives a request of more than one frame its clip, uint8 [F, H, W, 3].
    virtual std::vector<at::Tensor> sample(const std::vector<PreviewRequest>& requests,
                                           const PreviewOptions& options,
                                           const at::Device& device) = 0;

  protected:
    void place_expert(std::size_t index) {
        if (place_expert_) place_expert_(index);
    }

  private:
    std::function<void(std::size_t)> place_expert_;
};

struct FamilyLoadOptions {
    at::ScalarType dtype = at::kFloat;
    // A DDPM family predicts velocity (ai-toolkit's model.is_v_pred); flow matching ignores it.
    bool v_prediction = false;
    // A denoiser of several experts: which ones train (Wan 2.2: model.model_kwargs'
    // train_high_noise, train_low_noise); empty: all of them. Others ignore it.
    std::vector<bool> trained_experts;
    // A guidance-distilled Flux transformer trains without its guidance embedding
    // (train.bypass_guidance_embedding); previews keep it. Others ignore it.
    bool bypass_guidance_embedding = false;
    // Qwen-Image-Edit-2509's control latents at the target's area (model_kwargs.match_target_res).
    bool match_target_res = false;
};

struct DiffusersFolder;
// The arch of a diffusers folder, from its pipeline class (config/arch.h's table) and, for
// StableDiffusionPipeline, the text encoder's width (1024: SD 2.x). FormatError naming
// model_index.json for a pipeline class loom does not load.
config::Arch detect_arch(const DiffusersFolder& folder);

// The arch a model path holds, before anything is loaded: a single file's from its tensors (SD
// 1.x / SDXL, or refused by model/sd/single_file.h), a folder's from its pipeline class.
// FormatError naming the file when it is not a model loom loads.
config::Arch detect_model_arch(const std::filesystem::path& root);

// The family of the diffusers folder at `root` (model_index.json's _class_name), or of the SD 1.x /
// SDXL single-file checkpoint `root` names (model/sd/single_file.h), every component
// loaded into host memory in `options.dtype`, in eval mode. FormatError naming the file when the
// folder is not one loom loads.
std::unique_ptr<ModelFamily> load_model_family(const std::filesystem::path& root,
                                               const FamilyLoadOptions& options = {});

}  // namespace loom
