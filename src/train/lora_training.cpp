#include "loom/train/lora_training.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "loom/core/error.h"
#include "loom/core/logging.h"
#include "loom/device/device.h"
#include "loom/device/step_graphs.h"
#include "loom/lora/lora_file.h"

namespace loom {

namespace {

at::ScalarType scalar_type(config::SaveDtype d) {
    switch (d) {
        case config::SaveDtype::kFloat16: return at::kHalf;
        case config::SaveDtype::kBFloat16: return at::kBFloat16;
        case config::SaveDtype::kFloat32: break;
    }
    return at::kFloat;
}

LoRAFileLayout file_layout(config::LoRAKeyLayout layout) {
    switch (layout) {
        case config::LoRAKeyLayout::kPeft: return LoRAFileLayout::kPeft;
        case config::LoRAKeyLayout::kKohya: break;
    }
    return LoRAFileLayout::kKohya;
}

// ai-toolkit's default warmup for constant_with_warmup when num_warmup_steps is not given.
constexpr int kDefaultWarmupSteps = 1000;

}  // namespace

LoRATraining::LoRATraining(const config::ProcessConfig& process, torch::nn::Module& denoiser,
                           const LoRAModel& model, const Device& device, std::uint64_t seed) {
    const config::NetworkConfig& n = process.network;
    LoRANetworkOptions o;
    o.linear.rank = n.linear;
    o.linear.alpha = n.linear_alpha.value_or(n.alpha);
    // kohya's rule: alpha 0 is the rank.
    const auto effective = [&](double alpha) { return alpha == 0.0 ? double(n.linear) : alpha; };
    linear_alpha_ = effective(o.linear.alpha);
    linear_rank_ = n.linear;
    if (process.choices.job_linear_alpha) {
        job_linear_alpha_ = effective(*process.choices.job_linear_alpha);
    }
    o.linear.dropout = n.dropout.value_or(0.0);
    if (n.conv) o.conv = LoRAOptions{*n.conv, n.conv_alpha.value_or(*n.conv), o.linear.dropout};
    o.rules.model = model;
    o.rules.unet_set = parse_unet_module_set(n.network_kwargs.module_set)
                           .value_or(UNetModuleSet::kAiToolkit);  // validated by the config
    o.rules.only_if_contains = n.network_kwargs.only_if_contains;
    o.rules.ignore_if_contains = n.network_kwargs.ignore_if_contains;
    at::manual_seed(seed);  // reproducible LoRA initialisation
    network_ = std::make_unique<LoRANetwork>(LoRANetwork::inject(denoiser, o));
    {
        torch::NoGradGuard no_grad;
        for (const LoRATarget& t : network_->targets()) {
            t.adapter->down.set_data(device.to_device(t.adapter->down.data()));
            t.adapter->up.set_data(device.to_device(t.adapter->up.data()));
        }
    }
    if (n.pretrained_lora_path) load_lora(*network_, *n.pretrained_lora_path);
    network_->set_training(true);
    const config::TrainConfig& t = process.train;
    optimizer_ = make_optimizer(t, network_->parameters(), process.perf.fused_adamw);
    const double base_lr = t.unet_lr.value_or(t.lr);
    const config::LrScheduler kind = process.choices.lr_scheduler;
    schedule_ = make_lr_schedule(
        kind, base_lr, t.steps,
        t.lr_scheduler_params.num_warmup_steps.value_or(
            kind == config::LrScheduler::kConstantWithWarmup ? kDefaultWarmupSteps : 0));
    if (t.ema_config.use_ema) {
        ema_ = std::make_unique<Ema>(network_->parameters(), t.ema_config.ema_decay);
    }
    logger("train").info("LoRA: {} modules, rank {}, alpha {}", network_->targets().size(),
                         n.linear, o.linear.alpha);
}

void LoRATraining::step(std::int64_t step_index, double max_grad_norm) {
    if (max_grad_norm > 0) optimizer_->clip_grad_norm(max_grad_norm);
    optimizer_->step(schedule_.lr_at(step_index));
    optimizer_->zero_grad();
    if (ema_) ema_->update(network_->parameters());
}

// All or nothing as step() is: the device update writes in place only in the fused kernel,
// which allocates nothing; what can run out (the norms) runs before it, and a replay allocates
// nothing at all.
void LoRATraining::step(std::int64_t step_index, double max_grad_norm, StepGraphs& graphs) {
    if (!optimizer_->device_step_supported()) {
        step(step_index, max_grad_norm);
        return;
    }
    optimizer_->prepare_device_step(schedule_.lr_at(step_index));
    graphs.run("update", [&] { optimizer_->device_step(max_grad_norm); });
    optimizer_->count_device_step();
    optimizer_->zero_grad();
    if (ema_) ema_->update(network_->parameters());
}

std::vector<std::filesystem::path> LoRATraining::save_file(const std::filesystem::path& file,
                                                           const config::ProcessConfig& process,
                                                           SafetensorsMetadata metadata) {
    EmaWeights ema(*this);
    return save_lora(*network_, file, file_layout(process.choices.lora_layout),
                     scalar_type(process.choices.save_dtype), std::move(metadata));
}

CheckpointState LoRATraining::checkpoint(std::int64_t step) const {
    CheckpointState s;
    s.step = step;
    s.linear_alpha = linear_alpha_;
    for (const auto& p : network_->parameters()) s.lora.push_back(p.detach().cpu());
    s.optimizer = optimizer_->state();
    if (ema_) {
        for (const auto& t : ema_->shadow()) s.ema.push_back(t.cpu());
    }
    return s;
}

void LoRATraining::restore(const CheckpointState& s, const std::filesystem::path& source) {
    const auto params = network_->parameters();
    if (s.lora.size() != params.size()) {
        throw FormatError(source.string(),
                          "holds " + std::to_string(s.lora.size()) +
                              " LoRA tensors but the job's network has " +
                              std::to_string(params.size()) +
                              "; the network settings changed since it was saved (use --fresh to "
                              "start over)");
    }
    // A checkpoint without its alpha was saved by a loom that trained every LoRA at the job's
    // linear_alpha; a transformer family's now trains at the rank (config::Choices).
    const double trained_at = s.linear_alpha.value_or(job_linear_alpha_.value_or(linear_alpha_));
    if (trained_at != linear_alpha_) {
        for (const LoRATarget& t : network_->targets()) {
            if (!t.adapter->is_conv()) t.adapter->set_alpha(trained_at);
        }
        logger("train").warn(
            "the checkpoint in {} was trained at linear_alpha {:g} (a LoRA scale of {:g}), where "
            "the job now trains at {:g}; the run resumes at {:g} so that its training goes on "
            "unchanged (--fresh starts over at {:g})",
            source.string(), trained_at, trained_at / linear_rank_, linear_alpha_, trained_at,
            linear_alpha_);
        linear_alpha_ = trained_at;
    }
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) params[i].detach().copy_(s.lora[i]);
    try {
        optimizer_->load_state(s.optimizer);
    } catch (const Error& e) {
        throw FormatError(source.string(), e.what());
    }
    if (ema_ && !s.ema.empty()) ema_->load(s.ema);
}

LoRATraining::EmaWeights::EmaWeights(LoRATraining& training)
    : ema_(training.ema_.get()), params_(training.parameters()) {
    if (ema_) ema_->swap(params_);
}

LoRATraining::EmaWeights::~EmaWeights() {
    if (ema_) ema_->swap(params_);
}

}  // namespace loom
