#include "resolve.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <utility>

#include "loom/config/arch.h"
#include "loom/config/choices.h"
#include "loom/core/error.h"
#include "number_text.h"

namespace loom::config::detail {

namespace {

// The longest clip auto_frame_count takes when num_frames does not say: Wan 2.1's 81 frames
// (5 s at 16 fps), the length its pipelines generate.
constexpr int kLongestAutoClip = 81;

class Resolver {
  public:
    explicit Resolver(ReadResult& r) : r_(r) {}

    void run() {
        Job& job = r_.job;
        for (std::size_t i = 0; i < job.config.process.size(); ++i) {
            resolve_process(job.config, job.config.process[i],
                            "config.process." + std::to_string(i));
        }
    }

  private:
    // Where `path` was read, or the nearest enclosing section that was.
    std::string where(const std::string& path) const {
        std::string p = path;
        while (true) {
            auto it = r_.locations.find(p);
            if (it != r_.locations.end()) return it->second;
            const std::size_t dot = p.rfind('.');
            if (dot == std::string::npos) break;
            p.resize(dot);
        }
        auto root = r_.locations.find("");
        return root != r_.locations.end() ? root->second : std::string();
    }

    bool was_given(const std::string& path) const { return r_.locations.count(path) > 0; }

    [[noreturn]] void fail(const std::string& path, const std::string& message) const {
        throw ConfigError(where(path), path, message);
    }

    // `at` is the key whose position is shown, `path` the key the warning is about.
    void warn(DiagnosticKind kind, const std::string& path, std::string message,
              const std::string& at = "") {
        r_.warnings.push_back({kind, where(at.empty() ? path : at), path, std::move(message)});
    }

    void resolve_process(const JobConfig& config, ProcessConfig& p, const std::string& path) {
        if (!p.name) p.name = config.name;
        if (!p.training_folder) p.training_folder = config.training_folder;
        if (!p.training_folder) {
            fail(path, "missing required key " + path +
                           ".training_folder (the folder that holds run folders, e.g. output)");
        }
        check_device(p.device, path + ".device");

        NetworkConfig& n = p.network;
        // ai-toolkit fine-tunes the whole model when a job has no network section (its
        // full_fine_tune examples); `loom train` says it trains a LoRA instead.
        p.choices.network_given = was_given(path + ".network");
        if (!n.linear_alpha) n.linear_alpha = n.alpha;
        if (n.conv && !n.conv_alpha) n.conv_alpha = static_cast<double>(*n.conv);

        for (std::size_t i = 0; i < p.datasets.size(); ++i) {
            DatasetConfig& d = p.datasets[i];
            if (!d.caption_ext.empty() && d.caption_ext.front() != '.') {
                d.caption_ext = "." + d.caption_ext;
            }
            if (!d.trigger_word) d.trigger_word = p.trigger_word;
        }

        resolve_model(p, path + ".model");
        resolve_experts(p, path);
        resolve_family_keys(p, path);

        TrainConfig& t = p.train;
        if (t.min_denoising_steps > t.max_denoising_steps) {
            fail(path + ".train.min_denoising_steps",
                 path + ".train.min_denoising_steps (" + std::to_string(t.min_denoising_steps) +
                     ") must be <= max_denoising_steps (" + std::to_string(t.max_denoising_steps) +
                     ")");
        }
        if (t.gradient_accumulation > 1 && t.gradient_accumulation_steps > 1) {
            fail(path + ".train.gradient_accumulation_steps",
                 path +
                     ".train.gradient_accumulation and gradient_accumulation_steps cannot "
                     "both be above 1 (as in ai-toolkit); use gradient_accumulation");
        }
        resolve_choices(p, path);
    }

    // The enumerations, once, as values (the reader has checked each word against its OneOf).
    void resolve_choices(ProcessConfig& p, const std::string& path) const {
        Choices& c = p.choices;
        c.precision = precision_of(p.train.dtype, path + ".train.dtype");
        c.save_dtype = save_dtype_of(p.save.dtype, path + ".save.dtype");
        c.loss = loss_type_of(p.train.loss_type, path + ".train.loss_type");
        c.timestep_bias =
            timestep_bias_of(p.train.content_or_style, path + ".train.content_or_style");
        c.lr_scheduler = lr_scheduler_of(p.train.lr_scheduler, path + ".train.lr_scheduler");
        c.sampler = preview_sampler_of(p.sample.sampler, path + ".sample.sampler");
        c.lora_layout = lora_key_layout_of(*p.save.format, path + ".save.format");
        c.reuse_stable = reuse_stable_of(p.oom.reuse_stable, path + ".oom.reuse_stable");
    }

