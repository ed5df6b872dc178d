#include "loom/train/checkpoint_state.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <sstream>

#include "loom/core/error.h"
#include "loom/io/atomic_file.h"
#include "loom/model/loading/tensor_file.h"
#include "loom/train/run_folder.h"

namespace loom {

namespace fs = std::filesystem;

namespace {

void add_list(NamedTensors& out, const std::string& prefix, const std::vector<at::Tensor>& list) {
    for (std::size_t i = 0; i < list.size(); ++i) {
        out.emplace_back(prefix + "." + std::to_string(i), list[i].detach());
    }
}

std::vector<at::Tensor> take_list(const std::map<std::string, at::Tensor>& all,
                                  const std::string& prefix, std::size_t count,
                                  const fs::path& file) {
    std::vector<at::Tensor> out;
    for (std::size_t i = 0; i < count; ++i) {
        auto it = all.find(prefix + "." + std::to_string(i));
        if (it == all.end()) {
            throw FormatError(file.string(), "has no tensor '" + prefix + "." + std::to_string(i) +
                                                 "'; the checkpoint is damaged");
        }
        out.push_back(it->second);
    }
    return out;
}

}  // namespace

void save_checkpoint(const fs::path& dir, const CheckpointState& s) {
    std::error_code ec;
    fs::remove_all(dir, ec);  // a partial save of the same step from an earlier crash
    fs::create_directories(dir, ec);
    if (ec) throw IoError(dir.string(), "cannot create the checkpoint folder: " + ec.message());
    NamedTensors tensors;
    add_list(tensors, "lora", s.lora);
    nlohmann::json lists = nlohmann::json::array();
    for (const auto& [name, list] : s.optimizer.lists) {
        add_list(tensors, name, list);  // AdamW's exp_avg / exp_avg_sq keep their old names
        lists.push_back(name);
    }
    add_list(tensors, "ema", s.ema);
    tensors.emplace_back("rng_cpu", s.rng_cpu);
    for (std::size_t r = 0; r < s.rng_ranks.size(); ++r) {
        tensors.emplace_back("rng_cpu_rank" + std::to_string(r + 1), s.rng_ranks[r]);
    }
    write_tensors(dir / "state.safetensors", tensors);
    nlohmann::json meta = {{"step", s.step},
                           {"optimizer", s.optimizer.kind},
                           {"optimizer_steps", s.optimizer.steps},
                           {"optimizer_lists", lists},
                           {"optimizer_scalars", s.optimizer.scalars},
                           {"lora", s.lora.size()},
                           {"ema", s.ema.size()},
                           {"data_cursor", nlohmann::json::parse(s.data_cursor)},
                           {"world_size", s.world_size},
                           {"global_batch", s.global_batch}};
    if (s.linear_alpha) meta["linear_alpha"] = *s.linear_alpha;
    write_file_atomic(dir / "trainer.json", meta.dump(2) + "\n");
    if (!s.plan_yaml.empty()) write_file_atomic(dir / "plan.yaml", s.plan_yaml);
    write_file_atomic(dir / RunFolder::kCompleteMarker, "ok\n");  // last: the save is whole
}

CheckpointState load_checkpoint(const fs::path& dir) {
    const fs::path meta_path = dir / "trainer.json";
    std::ifstream in(meta_path);
    if (!in) throw IoError(meta_path.string(), "cannot be read; the checkpoint is incomplete");
    nlohmann::json meta;
    try {
        meta = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
        throw FormatError(meta_path.string(), std::string("is not valid JSON: ") + e.what());
    }
    CheckpointState s;
    try {
        s.step = meta.at("step").get<int64_t>();
        s.optimizer.steps = meta.at("optimizer_steps").get<int64_t>();
        // Checkpoints from before the optimizer choice hold AdamW's two lists.
        s.optimizer.kind = meta.value("optimizer", std::string("adamw"));
        const std::vector<std::string> lists =
            meta.value("optimizer_lists", std::vector<std::string>{"exp_avg", "exp_avg_sq"});
        s.optimizer.scalars = meta.value("optimizer_scalars", std::map<std::string, double>{});
        s.data_cursor = meta.at("data_cursor").dump();
        const auto lora_count = meta.at("lora").get<std::size_t>();
        const auto ema_count = meta.at("ema").get<std::size_t>();
        const fs::path file = dir / "state.safetensors";
        std::map<std::string, at::Tensor> all;
        for (auto& [name, t] : read_all_tensors(file)) all[name] = t;
        s.lora = take_list(all, "lora", lora_count, file);
        for (const std::string& name : lists) {
            s.optimizer.lists[name] = take_list(all, name, lora_count, file);
        }
        s.ema = take_list(all, "ema", ema_count, file);
        auto rng = all.find("rng_cpu");
        if (rng == all.end()) throw FormatError(file.string(), "has no RNG state");
        s.rng_cpu = rng->second;
        s.world_size = meta.value("world_size", 1);
        s.global_batch = meta.value("global_batch", 0);
        if (meta.contains("linear_alpha")) s.linear_alpha = meta.at("linear_alpha").get<double>();
        for (int r = 1; r < s.world_size; ++r) {
            auto other = all.find("rng_cpu_rank" + std::to_string(r));
            if (other == all.end()) {
                throw FormatError(file.string(), "has no RNG state for rank " + std::to_string(r) +
                                                     " of " + std::to_string(s.world_size));
            }
            s.rng_ranks.push_back(other->second);
        }
        std::ifstream plan(dir / "plan.yaml");
        if (plan) {
            std::ostringstream text;
            text << plan.rdbuf();
            s.plan_yaml = text.str();
        }
    } catch (const nlohmann::json::exception& e) {
        throw FormatError(meta_path.string(), std::string("is missing a field: ") + e.what());
    }
    return s;
}

std::optional<CheckpointState> load_newest_checkpoint(
    const RunFolder& run,
    const std::function<void(std::int64_t step, const std::string& error)>& passed_over) {
    const std::vector<int64_t> steps = run.complete_checkpoints();  // oldest first
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
        try {
            return load_checkpoint(run.checkpoint_dir(*it));
        } catch (const Error& e) {
            passed_over(*it, e.what());
        }
    }
    if (steps.empty()) return std::nullopt;
    throw FormatError(run.state_dir().string(),
                      "holds no checkpoint that loads (see the warnings above); train with "
                      "--fresh to start over (the old checkpoints are kept aside)");
}

}  // namespace loom
