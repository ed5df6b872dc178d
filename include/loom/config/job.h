#pragma once

// Typed job configuration: the ai-toolkit job schema (../shared/reference/ai-toolkit.md §1) plus
// loom's own `oom:` and `perf:` blocks. Defaults equal ai-toolkit's for every key loom implements.
//
// Each struct lists its keys once, in `fields(v)`, as member pointers with their rules; the
// reader, the emitter and the comparer all walk that one list, so a key cannot be read but not
// written, or compared but not read. `v.not_yet({...})` names the ai-toolkit keys of that section
// that loom does not implement yet: they get a distinct warning instead of "unknown key".
// The largest sections have their own headers (dataset_config.h, train_config.h,
// model_config.h, sample_config.h); this one holds the rest and the job itself.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/config/choices.h"
#include "loom/config/dataset_config.h"
#include "loom/config/field_rules.h"
#include "loom/config/model_config.h"
#include "loom/config/sample_config.h"
#include "loom/config/train_config.h"

namespace loom::config {

// A device memory size written as "8GiB", "96MiB", "1.5GB" or a byte count.
struct MemorySize {
    std::uint64_t bytes = 0;
    bool operator==(const MemorySize& other) const { return bytes == other.bytes; }
};

// A free-form string map (the top-level `meta:` block, copied into safetensors metadata).
// Non-string YAML values are kept as their JSON text, as ai-toolkit does.
using StringMap = std::vector<std::pair<std::string, std::string>>;

struct NetworkKwargs {
    std::vector<std::string> only_if_contains;
    std::vector<std::string> ignore_if_contains;  // wins over only_if_contains
    // loom: which UNet modules get a LoRA (lora/target_rules.h): ai-toolkit's (every Linear and
    // 1x1 conv of the UNet) or kohya's (the transformer blocks; with conv, the resnets too).
    std::string module_set = "ai-toolkit";

    template <class V>
    static void fields(V& v) {
        v("only_if_contains", &NetworkKwargs::only_if_contains);
        v("module_set", &NetworkKwargs::module_set, OneOf{{"ai-toolkit", "kohya"}});
        v("ignore_if_contains", &NetworkKwargs::ignore_if_contains);
        v.not_yet({"full_if_contains", "parameter_threshold"});
    }
};

struct NetworkConfig {
    std::string type = "lora";
    int linear = 4;  // rank of Linear and 1x1 conv LoRAs
    double alpha = 1.0;
    std::optional<double> linear_alpha;  // resolved: `alpha` when absent
    std::optional<int> conv;             // rank of 3x3 conv LoRAs; convs are targeted only if set
    std::optional<double> conv_alpha;    // resolved: `conv` when absent
    std::optional<double> dropout;
    NetworkKwargs network_kwargs;
    bool transformer_only = true;
    std::optional<std::string> pretrained_lora_path;

    template <class V>
    static void fields(V& v) {
        v("type", &NetworkConfig::type,
          // ai-toolkit trains every type but lokr/dora/fullrank as a plain LoRA: "lierla"
          // (kohya's name for it, in ai-toolkit's slider example) is one.
          OneOf{{"lora", "lierla"}, {"locon", "lycoris", "lokr", "dora", "fullrank", "lorm"}});
        v("linear", &NetworkConfig::linear, AtLeast{1}, Alias{"rank"});
        v("alpha", &NetworkConfig::alpha, AtLeast{0});
        v("linear_alpha", &NetworkConfig::linear_alpha, AtLeast{0});
        v("conv", &NetworkConfig::conv, AtLeast{1});
        v("conv_alpha", &NetworkConfig::conv_alpha, AtLeast{0});
        v("dropout", &NetworkConfig::dropout, AtLeast{0}, Below{1});
        v("network_kwargs", &NetworkConfig::network_kwargs);
        v("transformer_only", &NetworkConfig::transformer_only);
        v("pretrained_lora_path", &NetworkConfig::pretrained_lora_path);
        v.not_yet({"split_multistage_loras", "layer_offloading", "all_layers", "lorm"});
        // ai-toolkit's UI writes the LoKr keys into every job (lokr_full_rank: true,
        // lokr_factor: -1); they tune nothing but a LoKr network.
        v.not_yet(
            NotYetFeature{"type", "lokr", {"lokr_full_rank", "lokr_factor", "old_lokr_format"}});
    }
};

struct SaveConfig {
    int save_every = 1000;
    std::string dtype = "float16";
    int max_step_saves_to_keep = 5;
    // loom: the LoRA key layout, kohya (lora_unet_...) or peft; resolved: kohya for SD, peft
    // (diffusers' transformer.… names, as ai-toolkit saves) for Flux.
    std::optional<std::string> format;
    std::string save_format = "safetensors";
    bool push_to_hub = false;
    std::optional<std::string> hf_repo_id;
    bool hf_private = false;

