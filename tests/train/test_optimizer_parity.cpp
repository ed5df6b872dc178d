// loom's 8-bit AdamW and Prodigy against the Python optimizers ai-toolkit uses, stepped on the
// same seeded weights and gradients (tests/parity/optimizer_reference.py): bitsandbytes 0.50's
// AdamW8bit on the CPU to the bit (weights, codes and block maxima), prodigyopt's Prodigy within
// float32 rounding, its d to 1e-12 relative.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "loom/model/loading/tensor_file.h"
#include "loom/train/adamw_8bit.h"
#include "loom/train/prodigy.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

std::map<std::string, at::Tensor> reference(const std::string& name) {
    const char* dir = std::getenv("LOOM_PARITY_DIR");
    if (dir == nullptr) return {};
    const fs::path file = fs::path(dir) / "optimizers" / (name + ".safetensors");
    std::map<std::string, at::Tensor> out;
    for (auto& [key, t] : read_all_tensors(file)) out[key] = t;
    return out;
}

at::Tensor at_key(const std::map<std::string, at::Tensor>& ref, const std::string& key) {
    const auto it = ref.find(key);
    if (it == ref.end()) throw std::runtime_error("the reference has no tensor " + key);
    return it->second;
}

TEST(OptimizerParity, AdamW8bitMatchesBitsandbytesToTheBit) {
    const auto ref = reference("adamw8bit");
    if (ref.empty()) GTEST_SKIP() << "LOOM_PARITY_DIR is not set";
    EXPECT_TRUE(torch::equal(dynamic_map(true), at_key(ref, "qmap1")));
    EXPECT_TRUE(torch::equal(dynamic_map(false), at_key(ref, "qmap2")));

    std::vector<at::Tensor> params = {at_key(ref, "p_big_0").clone().requires_grad_(true),
                                      at_key(ref, "p_small_0").clone().requires_grad_(true)};
    AdamW8bitOptions o;
    o.eps = 1e-6;
    o.weight_decay = 0.01;
    AdamW8bit opt(params, o);
    EXPECT_TRUE(opt.quantized(0));
    EXPECT_FALSE(opt.quantized(1));
    const char* names[] = {"big", "small"};
    for (int k = 1; k <= 3; ++k) {
        const std::string step = "_" + std::to_string(k);
        for (std::size_t i = 0; i < 2; ++i) {
            params[i].mutable_grad() = at_key(ref, std::string("g_") + names[i] + step).clone();
        }
        opt.step(1e-4);
        const OptimizerState s = opt.state();
        for (std::size_t i = 0; i < 2; ++i) {
            const std::string n = names[i];
            EXPECT_TRUE(torch::equal(params[i].detach(), at_key(ref, "p_" + n + step)))
                << n << " weights, step " << k << ": max difference "
                << (params[i].detach() - at_key(ref, "p_" + n + step)).abs().max().item<double>();
            EXPECT_TRUE(torch::equal(s.lists.at("state1")[i], at_key(ref, "state1_" + n + step)))
                << n << " state1, step " << k;
            EXPECT_TRUE(torch::equal(s.lists.at("state2")[i], at_key(ref, "state2_" + n + step)))
                << n << " state2, step " << k;
        }
        EXPECT_TRUE(torch::equal(s.lists.at("absmax1")[0], at_key(ref, "absmax1_big" + step)));
        EXPECT_TRUE(torch::equal(s.lists.at("absmax2")[0], at_key(ref, "absmax2_big" + step)));
    }
}

TEST(OptimizerParity, ProdigyMatchesProdigyopt) {
    const auto ref = reference("prodigy");
    if (ref.empty()) GTEST_SKIP() << "LOOM_PARITY_DIR is not set";
    std::vector<at::Tensor> params = {at_key(ref, "p_down_0").clone().requires_grad_(true),
                                      at_key(ref, "p_up_0").clone().requires_grad_(true)};
    ProdigyOptions o;
    o.eps = 1e-6;
    o.weight_decay = 1e-4;
    Prodigy opt(params, o);
    const char* names[] = {"down", "up"};
    for (int k = 1; k <= 6; ++k) {
        const std::string step = "_" + std::to_string(k);
        for (std::size_t i = 0; i < 2; ++i) {
            params[i].mutable_grad() = at_key(ref, std::string("g_") + names[i] + step).clone();
        }
        opt.step(1.0);
        const double d = at_key(ref, "d" + step).item<double>();
        EXPECT_NEAR(opt.d(), d, 1e-12 * d) << "step " << k;
        for (std::size_t i = 0; i < 2; ++i) {
            const at::Tensor want = at_key(ref, std::string("p_") + names[i] + step);
            const double scale = std::max(want.abs().max().item<double>(), 1e-12);
            EXPECT_LE((params[i].detach() - want).abs().max().item<double>() / scale, 1e-6)
                << names[i] << ", step " << k;
        }
    }
    EXPECT_GT(opt.d(), 10 * o.d0);  // d grew: the estimate is doing its job
}

}  // namespace
}  // namespace loom
