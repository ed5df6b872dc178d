// Flux LoRAs: ai-toolkit's targets (every Linear of the double- and single-stream blocks, nothing
// outside them), the PEFT layout with the "transformer." prefix it saves, and the kohya layout
// refused. Loading into diffusers' FluxPipeline is checked by tests/parity/check_lora_interop.py.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <set>

#include "loom/core/error.h"
#include "loom/lora/lora_file.h"
#include "loom/lora/lora_network.h"
#include "loom/model/flux/flux_family.h"
#include "loom/model/flux/flux_transformer.h"
#include "loom/model/loading/tensor_file.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

TEST(FluxTargetRules, BlockLinearsOnly) {
    TargetRules flux;
    flux.model = lora_model_of(config::Arch::kFlux);
    for (const char* path :
         {"transformer_blocks.0.attn.to_q", "transformer_blocks.3.attn.add_k_proj",
          "transformer_blocks.0.attn.to_out.0", "transformer_blocks.0.ff.net.0.proj",
          "transformer_blocks.0.ff_context.net.2", "transformer_blocks.1.norm1.linear",
          "transformer_blocks.1.norm1_context.linear", "single_transformer_blocks.7.proj_out",
          "single_transformer_blocks.0.proj_mlp", "single_transformer_blocks.2.norm.linear"}) {
        EXPECT_TRUE(is_lora_target(path, LayerKind::kLinear, flux)) << path;
    }
    for (const char* path : {"x_embedder", "context_embedder", "proj_out", "norm_out.linear",
                             "time_text_embed.timestep_embedder.linear_1"}) {
        EXPECT_FALSE(is_lora_target(path, LayerKind::kLinear, flux)) << path;
    }
    flux.conv = true;
    EXPECT_FALSE(is_lora_target("transformer_blocks.0.attn.to_q", LayerKind::kConv3x3, flux));
    flux.ignore_if_contains = {"single_transformer_blocks"};
    EXPECT_FALSE(is_lora_target("single_transformer_blocks.0.proj_mlp", LayerKind::kLinear, flux));
    EXPECT_TRUE(is_lora_target("transformer_blocks.0.attn.to_q", LayerKind::kLinear, flux));
    // kohya's UNet set does not pick Flux's names, nor the Flux rule a UNet's.
    TargetRules kohya_unet;
    kohya_unet.unet_set = UNetModuleSet::kKohya;
    EXPECT_FALSE(is_lora_target("transformer_blocks.0.attn.to_q", LayerKind::kLinear, kohya_unet));
    EXPECT_FALSE(is_lora_target("down_blocks.0.attentions.0.proj_in", LayerKind::kLinear,
                                TargetRules{lora_model_of(config::Arch::kFlux)}));
    EXPECT_EQ(lora_model_of(config::Arch::kFlux).file_prefix, "transformer");
    EXPECT_EQ(lora_model_of(config::Arch::kSd1).file_prefix, "unet");
}