    // The keys whose meaning depends on the model family: SD trains with DDPM and samples with
    // its schedulers; Flux and Wan train with flow matching, sample with the flow-matching Euler
    // sampler and save their LoRA in diffusers' layout (the kohya one has no transformer names
    // in loom).
    void resolve_family_keys(ProcessConfig& p, const std::string& path) {
        const std::string scheduler = path + ".train.noise_scheduler";
        const std::string sampler = path + ".sample.sampler";
        const std::string format = path + ".save.format";
        // A flow-matching family's display name; nullptr for SD's DDPM (and the archs loom
        // does not build, which the model check has already refused or warned about).
        const char* family = nullptr;
        if (p.choices.arch && arch_info(*p.choices.arch).flow_matching) {
            family = to_string(arch_info(*p.choices.arch).family);
        }
        resolve_video_keys(p, path);
        resolve_control_keys(p, path);
        if (family == nullptr) {
            if (p.train.noise_scheduler == "flowmatch") {
                warn(DiagnosticKind::kNotSupportedYet, scheduler,
                     scheduler + " 'flowmatch' is not supported yet for '" + *p.model.arch +
                         "': loom trains SD models with the DDPM objective");
            }
            if (p.sample.sampler == "flowmatch") {
                warn(DiagnosticKind::kNotSupportedYet, sampler,
                     sampler + " 'flowmatch' is not supported yet for '" + *p.model.arch +
                         "': loom samples with ddim instead");
            }
            if (!p.save.format) p.save.format = "kohya";
            return;
        }
        if (was_given(scheduler) && p.train.noise_scheduler != "flowmatch") {
            warn(DiagnosticKind::kNote, scheduler,
                 scheduler + " '" + p.train.noise_scheduler + "' does not apply to " + family +
                     ", which trains with flow matching (flowmatch)");
        }
        p.train.noise_scheduler = "flowmatch";
        const std::string module_set = path + ".network.network_kwargs.module_set";
        if (was_given(module_set)) {
            warn(DiagnosticKind::kNote, module_set,
                 module_set + " chooses among UNet module sets and does not apply to " + family +
                     ", whose LoRA targets every Linear of the transformer blocks (ai-toolkit's "
                     "set)");
        }
        if (was_given(sampler) && p.sample.sampler != "flowmatch") {
            warn(DiagnosticKind::kNote, sampler,
                 sampler + " '" + p.sample.sampler + "' does not apply to " + family +
                     ", which samples with the flow-matching Euler sampler (flowmatch)");
        }
        static const char* const kFlowTimesteps[] = {"sigmoid",    "linear",   "shift",
                                                     "flux_shift", "weighted", "lognorm_blend"};
        const std::string timesteps = path + ".train.timestep_type";
        if (std::find(std::begin(kFlowTimesteps), std::end(kFlowTimesteps),
                      p.train.timestep_type) == std::end(kFlowTimesteps)) {
            warn(DiagnosticKind::kNotSupportedYet, timesteps,
                 timesteps + " '" + p.train.timestep_type + "' is not supported yet: loom draws " +
                     family + " timesteps with 'sigmoid' instead");
            p.train.timestep_type = "sigmoid";
        }
        const char* prefix = arch_info(*p.choices.arch).lora_prefix;
        if (p.save.format == std::string("kohya")) {
            fail(format, format + " 'kohya' is not available for " + family + ": loom saves " +
                             family + " LoRAs in the PEFT layout (" + prefix +
                             ".<module>.lora_A/lora_B) as ai-toolkit does, which diffusers and "
                             "ComfyUI load; remove the key or use 'peft'");
        }
        p.save.format = "peft";
        resolve_peft_alpha(p, path, family);
    }

