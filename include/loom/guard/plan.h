#pragma once

// The Plan: every memory knob the OOM ladder may turn (DESIGN.md "Recovery specification"), and
// nothing else — never the learning rate, optimizer, steps, rank or dtype. A run starts from the
// job's settings (or the run folder's persisted plan.yaml), and each ladder rung changes one knob.
//
// Batching: `batch_size` is the micro-batch one forward/backward sees; `gradient_accumulation`
// is how many micro-batches make a step. Their product is the effective batch, which the ladder
// keeps: batch 4 × 1 becomes batch 1 × 4. Which items a step trains on is decided by the job's
// own batch and accumulation (the data order), so a plan change never changes the data.
//
// Each knob is listed once, in Plan::fields() (rules in plan_fields.h); the functions below walk
// that list, except describe() and the ai-toolkit keys of plan_from_job, which say each knob in
// their own words (tests/guard/test_plan.cpp checks that they miss none).
//
// Plain C++, no torch.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "loom/config/job.h"
#include "loom/guard/plan_fields.h"

namespace loom::guard {

struct SamplePlan {
    bool enabled = true;
    int width = 1024;  // a cap: each preview is at most this wide (and its own size otherwise)
    int height = 1024;
    bool batch_prompts = true;   // all prompts in one batch (else one at a time)
    bool batch_guidance = true;  // conditional and unconditional passes in one batch
    int frames = 1;              // video previews

    // Every sample knob of Plan::fields.
    bool operator==(const SamplePlan& o) const;
    bool operator!=(const SamplePlan& o) const { return !(*this == o); }
};

// Host RAM knobs (never touched for a device OOM, and the device knobs never for host OOM).
struct HostPlan {
    bool memory_caches = true;  // latents and text embeddings kept in RAM (else on disk)
    int threads = 0;            // intra-op CPU threads; 0: LibTorch's default

    // Every host knob of Plan::fields.
    bool operator==(const HostPlan& o) const;
    bool operator!=(const HostPlan& o) const { return !(*this == o); }
};

struct Plan {
    bool gradient_checkpointing = false;
    int batch_size = 1;
    int gradient_accumulation = 1;
    // Buckets larger than this many pixels are inactive (their items are bucketed one size
    // down); nullopt: every bucket is active.
    std::optional<std::int64_t> max_bucket_pixels;
    int frames = 1;    // training clip length (video models; 1 for images)
    int low_vram = 0;  // 0: off; 1, 2, ...: the low-VRAM sub-modes switched on, in order
    // At low_vram 3, how many of the denoiser's blocks stream their weights from the host, taken
    // in low_vram's streaming order (train/low_vram.h: the largest blocks first); the others stay
    // on the device. 0: every block. Below level 3 no block streams and it is 0. A larger count
    // needs less device memory; 0 (every block) the least of all.
    int streamed_blocks = 0;
    // A denoiser of experts (Wan 2.2 14B): the experts not computing wait in host memory, their
    // frozen weights brought to the device when their timesteps come (train/low_vram.h).
    bool idle_expert_on_host = false;
    // What level 2 quantizes the frozen base to (model.qtype), and the text encoders
    // (qtype_te with quantize_te; nullopt: they stay unquantized, in bf16). The ladder never
    // changes them; the plan carries them so that a restart, the stable store and an export
    // quantize as the run did. They weigh by their bits.
    config::QType qtype = config::QType::kFloat8;
    std::optional<config::QType> qtype_te;
    SamplePlan sample;
    HostPlan host;

    int effective_batch() const { return batch_size * gradient_accumulation; }
    // Blocks that stream from the host under this plan, of `blocks` in all: none below level 3.
    int streaming(int blocks) const {
        if (low_vram < 3) return 0;
        return streamed_blocks == 0 ? blocks : std::min(streamed_blocks, blocks);
    }
    // streamed_blocks where it counts (level 3), else 0: every block.
    int streaming_count() const { return low_vram >= 3 ? streamed_blocks : 0; }

    // Every knob of fields().
    bool operator==(const Plan& o) const;
    bool operator!=(const Plan& o) const { return !(*this == o); }