    template <class V>
    static void fields(V& v) {
        v("save_every", &SaveConfig::save_every, AtLeast{1});
        v("dtype", &SaveConfig::dtype,
          OneOf{{"float16", "fp16", "half", "bf16", "bfloat16", "float32", "fp32", "float",
                 "single"}});
        v("max_step_saves_to_keep", &SaveConfig::max_step_saves_to_keep, AtLeast{0});
        v("format", &SaveConfig::format, OneOf{{"kohya", "peft"}});
        // "diffusers" (the UI's default) chooses how a full fine-tune is saved: a LoRA is one
        // safetensors file whatever it says.
        v("save_format", &SaveConfig::save_format, OneOf{{"safetensors", "diffusers"}});
        v("push_to_hub", &SaveConfig::push_to_hub, NotYetUnlessDefault{"nothing is uploaded"});
        v("hf_repo_id", &SaveConfig::hf_repo_id, NotYetUnlessDefault{"nothing is uploaded"});
        v("hf_private", &SaveConfig::hf_private, NotYetUnlessDefault{"nothing is uploaded"});
    }
};

struct LoggingConfig {
    int log_every = 100;
    bool verbose = false;
    bool use_wandb = false;
    bool use_ui_logger = false;
    std::string project_name = "ai-toolkit";
    std::optional<std::string> run_name;

    template <class V>
    static void fields(V& v) {
        v("log_every", &LoggingConfig::log_every, AtLeast{1});
        v("verbose", &LoggingConfig::verbose);
        v("use_wandb", &LoggingConfig::use_wandb,
          NotYetUnlessDefault{"metrics go to metrics.jsonl in the run folder"});
        // ai-toolkit's UI sets it in every job it writes; what it logs, loom writes to
        // metrics.jsonl and the run report, and training is the same.
        v("use_ui_logger", &LoggingConfig::use_ui_logger);
        v("project_name", &LoggingConfig::project_name);
        v("run_name", &LoggingConfig::run_name);
    }
};

// loom's own block: out-of-memory recovery (DESIGN.md "Recovery specification").
struct OomConfig {
    bool enabled = true;
    std::optional<MemorySize> vram_limit;  // cap the device, e.g. 8GiB on a 24 GB card
    bool probe = true;                     // preflight worst-case step before step 1
    int stable_after = 50;                 // steps on one plan before it is recorded as stable
    bool scale_up = false;                 // undo downgrades one at a time once stable
    std::string reuse_stable = "auto";     // start from the store's stable plan: auto | off
    int max_restarts = 3;                  // supervisor restarts after uncatchable deaths
    // Memory knobs of the starting plan that have no ai-toolkit key (`loom stable export`
    // writes them; guard::plan_from_job reads them): buckets above this many pixels inactive,
    // the low-VRAM sub-mode (model.low_vram: true is 1, model.quantize: true is 2), preview
    // batching, the host RAM knobs, and a model of experts' idle expert on the host (Wan 2.2
    // 14B; model.low_vram: true turns it on too).
    std::optional<std::int64_t> max_bucket_pixels;
    int low_vram_level = 0;
    // At low_vram_level 3: how many of the denoiser's blocks stream from the host (0: every one).
    int streamed_blocks = 0;
    bool idle_expert_on_host = false;
    bool sample_batch_prompts = true;
    bool sample_batch_guidance = true;
    bool host_memory_caches = true;
    int host_threads = 0;  // 0: LibTorch's default

    template <class V>
    static void fields(V& v) {
        v("enabled", &OomConfig::enabled);
        v("vram_limit", &OomConfig::vram_limit);
        v("probe", &OomConfig::probe);
        v("stable_after", &OomConfig::stable_after, AtLeast{1});
        v("scale_up", &OomConfig::scale_up);
        v("reuse_stable", &OomConfig::reuse_stable, OneOf{{"auto", "off"}});
        v("max_restarts", &OomConfig::max_restarts, AtLeast{0});
        v("max_bucket_pixels", &OomConfig::max_bucket_pixels, AtLeast{64});
        v("low_vram_level", &OomConfig::low_vram_level, AtLeast{0}, AtMost{3});
        v("streamed_blocks", &OomConfig::streamed_blocks, AtLeast{0});
        v("idle_expert_on_host", &OomConfig::idle_expert_on_host);
        v("sample_batch_prompts", &OomConfig::sample_batch_prompts);
        v("sample_batch_guidance", &OomConfig::sample_batch_guidance);
        v("host_memory_caches", &OomConfig::host_memory_caches);
        v("host_threads", &OomConfig::host_threads, AtLeast{0});
    }
};

// loom's own block: GPU performance switches. Each is off by default so a run can be measured
// with and without it (docs/BENCHMARKS.md); none changes what is computed beyond float rounding,
// and each is tested for equal results on the CPU and sim paths.
struct PerfConfig {
    bool fused_adamw = false;      // AdamW through ATen's fused multi-tensor kernel
    bool channels_last = false;    // UNet and VAE conv activations in channels-last memory format
    bool stream_prefetch = false;  // low_vram level 3: copy the next layers' weights ahead of use
    bool cuda_graphs = false;      // whole-step CUDA graph capture per bucket shape (CUDA only)

