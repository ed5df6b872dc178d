// Every job in configs/ loads, round-trips, and the Flux example (ai-toolkit's own) resolves
// with ai-toolkit's defaults and a warning for each setting loom does not support yet.

#include <gtest/gtest.h>

#include <filesystem>

#include "loom/config/emit.h"
#include "loom/config/load.h"

namespace loom::config {
namespace {

std::vector<std::filesystem::path> example_jobs() {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator("configs")) {
        const auto ext = entry.path().extension();
        if (ext == ".yaml" || ext == ".yml") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    return files;
}

TEST(ExampleConfigs, ThereAreAtLeastThree) {
    EXPECT_GE(example_jobs().size(), 3u);
}

TEST(ExampleConfigs, EveryFileLoadsAndRoundTrips) {
    for (const auto& path : example_jobs()) {
        SCOPED_TRACE(path.string());
        const LoadedJob loaded = load_job_file(path);
        for (const Diagnostic& d : loaded.warnings) {
            EXPECT_NE(d.kind, DiagnosticKind::kUnknownKey) << d.to_string();
        }
        const LoadedJob again = load_job_text(emit_job_yaml(loaded.job), "emitted.yaml");
        EXPECT_TRUE(loaded.job == again.job);
    }
}

TEST(ExampleConfigs, AiToolkitFluxExampleResolvesWithItsDefaults) {
    const LoadedJob loaded = load_job_file("configs/flux_lora_24gb.yaml");
    const ProcessConfig& p = loaded.job.config.process.at(0);
    EXPECT_EQ(*p.model.arch, "flux");
    EXPECT_EQ(p.network.linear, 16);
    EXPECT_DOUBLE_EQ(*p.network.linear_alpha, 16.0);
    EXPECT_EQ(p.datasets.at(0).resolution, (std::vector<int>{512, 768, 1024}));
    EXPECT_EQ(p.datasets.at(0).caption_ext, ".txt");
    EXPECT_EQ(p.train.lr_scheduler, "constant");   // ai-toolkit default, not in the file
    EXPECT_DOUBLE_EQ(p.train.max_grad_norm, 1.0);  // idem
    EXPECT_EQ(p.sample.sample_start_step, 0);      // idem
    EXPECT_EQ(p.model.dtype, "bf16");              // train.dtype overwrites model.dtype
    EXPECT_EQ(loaded.job.meta.at(0).second, "my_first_flux_lora_v1");  // [name]

    std::vector<std::string> flagged;
    for (const Diagnostic& d : loaded.warnings) flagged.push_back(d.key_path);
    const std::vector<std::string> expected = {
        "config.process.0.model.quantize",  // true
    };
    std::sort(flagged.begin(), flagged.end());
    std::vector<std::string> sorted = expected;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(flagged, sorted);
}

TEST(ExampleConfigs, AiToolkitFluxSchnellExampleIsATrainableJob) {
    const LoadedJob loaded = load_job_file("configs/flux_schnell_lora_24gb.yaml");
    const ProcessConfig& p = loaded.job.config.process.at(0);
    EXPECT_EQ(*p.model.arch, "flux");
    EXPECT_EQ(p.train.noise_scheduler, "flowmatch");
    EXPECT_EQ(p.choices.lora_layout, LoRAKeyLayout::kPeft);  // diffusers' Flux layout
    EXPECT_DOUBLE_EQ(p.sample.guidance_scale, 1.0);
    std::vector<std::string> flagged;
    for (const Diagnostic& d : loaded.warnings) flagged.push_back(d.key_path);
    std::sort(flagged.begin(), flagged.end());
    // Only what loom genuinely lacks is warned: quantization, the assistant adapter.
    EXPECT_EQ(flagged, (std::vector<std::string>{"config.process.0.model.assistant_lora_path",
                                                 "config.process.0.model.quantize"}));
}

}  // namespace
}  // namespace loom::config