    // plan.yaml's sections, in the file's order. The host section came later.
    static constexpr PlanSection kTrain{"train"};
    static constexpr PlanSection kDatasets{"datasets"};
    static constexpr PlanSection kModel{"model"};
    static constexpr PlanSection kSample{"sample"};
    static constexpr PlanSection kHost{"host", /*may_be_absent=*/true};

    // Every knob, once, in plan.yaml's order (which is also diff's): its section and key, where
    // it lives, which way it weighs (plan_fields.h) and its other rules. Adding a member to the
    // plan without an entry here does not compile (plan.cpp counts them).
    template <class V>
    static constexpr void fields(V& v) {
        v(kTrain, "gradient_checkpointing", &Plan::gradient_checkpointing, Weighs::kLessDevice);
        v(kTrain, "batch_size", &Plan::batch_size, Weighs::kMoreDevice, AtLeast{1},
          EffectiveBatch{});
        v(kTrain, "gradient_accumulation", &Plan::gradient_accumulation, Weighs::kNothing,
          AtLeast{1}, EffectiveBatch{});
        v(kDatasets, "max_bucket_pixels", &Plan::max_bucket_pixels, Weighs::kMoreDevice, AtLeast{1},
          OomKey{&config::OomConfig::max_bucket_pixels});
        v(kDatasets, "num_frames", &Plan::frames, Weighs::kMoreDevice, AtLeast{1});
        v(kModel, "low_vram", &Plan::low_vram, Weighs::kLessDevice, AtLeast{0},
          OomKey{&config::OomConfig::low_vram_level});
        v(kModel, "streamed_blocks", &Plan::streamed_blocks, Weighs::kLessDevice, AtLeast{0},
          ZeroIsUnlimited{}, AbsentInOlderPlans{}, OomKey{&config::OomConfig::streamed_blocks});
        v(kModel, "idle_expert_on_host", &Plan::idle_expert_on_host, Weighs::kLessDevice,
          AbsentInOlderPlans{}, OomKey{&config::OomConfig::idle_expert_on_host});
        v(kModel, "qtype", &Plan::qtype, Weighs::kMoreDevice, AbsentInOlderPlans{});
        v(kModel, "qtype_te", &Plan::qtype_te, Weighs::kMoreDevice, AbsentInOlderPlans{});
        v(kSample, "enabled", in(&Plan::sample, &SamplePlan::enabled), Weighs::kMoreDevice,
          SwitchesSection{});
        v(kSample, "width", in(&Plan::sample, &SamplePlan::width), Weighs::kMoreDevice, AtLeast{1});
        v(kSample, "height", in(&Plan::sample, &SamplePlan::height), Weighs::kMoreDevice,
          AtLeast{1});
        v(kSample, "batch_prompts", in(&Plan::sample, &SamplePlan::batch_prompts),
          Weighs::kMoreDevice, OomKey{&config::OomConfig::sample_batch_prompts});
        v(kSample, "batch_guidance", in(&Plan::sample, &SamplePlan::batch_guidance),
          Weighs::kMoreDevice, OomKey{&config::OomConfig::sample_batch_guidance});
        v(kSample, "num_frames", in(&Plan::sample, &SamplePlan::frames), Weighs::kMoreDevice,
          AtLeast{1});
        v(kHost, "memory_caches", in(&Plan::host, &HostPlan::memory_caches), Weighs::kMoreHost,
          OomKey{&config::OomConfig::host_memory_caches});
        v(kHost, "threads", in(&Plan::host, &HostPlan::threads), Weighs::kMoreHost, AtLeast{0},
          ZeroIsUnlimited{}, OomKey{&config::OomConfig::host_threads});
    }
};

namespace detail {

// Turns each entry of Plan::fields into (Knob, field) for for_each_knob.
template <class F>
struct KnobVisitor {
    F& f;

    template <class T, class... Rules>
    constexpr void operator()(const PlanSection& section, const char* key, T Plan::*member,
                              Rules... rules) {
        visit(section, key, KnobAt<Plan, T>{member}, rules...);
    }
    template <class G, class T, class... Rules>
    constexpr void operator()(const PlanSection& section, const char* key, KnobIn<Plan, G, T> field,
                              Rules... rules) {
        visit(section, key, field, rules...);
    }

