#include "loom/train/sd_encoders.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "loom/data/rng.h"
#include "loom/device/device.h"
#include "loom/device/host_memory.h"
#include "loom/model/stable_diffusion.h"
#include "loom/train/low_vram.h"

namespace loom {

at::Tensor SdEncoders::latent(const TrainingItem& item, const at::Tensor& image) const {
    torch::NoGradGuard no_grad;
    LowVramMode::EncodersOnDevice encoders(low_vram_);
    const at::Tensor x =
        device_.to_device(image.unsqueeze(0)).to(model_.vae->parameters().front().scalar_type());
    const LatentDistribution d = model_.vae->encode(x);
    // content_hash is SHA-256 hex: its first 16 digits make a stable per-image seed.
    at::Generator gen = at::detail::createCPUGenerator(
        data::mix_seed(seed_, std::stoull(item.image->content_hash.substr(0, 16), nullptr, 16)));
    const at::Tensor noise = at::randn(d.mean.sizes(), gen, at::kFloat);
    at::Tensor z =
        d.mean.to(at::kFloat) + at::exp(0.5 * d.logvar.to(at::kFloat)) * device_.to_device(noise);
    const VAEConfig& vc = model_.vae->config();
    if (vc.shift_factor) z = z - *vc.shift_factor;
    HostAllocations host;
    return (z * vc.scaling_factor).squeeze(0).cpu().clone();
}

NamedTensors SdEncoders::text(const std::string& caption) const {
    torch::NoGradGuard no_grad;
    LowVramMode::EncodersOnDevice encoders(low_vram_);
    const TextConditioning c = model_.encode_prompts({caption});
    HostAllocations host;
    NamedTensors out = c.to_named();
    for (auto& [name, tensor] : out)
        tensor = tensor.to(at::kFloat).cpu().clone();  // cached in fp32
    return out;
}

}  // namespace loom
