// LoRA files in Black Forest Labs' Flux names, as ai-toolkit writes Chroma LoRAs
// ("diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight"): loom's q, k, v (and a single
// block's MLP input) written as one LoRA of the fused Linear — downs stacked, ups
// block-diagonal, alpha/rank folded — that loads back part by part to the same adapters, and a
// fused key trained on the fused Linear (one shared down, as ai-toolkit's own files are) loading
// as that rank on every part with the same weight change. Loading by diffusers' ChromaPipeline
// is checked by tests/parity/check_trained_lora.py.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <set>

#include "loom/core/error.h"
#include "loom/lora/lora_file.h"
#include "loom/lora/lora_file_names.h"
#include "loom/lora/lora_network.h"
#include "loom/model/chroma/chroma_transformer.h"
#include "loom/model/loading/tensor_file.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

TEST(BflLoRANames, FusedPartsAndBack) {
    const auto q = flux_original_name("transformer_blocks.3.attn.to_k");
    ASSERT_TRUE(q);
    EXPECT_EQ(q->stem, "double_blocks.3.img_attn.qkv");
    EXPECT_EQ(q->part, 1);
    EXPECT_EQ(q->parts, 3);
    const auto mlp = flux_original_name("single_transformer_blocks.12.proj_mlp");
    ASSERT_TRUE(mlp);
    EXPECT_EQ(mlp->stem, "single_blocks.12.linear1");
    EXPECT_EQ(mlp->part, 3);
    EXPECT_EQ(mlp->parts, 4);
    EXPECT_EQ(flux_original_name("transformer_blocks.0.attn.to_add_out")->stem,
              "double_blocks.0.txt_attn.proj");
    EXPECT_EQ(flux_original_name("transformer_blocks.0.ff_context.net.2")->stem,
              "double_blocks.0.txt_mlp.2");
    EXPECT_EQ(flux_original_name("single_transformer_blocks.0.proj_out")->parts, 1);
    EXPECT_FALSE(flux_original_name("proj_out"));
    EXPECT_FALSE(flux_original_name("transformer_blocks.x.attn.to_q"));
    EXPECT_EQ(flux_diffusers_names("double_blocks.1.txt_attn.qkv"),
              (std::vector<std::string>{"transformer_blocks.1.attn.add_q_proj",
                                        "transformer_blocks.1.attn.add_k_proj",
                                        "transformer_blocks.1.attn.add_v_proj"}));
    EXPECT_EQ(flux_diffusers_names("single_blocks.0.linear1").size(), 4u);
    EXPECT_TRUE(flux_diffusers_names("double_blocks.0.img_attn.norm").empty());
    const LoRAModel chroma = lora_model_of(config::Arch::kChroma);
    EXPECT_EQ(chroma.file_prefix, "diffusion_model");
    EXPECT_EQ(lora_key_stem(chroma, "transformer_blocks.0.attn.to_out.0"),
              "diffusion_model.double_blocks.0.img_attn.proj");
    EXPECT_EQ(module_paths_of(chroma, "diffusion_model.single_blocks.1.linear2", nullptr),
              std::vector<std::string>{"single_transformer_blocks.1.proj_out"});
    EXPECT_TRUE(module_paths_of(chroma, "transformer.single_blocks.1.linear2", nullptr).empty());
}

