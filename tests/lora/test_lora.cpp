// LoRA layers: target rules, injection into a UNet, merge/unmerge, and saving/loading both file
// layouts.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "loom/core/error.h"
#include "loom/io/safetensors.h"
#include "loom/lora/lora_adapter.h"
#include "loom/lora/lora_file.h"
#include "loom/lora/lora_file_names.h"
#include "loom/lora/lora_network.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/nn/adaptable_layers.h"
#include "loom/model/sd/unet_2d_condition.h"
#include "tiny_models.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

TEST(TargetRules, TheAiToolkitSetIsEveryLinearAndOneByOneConvOfTheUNet) {
    const TargetRules rules;  // the default
    ASSERT_EQ(rules.unet_set, UNetModuleSet::kAiToolkit);
    for (const char* yes : {"down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q",
                            "mid_block.attentions.0.transformer_blocks.0.attn2.to_out.0",
                            "up_blocks.0.attentions.1.transformer_blocks.0.ff.net.0.proj",
                            "down_blocks.1.attentions.0.proj_in", "time_embedding.linear_1",
                            "down_blocks.0.resnets.0.time_emb_proj", "add_embedding.linear_2"}) {
        EXPECT_TRUE(is_lora_target(yes, LayerKind::kLinear, rules)) << yes;
    }
    EXPECT_TRUE(
        is_lora_target("down_blocks.1.resnets.0.conv_shortcut", LayerKind::kConv1x1, rules));
    EXPECT_TRUE(is_lora_target("mid_block.attentions.0.proj_out", LayerKind::kConv1x1, rules));
    for (const char* no : {"down_blocks.0.resnets.0.conv1", "conv_in", "conv_out",
                           "down_blocks.0.downsamplers.0.conv"}) {
        EXPECT_FALSE(is_lora_target(no, LayerKind::kConv3x3, rules)) << no;
    }
    TargetRules conv = rules;
    conv.conv = true;
    for (const char* yes : {"down_blocks.0.resnets.0.conv1", "conv_in", "conv_out",
                            "up_blocks.0.upsamplers.0.conv"}) {
        EXPECT_TRUE(is_lora_target(yes, LayerKind::kConv3x3, conv)) << yes;
    }
}

TEST(TargetRules, TheKohyaSetIsTheTransformersAndWithConvTheResnets) {
    TargetRules rules;
    rules.unet_set = UNetModuleSet::kKohya;
    for (const char* yes : {"down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q",
                            "up_blocks.0.attentions.1.transformer_blocks.0.ff.net.2",
                            "down_blocks.1.attentions.0.proj_in"}) {
        EXPECT_TRUE(is_lora_target(yes, LayerKind::kLinear, rules)) << yes;
    }
    for (const char* no : {"time_embedding.linear_1", "down_blocks.0.resnets.0.time_emb_proj",
                           "add_embedding.linear_2"}) {
        EXPECT_FALSE(is_lora_target(no, LayerKind::kLinear, rules)) << no;
    }
    EXPECT_FALSE(
        is_lora_target("down_blocks.1.resnets.0.conv_shortcut", LayerKind::kConv1x1, rules));
    EXPECT_FALSE(is_lora_target("down_blocks.0.resnets.0.conv1", LayerKind::kConv3x3, rules));
    // Conv mode adds everything inside the resnets and samplers, at either rank; never the
    // UNet's own conv_in / conv_out or the embeddings.
    rules.conv = true;
    EXPECT_TRUE(is_lora_target("down_blocks.0.resnets.0.conv1", LayerKind::kConv3x3, rules));
    EXPECT_TRUE(is_lora_target("down_blocks.0.downsamplers.0.conv", LayerKind::kConv3x3, rules));
    EXPECT_TRUE(is_lora_target("down_blocks.0.resnets.0.time_emb_proj", LayerKind::kLinear, rules));
    EXPECT_TRUE(
        is_lora_target("down_blocks.1.resnets.0.conv_shortcut", LayerKind::kConv1x1, rules));
    EXPECT_FALSE(is_lora_target("conv_in", LayerKind::kConv3x3, rules));
    EXPECT_FALSE(is_lora_target("conv_out", LayerKind::kConv3x3, rules));
    EXPECT_FALSE(is_lora_target("time_embedding.linear_1", LayerKind::kLinear, rules));
}

