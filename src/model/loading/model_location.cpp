#include "loom/model/loading/model_location.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

#include "loom/core/error.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

bool is_id_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.';
}

bool is_id_part(const std::string& part) {
    return !part.empty() && part.front() != '.' &&
           std::all_of(part.begin(), part.end(), is_id_char);
}

std::string trimmed(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())) != 0) s.pop_back();
    return s;
}

// The snapshot folder of `repo` (a cache's models--org--name folder): refs/main's revision, or
// the only snapshot when there is no ref. nullopt when the cache does not hold it.
std::optional<fs::path> snapshot_of(const fs::path& repo, const std::string& id) {
    if (!fs::is_directory(repo)) return std::nullopt;
    const fs::path ref = repo / "refs" / "main";
    if (fs::exists(ref)) {
        std::ifstream in(ref);
        std::string revision;
        std::getline(in, revision);
        revision = trimmed(revision);
        const fs::path snapshot = repo / "snapshots" / revision;
        if (revision.empty() || !fs::is_directory(snapshot)) {
            throw IoError(ref.string(), "names revision '" + revision + "' of " + id +
                                            " but the cache has no such snapshot; download it "
                                            "again (huggingface-cli download " +
                                            id + ")");
        }
        return snapshot;
    }
    std::vector<fs::path> snapshots;
    if (fs::is_directory(repo / "snapshots")) {
        for (const auto& e : fs::directory_iterator(repo / "snapshots")) {
            if (e.is_directory()) snapshots.push_back(e.path());
        }
    }
    if (snapshots.size() == 1) return snapshots.front();
    if (snapshots.empty()) return std::nullopt;
    throw IoError(repo.string(), "holds " + std::to_string(snapshots.size()) + " snapshots of " +
                                     id +
                                     " and no refs/main to choose one; give model.name_or_path "
                                     "the snapshot folder itself");
}

}  // namespace

std::optional<std::string> process_environment(const std::string& name) {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
}

bool is_hub_id(const std::string& text) {
    const std::size_t slash = text.find('/');
    if (slash == std::string::npos || text.find('/', slash + 1) != std::string::npos) return false;
    return is_id_part(text.substr(0, slash)) && is_id_part(text.substr(slash + 1));
}

std::vector<fs::path> hub_cache_folders(const EnvironmentLookup& env) {
    std::vector<fs::path> out;
    auto add = [&](const fs::path& p) {
        if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    };
    if (auto v = env("HF_HUB_CACHE")) add(*v);
    if (auto v = env("HUGGINGFACE_HUB_CACHE")) add(*v);
    if (auto v = env("HF_HOME")) add(fs::path(*v) / "hub");
    if (auto v = env("XDG_CACHE_HOME")) add(fs::path(*v) / "huggingface" / "hub");
    if (auto v = env("HOME")) add(fs::path(*v) / ".cache" / "huggingface" / "hub");
    return out;
}

fs::path locate_model(const std::string& name_or_path, const EnvironmentLookup& env) {
    if (fs::exists(name_or_path)) return name_or_path;
    if (!is_hub_id(name_or_path)) {
        throw IoError(name_or_path, "no such model folder or file (model.name_or_path)");
    }
    const std::string slug = "models--" + name_or_path.substr(0, name_or_path.find('/')) + "--" +
                             name_or_path.substr(name_or_path.find('/') + 1);
    const std::vector<fs::path> caches = hub_cache_folders(env);
    std::string searched;
    for (const fs::path& cache : caches) {
        if (auto snapshot = snapshot_of(cache / slug, name_or_path)) return *snapshot;
        searched += (searched.empty() ? "" : ", ") + (cache / slug).string();
    }
    throw IoError(
        name_or_path,
        "is neither a folder nor in the local Hugging Face cache (searched " +
            (searched.empty() ? std::string("no cache: HF_HOME and HOME are unset") : searched) +
            "); loom does not download models: run `huggingface-cli download " + name_or_path +
            "` (or `hf download " + name_or_path +
            "`), or give model.name_or_path a local diffusers folder");
}

}  // namespace loom
