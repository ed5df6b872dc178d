// loom sample --model DIR [--lora FILE] --prompt TEXT ...: images from a model, optionally with
// a LoRA (kohya or PEFT layout; a transformer's in ai-toolkit's PEFT layout), written as PNGs.
// Any family loom loads samples through the seam (model/family.h) as its pipeline does: SD 1.x
// and SDXL with DDIM or Euler and classifier-free guidance, Flux with flow-matching Euler and the
// distilled guidance (no negative prompt), Wan with flow-matching Euler and classifier-free
// guidance (each image a one-frame clip); Flux Kontext edits --control's image.

#include <ATen/ATen.h>

#include <cstring>
#include <iostream>

#include "command.h"
#include "loom/config/choices.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/core/logging.h"
#include "loom/data/image.h"
#include "loom/data/image_tensor.h"
#include "loom/device/device.h"
#include "loom/device/host_memory.h"
#include "loom/lora/lora_file.h"
#include "loom/model/family.h"
#include "loom/model/loading/model_location.h"
#include "options.h"

namespace loom::cli {

namespace {

cxxopts::Options sample_options() {
    cxxopts::Options options("loom sample",
                             "Generate images from a diffusers model folder, optionally with a "
                             "LoRA applied, and write them as PNG files.");
    options.add_options()("model", "Diffusers model folder (required)",
                          cxxopts::value<std::string>(), "DIR")(
        "lora", "LoRA file, kohya or PEFT layout (default: none)", cxxopts::value<std::string>(),
        "FILE")("lora-scale", "LoRA multiplier", cxxopts::value<double>()->default_value("1.0"),
                "X")("prompt", "Prompt; repeat for several images (required)",
                     cxxopts::value<std::vector<std::string>>(), "TEXT")(
        "neg", "Negative prompt", cxxopts::value<std::string>()->default_value(""), "TEXT")(
        "seed", "Seed of the first image (the next ones add 1)",
        cxxopts::value<long long>()->default_value("0"),
        "N")("steps", "Sampling steps", cxxopts::value<long long>()->default_value("20"), "N")(
        "width", "Width in pixels", cxxopts::value<long long>()->default_value("512"), "PX")(
        "height", "Height in pixels", cxxopts::value<long long>()->default_value("512"), "PX")(
        "guidance",
        "Guidance scale: classifier-free (SD, default 7; Wan, default 5) or Flux dev's "
        "distilled one (default 3.5)",
        cxxopts::value<double>(), "X")("sampler", "ddim or euler (SD only)",
                                       cxxopts::value<std::string>()->default_value("ddim"),
                                       "NAME")(
        "max-sequence-length", "Flux and Wan: T5 / UMT5 tokens per prompt (the pipelines' 512)",
        cxxopts::value<long long>()->default_value("512"), "N")(
        "device", "cuda, cuda:N, cpu or sim", cxxopts::value<std::string>()->default_value("cpu"),
        "DEVICE")("vram", "Memory cap (the sim budget; default: none)",
                  cxxopts::value<std::string>(), "SIZE")(
        "out", "Output folder", cxxopts::value<std::string>()->default_value("samples"), "DIR")(
        "control",
        "Kontext, Qwen-Image-Edit: the image to edit (every prompt edits it; Kontext fits it to "
        "--width x --height). Edit-2509 takes up to 3: repeat the flag",
        cxxopts::value<std::vector<std::string>>(), "IMAGE");
    return options;
}

// Every parameter of `modules` moved to the device.
void to_device(const std::vector<torch::nn::Module*>& modules, const Device& device) {
    torch::NoGradGuard no_grad;
    for (torch::nn::Module* m : modules) {
        for (auto& p : m->parameters()) p.set_data(device.to_device(p.data()));
    }
}

// The options the family's sampler takes from the command line; a flag that does not apply to
// the arch is a UsageError (or, for --neg without a classifier-free pass, a warning).
PreviewOptions preview_options(const cxxopts::ParseResult& parsed, const config::ArchInfo& arch) {
    PreviewOptions po;
    if (arch.flow_matching) {
        if (parsed.count("sampler")) {
            throw UsageError(std::string("loom sample: --sampler does not apply to ") +
                             arch.display_name +
                             ", which samples with the flow-matching Euler sampler");
        }
    } else {
        po.sampler = config::preview_sampler_of(parsed["sampler"].as<std::string>(), "--sampler");
    }
    const long long tokens = parsed["max-sequence-length"].as<long long>();
    if (tokens < 1) throw UsageError("loom sample: --max-sequence-length must be at least 1");
    po.max_sequence_length = static_cast<std::size_t>(tokens);
    if (arch.guidance == config::GuidanceKind::kDistilledEmbedding &&
        !parsed["neg"].as<std::string>().empty()) {
        logger("sample").warn(
            "{} has no negative prompt (no classifier-free pass); --neg is not used",
            arch.display_name);
    }
    return po;
}

// --control's image: fitted to a request's size (scale and centre crop, as training fits a
// dataset's control image), [3, height, width] in [-1, 1]; or, for an arch that resizes it
// itself (`raw`: Qwen-Image-Edit), as the file is, uint8 [H, W, 3].
at::Tensor control_image(const std::string& path, int64_t width, int64_t height, bool raw) {
    try {
        if (raw) return data::rgb8_tensor(data::read_image(path));
        return data::read_fitted_image(path, {static_cast<int>(width), static_cast<int>(height)});
    } catch (const Error& e) {
        throw UsageError("loom sample: --control " + path + " cannot be used (" + e.what() +
                         "); give a readable PNG, JPEG or WebP");
    }
}

int run_sample(const std::vector<std::string>& args) {
    cxxopts::Options options = sample_options();
    const cxxopts::ParseResult parsed = parse_options(options, "sample", args);
    if (!parsed.count("model") || !parsed.count("prompt")) {
        throw UsageError("loom sample: --model and --prompt are required (see `loom help sample`)");
    }
    std::optional<std::uint64_t> vram;
    if (parsed.count("vram")) vram = parse_byte_size(parsed["vram"].as<std::string>());
    auto device = open_device(parse_device_spec(parsed["device"].as<std::string>()), vram);
    const std::filesystem::path model_dir = locate_model(parsed["model"].as<std::string>());
    // The flags are checked against the arch before any weight is read.
    const config::ArchInfo& arch = config::arch_info(detect_model_arch(model_dir));
    const PreviewOptions po = preview_options(parsed, arch);
    const std::vector<std::string> controls = parsed.count("control")
                                                  ? parsed["control"].as<std::vector<std::string>>()
                                                  : std::vector<std::string>{};
    if (!controls.empty() && !arch.control_images) {
        throw UsageError(std::string("loom sample: --control does not apply to ") +
                         arch.display_name + ", which takes no control image (Kontext does)");
    }
    if (controls.size() > static_cast<std::size_t>(arch.max_control_images)) {
        throw UsageError("loom sample: " + std::string(arch.display_name) + " takes " +
                         std::to_string(arch.max_control_images) + " --control image" +
                         (arch.max_control_images == 1 ? "" : "s at most") + "; " +
                         std::to_string(controls.size()) + " given");
    }
    if (controls.empty() && arch.controls_in_prompt) {
        throw UsageError("loom sample: " + std::string(arch.display_name) +
                         " edits an image: give it with --control IMAGE");
    }
    std::vector<PreviewRequest> requests;
    const auto prompts = parsed["prompt"].as<std::vector<std::string>>();
    for (std::size_t i = 0; i < prompts.size(); ++i) {
        PreviewRequest r;
        r.prompt = prompts[i];
        r.negative = parsed["neg"].as<std::string>();
        r.seed = parsed["seed"].as<long long>() + static_cast<long long>(i);
        r.steps = parsed["steps"].as<long long>();
        r.width = parsed["width"].as<long long>();
        r.height = parsed["height"].as<long long>();
        r.guidance_scale =
            parsed.count("guidance") ? parsed["guidance"].as<double>() : arch.sample_guidance;
        if (r.steps < 1 || r.width < 8 || r.height < 8) {
            throw UsageError(
                "loom sample: --steps must be at least 1 and --width/--height at "
                "least 8");
        }
        for (const std::string& path : controls) {
            if (arch.controls_in_prompt)
                r.control_images.push_back(control_image(path, r.width, r.height, true));
            else
                r.control = control_image(path, r.width, r.height, false);
        }
        requests.push_back(r);
    }
    // Weights are read into host memory, then moved whole to the device.
    std::unique_ptr<ModelFamily> model;
    {
        HostAllocations host;
        model = load_model_family(model_dir);
    }
    std::vector<torch::nn::Module*> modules = model->encoders();
    modules.push_back(&model->denoiser());
    to_device(modules, *device);
    std::optional<LoRANetwork> lora;
    if (parsed.count("lora")) {
        lora.emplace(load_lora_network(model->denoiser(), parsed["lora"].as<std::string>(),
                                       lora_model_of(model->arch())));
        lora->set_multiplier(parsed["lora-scale"].as<double>());
    }
    const std::vector<at::Tensor> images = model->sample(requests, po, device->torch_device());
    const std::filesystem::path out = parsed["out"].as<std::string>();
    std::filesystem::create_directories(out);
    for (std::size_t i = 0; i < images.size(); ++i) {
        data::Image img(static_cast<int>(images[i].size(1)), static_cast<int>(images[i].size(0)));
        std::memcpy(img.pixels.data(), images[i].data_ptr(), img.pixels.size());
        const auto file = out / ("sample_" + std::to_string(requests[i].seed) + ".png");
        data::write_png(file, img);
        std::cout << file.string() << "\n";
    }
    return to_int(ExitCode::kOk);
}

}  // namespace

Command make_sample_command() {
    return {"sample", "Generate images from a model, optionally with a LoRA",
            [] { return sample_options().help(); }, run_sample};
}

}  // namespace loom::cli
