#include "trainer_run.h"

namespace loom {

void Trainer::save(std::int64_t step, bool final) {
    // First, before anything can run out of memory: every rank takes part in the gathering.
    std::vector<at::Tensor> rngs;
    if (!final) rngs = rank_rng_states();
    if (!leader()) return;
    const fs::path file = final ? run_.final_lora() : run_.step_lora(step);
    const std::vector<fs::path> files = lora_->save_file(
        file, process_,
        kohya_metadata(job_, process_, {step, model_->arch(), plan().gradient_checkpointing}));
    if (!final) {
        CheckpointState s = lora_->checkpoint(step);
        s.rng_cpu = rngs.front();
        s.rng_ranks.assign(rngs.begin() + 1, rngs.end());
        s.world_size = ranks();
        s.global_batch = data_->order().batch_size();
        s.data_cursor = data::cursor_to_json(data_->order().cursor());
        s.plan_yaml = guard::plan_to_yaml(plan());
        save_checkpoint(run_.checkpoint_dir(step), s);
        run_.prune(static_cast<std::size_t>(process_.save.max_step_saves_to_keep));
    }
    // A pair of expert files (Wan 2.2): "file" is the first, "files" all of them.
    std::string names;
    for (const fs::path& f : files) names += (names.empty() ? "" : ", ") + f.string();
    std::vector<guard::EventField> fields = {
        {"step", step}, {"file", files.front().string()}, {"final", final}};
    if (files.size() > 1) fields.emplace_back("files", names);
    events_->record("save", fields);
    train_log().info("saved {}", names);
    if (!final && overrides_.after_checkpoint) {
        try {
            overrides_.after_checkpoint(run_.root());
        } catch (const std::exception& e) {
            train_log().warn("after the checkpoint at step {}: {}", step, e.what());
        }
    }
}

void Trainer::maybe_resume() {
    if (overrides_.fresh) return;
    std::optional<CheckpointState> s;
    if (leader()) {
        s = load_newest_checkpoint(run_, [&](std::int64_t step, const std::string& error) {
            train_log().warn(
                "the checkpoint at step {} cannot be loaded ({}); resuming from the one "
                "before it",
                step, error);
            events_->record("checkpoint_unreadable", {{"step", step}, {"error", error}});
        });
    }
    if (overrides_.group != nullptr) {  // every rank resumes from the one rank 0 chose
        const std::string chosen =
            overrides_.group->broadcast(leader() && s ? std::to_string(s->step) : "", 0);
        if (!leader() && !chosen.empty()) {
            s = load_checkpoint(run_.checkpoint_dir(std::stoll(chosen)));
        }
    }
    if (!s) return;
    lora_->restore(*s, run_.checkpoint_dir(s->step));
    resume_ranks(*s);
    data_->order().restore(data::cursor_from_json(s->data_cursor));
    step_ = s->step;
    resumed_ = true;
    train_log().info("resuming {} from the checkpoint at step {}", run_.root().string(), step_);
}

// The rule for a checkpoint saved by another number of ranks (docs/MULTI_GPU.md): its global
// batch is kept, shared by the ranks there are now, so training continues as it would have (the
// same items, noise and updates); when they cannot share it evenly the resume stops, naming both.
void Trainer::resume_ranks(const CheckpointState& s) {
    const int job_batch = data_->order().batch_size() / ranks();
    const int saved_batch = s.global_batch > 0 ? s.global_batch : job_batch * s.world_size;
    // The same number of ranks: the job's batch, as ever (a changed batch_size restarts the
    // epoch's order, data_order.h).
    if (s.world_size != ranks()) {
        if (saved_batch % ranks() != 0) {
            throw UsageError(format(
                "the checkpoint at step {} in {} was saved by {} rank(s) with a global batch of {} "
                "items; {} ranks cannot share it evenly. Resume with a number of ranks that "
                "divides {}, or start over with --fresh",
                s.step, run_.state_dir().string(), s.world_size, saved_batch, ranks(),
                saved_batch));
        }
        train_log().info(
            "the checkpoint at step {} was saved by {} rank(s); {} rank(s) go on with its "
            "global batch of {} items ({} each), so the run continues as it would have",
            s.step, s.world_size, ranks(), saved_batch, saved_batch / ranks());
        events_->record("resume_ranks", {{"step", s.step},
                                         {"saved_ranks", s.world_size},
                                         {"ranks", ranks()},
                                         {"global_batch", saved_batch}});
        data_->use_global_batch(saved_batch);
    }
    const int r = overrides_.group != nullptr ? overrides_.group->rank() : 0;
    // A rank the saving run did not have continues from rank 0's generator.
    const at::Tensor& rng =
        r > 0 && std::size_t(r) <= s.rng_ranks.size() ? s.rng_ranks[std::size_t(r) - 1] : s.rng_cpu;
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    cpu.set_state(rng);
}

std::vector<at::Tensor> Trainer::rank_rng_states() {
    const at::Tensor mine = at::detail::getDefaultCPUGenerator().get_state();
    if (overrides_.group == nullptr) return {mine};
    const std::string bytes(static_cast<const char*>(mine.data_ptr()),
                            static_cast<std::size_t>(mine.numel()));
    std::vector<at::Tensor> out;
    for (const std::string& b : overrides_.group->all_gather(bytes)) {
        at::Tensor t = at::empty({static_cast<std::int64_t>(b.size())}, at::kByte);
        std::memcpy(t.data_ptr(), b.data(), b.size());
        out.push_back(t);
    }
    return out;
}

// One sampling pass under `p`'s sampling knobs: every preview with a single denoising step,

}  // namespace loom