TEST(TargetRules, ModuleSetNames) {
    EXPECT_EQ(parse_unet_module_set("ai-toolkit"), UNetModuleSet::kAiToolkit);
    EXPECT_EQ(parse_unet_module_set("kohya"), UNetModuleSet::kKohya);
    EXPECT_FALSE(parse_unet_module_set("kohya-ss").has_value());
}

TEST(TargetRules, FiltersWithIgnoreWinning) {
    for (const UNetModuleSet set : {UNetModuleSet::kAiToolkit, UNetModuleSet::kKohya}) {
        TargetRules rules;
        rules.unet_set = set;
        rules.only_if_contains = {"attn2"};
        rules.ignore_if_contains = {"to_v", "attn2.to_k"};
        const std::string base = "mid_block.attentions.0.transformer_blocks.0.";
        EXPECT_TRUE(is_lora_target(base + "attn2.to_q", LayerKind::kLinear, rules));
        EXPECT_FALSE(is_lora_target(base + "attn1.to_q", LayerKind::kLinear, rules));
        EXPECT_FALSE(is_lora_target(base + "attn2.to_v", LayerKind::kLinear, rules));
        EXPECT_FALSE(is_lora_target(base + "attn2.to_k", LayerKind::kLinear, rules));
        EXPECT_FALSE(is_lora_target("time_embedding.linear_1", LayerKind::kLinear, rules));
    }
}

// A Linear layer with a LoRA computes base + delta as one autograd operation; its output and
// every gradient equal the plain computation's, with and without a gradient for the input, and a
// layer whose dtype differs from the LoRA's takes the separate path with the same result.
class LoRALinear : public ::testing::TestWithParam<bool> {};

TEST_P(LoRALinear, TheFusedLayerEqualsThePlainComputation) {
    torch::manual_seed(3);
    const bool with_bias = GetParam();
    Linear base(8, 6, with_bias);
    for (auto& p : base->parameters()) p.requires_grad_(false);
    auto adapter = LoRAAdapter::for_linear(*base, LoRAOptions{3, 1.5, 0.0});
    {
        torch::NoGradGuard no_grad;
        adapter->up.normal_();  // zero at initialisation: the delta would vanish
    }
    adapter->multiplier = 0.7;
    adapter->training = true;
    base->set_adapter(adapter);
    const double s = 0.7 * 1.5 / 3;
    for (const bool input_grad : {true, false}) {
        const at::Tensor x = torch::randn({2, 5, 8}).requires_grad_(input_grad);
        const at::Tensor g = torch::randn({2, 5, 6});
        const at::Tensor y = base->forward(x);
        y.backward(g);
        const at::Tensor down_grad = adapter->down.grad().clone();
        const at::Tensor up_grad = adapter->up.grad().clone();
        const at::Tensor x_grad = input_grad ? x.grad().clone() : at::Tensor();
        adapter->down.mutable_grad() = at::Tensor();
        adapter->up.mutable_grad() = at::Tensor();

        const at::Tensor xr = x.detach().clone().requires_grad_(input_grad);
        const at::Tensor d = adapter->down.detach().clone().requires_grad_(true);
        const at::Tensor u = adapter->up.detach().clone().requires_grad_(true);
        const at::Tensor want =
            at::linear(xr, base->weight, base->bias) + s * at::linear(at::linear(xr, d), u);
        want.backward(g);
        EXPECT_TRUE(torch::allclose(y, want, 1e-5, 1e-6)) << input_grad;
        EXPECT_TRUE(torch::allclose(down_grad, d.grad(), 1e-5, 1e-6)) << input_grad;
        EXPECT_TRUE(torch::allclose(up_grad, u.grad(), 1e-5, 1e-6)) << input_grad;
        if (input_grad) EXPECT_TRUE(torch::allclose(x_grad, xr.grad(), 1e-5, 1e-6));
    }
    // bf16 input and weight with a float32 LoRA: the separate path, the same values.
    const at::Tensor x = torch::randn({4, 8});
    const at::Tensor fused = base->forward(x).detach();
    {
        torch::NoGradGuard no_grad;
        base->weight.set_data(base->weight.to(at::kBFloat16));
        if (with_bias) base->bias.set_data(base->bias.to(at::kBFloat16));
    }
    const at::Tensor separate = base->forward(x.to(at::kBFloat16)).to(at::kFloat).detach();
    EXPECT_TRUE(torch::allclose(separate, fused, 5e-2, 5e-2));
}

