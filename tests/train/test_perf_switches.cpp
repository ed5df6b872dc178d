// The perf: switches end to end on the simulated device (a CPU underneath): each trains what the
// plain path trains, so on a GPU they can be measured on against off knowing they change nothing
// but speed. perf.fused_adamw and perf.channels_last round differently (fused multiply-adds,
// other conv kernels), hence a tolerance; perf.stream_prefetch copies the same bytes, so its runs
// are identical — and its step peak is at most PrefetchingWeightSource::kDepth layers higher.
// (perf.cuda_graphs has its own tests in test_trainer.cpp.)

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>

#include "loom/config/load.h"
#include "loom/device/host_memory.h"
#include "loom/guard/plan.h"
#include "loom/model/nn/adaptable_layers.h"
#include "loom/model/sd/stable_diffusion.h"
#include "loom/train/prefetching_weight_source.h"
#include "loom/train/trainer.h"
#include "tiny_sd.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

constexpr double kBytesPerMiB = 1024.0 * 1024.0;

struct RunSpec {
    std::string name;
    std::string perf;  // the perf: block as a YAML flow map; empty: the defaults
    bool checkpointing = false;
    int steps = 6;
    std::optional<int> low_vram;  // start from a plan.yaml with this low_vram level
};

RunSpec spec(std::string name, std::string perf = "", bool checkpointing = false, int steps = 6,
             std::optional<int> low_vram = std::nullopt) {
    return {std::move(name), std::move(perf), checkpointing, steps, low_vram};
}

class PerfSwitches : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        root_ = fs::temp_directory_path() / ("loom_perf_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        testing::make_tiny_sd(root_ / "model");
        testing::make_dataset(root_ / "data", 6);  // three buckets
    }
    static void TearDownTestSuite() { fs::remove_all(root_); }

    static fs::path run_folder(const std::string& name) { return root_ / "runs" / name; }

    // Batch 2 with accumulation 2: two UNet passes a step; conv LoRAs, so the channels-last
    // convolutions reach LoRA weights too; a checkpoint at step 3.
    static TrainSummary train(const RunSpec& r, std::optional<std::int64_t> stop_after = {}) {
        std::ostringstream y;
        y << "job: extension\nconfig:\n  name: " << r.name << "\n  process:\n"
          << "    - type: sd_trainer\n"
          << "      training_folder: " << (root_ / "runs").string() << "\n"
          << "      device: sim\n"
          << "      training_seed: 5\n"
          << "      trigger_word: sks\n"
          << "      network: {linear: 4, linear_alpha: 4, conv: 2}\n"
          << "      save: {save_every: 3, dtype: float32}\n"
          << "      datasets:\n"
          << "        - folder_path: " << (root_ / "data").string() << "\n"
          << "          resolution: [64]\n"
          << "          cache_latents: true\n"
          << "      train:\n"
          << "        steps: " << r.steps << "\n"
          << "        lr: 3e-3\n"
          << "        batch_size: 2\n"
          << "        gradient_accumulation: 2\n"
          << "        gradient_checkpointing: " << (r.checkpointing ? "true" : "false") << "\n"
          << "        disable_sampling: true\n"
          << "      model: {name_or_path: " << (root_ / "model").string() << ", arch: sd1}\n"
          << "      oom: {vram_limit: 4GiB}\n";
        if (!r.perf.empty()) y << "      perf: " << r.perf << "\n";
        const config::Job job = config::load_job_text(y.str(), r.name + ".yaml").job;
        TrainOverrides o;
        o.progress_line = false;
        o.stop_after_steps = stop_after;
        if (r.low_vram && !fs::exists(run_folder(r.name) / "plan.yaml")) {
            guard::Plan p = guard::plan_from_job(job.config.process.at(0));
            p.low_vram = *r.low_vram;
            fs::create_directories(run_folder(r.name));
            guard::save_plan(run_folder(r.name) / "plan.yaml", p);
        }
        return train_process(job, 0, o);
    }

    // The highest per-step device peak (metrics.jsonl; the guard resets the peak every step).
    static std::uint64_t step_peak(const std::string& name) {
        std::uint64_t peak = 0;
        std::ifstream in(run_folder(name) / "metrics.jsonl");
        for (std::string line; std::getline(in, line);) {
            const auto m = nlohmann::json::parse(line);
            peak = std::max(peak, m.at("peak_allocated").get<std::uint64_t>());
        }
        return peak;
    }

    static inline fs::path root_;
};

// The losses within `loss_tolerance` (relative) step for step, the LoRAs within `lora_tolerance`.
// AdamW divides by the root of the second moment, so where a gradient element is near zero a
// rounding difference can move that weight by a part of one step's learning rate (3e-3 here):
// the LoRA tolerance is measured against that, not against float epsilon.
void expect_same_training(const TrainSummary& on, const TrainSummary& off, double loss_tolerance,
                          double lora_tolerance, const std::string& what) {
    ASSERT_EQ(on.losses.size(), off.losses.size()) << what;
    for (std::size_t i = 0; i < off.losses.size(); ++i) {
        EXPECT_NEAR(on.losses[i], off.losses[i], loss_tolerance * std::abs(off.losses[i]))
            << what << ", step " << i + 1;
    }
    EXPECT_LE(testing::max_lora_difference(on.final_lora, off.final_lora), lora_tolerance) << what;
}

