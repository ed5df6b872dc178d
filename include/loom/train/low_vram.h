#pragma once

// low_vram: the ladder's last rung, and `model.low_vram: true` from the start. Three sub-modes,
// each a level the ladder turns on in order (level N includes the levels below it):
//
//   1. encoders on the host: the text encoder(s) and the VAE live in host memory once latents
//      and text embeddings are cached; they come to the device only for sampling, for the cache
//      phase and for a cache miss, and go back after.
//   2. bf16 base: the frozen base weights are held in bf16 (when they are float32); the LoRA
//      weights and the optimizer state stay float32. ai-toolkit's `model.quantize: true` maps
//      here until loom quantizes for real.
//   3. block streaming: the frozen Linear/Conv2d weights of the UNet's down, mid and up blocks
//      stay on the host; each layer fetches a device copy for its forward (and for its
//      recompute under gradient checkpointing), which is released when the computation that
//      used it is done. On CUDA the host copies are pinned, so the fetches are plain DMA. By
//      default a layer's copy is made on the compute stream when the layer runs; with
//      perf.stream_prefetch the copies of the next layers run ahead on a side stream
//      (train/prefetching_weight_source.h), at the cost of up to
//      PrefetchingWeightSource::kDepth layers' copies more device memory.
//
// Levels only go up during a run: bf16 weights cannot be restored to float32 without reloading
// the model, so scale-up leaves low_vram alone.
//
// Placement also applies perf.channels_last: the UNet's and the VAE's conv weights are converted
// on the host before anything is placed, and every later copy (bf16, streaming, fetches) keeps
// the layout (model/memory_format.h).

#include <memory>
#include <optional>
#include <unordered_set>
#include <vector>

#include "loom/device/device.h"
#include "loom/model/stable_diffusion.h"
#include "loom/train/prefetching_weight_source.h"

namespace loom {

// The perf switches placement applies (config::PerfConfig); both off by default.
struct PlacementOptions {
    bool stream_prefetch = false;  // level 3 copies the next layers ahead
    bool channels_last = false;    // UNet and VAE conv weights channels-last
};

class LowVramMode {
  public:
    static constexpr int kLevels = 3;

    LowVramMode(StableDiffusion& model, Device& device, PlacementOptions options = {})
        : model_(model), device_(device), options_(options) {}

    // Places a freshly loaded (host-resident) model on the device as `level` asks.
    void place_model(int level);
    // Raises the level of a placed model (lower levels are refused: see the top of this file).
    void raise_to(int level);
    int level() const { return level_; }

    // Releases the device copies block streaming made ahead of use (perf.stream_prefetch): what
    // a failed attempt held, after an OOM. A no-op without prefetch.
    void drop_prefetched();
    // What prefetch did so far; nullopt without it (below level 3, or the switch off).
    std::optional<PrefetchingWeightSource::Stats> prefetch_stats() const;

    // For its lifetime the text encoder(s) and the VAE are on the device (level >= 1; a no-op
    // below). Scopes nest: the outermost one moves them back.
    class EncodersOnDevice {
      public:
        explicit EncodersOnDevice(LowVramMode& mode);
        ~EncodersOnDevice();
        EncodersOnDevice(const EncodersOnDevice&) = delete;
        EncodersOnDevice& operator=(const EncodersOnDevice&) = delete;

      private:
        LowVramMode& mode_;
        bool active_;  // the mode was at level >= 1 when the scope began
    };

  private:
    std::vector<torch::nn::Module*> encoders() const;
    void encoders_to(bool device);
    // The frozen float32 base weights to bf16; the UNet is device-resident once placed.
    void base_to_bf16(bool unet_on_device);
    void stream_blocks();

    StableDiffusion& model_;
    Device& device_;
    PlacementOptions options_;
    std::shared_ptr<PrefetchingWeightSource> prefetch_;  // level 3 with stream_prefetch
    int level_ = 0;
    int encoder_scopes_ = 0;
    // The host-resident weights of level 3 (their TensorImpl: set_data keeps it).
    std::unordered_set<const c10::TensorImpl*> streamed_;
};

}  // namespace loom
