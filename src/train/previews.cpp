#include "loom/train/previews.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "loom/config/arch.h"
#include "loom/config/prompt_flags.h"
#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/data/animation.h"
#include "loom/data/image.h"
#include "loom/data/image_tensor.h"
#include "loom/lora/assistant_adapter.h"
#include "loom/lora/lora_network.h"
#include "loom/model/family.h"
#include "loom/train/lora_training.h"
#include "loom/train/low_vram.h"
#include "loom/train/run_folder.h"

namespace loom {

namespace {

std::string epoch_milliseconds() {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    return std::to_string(ms);
}

// A clip as an animated WebP beside its first frame's PNG (ai-toolkit writes video samples as
// animated WebP); without libwebp's animation encoder, as one PNG per frame.
void write_clip(const std::filesystem::path& stem, const std::vector<data::Image>& frames,
                int fps) {
    if (data::animated_webp_supported()) {
        data::write_animated_webp(stem.string() + ".webp", frames, fps);
        return;
    }
    for (std::size_t f = 0; f < frames.size(); ++f) {
        data::write_png(stem.string() + "_frame" + std::to_string(f) + ".png", frames[f]);
    }
}

// The LoRA in sampling mode for the scope: no dropout, the sampling multiplier.
class SamplingMode {
  public:
    SamplingMode(LoRANetwork& network, double multiplier) : network_(network) {
        network_.set_training(false);
        network_.set_multiplier(multiplier);
    }
    ~SamplingMode() {
        network_.set_multiplier(1.0);
        network_.set_training(true);
    }
    SamplingMode(const SamplingMode&) = delete;
    SamplingMode& operator=(const SamplingMode&) = delete;

  private:
    LoRANetwork& network_;
};

// A preview's control image fitted to its size (scale and centre crop, as training fits a
// dataset's control image to its item's bucket), [3, height, width] in [-1, 1].
at::Tensor control_tensor(const std::string& path, std::size_t prompt, int64_t width,
                          int64_t height) {
    try {
        return data::read_fitted_image(path, {static_cast<int>(width), static_cast<int>(height)});
    } catch (const Error& e) {
        throw ConfigError("", "sample.prompts",
                          "sample prompt " + std::to_string(prompt + 1) + ": its control image " +
                              path + " cannot be used (" + e.what() +
                              "); fix the --ctrl_img path or the file");
    }
}

// A preview's control image as it is on disk, uint8 [H, W, 3]: what an Edit pipeline resizes
// itself.
at::Tensor raw_control(const std::string& path, std::size_t prompt) {
    try {
        return data::rgb8_tensor(data::read_image(path));
    } catch (const Error& e) {
        throw ConfigError("", "sample.prompts",
                          "sample prompt " + std::to_string(prompt + 1) + ": its control image " +
                              path + " cannot be used (" + e.what() +
                              "); fix the ctrl_img path or the file");
    }
}

}  // namespace

std::vector<PreviewRequest> preview_requests(const config::ProcessConfig& process) {
    const config::SampleConfig& sc = process.sample;
    const bool takes_control =
        process.choices.arch && config::arch_info(*process.choices.arch).control_images;
    const bool controls_in_prompt =
        process.choices.arch && config::arch_info(*process.choices.arch).controls_in_prompt;
    std::vector<PreviewRequest> requests;
    std::vector<std::string> prompts = sc.prompts;
    for (const auto& item : sc.samples) prompts.push_back(item.prompt);
    const std::optional<std::string>& trigger = process.trigger_word;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        PreviewRequest r;
        std::string p = prompts[i];
        for (std::size_t pos = p.find("[trigger]"); pos != std::string::npos;
             pos = p.find("[trigger]")) {
            p.replace(pos, 9, trigger.value_or(""));
        }
        const config::PromptFlags flags = config::parse_prompt_flags(p);
        r.prompt = flags.prompt;
        r.negative = sc.neg;
        r.seed = sc.walk_seed ? sc.seed + static_cast<int64_t>(i) : sc.seed;
        r.width = sc.width;
        r.height = sc.height;
        r.steps = sc.sample_steps;
        r.guidance_scale = sc.guidance_scale;
        r.frames = sc.num_frames;
        const std::size_t legacy = sc.prompts.size();
        if (i >= legacy) {
            const config::SampleItem& item = sc.samples[i - legacy];
            if (item.width) r.width = *item.width;
            if (item.height) r.height = *item.height;
            if (item.neg) r.negative = *item.neg;
            if (item.seed) r.seed = *item.seed;
            if (item.guidance_scale) r.guidance_scale = *item.guidance_scale;
            if (item.sample_steps) r.steps = *item.sample_steps;
            if (item.num_frames) r.frames = *item.num_frames;
        }
        // The prompt's own flags come last, as ai-toolkit applies them over the sample section.
        if (flags.neg) r.negative = *flags.neg;
        if (flags.width) r.width = *flags.width;
        if (flags.height) r.height = *flags.height;
        if (flags.seed) r.seed = *flags.seed;
        if (flags.guidance_scale) r.guidance_scale = *flags.guidance_scale;
        if (flags.steps) r.steps = *flags.steps;
        if (flags.frames) r.frames = *flags.frames;
        for (const std::string& f : flags.unused) {
            logger("train").warn(
                "sample prompt {}: {} is not used by loom; the preview renders "
                "without it",
                i + 1, f);
        }
        std::vector<std::string> controls;
        if (flags.ctrl_img) controls.push_back(*flags.ctrl_img);
        if (i >= sc.prompts.size() && !sc.samples[i - sc.prompts.size()].control_images().empty())
            controls = sc.samples[i - sc.prompts.size()].control_images();
        const std::optional<std::string> control =
            controls.empty() ? std::nullopt : std::optional<std::string>(controls.front());
        if (control && controls_in_prompt) {
            for (const std::string& c : controls) r.control_images.push_back(raw_control(c, i));
        } else if (control && takes_control) {
            r.control = control_tensor(*control, i, r.width, r.height);
        } else if (control) {
            logger("train").warn(
                "sample prompt {}: --ctrl_img is not used: '{}' previews take "
                "no control image",
                i + 1, process.model.arch.value_or("this model"));
        }
        requests.push_back(r);
    }
    return requests;
}

