#pragma once

// CUDA graphs for work that repeats with one shape (perf.cuda_graphs): a batch-1 LoRA step is
// thousands of short kernels, and launching them one by one from the host is most of its time on
// a fast GPU. A capture records the kernels once; a replay launches them all in one call.
//
// run(key, work):
//   1st call of a key   `work` runs eagerly: the warm-up (cuBLAS handles, autograd's device
//                       threads and every other lazy initialisation must not happen inside a
//                       capture), and its memory peak tells what the capture will need;
//   2nd call            `work` is captured, then the capture is replayed (so the call does the
//                       work once, like the others);
//   later calls         the capture is replayed; `work` is not called.
// `work` must read and write only tensors that outlive the key (static buffers): a replay
// re-executes the same kernels on the same addresses. Anything that fails inside a capture (an
// OOM among them) abandons that capture, and the same work runs eagerly instead, so an OOM
// reaches the guard from an ordinary eager attempt, with the guard's retry semantics intact; the
// key is not captured again until clear(). A capture is attempted only when what is free holds
// the warm-up's peak with headroom.
//
// On sim and cpu there is nothing to capture: run() always runs `work` eagerly, which is how
// the static-buffer path of the caller is tested without a GPU.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace loom {

class Device;

class StepGraphs {
  public:
    virtual ~StepGraphs() = default;
    virtual void run(const std::string& key, const std::function<void()>& work) = 0;
    // Drops every capture and the memory pools they hold (after an OOM, or when the plan
    // changes what the work computes).
    virtual void clear() = 0;
    // Whether run() captures (CUDA) or always runs eagerly (sim, cpu).
    virtual bool captures() const = 0;
    // How many keys have a live capture.
    virtual std::size_t captured() const = 0;
};

std::unique_ptr<StepGraphs> make_step_graphs(Device& device);

}  // namespace loom