INSTANTIATE_TEST_SUITE_P(WithAndWithoutBias, LoRALinear, ::testing::Bool());

TEST(TargetRules, KohyaNames) {
    EXPECT_EQ(kohya_name("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_out.0"),
              "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_out_0");
    EXPECT_EQ(kohya_name("time_embedding.linear_1"), "lora_unet_time_embedding_linear_1");
    // SDXL's added-condition embedding by its sgm name (diffusers' converter reads that one).
    EXPECT_EQ(kohya_name("add_embedding.linear_1"), "lora_unet_label_emb_0_0");
    EXPECT_EQ(kohya_name("add_embedding.linear_2"), "lora_unet_label_emb_0_2");
}

class LoRANetworkTest : public ::testing::Test {
  protected:
    void SetUp() override {
        torch::manual_seed(0);
        unet = UNet2DConditionModel(testing::tiny_unet_config(1));
        unet->eval();
        sample = torch::randn({1, 4, 16, 16});
        context = torch::randn({1, 5, 32});
        file = fs::temp_directory_path() /
               ("loom_lora_" + std::to_string(::getpid()) + ".safetensors");
    }
    void TearDown() override { fs::remove(file); }
    at::Tensor run() {
        torch::NoGradGuard no_grad;
        return unet->forward(sample, torch::tensor({300}), context);
    }
    static void randomize(LoRANetwork& net) {
        torch::NoGradGuard no_grad;
        for (auto& t : net.targets()) t.adapter->up.normal_(0, 0.05);
    }
    LoRANetworkOptions options(int64_t rank, double alpha,
                               UNetModuleSet set = UNetModuleSet::kAiToolkit) {
        LoRANetworkOptions o;
        o.linear.rank = rank;
        o.linear.alpha = alpha;
        o.rules.unet_set = set;
        return o;
    }

    UNet2DConditionModel unet{nullptr};
    at::Tensor sample;
    at::Tensor context;
    fs::path file;
};

TEST_F(LoRANetworkTest, KohyaSetInjectsTwelvePerTransformerAndStartsAsIdentity) {
    const at::Tensor before = run();
    LoRANetwork net = LoRANetwork::inject(*unet, options(4, 1.0, UNetModuleSet::kKohya));
    EXPECT_EQ(net.targets().size(), 4u * 12u);  // transformers: down 1, mid 1, up 2
    EXPECT_EQ(net.parameters().size(), 2u * net.targets().size());
    EXPECT_TRUE(torch::equal(run(), before));  // lora_up starts at zero
    randomize(net);
    EXPECT_GT((run() - before).abs().max().item<double>(), 1e-4);
}

// The default set is every Linear and 1x1 Conv2d of the UNet (ai-toolkit's), with conv every
// Conv2d; counted here from the model's own modules.
TEST_F(LoRANetworkTest, AiToolkitSetCoversEveryLinearAndOneByOneConvAndWithConvEveryConv) {
    std::size_t linear_or_1x1 = 0;
    std::size_t conv3x3 = 0;
    for (const auto& item : unet->named_modules("", false)) {
        if (std::dynamic_pointer_cast<LinearImpl>(item.value())) ++linear_or_1x1;
        if (auto conv = std::dynamic_pointer_cast<Conv2dImpl>(item.value())) {
            ++(conv->kernel_size() == 1 ? linear_or_1x1 : conv3x3);
        }
    }
    const at::Tensor before = run();
    LoRANetwork net = LoRANetwork::inject(*unet, options(4, 1.0));
    EXPECT_EQ(net.targets().size(), linear_or_1x1);
    EXPECT_GT(net.targets().size(), 4u * 12u);  // more than the transformers
    ASSERT_NE(net.find("time_embedding.linear_1"), nullptr);
    ASSERT_NE(net.find("down_blocks.0.resnets.0.time_emb_proj"), nullptr);
    EXPECT_EQ(net.find("conv_in"), nullptr);
    EXPECT_TRUE(torch::equal(run(), before));
    net.detach();

    LoRANetworkOptions o = options(4, 1.0);
    o.conv = LoRAOptions{2, 1.0};
    LoRANetwork with_conv = LoRANetwork::inject(*unet, o);
    EXPECT_EQ(with_conv.targets().size(), linear_or_1x1 + conv3x3);
    ASSERT_NE(with_conv.find("conv_in"), nullptr);
    EXPECT_EQ(with_conv.find("conv_in")->adapter->rank(), 2);
    EXPECT_EQ(with_conv.find("down_blocks.0.resnets.0.time_emb_proj")->adapter->rank(), 4);
    randomize(with_conv);
    const at::Tensor adapted = run();
    with_conv.merge();
    EXPECT_LE((run() - adapted).abs().max().item<double>(), 1e-5);
}