    // ai-toolkit saves every transformer LoRA in the PEFT format and then trains it at
    // alpha = rank ("no alpha for peft", toolkit/lora_special.py): a LoRA scale of 1 whatever
    // linear_alpha says. loom trains what ai-toolkit trains, and says so when the job asked for
    // another alpha. SD's kohya-format LoRAs keep the job's alpha.
    void resolve_peft_alpha(ProcessConfig& p, const std::string& path, const char* family) {
        NetworkConfig& n = p.network;
        const double rank = static_cast<double>(n.linear);
        const std::string linear_alpha = path + ".network.linear_alpha";
        const std::string alpha = path + ".network.alpha";
        const std::string given = was_given(linear_alpha) ? linear_alpha
                                  : was_given(alpha)      ? alpha
                                                          : std::string();
        if (!given.empty() && n.linear_alpha.value_or(rank) != rank) {
            warn(DiagnosticKind::kNote, given,
                 given + " " + format_number(*n.linear_alpha) + " does not apply to " + family +
                     ": ai-toolkit trains transformer LoRAs in the PEFT format at alpha = rank (" +
                     format_number(rank) + "), a LoRA scale of 1, and so does loom");
        }
        if (n.linear_alpha.value_or(rank) != rank) p.choices.job_linear_alpha = n.linear_alpha;
        n.linear_alpha = rank;
        if (n.conv) n.conv_alpha = static_cast<double>(*n.conv);
    }

    // Frames. A video model's datasets may hold clips: their frame counts are 1 + 4k (what Wan's
    // VAE encodes; ai-toolkit leaves a fixed num_frames as given and its VAE cuts the clip), and
    // with auto_frame_count num_frames is the longest clip (Wan 2.1's 81 frames when left at 1).
    // An image model trains on the dataset's images, and its previews are images.
    void resolve_video_keys(ProcessConfig& p, const std::string& path) {
        const std::string& arch = *p.model.arch;
        const bool video = p.choices.arch && arch_info(*p.choices.arch).video;
        for (std::size_t i = 0; i < p.datasets.size(); ++i) {
            DatasetConfig& d = p.datasets[i];
            const std::string at = path + ".datasets." + std::to_string(i);
            if (!video) {
                if (d.is_video()) {
                    const std::string key =
                        at + (d.auto_frame_count ? ".auto_frame_count" : ".num_frames");
                    warn(DiagnosticKind::kNote, key,
                         key + " applies to video models (wan21); '" + arch +
                             "' is an image model and trains on the dataset's images");
                }
                d.num_frames = 1;
                d.auto_frame_count = false;
                continue;
            }
            if (d.auto_frame_count && d.num_frames == 1) {
                d.num_frames = kLongestAutoClip;
                warn(DiagnosticKind::kNote, at + ".auto_frame_count",
                     at + ".auto_frame_count: each clip trains on its length at " +
                         std::to_string(d.fps) + " fps, at most " +
                         std::to_string(kLongestAutoClip) +
                         " frames (Wan 2.1's clip length); set num_frames to change that limit");
            }
            const int snapped = 1 + (d.num_frames - 1) / 4 * 4;
            if (snapped != d.num_frames) {
                warn(DiagnosticKind::kNote, at + ".num_frames",
                     at + ".num_frames " + std::to_string(d.num_frames) +
                         " is not of the form 1 + 4k that Wan's VAE encodes; loom takes " +
                         std::to_string(snapped) + " frames per clip");
                d.num_frames = snapped;
            }
        }
        if (p.sample.num_frames > 1 && !video) {
            const std::string key = path + ".sample.num_frames";
            warn(DiagnosticKind::kNote, key,
                 key + " " + std::to_string(p.sample.num_frames) + " does not apply to '" + arch +
                     "', an image model: its previews are images");
        }
    }

