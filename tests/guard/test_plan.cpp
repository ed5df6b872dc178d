// The Plan: built from a job, described, diffed, written to plan.yaml and read back strictly.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <type_traits>

#include "loom/config/emit.h"
#include "loom/config/load.h"
#include "loom/core/error.h"
#include "loom/guard/job_with_plan.h"
#include "loom/guard/plan.h"

namespace loom::guard {
namespace {

const char* kJob = R"(job: extension
config:
  name: plan_test
  process:
    - type: sd_trainer
      training_folder: output
      device: sim
      network: {type: lora, linear: 4, linear_alpha: 4}
      datasets:
        - folder_path: data
          resolution: [512, 768]
          batch_size: 3
          num_frames: 1
      train:
        batch_size: 2
        steps: 10
        gradient_accumulation: 2
        gradient_checkpointing: false
      model: {name_or_path: model, arch: sd1}
      sample:
        sample_every: 5
        width: 640
        height: 512
        prompts: ["a", "b"]
        samples:
          - prompt: "wide"
            width: 1024
)";

Plan sample_plan() {
    Plan p;
    p.gradient_checkpointing = true;
    p.batch_size = 1;
    p.gradient_accumulation = 6;
    p.max_bucket_pixels = 512 * 512;
    p.frames = 1;
    p.low_vram = 0;
    p.sample.enabled = true;
    p.sample.width = 256;
    p.sample.height = 320;
    p.sample.batch_prompts = false;
    p.sample.batch_guidance = true;
    return p;
}

TEST(Plan, FromJobTakesTheTrainersBatchAndTheLargestSampleSize) {
    const config::Job job = config::load_job_text(kJob, "job.yaml").job;
    const Plan p = plan_from_job(job.config.process.at(0));
    EXPECT_FALSE(p.gradient_checkpointing);
    EXPECT_EQ(p.batch_size, 3);  // the dataset's batch_size wins, as the trainer does
    EXPECT_EQ(p.gradient_accumulation, 2);
    EXPECT_FALSE(p.max_bucket_pixels.has_value());
    EXPECT_TRUE(p.sample.enabled);
    EXPECT_EQ(p.sample.width, 1024);  // a samples[] item is wider than sample.width
    EXPECT_EQ(p.sample.height, 512);
    EXPECT_TRUE(p.sample.batch_prompts);
}

TEST(Plan, DisabledSamplingIsOffInThePlan) {
    config::LoadOptions o;
    o.overrides = {"config.process.0.train.disable_sampling=true"};
    const config::Job job = config::load_job_text(kJob, "job.yaml", o).job;
    EXPECT_FALSE(plan_from_job(job.config.process.at(0)).sample.enabled);
}

TEST(Plan, YamlRoundTrips) {
    const Plan p = sample_plan();
    EXPECT_EQ(parse_plan(plan_to_yaml(p), "plan.yaml"), p);
    Plan q = p;
    q.max_bucket_pixels.reset();
    q.sample.enabled = false;
    q.host.memory_caches = false;
    q.host.threads = 3;
    EXPECT_EQ(parse_plan(plan_to_yaml(q), "plan.yaml"), q);
}

TEST(Plan, SaveAndLoadAFile) {
    const auto dir = std::filesystem::temp_directory_path() / "loom_test_plan";
    std::filesystem::create_directories(dir);
    save_plan(dir / "plan.yaml", sample_plan());
    EXPECT_EQ(load_plan(dir / "plan.yaml"), sample_plan());
    EXPECT_THROW(load_plan(dir / "missing.yaml"), IoError);
    std::filesystem::remove_all(dir);
}

std::string error_of(const std::string& text) {
    try {
        parse_plan(text, "run/plan.yaml");
    } catch (const FormatError& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(Plan, MalformedFilesNameTheKeyAndTheWayOut) {
    std::string text = plan_to_yaml(sample_plan());
    const auto replaced = [&](const std::string& from, const std::string& to) {
        std::string t = text;
        t.replace(t.find(from), from.size(), to);
        return t;
    };
    std::string e = error_of(replaced("batch_size: 1", "batch_size: 0"));
    EXPECT_NE(e.find("run/plan.yaml"), std::string::npos) << e;
    EXPECT_NE(e.find("train.batch_size must be at least 1"), std::string::npos) << e;
    EXPECT_NE(e.find("--fresh"), std::string::npos) << e;
    e = error_of(replaced("batch_size: 1", "batch_size: many"));
    EXPECT_NE(e.find("train.batch_size has a malformed value 'many'"), std::string::npos) << e;
    e = error_of(replaced("batch_size: 1", "batch_sise: 1"));
    EXPECT_NE(e.find("train.batch_sise is not a plan key"), std::string::npos) << e;
    e = error_of(replaced("low_vram: 0", "low_vram: -1"));
    EXPECT_NE(e.find("model.low_vram must not be negative"), std::string::npos) << e;
    e = error_of("train: [1, 2\n");
    EXPECT_NE(e.find("is not valid YAML"), std::string::npos) << e;
    e = error_of("- 1\n");
    EXPECT_NE(e.find("the top level is not a mapping"), std::string::npos) << e;
    e = error_of(text + "extra: {}\n");
    EXPECT_NE(e.find("extra is not a plan section"), std::string::npos) << e;
    e = error_of(
        "train: {gradient_checkpointing: true, batch_size: 1, gradient_accumulation: 1}\n");
    EXPECT_NE(e.find("datasets is missing"), std::string::npos) << e;
}

TEST(Plan, DiffListsEachKnobThatChanged) {
    Plan a = sample_plan();
    Plan b = a;
    b.batch_size = 2;
    b.gradient_accumulation = 3;
    b.sample.enabled = false;
    const auto d = diff(a, b);
    ASSERT_EQ(d.size(), 3u);
    EXPECT_EQ(d[0].knob, "train.batch_size");
    EXPECT_EQ(d[0].from, "1");
    EXPECT_EQ(d[0].to, "2");
    EXPECT_EQ(d[1].knob, "train.gradient_accumulation");
    EXPECT_EQ(d[2].knob, "sample.enabled");
    EXPECT_TRUE(diff(a, a).empty());
}

TEST(Plan, UndoChangeRestoresOnlyTheKnobsThatChangeMoved) {
    Plan original;
    original.batch_size = 4;
    Plan after_gc = original;
    after_gc.gradient_checkpointing = true;
    Plan after_batch = after_gc;
    after_batch.batch_size = 1;
    after_batch.gradient_accumulation = 4;
    Plan after_sample = after_batch;
    after_sample.sample.batch_prompts = false;
    // Undo the batch change on the latest plan: batch and accumulation go back together, the
    // later sampling change and the earlier checkpointing change stay.
    const Plan undone = undo_change(after_sample, after_gc, after_batch);
    EXPECT_EQ(undone.batch_size, 4);
    EXPECT_EQ(undone.gradient_accumulation, 1);
    EXPECT_TRUE(undone.gradient_checkpointing);
    EXPECT_FALSE(undone.sample.batch_prompts);
    EXPECT_EQ(undo_change(undone, original, after_gc).gradient_checkpointing, false);
}

TEST(Plan, DescribeSaysEveryKnob) {
    const std::string s = describe(sample_plan());
    EXPECT_EQ(s,
              "gradient_checkpointing true, batch 1 x 6 accumulation, buckets 512x512 px, "
              "low_vram 0, sampling 256x320 one prompt at a time");
}

// plan.yaml is a file users read and older loom versions wrote: its text is fixed, byte for byte.
TEST(Plan, YamlTextIsExactlyTheFileFormat) {
    EXPECT_EQ(plan_to_yaml(sample_plan()),
              "# loom plan: the memory settings this run uses; rewritten on every change.\n"
              "# Delete this file (or train with --fresh) to start from the job's own settings.\n"
              "train:\n"
              "  gradient_checkpointing: true\n"
              "  batch_size: 1\n"
              "  gradient_accumulation: 6\n"
              "datasets:\n"
              "  max_bucket_pixels: 262144\n"
              "  num_frames: 1\n"
              "model:\n"
              "  low_vram: 0\n"
              "  streamed_blocks: 0\n"
              "  idle_expert_on_host: false\n"
              "  qtype: qfloat8\n"
              "  qtype_te: ~\n"
              "sample:\n"
              "  enabled: true\n"
              "  width: 256\n"
              "  height: 320\n"
              "  batch_prompts: false\n"
              "  batch_guidance: true\n"
              "  num_frames: 1\n"
              "host:\n"
              "  memory_caches: true\n"
              "  threads: 0\n");
    Plan q = sample_plan();
    q.max_bucket_pixels.reset();
    q.frames = 5;
    q.sample.enabled = false;
    q.host.memory_caches = false;
    q.host.threads = 3;
    const std::string text = plan_to_yaml(q);
    EXPECT_NE(text.find("datasets:\n  max_bucket_pixels: ~\n  num_frames: 5\n"), std::string::npos)
        << text;
    EXPECT_NE(text.find("sample:\n  enabled: false\n"), std::string::npos) << text;
    EXPECT_NE(text.find("host:\n  memory_caches: false\n  threads: 3\n"), std::string::npos)
        << text;
}

// Plans written before issue 21 have no qtypes: they read as level 2's default, qfloat8, with
// the text encoders unquantized.
TEST(Plan, PlansWrittenBeforeTheQTypesGetTheirDefaults) {
    Plan p = sample_plan();
    p.low_vram = 2;
    std::string text = plan_to_yaml(p);
    text.erase(text.find("  qtype: qfloat8\n  qtype_te: ~\n"), 31);
    ASSERT_EQ(text.find("qtype"), std::string::npos) << text;
    EXPECT_EQ(parse_plan(text, "plan.yaml"), p);
    p.qtype = config::QType::kUInt4;
    p.qtype_te = config::QType::kInt8;
    const Plan back = parse_plan(plan_to_yaml(p), "plan.yaml");
    EXPECT_EQ(back.qtype, config::QType::kUInt4);
    EXPECT_EQ(back.qtype_te, config::QType::kInt8);
    EXPECT_NE(plan_to_yaml(p).find("  qtype: uint4\n  qtype_te: qint8\n"), std::string::npos);
    EXPECT_EQ(qtype_text(p), "uint4-te-qint8");
}

// Plans written before issue 39 keep every expert on the device.
TEST(Plan, PlansWrittenBeforeTheIdleExpertKeepBothExpertsOnTheDevice) {
    Plan p = sample_plan();
    std::string text = plan_to_yaml(p);
    const std::string line = "  idle_expert_on_host: false\n";
    text.erase(text.find(line), line.size());
    ASSERT_EQ(text.find("idle_expert"), std::string::npos) << text;
    EXPECT_EQ(parse_plan(text, "plan.yaml"), p);
    p.idle_expert_on_host = true;
    EXPECT_TRUE(parse_plan(plan_to_yaml(p), "plan.yaml").idle_expert_on_host);
    EXPECT_NE(describe(p).find(", idle expert on the host"), std::string::npos) << describe(p);
}

TEST(Plan, PlansWrittenBeforeTheHostSectionGetTheHostDefaults) {
    Plan p = sample_plan();
    std::string text = plan_to_yaml(p);
    text.erase(text.find("host:\n"));
    EXPECT_EQ(parse_plan(text, "plan.yaml"), p);
    EXPECT_EQ(parse_plan(text, "plan.yaml").host, HostPlan{});
}

// Each malformed value gets its own message: the key, what is wrong, and the way out.
TEST(Plan, ParseErrorsAreExact) {
    const std::string text = plan_to_yaml(sample_plan());
    const std::string way_out =
        "; delete the file (or train with --fresh) to start from the job's own settings";
    struct Case {
        std::string from, to, error;
    };
    const std::vector<Case> cases = {
        {"batch_size: 1", "batch_size: 0", "train.batch_size must be at least 1, not 0"},
        {"gradient_accumulation: 6", "gradient_accumulation: -2",
         "train.gradient_accumulation must be at least 1, not -2"},
        {"batch_size: 1", "batch_size: many", "train.batch_size has a malformed value 'many'"},
        {"gradient_checkpointing: true", "gradient_checkpointing: maybe",
         "train.gradient_checkpointing has a malformed value 'maybe'"},
        {"batch_size: 1", "batch_sise: 1", "train.batch_sise is not a plan key"},
        {"  batch_size: 1\n", "", "train.batch_size is missing"},
        {"max_bucket_pixels: 262144", "max_bucket_pixels: 0",
         "datasets.max_bucket_pixels must be positive"},
        {"max_bucket_pixels: 262144", "max_bucket_pixels: big",
         "datasets.max_bucket_pixels has a malformed value 'big'"},
        {"  max_bucket_pixels: 262144\n", "", "datasets.max_bucket_pixels is missing"},
        {"datasets:\n  max_bucket_pixels: 262144\n  num_frames: 1\n", "datasets: 3\n",
         "datasets is missing or not a mapping"},
        {"num_frames: 1\nmodel", "num_frames: 0\nmodel",
         "datasets.num_frames must be at least 1, not 0"},
        {"low_vram: 0", "low_vram: -1", "model.low_vram must not be negative"},
        {"low_vram: 0", "low_vram: 1.5", "model.low_vram has a malformed value '1.5'"},
        {"streamed_blocks: 0", "streamed_blocks: -2", "model.streamed_blocks must not be negative"},
        {"model:\n  low_vram: 0\n  streamed_blocks: 0\n  idle_expert_on_host: false\n  qtype: "
         "qfloat8\n  qtype_te: ~\n",
         "", "model is missing or not a mapping"},
        {"idle_expert_on_host: false", "idle_expert_on_host: 2",
         "model.idle_expert_on_host has a malformed value '2'"},
        {"qtype: qfloat8", "qtype: uint3",
         "model.qtype has a malformed value 'uint3' (a qtype: qfloat8, qint8, uint4)"},
        {"qtype_te: ~", "qtype_te: fp4",
         "model.qtype_te has a malformed value 'fp4' (a qtype: qfloat8, qint8, uint4)"},
        {"width: 256", "width: 0", "sample.width must be at least 1, not 0"},
        {"height: 320", "height: -4", "sample.height must be at least 1, not -4"},
        {"  num_frames: 1\nhost", "  num_frames: 0\nhost",
         "sample.num_frames must be at least 1, not 0"},
        {"enabled: true", "enabled: 2", "sample.enabled has a malformed value '2'"},
        {"sample:", "samples:", "sample is missing or not a mapping"},
        {"threads: 0", "threads: -1", "host.threads must not be negative"},
        {"threads: 0", "threads: x", "host.threads has a malformed value 'x'"},
        {"memory_caches: true", "memory_cache: true", "host.memory_cache is not a plan key"},
        {"host:\n  memory_caches: true\n  threads: 0\n", "host: 3\n",
         "host is missing or not a mapping"},
        {"host:\n  memory_caches: true\n  threads: 0\n", "host: {}\n",
         "host.memory_caches is missing"},
    };
    for (const Case& c : cases) {
        std::string t = text;
        t.replace(t.find(c.from), c.from.size(), c.to);
        EXPECT_EQ(error_of(t), "run/plan.yaml: " + c.error + way_out) << c.from << " -> " << c.to;
    }
    EXPECT_EQ(error_of(text + "extra: {}\n"),
              "run/plan.yaml: extra is not a plan section" + way_out);
    EXPECT_EQ(error_of(""), "run/plan.yaml: the top level is not a mapping" + way_out);
    EXPECT_EQ(error_of("train: [1, 2\n"),
              "run/plan.yaml: is not valid YAML (end of sequence flow not found at line 2); "
              "delete it to start from the job's own settings");
}

TEST(Plan, DescribeAndDiffTextsAreExact) {
    Plan q = sample_plan();
    q.max_bucket_pixels.reset();
    q.frames = 5;
    q.sample.enabled = false;
    q.host.memory_caches = false;
    q.host.threads = 3;
    EXPECT_EQ(describe(q),
              "gradient_checkpointing true, batch 1 x 6 accumulation, buckets all, frames 5, "
              "low_vram 0, sampling off, caches on disk, CPU threads 3");
    Plan r = sample_plan();
    r.max_bucket_pixels = 1000;
    r.frames = 9;
    r.low_vram = 2;
    r.sample.batch_prompts = true;
    r.sample.batch_guidance = false;
    r.sample.frames = 5;
    r.host.threads = 2;
    EXPECT_EQ(describe(r),
              "gradient_checkpointing true, batch 1 x 6 accumulation, buckets 1000 px, frames 9, "
              "low_vram 2 (base qfloat8, text encoders bf16), sampling 256x320 batched, "
              "sequential guidance, 5 frames, CPU threads 2");
    EXPECT_EQ(describe(Plan{}),
              "gradient_checkpointing false, batch 1 x 1 accumulation, buckets all, low_vram 0, "
              "sampling 1024x1024 batched");
    const auto text = [](const std::vector<KnobChange>& changes) {
        std::string out;
        for (const KnobChange& c : changes) out += c.knob + " " + c.from + " -> " + c.to + "\n";
        return out;
    };
    EXPECT_EQ(text(diff(Plan{}, r)),
              "train.gradient_checkpointing false -> true\n"
              "train.gradient_accumulation 1 -> 6\n"
              "datasets.max_bucket_pixels none -> 1000\n"
              "datasets.num_frames 1 -> 9\n"
              "model.low_vram 0 -> 2\n"
              "sample.width 1024 -> 256\n"
              "sample.height 1024 -> 320\n"
              "sample.batch_guidance true -> false\n"
              "sample.num_frames 1 -> 5\n"
              "host.threads 0 -> 2\n");
    EXPECT_EQ(text(diff(r, q)),
              "datasets.max_bucket_pixels 1000 -> none\n"
              "datasets.num_frames 9 -> 5\n"
              "model.low_vram 2 -> 0\n"
              "sample.enabled true -> false\n"
              "sample.batch_prompts true -> false\n"
              "sample.batch_guidance false -> true\n"
              "sample.num_frames 5 -> 1\n"
              "host.memory_caches true -> false\n"
              "host.threads 2 -> 3\n");
}

// --- Every knob of Plan::fields, one at a time -------------------------------------------

// The knobs' names in the list's order: what diff, the WARN lines and events.jsonl say, and the
// order plan.yaml and diff have always had.
const std::vector<std::string> kKnobNames = {"train.gradient_checkpointing",
                                             "train.batch_size",
                                             "train.gradient_accumulation",
                                             "datasets.max_bucket_pixels",
                                             "datasets.num_frames",
                                             "model.low_vram",
                                             "model.streamed_blocks",
                                             "model.idle_expert_on_host",
                                             "model.qtype",
                                             "model.qtype_te",
                                             "sample.enabled",
                                             "sample.width",
                                             "sample.height",
                                             "sample.batch_prompts",
                                             "sample.batch_guidance",
                                             "sample.num_frames",
                                             "host.memory_caches",
                                             "host.threads"};

std::vector<Knob> knobs() {
    std::vector<Knob> out;
    for_each_knob([&](const Knob& knob, const auto&) { out.push_back(knob); });
    return out;
}

// `plan` one step lighter in knob `index` (the direction Plan::fields gives it): 1, or 64 for
// sizes; accumulation one more, a cap halved (none becomes 4096), 0 threads (all cores) 2, a
// qtype 4 bits instead of 8 (unquantized encoders 8).
Plan one_step_lighter(Plan plan, std::size_t index) {
    std::size_t i = 0;
    for_each_knob([&](const Knob& knob, const auto& field) {
        if (i++ != index) return;
        auto& v = field.of(plan);
        using T = std::decay_t<decltype(v)>;
        const bool down = knob.weighs == Weighs::kMoreDevice || knob.weighs == Weighs::kMoreHost;
        if constexpr (std::is_same_v<T, bool>) {
            v = !down;
        } else if constexpr (std::is_same_v<T, std::optional<std::int64_t>>) {
            v = v ? *v / 2 : 4096;
        } else if constexpr (std::is_same_v<T, config::QType>) {
            v = config::QType::kUInt4;
        } else if constexpr (std::is_same_v<T, std::optional<config::QType>>) {
            v = v ? config::QType::kUInt4 : config::QType::kInt8;
        } else if (knob.zero_is_unlimited && v == 0) {
            v = 2;
        } else {
            // Sample sizes stay multiples of 8 and 64; a video model's frames are 1 + 4k.
            const bool frames = static_cast<const void*>(&v) == &plan.frames ||
                                static_cast<const void*>(&v) == &plan.sample.frames;
            const int step = v > 64 ? 64 : frames ? 4 : 1;
            v += down ? -step : step;
        }
    });
    return plan;
}

TEST(PlanKnobs, TheListNamesEveryKnobOnceInTheFileOrder) {
    std::vector<std::string> names;
    for (const Knob& k : knobs()) names.push_back(k.name());
    EXPECT_EQ(names, kKnobNames);
    // Sections are contiguous (plan.yaml writes each once) and a section switch comes first.
    std::vector<const PlanSection*> seen;
    for (const Knob& k : knobs()) {
        if (seen.empty() || seen.back() != k.section) {
            EXPECT_EQ(std::count(seen.begin(), seen.end(), k.section), 0) << k.name();
            seen.push_back(k.section);
        } else {
            EXPECT_FALSE(k.switches_section) << k.name() << " switches but is not first";
        }
    }
    EXPECT_EQ(seen.size(), 5u);
}

// A plan that differs from a heavy one in only one knob: unequal, one diff entry with the
// knob's name, the same after plan.yaml, described differently, and undo_change puts that knob
// back and nothing else.
TEST(PlanKnobs, EachKnobIsComparedDiffedWrittenReadDescribedAndUndone) {
    Plan base;          // the heavy end of every knob, with room to shrink
    base.low_vram = 3;  // where the qtypes act and blocks stream, and are described
    base.batch_size = 2;
    base.max_bucket_pixels = 512 * 512;
    base.frames = 5;
    base.sample.frames = 5;
    const std::vector<Knob> all = knobs();
    for (std::size_t i = 0; i < all.size(); ++i) {
        const Knob& k = all[i];
        const Plan changed = one_step_lighter(base, i);
        EXPECT_NE(changed, base) << k.name();
        EXPECT_EQ(changed.sample == base.sample, k.section != &Plan::kSample) << k.name();
        EXPECT_EQ(changed.host == base.host, k.section != &Plan::kHost) << k.name();
        const std::vector<KnobChange> d = diff(base, changed);
        ASSERT_EQ(d.size(), 1u) << k.name();
        EXPECT_EQ(d[0].knob, kKnobNames[i]);
        EXPECT_NE(d[0].from, d[0].to);
        EXPECT_EQ(diff(changed, base).at(0).from, d[0].to) << k.name();
        EXPECT_EQ(parse_plan(plan_to_yaml(changed), "plan.yaml"), changed) << k.name();
        EXPECT_NE(describe(changed), describe(base)) << k.name();

        // Undo the change on a plan where a later change moved another knob: that one stays.
        const std::size_t j = (i + 3) % all.size();
        const Plan later = one_step_lighter(changed, j);
        const bool batch_pair = k.effective_batch && all[j].effective_batch;
        EXPECT_EQ(undo_change(later, base, changed), batch_pair ? base : one_step_lighter(base, j))
            << k.name() << " then " << all[j].name();
        EXPECT_EQ(undo_change(changed, base, changed), base) << k.name();
        EXPECT_EQ(undo_change(changed, base, base), changed) << k.name();
    }
}

TEST(PlanKnobs, UndoingTheBatchRestoresAccumulationTooAndTheOtherWay) {
    Plan before;
    before.batch_size = 4;
    Plan after = before;
    after.gradient_accumulation = 2;  // only accumulation moved
    Plan current = after;
    current.batch_size = 2;
    const Plan undone = undo_change(current, before, after);
    EXPECT_EQ(undone.batch_size, 4);
    EXPECT_EQ(undone.gradient_accumulation, 1);
}

const char* kVideoJob = R"(job: extension
config:
  name: plan_knobs
  process:
    - type: sd_trainer
      training_folder: output
      device: sim
      datasets:
        - folder_path: data
          batch_size: 3
          num_frames: 5
      train: {batch_size: 3, steps: 10, gradient_accumulation: 2, gradient_checkpointing: false}
      model: {name_or_path: model, arch: wan21}
      sample: {sample_every: 5, width: 1024, height: 512, num_frames: 5, prompts: ["a"]}
)";

// loom stable export keeps every knob: a plan one step lighter than the job's in any one knob
// comes back from the job it is written into, also through YAML.
TEST(PlanKnobs, EachKnobSurvivesTheJobExport) {
    const config::Job job = config::load_job_text(kVideoJob, "job.yaml").job;
    const Plan base = plan_from_job(job.config.process.at(0));
    const std::vector<Knob> all = knobs();
    for (std::size_t i = 0; i < all.size(); ++i) {
        const Plan plan = one_step_lighter(base, i);
        ASSERT_NE(plan, base) << all[i].name();
        const config::Job with = job_with_plan(job, 0, plan);
        EXPECT_EQ(plan_from_job(with.config.process[0]), plan) << all[i].name();
        const config::Job reread =
            config::load_job_text(config::emit_job_yaml(with), "exported.yaml").job;
        EXPECT_EQ(plan_from_job(reread.config.process[0]), plan) << all[i].name();
    }
}

// loom stable export: a plan written into the job comes back out of it, also after the job
// went through YAML, with the ai-toolkit keys set where ai-toolkit has them.
TEST(JobWithPlan, PlanFromJobReadsBackThePlanItWrote) {
    const config::Job job = config::load_job_text(kJob, "job.yaml").job;
    Plan heavy_end = sample_plan();
    heavy_end.low_vram = 3;
    heavy_end.host.memory_caches = false;
    heavy_end.host.threads = 2;
    heavy_end.sample.batch_guidance = false;
    Plan sampling_off = sample_plan();
    sampling_off.sample.enabled = false;
    for (const Plan& plan :
         {sample_plan(), heavy_end, sampling_off, plan_from_job(job.config.process[0])}) {
        const config::Job with = job_with_plan(job, 0, plan);
        EXPECT_EQ(plan_from_job(with.config.process[0]), plan) << describe(plan);
        const config::Job reread =
            config::load_job_text(config::emit_job_yaml(with), "exported.yaml").job;
        EXPECT_EQ(plan_from_job(reread.config.process[0]), plan) << describe(plan);
    }
}

// ai-toolkit's low_vram keeps the Wan 2.2 expert that is not training on the CPU: in loom the
// idle expert on the host, for a model of experts only; oom.idle_expert_on_host asks for it
// without low_vram, and a plan that keeps both experts on the device at a low_vram level comes
// back from its export as it was.
TEST(JobWithPlan, LowVramParksTheIdleExpertOfAModelOfExperts) {
    const auto plan_of = [](const std::string& arch, const std::string& extra) {
        std::string text = kJob;
        const std::string model = "model: {name_or_path: model, arch: sd1}";
        text.replace(text.find(model), model.size(),
                     "model: {name_or_path: model, arch: " + arch + extra + "}");
        const config::Job job = config::load_job_text(text, "job.yaml").job;
        return std::make_pair(job, plan_from_job(job.config.process[0]));
    };
    EXPECT_TRUE(plan_of("wan22_14b", ", low_vram: true").second.idle_expert_on_host);
    EXPECT_FALSE(plan_of("wan22_14b", "").second.idle_expert_on_host);
    EXPECT_FALSE(plan_of("wan21", ", low_vram: true").second.idle_expert_on_host);
    EXPECT_FALSE(plan_of("sd1", ", low_vram: true").second.idle_expert_on_host);

    auto [job, plan] = plan_of("wan22_14b", "");
    plan.low_vram = 2;
    for (const bool idle : {false, true}) {
        plan.idle_expert_on_host = idle;
        const config::Job with = job_with_plan(job, 0, plan);
        EXPECT_EQ(with.config.process[0].model.low_vram, idle);
        EXPECT_EQ(plan_from_job(with.config.process[0]), plan) << describe(plan);
    }
}

// The qtypes come from model.qtype, and qtype_te only with quantize_te (which the loader sets
// from quantize when absent, as ai-toolkit does); a word loom replaces is read as what it uses.
TEST(JobWithPlan, QTypesComeFromTheModelKeysAndGoBackAsLoomNamesThem) {
    std::string text = kJob;
    const std::string model = "model: {name_or_path: model, arch: sd1}";
    text.replace(text.find(model), model.size(),
                 "model: {name_or_path: model, arch: sd1, quantize: true, "
                 "qtype: 'uint3|ostris/adapter.safetensors', qtype_te: qint8}");
    const config::Job job = config::load_job_text(text, "job.yaml").job;
    const Plan plan = plan_from_job(job.config.process[0]);
    EXPECT_EQ(plan.low_vram, 2);
    EXPECT_EQ(plan.qtype, config::QType::kUInt4);
    EXPECT_EQ(plan.qtype_te, config::QType::kInt8);  // quantize_te follows quantize
    const config::ProcessConfig p = job_with_plan(job, 0, plan).config.process[0];
    EXPECT_EQ(p.model.qtype, "uint4");
    EXPECT_EQ(p.model.qtype_te, "qint8");
    EXPECT_EQ(p.model.quantize_te, true);

    const config::Job plain = config::load_job_text(kJob, "job.yaml").job;
    EXPECT_EQ(plan_from_job(plain.config.process[0]).qtype, config::QType::kFloat8);
    EXPECT_EQ(plan_from_job(plain.config.process[0]).qtype_te, std::nullopt);
}

TEST(JobWithPlan, UsesTheAiToolkitKeysWhereTheyExist) {
    const config::Job job = config::load_job_text(kJob, "job.yaml").job;
    Plan plan = sample_plan();
    plan.low_vram = 1;
    const config::ProcessConfig p = job_with_plan(job, 0, plan).config.process[0];
    EXPECT_TRUE(p.train.gradient_checkpointing);
    EXPECT_EQ(p.train.batch_size, 1);
    EXPECT_EQ(p.datasets[0].batch_size, 1);
    EXPECT_EQ(p.train.gradient_accumulation, 6);
    EXPECT_TRUE(p.model.low_vram);
    EXPECT_EQ(p.sample.width, 256);
    EXPECT_EQ(p.sample.samples[0].width, 256);  // the 1024-wide preview is capped
    EXPECT_FALSE(p.train.disable_sampling);
    EXPECT_EQ(p.oom.max_bucket_pixels, 512 * 512);
    EXPECT_FALSE(p.oom.sample_batch_prompts);
    // Everything else is the job's.
    EXPECT_EQ(p.train.steps, 10);
    EXPECT_EQ(p.datasets[0].resolution, (std::vector<int>{512, 768}));
    EXPECT_EQ(p.sample.prompts.size(), 2u);
    EXPECT_THROW(job_with_plan(job, 1, plan), Error);
}

}  // namespace
}  // namespace loom::guard
