// Invalid job files: each case asserts the exact message, with file:line:col and key path.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "job_text.h"
#include "loom/core/error.h"

namespace loom::config {
namespace {

using testing::error_of;
using testing::kMinimalJob;
using testing::minimal_job_with;

struct ErrorCase {
    const char* name;
    std::string text;
    std::string expected;
};

std::string replace(std::string text, const std::string& from, const std::string& to) {
    const std::size_t pos = text.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    if (pos != std::string::npos) text.replace(pos, from.size(), to);
    return text;
}

std::vector<ErrorCase> error_cases() {
    return {
        // ---- ranges --------------------------------------------------------------------------
        {"batch_size_zero", minimal_job_with("      train:\n        batch_size: 0\n"),
         "job.yaml:13:21: config.process.0.train.batch_size must be >= 1, got 0"},
        {"steps_negative", minimal_job_with("      train:\n        steps: -5\n"),
         "job.yaml:13:16: config.process.0.train.steps must be >= 1, got -5"},
        {"lr_zero", minimal_job_with("      train:\n        lr: 0\n"),
         "job.yaml:13:13: config.process.0.train.lr must be > 0, got 0"},
        {"caption_dropout_above_one",
         replace(kMinimalJob, "- folder_path: data\n",
                 "- folder_path: data\n          caption_dropout_rate: 1.5\n"),
         "job.yaml:10:33: config.process.0.datasets.0.caption_dropout_rate must be <= 1, got 1.5"},
        {"resolution_too_small",
         replace(kMinimalJob, "- folder_path: data\n",
                 "- folder_path: data\n          resolution: [512, 32]\n"),
         "job.yaml:10:29: config.process.0.datasets.0.resolution.1 must be >= 64, got 32"},
        {"sample_width_not_multiple_of_8", minimal_job_with("      sample:\n        width: 500\n"),
         "job.yaml:13:16: config.process.0.sample.width must be a multiple of 8, got 500"},
        {"ema_decay_one",
         minimal_job_with("      train:\n        ema_config:\n          ema_decay: 1\n"),
         "job.yaml:14:22: config.process.0.train.ema_config.ema_decay must be < 1, got 1"},
        {"dropout_negative", minimal_job_with("      network:\n        dropout: -0.1\n"),
         "job.yaml:13:18: config.process.0.network.dropout must be >= 0, got -0.1"},
        {"rank_zero", minimal_job_with("      network:\n        rank: 0\n"),
         "job.yaml:13:15: config.process.0.network.linear must be >= 1, got 0"},
        {"stable_after_zero", minimal_job_with("      oom:\n        stable_after: 0\n"),
         "job.yaml:13:23: config.process.0.oom.stable_after must be >= 1, got 0"},
        {"int_out_of_range", minimal_job_with("      train:\n        steps: 99999999999\n"),
         "job.yaml:13:16: config.process.0.train.steps is out of range, got 99999999999"},

        // ---- wrong types ---------------------------------------------------------------------
        {"int_given_text", minimal_job_with("      train:\n        steps: many\n"),
         "job.yaml:13:16: config.process.0.train.steps must be a whole number, got 'many'"},
        {"int_given_fraction", minimal_job_with("      train:\n        batch_size: 2.5\n"),
         "job.yaml:13:21: config.process.0.train.batch_size must be a whole number, got '2.5' "
         "(a fraction or exponent is not allowed here)"},
        {"float_given_text", minimal_job_with("      train:\n        lr: fast\n"),
         "job.yaml:13:13: config.process.0.train.lr must be a number, got 'fast'"},
        {"float_given_nan", minimal_job_with("      train:\n        lr: .nan\n"),
         "job.yaml:13:13: config.process.0.train.lr must be a number, got '.nan'"},
        {"bool_given_text",
         minimal_job_with("      train:\n        gradient_checkpointing: sometimes\n"),
         "job.yaml:13:33: config.process.0.train.gradient_checkpointing must be true or false, "
         "got 'sometimes'"},
        {"bool_given_list", minimal_job_with("      train:\n        disable_sampling: [true]\n"),
         "job.yaml:13:27: config.process.0.train.disable_sampling must be true or false, got a "
         "list"},
        {"string_given_map", minimal_job_with("      trigger_word: {a: 1}\n"),
         "job.yaml:12:21: config.process.0.trigger_word must be text, got a mapping"},
        {"section_given_scalar", minimal_job_with("      train: 5\n"),
         "job.yaml:12:14: config.process.0.train must be a mapping of keys, got '5'"},
        {"list_given_map",
         replace(kMinimalJob, "      datasets:\n        - folder_path: data\n",
                 "      datasets:\n        folder_path: data\n"),
         "job.yaml:9:9: config.process.0.datasets must be a list, got a mapping"},
        {"process_not_list", "job: extension\nconfig:\n  name: t\n  process: sd_trainer\n",
         "job.yaml:4:12: config.process must be a list, got 'sd_trainer'"},
        {"size_invalid", minimal_job_with("      oom:\n        vram_limit: 8 gigs\n"),
         "job.yaml:13:21: config.process.0.oom.vram_limit: invalid size '8 gigs': unknown unit "
         "'gigs' (write a number with an optional unit: 100000000, 96MiB, 8GiB, 1.5GB)"},
        {"enum_invalid", minimal_job_with("      train:\n        optimizer: sgdd\n"),
         "job.yaml:13:20: config.process.0.train.optimizer must be one of adamw, adam, adamw8bit, "
         "prodigy, prodigyopt, got 'sgdd'"},
        {"module_set_invalid",
         minimal_job_with(
             "      network:\n        network_kwargs:\n          module_set: kohya-ss\n"),
         "job.yaml:14:23: config.process.0.network.network_kwargs.module_set must be one of "
         "ai-toolkit, kohya, got 'kohya-ss'"},
        {"enum_did_you_mean", minimal_job_with("      train:\n        lr_scheduler: cosin\n"),
         "job.yaml:13:23: config.process.0.train.lr_scheduler must be one of constant, "
         "constant_with_warmup, cosine, linear, got 'cosin' (did you mean 'cosine'?)"},
        {"device_invalid", replace(kMinimalJob, "device: sim", "device: gpu0"),
         "job.yaml:7:15: config.process.0.device must be cpu, sim, cuda or cuda:N, got 'gpu0'"},
        {"arch_unknown", minimal_job_with("        arch: sd15\n"),
         "job.yaml:12:15: config.process.0.model.arch 'sd15' is not an ai-toolkit architecture "
         "(loom trains sd1, sdxl, flux, wan21, wan22_14b, flux_kontext, chroma, flex2, zimage, "
         "qwen_image, qwen_image_edit, qwen_image_edit_plus)"},

        // ---- missing required keys -----------------------------------------------------------
        {"missing_job", "config:\n  name: t\n",
         "job.yaml:1:1: missing required key job ('extension' for a training job)"},
        {"missing_config", "job: extension\n",
         "job.yaml:1:1: missing required key config (the job body: name and process list)"},
        {"missing_name", replace(kMinimalJob, "  name: test\n", ""),
         "job.yaml:3:3: missing required key config.name (the job name; it names the run folder "
         "and files)"},
        {"missing_model_path",
         replace(kMinimalJob, "        name_or_path: models/tiny\n", "        arch: sd1\n"),
         "job.yaml:11:9: missing required key config.process.0.model.name_or_path (the base "
         "model: a diffusers model folder)"},
        {"empty_required_value", replace(kMinimalJob, "name_or_path: models/tiny", "name_or_path:"),
         "job.yaml:11:9: missing required key config.process.0.model.name_or_path (the base "
         "model: a diffusers model folder)"},
        {"missing_folder_path", replace(kMinimalJob, "- folder_path: data", "- caption_ext: txt"),
         "job.yaml:9:11: missing required key config.process.0.datasets.0.folder_path (the "
         "folder of training images and caption files)"},
        {"empty_process_list", "job: extension\nconfig:\n  name: t\n  process: []\n",
         "job.yaml:4:12: config.process must have at least 1 item, got 0"},
        {"missing_training_folder", replace(kMinimalJob, "      training_folder: out\n", ""),
         "job.yaml:5:7: missing required key config.process.0.training_folder (the folder that "
         "holds run folders, e.g. output)"},

        // ---- YAML syntax and file content ----------------------------------------------------
        {"bad_indentation", "job: extension\nconfig:\n  name: t\n   process: x\n",
         "job.yaml:4:11: YAML syntax error: illegal map value"},
        {"unclosed_flow_list", minimal_job_with("      train:\n        betas: [0.9, 0.99\n"),
         "job.yaml:14:1: YAML syntax error: end of sequence flow not found"},
        {"tab_indentation", "job: extension\nconfig:\n\tname: t\n",
         "job.yaml:3:6: YAML syntax error: illegal map value"},
        {"top_level_list", "- job: extension\n",
         "job.yaml:1:1: the top level must be a mapping with `job`, `config` and `meta` keys, got "
         "a list"},
        {"top_level_scalar", "just some text\n",
         "job.yaml:1:1: the top level must be a mapping with `job`, `config` and `meta` keys, got "
         "'just some text'"},
        {"empty_file", "",
         "job.yaml: the file is empty; a job needs at least `job:` and `config:` (see configs/ "
         "for examples)"},
        {"only_comments", "# nothing here\n\n   # still nothing\n",
         "job.yaml: the file is empty; a job needs at least `job:` and `config:` (see configs/ "
         "for examples)"},
        {"non_utf8", "job: extension\nconfig:\n  name: caf\xE9\n",
         "job.yaml:3:12: the file is not valid UTF-8 (invalid byte at offset 34); save it as "
         "UTF-8 text"},
        {"nul_byte", std::string("job: extension\nconfig:\n  na\0me: t\n", 32),
         "job.yaml:3:5: the file contains a NUL byte; a job file must be YAML text"},
        {"huge_file", "job: extension\n" + std::string(5u * 1024u * 1024u, '#'),
         "job.yaml: the file is 5.00 MiB, larger than the 4.00 MiB a job file may have; is "
         "this the right file?"},

        // ---- duplicates and conflicts --------------------------------------------------------
        {"duplicate_key", minimal_job_with("      train:\n        lr: 1e-4\n        lr: 2e-4\n"),
         "job.yaml:14:9: duplicate key config.process.0.train.lr (first set on line 13); "
         "ai-toolkit would silently keep the last one, keep one"},
        {"duplicate_top_level", std::string(kMinimalJob) + "job: extension\n",
         "job.yaml:12:1: duplicate key job (first set on line 1); ai-toolkit would silently keep "
         "the last one, keep one"},
        {"duplicate_meta_key", minimal_job_with("meta:\n  version: 1\n  version: 2\n"),
         "job.yaml:14:3: duplicate key meta.version; keep one"},
        {"rank_and_linear_differ",
         minimal_job_with("      network:\n        linear: 8\n        rank: 16\n"),
         "job.yaml:14:9: config.process.0.network.rank and config.process.0.network.linear are "
         "the same setting with different values (16 and 8); keep one"},
        {"accumulation_conflict",
         minimal_job_with("      train:\n        gradient_accumulation: 2\n        "
                          "gradient_accumulation_steps: 2\n"),
         "job.yaml:14:38: config.process.0.train.gradient_accumulation and "
         "gradient_accumulation_steps cannot both be above 1 (as in ai-toolkit); use "
         "gradient_accumulation"},
        {"denoising_max_above_1000",
         minimal_job_with("      train:\n        max_denoising_steps: 1001\n"),
         "job.yaml:13:30: config.process.0.train.max_denoising_steps must be <= 1000, got 1001"},
        {"denoising_range_inverted",
         minimal_job_with(
             "      train:\n        min_denoising_steps: 800\n        max_denoising_steps: 200\n"),
         "job.yaml:13:30: config.process.0.train.min_denoising_steps (800) must be <= "
         "max_denoising_steps (200)"},

        // ---- control images (issue 40) --------------------------------------------------------
        {"control_path_on_an_arch_without_controls",
         replace(kMinimalJob, "        - folder_path: data\n",
                 "        - folder_path: data\n          control_path: ctrl\n"),
         "job.yaml:10:25: config.process.0.datasets.0.control_path pairs control images, which "
         "only flux_kontext, flex2, qwen_image_edit and qwen_image_edit_plus train on; 'sd1' "
         "would leave them out: set model.arch to the edit model's arch (flux_kontext for a "
         "Kontext model), or remove control_path"},
        {"inpaint_path_on_an_arch_without_inpainting",
         replace(kMinimalJob, "        - folder_path: data\n",
                 "        - folder_path: data\n          inpaint_path: masks\n"),
         "job.yaml:10:25: config.process.0.datasets.0.inpaint_path pairs inpaint images, which "
         "only flex2 trains on; 'sd1' would leave them out: set model.arch: flex2 for a Flex.2 "
         "model, or remove inpaint_path"},
        {"control_path_of_several_folders_on_kontext",
         replace(minimal_job_with("        arch: flux_kontext\n"), "        - folder_path: data\n",
                 "        - folder_path: data\n          control_path: [ctrl, ctrl2]\n"),
         "job.yaml:10:25: config.process.0.datasets.0.control_path lists 2 folders; "
         "'flux_kontext' edits from one control image per training image: keep one"},
        {"control_path_of_four_folders_on_qwen_image_edit_plus",
         replace(minimal_job_with("        arch: qwen_image_edit_plus\n"),
                 "        - folder_path: data\n",
                 "        - folder_path: data\n          control_path: [a, b, c, d]\n"),
         "job.yaml:10:25: config.process.0.datasets.0.control_path lists 4 folders; "
         "'qwen_image_edit_plus' takes up to 3 control images per training image: keep 3 or "
         "fewer"},

        // ---- substitution --------------------------------------------------------------------
        {"env_unset", replace(kMinimalJob, "models/tiny", "${MODELS}/tiny"),
         "job.yaml:11:23: config.process.0.model.name_or_path uses ${MODELS}, but the "
         "environment variable MODELS is not set; export it or use --set "
         "config.process.0.model.name_or_path=VALUE"},
        {"env_substituted_value_invalid", minimal_job_with("      train:\n        lr: ${LR}\n"),
         "job.yaml:13:13: config.process.0.train.lr must be a number, got 'abc'"},
    };
}

// Test names instead of byte dumps in gtest's output.
void PrintTo(const ErrorCase& c, std::ostream* os) {
    *os << c.name;
}

class ConfigErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(ConfigErrorTest, ReportsExactMessageAndPosition) {
    const ErrorCase& c = GetParam();
    EXPECT_EQ(error_of(c.text, {}, {{"LR", "abc"}}), c.expected);
}

INSTANTIATE_TEST_SUITE_P(Cases, ConfigErrorTest, ::testing::ValuesIn(error_cases()),
                         [](const ::testing::TestParamInfo<ErrorCase>& info) {
                             return std::string(info.param.name);
                         });

TEST(ConfigErrorCount, AtLeastFortyCases) {
    EXPECT_GE(error_cases().size(), 40u);
}

TEST(ConfigErrorType, CarriesWhereAndKeyPath) {
    try {
        testing::load(minimal_job_with("      train:\n        batch_size: 0\n"));
        FAIL() << "expected a ConfigError";
    } catch (const ConfigError& e) {
        EXPECT_EQ(e.where(), "job.yaml:13:21");
        EXPECT_EQ(e.key_path(), "config.process.0.train.batch_size");
    }
}

TEST(ConfigFile, MissingFileIsAnIoError) {
    EXPECT_THROW(load_job_file("/nonexistent/job.yaml"), IoError);
}

TEST(ConfigFile, FolderIsAnIoError) {
    try {
        load_job_file("configs");
        FAIL() << "expected an IoError";
    } catch (const IoError& e) {
        EXPECT_EQ(std::string(e.what()), "configs: is a folder; give the path of a job .yaml file");
    }
}

}  // namespace
}  // namespace loom::config
