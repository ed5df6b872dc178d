#pragma once

// The process's `sample:` section (ai-toolkit.md §1): the preview prompts and how they are
// rendered. Keys listed once, in `fields(v)` (config/job.h).

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/config/choices.h"
#include "loom/config/field_rules.h"

namespace loom::config {

// One preview prompt; fields left out inherit from the `sample` section.
struct SampleItem {
    std::string prompt;
    std::optional<int> width;
    std::optional<int> height;
    std::optional<std::string> neg;
    std::optional<std::int64_t> seed;
    std::optional<double> guidance_scale;
    std::optional<int> sample_steps;
    std::optional<double> network_multiplier;
    std::optional<int> num_frames;
    std::optional<int> fps;
    std::optional<std::string> ctrl_img;  // the control image a Kontext preview edits
    // Qwen-Image-Edit-2509's pictures 1 to 3 (ctrl_img stands for picture 1 when given).
    std::optional<std::string> ctrl_img_1, ctrl_img_2, ctrl_img_3;

    // The preview's control images in order: ctrl_img (or ctrl_img_1), ctrl_img_2, ctrl_img_3.
    std::vector<std::string> control_images() const {
        std::vector<std::string> out;
        if (ctrl_img || ctrl_img_1) out.push_back(ctrl_img ? *ctrl_img : *ctrl_img_1);
        for (const auto* more : {&ctrl_img_2, &ctrl_img_3})
            if (*more) out.push_back(**more);
        return out;
    }

    template <class V>
    static void fields(V& v) {
        v("prompt", &SampleItem::prompt, Required{"the text of this preview prompt"});
        v("width", &SampleItem::width, AtLeast{64}, MultipleOf{8});
        v("height", &SampleItem::height, AtLeast{64}, MultipleOf{8});
        v("neg", &SampleItem::neg);
        v("seed", &SampleItem::seed, AtLeast{-1});
        v("guidance_scale", &SampleItem::guidance_scale, AtLeast{0});
        v("sample_steps", &SampleItem::sample_steps, AtLeast{1});
        v("network_multiplier", &SampleItem::network_multiplier);
        v("num_frames", &SampleItem::num_frames, AtLeast{1});
        v("fps", &SampleItem::fps, AtLeast{1});
        v("ctrl_img", &SampleItem::ctrl_img);
        v("ctrl_img_1", &SampleItem::ctrl_img_1);
        v("ctrl_img_2", &SampleItem::ctrl_img_2);
        v("ctrl_img_3", &SampleItem::ctrl_img_3);
        v.not_yet({"ctrl_idx", "do_cfg_norm"});
    }
};

struct SampleConfig {
    std::string sampler = "ddpm";
    int sample_every = 100;
    int sample_start_step = 0;
    int width = 512;
    int height = 512;
    std::string neg;
    std::int64_t seed = 0;  // -1: a random seed per sample
    bool walk_seed = false;
    double guidance_scale = 7.0;
    int sample_steps = 20;
    double network_multiplier = 1.0;
    double guidance_rescale = 0.0;
    std::string format = "jpg";
    int num_frames = 1;
    int fps = 16;
    std::vector<std::string> prompts;
    std::vector<SampleItem> samples;

    template <class V>
    static void fields(V& v) {
        v("sampler", &SampleConfig::sampler,
          OneOf{{"ddpm", "ddim", "euler", "flowmatch"},
                {"pndm", "lms", "k_lms", "k_euler", "euler_a", "dpmsolver", "dpmsolver++",
                 "k_dpmsolver", "k_dpmsolver++", "dpmsingle", "heun", "dpm_2", "dpm_2_a", "lcm",
                 "custom_lcm", "mean_flow"},
                "loom samples with ddim instead"});
        v("sample_every", &SampleConfig::sample_every, AtLeast{1});
        v("sample_start_step", &SampleConfig::sample_start_step, AtLeast{0});
        v("width", &SampleConfig::width, AtLeast{64}, MultipleOf{8});
        v("height", &SampleConfig::height, AtLeast{64}, MultipleOf{8});
        v("neg", &SampleConfig::neg);
        v("seed", &SampleConfig::seed, AtLeast{-1});
        v("walk_seed", &SampleConfig::walk_seed);
        v("guidance_scale", &SampleConfig::guidance_scale, AtLeast{0});
        v("sample_steps", &SampleConfig::sample_steps, AtLeast{1});
        v("network_multiplier", &SampleConfig::network_multiplier);
        v("guidance_rescale", &SampleConfig::guidance_rescale,
          NotYetUnlessDefault{"guidance is not rescaled"});
        v("format", &SampleConfig::format,
          OneOf{{"jpg", "png"}, {"webp"}, "loom writes png instead"});
        v("num_frames", &SampleConfig::num_frames, AtLeast{1});
        v("fps", &SampleConfig::fps, AtLeast{1});
        v("prompts", &SampleConfig::prompts);
        v("samples", &SampleConfig::samples);
        v.not_yet(
            {"adapter_conditioning_scale", "refiner_start_at", "extra_values", "do_cfg_norm"});
    }
};

}  // namespace loom::config
