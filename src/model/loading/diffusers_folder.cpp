#include "loom/model/loading/diffusers_folder.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "loading/config_reader.h"
#include "loom/core/error.h"

namespace loom {

namespace fs = std::filesystem;
using nlohmann::json;

bool DiffusersFolder::has(const std::string& component) const {
    return std::any_of(components.begin(), components.end(),
                       [&](const DiffusersComponent& c) { return c.name == component; });
}

DiffusersFolder read_diffusers_folder(const fs::path& root) {
    std::error_code ec;
    if (!fs::is_directory(root, ec)) {
        throw IoError(root.string(),
                      "is not a folder; give a diffusers model folder (with "
                      "model_index.json)");
    }
    const fs::path index = root / "model_index.json";
    const json j = read_json(index);
    DiffusersFolder folder;
    folder.root = root;
    if (!j.contains("_class_name") || !j["_class_name"].is_string()) {
        throw FormatError(index.string(), "'_class_name' (the pipeline class) is missing");
    }
    folder.pipeline_class = j["_class_name"].get<std::string>();
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (it.key().empty() || it.key()[0] == '_') continue;
        const json& v = it.value();
        if (v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string()) {
            folder.components.push_back(
                {it.key(), v[0].get<std::string>(), v[1].get<std::string>()});
        }
    }
    return folder;
}

void DiffusersFolder::require(const std::vector<std::string>& needed) const {
    for (const std::string& component : needed) {
        std::error_code ec;
        if (!has(component)) {
            throw FormatError((root / "model_index.json").string(),
                              "has no '" + component + "' component");
        }
        if (!fs::is_directory(dir(component), ec)) {
            throw IoError(dir(component).string(),
                          "does not exist (model_index.json lists '" + component + "')");
        }
    }
}

void DiffusersFolder::require_pipeline(const std::string& expected) const {
    if (pipeline_class != expected) {
        throw FormatError((root / "model_index.json").string(),
                          "pipeline class '" + pipeline_class + "' is not " + expected);
    }
}

}  // namespace loom