  private:
    template <class Field, class... Rules>
    constexpr void visit(const PlanSection& section, const char* key, Field field, Rules... rules) {
        static_assert((std::is_same_v<Rules, Weighs> + ... + 0) == 1,
                      "every knob of Plan::fields says once which way it weighs");
        Knob knob;
        knob.section = &section;
        knob.key = key;
        (apply(knob, field, rules), ...);
        f(static_cast<const Knob&>(knob), static_cast<const Field&>(field));
    }

    template <class Field>
    static constexpr void apply(Knob& k, Field&, Weighs w) {
        k.weighs = w;
    }
    template <class Field>
    static constexpr void apply(Knob& k, Field&, AtLeast a) {
        static_assert(!std::is_same_v<typename Field::Value, bool>, "AtLeast needs a number");
        k.has_floor = true;
        k.at_least = a.min;
    }
    template <class Field>
    static constexpr void apply(Knob& k, Field&, EffectiveBatch) {
        k.effective_batch = true;
    }
    template <class Field>
    static constexpr void apply(Knob& k, Field&, SwitchesSection) {
        static_assert(std::is_same_v<typename Field::Value, bool>, "only a bool switches");
        k.switches_section = true;
    }
    template <class Field>
    static constexpr void apply(Knob& k, Field&, ZeroIsUnlimited) {
        static_assert(std::is_same_v<typename Field::Value, int>, "ZeroIsUnlimited needs an int");
        k.zero_is_unlimited = true;
    }
    template <class Field>
    static constexpr void apply(Knob& k, Field&, AbsentInOlderPlans) {
        k.may_be_absent = true;
    }
    template <class Field, class T>
    static constexpr void apply(Knob&, Field& field, OomKey<T> key) {
        static_assert(std::is_same_v<typename Field::Value, T>, "the oom key has another type");
        field.oom = key.member;
    }
};

}  // namespace detail

// Calls f(knob, field) for every knob of Plan::fields, in the list's order: `knob` is the Knob
// (name, section, rules), `field` a KnobAt or KnobIn whose `of(plan)` is the knob's value
// (`Value` its type, `oom` its OomKey member or null).
template <class F>
constexpr void for_each_knob(F&& f) {
    detail::KnobVisitor<F> v{f};
    Plan::fields(v);
}

// The plan a job asks for: train.gradient_checkpointing, the (common) batch size,
// train.gradient_accumulation, the largest dataset num_frames, model.low_vram / quantize and the
// qtypes loom uses for model.qtype and qtype_te (with quantize_te), and the sample block (disabled
// by train.disable_sampling or when there are no prompts).
Plan plan_from_job(const config::ProcessConfig& process);

// One line per knob, "gradient_checkpointing true, batch 1 × 4, buckets ≤ 64x64 px, ...": what
// the WARN lines and the "does not fit" message print.
std::string describe(const Plan& plan);

// The plan's qtypes in one word, "qfloat8" or "qfloat8-te-qint8": the quantized-weight cache's
// file name and the stable store key's qtype.
std::string qtype_text(const Plan& plan);

// One knob that differs between two plans.
struct KnobChange {
    std::string knob;  // "train.gradient_checkpointing", "train.batch_size", "sample.width", ...
    std::string from;
    std::string to;
};
// Every knob that differs, in a fixed order.
std::vector<KnobChange> diff(const Plan& from, const Plan& to);

// Scale-up: `current` with every knob that a change from `before` to `after` moved set back to
// its value in `before` (the other knobs as in `current`).
Plan undo_change(const Plan& current, const Plan& before, const Plan& after);

// plan.yaml: the YAML text, and reading it back. parse_plan throws FormatError naming `source`
// and the key when the text is malformed; keys it does not know are an error too (a plan is
// written by loom, so a strange key means a damaged or foreign file).
std::string plan_to_yaml(const Plan& plan);
Plan parse_plan(const std::string& text, const std::string& source);
// Atomic write (temp file, fsync, rename); read throws IoError / FormatError naming the file.
void save_plan(const std::filesystem::path& file, const Plan& plan);
Plan load_plan(const std::filesystem::path& file);

}  // namespace loom::guard
