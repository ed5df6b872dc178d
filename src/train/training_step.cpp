#include "loom/train/training_step.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>

#include "loom/core/error.h"
#include "loom/device/device.h"
#include "loom/device/faults.h"
#include "loom/dist/gradient_sync.h"
#include "loom/guard/guard.h"
#include "loom/model/family.h"
#include "loom/train/graphed_forward_backward.h"
#include "loom/train/lora_training.h"
#include "loom/train/objective.h"

namespace loom {

namespace {

// Captions of different token counts in one micro-batch (Qwen-Image hands each prompt's real
// tokens only): the shorter contexts padded with zero rows to the longest, their masks with
// zeros, so the padding is never attended to — as ai-toolkit concatenates prompt embeddings.
// Contexts of one length are left alone; unequal ones without masks are an error.
void pad_to_longest(std::vector<at::Tensor>& contexts, std::vector<at::Tensor>& masks) {
    int64_t longest = 0;
    for (const at::Tensor& c : contexts) longest = std::max(longest, c.size(1));
    bool equal = true;
    for (const at::Tensor& c : contexts) equal = equal && c.size(1) == longest;
    if (equal) return;
    if (masks.size() != contexts.size()) {
        throw Error("a micro-batch's text contexts differ in length and have no masks to pad with");
    }
    for (std::size_t i = 0; i < contexts.size(); ++i) {
        const int64_t more = longest - contexts[i].size(1);
        if (more == 0) continue;
        contexts[i] = at::constant_pad_nd(contexts[i], {0, 0, 0, more}, 0);
        masks[i] = at::constant_pad_nd(masks[i], {0, more}, 0);
    }
}

// Every tensor of `s` replaced by a copy of its own.
void own_copies(CheckpointState& s) {
    const auto copy = [](std::vector<at::Tensor>& list) {
        for (at::Tensor& t : list) t = t.clone();
    };
    copy(s.lora);
    copy(s.ema);
    for (auto& [name, list] : s.optimizer.lists) copy(list);
}

}  // namespace

TrainingStep::TrainingStep(Parts parts, std::uint64_t seed, int gradient_accumulation,
                           double max_grad_norm)
    : parts_(std::move(parts)),
      seed_(seed),
      gradient_accumulation_(gradient_accumulation),
      max_grad_norm_(max_grad_norm) {
    if (parts_.graphs != nullptr) {
        graphed_ = std::make_unique<GraphedForwardBackward>(
            *parts_.graphs, parts_.model, parts_.objective, parts_.lora.optimizer().params());
    }
}

TrainingStep::~TrainingStep() = default;

void TrainingStep::release_graphs() {
    if (graphed_) graphed_->clear();
}

// Several ranks stay eager: the gradients' all-reduce sits between the backward pass and the
// update, which the captured update does not leave room for.
bool TrainingStep::graphed(const guard::Plan& plan) const {
    return graphed_ != nullptr && parts_.group == nullptr && plan.low_vram < 3 &&
           parts_.model.predict_is_capturable();
}

StepWork TrainingStep::draw(std::int64_t index) {
    StepWork w;
    w.index = index;
    for (int a = 0; a < gradient_accumulation_; ++a) {
        w.batches.push_back(parts_.data.order().next_batch());
    }
    w.rng_state = at::detail::getDefaultCPUGenerator().get_state();
    return w;
}

double TrainingStep::run(const StepWork& work, const guard::Plan& plan) {
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    cpu.set_state(work.rng_state);
    const std::vector<data::MicroBatch> micro = data::split_micro_batches(
        work.batches, parts_.data.buckets(), plan.batch_size, parts_.shard);
    // Each micro-batch's share is of the whole step's items, every rank's: summed over the
    // ranks, the gradient is the step's mean.
    std::size_t total = 0;
    for (const data::Batch& b : work.batches) total += b.items.size();
    before_update_.reset();
    times_ = {};
    buckets_trained_.clear();
    for (const data::MicroBatch& m : micro) {
        const std::string key = m.bucket.key();
        if (std::find(buckets_trained_.begin(), buckets_trained_.end(), key) ==
            buckets_trained_.end())
            buckets_trained_.push_back(key);
    }
    parts_.lora.optimizer().zero_grad();
    const bool graphs = graphed(plan);
    if (graphs) graphed_->begin_step();
    at::Tensor loss;
    for (const data::MicroBatch& m : micro) {
        parts_.guard.note_bucket(m.bucket.width, m.bucket.height, m.bucket.frames);
        const at::Tensor part =
            forward_backward(m, work.batches, work.index, total, graphs ? &plan : nullptr);
        loss = loss.defined() ? loss + part : part;
    }
    if (parts_.group != nullptr) return update_together(work, loss);
    PhaseTimer timer(times_.optimizer);
    UpdateScope update;
    if (graphs) {
        graphed_->finish_step();
        parts_.lora.step(work.index, max_grad_norm_, *parts_.graphs);
    } else {
        parts_.lora.step(work.index, max_grad_norm_);
    }
    // The step's one read-back (a device sync), not one per micro-batch.
    return loss.item<double>();
}

// Every rank trained its shard: the group's gradients, then the one update. The update is all
// or nothing on this rank (optimizer.h), but another rank's can fail after this one's
// succeeded, so the state before it is kept on the host until the guard's outcome is known.
double TrainingStep::update_together(const StepWork& work, const at::Tensor& loss) {
    double sum = 0.0;
    {
        PhaseTimer timer(times_.sync);
        // The buffer first: an OOM making it is this rank's alone, before any collective.
        dist::GradientExchange exchange(*parts_.group, parts_.lora.parameters(),
                                        loss.defined() ? loss.item<double>() : 0.0);
        parts_.guard.agree_so_far();
        sum = exchange.all_reduce();
        before_update_ = parts_.lora.checkpoint(work.index);
        // On cpu and sim the "host copies" are the live tensors themselves: copy them.
        if (parts_.device.spec().kind != DeviceKind::kCuda) own_copies(*before_update_);
    }
    PhaseTimer timer(times_.optimizer);
    UpdateScope update;
    parts_.lora.step(work.index, max_grad_norm_);
    return sum;
}

void TrainingStep::undo_update() {
    if (!before_update_) return;
    parts_.lora.restore(*before_update_, "the state before the step's update");
    before_update_.reset();
}

std::string TrainingStep::probe(const guard::Plan& plan) {
    const data::Bucket* largest = parts_.data.buckets().largest();
    data::Batch b;
    b.bucket = largest->size;
    for (int k = 0; k < plan.batch_size; ++k) {
        b.items.push_back(largest->items.at(std::size_t(k) % largest->items.size()));
    }
    const std::vector<data::MicroBatch> micro =
        data::split_micro_batches({b}, parts_.data.buckets(), plan.batch_size);
    parts_.lora.optimizer().zero_grad();
    parts_.guard.note_bucket(micro.front().bucket.width, micro.front().bucket.height,
                             micro.front().bucket.frames);
    // Eager even under perf.cuda_graphs: the probe measures the step's peak, and a capture's
    // pool would keep its memory.
    forward_backward(micro.front(), {b}, /*step_index=*/0, micro.front().slots.size(),
                     /*graphed_plan=*/nullptr);
    parts_.lora.optimizer().zero_grad();
    return b.bucket.key();
}

// Forward and backward of one micro-batch; its loss is weighted by its share of the step's
// items, so the accumulated gradient is the step's mean whatever the split. Returns the
// weighted loss, detached, on the device. With `graphed_plan` the computation runs on the
// static buffers of perf.cuda_graphs (graphed_forward_backward.h).
at::Tensor TrainingStep::forward_backward(const data::MicroBatch& micro,
                                          const std::vector<data::Batch>& batches,
                                          std::int64_t step_index, std::size_t step_items,
                                          const guard::Plan* graphed_plan) {
    std::optional<PhaseTimer> phase(std::in_place, times_.data);
    const Device& device = parts_.device;
    std::vector<at::Tensor> latents;
    // The items' control latents: one each at the bucket (Kontext, Flex.2, Qwen-Image-Edit), or
    // several of their own sizes (Edit-2509) — each item's fitted to the first item's sizes, so
    // that they stack.
    std::vector<std::vector<at::Tensor>> controls;
    const std::vector<data::BucketSize> control_sizes =
        parts_.data.has_controls()
            ? parts_.data.control_sizes(micro.slots.front().item, micro.bucket)
            : std::vector<data::BucketSize>{};
    const bool at_bucket = control_sizes.size() == 1 &&
                           control_sizes.front().width == micro.bucket.width &&
                           control_sizes.front().height == micro.bucket.height;
    controls.resize(control_sizes.size());
    std::vector<at::Tensor> contexts;
    std::vector<at::Tensor> pooled;
    std::vector<at::Tensor> masks;  // the captions' token masks (Chroma), or none
    std::vector<at::Tensor> keeps;  // the items' inpaint keep masks (Flex.2), or none
    std::vector<std::size_t> slots;
    for (const data::StepSlot& slot : micro.slots) {
        latents.push_back(parts_.data.latent(slot.item, micro.bucket, parts_.encode_latent));
        if (parts_.data.has_inpaint()) {
            const at::Tensor& latent = latents.back();
            at::Tensor keep =
                parts_.data.inpaint_keep(slot.item, micro.bucket, latent.size(-2), latent.size(-1));
            // Dropped: nothing kept, all inpainted (ai-toolkit's input without an inpaint image).
            if (parts_.data.inpaint_dropped(slot, batches, seed_))
                keep = at::zeros_like(keep);
            else if (parts_.data.inpaint_inverted(slot, batches, seed_))
                keep = 1 - keep;
            keeps.push_back(keep);
        }
        const bool dropped = parts_.data.control_dropped(slot, batches, seed_);
        for (std::size_t k = 0; k < control_sizes.size(); ++k) {
            at::Tensor control =
                parts_.data.control_latent(slot.item, k, control_sizes[k], parts_.encode_latent);
            // A dropped control trains as "no control image": Flex.2's zero channels.
            if (dropped) control = at::zeros_like(control);
            controls[k].push_back(control);
        }
        const std::string caption = parts_.data.caption(slot, batches, seed_);
        const TextConditioning c = TextConditioning::from_named(
            parts_.data.conditioning(slot.item, caption, parts_.encode_text),
            "the text cache entry of '" + caption + "'");
        contexts.push_back(c.context);  // [1, tokens, width]
        if (c.text_embeds.defined()) pooled.push_back(c.text_embeds);
        if (c.context_mask.defined()) masks.push_back(c.context_mask);
        slots.push_back(slot.slot);
    }
    const at::Tensor x0 = device.to_device(at::stack(latents));
    pad_to_longest(contexts, masks);
    StepConditioning cond;
    cond.context = device.to_device(at::cat(contexts))
                       .to(parts_.model.denoiser().parameters().front().scalar_type());
    const NoisedBatch noised = parts_.objective.noise(x0, slots, seed_, step_index, device);
    if (!pooled.empty())
        cond.pooled = device.to_device(at::cat(pooled)).to(cond.context.scalar_type());
    if (!masks.empty()) cond.context_mask = device.to_device(at::cat(masks));
    const at::Tensor extra =
        parts_.model.extra_conditioning(micro.bucket.height, micro.bucket.width, x0.size(0));
    if (extra.defined()) cond.extra = device.to_device(extra);
    for (const std::vector<at::Tensor>& control : controls) {
        const at::Tensor stacked =
            device.to_device(at::stack(control)).to(cond.context.scalar_type());
        if (at_bucket)
            cond.control = stacked;
        else
            cond.controls.push_back(stacked);
    }
    if (!keeps.empty()) {
        // ai-toolkit's Flex2: the clean latents times the keep mask, then the inpaint mask.
        const at::Tensor keep = device.to_device(at::stack(keeps)).to(x0.scalar_type());
        cond.inpaint = at::cat({x0 * keep, 1 - keep}, 1).to(cond.context.scalar_type());
    }
    const double weight = static_cast<double>(micro.slots.size()) / static_cast<double>(step_items);
    if (graphed_plan != nullptr) {
        phase.emplace(times_.forward);  // forward and backward are one replay
        // The key: everything that changes the captured kernels or their shapes.
        const std::string key = micro.bucket.key() + " x" + std::to_string(x0.size(0)) +
                                (graphed_plan->gradient_checkpointing ? " gc" : "") + " lv" +
                                std::to_string(graphed_plan->low_vram);
        return graphed_->run(key, {noised.noisy.to(cond.context.scalar_type()), noised.timesteps,
                                   cond, noised.target, weight, noised.loss_weights});
    }
    phase.emplace(times_.forward);
    const at::Tensor pred =
        parts_.model.predict(noised.noisy.to(cond.context.scalar_type()), noised.timesteps, cond);
    const at::Tensor loss = parts_.objective.loss(pred, noised.target, noised.loss_weights);
    const at::Tensor weighted = loss * weight;
    phase.emplace(times_.backward);
    weighted.backward();
    return weighted.detach();
}

}  // namespace loom
