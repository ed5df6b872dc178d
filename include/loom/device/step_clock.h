#pragma once

// The clock the guard's measured choice times candidate plans with (train/preflight_probe.cpp;
// guard/measured_choice.cpp compares the figures).
//
// On cuda and cpu: wall-clock seconds, the device synchronized at both ends.
// On sim: a modelled time, as a memory-bound GPU spends it — the bytes the budgeted allocator
// handed out during the timed work at kSimBytesPerSecond, a fixed cost per allocation (each is a
// kernel's output: a launch) and the bytes copied from host memory at the host-to-device
// bandwidth (block streaming's fetches, the batches) — and the probe adds kSimMicroBatchSeconds
// per micro-batch (its synchronisation and data). The simulated device has no speed of its own
// (its kernels are the host's), so its wall clock measures the host and whatever else the host
// runs at that moment; the modelled time is the same on every host and under any load, which
// makes the measured choice on sim deterministic (issue 43: no test outcome may depend on the
// wall clock). It orders plans as a GPU does (issue 64): checkpointing's recompute, low_vram
// level 2's dequantized copies and level 3's streamed weights cost traffic, launches and copies;
// four micro-batches of 1 launch four times the kernels of one micro-batch of 4, so they cost
// more than the same bytes in one; and each streamed block costs its bytes over the host link.
// The constants keep an H100's proportions on the sim's slower memory: 3 TB/s of HBM against
// 5 µs a launch and 25 GB/s over PCIe becomes 10 GB/s, 1.5 ms and 83 MB/s.
// LOOM_SIM_HOST_TO_DEVICE_GBPS sets the modelled card's host link in GB/s (25 by default:
// PCIe 4.0 x16; 50 for PCIe 5.0, 450 for a Grace Hopper's NVLink-C2C), scaled the same way.
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
// The modelled GPU's memory bandwidth, which the other costs are scaled by: an H100's 3 TB/s.
inline constexpr double kModelledGpuBytesPerSecond = 3e12;
inline constexpr double kSimScale = kModelledGpuBytesPerSecond / kSimBytesPerSecond;  // 300
// A kernel launch: 5 µs on the GPU.
inline constexpr double kSimLaunchSeconds = 5e-6 * kSimScale;
// What a micro-batch costs beyond its kernels (synchronising, its batch's arrival): 50 launches.
inline constexpr double kSimMicroBatchSeconds = 50 * kSimLaunchSeconds;
// The host link of the modelled GPU (PCIe 4.0 x16), unless LOOM_SIM_HOST_TO_DEVICE_GBPS says.
inline constexpr double kModelledHostToDeviceGbps = 25.0;

class StepClock {
  public:
    // Which clock `device` is timed with (LOOM_STEP_CLOCK: unset or `auto`, `wall`, `traffic`;
    // anything else, or `traffic` off sim, is a loom::Error naming the variable).
    explicit StepClock(Device& device);

    void start();
    // Seconds since start(), wall or modelled.
    double seconds();
    // What one micro-batch costs beyond its timed work: kSimMicroBatchSeconds when modelled (the
    // wall clock sees it in the work), 0 otherwise.
    double micro_batch_seconds() const { return modelled_ ? kSimMicroBatchSeconds : 0.0; }
    // "wall" or "sim model": events and log lines say which clock gave a figure.
    const std::string& name() const { return name_; }
    bool modelled() const { return modelled_; }
    // The modelled host-to-device bandwidth on the sim's scale, in bytes per second.
    double host_to_device_bytes_per_second() const { return host_to_device_; }

  private:
    Device& device_;
    bool modelled_ = false;
    std::string name_;
    std::uint64_t start_bytes_ = 0;
    std::uint64_t start_allocations_ = 0;
    std::uint64_t start_copied_ = 0;
    double host_to_device_ = kModelledHostToDeviceGbps * 1e9 / kSimScale;
    double start_seconds_ = 0.0;
};

}  // namespace loom
