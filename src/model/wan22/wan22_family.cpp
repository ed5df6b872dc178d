#include "loom/model/wan22/wan22_family.h"

#include <ATen/ATen.h>

#include "loom/core/error.h"
#include "loom/model/wan/wan_family.h"
#include "loom/model/wan/wan_preview_sampler.h"

namespace loom {

std::unique_ptr<ModelFamily> Wan22Family::load(const std::filesystem::path& root, config::Arch arch,
                                               const FamilyLoadOptions& options) {
    WanLoadOptions o;
    o.dtype = options.dtype;
    return std::make_unique<Wan22Family>(load_wan22(root, o), arch, options.trained_experts);
}

Wan22Family::Wan22Family(Wan22Model model, config::Arch arch, std::vector<bool> trained)
    : model_(std::move(model)), arch_(arch), trained_(std::move(trained)) {
    if (trained_.empty()) trained_ = {true, true};
    if (trained_.size() != 2 || (!trained_[kHighNoise] && !trained_[kLowNoise])) {
        throw Error("Wan 2.2: at least one of the high- and low-noise experts must train");
    }
}

// Each expert's blocks, as ai-toolkit targets DualWanTransformer3DModel (or the one trained
// transformer) by Wan's block names; its LoRA files are "<name>_high_noise.safetensors" and
// "<name>_low_noise.safetensors".
const DenoiserBlocks& Wan22Family::declared_blocks() {
    static const DenoiserBlocks blocks{
        {"transformer_1.blocks.", "transformer_2.blocks."},
        LoRATargeting::kBlockLinears,
        {{"transformer_1.", "_high_noise"}, {"transformer_2.", "_low_noise"}}};
    return blocks;
}

const std::vector<EvalComponent>& Wan22Family::eval_components() {
    return WanFamily::eval_components();  // the same UMT5 (and VAE) as Wan 2.1
}

void Wan22Family::set_gradient_checkpointing(bool on) {
    model_.experts->transformer_1->set_gradient_checkpointing(on);
    model_.experts->transformer_2->set_gradient_checkpointing(on);
}

int64_t Wan22Family::temporal_compression() const {
    return model_.base.vae->config().temporal_compression();
}

at::Tensor Wan22Family::training_latents(const at::Tensor& z) const {
    return model_.base.vae->normalize_latents(z);
}

TextConditioning Wan22Family::encode_prompts(const std::vector<std::string>& prompts) {
    return model_.base.encode_prompts(prompts, kMaxSequenceLength);
}

NoiseScheduleConfig Wan22Family::ddpm_schedule() const {
    throw Error(std::string("model '") + config::to_string(arch_) +
                "' trains with flow matching; it has no DDPM schedule");
}

FlowMatchConfig Wan22Family::flow_match() const {
    FlowMatchConfig c = model_.base.scheduler;
    c.shift = Wan22Model::kTrainShift;
    return c;
}

std::vector<ExpertSpan> Wan22Family::expert_spans() const {
    const double boundary = model_.boundary();
    return {{boundary, static_cast<double>(model_.base.scheduler.num_train_timesteps)},
            {0.0, boundary}};
}

WanTransformer3DModelImpl& Wan22Family::expert_module(std::size_t index) {
    switch (index) {
        case kHighNoise: return *model_.experts->transformer_1;
        case kLowNoise: return *model_.experts->transformer_2;
        default: break;
    }
    throw Error("Wan 2.2 has two experts, not " + std::to_string(index + 1));
}

torch::nn::Module* Wan22Family::expert(std::size_t index) {
    return &expert_module(index);
}

at::Tensor Wan22Family::predict(const at::Tensor& noisy, const at::Tensor& timesteps,
                                const StepConditioning& c) {
    const at::Tensor t = timesteps.to(at::kFloat);
    const at::Tensor high = (t > model_.boundary()).cpu();
    const auto high_count = high.sum().item<int64_t>();
    const auto run = [&](std::size_t index, const at::Tensor& x, const at::Tensor& ts,
                         const at::Tensor& context) {
        return expert_module(index).forward(x, ts, context);
    };
    if (high_count == noisy.size(0) || high_count == 0) {
        const std::size_t index = high_count == 0 ? kLowNoise : kHighNoise;
        place_expert(index);
        return run(index, noisy, t, c.context);
    }
    // A micro-batch on both sides of the boundary (training draws one expert's timesteps per
    // step, so only a caller of its own makes one): each part through its expert, put back in
    // the batch's order. Both experts stay on the device until the backward pass is done with
    // the first one's weights.
    place_expert(kEveryExpert);
    const at::Tensor hi = high.nonzero().flatten().to(noisy.device());
    const at::Tensor lo = high.logical_not().nonzero().flatten().to(noisy.device());
    const at::Tensor out_hi = run(kHighNoise, noisy.index_select(0, hi), t.index_select(0, hi),
                                  c.context.index_select(0, hi));
    const at::Tensor out_lo = run(kLowNoise, noisy.index_select(0, lo), t.index_select(0, lo),
                                  c.context.index_select(0, lo));
    const at::Tensor order = at::cat({hi, lo});
    return at::cat({out_hi, out_lo}).index_select(0, at::argsort(order));
}

std::vector<at::Tensor> Wan22Family::sample(const std::vector<PreviewRequest>& requests,
                                            const PreviewOptions& options,
                                            const at::Device& device) {
    const double boundary = model_.boundary();
    return generate_wan_previews(
        model_.base, requests, options, device,
        options.max_sequence_length ? options.max_sequence_length : kMaxSequenceLength,
        [this, boundary](double t) -> WanTransformer3DModelImpl& {
            const std::size_t index = t >= boundary ? kHighNoise : kLowNoise;
            place_expert(index);
            return expert_module(index);
        });
}

}  // namespace loom
