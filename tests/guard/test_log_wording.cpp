// The guard's console / loom.log wording (loom/guard/log_wording.h): each line kind's exact text
// (what users and the other tests grep), and compose -> parse giving back the same struct, with
// the messages real OOMs carry (em dashes, colons and parentheses inside, no step).

#include <gtest/gtest.h>

#include "loom/core/byte_size.h"
#include "loom/guard/log_wording.h"

namespace loom::guard {
namespace {

// KnobChange has no operator==: compare (and print) its fields.
std::vector<std::vector<std::string>> fields(const std::vector<KnobChange>& changes) {
    std::vector<std::vector<std::string>> out;
    for (const KnobChange& c : changes) out.push_back({c.knob, c.from, c.to});
    return out;
}

// Messages that a careless parser would cut short.
const std::vector<std::string>& odd_messages() {
    static const std::vector<std::string> kMessages = {
        "sim out of memory. Tried to allocate 16.00 MiB; 7.00 MiB free of 96.00 MiB budget",
        "sim out of memory (injected: oom:phase=train_step:step=3). Tried to allocate 18.00 KiB",
        "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.69 GiB total capacity; "
        "20.29 GiB already allocated): see (documentation) \xE2\x80\x94 PYTORCH_CUDA_ALLOC_CONF",
        "a (b): c (d): e \xE2\x80\x94 f (rule: x) \xE2\x80\x94 g) and oom.enabled is true",
        "",
    };
    return kMessages;
}

TEST(LogWording, OomLineExactText) {
    EXPECT_EQ(to_line(OomLine{Phase::kTrainStep, 3, OomKind::kDevice, "sim out of memory."}),
              "out of memory in train_step at step 3 (device): sim out of memory.");
    EXPECT_EQ(to_line(OomLine{Phase::kFirstSample, std::nullopt, OomKind::kLibrary, "x"}),
              "out of memory in first_sample (library): x");
}

TEST(LogWording, OomLineRoundTrip) {
    for (const std::string& message : odd_messages()) {
        for (std::optional<std::int64_t> step : {std::optional<std::int64_t>(), {1}, {123456}}) {
            for (OomKind kind : {OomKind::kDevice, OomKind::kLibrary, OomKind::kHost}) {
                const OomLine line{Phase::kSample, step, kind, message};
                const std::string text = "[warning] " + to_line(line);
                const std::optional<OomLine> back = parse_oom_line(text);
                ASSERT_TRUE(back.has_value()) << text;
                EXPECT_EQ(back->phase, line.phase);
                EXPECT_EQ(back->step, line.step);
                EXPECT_EQ(back->kind, line.kind);
                EXPECT_EQ(back->message, line.message) << text;
            }
        }
    }
}

TEST(LogWording, OomLineReadsOlderWordingAndRejectsOthers) {
    const std::optional<OomLine> old = parse_oom_line(
        "2026-11-30 08:00:03.412 [guard] [warning] out of memory in first_sample (device_oom): "
        "sim out of memory.");
    ASSERT_TRUE(old.has_value());
    EXPECT_EQ(old->phase, Phase::kFirstSample);
    EXPECT_FALSE(old->step.has_value());
    EXPECT_EQ(old->kind, OomKind::kDevice);
    EXPECT_EQ(old->message, "sim out of memory.");
    EXPECT_FALSE(parse_oom_line("RuntimeError: CUDA out of memory in the allocator").has_value());
    EXPECT_FALSE(parse_oom_line("plan change: a.b 1 -> 2 (rule: r) \xE2\x80\x94 why").has_value());
}

TEST(LogWording, PlanChangeLineExactText) {
    EXPECT_EQ(to_line(PlanChangeLine{
                  {{"train.batch_size", "2", "1"}, {"train.gradient_accumulation", "1", "2"}},
                  "train.batch_1_accumulate",
                  "one item per forward pass"}),
              "plan change: train.batch_size 2 -> 1, train.gradient_accumulation 1 -> 2 (rule: "
              "train.batch_1_accumulate) \xE2\x80\x94 one item per forward pass");
    EXPECT_EQ(
        to_line(PlanChangeLine{{}, "save.free_and_retry", "retried once"}),
        "plan change: no change, retry (rule: save.free_and_retry) \xE2\x80\x94 retried once");
}

TEST(LogWording, PlanChangeLineRoundTrip) {
    const std::vector<std::vector<KnobChange>> change_sets = {
        {},
        {{"train.gradient_checkpointing", "false", "true"}},
        {{"sample.width", "512", "256"}, {"sample.height", "512", "256"}},
        {{"datasets.max_bucket_pixels", "none", "1024"}},
        {{"datasets.resolution", "[512, 768]", "[512]"}, {"train.batch_size", "4", "1"}},
    };
    const std::vector<std::string> reasons = {
        "activations dominate a training step's memory",
        "a sampling pass ran just before this step: the preview size sets the sampling peak "
        "(floor 256 px)",
        "reason \xE2\x80\x94 with a dash: and (rule: fake) inside",
        "",
    };
    for (const auto& changes : change_sets) {
        for (const std::string& reason : reasons) {
            const PlanChangeLine line{changes, "sample.halve_size", reason};
            const std::string text = "2026-11-30 08:00:03.413 [guard] [warning] " + to_line(line);
            const std::optional<PlanChangeLine> back = parse_plan_change_line(text);
            ASSERT_TRUE(back.has_value()) << text;
            EXPECT_EQ(fields(back->changes), fields(line.changes)) << text;
            EXPECT_EQ(back->rule, line.rule);
            EXPECT_EQ(back->reason, line.reason) << text;
        }
    }
    EXPECT_FALSE(parse_plan_change_line("step 3/10 loss 0.1").has_value());
}

TEST(LogWording, OomDisabledLineExactTextAndRoundTrip) {
    EXPECT_EQ(to_line(OomDisabledLine{Phase::kSample, 10, "boom", "batch 1"}),
              "out of memory in sample at step 10 (boom) and oom.enabled is false, so loom did "
              "not try smaller settings; the plan was: batch 1");
    for (const std::string& message : odd_messages()) {
        for (std::optional<std::int64_t> step : {std::optional<std::int64_t>(), {7}}) {
            const OomDisabledLine line{Phase::kTrainStep, step, message,
                                       "gradient_checkpointing false, batch 2 x 1 accumulation"};
            const std::optional<OomDisabledLine> back = parse_oom_disabled_line(
                to_line(OutcomeLine{OutcomeLine::Kind::kDoesNotFit, to_line(line)}));
            ASSERT_TRUE(back.has_value()) << message;
            EXPECT_EQ(back->phase, line.phase);
            EXPECT_EQ(back->step, line.step);
            EXPECT_EQ(back->message, line.message);
            EXPECT_EQ(back->plan, line.plan);
        }
    }
    EXPECT_FALSE(parse_oom_disabled_line(to_line(OomLine{Phase::kSample, 1, OomKind::kDevice, "x"}))
                     .has_value());
}

TEST(LogWording, HostMemoryLineExactTextAndRoundTrip) {
    EXPECT_EQ(to_line(HostMemoryLine{Phase::kCache, std::nullopt, "bad_alloc"}),
              "host RAM ran out in cache (bad_alloc); device settings cannot help: close other "
              "programs, lower datasets[].cache_latents (in-RAM caches) or use a machine with "
              "more RAM");
    for (const std::string& message : odd_messages()) {
        const HostMemoryLine line{Phase::kTrainStep, 4, message};
        const std::optional<HostMemoryLine> back =
            parse_host_memory_line("error: " + to_line(line));
        ASSERT_TRUE(back.has_value()) << message;
        EXPECT_EQ(back->phase, line.phase);
        EXPECT_EQ(back->step, line.step);
        EXPECT_EQ(back->message, line.message);
    }
}

TEST(LogWording, DirtyDeviceLineExactTextAndRoundTrip) {
    const DirtyDeviceLine line{"sim (simulated accelerator, budget 96.00 MiB)", 0, 96 * kMiB};
    EXPECT_EQ(to_line(line),
              "sim (simulated accelerator, budget 96.00 MiB) shows 0 bytes free of 96.00 MiB "
              "before loom allocated anything (\"0 bytes is free\"): another process or a broken "
              "context holds the memory. No setting can fix that \xE2\x80\x94 start on a fresh "
              "worker (or free the GPU), then run the same job again.");
    for (const DirtyDeviceLine& l :
         {line,
          DirtyDeviceLine{"cuda:0 (NVIDIA H200: shows 1 free)", 512 * kMiB, 140 * 1024 * kMiB},
          DirtyDeviceLine{"", 1023, 4096}}) {
        const std::optional<DirtyDeviceLine> back = parse_dirty_device_line(
            to_line(OutcomeLine{OutcomeLine::Kind::kWorkerState, to_line(l)}));
        ASSERT_TRUE(back.has_value()) << l.device;
        EXPECT_EQ(back->device, l.device);
        EXPECT_EQ(back->free, l.free);
        EXPECT_EQ(back->total, l.total);
    }
}

TEST(LogWording, OutcomeLineExactTextAndRoundTrip) {
    EXPECT_EQ(to_line(OutcomeLine{OutcomeLine::Kind::kDoesNotFit, "x: y"}),
              "error: does not fit: x: y");
    EXPECT_EQ(to_line(OutcomeLine{OutcomeLine::Kind::kWorkerState, "z"}), "error: worker state: z");
    for (OutcomeLine::Kind kind :
         {OutcomeLine::Kind::kDoesNotFit, OutcomeLine::Kind::kWorkerState}) {
        for (const std::string& message : odd_messages()) {
            const std::optional<OutcomeLine> back =
                parse_outcome_line(to_line(OutcomeLine{kind, message}));
            ASSERT_TRUE(back.has_value()) << message;
            EXPECT_EQ(back->kind, kind);
            EXPECT_EQ(back->message, message);
        }
    }
    // loom.log's logger prefix instead of "error: "; a sentence that merely says the words.
    const std::optional<OutcomeLine> logged =
        parse_outcome_line("2026-11-30 08:00:00.000 [cli] [error] does not fit: tail");
    ASSERT_TRUE(logged.has_value());
    EXPECT_EQ(logged->message, "tail");
    EXPECT_FALSE(parse_outcome_line("[info] the plan does not fit: shrinking").has_value());
}

TEST(LogWording, StableLineExactTextAndRoundTrip) {
    const StableLine line{10,
                          "gradient_checkpointing false, batch 2 x 1 accumulation, buckets: "
                          "32x32 px (rule: x) \xE2\x80\x94 sampling off"};
    EXPECT_EQ(to_line(StableLine{50, "batch 1"}),
              "plan recorded as stable after 50 steps: batch 1");
    const std::optional<StableLine> back = parse_stable_line("[info] " + to_line(line));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->steps, line.steps);
    EXPECT_EQ(back->plan, line.plan);
}

TEST(LogWording, ScaleUpLinesExactTextAndRoundTrip) {
    const std::vector<KnobChange> changes = {{"train.batch_size", "1", "4"},
                                             {"train.gradient_accumulation", "4", "1"}};
    const ScaleUpKeptLine kept{changes, "train.batch_1_accumulate", 40 * kMiB, 96 * kMiB};
    EXPECT_EQ(to_line(kept),
              "scale-up: train.batch_size 1 -> 4, train.gradient_accumulation 4 -> 1 (undoing "
              "train.batch_1_accumulate; probe peak 40.00 MiB of 96.00 MiB)");
    const std::optional<ScaleUpKeptLine> k = parse_scale_up_kept_line("[warning] " + to_line(kept));
    ASSERT_TRUE(k.has_value());
    EXPECT_EQ(fields(k->changes), fields(kept.changes));
    EXPECT_EQ(k->rule, kept.rule);
    EXPECT_EQ(k->peak, kept.peak);
    EXPECT_EQ(k->total, kept.total);

    const ScaleUpPinnedLine ran_out{changes, 10, std::nullopt};
    EXPECT_EQ(to_line(ran_out),
              "scale-up: train.batch_size 1 -> 4, train.gradient_accumulation 4 -> 1 does not "
              "fit with 10% headroom (the probe ran out of memory); pinned for this run");
    const ScaleUpPinnedLine peaked{
        {{"train.gradient_checkpointing", "true", "false"}}, 10, 90 * kMiB};
    EXPECT_EQ(to_line(peaked),
              "scale-up: train.gradient_checkpointing true -> false does not fit with 10% "
              "headroom (probe peak 90.00 MiB); pinned for this run");
    for (const ScaleUpPinnedLine& line : {ran_out, peaked}) {
        const std::optional<ScaleUpPinnedLine> p = parse_scale_up_pinned_line(to_line(line));
        ASSERT_TRUE(p.has_value()) << to_line(line);
        EXPECT_EQ(fields(p->changes), fields(line.changes));
        EXPECT_EQ(p->headroom_percent, line.headroom_percent);
        EXPECT_EQ(p->peak, line.peak);
        EXPECT_FALSE(parse_scale_up_kept_line(to_line(line)).has_value());
    }
    EXPECT_FALSE(parse_scale_up_pinned_line(to_line(kept)).has_value());
}

TEST(LogWording, RecoveredLinesExactTextAndRoundTrip) {
    const RecoveredLine line{2, 3, 0, "gradient_checkpointing true, batch 1 x 2 accumulation"};
    EXPECT_EQ(to_line(line),
              "2 out-of-memory errors recovered with 3 plan changes, 0 steps lost; final plan: "
              "gradient_checkpointing true, batch 1 x 2 accumulation");
    EXPECT_EQ(recovered_counts_text(line),
              "2 out-of-memory errors recovered, 3 plan changes, 0 steps lost");
    const std::optional<RecoveredLine> back = parse_recovered_line("[info] " + to_line(line));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->ooms, 2);
    EXPECT_EQ(back->changes, 3);
    EXPECT_EQ(back->steps_lost, 0);
    EXPECT_EQ(back->final_plan, line.final_plan);
    // `loom train`'s stdout summary carries the counts only.
    const std::optional<RecoveredLine> counts = parse_recovered_line(
        "events:  /tmp/runs/x/events.jsonl (" + recovered_counts_text(line) + ")");
    ASSERT_TRUE(counts.has_value());
    EXPECT_EQ(counts->ooms, 2);
    EXPECT_EQ(counts->changes, 3);
    EXPECT_TRUE(counts->final_plan.empty());
    EXPECT_FALSE(parse_recovered_line("no out-of-memory errors recovered").has_value());
}

}  // namespace
}  // namespace loom::guard
