// loom sample --model DIR [--lora FILE] --prompt TEXT ...: images from a model, optionally with
// a LoRA (kohya or PEFT layout), written as PNGs.

#include <ATen/ATen.h>

#include <cstring>
#include <iostream>

#include "command.h"
#include "loom/config/choices.h"
#include "loom/core/byte_size.h"
#include "loom/core/error.h"
#include "loom/core/exit_codes.h"
#include "loom/data/image.h"
#include "loom/device/device.h"
#include "loom/lora/lora_file.h"
#include "loom/train/preview_sampler.h"
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
        "guidance", "Classifier-free guidance scale",
        cxxopts::value<double>()->default_value("7.0"), "X")(
        "sampler", "ddim or euler", cxxopts::value<std::string>()->default_value("ddim"), "NAME")(
        "device", "cuda, cuda:N, cpu or sim", cxxopts::value<std::string>()->default_value("cpu"),
        "DEVICE")("vram", "Memory cap (the sim budget; default: none)",
                  cxxopts::value<std::string>(), "SIZE")(
        "out", "Output folder", cxxopts::value<std::string>()->default_value("samples"), "DIR");
    return options;
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
    StableDiffusion model = load_stable_diffusion(parsed["model"].as<std::string>());
    {
        torch::NoGradGuard no_grad;
        for (torch::nn::Module* m : {static_cast<torch::nn::Module*>(model.unet.get()),
                                     static_cast<torch::nn::Module*>(model.vae.get()),
                                     static_cast<torch::nn::Module*>(model.text_encoder.get())}) {
            for (auto& p : m->parameters()) p.set_data(device->to_device(p.data()));
        }
    }
    std::optional<LoRANetwork> lora;
    if (parsed.count("lora")) {
        lora.emplace(load_lora_network(*model.unet, parsed["lora"].as<std::string>()));
        lora->set_multiplier(parsed["lora-scale"].as<double>());
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
        r.guidance_scale = parsed["guidance"].as<double>();
        requests.push_back(r);
    }
    PreviewOptions po;
    po.sampler = config::preview_sampler_of(parsed["sampler"].as<std::string>(), "--sampler");
    const auto images = generate_previews(model, requests, po, device->torch_device());
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
