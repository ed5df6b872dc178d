// Every job in configs/ loads, round-trips, and the Flux example (ai-toolkit's own) resolves
// with ai-toolkit's defaults and a warning for each setting loom does not support yet. Every
// trainer job ai-toolkit ships as an example (tests/config/data/ai-toolkit, copied from
// ostris/ai-toolkit config/examples at 27a03a91, MIT) has no key loom does not know.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>

#include "loom/config/emit.h"
#include "loom/config/load.h"
#include "loom/core/error.h"

namespace loom::config {
namespace {

std::vector<std::filesystem::path> example_jobs(const std::filesystem::path& folder = "configs") {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
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
    // model.quantize: true is implemented (low_vram level 2 in qfloat8): nothing is flagged.
    const std::vector<std::string> expected = {};
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
    // The assistant adapter is read (lora/assistant_adapter.h): nothing is flagged.
    EXPECT_EQ(*p.model.assistant_lora_path, "ostris/FLUX.1-schnell-training-adapter");
    EXPECT_TRUE(loaded.warnings.empty()) << loaded.warnings.front().to_string();
}

TEST(ExampleConfigs, ZImageJobAsTheUiWritesItIsATrainableJob) {
    const LoadedJob loaded = load_job_file("configs/zimage_lora.yaml");
    const ProcessConfig& p = loaded.job.config.process.at(0);
    EXPECT_EQ(p.type, "diffusion_trainer");
    EXPECT_EQ(*p.model.arch, "zimage");
    ASSERT_TRUE(p.choices.arch.has_value());
    EXPECT_EQ(*p.choices.arch, Arch::kZImage);
    EXPECT_EQ(p.train.noise_scheduler, "flowmatch");
    EXPECT_EQ(p.train.timestep_type, "weighted");
    EXPECT_EQ(p.choices.lora_layout, LoRAKeyLayout::kPeft);  // diffusion_model.<path>.lora_A
    EXPECT_TRUE(p.model.quantize);
    for (const Diagnostic& d : loaded.warnings) {
        EXPECT_NE(d.kind, DiagnosticKind::kUnknownKey) << d.to_string();
        EXPECT_EQ(d.key_path.find("model.arch"), std::string::npos) << d.to_string();
    }
}

// Issue 63: the job ai-toolkit's UI writes warns about nothing it leaves at its defaults — the
// LoKr keys of a plain LoRA, the mask keys without a mask, the preservation keys with the
// feature off, a dataset's network_weight 1, the UI's database and logger — and each of those
// keys is warned once it would change training.
TEST(ExampleConfigs, UiDefaultsAreNotWarnedAndWhatWouldChangeTrainingIs) {
    const LoadedJob ui = load_job_file("configs/zimage_lora.yaml");
    for (const Diagnostic& d : ui.warnings) ADD_FAILURE() << d.to_string();
    const auto warned = [](std::vector<std::string> overrides) {
        LoadOptions o;
        o.overrides = std::move(overrides);
        std::vector<std::string> keys;
        for (const Diagnostic& d : load_job_file("configs/zimage_lora.yaml", o).warnings) {
            if (d.kind == DiagnosticKind::kNotSupportedYet) keys.push_back(d.key_path);
        }
        std::sort(keys.begin(), keys.end());
        return keys;
    };
    const std::string p = "config.process.0.";
    EXPECT_EQ(warned({p + "network.type=lokr"}),
              (std::vector<std::string>{p + "network.lokr_factor", p + "network.lokr_full_rank",
                                        p + "network.type"}));
    EXPECT_EQ(
        warned({p + "datasets.0.mask_path=/masks"}),
        (std::vector<std::string>{p + "datasets.0.mask_min_value", p + "datasets.0.mask_path"}));
    EXPECT_EQ(warned({p + "train.diff_output_preservation=true"}),
              (std::vector<std::string>{p + "train.diff_output_preservation",
                                        p + "train.diff_output_preservation_class",
                                        p + "train.diff_output_preservation_multiplier"}));
    EXPECT_EQ(warned({p + "datasets.0.network_weight=0.5"}),
              (std::vector<std::string>{p + "datasets.0.network_weight"}));
    EXPECT_EQ(warned({p + "datasets.0.network_weight=1.0"}), std::vector<std::string>{});
}

// ai-toolkit trains a transformer's LoRA at alpha = rank (PEFT format, "no alpha for peft"):
// linear_alpha is replaced, and said once; SD keeps kohya's alpha.
TEST(ExampleConfigs, TransformerLoRAsTrainAtAlphaEqualToRank) {
    LoadOptions o;
    const std::string p = "config.process.0.";
    o.overrides = {p + "network.linear_alpha=8", p + "network.linear=16"};
    const LoadedJob zimage = load_job_file("configs/zimage_lora.yaml", o);
    const NetworkConfig& n = zimage.job.config.process.at(0).network;
    EXPECT_EQ(*n.linear_alpha, 16.0);
    EXPECT_EQ(zimage.job.config.process.at(0).choices.job_linear_alpha, 8.0);
    std::vector<std::string> said;
    for (const Diagnostic& d : zimage.warnings) said.push_back(d.message);
    ASSERT_EQ(said.size(), 1u);
    EXPECT_EQ(said[0], p + "network.linear_alpha 8 does not apply to Z-Image: ai-toolkit trains "
                           "transformer LoRAs in the PEFT format at alpha = rank (16), a LoRA "
                           "scale of 1, and so does loom");
    o.overrides = {p + "network.linear_alpha=16", p + "network.linear=16"};
    EXPECT_TRUE(load_job_file("configs/zimage_lora.yaml", o).warnings.empty());
    // Without linear_alpha ai-toolkit's default alpha (1) would be a scale of 1/16: it is 1 too.
    const LoadedJob bare = load_job_text(
        "job: extension\nconfig:\n  name: t\n  process:\n    - type: sd_trainer\n"
        "      training_folder: out\n      network: {linear: 16}\n"
        "      datasets: [{folder_path: data}]\n"
        "      model: {name_or_path: m, arch: qwen_image}\n",
        "job.yaml");
    EXPECT_EQ(*bare.job.config.process.at(0).network.linear_alpha, 16.0);
    for (const Diagnostic& d : bare.warnings) {
        EXPECT_EQ(d.message.find("alpha"), std::string::npos) << d.to_string();
    }
    o.overrides = {p + "network.linear_alpha=8"};
    const LoadedJob sd = load_job_file("configs/sd15_lora.yaml", o);
    EXPECT_EQ(*sd.job.config.process.at(0).network.linear_alpha, 8.0);
    EXPECT_FALSE(sd.job.config.process.at(0).choices.job_linear_alpha);
    EXPECT_TRUE(sd.warnings.empty());
}

const std::filesystem::path kAiToolkitExamples = "tests/config/data/ai-toolkit";

std::vector<std::string> keys_of(const std::vector<Diagnostic>& warnings, DiagnosticKind kind) {
    std::vector<std::string> keys;
    for (const Diagnostic& d : warnings) {
        if (d.kind == kind) keys.push_back(d.key_path);
    }
    std::sort(keys.begin(), keys.end());
    return keys;
}

TEST(AiToolkitExamples, EveryKeyIsImplementedOrWarnedNotSupportedYet) {
    const auto files = example_jobs(kAiToolkitExamples);
    ASSERT_EQ(files.size(), 22u);
    int loaded_files = 0;
    for (const auto& path : files) {
        SCOPED_TRACE(path.string());
        const std::string name = path.filename().string();
        try {
            const LoadedJob loaded = load_job_file(path);
            ++loaded_files;
            EXPECT_TRUE(keys_of(loaded.warnings, DiagnosticKind::kUnknownKey).empty());
        } catch (const ConfigError& e) {
            // Two examples cannot be training jobs as shipped; each fails with its reason.
            const std::string what = e.what();
            if (name == "train_lora_omnigen2_24gb.yaml") {
                // Upstream's file leaves a quote open (name_or_path: "OmniGen2/OmniGen2).
                EXPECT_NE(what.find(":65:"), std::string::npos) << what;
                EXPECT_NE(what.find("YAML syntax error"), std::string::npos) << what;
            } else if (name == "train_slider.example.yml") {
                // A slider trains from prompt pairs, without datasets.
                EXPECT_NE(what.find("datasets"), std::string::npos) << what;
            } else {
                ADD_FAILURE() << what;
            }
        }
    }
    EXPECT_EQ(loaded_files, 20);
}

// ai-toolkit's two Wan 2.1 examples (1.3B and 14B) are flow-matching jobs loom trains (their
// 40-frame previews included): only what loom genuinely lacks is warned (unloading the text
// encoder).
TEST(AiToolkitExamples, Wan21ExamplesAreTrainableJobs) {
    const auto check = [](const std::string& file, std::vector<std::string> expected) {
        SCOPED_TRACE(file);
        const LoadedJob loaded = load_job_file(kAiToolkitExamples / file);
        const ProcessConfig& p = loaded.job.config.process.at(0);
        EXPECT_EQ(*p.model.arch, "wan21");
        EXPECT_EQ(p.train.noise_scheduler, "flowmatch");
        EXPECT_EQ(p.choices.lora_layout, LoRAKeyLayout::kPeft);
        EXPECT_EQ(p.datasets.at(0).resolution, (std::vector<int>{632}));
        std::vector<std::string> flagged;
        for (const Diagnostic& d : loaded.warnings) {
            EXPECT_NE(d.kind, DiagnosticKind::kNotTrainable) << d.to_string();
            flagged.push_back(d.key_path);
        }
        std::sort(flagged.begin(), flagged.end());
        std::sort(expected.begin(), expected.end());
        EXPECT_EQ(flagged, expected);
        return p;
    };
    const ProcessConfig small = check("train_lora_wan21_1b_24gb.yaml", {});
    EXPECT_EQ(small.sample.num_frames, 40);
    EXPECT_EQ(small.sample.fps, 15);
    const ProcessConfig big =
        check("train_lora_wan21_14b_24gb.yaml", {"config.process.0.train.unload_text_encoder"});
    EXPECT_TRUE(big.model.quantize);
    EXPECT_TRUE(big.model.low_vram);
}

// ai-toolkit's Wan 2.2 14B example trains both experts, switching every 10 micro-batches; the
// one thing loom lacks is the accuracy-recovery adapter of its uint4 qtype, said where written.
TEST(AiToolkitExamples, Wan22ExampleIsATrainableJob) {
    const LoadedJob loaded = load_job_file(kAiToolkitExamples / "train_lora_wan22_14b_24gb.yaml");
    const ProcessConfig& p = loaded.job.config.process.at(0);
    EXPECT_EQ(p.choices.arch, Arch::kWan22_14b);
    EXPECT_EQ(p.train.noise_scheduler, "flowmatch");
    EXPECT_EQ(p.train.switch_boundary_every, 10);
    EXPECT_TRUE(p.model.model_kwargs.train_high_noise);
    EXPECT_TRUE(p.model.model_kwargs.train_low_noise);
    EXPECT_EQ(choose_qtype(p.model.qtype).qtype, QType::kUInt4);
    std::vector<std::string> flagged;
    for (const Diagnostic& d : loaded.warnings) {
        EXPECT_NE(d.kind, DiagnosticKind::kNotTrainable) << d.to_string();
        flagged.push_back(d.key_path);
        if (d.key_path == "config.process.0.model.qtype") {
            EXPECT_NE(d.message.find("accuracy-recovery adapter after '|' is not supported yet; "
                                     "loom quantizes with uint4 without it"),
                      std::string::npos)
                << d.message;
        }
    }
    EXPECT_EQ(flagged, (std::vector<std::string>{"config.process.0.model.qtype"}));
}

// ai-toolkit's Chroma example: every key implemented (quantize, adamw8bit, ema, real-CFG previews
// with their negative prompt), so nothing is warned.
TEST(AiToolkitExamples, ChromaExampleIsATrainableJob) {
    const LoadedJob loaded = load_job_file(kAiToolkitExamples / "train_lora_chroma_24gb.yaml");
    const ProcessConfig& p = loaded.job.config.process.at(0);
    EXPECT_EQ(p.choices.arch, Arch::kChroma);
    EXPECT_EQ(p.train.noise_scheduler, "flowmatch");
    EXPECT_EQ(p.choices.lora_layout, LoRAKeyLayout::kPeft);
    EXPECT_DOUBLE_EQ(p.sample.guidance_scale, 4.0);
    for (const Diagnostic& d : loaded.warnings) ADD_FAILURE() << d.to_string();
}

// ai-toolkit's Flex.2 example: bypass_guidance_embedding, control_dropout, inpaint_dropout and
// invert_inpaint_mask_chance are implemented; what loom lacks is warned where written — the
// controls ai-toolkit makes with annotator models (depth, line, pose, inpaint), and the random
// masks with their random blur and dilation.
TEST(AiToolkitExamples, Flex2ExampleIsATrainableJob) {
    const LoadedJob loaded = load_job_file(kAiToolkitExamples / "train_lora_flex2_24gb.yaml");
    const ProcessConfig& p = loaded.job.config.process.at(0);
    EXPECT_EQ(p.choices.arch, Arch::kFlex2);
    EXPECT_TRUE(p.train.bypass_guidance_embedding);
    EXPECT_DOUBLE_EQ(p.model.model_kwargs.control_dropout, 0.5);
    EXPECT_DOUBLE_EQ(p.model.model_kwargs.inpaint_dropout, 0.5);
    EXPECT_DOUBLE_EQ(p.model.model_kwargs.invert_inpaint_mask_chance, 0.5);
    EXPECT_EQ(p.train.timestep_type, "shift");
    const std::string kwargs = "config.process.0.model.model_kwargs.";
    // do_random_inpainting: false asks for nothing loom lacks, so it is not warned.
    EXPECT_EQ(keys_of(loaded.warnings, DiagnosticKind::kNotSupportedYet),
              (std::vector<std::string>{
                  "config.process.0.datasets.0.controls", kwargs + "inpaint_random_chance",
                  kwargs + "random_blur_mask", kwargs + "random_dialate_mask"}));
    for (const Diagnostic& d : loaded.warnings) {
        EXPECT_NE(d.kind, DiagnosticKind::kNotTrainable) << d.to_string();
    }
}

TEST(AiToolkitExamples, BothExpertsOffAndExpertKeysElsewhereAreSaid) {
    const std::string wan22 = R"(job: extension
config:
  name: t
  process:
    - type: sd_trainer
      training_folder: /out
      datasets: [{folder_path: /data}]
      model: {name_or_path: /m, arch: wan22_14b,
              model_kwargs: {train_high_noise: false, train_low_noise: false}}
)";
    try {
        load_job_text(wan22, "job.yaml");
        ADD_FAILURE() << "both experts off loaded";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("at least one of Wan 2.2's experts must train"),
                  std::string::npos)
            << e.what();
    }
    std::string sd = wan22;
    sd.replace(sd.find("wan22_14b"), 9, "sd1");
    const LoadedJob loaded = load_job_text(sd, "job.yaml");
    int said = 0;
    for (const Diagnostic& d : loaded.warnings) {
        said += d.message.find("does not apply to 'sd1'") != std::string::npos;
    }
    EXPECT_EQ(said, 2);
}

