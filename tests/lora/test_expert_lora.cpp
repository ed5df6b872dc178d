// LoRAs of a denoiser made of experts (Wan 2.2 14B): a LoRA for the trained experts' block
// Linears only, one file per expert in ai-toolkit's layout ("<name>_high_noise.safetensors" with
// diffusion_model.blocks.N.self_attn.q keys, the expert's prefix dropped), read back whichever
// of the pair is named. diffusers' loading of the pair is checked by tests/cli/test_train_wan22.sh.
// Wan 2.1's single file is in the same layout, and its earlier diffusers-named one still reads.

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "loom/core/error.h"
#include "loom/lora/lora_file.h"
#include "loom/lora/lora_file_names.h"
#include "loom/lora/lora_network.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/wan22/wan22_model.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

WanTransformer3DModel tiny_transformer() {
    WanConfig c;
    c.num_attention_heads = 2;
    c.attention_head_dim = 12;
    c.in_channels = 4;
    c.out_channels = 4;
    c.text_dim = 16;
    c.freq_dim = 32;
    c.ffn_dim = 40;
    c.num_layers = 2;
    c.rope_max_seq_len = 64;
    return WanTransformer3DModel(c);
}

fs::path fresh_dir(const std::string& name) {
    const fs::path dir =
        fs::temp_directory_path() / ("loom_expert_lora_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
}

TEST(WanOriginalNames, BlockLinearsBothWaysAndNothingElse) {
    EXPECT_EQ(wan_original_name("blocks.0.attn1.to_q"), "blocks.0.self_attn.q");
    EXPECT_EQ(wan_original_name("blocks.12.attn2.to_out.0"), "blocks.12.cross_attn.o");
    EXPECT_EQ(wan_original_name("blocks.3.ffn.net.0.proj"), "blocks.3.ffn.0");
    EXPECT_EQ(wan_original_name("blocks.3.ffn.net.2"), "blocks.3.ffn.2");
    for (const char* path : {"blocks.0.attn1.to_q", "blocks.1.attn1.to_k", "blocks.2.attn2.to_v",
                             "blocks.3.attn2.add_k_proj", "blocks.4.ffn.net.2"}) {
        EXPECT_EQ(wan_diffusers_name(wan_original_name(path)), path);
    }
    EXPECT_THROW(wan_original_name("condition_embedder.time_proj"), Error);
    EXPECT_THROW(wan_original_name("blocks.x.attn1.to_q"), Error);
    EXPECT_THROW(wan_diffusers_name("blocks.0.self_attn.norm_q"), Error);
}

TEST(ExpertLoRA, TrainedExpertsOnlyAndTheirFiles) {
    const LoRAModel both = lora_model_of(config::Arch::kWan22_14b);
    ASSERT_EQ(both.blocks.experts.size(), 2u);
    EXPECT_EQ(both.file_prefix, "diffusion_model");
    const LoRAModel high = with_trained_experts(both, {true, false});
    const TargetRules rules{high};
    EXPECT_TRUE(is_lora_target("transformer_1.blocks.0.attn1.to_q", LayerKind::kLinear, rules));
    EXPECT_FALSE(is_lora_target("transformer_2.blocks.0.attn1.to_q", LayerKind::kLinear, rules));
    EXPECT_FALSE(is_lora_target("transformer_1.proj_out", LayerKind::kLinear, rules));
    ASSERT_EQ(high.blocks.experts.size(), 1u);
    EXPECT_EQ(lora_key_stem(both, "transformer_2.blocks.1.attn2.to_k"),
              "diffusion_model.blocks.1.cross_attn.k");
    EXPECT_EQ(expert_file("run/a_000000010.safetensors", both.blocks.experts[1]),
              fs::path("run/a_000000010_low_noise.safetensors"));
    EXPECT_EQ(expert_of_file(both, "x/a_high_noise.safetensors"), &both.blocks.experts[0]);
    EXPECT_EQ(expert_of_file(both, "x/a.safetensors"), nullptr);
    // A model of one denoiser is left alone.
    EXPECT_TRUE(
        with_trained_experts(lora_model_of(config::Arch::kWan21), {true, false}).blocks.prefixes ==
        lora_model_of(config::Arch::kWan21).blocks.prefixes);
}

TEST(ExpertLoRA, SavedAsAPairInAiToolkitsLayoutAndReadBackFromEither) {
    Wan22Experts experts(tiny_transformer(), tiny_transformer());
    LoRANetworkOptions o;
    o.linear.rank = 2;
    o.linear.alpha = 1;
    o.rules.model = lora_model_of(config::Arch::kWan22_14b);
    LoRANetwork net = LoRANetwork::inject(*experts, o);
    // 2 experts x 2 blocks x (4 self + 4 cross attention + 2 feed-forward) Linears.
    ASSERT_EQ(net.targets().size(), 40u);
    torch::NoGradGuard no_grad;
    for (const LoRATarget& t : net.targets()) t.adapter->up.normal_();
    const fs::path dir = fresh_dir("pair");
    const auto files =
        save_lora(net, dir / "run.safetensors", LoRAFileLayout::kPeft, at::kFloat, {});
    ASSERT_EQ(files, (std::vector<fs::path>{dir / "run_high_noise.safetensors",
                                            dir / "run_low_noise.safetensors"}));
    EXPECT_FALSE(fs::exists(dir / "run.safetensors"));
    std::set<std::string> keys;
    for (const auto& [key, tensor] : read_all_tensors(files[0])) keys.insert(key);
    EXPECT_EQ(keys.size(), 40u);  // lora_A and lora_B of each of 20 modules, no alpha
    EXPECT_TRUE(keys.count("diffusion_model.blocks.0.self_attn.q.lora_A.weight"));
    EXPECT_TRUE(keys.count("diffusion_model.blocks.1.ffn.2.lora_B.weight"));
    // Naming either file loads both experts; the weights come back.
    Wan22Experts other(tiny_transformer(), tiny_transformer());
    LoRANetwork back = load_lora_network(*other, files[1], lora_model_of(config::Arch::kWan22_14b));
    ASSERT_EQ(back.targets().size(), 40u);
    for (const LoRATarget& t : back.targets()) {
        const LoRATarget* same = nullptr;
        for (const LoRATarget& s : net.targets()) {
            if (s.path == t.path) same = &s;
        }
        ASSERT_NE(same, nullptr) << t.path;
        EXPECT_TRUE(at::allclose(t.adapter->up * t.adapter->scale(),
                                 same->adapter->up * same->adapter->scale()))
            << t.path;
    }
    // A network of both experts needs both files.
    fs::remove(files[1]);
    EXPECT_THROW(load_lora(net, files[0]), IoError);
    fs::remove_all(dir);
}

// Wan 2.1 is saved as ai-toolkit saves it (convert_to_original): the original names under
// "diffusion_model.", which ComfyUI maps; a file in diffusers' names under "transformer." — what
// loom wrote before, and what diffusers writes — still loads, to the same weights.
TEST(WanLoRA, Wan21InAiToolkitsLayoutAndDiffusersLayoutStillRead) {
    WanTransformer3DModel wan = tiny_transformer();
    LoRANetworkOptions o;
    o.linear.rank = 2;
    o.linear.alpha = 2;
    o.rules.model = lora_model_of(config::Arch::kWan21);
    LoRANetwork net = LoRANetwork::inject(*wan, o);
    ASSERT_EQ(net.targets().size(), 20u);  // 2 blocks x (4 + 4 + 2) Linears
    torch::NoGradGuard no_grad;
    for (const LoRATarget& t : net.targets()) t.adapter->up.normal_();
    const fs::path dir = fresh_dir("wan21");
    save_lora(net, dir / "new.safetensors", LoRAFileLayout::kPeft, at::kFloat, {});
    std::set<std::string> keys;
    for (const auto& [key, tensor] : read_all_tensors(dir / "new.safetensors")) keys.insert(key);
    EXPECT_EQ(keys.size(), 40u);
    EXPECT_TRUE(keys.count("diffusion_model.blocks.0.self_attn.q.lora_A.weight"));
    EXPECT_TRUE(keys.count("diffusion_model.blocks.1.cross_attn.o.lora_B.weight"));
    EXPECT_TRUE(keys.count("diffusion_model.blocks.1.ffn.0.lora_A.weight"));
    // The earlier layout: diffusers' names under transformer., alpha folded into lora_B.
    NamedTensors old;
    for (const LoRATarget& t : net.targets()) {
        old.emplace_back("transformer." + t.path + ".lora_A.weight", t.adapter->down.clone());
        old.emplace_back("transformer." + t.path + ".lora_B.weight",
                         t.adapter->up * t.adapter->scale());
    }
    write_tensors(dir / "old.safetensors", old);
    for (const char* name : {"new.safetensors", "old.safetensors"}) {
        WanTransformer3DModel other = tiny_transformer();
        LoRANetwork back =
            load_lora_network(*other, dir / name, lora_model_of(config::Arch::kWan21));
        ASSERT_EQ(back.targets().size(), 20u) << name;
        WanTransformer3DModel target = tiny_transformer();
        LoRANetwork into = LoRANetwork::inject(*target, o);
        EXPECT_EQ(load_lora(into, dir / name).loaded, 20u) << name;
        for (const LoRATarget& t : back.targets()) {
            const LoRATarget* same = net.find(t.path);
            ASSERT_NE(same, nullptr) << t.path;
            EXPECT_TRUE(at::allclose(t.adapter->delta_weight(), same->adapter->delta_weight()))
                << name << " " << t.path;
            EXPECT_TRUE(at::allclose(into.find(t.path)->adapter->delta_weight(),
                                     same->adapter->delta_weight()))
                << name << " " << t.path;
        }
    }
    fs::remove_all(dir);
}

TEST(ExpertLoRA, OneTrainedExpertWritesOneFile) {
    Wan22Experts experts(tiny_transformer(), tiny_transformer());
    LoRANetworkOptions o;
    o.linear.rank = 2;
    o.rules.model = with_trained_experts(lora_model_of(config::Arch::kWan22_14b), {false, true});
    LoRANetwork net = LoRANetwork::inject(*experts, o);
    EXPECT_EQ(net.targets().size(), 20u);
    const fs::path dir = fresh_dir("one");
    const auto files =
        save_lora(net, dir / "run.safetensors", LoRAFileLayout::kPeft, at::kFloat, {});
    EXPECT_EQ(files, (std::vector<fs::path>{dir / "run_low_noise.safetensors"}));
    EXPECT_NO_THROW(load_lora(net, dir / "run.safetensors"));
    EXPECT_THROW(lora_files_of(o.rules.model, dir / "elsewhere.safetensors"), IoError);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace loom
