// loom sample --model DIR [--lora FILE] --prompt TEXT ...: images from a model, optionally with
// a LoRA (kohya or PEFT layout; a Flux LoRA in ai-toolkit's PEFT layout), written as PNGs. SD 1.x
// and SDXL folders sample with DDIM or Euler and classifier-free guidance, FluxPipeline folders as
// the Flux pipeline does (flow-matching Euler, the distilled guidance, no negative prompt).

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
#include "loom/device/device.h"
#include "loom/lora/lora_file.h"
#include "loom/model/flux_model.h"
#include "loom/model/flux_preview_sampler.h"
#include "loom/model/model_location.h"
#include "loom/model/preview_sampler.h"
#include "loom/model/single_file.h"
#include "loom/model/wan_preview_sampler.h"
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
        "out", "Output folder", cxxopts::value<std::string>()->default_value("samples"), "DIR");
    return options;
}

// Every parameter of `modules` moved to the device.
void to_device(const std::vector<torch::nn::Module*>& modules, const Device& device) {
    torch::NoGradGuard no_grad;
    for (torch::nn::Module* m : modules) {
        for (auto& p : m->parameters()) p.set_data(device.to_device(p.data()));
    }
}

std::vector<at::Tensor> sample_sd(const std::filesystem::path& model_dir,
                                  const cxxopts::ParseResult& parsed,
                                  const std::vector<PreviewRequest>& requests,
                                  const Device& device) {
    StableDiffusion model = load_stable_diffusion(model_dir);
    to_device({model.unet.get(), model.vae.get(), model.text_encoder.get()}, device);
    std::optional<LoRANetwork> lora;
    if (parsed.count("lora")) {
        lora.emplace(load_lora_network(*model.unet, parsed["lora"].as<std::string>()));
        lora->set_multiplier(parsed["lora-scale"].as<double>());
    }
    PreviewOptions po;
    po.sampler = config::preview_sampler_of(parsed["sampler"].as<std::string>(), "--sampler");
    return generate_previews(model, requests, po, device.torch_device());
}

std::vector<at::Tensor> sample_flux(const std::filesystem::path& model_dir,
                                    const cxxopts::ParseResult& parsed,
                                    const std::vector<PreviewRequest>& requests,
                                    const Device& device) {
    if (parsed.count("sampler")) {
        throw UsageError(
            "loom sample: --sampler does not apply to Flux, which samples with the "
            "flow-matching Euler sampler");
    }
    const long long tokens = parsed["max-sequence-length"].as<long long>();
    if (tokens < 1) throw UsageError("loom sample: --max-sequence-length must be at least 1");
    if (!parsed["neg"].as<std::string>().empty()) {
        logger("sample").warn(
            "Flux.1 has no negative prompt (no classifier-free pass); --neg is "
            "not used");
    }
    FluxModel model = load_flux(model_dir);
    to_device({model.transformer.get(), model.vae.get(), model.text_encoder.get(),
               model.text_encoder_2.get()},
              device);
    std::optional<LoRANetwork> lora;
    if (parsed.count("lora")) {
        lora.emplace(load_lora_network(*model.transformer, parsed["lora"].as<std::string>(),
                                       LoRAModel::kFluxTransformer));
        lora->set_multiplier(parsed["lora-scale"].as<double>());
    }
    return generate_flux_previews(model, requests, PreviewOptions{}, device.torch_device(),
                                  static_cast<std::size_t>(tokens));
}

// Wan 2.1: the flow-matching Euler sampler with classifier-free guidance (--neg is the negative
// prompt); each image is a one-frame clip.
std::vector<at::Tensor> sample_wan(const std::filesystem::path& model_dir,
                                   const cxxopts::ParseResult& parsed,
                                   const std::vector<PreviewRequest>& requests,
                                   const Device& device) {
    if (parsed.count("sampler")) {
        throw UsageError(
            "loom sample: --sampler does not apply to Wan, which samples with the "
            "flow-matching Euler sampler");
    }
    const long long tokens = parsed["max-sequence-length"].as<long long>();
    if (tokens < 1) throw UsageError("loom sample: --max-sequence-length must be at least 1");
    WanModel model = load_wan(model_dir);
    to_device({model.transformer.get(), model.vae.get(), model.text_encoder.get()}, device);
    std::optional<LoRANetwork> lora;
    if (parsed.count("lora")) {
        lora.emplace(load_lora_network(*model.transformer, parsed["lora"].as<std::string>(),
                                       LoRAModel::kWanTransformer));
        lora->set_multiplier(parsed["lora-scale"].as<double>());
    }
    return generate_wan_previews(model, requests, PreviewOptions{}, device.torch_device(),
                                 static_cast<std::size_t>(tokens));
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
    const bool folder = !is_single_file_checkpoint(model_dir);
    const bool flux = folder && is_flux_pipeline(read_diffusers_folder(model_dir));
    const bool wan = folder && is_wan_pipeline(read_diffusers_folder(model_dir));
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
        r.guidance_scale = parsed.count("guidance") ? parsed["guidance"].as<double>()
                                                    : (flux  ? 3.5
                                                       : wan ? 5.0
                                                             : 7.0);  // the pipelines' defaults
        if (r.steps < 1 || r.width < 8 || r.height < 8) {
            throw UsageError(
                "loom sample: --steps must be at least 1 and --width/--height at "
                "least 8");
        }
        requests.push_back(r);
    }
    const std::vector<at::Tensor> images = flux  ? sample_flux(model_dir, parsed, requests, *device)
                                           : wan ? sample_wan(model_dir, parsed, requests, *device)
                                                 : sample_sd(model_dir, parsed, requests, *device);
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