TEST_F(LoRANetworkTest, MergeMatchesTheAdapterPathAndUnmergeRestores) {
    const at::Tensor base_out = run();
    LoRANetwork net = LoRANetwork::inject(*unet, options(4, 2.0));
    randomize(net);
    net.set_multiplier(0.7);
    const at::Tensor adapted = run();
    net.merge();
    EXPECT_LE((run() - adapted).abs().max().item<double>(), 1e-5);
    net.unmerge();
    EXPECT_LE((run() - adapted).abs().max().item<double>(), 1e-5);
    net.detach();
    EXPECT_LE((run() - base_out).abs().max().item<double>(), 1e-5);
}

TEST_F(LoRANetworkTest, ConvTargetsWhenSet) {
    LoRANetworkOptions o = options(4, 4.0);
    o.conv = LoRAOptions{2, 1.0};
    LoRANetwork net = LoRANetwork::inject(*unet, o);
    const LoRATarget* conv = net.find("down_blocks.0.resnets.0.conv1");
    ASSERT_NE(conv, nullptr);
    EXPECT_EQ(conv->adapter->down.sizes(), (std::vector<int64_t>{2, 32, 3, 3}));
    EXPECT_EQ(conv->adapter->up.sizes(), (std::vector<int64_t>{32, 2, 1, 1}));
    const LoRATarget* proj = net.find("mid_block.attentions.0.proj_in");  // a 1x1 conv
    ASSERT_NE(proj, nullptr);
    EXPECT_EQ(proj->adapter->rank(), 4);
    randomize(net);
    const at::Tensor adapted = run();
    net.merge();
    EXPECT_LE((run() - adapted).abs().max().item<double>(), 1e-5);
}

TEST_F(LoRANetworkTest, NothingMatchingIsAnError) {
    LoRANetworkOptions o = options(4, 1.0);
    o.rules.only_if_contains = {"no_such_module"};
    EXPECT_THROW(LoRANetwork::inject(*unet, o), Error);
}

TEST_F(LoRANetworkTest, BothLayoutsRoundTrip) {
    for (LoRAFileLayout layout : {LoRAFileLayout::kKohya, LoRAFileLayout::kPeft}) {
        LoRANetwork net = LoRANetwork::inject(*unet, options(4, 1.0));
        randomize(net);
        const at::Tensor adapted = run();
        save_lora(net, file, layout, at::kFloat, {{"ss_network_dim", "4"}});
        net.detach();

        LoRANetwork fresh = LoRANetwork::inject(*unet, options(4, 1.0));
        const LoRALoadReport report = load_lora(fresh, file);
        EXPECT_EQ(report.layout, layout);
        EXPECT_EQ(report.loaded, fresh.targets().size());
        EXPECT_LE((run() - adapted).abs().max().item<double>(), 1e-6);
        fresh.detach();
    }
}