    // Control images: an arch that edits a source image (Kontext) or conditions on one (Flex.2)
    // takes them; on any other a dataset's pairs would be left out of training without a word,
    // so they are refused, and a preview's control image is said to be unused. Flex.2's control
    // dropout and a guidance bypass on a model without the guidance embedding are said not to
    // apply.
    void resolve_control_keys(ProcessConfig& p, const std::string& path) {
        // An arch loom cannot train yet is already warned; its pairs are not refused here.
        if (!p.choices.arch) return;
        const std::string& arch = *p.model.arch;
        const bool takes_controls = arch_info(*p.choices.arch).control_images;
        ModelKwargs& kwargs = p.model.model_kwargs;
        for (auto [name, value] :
             {std::pair{"control_dropout", &kwargs.control_dropout},
              std::pair{"inpaint_dropout", &kwargs.inpaint_dropout},
              std::pair{"invert_inpaint_mask_chance", &kwargs.invert_inpaint_mask_chance}}) {
            if (*value > 0 && *p.choices.arch != Arch::kFlex2) {
                const std::string key = path + ".model.model_kwargs." + name;
                warn(DiagnosticKind::kNote, key,
                     key + " is Flex.2's (arch flex2); '" + arch + "' does not use it");
                *value = 0;
            }
        }
        for (std::size_t i = 0; i < p.datasets.size(); ++i) {
            const std::string key = path + ".datasets." + std::to_string(i) + ".inpaint_path";
            if (p.datasets[i].has_inpaint() && *p.choices.arch != Arch::kFlex2) {
                fail(key, key + " pairs inpaint images, which only flex2 trains on; '" + arch +
                              "' would leave them out: set model.arch: flex2 for a Flex.2 "
                              "model, or remove inpaint_path");
            }
            if (p.datasets[i].inpaint_path.size() > 1) {
                fail(key, key + " lists " + std::to_string(p.datasets[i].inpaint_path.size()) +
                              " folders; an inpaint image per training image pairs from one: "
                              "keep one");
            }
        }
        if (p.train.bypass_guidance_embedding &&
            arch_info(*p.choices.arch).guidance != GuidanceKind::kDistilledEmbedding) {
            const std::string key = path + ".train.bypass_guidance_embedding";
            warn(DiagnosticKind::kNote, key,
                 key + " does not apply to '" + arch + "': it has no guidance embedding");
            p.train.bypass_guidance_embedding = false;
        }
        const int max_controls = arch_info(*p.choices.arch).max_control_images;
        for (std::size_t i = 0; i < p.datasets.size(); ++i) {
            const std::string key = path + ".datasets." + std::to_string(i) + ".control_path";
            const std::size_t folders = p.datasets[i].control_path.size();
            if (folders > 0 && !takes_controls) {
                fail(key, key +
                              " pairs control images, which only flux_kontext, flex2, "
                              "qwen_image_edit and qwen_image_edit_plus train on; '" +
                              arch +
                              "' would leave them out: set model.arch to the edit model's arch "
                              "(flux_kontext for a Kontext model), or remove control_path");
            }
            if (takes_controls && folders > static_cast<std::size_t>(max_controls)) {
                fail(key, key + " lists " + std::to_string(folders) + " folders; '" + arch +
                              (max_controls == 1
                                   ? "' edits from one control image per training image: keep one"
                                   : "' takes up to " + std::to_string(max_controls) +
                                         " control images per training image: keep " +
                                         std::to_string(max_controls) + " or fewer"));
            }
        }
        for (std::size_t i = 0; i < p.sample.samples.size(); ++i) {
            config::SampleItem& item = p.sample.samples[i];
            const std::string key = path + ".sample.samples." + std::to_string(i);
            const std::size_t images = item.control_images().size();
            if (images == 0) continue;
            if (!takes_controls) {
                warn(DiagnosticKind::kNote, key + ".ctrl_img",
                     key + ".ctrl_img is not used: '" + arch + "' previews take no control image");
                item.ctrl_img.reset();
                item.ctrl_img_1.reset();
                item.ctrl_img_2.reset();
                item.ctrl_img_3.reset();
            } else if (images > static_cast<std::size_t>(max_controls)) {
                warn(DiagnosticKind::kNote, key + ".ctrl_img_2",
                     key + ": '" + arch + "' previews edit one control image; ctrl_img_2 and " +
                         "ctrl_img_3 are not used");
                item.ctrl_img_2.reset();
                item.ctrl_img_3.reset();
            }
        }
    }

    void check_device(const std::string& device, const std::string& path) const {
        if (device == "cpu" || device == "sim" || device == "cuda") return;
        if (device.rfind("cuda:", 0) == 0 && device.size() > 5) {
            bool digits = true;
            for (std::size_t i = 5; i < device.size(); ++i) {
                digits = digits && std::isdigit(static_cast<unsigned char>(device[i]));
            }
            if (digits) return;
        }
        fail(path, path + " must be cpu, sim, cuda or cuda:N, got '" + device + "'");
    }

