// Valid job files: defaults equal ai-toolkit's, substitutions, aliases, warnings.

#include <gtest/gtest.h>

#include "job_text.h"

namespace loom::config {
namespace {

using testing::kMinimalJob;
using testing::load;
using testing::minimal_job_with;

TEST(ConfigDefaults, MatchAiToolkit) {
    const LoadedJob loaded = load(kMinimalJob);
    EXPECT_TRUE(loaded.warnings.empty());
    const ProcessConfig& p = loaded.job.config.process.at(0);
    EXPECT_EQ(p.train.steps, 1000);
    EXPECT_DOUBLE_EQ(p.train.lr, 1e-6);
    EXPECT_EQ(p.train.batch_size, 1);
    EXPECT_EQ(p.train.optimizer, "adamw");
    EXPECT_EQ(p.train.lr_scheduler, "constant");
    EXPECT_EQ(p.train.dtype, "fp32");
    EXPECT_TRUE(p.train.gradient_checkpointing);
    EXPECT_DOUBLE_EQ(p.train.max_grad_norm, 1.0);
    EXPECT_EQ(p.network.type, "lora");
    EXPECT_EQ(p.network.linear, 4);
    EXPECT_DOUBLE_EQ(p.network.alpha, 1.0);
    ASSERT_TRUE(p.network.linear_alpha.has_value());
    EXPECT_DOUBLE_EQ(*p.network.linear_alpha, 1.0);  // linear_alpha defaults to alpha
    EXPECT_EQ(p.save.save_every, 1000);
    EXPECT_EQ(p.save.dtype, "float16");
    EXPECT_EQ(p.save.max_step_saves_to_keep, 5);
    EXPECT_EQ(p.sample.sampler, "ddpm");
    EXPECT_EQ(p.sample.sample_every, 100);
    EXPECT_EQ(p.sample.width, 512);
    EXPECT_DOUBLE_EQ(p.sample.guidance_scale, 7.0);
    EXPECT_EQ(p.sample.sample_steps, 20);
    EXPECT_EQ(p.datasets.at(0).caption_ext, ".txt");
    EXPECT_EQ(p.datasets.at(0).resolution, std::vector<int>{512});
    EXPECT_EQ(p.datasets.at(0).num_workers, 2);
    EXPECT_EQ(p.logging.log_every, 100);
    EXPECT_EQ(*p.model.arch, "sd1");
    EXPECT_EQ(*p.name, "test");  // the process name defaults to config.name
    // loom's own oom: block (DESIGN.md)
    EXPECT_TRUE(p.oom.enabled);
    EXPECT_TRUE(p.oom.probe);
    EXPECT_EQ(p.oom.stable_after, 50);
    EXPECT_FALSE(p.oom.scale_up);
    EXPECT_EQ(p.oom.reuse_stable, "auto");
    EXPECT_FALSE(p.oom.vram_limit.has_value());
    // loom's own perf: block, every switch off so a run is measured against the plain path
    EXPECT_FALSE(p.perf.fused_adamw);
    EXPECT_FALSE(p.perf.channels_last);
    EXPECT_FALSE(p.perf.stream_prefetch);
    EXPECT_FALSE(p.perf.cuda_graphs);
}

TEST(ConfigValues, PerfSwitchesParse) {
    const LoadedJob loaded = load(
        minimal_job_with("      perf:\n        fused_adamw: true\n        channels_last: true\n"
                         "        stream_prefetch: true\n        cuda_graphs: true\n"));
    EXPECT_TRUE(loaded.warnings.empty());
    const PerfConfig& perf = loaded.job.config.process[0].perf;
    EXPECT_TRUE(perf.fused_adamw);
    EXPECT_TRUE(perf.channels_last);
    EXPECT_TRUE(perf.stream_prefetch);
    EXPECT_TRUE(perf.cuda_graphs);
}

TEST(ConfigValues, ExponentWithoutDotIsAFloat) {
    const LoadedJob loaded = load(minimal_job_with("      train:\n        lr: 1e-4\n"));
    EXPECT_DOUBLE_EQ(loaded.job.config.process[0].train.lr, 1e-4);
}

TEST(ConfigValues, ResolutionIntOrList) {
    auto job = load(std::string(kMinimalJob) + "      sample: {}\n")
                   .job;  // sanity: empty section gives defaults
    EXPECT_EQ(job.config.process[0].sample.width, 512);
    const std::string one = "          resolution: 768\n";
    const std::string many = "          resolution: [512, 768, 1024]\n";
    std::string t1 = kMinimalJob;
    t1.insert(t1.find("      model:"), one);
    std::string t2 = kMinimalJob;
    t2.insert(t2.find("      model:"), many);
    EXPECT_EQ(load(t1).job.config.process[0].datasets[0].resolution, std::vector<int>{768});
    EXPECT_EQ(load(t2).job.config.process[0].datasets[0].resolution,
              (std::vector<int>{512, 768, 1024}));
}

TEST(ConfigValues, RankIsAnAliasOfLinear) {
    const LoadedJob loaded =
        load(minimal_job_with("      network:\n        rank: 16\n        alpha: 8\n"));
    const NetworkConfig& n = loaded.job.config.process[0].network;
    EXPECT_EQ(n.linear, 16);
    EXPECT_DOUBLE_EQ(*n.linear_alpha, 8.0);
}

TEST(ConfigValues, ConvAlphaDefaultsToConv) {
    const LoadedJob loaded = load(minimal_job_with("      network:\n        conv: 8\n"));
    EXPECT_DOUBLE_EQ(*loaded.job.config.process[0].network.conv_alpha, 8.0);
}

TEST(ConfigValues, VramLimitParsesSizes) {
    const LoadedJob loaded = load(minimal_job_with("      oom:\n        vram_limit: 1.5GB\n"));
    EXPECT_EQ(loaded.job.config.process[0].oom.vram_limit->bytes, 1500000000u);
}

TEST(ConfigValues, CaptionExtGetsADot) {
    std::string text = kMinimalJob;
    text.insert(text.find("      model:"), "          caption_ext: caption\n");
    EXPECT_EQ(load(text).job.config.process[0].datasets[0].caption_ext, ".caption");
}

TEST(ConfigValues, DatasetInheritsProcessTriggerWord) {
    const LoadedJob loaded = load(minimal_job_with("      trigger_word: p3r5on\n"));
    EXPECT_EQ(*loaded.job.config.process[0].datasets[0].trigger_word, "p3r5on");
}

TEST(ConfigValues, LegacyFlagsMapToArch) {
    EXPECT_EQ(*load(minimal_job_with("        is_xl: true\n")).job.config.process[0].model.arch,
              "sdxl");
    EXPECT_EQ(
        *load(minimal_job_with("        arch: 'sdxl:custom'\n")).job.config.process[0].model.arch,
        "sdxl");
}

TEST(ConfigValues, ModelDtypeFollowsTrainDtype) {
    const LoadedJob loaded = load(minimal_job_with("      train:\n        dtype: bf16\n"));
    EXPECT_EQ(loaded.job.config.process[0].model.dtype, "bf16");
}

TEST(ConfigValues, TrainingFolderFallsBackToJobLevel) {
    std::string text = kMinimalJob;
    text.replace(text.find("      training_folder: out\n"), 27, "");
    text.insert(text.find("  process:"), "  training_folder: runs\n");
    EXPECT_EQ(*load(text).job.config.process[0].training_folder, "runs");
}

TEST(ConfigValues, SeveralProcessesInOrder) {
    std::string text = kMinimalJob;
    text +=
        "    - type: sd_trainer\n      name: second\n      training_folder: out2\n"
        "      datasets:\n        - folder_path: d2\n      model:\n"
        "        name_or_path: m2\n";
    const LoadedJob loaded = load(text);
    ASSERT_EQ(loaded.job.config.process.size(), 2u);
    EXPECT_EQ(*loaded.job.config.process[1].name, "second");
    EXPECT_EQ(*loaded.job.config.process[1].training_folder, "out2");
}

TEST(ConfigSubstitution, NameIsReplacedEverywhere) {
    const LoadedJob loaded = load(minimal_job_with(
        "      sample:\n        prompts: ['a [name] photo']\nmeta:\n  name: \"[name]\"\n"));
    EXPECT_EQ(loaded.job.config.process[0].sample.prompts.at(0), "a test photo");
    EXPECT_EQ(loaded.job.meta.at(0).second, "test");
}

TEST(ConfigSubstitution, EnvironmentVariables) {
    std::string text = kMinimalJob;
    text.replace(text.find("models/tiny"), 11, "${MODELS}/tiny");
    const LoadedJob loaded = load(text, {}, {{"MODELS", "/srv/models"}});
    EXPECT_EQ(loaded.job.config.process[0].model.name_or_path, "/srv/models/tiny");
}

TEST(ConfigSubstitution, EnvironmentThenName) {
    std::string text = kMinimalJob;
    text.replace(text.find("name: test"), 10, "name: ${RUN}");
    text += "meta:\n  title: \"[name] v1\"\n";
    const LoadedJob loaded = load(text, {}, {{"RUN", "night"}});
    EXPECT_EQ(loaded.job.config.name, "night");
    EXPECT_EQ(loaded.job.meta.at(0).second, "night v1");
}

TEST(ConfigMeta, NonStringValuesBecomeJsonText) {
    const LoadedJob loaded = load(minimal_job_with("meta:\n  tags: [a, b]\n  version: 1.0\n"));
    EXPECT_EQ(loaded.job.meta.at(0),
              (std::pair<std::string, std::string>{"tags", "[\"a\",\"b\"]"}));
    EXPECT_EQ(loaded.job.meta.at(1), (std::pair<std::string, std::string>{"version", "1.0"}));
}

TEST(ConfigWarnings, UnknownKeyWithSuggestion) {
    const LoadedJob loaded = load(minimal_job_with("      trian:\n        lr: 1e-4\n"));
    ASSERT_EQ(loaded.warnings.size(), 1u);
    EXPECT_EQ(loaded.warnings[0].kind, DiagnosticKind::kUnknownKey);
    EXPECT_EQ(loaded.warnings[0].to_string(),
              "job.yaml:12:7: warning: unknown key config.process.0.trian (did you mean "
              "'train'?); it is ignored");
}

TEST(ConfigWarnings, UnknownPerfKeyWithSuggestion) {
    const LoadedJob loaded = load(minimal_job_with("      perf:\n        fused_adam: true\n"));
    ASSERT_EQ(loaded.warnings.size(), 1u);
    EXPECT_EQ(loaded.warnings[0].to_string(),
              "job.yaml:13:9: warning: unknown key config.process.0.perf.fused_adam (did you mean "
              "'fused_adamw'?); it is ignored");
}

TEST(ConfigWarnings, UnknownKeyWithoutSuggestion) {
    const LoadedJob loaded = load(minimal_job_with("      completely_unrelated: 1\n"));
    ASSERT_EQ(loaded.warnings.size(), 1u);
    EXPECT_EQ(loaded.warnings[0].to_string(),
              "job.yaml:12:7: warning: unknown key config.process.0.completely_unrelated; it is "
              "ignored");
}

TEST(ConfigWarnings, NotSupportedYetKeyIsDistinct) {
    const LoadedJob loaded = load(minimal_job_with("      train:\n        min_snr_gamma: 5\n"));
    ASSERT_EQ(loaded.warnings.size(), 1u);
    EXPECT_EQ(loaded.warnings[0].kind, DiagnosticKind::kNotSupportedYet);
    EXPECT_EQ(loaded.warnings[0].to_string(),
              "job.yaml:13:9: warning: config.process.0.train.min_snr_gamma is an ai-toolkit "
              "setting that loom does not support yet; it is ignored");
}

TEST(ConfigWarnings, NotSupportedYetKeyThatIsOffIsQuiet) {
    // ai-toolkit's UI writes every key of its form; one that is off asks loom for nothing.
    const LoadedJob quiet = load(minimal_job_with(
        "      train:\n        unload_text_encoder: false\n        diff_output_preservation: "
        "false\n      sqlite_db_path: ''\n"));
    EXPECT_TRUE(quiet.warnings.empty()) << quiet.warnings.front().to_string();
    const LoadedJob on =
        load(minimal_job_with("      train:\n        unload_text_encoder: true\n"));
    ASSERT_EQ(on.warnings.size(), 1u);
    EXPECT_EQ(on.warnings[0].kind, DiagnosticKind::kNotSupportedYet);
}

TEST(ConfigWarnings, NotSupportedYetValue) {
    const LoadedJob loaded = load(minimal_job_with("      train:\n        optimizer: lion8bit\n"));
    ASSERT_EQ(loaded.warnings.size(), 1u);
    EXPECT_EQ(loaded.warnings[0].kind, DiagnosticKind::kNotSupportedYet);
    EXPECT_EQ(loaded.warnings[0].to_string(),
              "job.yaml:13:20: warning: config.process.0.train.optimizer: 'lion8bit' is an "
              "ai-toolkit value that loom does not support yet; loom trains with 32-bit AdamW "
              "instead");
    // The optimizers loom implements load without a warning.
    for (const char* name : {"adamw8bit", "prodigy", "prodigyopt"}) {
        EXPECT_TRUE(
            load(minimal_job_with(std::string("      train:\n        optimizer: ") + name + "\n"))
                .warnings.empty())
            << name;
    }
}

TEST(ConfigWarnings, NonDefaultValueOfPartlySupportedKey) {
    const LoadedJob loaded = load(minimal_job_with("      save:\n        push_to_hub: true\n"));
    ASSERT_EQ(loaded.warnings.size(), 1u);
    EXPECT_EQ(loaded.warnings[0].to_string(),
              "job.yaml:13:22: warning: config.process.0.save.push_to_hub: 'true' is not "
              "supported by loom yet; nothing is uploaded");
    EXPECT_TRUE(
        load(minimal_job_with("      save:\n        push_to_hub: false\n")).warnings.empty());
}

TEST(ConfigWarnings, ArchLoomCannotTrainYet) {
    const LoadedJob loaded = load(minimal_job_with("        arch: hidream_e1\n"));
    ASSERT_EQ(loaded.warnings.size(), 1u);
    EXPECT_EQ(loaded.warnings[0].kind, DiagnosticKind::kNotTrainable);
    EXPECT_EQ(loaded.warnings[0].to_string(),
              "job.yaml:12:15: warning: config.process.0.model.arch 'hidream_e1' is an "
              "ai-toolkit architecture that loom cannot train yet (loom trains sd1, sdxl, flux, "
              "wan21, wan22_14b, flux_kontext, chroma, flex2, zimage, qwen_image, "
              "qwen_image_edit, qwen_image_edit_plus)");
}

TEST(ConfigWarnings, FluxKeysResolveToFlowMatching) {
    // ai-toolkit's Flux keys are implemented: no warning, the family's values.
    const LoadedJob flux = load(minimal_job_with("        is_flux: true\n"));
    EXPECT_TRUE(flux.warnings.empty());
    const ProcessConfig& p = flux.job.config.process.at(0);
    EXPECT_EQ(p.train.noise_scheduler, "flowmatch");
    EXPECT_EQ(p.choices.lora_layout, LoRAKeyLayout::kPeft);
    // A timestep type loom does not draw is warned and replaced; weighted is drawn.
    const LoadedJob stepped = load(minimal_job_with("        is_flux: true\n") +
                                   "      train:\n        timestep_type: one_step\n");
    ASSERT_EQ(stepped.warnings.size(), 1u);
    EXPECT_EQ(stepped.warnings[0].key_path, "config.process.0.train.timestep_type");
    EXPECT_EQ(stepped.job.config.process.at(0).train.timestep_type, "sigmoid");
    const LoadedJob weighted = load(minimal_job_with("        is_flux: true\n") +
                                    "      train:\n        timestep_type: weighted\n");
    EXPECT_TRUE(weighted.warnings.empty());
    EXPECT_EQ(weighted.job.config.process.at(0).train.timestep_type, "weighted");
    // The kohya layout has no Flux names: one clear error.
    try {
        load(minimal_job_with("        is_flux: true\n") + "      save:\n        format: kohya\n");
        FAIL() << "kohya layout accepted for Flux";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("save.format 'kohya' is not available for Flux"),
                  std::string::npos)
            << e.what();
    }
    // SD keeps DDPM: flowmatch is warned there.
    const LoadedJob sd =
        load(minimal_job_with("") + "      train:\n        noise_scheduler: flowmatch\n");
    ASSERT_EQ(sd.warnings.size(), 1u);
    EXPECT_EQ(sd.warnings[0].key_path, "config.process.0.train.noise_scheduler");
}

TEST(ConfigWarnings, UNetModuleSetIsNotedOnFluxOnly) {
    const std::string kohya_set =
        "      network:\n        network_kwargs:\n          module_set: kohya\n";
    const LoadedJob sd = load(minimal_job_with("") + kohya_set);
    EXPECT_TRUE(sd.warnings.empty());
    EXPECT_EQ(sd.job.config.process.at(0).network.network_kwargs.module_set, "kohya");
    const LoadedJob flux = load(minimal_job_with("        is_flux: true\n") + kohya_set);
    ASSERT_EQ(flux.warnings.size(), 1u);
    EXPECT_EQ(flux.warnings[0].key_path, "config.process.0.network.network_kwargs.module_set");
    EXPECT_EQ(flux.warnings[0].kind, DiagnosticKind::kNote);
}

// A video dataset's keys: on Wan, num_frames is kept at 1 + 4k (noted when snapped) and
// auto_frame_count's longest clip is 81 frames unless num_frames says; on an image model they
// are noted and put back to images.
TEST(ConfigWarnings, VideoDatasetKeysFollowTheModel) {
    const auto job = [](const std::string& arch, const std::string& dataset_keys) {
        std::string text = minimal_job_with("        arch: " + arch + "\n");
        const std::string folder = "        - folder_path: data\n";
        text.replace(text.find(folder), folder.size(), folder + dataset_keys);
        return load(text);
    };
    const LoadedJob wan = job("wan21",
                              "          num_frames: 16\n          fps: 16\n"
                              "          shrink_video_to_frames: false\n");
    const DatasetConfig& d = wan.job.config.process.at(0).datasets.at(0);
    EXPECT_EQ(d.num_frames, 13);
    EXPECT_EQ(d.fps, 16);
    EXPECT_FALSE(d.shrink_video_to_frames);
    ASSERT_EQ(wan.warnings.size(), 1u);
    EXPECT_EQ(wan.warnings[0].kind, DiagnosticKind::kNote);
    EXPECT_EQ(wan.warnings[0].key_path, "config.process.0.datasets.0.num_frames");
    EXPECT_NE(wan.warnings[0].message.find("loom takes 13 frames per clip"), std::string::npos)
        << wan.warnings[0].message;

    EXPECT_TRUE(job("wan21", "          num_frames: 9\n").warnings.empty());
    const LoadedJob automatic = job("wan21", "          auto_frame_count: true\n");
    EXPECT_EQ(automatic.job.config.process.at(0).datasets.at(0).num_frames, 81);
    ASSERT_EQ(automatic.warnings.size(), 1u);
    EXPECT_EQ(automatic.warnings[0].key_path, "config.process.0.datasets.0.auto_frame_count");
    const LoadedJob capped =
        job("wan21", "          auto_frame_count: true\n          num_frames: 33\n");
    EXPECT_EQ(capped.job.config.process.at(0).datasets.at(0).num_frames, 33);
    EXPECT_TRUE(capped.warnings.empty());

    const LoadedJob sd = job("sd1", "          num_frames: 9\n");
    EXPECT_EQ(sd.job.config.process.at(0).datasets.at(0).num_frames, 1);
    ASSERT_EQ(sd.warnings.size(), 1u);
    EXPECT_EQ(sd.warnings[0].key_path, "config.process.0.datasets.0.num_frames");
    EXPECT_NE(sd.warnings[0].message.find("'sd1' is an image model"), std::string::npos)
        << sd.warnings[0].message;
}

TEST(ConfigWarnings, StrictTurnsWarningsIntoErrors) {
    LoadOptions options;
    options.strict = true;
    try {
        load(minimal_job_with("      trian: {}\n      sampel: {}\n"), options);
        FAIL() << "expected a ConfigError";
    } catch (const ConfigError& e) {
        EXPECT_EQ(std::string(e.what()),
                  "job.yaml:12:7: unknown key config.process.0.trian (did you mean 'train'?); it "
                  "is ignored (and 1 more; run without --strict to see every warning) [--strict]");
    }
}

}  // namespace
}  // namespace loom::config
