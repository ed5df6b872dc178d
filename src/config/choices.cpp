#include "loom/config/choices.h"

#include <initializer_list>
#include <utility>

#include "loom/core/error.h"

namespace loom::config {

namespace {

// The value `word` stands for in `table`; ConfigError naming `key` (and the words it knows) for
// a word the table lacks. The reader has already refused such words for a loaded job, so this
// fires only for values set in code.
template <class E>
E look_up(const std::string& word, const std::string& key,
          std::initializer_list<std::pair<const char*, E>> table) {
    for (const auto& [name, value] : table) {
        if (word == name) return value;
    }
    std::string known;
    for (const auto& entry : table) known += (known.empty() ? "" : ", ") + std::string(entry.first);
    throw ConfigError("", key, key + " '" + word + "' is not one of: " + known);
}

}  // namespace

Precision precision_of(const std::string& dtype, const std::string& key) {
    using P = Precision;
    return look_up<P>(dtype, key,
                      {{"bf16", P::kBFloat16},
                       {"bfloat16", P::kBFloat16},
                       {"fp32", P::kFloat32},
                       {"float", P::kFloat32},
                       {"float32", P::kFloat32},
                       {"single", P::kFloat32},
                       {"fp16", P::kFloat32},
                       {"half", P::kFloat32},
                       {"float16", P::kFloat32},
                       {"8bit", P::kFloat32},
                       {"e4m3fn", P::kFloat32},
                       {"float8", P::kFloat32}});
}

SaveDtype save_dtype_of(const std::string& dtype, const std::string& key) {
    using S = SaveDtype;
    return look_up<S>(dtype, key,
                      {{"float16", S::kFloat16},
                       {"fp16", S::kFloat16},
                       {"half", S::kFloat16},
                       {"bf16", S::kBFloat16},
                       {"bfloat16", S::kBFloat16},
                       {"float32", S::kFloat32},
                       {"fp32", S::kFloat32},
                       {"float", S::kFloat32},
                       {"single", S::kFloat32}});
}

LossType loss_type_of(const std::string& loss, const std::string& key) {
    using L = LossType;
    return look_up<L>(loss, key,
                      {{"mse", L::kMse},
                       {"mae", L::kMae},
                       {"pseudo_huber", L::kMse},
                       {"wavelet", L::kMse},
                       {"stepped", L::kMse},
                       {"mean_flow", L::kMse}});
}

TimestepBias timestep_bias_of(const std::string& content_or_style, const std::string& key) {
    using T = TimestepBias;
    return look_up<T>(content_or_style, key,
                      {{"balanced", T::kBalanced}, {"content", T::kContent}, {"style", T::kStyle}});
}

LrScheduler lr_scheduler_of(const std::string& scheduler, const std::string& key) {
    using L = LrScheduler;
    return look_up<L>(scheduler, key,
                      {{"constant", L::kConstant},
                       {"constant_with_warmup", L::kConstantWithWarmup},
                       {"cosine", L::kCosine},
                       {"linear", L::kLinear},
                       {"cosine_with_restarts", L::kConstant},
                       {"step", L::kConstant},
                       {"polynomial", L::kConstant}});
}

PreviewSampler preview_sampler_of(const std::string& sampler, const std::string& key) {
    using S = PreviewSampler;
    if (sampler == "ddpm") return S::kDdpm;
    if (sampler == "ddim") return S::kDdim;
    if (sampler == "euler") return S::kEuler;
    // ai-toolkit's other samplers are accepted with a warning; loom samples them with DDIM.
    return look_up<S>(sampler, key,
                      {{"flowmatch", S::kDdim},
                       {"pndm", S::kDdim},
                       {"lms", S::kDdim},
                       {"k_lms", S::kDdim},
                       {"k_euler", S::kDdim},
                       {"euler_a", S::kDdim},
                       {"dpmsolver", S::kDdim},
                       {"dpmsolver++", S::kDdim},
                       {"k_dpmsolver", S::kDdim},
                       {"k_dpmsolver++", S::kDdim},
                       {"dpmsingle", S::kDdim},
                       {"heun", S::kDdim},
                       {"dpm_2", S::kDdim},
                       {"dpm_2_a", S::kDdim},
                       {"lcm", S::kDdim},
                       {"custom_lcm", S::kDdim},
                       {"mean_flow", S::kDdim}});
}

LoRAKeyLayout lora_key_layout_of(const std::string& format, const std::string& key) {
    return look_up<LoRAKeyLayout>(
        format, key, {{"kohya", LoRAKeyLayout::kKohya}, {"peft", LoRAKeyLayout::kPeft}});
}

ReuseStable reuse_stable_of(const std::string& reuse, const std::string& key) {
    return look_up<ReuseStable>(reuse, key,
                                {{"auto", ReuseStable::kAuto}, {"off", ReuseStable::kOff}});
}

const char* to_string(LrScheduler scheduler) {
    switch (scheduler) {
        case LrScheduler::kConstant: return "constant";
        case LrScheduler::kConstantWithWarmup: return "constant_with_warmup";
        case LrScheduler::kCosine: return "cosine";
        case LrScheduler::kLinear: return "linear";
    }
    return "constant";
}

const char* to_string(PreviewSampler sampler) {
    switch (sampler) {
        case PreviewSampler::kDdpm: return "ddpm";
        case PreviewSampler::kDdim: return "ddim";
        case PreviewSampler::kEuler: return "euler";
    }
    return "ddim";
}

std::optional<QType> parse_qtype(const std::string& word) {
    const std::string qtype = word.substr(0, word.find('|'));
    if (qtype == "qfloat8" || qtype == "float8" || qtype == "qfloat8_e4m3fn" ||
        qtype == "float8_e4m3fn") {
        return QType::kFloat8;
    }
    if (qtype == "qint8" || qtype == "int8") return QType::kInt8;
    if (qtype == "qint4" || qtype == "uint4" || qtype == "int4") return QType::kUInt4;
    return std::nullopt;
}

QTypeChoice choose_qtype(const std::string& word) {
    QTypeChoice choice;
    const std::optional<QType> parsed = parse_qtype(word);
    const std::string qtype = word.substr(0, word.find('|'));
    if (!parsed) {
        // Fewer bits than 4 only pay with an accuracy-recovery adapter, which loom does not
        // apply: the nearest qtype loom has is uint4; any other word gets the 8-bit default.
        const bool low_bits = qtype == "uint3" || qtype == "uint2" || qtype == "qint2" ||
                              qtype == "uint1" || qtype == "qint3";
        choice.qtype = low_bits ? QType::kUInt4 : QType::kFloat8;
        choice.note = "qtype '" + word + "' is not supported yet; loom quantizes with " +
                      to_string(choice.qtype) + " instead";
        return choice;
    }
    choice.qtype = *parsed;
    if (word.find('|') != std::string::npos) {
        choice.note = "qtype '" + word +
                      "': the accuracy-recovery adapter after '|' is not "
                      "supported yet; loom quantizes with " +
                      to_string(choice.qtype) + " without it";
    }
    return choice;
}

const char* to_string(QType qtype) {
    switch (qtype) {
        case QType::kFloat8: return "qfloat8";
        case QType::kInt8: return "qint8";
        case QType::kUInt4: return "uint4";
    }
    return "?";
}

int bits_of(QType qtype) {
    return qtype == QType::kUInt4 ? 4 : 8;
}

}  // namespace loom::config
