#include "loom/train/run_folder.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>

#include "loom/core/error.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

// The step in "<prefix><9 digits><suffix>", or nullopt.
std::optional<int64_t> parse_step(const std::string& name, const std::string& prefix,
                                  const std::string& suffix) {
    if (name.size() != prefix.size() + 9 + suffix.size()) return std::nullopt;
    if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
    if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return std::nullopt;
    int64_t step = 0;
    for (std::size_t i = prefix.size(); i < prefix.size() + 9; ++i) {
        if (!std::isdigit(static_cast<unsigned char>(name[i]))) return std::nullopt;
        step = step * 10 + (name[i] - '0');
    }
    return step;
}

}  // namespace

std::string step_label(int64_t step) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%09lld", static_cast<long long>(step));
    return buf;
}

RunFolder::RunFolder(fs::path training_folder, std::string name)
    : root_(std::move(training_folder) / name), name_(std::move(name)) {}

fs::path RunFolder::step_lora(int64_t step) const {
    return root_ / (name_ + "_" + step_label(step) + ".safetensors");
}

fs::path RunFolder::final_lora() const {
    return root_ / (name_ + ".safetensors");
}

std::vector<fs::path> RunFolder::final_lora_files() const {
    std::vector<fs::path> files;
    for (const std::string& suffix : lora_suffixes_)
        files.push_back(root_ / (name_ + suffix + ".safetensors"));
    return files;
}

bool RunFolder::has_final_lora() const {
    std::error_code ec;
    for (const fs::path& f : final_lora_files()) {
        if (fs::exists(f, ec)) return true;
    }
    return false;
}

fs::path RunFolder::checkpoint_dir(int64_t step) const {
    return state_dir() / step_label(step);
}

std::vector<int64_t> RunFolder::complete_checkpoints() const {
    std::vector<int64_t> steps;
    std::error_code ec;
    if (!fs::is_directory(state_dir(), ec)) return steps;
    for (const auto& entry : fs::directory_iterator(state_dir(), ec)) {
        const auto step = parse_step(entry.path().filename().string(), "", "");
        if (step && fs::exists(entry.path() / kCompleteMarker, ec)) steps.push_back(*step);
    }
    std::sort(steps.begin(), steps.end());
    return steps;
}

std::optional<int64_t> RunFolder::newest_checkpoint() const {
    const auto steps = complete_checkpoints();
    if (steps.empty()) return std::nullopt;
    return steps.back();
}

std::vector<int64_t> RunFolder::step_loras() const {
    std::vector<int64_t> steps;
    std::error_code ec;
    if (!fs::is_directory(root_, ec)) return steps;
    for (const auto& entry : fs::directory_iterator(root_, ec)) {
        for (const std::string& suffix : lora_suffixes_) {
            const auto step =
                parse_step(entry.path().filename().string(), name_ + "_", suffix + ".safetensors");
            if (step) steps.push_back(*step);
        }
    }
    std::sort(steps.begin(), steps.end());
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    return steps;
}

void RunFolder::prune(std::size_t keep) const {
    std::error_code ec;
    const auto loras = step_loras();
    for (std::size_t i = 0; i + keep < loras.size(); ++i) {
        for (const std::string& suffix : lora_suffixes_) {
            fs::remove(root_ / (name_ + "_" + step_label(loras[i]) + suffix + ".safetensors"), ec);
        }
    }
    const auto checkpoints = complete_checkpoints();
    // Always keep the newest checkpoint: it is the resume point.
    const std::size_t keep_states = std::max<std::size_t>(keep, 1);
    for (std::size_t i = 0; i + keep_states < checkpoints.size(); ++i) {
        fs::remove_all(checkpoint_dir(checkpoints[i]), ec);
    }
}

std::optional<fs::path> RunFolder::set_aside_checkpoints() const {
    if (!fs::exists(state_dir()) || complete_checkpoints().empty()) return std::nullopt;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    const fs::path aside = root_ / ("state.before-fresh-" + std::to_string(ms));
    fs::rename(state_dir(), aside);
    fs::create_directories(state_dir());
    return aside;
}

void RunFolder::create() const {
    std::error_code ec;
    for (const fs::path& p : {root_, samples_dir(), state_dir()}) {
        fs::create_directories(p, ec);
        if (ec) throw IoError(p.string(), "cannot create the folder: " + ec.message());
    }
}

bool RunFolder::exists() const {
    std::error_code ec;
    return fs::is_directory(root_, ec);
}

}  // namespace loom
