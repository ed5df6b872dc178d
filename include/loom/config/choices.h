#pragma once

// The job's enumerations as values, resolved once when the job is loaded (config/load.h). The
// YAML keeps the words the user wrote (synonyms, ai-toolkit values loom does not implement yet,
// which the reader warns about); consumers read these and `switch` over them, so a misspelt
// value is a compile error instead of a silent fall to a default.
//
// Plain C++, no torch.

#include <optional>
#include <string>

#include "loom/config/arch.h"

namespace loom::config {

// train.dtype as loom computes: bf16/bfloat16 train in bf16; fp32 and every value loom does not
// implement yet (fp16, 8bit, float8, ...) in float32.
enum class Precision { kFloat32, kBFloat16 };

// save.dtype: the LoRA file's tensors.
enum class SaveDtype { kFloat32, kFloat16, kBFloat16 };

// train.loss_type; ai-toolkit values loom does not implement yet train with mse.
enum class LossType { kMse, kMae };

// train.content_or_style: where timesteps concentrate (content: early/high noise is rarer... see
// train/objective.h for the exact shaping).
enum class TimestepBias { kBalanced, kContent, kStyle };

// train.lr_scheduler; the ones loom does not implement yet run as constant.
enum class LrScheduler { kConstant, kConstantWithWarmup, kCosine, kLinear };

// sample.sampler: the preview sampler (ddpm previews run as DDIM steps).
enum class PreviewSampler { kDdpm, kDdim, kEuler };

// save.format: the LoRA file's key layout.
enum class LoRAKeyLayout { kKohya, kPeft };

// oom.reuse_stable: start from the stable-config store's plan (auto) or never (off).
enum class ReuseStable { kAuto, kOff };

// What the strings of one process resolve to. Filled by the loader (resolve step); a
// default-constructed value matches the schema's defaults.
struct Choices {
    Precision precision = Precision::kFloat32;
    SaveDtype save_dtype = SaveDtype::kFloat16;
    LossType loss = LossType::kMse;
    TimestepBias timestep_bias = TimestepBias::kBalanced;
    LrScheduler lr_scheduler = LrScheduler::kConstant;
    PreviewSampler sampler = PreviewSampler::kDdpm;
    LoRAKeyLayout lora_layout = LoRAKeyLayout::kKohya;
    ReuseStable reuse_stable = ReuseStable::kAuto;
    // model.arch (after the legacy flags): set when it is an arch loom builds, nullopt for the
    // ai-toolkit archs loom does not (the loader has warned that loom cannot train them).
    std::optional<Arch> arch;
    // Whether the job has a network section: without one ai-toolkit fine-tunes the whole model,
    // which loom does not do (it trains a LoRA with the section's defaults and says so).
    bool network_given = true;
    // The linear alpha the job's keys say (linear_alpha, else alpha) when its family trains at
    // another: ai-toolkit's transformer LoRAs train at alpha = rank. A checkpoint saved before
    // loom followed that rule trained at this one and resumes at it (LoRATraining::restore).
    std::optional<double> job_linear_alpha;
};

// The resolutions, exposed for tests and for callers that hold a single word. Each accepts every
// value the schema accepts for its key (config/job.h) and throws ConfigError naming `key` for
// anything else.
Precision precision_of(const std::string& dtype, const std::string& key = "train.dtype");
SaveDtype save_dtype_of(const std::string& dtype, const std::string& key = "save.dtype");
LossType loss_type_of(const std::string& loss, const std::string& key = "train.loss_type");
TimestepBias timestep_bias_of(const std::string& content_or_style,
                              const std::string& key = "train.content_or_style");
LrScheduler lr_scheduler_of(const std::string& scheduler,
                            const std::string& key = "train.lr_scheduler");
PreviewSampler preview_sampler_of(const std::string& sampler,
                                  const std::string& key = "sample.sampler");
LoRAKeyLayout lora_key_layout_of(const std::string& format, const std::string& key = "save.format");
ReuseStable reuse_stable_of(const std::string& reuse, const std::string& key = "oom.reuse_stable");

// Weight quantization of the frozen base (model.qtype / qtype_te; model/nn/quantized_weight.h says
// what each holds): qfloat8 / float8 / qfloat8_e4m3fn, qint8 / int8, qint4 / uint4 / int4. A
// word with an accuracy-recovery adapter ("uint3|repo/adapter.safetensors") reads as its qtype
// before the '|'.
enum class QType { kFloat8, kInt8, kUInt4 };
std::optional<QType> parse_qtype(const std::string& word);
// The qtype loom uses for `word`, and a sentence for the job's diagnostics when it is not the one
// named (fewer than 4 bits: uint4; anything else: qfloat8; an adapter is not applied); the
// sentence is empty otherwise.
struct QTypeChoice {
    QType qtype = QType::kFloat8;
    std::string note;
};
QTypeChoice choose_qtype(const std::string& word);
const char* to_string(QType qtype);  // "qfloat8", "qint8", "uint4"
int bits_of(QType qtype);            // bits per weight: 8, 8, 4

// Canonical words, for logs and kohya metadata ("constant_with_warmup", "euler", ...).
const char* to_string(LrScheduler scheduler);
const char* to_string(PreviewSampler sampler);

}  // namespace loom::config
