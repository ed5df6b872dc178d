#pragma once

// The frozen encoders of the base model (any family) as training uses them: the VAE turns an item's
// image into its latent, the text encoder(s) turn a caption into its conditioning. Under low_vram
// the encoders live on the host and come to the device for the call (at level 3 they compute
// on the host instead: LowVramMode::encode_on_host). What they return is
// host memory, ready for the caches (data/tensor_cache.h).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "loom/model/loading/tensor_file.h"
#include "loom/train/training_data.h"

namespace loom {

class Device;
class LowVramMode;
class ModelFamily;

class TrainingEncoders {
  public:
    // Every reference must outlive the encoders; `seed` is the run's (training_seed).
    TrainingEncoders(ModelFamily& model, LowVramMode& low_vram, const Device& device,
                     std::uint64_t seed)
        : model_(model), low_vram_(low_vram), device_(device), seed_(seed) {}

    // The scaled (and shifted) latent sample of `image` ([3, H, W] in [-1, 1]). The sample's
    // noise is a function of the image's content and the seed alone, so cached and fresh
    // latents agree.
    at::Tensor latent(const TrainingItem& item, const at::Tensor& image) const;
    // The caption's conditioning, unbatched, by name (TextConditioning::to_named); with
    // `controls` (uint8 [H, W, 3]) for a model that reads control images in its prompts.
    NamedTensors text(const std::string& caption,
                      const std::vector<at::Tensor>& controls = {}) const;

    TrainingData::LatentEncode latent_encoder() const {
        return [this](const TrainingItem& item, const at::Tensor& image) {
            return latent(item, image);
        };
    }
    TrainingData::TextEncode text_encoder() const {
        return [this](const std::string& caption, const std::vector<at::Tensor>& controls) {
            return text(caption, controls);
        };
    }

  private:
    class Placement;

    ModelFamily& model_;
    LowVramMode& low_vram_;
    const Device& device_;
    std::uint64_t seed_;
};

}  // namespace loom
