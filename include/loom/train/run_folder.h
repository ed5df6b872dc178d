#pragma once

// The run folder (DESIGN.md "Run folder"): <training_folder>/<name>/ with config.yaml, plan.yaml,
// events.jsonl, metrics.jsonl, loom.log, LoRA files <name>_<9-digit step>.safetensors and
// <name>.safetensors, state/ (one folder per checkpoint step), samples/ and stable.yaml.
// Pure path logic plus the listing and pruning of step files; writes go through atomic_file.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace loom {

class RunFolder {
  public:
    RunFolder(std::filesystem::path training_folder, std::string name);

    const std::filesystem::path& root() const { return root_; }
    const std::string& name() const { return name_; }
    std::filesystem::path config_yaml() const { return root_ / "config.yaml"; }
    std::filesystem::path plan_yaml() const { return root_ / "plan.yaml"; }
    std::filesystem::path stable_yaml() const { return root_ / "stable.yaml"; }
    std::filesystem::path events_jsonl() const { return root_ / "events.jsonl"; }
    std::filesystem::path metrics_jsonl() const { return root_ / "metrics.jsonl"; }
    std::filesystem::path log_file() const { return root_ / "loom.log"; }
    std::filesystem::path samples_dir() const { return root_ / "samples"; }
    std::filesystem::path state_dir() const { return root_ / "state"; }

    // <name>_000000250.safetensors
    std::filesystem::path step_lora(int64_t step) const;
    // <name>.safetensors (the final save)
    std::filesystem::path final_lora() const;
    // The final save's files: <name><suffix>.safetensors for each LoRA suffix.
    std::vector<std::filesystem::path> final_lora_files() const;
    // Whether the final save is there (any of its files: a run that ended saved them all).
    bool has_final_lora() const;
    // state/000000250/ — complete once its COMPLETE marker exists
    std::filesystem::path checkpoint_dir(int64_t step) const;
    static constexpr const char* kCompleteMarker = "COMPLETE";

    // Steps of complete checkpoints, oldest first. Partial ones (a crash during a save) are
    // ignored, so the previous checkpoint stays the resume point.
    std::vector<int64_t> complete_checkpoints() const;
    std::optional<int64_t> newest_checkpoint() const;

    // A LoRA of several files (one per expert of a Wan 2.2 denoiser): what each file adds to
    // the name, "<name>_<step><suffix>.safetensors" ("_high_noise", "_low_noise"). By default
    // one file, no suffix.
    void set_lora_suffixes(std::vector<std::string> suffixes) {
        lora_suffixes_ = std::move(suffixes);
    }

    // Steps of <name>_<step>.safetensors files present (any of the suffixes'), oldest first.
    std::vector<int64_t> step_loras() const;
    // Deletes the oldest step LoRA files (every suffix's: a step's pair goes together) and
    // checkpoints beyond `keep` steps (save.max_step_saves_to_keep).
    void prune(std::size_t keep) const;
    // --fresh: moves state/ (when it holds a complete checkpoint) to state.before-fresh-<ms>/
    // so no rerun resumes from it, and returns where; nothing saved is deleted.
    std::optional<std::filesystem::path> set_aside_checkpoints() const;

    void create() const;  // the folder and its samples/ and state/
    bool exists() const;

  private:
    std::filesystem::path root_;
    std::string name_;
    std::vector<std::string> lora_suffixes_ = {""};
};

// "000000250"
std::string step_label(int64_t step);

}  // namespace loom
