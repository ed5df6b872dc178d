#pragma once

// The plans, OOM events and histories the ladder-policy tests decide from: an image job of
// batch 4 over three buckets, its training and sampling OOMs, and the checks they share.

#include <gtest/gtest.h>

#include <cstdint>

#include "loom/core/byte_size.h"
#include "loom/guard/ladder_policy.h"

namespace loom::guard {

inline Plan image_plan() {
    Plan p;
    p.gradient_checkpointing = false;
    p.batch_size = 4;
    p.gradient_accumulation = 1;
    p.sample.width = 512;
    p.sample.height = 512;
    return p;
}

inline OomEvent train_oom(std::int64_t step = 1) {
    OomEvent e;
    e.phase = Phase::kTrainStep;
    e.work = Work::kTrain;
    e.step = step;
    e.kind = OomKind::kDevice;
    e.memory.total = 96 * kMiB;
    e.memory.allocated = 80 * kMiB;
    e.memory.reserved = 80 * kMiB;
    e.memory.free = 16 * kMiB;
    e.buckets.active = 3;
    e.buckets.largest_area = 768 * 768;
    e.buckets.next_cap = 512 * 768;
    e.buckets.smallest_side = 512;
    e.bucket = std::make_pair(768, 768);
    return e;
}

inline OomEvent sample_oom() {
    OomEvent e = train_oom();
    e.phase = Phase::kFirstSample;
    e.work = Work::kSample;
    e.step.reset();
    e.bucket.reset();
    return e;
}

// Checkpointing on, batch 1 × 4: no batch rung left.
inline Plan conservative_plan() {
    Plan p = image_plan();
    p.gradient_checkpointing = true;
    p.batch_size = 1;
    p.gradient_accumulation = 4;
    return p;
}

// A training OOM with a single bucket left: no bucket rung either.
inline OomEvent single_bucket_oom() {
    OomEvent e = train_oom();
    e.buckets.active = 1;
    e.buckets.next_cap.reset();
    return e;
}

inline History after_steps(std::int64_t steps) {
    History h;
    h.steps_succeeded = steps;
    return h;
}

inline PolicyContext image_context() {
    PolicyContext c;
    c.prompt_count = 2;
    c.guidance = true;
    return c;
}

// Training settings: everything but sampling.
inline void expect_training_untouched(const Plan& a, const Plan& b) {
    EXPECT_EQ(a.gradient_checkpointing, b.gradient_checkpointing);
    EXPECT_EQ(a.batch_size, b.batch_size);
    EXPECT_EQ(a.gradient_accumulation, b.gradient_accumulation);
    EXPECT_EQ(a.max_bucket_pixels, b.max_bucket_pixels);
    EXPECT_EQ(a.frames, b.frames);
    EXPECT_EQ(a.low_vram, b.low_vram);
}

}  // namespace loom::guard
