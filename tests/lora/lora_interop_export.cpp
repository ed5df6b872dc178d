// loom side of tests/parity/check_lora_interop.py: attaches seeded random LoRAs to a parity
// model's UNet (or Flux transformer), saves them in both file layouts (Flux: PEFT only), and
// writes the denoiser's output with them applied, so the check can load the files into diffusers
// the way users do and compare the numbers.
//
//   lora_interop_export MODEL_DIR CASE_INPUTS OUT_DIR
//
// CASE_INPUTS holds sample, timestep, encoder_hidden_states (+ text_embeds, time_ids for SDXL);
// for a FluxPipeline folder, the transformer case (hidden_states, ..., guidance), and only the
// `linear` variant is written (Flux LoRAs target Linear layers only).
// For each variant (`linear`: ai-toolkit's module set, every Linear and 1x1 conv of the UNet, at
// rank 4, alpha 2; `conv`: the same plus every 3x3 convolution at rank 2, alpha 1; `kohya_conv`:
// kohya's set in conv mode, the transformers plus everything inside the resnets and samplers) it
// writes to OUT_DIR
//   <variant>.kohya.safetensors  <variant>.peft.safetensors  (float32)
//   <variant>.output.safetensors (tensor "sample": the UNet output with the LoRA applied)
// and prints "<variant>: N modules (L linear, C conv 3x3)".

#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/lora/lora_file.h"
#include "loom/lora/lora_network.h"
#include "loom/model/flux/flux_model.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/model/sd/stable_diffusion.h"

namespace {

struct Variant {
    const char* name;
    std::optional<loom::LoRAOptions> conv;
    loom::UNetModuleSet set = loom::UNetModuleSet::kAiToolkit;
};

at::Tensor input(const loom::NamedTensors& inputs, const std::string& name, bool needed) {
    for (const auto& [n, t] : inputs) {
        if (n == name) return t;
    }
    if (needed) throw loom::Error("the case inputs have no tensor '" + name + "'");
    return {};
}

// Non-zero values in both factors (a fresh LoRA has up = 0, which would hide a wrong scale or a
// transposed factor). Down is scaled by 1/sqrt(fan_in) so every layer's change stays moderate.
void fill_random(const loom::LoRANetwork& network, uint64_t seed) {
    torch::NoGradGuard no_grad;
    torch::manual_seed(seed);
    for (const loom::LoRATarget& t : network.targets()) {
        loom::LoRAAdapter& a = *t.adapter;
        const double fan_in = static_cast<double>(a.down[0].numel());
        a.down.copy_(torch::randn(a.down.sizes()) / std::sqrt(fan_in));
        a.up.copy_(torch::randn(a.up.sizes()) * 0.2);
    }
}

// The Flux variant: every Linear of the transformer blocks at rank 4, alpha 2, PEFT layout.
int export_flux(const loom::DiffusersFolder& folder, const loom::NamedTensors& inputs,
                const std::filesystem::path& out_dir) {
    loom::FluxTransformer2DModel transformer = loom::load_flux_transformer(folder);
    loom::LoRANetworkOptions options;
    options.linear.rank = 4;
    options.linear.alpha = 2.0;
    options.rules.model = loom::lora_model_of(loom::config::Arch::kFlux);
    loom::LoRANetwork network = loom::LoRANetwork::inject(*transformer, options);
    fill_random(network, 99);
    const std::string stem = (out_dir / "linear").string();
    loom::save_lora(network, stem + ".peft.safetensors", loom::LoRAFileLayout::kPeft, at::kFloat,
                    {});
    torch::NoGradGuard no_grad;
    const loom::FluxInputs in{input(inputs, "hidden_states", true),
                              input(inputs, "encoder_hidden_states", true),
                              input(inputs, "pooled_projections", true),
                              input(inputs, "timestep", true),
                              input(inputs, "img_ids", true),
                              input(inputs, "txt_ids", true),
                              input(inputs, "guidance", false)};
    loom::write_tensors(stem + ".output.safetensors", {{"sample", transformer->forward(in)}});
    std::cout << "linear: " << network.targets().size() << " modules (Flux transformer blocks)"
              << std::endl;
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::cerr << "usage: lora_interop_export MODEL_DIR CASE_INPUTS OUT_DIR\n";
        return 2;
    }
    try {
        const std::filesystem::path out_dir = argv[3];
        std::filesystem::create_directories(out_dir);
        const loom::DiffusersFolder folder = loom::read_diffusers_folder(argv[1]);
        const loom::NamedTensors inputs = loom::read_all_tensors(argv[2]);
        if (loom::is_flux_pipeline(folder)) return export_flux(folder, inputs, out_dir);
        loom::UNet2DConditionModel unet = loom::load_unet(folder);

        loom::LoRAOptions linear;
        linear.rank = 4;
        linear.alpha = 2.0;  // alpha != rank: the file must carry the 0.5 scale
        loom::LoRAOptions conv;
        conv.rank = 2;
        conv.alpha = 1.0;
        const std::vector<Variant> variants = {{"linear", std::nullopt},
                                               {"conv", conv},
                                               {"kohya_conv", conv, loom::UNetModuleSet::kKohya}};

        uint64_t seed = 1234;
        for (const Variant& v : variants) {
            loom::LoRANetworkOptions options;
            options.linear = linear;
            options.conv = v.conv;
            options.rules.unet_set = v.set;
            // Detaches its adapters from the UNet when it goes out of scope.
            loom::LoRANetwork network = loom::LoRANetwork::inject(*unet, options);
            fill_random(network, seed++);

            const loom::SafetensorsMetadata metadata = {
                {"ss_network_module", "networks.lora"},
                {"ss_network_dim", std::to_string(linear.rank)},
                {"ss_network_alpha", std::to_string(linear.alpha)},
            };
            const std::string stem = (out_dir / v.name).string();
            loom::save_lora(network, stem + ".kohya.safetensors", loom::LoRAFileLayout::kKohya,
                            at::kFloat, metadata);
            loom::save_lora(network, stem + ".peft.safetensors", loom::LoRAFileLayout::kPeft,
                            at::kFloat, metadata);

            torch::NoGradGuard no_grad;
            const at::Tensor sample = unet->forward(
                input(inputs, "sample", true), input(inputs, "timestep", true),
                input(inputs, "encoder_hidden_states", true), input(inputs, "text_embeds", false),
                input(inputs, "time_ids", false));
            loom::write_tensors(stem + ".output.safetensors", {{"sample", sample}});

            std::size_t convs = 0;
            for (const loom::LoRATarget& t : network.targets()) {
                convs += t.adapter->is_conv() && t.adapter->down.size(2) > 1;
            }
            std::cout << v.name << ": " << network.targets().size() << " modules ("
                      << network.targets().size() - convs << " linear, " << convs << " conv 3x3)"
                      << std::endl;
        }
    } catch (const std::exception& e) {
        std::cerr << "lora_interop_export: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