    template <class V>
    static void fields(V& v) {
        v("fused_adamw", &PerfConfig::fused_adamw);
        v("channels_last", &PerfConfig::channels_last);
        v("stream_prefetch", &PerfConfig::stream_prefetch);
        v("cuda_graphs", &PerfConfig::cuda_graphs);
    }
};

struct ProcessConfig {
    std::string type;
    std::optional<std::string> name;             // resolved: config.name when absent
    std::optional<std::string> training_folder;  // resolved: config.training_folder; required
    std::string device = "cuda:0";
    std::optional<std::string> trigger_word;
    std::optional<std::int64_t> training_seed;
    int performance_log_every = 0;
    NetworkConfig network;
    SaveConfig save;
    std::vector<DatasetConfig> datasets;
    TrainConfig train;
    ModelConfig model;
    SampleConfig sample;
    LoggingConfig logging;
    OomConfig oom;
    PerfConfig perf;
    // The enumerations above as values, resolved once by the loader; not a YAML key (the YAML
    // keeps the words as written), so neither read, emitted nor compared.
    Choices choices;

    template <class V>
    static void fields(V& v) {
        v("type", &ProcessConfig::type, Required{"sd_trainer or diffusion_trainer"},
          OneOf{{"sd_trainer", "diffusion_trainer"},
                {"textual_inversion_trainer", "ui_trainer", "slider", "concept_slider",
                 "ultimate_slider_trainer", "image_reference_slider_trainer", "concept_replacer",
                 "reference_generator", "pure_lora_generator", "batch_img2img", "dataset_tools",
                 "sync_from_collection", "super_tagger"},
                "loom trains it as an sd_trainer LoRA job, from its datasets"});
        v("name", &ProcessConfig::name);
        v("training_folder", &ProcessConfig::training_folder);
        v("device", &ProcessConfig::device);
        v("trigger_word", &ProcessConfig::trigger_word);
        v("training_seed", &ProcessConfig::training_seed);
        v("performance_log_every", &ProcessConfig::performance_log_every, AtLeast{0});
        v("network", &ProcessConfig::network);
        v("save", &ProcessConfig::save);
        v("datasets", &ProcessConfig::datasets,
          Required{"a list of datasets, each with a folder_path"}, MinItems{1});
        v("train", &ProcessConfig::train);
        v("model", &ProcessConfig::model, Required{"the base model section"});
        v("sample", &ProcessConfig::sample);
        v("logging", &ProcessConfig::logging);
        v("oom", &ProcessConfig::oom);
        v("perf", &ProcessConfig::perf);
        // The UI's job database.
        v.not_yet(Inert{{"sqlite_db_path"}});
        v.not_yet({"log_dir", "first_sample", "torch_profiler", "guidance", "embedding",
                   "decorator", "adapter", "slider", "do_lorm", "lorm_extract_mode",
                   "lorm_extract_mode_param"});
    }
};

struct JobConfig {
    std::string name;
    std::optional<std::string> training_folder;
    std::vector<ProcessConfig> process;

    template <class V>
    static void fields(V& v) {
        v("name", &JobConfig::name, Required{"the job name; it names the run folder and files"});
        v("training_folder", &JobConfig::training_folder);
        v("process", &JobConfig::process, Required{"a list of training processes"}, MinItems{1});
        // Keys of ai-toolkit's older `job: train` jobs (TrainJob): loom takes the device and
        // the log folder per process.
        v.not_yet({"device", "log_dir"});
    }
};

struct Job {
    std::string job;
    JobConfig config;
    StringMap meta;

    template <class V>
    static void fields(V& v) {
        v("job", &Job::job, Required{"'extension' for a training job"},
          OneOf{{"extension"},
                {"train", "extract", "mod", "generate"},
                "loom runs `job: extension` jobs"});
        v("config", &Job::config, Required{"the job body: name and process list"});
        v("meta", &Job::meta);
    }
};

// Structural equality over every field of the schema.
bool operator==(const Job& a, const Job& b);
inline bool operator!=(const Job& a, const Job& b) {
    return !(a == b);
}

}  // namespace loom::config