class BflLoRATest : public ::testing::Test {
  protected:
    void SetUp() override {
        torch::manual_seed(0);
        ChromaConfig c;
        c.flux.in_channels = c.flux.out_channels = 16;
        c.flux.num_layers = 1;
        c.flux.num_single_layers = 1;
        c.flux.attention_head_dim = 8;
        c.flux.num_attention_heads = 2;
        c.flux.joint_attention_dim = 12;
        c.flux.axes_dims_rope = {2, 2, 4};
        c.approximator_num_channels = 16;
        c.approximator_hidden_dim = 24;
        c.approximator_layers = 1;
        model = ChromaTransformer2DModel(c);
        model->eval();
        in.hidden_states = torch::randn({1, 6, 16});
        in.encoder_hidden_states = torch::randn({1, 3, 12});
        in.timestep = torch::tensor({0.5f});
        in.img_ids = flux_image_ids(4, 6, at::kFloat);
        in.txt_ids = flux_text_ids(3, at::kFloat);
        file = fs::temp_directory_path() /
               ("loom_bfl_lora_" + std::to_string(::getpid()) + ".safetensors");
    }
    void TearDown() override { fs::remove(file); }
    at::Tensor run() {
        torch::NoGradGuard no_grad;
        return model->forward(in);
    }
    LoRANetworkOptions options() {
        LoRANetworkOptions o;
        o.linear.rank = 2;
        o.linear.alpha = 1.0;  // scale 0.5: folded into lora_B
        o.rules.model = lora_model_of(config::Arch::kChroma);
        return o;
    }
    ChromaTransformer2DModel model{nullptr};
    ChromaInputs in;
    fs::path file;
};

TEST_F(BflLoRATest, FusedKeysRoundTripToTheSameAdapters) {
    LoRANetwork net = LoRANetwork::inject(*model, options());
    // Double block: q k v out, add q k v out, ff in/out, ff_context in/out = 12 (no modulation
    // Linears in Chroma); single block: q k v, proj_mlp, proj_out = 5.
    ASSERT_EQ(net.targets().size(), 17u);
    std::map<std::string, at::Tensor> ups;
    {
        torch::NoGradGuard no_grad;
        for (auto& t : net.targets()) {
            t.adapter->up.normal_(0, 0.1);
            ups[t.path] = t.adapter->up.clone();
        }
    }
    const at::Tensor adapted = run();
    save_lora(net, file, LoRAFileLayout::kPeft, at::kFloat, {});
    const NamedTensors tensors = read_all_tensors(file);
    std::map<std::string, at::Tensor> by_key(tensors.begin(), tensors.end());
    std::set<std::string> stems;
    for (const auto& [key, tensor] : tensors) {
        EXPECT_EQ(key.rfind("diffusion_model.", 0), 0u) << key;
        EXPECT_EQ(key.find("transformer_blocks"), std::string::npos) << key;
        stems.insert(key.substr(0, key.rfind(".lora_")));
    }
    // 8 keys in the double block (2 qkv, 2 proj, 4 mlp), 2 in the single one.
    EXPECT_EQ(stems.size(), 10u);
    const int64_t dim = 16;
    const at::Tensor qkv_a =
        by_key.at("diffusion_model.double_blocks.0.img_attn.qkv.lora_A.weight");
    const at::Tensor qkv_b =
        by_key.at("diffusion_model.double_blocks.0.img_attn.qkv.lora_B.weight");
    EXPECT_EQ(qkv_a.sizes(), (at::IntArrayRef{6, dim}));
    EXPECT_EQ(qkv_b.sizes(), (at::IntArrayRef{3 * dim, 6}));
    // Block-diagonal: k's rows see only k's down; the scale is folded in.
    EXPECT_EQ(qkv_b.narrow(0, dim, dim).narrow(1, 0, 2).count_nonzero().item<int64_t>(), 0);
    EXPECT_TRUE(at::allclose(qkv_b.narrow(0, dim, dim).narrow(1, 2, 2),
                             ups.at("transformer_blocks.0.attn.to_k") * 0.5));
    const at::Tensor linear1 = by_key.at("diffusion_model.single_blocks.0.linear1.lora_B.weight");
    EXPECT_EQ(linear1.size(0), 3 * dim + 4 * dim);  // q, k, v and the 4x MLP input
    EXPECT_EQ(linear1.size(1), 8);

    // Into a network of the same options: the same adapters.
    {
        torch::NoGradGuard no_grad;
        for (auto& t : net.targets()) t.adapter->up.zero_();
    }
    const LoRALoadReport report = load_lora(net, file);
    EXPECT_EQ(report.loaded, 17u);
    for (const auto& t : net.targets()) {
        EXPECT_LE((t.adapter->up - ups.at(t.path)).abs().max().item<double>(), 1e-7) << t.path;
    }
    net.detach();
    // Built from the file alone (loom sample --lora): rank 2 per part, the same output.
    LoRANetwork loaded = load_lora_network(*model, file, lora_model_of(config::Arch::kChroma));
    EXPECT_EQ(loaded.targets().size(), 17u);
    for (const auto& t : loaded.targets()) EXPECT_EQ(t.adapter->rank(), 2) << t.path;
    EXPECT_LE((run() - adapted).abs().max().item<double>(), 1e-6);
    loaded.detach();
}

