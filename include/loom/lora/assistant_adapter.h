#pragma once

// ai-toolkit's assistant adapter (model.assistant_lora_path): a LoRA merged into the frozen base
// before training and quantization, so that training sees the merged model, and taken out again
// for previews by running it at multiplier -1 beside the trained LoRA — Z-Image Turbo's and
// FLUX.1-schnell's training adapters, which undo the distillation while a LoRA trains and must not
// show in what the LoRA does. The trained LoRA and its file never contain it.
//
// ref: ai-toolkit extensions_built_in/diffusion_models/z_image/z_image.py::load_training_adapter
//      (merge_in, then multiplier -1 "so the adapter effects only work during training")

#include <torch/nn/module.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "loom/lora/lora_network.h"

namespace loom {

// Where `assistant_lora_path` lies on this machine: a .safetensors file as given; a folder (or a
// hub id found in the local hub cache, as ai-toolkit's "ostris/FLUX.1-schnell-training-adapter")
// holding exactly one .safetensors file; or "<org>/<name>/<file>" in the hub cache, as
// ai-toolkit's UI writes it. IoError naming the path and what to do otherwise.
std::filesystem::path locate_assistant_lora(const std::string& assistant_lora_path);

class AssistantAdapter {
  public:
    // Loads the LoRA file at `path` onto `denoiser` (in `model`'s layout, lora_file.h) and merges
    // it into the base weights. FormatError naming the file when it does not fit the denoiser.
    AssistantAdapter(torch::nn::Module& denoiser, const std::filesystem::path& path,
                     const LoRAModel& model);

    const std::filesystem::path& path() const { return path_; }
    std::size_t modules() const { return network_.targets().size(); }

    // While it lives, the assistant's change is removed from the model's outputs: each of its
    // layers adds the assistant at multiplier -1 (on `device`) beside whatever adapter it has.
    // Restores the layers' own adapters when it ends, OOM or not. A null assistant: nothing.
    class Removed {
      public:
        Removed(AssistantAdapter* assistant, const at::Device& device);
        ~Removed();
        Removed(const Removed&) = delete;
        Removed& operator=(const Removed&) = delete;

      private:
        AssistantAdapter* assistant_;
        std::vector<std::shared_ptr<LayerAdapter>> saved_;
    };

  private:
    std::filesystem::path path_;
    LoRANetwork network_;
};

}  // namespace loom