TEST_F(PerfSwitches, FusedAdamwTrainsTheSameLoraAlsoAfterAResume) {
    const TrainSummary off = train(spec("fused_off"));
    const TrainSummary on = train(spec("fused_on", "{fused_adamw: true}"));
    expect_same_training(on, off, 1e-6, 1e-5, "fused_adamw");
    // Stopped after step 4, resumed from the checkpoint at step 3: the fused optimizer's state
    // is loaded into a fresh one and training goes on to the same LoRA.
    train(spec("fused_split", "{fused_adamw: true}"), 4);
    const TrainSummary resumed = train(spec("fused_split", "{fused_adamw: true}"));
    EXPECT_TRUE(resumed.resumed);
    EXPECT_EQ(resumed.start_step, 3);
    EXPECT_LE(testing::max_lora_difference(resumed.final_lora, off.final_lora), 1e-5);
}

TEST_F(PerfSwitches, ChannelsLastTrainsTheSameLora) {
    for (const bool checkpointing : {false, true}) {
        const std::string gc = checkpointing ? "_gc" : "";
        const TrainSummary off = train(spec("cl_off" + gc, "", checkpointing, 4));
        const TrainSummary on =
            train(spec("cl_on" + gc, "{channels_last: true}", checkpointing, 4));
        expect_same_training(on, off, 1e-5, 5e-4, "channels_last" + gc);
    }
    // Through low_vram level 3 as well (bf16 conversion, block streaming: the layout survives
    // them, test_low_vram.cpp). The base computes in bf16 there, whose rounding differs between
    // the conv kernels far more than float32's: the losses are compared, to bf16 precision.
    const TrainSummary off = train(spec("cl_off_lv3", "", true, 3, 3));
    const TrainSummary on = train(spec("cl_on_lv3", "{channels_last: true}", true, 3, 3));
    expect_same_training(on, off, 1e-2, 1.0, "channels_last at low_vram 3");
}

// The bf16 copies of the kDepth largest streamed layers: what prefetch may hold on top.
std::uint64_t largest_streamed_layers(const fs::path& model_folder) {
    std::vector<std::uint64_t> bytes;
    HostAllocations host;
    const StableDiffusion model = load_stable_diffusion(model_folder);
    for (const auto& item : model.unet->named_modules("", /*include_self=*/false)) {
        const std::string& name = item.key();
        if (name.rfind("down_blocks.", 0) != 0 && name.rfind("mid_block.", 0) != 0 &&
            name.rfind("up_blocks.", 0) != 0) {
            continue;  // the blocks low_vram level 3 streams
        }
        const at::Tensor* weight = nullptr;
        const at::Tensor* bias = nullptr;
        if (const auto* linear = dynamic_cast<const LinearImpl*>(item.value().get())) {
            weight = &linear->weight;
            bias = &linear->bias;
        } else if (const auto* conv = dynamic_cast<const Conv2dImpl*>(item.value().get())) {
            weight = &conv->weight;
            bias = &conv->bias;
        } else {
            continue;
        }
        const std::int64_t n = weight->numel() + (bias->defined() ? bias->numel() : 0);
        bytes.push_back(static_cast<std::uint64_t>(n) * 2);  // level 3 holds them in bf16
    }
    std::sort(bytes.rbegin(), bytes.rend());
    const std::size_t k = std::min(bytes.size(), PrefetchingWeightSource::kDepth);
    return std::accumulate(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(k),
                           std::uint64_t{0});
}

// The number in loom.log's "stream prefetch: N fetches from copies made ahead" line.
std::uint64_t prefetch_hits(const fs::path& run) {
    std::ifstream in(run / "loom.log");
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    const std::string marker = "stream prefetch: ";
    const std::size_t at = text.find(marker);
    if (at == std::string::npos) return 0;
    std::istringstream line(text.substr(at + marker.size()));
    std::uint64_t hits = 0;
    line >> hits;
    return hits;
}

TEST_F(PerfSwitches, StreamPrefetchTrainsLikeDirectFetchesWithinItsMemoryBound) {
    const std::uint64_t ahead = largest_streamed_layers(root_ / "model");
    for (const bool checkpointing : {true, false}) {  // with the recomputes' fetches, and without
        const std::string gc = checkpointing ? "_gc" : "";
        const TrainSummary off = train(spec("stream_off" + gc, "", checkpointing, 3, 3));
        const TrainSummary on =
            train(spec("stream_on" + gc, "{stream_prefetch: true}", checkpointing, 3, 3));
        EXPECT_EQ(on.losses, off.losses) << gc;  // the same bytes: bit-identical
        EXPECT_EQ(testing::max_lora_difference(on.final_lora, off.final_lora), 0.0) << gc;
        const std::uint64_t off_peak = step_peak("stream_off" + gc);
        const std::uint64_t on_peak = step_peak("stream_on" + gc);
        std::printf(
            "checkpointing %d: step peak %.3f MiB direct, %.3f MiB with prefetch (bound "
            "+%.3f MiB)\n",
            checkpointing ? 1 : 0, double(off_peak) / kBytesPerMiB, double(on_peak) / kBytesPerMiB,
            double(ahead) / kBytesPerMiB);
        EXPECT_LE(on_peak, off_peak + ahead) << gc;
        EXPECT_GT(prefetch_hits(run_folder("stream_on" + gc)), 0u) << gc;  // it did prefetch
        EXPECT_EQ(prefetch_hits(run_folder("stream_off" + gc)), 0u) << gc;
    }
}

}  // namespace
}  // namespace loom