// Wan: every Linear inside the blocks, nothing outside them (ai-toolkit's block names ['blocks']).
TEST(WanTargets, EveryBlockLinearAndNothingOutside) {
    const TargetRules wan{lora_model_of(config::Arch::kWan21)};
    for (const char* path : {"blocks.0.attn1.to_q", "blocks.3.attn2.to_out.0",
                             "blocks.1.ffn.net.0.proj", "blocks.1.ffn.net.2"}) {
        EXPECT_TRUE(is_lora_target(path, LayerKind::kLinear, wan)) << path;
    }
    for (const char* path : {"condition_embedder.time_proj", "proj_out",
                             "condition_embedder.text_embedder.linear_1"}) {
        EXPECT_FALSE(is_lora_target(path, LayerKind::kLinear, wan)) << path;
    }
    EXPECT_FALSE(is_lora_target("transformer_blocks.0.attn.to_q", LayerKind::kLinear, wan));
    TargetRules only_ffn = wan;
    only_ffn.only_if_contains = {"ffn"};
    EXPECT_FALSE(is_lora_target("blocks.0.attn1.to_q", LayerKind::kLinear, only_ffn));
    // Saved as ai-toolkit saves Wan (original names under diffusion_model.); diffusers' layout
    // under transformer. is still read.
    const LoRAModel model = lora_model_of(config::Arch::kWan21);
    EXPECT_EQ(model.file_prefix, "diffusion_model");
    ASSERT_EQ(model.also_reads.size(), 1u);
    EXPECT_EQ(model.also_reads[0].prefix, "transformer");
    EXPECT_EQ(
        lora_model_reading(model, {"transformer.blocks.0.attn1.to_q.lora_A.weight"}).module_names,
        config::LoRAModuleNames::kDiffusers);
    EXPECT_EQ(lora_model_reading(model, {"diffusion_model.blocks.0.self_attn.q.lora_A.weight"})
                  .file_prefix,
              "diffusion_model");
}

class FluxLoRATest : public ::testing::Test {
  protected:
    void SetUp() override {
        torch::manual_seed(0);
        FluxConfig c;
        c.in_channels = c.out_channels = 16;
        c.num_layers = 1;
        c.num_single_layers = 1;
        c.attention_head_dim = 8;
        c.num_attention_heads = 2;
        c.joint_attention_dim = 12;
        c.pooled_projection_dim = 10;
        c.axes_dims_rope = {2, 2, 4};
        model = FluxTransformer2DModel(c);
        model->eval();
        in.hidden_states = torch::randn({1, 6, 16});
        in.encoder_hidden_states = torch::randn({1, 3, 12});
        in.pooled_projections = torch::randn({1, 10});
        in.timestep = torch::tensor({0.5f});
        in.img_ids = flux_image_ids(4, 6, at::kFloat);
        in.txt_ids = flux_text_ids(3, at::kFloat);
        in.guidance = torch::tensor({3.5f});
        file = fs::temp_directory_path() /
               ("loom_flux_lora_" + std::to_string(::getpid()) + ".safetensors");
    }
    void TearDown() override { fs::remove(file); }
    at::Tensor run() {
        torch::NoGradGuard no_grad;
        return model->forward(in);
    }
    LoRANetworkOptions options() {
        LoRANetworkOptions o;
        o.linear.rank = 2;
        o.linear.alpha = 1.0;
        o.rules.model = lora_model_of(config::Arch::kFlux);
        return o;
    }
    FluxTransformer2DModel model{nullptr};
    FluxInputs in;
    fs::path file;
};

TEST_F(FluxLoRATest, TargetsEveryBlockLinearAndStartsAsIdentity) {
    const at::Tensor base = run();
    LoRANetwork net = LoRANetwork::inject(*model, options());
    // Double block: norm1, norm1_context, q k v out, add q k v out, ff in/out, ff_context in/out
    // = 14; single block: norm, q k v, proj_mlp, proj_out = 6.
    EXPECT_EQ(net.targets().size(), 20u);
    EXPECT_EQ(net.target_model().file_prefix, "transformer");
    EXPECT_EQ(net.target_model().blocks.prefixes, FluxFamily::declared_blocks().prefixes);
    EXPECT_TRUE(torch::equal(run(), base));
    net.detach();
}