// ai-toolkit's Qwen-Image example is a job loom trains; the one thing said is its qtype (uint3
// with an accuracy-recovery adapter), trained as uint4.
TEST(AiToolkitExamples, QwenImageExampleIsATrainableJob) {
    const LoadedJob loaded = load_job_file(kAiToolkitExamples / "train_lora_qwen_image_24gb.yaml");
    const ProcessConfig& p = loaded.job.config.process.at(0);
    EXPECT_EQ(p.choices.arch, Arch::kQwenImage);
    EXPECT_EQ(p.train.noise_scheduler, "flowmatch");
    EXPECT_EQ(p.choices.lora_layout, LoRAKeyLayout::kPeft);
    EXPECT_EQ(choose_qtype(p.model.qtype).qtype, QType::kUInt4);
    std::vector<std::string> flagged;
    for (const Diagnostic& d : loaded.warnings) {
        EXPECT_NE(d.kind, DiagnosticKind::kNotTrainable) << d.to_string();
        flagged.push_back(d.key_path);
    }
    EXPECT_EQ(flagged, (std::vector<std::string>{"config.process.0.model.qtype"}));
}

// ai-toolkit's two Qwen-Image-Edit examples are jobs loom trains: one control folder (Edit) or a
// list of three (Edit-2509), previews with ctrl_img (ctrl_img_1, ctrl_img_2); what is said is the
// uint3 qtype, trained as uint4.
TEST(AiToolkitExamples, QwenImageEditExamplesAreTrainableJobs) {
    for (const auto& [file, arch, folders] :
         {std::tuple{"train_lora_qwen_image_edit_32gb.yaml", Arch::kQwenImageEdit, 1},
          std::tuple{"train_lora_qwen_image_edit_2509_32gb.yaml", Arch::kQwenImageEditPlus, 3}}) {
        SCOPED_TRACE(file);
        const LoadedJob loaded = load_job_file(kAiToolkitExamples / file);
        const ProcessConfig& p = loaded.job.config.process.at(0);
        EXPECT_EQ(p.choices.arch, arch);
        EXPECT_EQ(p.datasets.at(0).control_path.size(), static_cast<std::size_t>(folders));
        EXPECT_EQ(choose_qtype(p.model.qtype).qtype, QType::kUInt4);
        const std::vector<std::string> controls = p.sample.samples.at(0).control_images();
        EXPECT_EQ(controls.size(), arch == Arch::kQwenImageEdit ? 1u : 2u);
        std::vector<std::string> flagged;
        for (const Diagnostic& d : loaded.warnings) {
            EXPECT_NE(d.kind, DiagnosticKind::kNotTrainable) << d.to_string();
            flagged.push_back(d.key_path);
        }
        EXPECT_EQ(flagged, (std::vector<std::string>{"config.process.0.model.qtype"}));
    }
}

