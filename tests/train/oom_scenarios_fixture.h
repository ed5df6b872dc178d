#pragma once

// The fixture of the OOM guard's scenarios on the simulated device (test_oom_scenarios.cpp,
// test_oom_scenario_plans.cpp): a job spec written as ai-toolkit YAML, the in-memory plan store,
// and budgets set between measured peaks (one calibration run per job, shared by the suite).

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "loom/config/load.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/device/faults.h"
#include "loom/guard/plan.h"
#include "loom/guard/plan_store.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/train/trainer.h"
#include "scenario_runs.h"
#include "tiny_sd.h"

namespace loom::oom_scenarios {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::change_rules;
using testing::events_named;
using testing::metric_lines;
using testing::read_events;

// `count` images of one size (testing::write_square_image), numbered from `first`.
inline void add_images(const fs::path& folder, int count, int width, int height, int first = 0) {
    for (int i = first; i < first + count; ++i)
        testing::write_square_image(folder, i, width, height);
}

struct JobSpec {
    std::string name;
    std::string data = "uniform";
    int steps = 6;
    int batch = 4;
    int accumulation = 1;
    bool checkpointing = false;
    bool probe = true;
    bool sampling = false;
    int sample_size = 64;
    int sample_every = 1000;
    bool first_sample = true;
    int resolution = 64;
    std::string vram = "4GiB";
    int save_every = 1000;
    bool scale_up = false;
    int stable_after = 50;
    std::optional<int> preset_low_vram;  // start from a plan.yaml with this low_vram level
    std::string reuse_stable = "auto";
};

// The stable-config store in memory (the SQLite one has its own tests in tests/store): what
// the trainer reports, and the known plans it is asked for, as the store answers them.
class MemoryPlanStore final : public guard::PlanStore {
  public:
    struct Run {
        guard::RunFacts facts;
        std::vector<guard::OomFacts> ooms;
        std::vector<guard::StableFacts> stables;
        std::optional<guard::RunEnd> end;
    };
    std::vector<Run> runs;

    guard::KnownPlans known_plans(const guard::PlanKey& key) override {
        guard::KnownPlans k;
        std::int64_t id = 0;
        for (const Run& r : runs) {
            if (r.facts.key != key) continue;
            for (const guard::OomFacts& o : r.ooms) {
                if (!o.injected) k.failed.push_back(o.plan);
            }
            for (const guard::StableFacts& st : r.stables) {
                k.stable = guard::StoredStable{++id, st.plan, r.facts.name, "now"};
            }
        }
        return k;
    }
    void run_started(const guard::RunFacts& run) override { runs.push_back({run, {}, {}, {}}); }
    void oom(const guard::OomFacts& oom) override { runs.back().ooms.push_back(oom); }
    void stable(const guard::StableFacts& st) override { runs.back().stables.push_back(st); }
    void run_finished(const guard::RunEnd& end) override { runs.back().end = end; }
};

class OomScenarios : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        root_ = fs::temp_directory_path() / ("loom_oom_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        testing::make_tiny_sd(root_ / "model");
        add_images(root_ / "uniform", 4, 48, 48);  // one bucket: 48x48
        add_images(root_ / "rare", 7, 32, 32);     // seven small images ...
        add_images(root_ / "rare", 1, 64, 64, 7);  // ... and one rare large one
        add_images(root_ / "small_only", 7, 32, 32);
    }
    static void TearDownTestSuite() { fs::remove_all(root_); }
    void TearDown() override { fault_injector().clear(); }

    static config::Job job(const JobSpec& s) {
        return config::load_job_text(job_yaml(s), s.name + ".yaml").job;
    }

