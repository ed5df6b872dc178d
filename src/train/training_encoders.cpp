#include "loom/train/training_encoders.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <optional>

#include "loom/data/rng.h"
#include "loom/device/device.h"
#include "loom/device/host_memory.h"
#include "loom/model/family.h"
#include "loom/model/vae/autoencoder_kl.h"
#include "loom/train/low_vram.h"

namespace loom {

// Where one encoding runs: on the device (the encoders brought there for it), or, at low_vram 3,
// on the host where they live — host memory on every device, sim included.
class TrainingEncoders::Placement {
  public:
    Placement(LowVramMode& low_vram, const Device& device)
        : device_(device), on_host_(low_vram.encode_on_host()) {
        if (on_host_) {
            host_.emplace();
        } else {
            encoders_.emplace(low_vram);
        }
    }
    at::Tensor place(const at::Tensor& t) const { return on_host_ ? t : device_.to_device(t); }

  private:
    const Device& device_;
    bool on_host_;
    std::optional<LowVramMode::EncodersOnDevice> encoders_;
    std::optional<HostAllocations> host_;
};

at::Tensor TrainingEncoders::latent(const TrainingItem& item, const at::Tensor& image) const {
    torch::NoGradGuard no_grad;
    const Placement placement(low_vram_, device_);
    const at::Tensor x = placement.place(image.unsqueeze(0)).to(model_.vae_dtype());
    const LatentDistribution d = model_.encode_pixels(x);
    // content_hash is SHA-256 hex: its first 16 digits make a stable per-image seed.
    at::Generator gen = at::detail::createCPUGenerator(
        data::mix_seed(seed_, std::stoull(item.image->content_hash.substr(0, 16), nullptr, 16)));
    const at::Tensor noise = at::randn(d.mean.sizes(), gen, at::kFloat);
    const at::Tensor z =
        d.mean.to(at::kFloat) + at::exp(0.5 * d.logvar.to(at::kFloat)) * placement.place(noise);
    HostAllocations host;
    return model_.training_latents(z).squeeze(0).cpu().clone();
}

NamedTensors TrainingEncoders::text(const std::string& caption,
                                    const std::vector<at::Tensor>& controls) const {
    torch::NoGradGuard no_grad;
    const Placement placement(low_vram_, device_);
    const TextConditioning c = controls.empty()
                                   ? model_.encode_prompts({caption})
                                   : model_.encode_prompts_with_controls({caption}, {controls});
    HostAllocations host;
    NamedTensors out = c.to_named();
    for (auto& [name, tensor] : out)
        tensor = tensor.to(at::kFloat).cpu().clone();  // cached in fp32
    return out;
}

}  // namespace loom