TEST(AiToolkitExamples, QTypesLoomReplacesAreWarnedWhereWritten) {
    // Qwen-Image's example quantizes in uint3 with an accuracy-recovery adapter: loom says it
    // uses uint4 instead; its qtype_te (qfloat8) is loom's own and is not warned.
    const LoadedJob qwen = load_job_file(kAiToolkitExamples / "train_lora_qwen_image_24gb.yaml");
    bool said = false;
    for (const Diagnostic& d : qwen.warnings) {
        EXPECT_NE(d.key_path, "config.process.0.model.qtype_te");
        if (d.key_path != "config.process.0.model.qtype") continue;
        said = true;
        EXPECT_EQ(d.kind, DiagnosticKind::kNotSupportedYet);
        EXPECT_NE(d.message.find("loom quantizes with uint4 instead"), std::string::npos)
            << d.message;
    }
    EXPECT_TRUE(said);
}

TEST(AiToolkitExamples, JobsWithoutANetworkAreKnown) {
    // ai-toolkit fine-tunes the whole model without a network section; `loom train` says it
    // trains a LoRA instead (tests/cli/test_cli.sh), from this flag.
    const LoadedJob full = load_job_file(kAiToolkitExamples / "train_full_fine_tune_flex.yaml");
    EXPECT_FALSE(full.job.config.process.at(0).choices.network_given);
    const LoadedJob lora = load_job_file(kAiToolkitExamples / "train_lora_flux_24gb.yaml");
    EXPECT_TRUE(lora.job.config.process.at(0).choices.network_given);
}

