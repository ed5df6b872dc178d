#pragma once

// A model in diffusers folder layout (formats.md §2, DESIGN.md "Interoperability"):
// model_index.json names the pipeline class and its components, one folder each. A component's
// config.json is read by its model (read_unet_config in sd/unet_2d_condition.h, read_flux_config
// in flux/flux_transformer.h, ...), its weights by loading/weight_files.h.

#include <filesystem>
#include <string>
#include <vector>

namespace loom {

struct DiffusersComponent {
    std::string name;        // "unet", "text_encoder_2", ...
    std::string library;     // "diffusers", "transformers"
    std::string class_name;  // "UNet2DConditionModel", ...
};

struct DiffusersFolder {
    std::filesystem::path root;
    std::string pipeline_class;  // "StableDiffusionPipeline", "StableDiffusionXLPipeline"
    std::vector<DiffusersComponent> components;

    bool has(const std::string& component) const;
    std::filesystem::path dir(const std::string& component) const { return root / component; }
    // Every one of `components` listed in model_index.json and present as a folder, before
    // anything is loaded: FormatError naming model_index.json and the component when it is not
    // listed, IoError naming the folder when it is missing.
    void require(const std::vector<std::string>& components) const;
    // FormatError naming model_index.json when the pipeline class is not `pipeline_class`.
    void require_pipeline(const std::string& pipeline_class) const;
};

// Reads and checks model_index.json. Throws IoError / FormatError naming the file.
DiffusersFolder read_diffusers_folder(const std::filesystem::path& root);

}  // namespace loom