// A LoRA trained on the fused Linear (ai-toolkit's own Chroma files): lora_A [r, in] shared by
// q, k and v, lora_B's rows theirs. Each part loads as rank r with exactly that change.
TEST_F(BflLoRATest, AFusedLinearsLoRALoadsOnEveryPart) {
    LoRANetwork shaped = LoRANetwork::inject(*model, options());
    NamedTensors fused;
    std::map<std::string, at::Tensor> downs, ups;
    std::set<std::string> written;
    for (const auto& t : shaped.targets()) {
        const LoRAFileSlot slot = lora_file_slot(shaped.target_model(), t.path);
        if (!written.insert(slot.stem).second) continue;
        const auto paths = module_paths_of(shaped.target_model(), slot.stem, nullptr);
        int64_t rows = 0;
        for (const std::string& p : paths) {
            for (const auto& u : shaped.targets()) {
                if (u.path == p) rows += u.adapter->up.size(0);
            }
        }
        const at::Tensor a = torch::randn({3, t.adapter->down.size(1)});
        const at::Tensor b = torch::randn({rows, 3}) * 0.1;
        fused.emplace_back(slot.stem + ".lora_A.weight", a);
        fused.emplace_back(slot.stem + ".lora_B.weight", b);
        downs[slot.stem] = a;
        ups[slot.stem] = b;
    }
    shaped.detach();
    write_tensors(file, fused, {});
    LoRANetwork loaded = load_lora_network(*model, file, lora_model_of(config::Arch::kChroma));
    ASSERT_EQ(loaded.targets().size(), 17u);
    for (const auto& t : loaded.targets()) {
        const LoRAFileSlot slot = lora_file_slot(loaded.target_model(), t.path);
        EXPECT_EQ(t.adapter->rank(), 3) << t.path;
        int64_t row = 0;
        for (const std::string& p : module_paths_of(loaded.target_model(), slot.stem, nullptr)) {
            if (p == t.path) break;
            for (const auto& u : loaded.targets()) {
                if (u.path == p) row += u.adapter->up.size(0);
            }
        }
        const at::Tensor want = at::matmul(ups.at(slot.stem).narrow(0, row, t.adapter->up.size(0)),
                                           downs.at(slot.stem));
        const at::Tensor got = at::matmul(t.adapter->up, t.adapter->down) * t.adapter->scale();
        EXPECT_LE((got - want).abs().max().item<double>(), 1e-6) << t.path;
    }
    loaded.detach();
}

// Only some of a fused Linear's parts trained: the file cannot name them, and says so.
TEST_F(BflLoRATest, APartOfAFusedLinearIsRefused) {
    LoRANetworkOptions o = options();
    o.rules.only_if_contains = {"to_q", "to_out"};
    LoRANetwork net = LoRANetwork::inject(*model, o);
    try {
        save_lora(net, file, LoRAFileLayout::kPeft, at::kFloat, {});
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("img_attn.qkv"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("target all of them or none"), std::string::npos);
    }
    EXPECT_FALSE(fs::exists(file));
    net.detach();
}

}  // namespace
}  // namespace loom