TEST(AiToolkitExamples, SliderExampleKeysAreKnownOnceGivenADataset) {
    // The slider example's own keys (job: train, config.device/log_dir, network.type lierla,
    // the slider section) are each implemented or warned; only its missing datasets stop it.
    std::ifstream in(kAiToolkitExamples / "train_slider.example.yml");
    std::stringstream text;
    text << in.rdbuf();
    std::string yaml = text.str();
    const std::string anchor = "      network:\n";
    const std::size_t at = yaml.find(anchor);
    ASSERT_NE(at, std::string::npos);
    yaml.insert(at, "      datasets:\n        - folder_path: /data/images\n");
    const LoadedJob loaded = load_job_text(yaml, "slider.yml");
    EXPECT_TRUE(keys_of(loaded.warnings, DiagnosticKind::kUnknownKey).empty());
    const auto not_yet = keys_of(loaded.warnings, DiagnosticKind::kNotSupportedYet);
    for (const char* key : {"job", "config.device", "config.log_dir", "config.process.0.type",
                            "config.process.0.slider"}) {
        EXPECT_NE(std::find(not_yet.begin(), not_yet.end(), key), not_yet.end()) << key;
    }
    EXPECT_EQ(loaded.job.config.process.at(0).network.type, "lierla");  // trained as a LoRA
}

}  // namespace
}  // namespace loom::config