// A UNet's "peft" file is in diffusers' attention-processor names, the only diffusers-named form
// ComfyUI maps for a UNet's attention (comfy/lora.py); the lora_A / lora_B names of earlier loom
// files and of diffusers' own still read, to the same weights.
TEST_F(LoRANetworkTest, UNetPeftFileInProcessorNamesAndLoraANamesStillRead) {
    LoRANetwork net = LoRANetwork::inject(*unet, options(4, 2.0));
    randomize(net);
    const at::Tensor adapted = run();
    save_lora(net, file, LoRAFileLayout::kPeft, at::kFloat, {});
    const SafetensorsFile f = SafetensorsFile::open(file);
    const std::string attn = "unet.mid_block.attentions.0.transformer_blocks.0.attn1.";
    EXPECT_NE(f.find(attn + "processor.to_q_lora.down.weight"), nullptr);
    EXPECT_NE(f.find(attn + "processor.to_out_lora.up.weight"), nullptr);
    EXPECT_NE(f.find("unet.down_blocks.0.resnets.0.time_emb_proj.lora.down.weight"), nullptr);
    EXPECT_EQ(f.find(attn + "to_q.lora_A.weight"), nullptr);
    EXPECT_EQ(unet_processor_stem("a.attn2.to_out.0"), "a.attn2.processor.to_out_lora");
    EXPECT_EQ(unet_module_of_processor_stem("a.attn2.processor.to_k_lora"), "a.attn2.to_k");
    EXPECT_EQ(unet_module_of_processor_stem("conv_in.lora"), "conv_in");
    EXPECT_EQ(unet_module_of_processor_stem("conv_in"), std::nullopt);

    NamedTensors lora_a;
    for (const LoRATarget& t : net.targets()) {
        lora_a.emplace_back("unet." + t.path + ".lora_A.weight", t.adapter->down.detach().clone());
        lora_a.emplace_back("unet." + t.path + ".lora_B.weight",
                            t.adapter->up.detach() * t.adapter->scale());
    }
    net.detach();
    const fs::path older = fs::path(file).replace_extension(".lora_a.safetensors");
    write_tensors(older, lora_a);
    for (const fs::path& path : {file, older}) {
        LoRANetwork fresh = LoRANetwork::inject(*unet, options(4, 2.0));
        EXPECT_EQ(load_lora(fresh, path).loaded, fresh.targets().size()) << path;
        EXPECT_LE((run() - adapted).abs().max().item<double>(), 1e-5) << path;
        fresh.detach();
        LoRANetwork shaped = load_lora_network(*unet, path);
        EXPECT_EQ(shaped.targets().size(), fresh.targets().size()) << path;
        EXPECT_LE((run() - adapted).abs().max().item<double>(), 1e-5) << path;
        shaped.detach();
    }
    fs::remove(older);
}

TEST_F(LoRANetworkTest, KohyaFileHasAlphaAndMetadata) {
    LoRANetwork net = LoRANetwork::inject(*unet, options(4, 2.0));
    save_lora(net, file, LoRAFileLayout::kKohya, at::kHalf, {{"ss_network_alpha", "2.0"}});
    const SafetensorsFile f = SafetensorsFile::open(file);
    const TensorInfo* alpha =
        f.find("lora_unet_mid_block_attentions_0_transformer_blocks_0_attn1_to_q.alpha");
    ASSERT_NE(alpha, nullptr);
    EXPECT_TRUE(alpha->shape.empty());
    EXPECT_EQ(alpha->dtype, DType::kF16);
    EXPECT_NE(
        f.find("lora_unet_mid_block_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight"),
        nullptr);
    ASSERT_NE(f.metadata_value("format"), nullptr);
    EXPECT_EQ(*f.metadata_value("format"), "pt");
    EXPECT_EQ(*f.metadata_value("ss_network_alpha"), "2.0");
    net.detach();
}

TEST_F(LoRANetworkTest, RankMismatchIsAClearError) {
    LoRANetwork net = LoRANetwork::inject(*unet, options(8, 8.0, UNetModuleSet::kKohya));
    save_lora(net, file, LoRAFileLayout::kKohya, at::kFloat, {});
    net.detach();
    LoRANetwork other = LoRANetwork::inject(*unet, options(4, 4.0, UNetModuleSet::kKohya));
    try {
        load_lora(other, file);
        FAIL();
    } catch (const FormatError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("48 with another rank (lora_unet_down_blocks_1_attentions_0_proj_in "
                           "(file rank 8, network rank 4)"),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find("was it trained for this model with the same network settings?"),
                  std::string::npos);
    }
    other.detach();
}

}  // namespace
}  // namespace loom
