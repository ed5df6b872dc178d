#pragma once

// The clock the guard's measured choice times candidate plans with (train/preflight_probe.cpp;
// guard/measured_choice.cpp compares the figures).
//
// On cuda and cpu: wall-clock seconds, the device synchronized at both ends.
// On sim: a modelled time — the bytes the budgeted allocator handed out during the timed work,
// at kSimBytesPerSecond. The simulated device has no speed of its own (its kernels are the
// host's), so its wall clock measures the host and whatever else the host runs at that moment;
// the modelled time is the same on every host and under any load, which makes the measured
// choice on sim deterministic (issue 43: no test outcome may depend on the wall clock). It
// orders plans as a memory-bound GPU step does: checkpointing's recompute, low_vram level 2's
// dequantized copies, level 3's streamed weights and extra micro-batches all allocate more.
// LOOM_STEP_CLOCK=wall times sim by the wall clock too (benchmarks of the host itself);
// `traffic` asks for the modelled time, which only sim can give.
//
// Not thread-safe: one timed piece of work at a time.

#include <cstdint>
#include <string>

namespace loom {

class Device;

// Modelled bytes per second of the sim device: 10 GB/s, so a tiny test step reads in ms.
inline constexpr double kSimBytesPerSecond = 1e10;

class StepClock {
  public:
    // Which clock `device` is timed with (LOOM_STEP_CLOCK: unset or `auto`, `wall`, `traffic`;
    // anything else, or `traffic` off sim, is a loom::Error naming the variable).
    explicit StepClock(Device& device);

    void start();
    // Seconds since start(), wall or modelled.
    double seconds();
    // "wall" or "sim allocation traffic": events and log lines say which clock gave a figure.
    const std::string& name() const { return name_; }
    bool modelled() const { return modelled_; }

  private:
    Device& device_;
    bool modelled_ = false;
    std::string name_;
    std::uint64_t start_bytes_ = 0;
    double start_seconds_ = 0.0;
};

}  // namespace loom