    void resolve_model(ProcessConfig& p, const std::string& path) {
        ModelConfig& m = p.model;
        // Legacy flags in ai-toolkit's order (config_modules.py ModelConfig).
        const std::pair<bool, const char*> flags[] = {
            {m.is_v2, "sd2"},
            {m.is_v3, "sd3"},
            {m.is_xl, "sdxl"},
            {m.is_flux, "flux"},
            {m.is_pixart, "pixart"},
            {m.is_pixart_sigma, "pixart_sigma"},
            {m.is_auraflow, "auraflow"},
            {m.is_lumina2, "lumina2"},
            {m.is_ssd, "ssd"},
            {m.is_vega, "vega"},
        };
        std::string flagged;
        for (const auto& [set, arch] : flags) {
            if (set && flagged.empty()) flagged = arch;
        }
        if (m.arch) {
            std::string arch = *m.arch;
            if (const std::size_t colon = arch.find(':'); colon != std::string::npos) {
                arch.resize(colon);  // "name:tag" is accepted and the tag stripped
            }
            if (!is_ai_toolkit_arch(arch)) {
                fail(path + ".arch", path + ".arch '" + *m.arch +
                                         "' is not an ai-toolkit architecture (loom trains " +
                                         trainable_arch_list() + ")");
            }
            if (!flagged.empty() && flagged != arch) {
                warn(DiagnosticKind::kNote, path + ".arch",
                     path + ".arch is '" + arch + "' but a legacy flag says '" + flagged +
                         "'; the arch key wins");
            }
            m.arch = arch;
        } else {
            m.arch = flagged.empty() ? "sd1" : flagged;
        }
        p.choices.arch = find_arch(*m.arch);
        if (!p.choices.arch || !arch_info(*p.choices.arch).trainable) {
            warn(DiagnosticKind::kNotTrainable, path + ".arch",
                 path + ".arch '" + *m.arch +
                     "' is an ai-toolkit architecture that loom cannot train yet (loom trains " +
                     trainable_arch_list() + ")",
                 was_given(path + ".arch") ? path + ".arch" : path);
        }

        // ai-toolkit overwrites model.dtype with train.dtype.
        if (was_given(path + ".dtype") && m.dtype != p.train.dtype) {
            warn(DiagnosticKind::kNote, path + ".dtype",
                 path + ".dtype '" + m.dtype + "' is replaced by train.dtype '" + p.train.dtype +
                     "', as ai-toolkit does");
        }
        m.dtype = p.train.dtype;
        if (!m.quantize_te) m.quantize_te = m.quantize;
        // A qtype loom does not have (or an accuracy-recovery adapter) is said where it is written.
        for (const auto& [key, word] :
             {std::pair<const char*, const std::string&>{"qtype", m.qtype},
              {"qtype_te", m.qtype_te}}) {
            const QTypeChoice choice = choose_qtype(word);
            if (!choice.note.empty()) {
                warn(DiagnosticKind::kNotSupportedYet, path + "." + key,
                     path + "." + key + ": " + choice.note);
            }
        }
    }

    // Wan 2.2 14B's experts: at least one trains (ai-toolkit raises the same ValueError). The
    // keys mean nothing to a model of one denoiser, which is said where they are written.
    void resolve_experts(ProcessConfig& p, const std::string& path) {
        const std::string kwargs = path + ".model.model_kwargs";
        const bool experts = p.choices.arch && *p.choices.arch == Arch::kWan22_14b;
        if (experts) {
            if (!p.model.model_kwargs.train_high_noise && !p.model.model_kwargs.train_low_noise) {
                fail(kwargs, kwargs +
                                 ": train_high_noise and train_low_noise are both false; at "
                                 "least one of Wan 2.2's experts must train");
            }
            return;
        }
        // Said only when set away from the default: an emitted job writes every key.
        const ModelKwargs& k = p.model.model_kwargs;
        for (const auto& [key, on] :
             {std::pair<const char*, bool>{"train_high_noise", k.train_high_noise},
              {"train_low_noise", k.train_low_noise}}) {
            if (!on) {
                warn(DiagnosticKind::kNote, kwargs + "." + key,
                     kwargs + "." + key + " chooses among Wan 2.2's experts and does not apply " +
                         "to '" + *p.model.arch + "'");
            }
        }
        const std::string every = path + ".train.switch_boundary_every";
        if (p.train.switch_boundary_every != 1) {
            warn(DiagnosticKind::kNote, every,
                 every + " alternates Wan 2.2's experts and does not apply to '" + *p.model.arch +
                     "'");
        }
    }

    ReadResult& r_;
};

}  // namespace

void resolve_job(ReadResult& result) {
    Resolver(result).run();
}

}  // namespace loom::config::detail