TEST_F(FluxLoRATest, PeftFileWithTheTransformerPrefixRoundTrips) {
    LoRANetwork net = LoRANetwork::inject(*model, options());
    {
        torch::NoGradGuard no_grad;
        for (auto& t : net.targets()) t.adapter->up.normal_(0, 0.1);
    }
    const at::Tensor adapted = run();
    save_lora(net, file, LoRAFileLayout::kPeft, at::kFloat, {});
    EXPECT_THROW(save_lora(net, file.string() + ".kohya", LoRAFileLayout::kKohya, at::kFloat, {}),
                 Error);
    net.detach();
    std::set<std::string> prefixes;
    for (const auto& [key, tensor] : read_all_tensors(file)) {
        prefixes.insert(key.substr(0, key.find('.')));
    }
    EXPECT_EQ(prefixes, std::set<std::string>{"transformer"});

    LoRANetwork loaded = load_lora_network(*model, file, lora_model_of(config::Arch::kFlux));
    EXPECT_EQ(loaded.targets().size(), 20u);
    EXPECT_LE((run() - adapted).abs().max().item<double>(), 1e-6);
    loaded.detach();
    // A UNet-rule load of a Flux file names the key it cannot place.
    EXPECT_THROW(load_lora_network(*model, file), FormatError);
}

// The backward the training step relies on — the fused LoRA layers, the rotary embedding's own
// gradient, checkpointing per block — against central finite differences of the loss, in float64
// (the rotary step computes in float32 as diffusers' does, hence a step of 1e-3 and a tolerance of
// 2e-3, relative): a wrong sign or a missing term is off by far more.
TEST_F(FluxLoRATest, GradientsMatchFiniteDifferences) {
    LoRANetwork net = LoRANetwork::inject(*model, options());
    model->to(at::kDouble);
    {
        torch::NoGradGuard no_grad;
        for (auto& t : net.targets()) {
            t.adapter->down.set_data(t.adapter->down.to(at::kDouble));
            t.adapter->up.set_data(t.adapter->up.to(at::kDouble).normal_(0, 0.1));
        }
    }
    net.set_training(true);
    FluxInputs d = in;
    d.encoder_hidden_states = in.encoder_hidden_states.to(at::kDouble);
    d.pooled_projections = in.pooled_projections.to(at::kDouble);
    const at::Tensor target = torch::randn({1, 6, 16}, at::kDouble);
    for (const bool checkpointing : {false, true}) {
        model->set_gradient_checkpointing(checkpointing);
        d.hidden_states = in.hidden_states.to(at::kDouble).requires_grad_(true);
        auto loss = [&](const at::Tensor& hidden) {
            FluxInputs x = d;
            x.hidden_states = hidden;
            return (model->forward(x) - target).pow(2).sum();
        };
        loss(d.hidden_states).backward();
        const LoRATarget& first = net.targets().front();
        const LoRATarget& last = net.targets().back();
        // Each checked entry: the analytic gradient against (f(p + e) - f(p - e)) / 2e.
        auto check = [&](const at::Tensor& param, const at::Tensor& grad, const char* what) {
            ASSERT_TRUE(grad.defined()) << what;
            const double eps = 1e-3;
            for (int64_t i : {int64_t{0}, param.numel() / 2, param.numel() - 1}) {
                torch::NoGradGuard no_grad;
                at::Tensor flat = param.view(-1);
                const double saved = flat[i].item<double>();
                flat[i] = saved + eps;
                const double up = loss(d.hidden_states.detach()).item<double>();
                flat[i] = saved - eps;
                const double down = loss(d.hidden_states.detach()).item<double>();
                flat[i] = saved;
                const double numeric = (up - down) / (2 * eps);
                const double analytic = grad.view(-1)[i].item<double>();
                EXPECT_NEAR(analytic, numeric, 2e-3 * std::max(1.0, std::abs(numeric)))
                    << what << "[" << i << "] checkpointing " << checkpointing;
            }
        };
        check(first.adapter->down, first.adapter->down.grad(), "first down");
        check(first.adapter->up, first.adapter->up.grad(), "first up");
        check(last.adapter->down, last.adapter->down.grad(), "last down");
        check(d.hidden_states.detach(), d.hidden_states.grad(), "latents");
        for (const auto& t : net.targets()) {
            t.adapter->down.mutable_grad() = at::Tensor();
            t.adapter->up.mutable_grad() = at::Tensor();
        }
    }
    net.detach();
}

}  // namespace
}  // namespace loom
