#include "loom/lora/kohya_metadata.h"

#include <nlohmann/json.hpp>

#include "loom/core/version.h"

namespace loom {

SafetensorsMetadata kohya_metadata(const config::Job& job, const config::ProcessConfig& process,
                                   const KohyaTrainingFacts& facts) {
    const config::NetworkConfig& n = process.network;
    const config::TrainConfig& t = process.train;
    SafetensorsMetadata m;
    for (const auto& [k, v] : job.meta) m.emplace_back(k, v);
    m.emplace_back("training_info", nlohmann::json{{"step", facts.step}}.dump());
    m.emplace_back("software", nlohmann::json{{"name", "loom"}, {"version", kVersion}}.dump());
    m.emplace_back("ss_output_name", process.name.value_or(""));
    // kohya's names for the arch (config/arch.h's row: sd-scripts' flux_train_network.py writes
    // "flux1" and networks.lora_flux; for Wan, ai-toolkit's base model version "wan_2.1" and
    // musubi-tuner's networks.lora_wan).
    const config::ArchInfo& arch = config::arch_info(facts.arch);
    m.emplace_back("ss_network_module", arch.kohya_network_module);
    m.emplace_back("ss_network_dim", std::to_string(n.linear));
    m.emplace_back("ss_network_alpha", std::to_string(n.linear_alpha.value_or(n.alpha)));
    m.emplace_back("ss_base_model_version", arch.kohya_base_model);
    m.emplace_back("ss_learning_rate", std::to_string(t.lr));
    m.emplace_back("ss_lr_scheduler", t.lr_scheduler);
    m.emplace_back("ss_max_train_steps", std::to_string(t.steps));
    m.emplace_back("ss_steps", std::to_string(facts.step));
    m.emplace_back("ss_seed",
                   std::to_string(static_cast<std::uint64_t>(process.training_seed.value_or(0))));
    m.emplace_back("ss_gradient_checkpointing", facts.gradient_checkpointing ? "True" : "False");
    m.emplace_back("ss_gradient_accumulation_steps", std::to_string(t.gradient_accumulation));
    // The optimizer ai-toolkit would have used for the same job (train.optimizer).
    const std::string optimizer = t.optimizer == "adamw8bit" ? "bitsandbytes.optim.adamw.AdamW8bit"
                                  : t.optimizer == "prodigy" || t.optimizer == "prodigyopt"
                                      ? "prodigyopt.prodigy.Prodigy"
                                      : "AdamW";
    m.emplace_back("ss_optimizer", optimizer);
    m.emplace_back("ss_max_grad_norm", std::to_string(t.max_grad_norm));
    m.emplace_back("ss_noise_offset", std::to_string(t.noise_offset));
    m.emplace_back("ss_sd_model_name", process.model.name_or_path);
    return m;
}

}  // namespace loom
