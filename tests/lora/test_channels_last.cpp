// perf.channels_last on the CPU: a UNet with LoRAs on its attention projections and its 3x3
// convs, forward and backward with and without channels-last convolutions — the output and the
// LoRA gradients must agree within float rounding (the conv kernels differ), with gradient
// checkpointing too; and the VAE's encode and decode.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "loom/lora/lora_network.h"
#include "loom/model/sd/unet_2d_condition.h"
#include "loom/model/vae/autoencoder_kl.h"
#include "tiny_models.h"

namespace loom {
namespace {

struct Pass {
    at::Tensor output;
    std::vector<at::Tensor> grads;
    std::vector<std::string> names;  // the module of each gradient
};

// A seeded tiny UNet with seeded conv and linear LoRAs (their `up` randomised so they count),
// one training forward and backward on a seeded batch.
Pass forward_backward(bool channels_last, bool checkpointing) {
    torch::manual_seed(0);
    UNet2DConditionModel unet(testing::tiny_unet_config(1));
    for (auto& p : unet->parameters()) p.requires_grad_(false);
    LoRANetworkOptions o;
    o.linear.rank = 4;
    o.linear.alpha = 4.0;
    o.conv = LoRAOptions{2, 2.0};
    LoRANetwork net = LoRANetwork::inject(*unet, o);
    {
        torch::NoGradGuard no_grad;
        for (auto& t : net.targets()) t.adapter->up.normal_(0, 0.05);
    }
    net.set_training(true);
    unet->set_gradient_checkpointing(checkpointing);
    unet->set_channels_last(channels_last);
    const at::Tensor sample = torch::randn({2, 4, 16, 16});
    const at::Tensor context = torch::randn({2, 5, 32});
    Pass r;
    r.output = unet->forward(sample, torch::tensor({300, 700}), context);
    r.output.pow(2).mean().backward();
    for (const at::Tensor& p : net.parameters()) r.grads.push_back(p.grad().clone());
    for (const LoRATarget& t : net.targets()) r.names.insert(r.names.end(), 2, t.path);
    r.output = r.output.detach();
    return r;
}

// |a - b| relative to b's largest magnitude, or to `floor` when b is smaller: a gradient that is
// zero in exact arithmetic is rounding noise in both passes. (A resnet's time_emb_proj adds one
// value per channel before a GroupNorm; with one channel per group, as in the tiny UNet's 32-wide
// blocks, the norm removes it, and its LoRA's gradient is such noise.)
double relative_difference(const at::Tensor& a, const at::Tensor& b, double floor = 1e-12) {
    return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), floor);
}

TEST(ChannelsLast, UNetOutputAndLoRAGradientsMatch) {
    const Pass plain = forward_backward(false, false);
    for (bool checkpointing : {false, true}) {
        const Pass cl = forward_backward(true, checkpointing);
        // The caller sees the standard layout whatever runs inside.
        EXPECT_TRUE(cl.output.is_contiguous());
        EXPECT_LE(relative_difference(cl.output, plain.output), 1e-5)
            << "checkpointing " << checkpointing;
        ASSERT_EQ(cl.grads.size(), plain.grads.size());
        double largest = 0.0;
        for (const at::Tensor& g : plain.grads) {
            largest = std::max(largest, g.abs().max().item<double>());
        }
        for (std::size_t i = 0; i < plain.grads.size(); ++i) {
            EXPECT_TRUE(cl.grads[i].is_contiguous()) << i;  // LoRA weights keep their layout
            EXPECT_LE(relative_difference(cl.grads[i], plain.grads[i], 1e-3 * largest), 1e-4)
                << "LoRA tensor " << i << " (" << plain.names[i] << "), checkpointing "
                << checkpointing;
        }
    }
}

TEST(ChannelsLast, ConvWeightsAreConvertedAndBack) {
    UNet2DConditionModel unet(testing::tiny_unet_config(1));
    unet->set_channels_last(true);
    std::size_t converted = 0;
    for (const auto& p : unet->named_parameters()) {
        if (p.value().dim() != 4) continue;
        EXPECT_TRUE(p.value().is_contiguous(at::MemoryFormat::ChannelsLast)) << p.key();
        converted += p.value().size(2) > 1 ? 1 : 0;  // 1x1 kernels are both layouts at once
    }
    EXPECT_GT(converted, 10u);
    unet->set_channels_last(false);
    for (const auto& p : unet->named_parameters())
        EXPECT_TRUE(p.value().is_contiguous()) << p.key();
}

TEST(ChannelsLast, VaeEncodeAndDecodeMatch) {
    VAEConfig c;
    c.block_out_channels = {32, 32};
    torch::manual_seed(0);
    AutoencoderKL plain(c);
    torch::manual_seed(0);
    AutoencoderKL cl(c);
    cl->set_channels_last(true);
    torch::NoGradGuard no_grad;
    const at::Tensor image = torch::rand({1, 3, 32, 32}) * 2 - 1;
    const LatentDistribution a = plain->encode(image);
    const LatentDistribution b = cl->encode(image);
    EXPECT_TRUE(b.mean.is_contiguous());
    EXPECT_LE(relative_difference(b.mean, a.mean), 1e-5);
    EXPECT_LE(relative_difference(b.logvar, a.logvar), 1e-5);
    const at::Tensor decoded = cl->decode(a.mean);
    EXPECT_TRUE(decoded.is_contiguous());
    EXPECT_LE(relative_difference(decoded, plain->decode(a.mean)), 1e-5);
}

}  // namespace
}  // namespace loom
