// The Plan: built from a job, described, diffed, written to plan.yaml and read back strictly.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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
