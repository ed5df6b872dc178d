#pragma once

// The ranks of a data-parallel run as one c10d process group (PyTorch's distributed runtime, as
// LibTorch ships it). Rank 0 hosts the rendezvous (a c10d TCPStore at MASTER_ADDR:MASTER_PORT),
// the others connect to it; collectives run on Gloo, over host tensors (cpu and sim keep
// everything the ranks exchange on the host). Every wait is bounded by the group's timeout: a
// rank that died or stopped answering is a DistError on the others after it, never a hang.
//
// Gloo's headers are not in the torch wheel (its code is, in libtorch_cpu): loom compiles this
// against Debian's libgloo-dev. Built without them, open() throws saying what to install. On
// CUDA the gradients are summed with NCCL (ProcessGroupNCCL, in libtorch_cuda, with the nccl.h
// of the wheel's nvidia-nccl package) when the build found NCCL's header.

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/dist/rank.h"

namespace loom::dist {

// A collective that failed: a rank went away, the rendezvous did not complete, a timeout.
class DistError : public Error {
  public:
    using Error::Error;
};

bool process_groups_supported();

class ProcessGroup {
  public:
    // Joins the group `facts` describe; waits up to `timeout` for every rank to arrive.
    static std::unique_ptr<ProcessGroup> open(const RankFacts& facts,
                                              std::chrono::milliseconds timeout);
    ~ProcessGroup();
    ProcessGroup(const ProcessGroup&) = delete;
    ProcessGroup& operator=(const ProcessGroup&) = delete;

    int rank() const { return facts_.rank; }
    int size() const { return facts_.world_size; }
    const RankFacts& facts() const { return facts_; }

    // Sums a host tensor over the ranks, in place (every rank gets the sum).
    void all_reduce_sum(at::Tensor& host);
    // Whether tensors on `device` are summed where they are: CUDA in a build with NCCL's
    // headers (the device's own collectives, no copy through the host). Otherwise every
    // exchange goes through host memory on Gloo.
    bool device_collectives(const c10::Device& device) const;
    // Sums a CUDA tensor over the ranks in place with NCCL (device_collectives must be true);
    // NCCL's communicator is made on first use, over the same rendezvous.
    void all_reduce_sum_on_device(at::Tensor& device_tensor);
    // Whether any rank said true: the collective outcome of an attempt.
    bool any(bool here);
    // Every rank's text, in rank order, on every rank.
    std::vector<std::string> all_gather(const std::string& mine);
    // `root`'s text on every rank (the others' `text` is ignored).
    std::string broadcast(const std::string& text, int root);
    void barrier();

  private:
    struct Impl;
    ProcessGroup(RankFacts facts, std::unique_ptr<Impl> impl);
    RankFacts facts_;
    std::unique_ptr<Impl> impl_;
};

}  // namespace loom::dist