std::vector<at::Tensor> render_previews(const PreviewModel& preview,
                                        std::vector<PreviewRequest> requests,
                                        const guard::SamplePlan& sp,
                                        const config::ProcessConfig& process) {
    for (PreviewRequest& r : requests) {
        r.width = std::min<int64_t>(r.width, sp.width);
        r.height = std::min<int64_t>(r.height, sp.height);
        r.frames = std::min<int64_t>(r.frames, sp.frames);  // the preview-frames rung
        // The size rung shrinks the control image with the preview (area-averaged, as an image
        // is shrunk).
        if (r.control.defined() &&
            (r.control.size(1) != r.height || r.control.size(2) != r.width)) {
            r.control = at::_upsample_bilinear2d_aa(r.control.unsqueeze(0), {r.height, r.width},
                                                    /*align_corners=*/false)
                            .squeeze(0);
        }
    }
    PreviewOptions options;
    options.sampler = process.choices.sampler;
    options.batch_prompts = sp.batch_prompts;
    options.batch_guidance = sp.batch_guidance;
    SamplingMode mode(preview.lora.network(), process.sample.network_multiplier);
    LoRATraining::EmaWeights ema(preview.lora);
    LowVramMode::EncodersOnDevice encoders(preview.low_vram);
    AssistantAdapter::Removed assistant(preview.assistant, preview.device);
    return preview.model.sample(requests, options, preview.device);
}

void write_previews(const RunFolder& run, std::int64_t step, const std::vector<at::Tensor>& images,
                    int fps) {
    const std::string time = epoch_milliseconds();
    std::vector<data::Image> grid;
    for (std::size_t i = 0; i < images.size(); ++i) {
        const std::string stem = time + "__" + step_label(step) + "_" + std::to_string(i);
        // An image [H, W, 3], or a clip [F, H, W, 3]: its first frame is the PNG.
        const at::Tensor clip = images[i].dim() == 3 ? images[i].unsqueeze(0) : images[i];
        std::vector<data::Image> frames;
        for (int64_t f = 0; f < clip.size(0); ++f) {
            const at::Tensor t = clip[f].contiguous();
            data::Image img(static_cast<int>(t.size(1)), static_cast<int>(t.size(0)));
            std::memcpy(img.pixels.data(), t.data_ptr(), img.pixels.size());
            frames.push_back(std::move(img));
        }
        data::write_png(run.samples_dir() / (stem + ".png"), frames.front());
        if (frames.size() > 1) write_clip(run.samples_dir() / stem, frames, fps);
        grid.push_back(std::move(frames.front()));
    }
    data::write_png(run.samples_dir() / (time + "__" + step_label(step) + "_grid.png"),
                    data::image_grid(grid, 0, 2));
}

}  // namespace loom