    static std::string job_yaml(const JobSpec& s) {
        std::ostringstream y;
        y << "job: extension\nconfig:\n  name: " << s.name << "\n  process:\n"
          << "    - type: sd_trainer\n"
          << "      training_folder: " << (root_ / "runs").string() << "\n"
          << "      device: sim\n"
          << "      training_seed: 11\n"
          << "      trigger_word: sks\n"
          << "      network: {linear: 4, linear_alpha: 4}\n"
          << "      save: {save_every: " << s.save_every << ", dtype: float32}\n"
          << "      datasets:\n"
          << "        - folder_path: " << (root_ / s.data).string() << "\n"
          << "          resolution: [" << s.resolution << "]\n"
          << "          cache_latents: true\n"
          << "      train:\n"
          << "        steps: " << s.steps << "\n"
          << "        lr: 1e-3\n"
          << "        batch_size: " << s.batch << "\n"
          << "        gradient_accumulation: " << s.accumulation << "\n"
          << "        gradient_checkpointing: " << (s.checkpointing ? "true" : "false") << "\n"
          << "        disable_sampling: " << (s.sampling ? "false" : "true") << "\n"
          << "        skip_first_sample: " << (s.first_sample ? "false" : "true") << "\n"
          << "      model: {name_or_path: " << (root_ / "model").string() << ", arch: sd1}\n"
          << "      sample:\n"
          << "        sampler: ddim\n"
          << "        width: " << s.sample_size << "\n"
          << "        height: " << s.sample_size << "\n"
          << "        sample_steps: 2\n"
          << "        sample_every: " << s.sample_every << "\n"
          << "        prompts: ['[trigger] square', 'a blue circle']\n"
          << "      oom:\n"
          << "        vram_limit: " << s.vram << "\n"
          << "        probe: " << (s.probe ? "true" : "false") << "\n"
          << "        scale_up: " << (s.scale_up ? "true" : "false") << "\n"
          << "        stable_after: " << s.stable_after << "\n"
          << "        reuse_stable: " << s.reuse_stable << "\n";
        return y.str();
    }

    static TrainSummary train(const JobSpec& s, bool fresh = true,
                              guard::PlanStore* store = nullptr) {
        TrainOverrides o;
        o.fresh = fresh;
        o.plan_store = store;
        return testing::train_scenario(job(s), run_folder(s.name), o, s.preset_low_vram);
    }

    static fs::path run_folder(const std::string& name) { return root_ / "runs" / name; }

    // The probe's peak for a one-step run of `s` with a generous budget: the memory a training
    // step (part "train") or a preview pass (part "sample") needs under that plan.
    // Calibrations are kept by job (B's budget serves four scenarios).
    static std::uint64_t measured_peak(JobSpec s, const std::string& part) {
        s.steps = 1;
        s.probe = true;
        s.vram = "4GiB";
        JobSpec unnamed = s;
        unnamed.name = "calibrate";
        const std::string key = job_yaml(unnamed) + "preset_low_vram: " +
                                std::to_string(s.preset_low_vram.value_or(-1));
        const fs::path& run = calibrations_.folder(key, [&] {
            s.name = "calibrate_" + s.name;
            train(s);
            return run_folder(s.name);
        });
        return testing::probe_peak(run, part);
    }

    static std::string mib(std::uint64_t bytes) { return std::to_string(bytes / 1024) + "KiB"; }

    // A budget between batch 4 and batch 1 (both with checkpointing) of `s`: batch 4 without
    // checkpointing does not fit, checkpointing alone does not either, batch 1 does. Measured
    // with the encoders off the device: the free rung (free.encoders_off_device, issue 22) comes
    // first and must not be enough.
    static std::string budget_needing_batch_one(const JobSpec& s) {
        JobSpec gc = s;
        gc.name = s.name + "_gc";
        gc.checkpointing = true;
        gc.preset_low_vram = 1;
        JobSpec one = gc;
        one.name = s.name + "_one";
        one.batch = 1;
        const std::uint64_t gc_peak = measured_peak(gc, "train");
        const std::uint64_t one_peak = measured_peak(one, "train");
        EXPECT_GT(gc_peak, one_peak + kMiB);
        return mib((gc_peak + one_peak) / 2);
    }

    static inline fs::path root_;
    static inline testing::CalibrationRuns calibrations_;
};

}  // namespace loom::oom_scenarios
