#include "loom/dist/process_group.h"

#include <ATen/ATen.h>

#include <cstring>

#ifndef LOOM_HAVE_GLOO
#define LOOM_HAVE_GLOO 0
#endif
#ifndef LOOM_HAVE_NCCL
#define LOOM_HAVE_NCCL 0
#endif
#if LOOM_HAVE_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#if LOOM_HAVE_GLOO && LOOM_HAVE_NCCL
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace loom::dist {

bool process_groups_supported() {
    return LOOM_HAVE_GLOO != 0;
}

#if LOOM_HAVE_GLOO

struct ProcessGroup::Impl {
    c10::intrusive_ptr<c10d::Store> store;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
    std::chrono::milliseconds timeout;
#if LOOM_HAVE_NCCL
    c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;  // made on the first device all-reduce
#endif
};

namespace {

// Runs one collective to its end; a failure (a peer gone, the timeout) becomes a DistError that
// says which rank saw it and what to do.
template <class F>
auto guarded(int rank, const char* what, std::chrono::milliseconds timeout, F&& f) {
    const auto fail = [&](const std::string& why) {
        return DistError("rank " + std::to_string(rank) + ": " + what + " failed (" + why +
                         "); another rank died or stopped answering within " +
                         std::to_string(timeout.count()) + " ms");
    };
    try {
        return f();
    } catch (const c10::Error& e) {
        throw fail(e.what_without_backtrace());
    } catch (const std::exception& e) {  // Gloo's own exceptions (a closed connection)
        throw fail(e.what());
    }
}

at::Tensor bytes_of(const std::string& text, std::int64_t size) {
    at::Tensor t = at::zeros({std::max<std::int64_t>(size, 1)}, at::kByte);
    std::memcpy(t.data_ptr(), text.data(), text.size());
    return t;
}

}  // namespace

std::unique_ptr<ProcessGroup> ProcessGroup::open(const RankFacts& facts,
                                                 std::chrono::milliseconds timeout) {
    auto impl = std::make_unique<Impl>();
    impl->timeout = timeout;
    try {
        c10d::TCPStoreOptions options;
        options.port = static_cast<std::uint16_t>(facts.master_port);
        options.isServer = facts.leader();
        options.numWorkers = facts.world_size;
        options.waitWorkers = true;
        options.timeout = timeout;
        impl->store = c10::make_intrusive<c10d::TCPStore>(facts.master_addr, options);
        auto gloo = c10d::ProcessGroupGloo::Options::create(timeout);
        // One machine: the loopback interface; several: the interface the hostname resolves to.
        const bool loopback = facts.master_addr == "127.0.0.1" ||
                              facts.master_addr == "localhost" || facts.master_addr == "::1";
        gloo->devices.push_back(loopback
                                    ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                    : c10d::ProcessGroupGloo::createDefaultDevice());
        impl->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl->store, facts.rank,
                                                                  facts.world_size, gloo);
    } catch (const c10::Error& e) {
        throw DistError("rank " + std::to_string(facts.rank) + " of " +
                        std::to_string(facts.world_size) + ": cannot join the process group at " +
                        facts.master_addr + ":" + std::to_string(facts.master_port) + " (" +
                        e.what_without_backtrace() +
                        "); check MASTER_ADDR/MASTER_PORT and that every rank was started");
    }
    return std::unique_ptr<ProcessGroup>(new ProcessGroup(facts, std::move(impl)));
}

void ProcessGroup::all_reduce_sum(at::Tensor& host) {
    guarded(rank(), "all-reduce", impl_->timeout, [&] {
        std::vector<at::Tensor> t = {host};
        impl_->group->allreduce(t)->wait(impl_->timeout);
    });
}

bool ProcessGroup::device_collectives(const c10::Device& device) const {
    return LOOM_HAVE_NCCL != 0 && device.is_cuda();
}

void ProcessGroup::all_reduce_sum_on_device(at::Tensor& device_tensor) {
#if LOOM_HAVE_NCCL
    guarded(rank(), "all-reduce on the device (NCCL)", impl_->timeout, [&] {
        if (!impl_->nccl) {
            auto options = c10d::ProcessGroupNCCL::Options::create();
            options->timeout = impl_->timeout;
            // Its own keys in the shared store: Gloo's and NCCL's rendezvous never collide.
            impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
                c10::make_intrusive<c10d::PrefixStore>("nccl", impl_->store), rank(), size(),
                options);
        }
        std::vector<at::Tensor> t = {device_tensor};
        impl_->nccl->allreduce(t)->wait(impl_->timeout);
    });
#else
    (void)device_tensor;
    throw DistError(
        "this loom was built without NCCL's header; device tensors are summed "
        "through the host");
#endif
}

bool ProcessGroup::any(bool here) {
    return guarded(rank(), "agreeing on the attempt's outcome", impl_->timeout, [&] {
        std::vector<at::Tensor> t = {at::full({1}, here ? 1 : 0, at::kInt)};
        c10d::AllreduceOptions options;
        options.reduceOp = c10d::ReduceOp::MAX;
        impl_->group->allreduce(t, options)->wait(impl_->timeout);
        return t[0].item<int>() != 0;
    });
}

std::vector<std::string> ProcessGroup::all_gather(const std::string& mine) {
    return guarded(rank(), "gathering the ranks' reports", impl_->timeout, [&] {
        const auto gather = [&](const at::Tensor& input) {
            std::vector<std::vector<at::Tensor>> out(1);
            for (int r = 0; r < size(); ++r) out[0].push_back(at::empty_like(input));
            std::vector<at::Tensor> in = {input};
            impl_->group->allgather(out, in)->wait(impl_->timeout);
            return out[0];
        };
        const std::vector<at::Tensor> lengths =
            gather(at::full({1}, static_cast<std::int64_t>(mine.size()), at::kLong));
        std::int64_t longest = 0;
        for (const at::Tensor& l : lengths) longest = std::max(longest, l.item<std::int64_t>());
        const std::vector<at::Tensor> texts = gather(bytes_of(mine, longest));
        std::vector<std::string> out;
        for (int r = 0; r < size(); ++r) {
            const auto n = static_cast<std::size_t>(lengths[std::size_t(r)].item<std::int64_t>());
            out.emplace_back(static_cast<const char*>(texts[std::size_t(r)].data_ptr()), n);
        }
        return out;
    });
}

std::string ProcessGroup::broadcast(const std::string& text, int root) {
    return guarded(rank(), "receiving rank 0's decision", impl_->timeout, [&] {
        c10d::BroadcastOptions options;
        options.rootRank = root;
        std::vector<at::Tensor> length = {
            at::full({1}, static_cast<std::int64_t>(rank() == root ? text.size() : 0), at::kLong)};
        impl_->group->broadcast(length, options)->wait(impl_->timeout);
        const std::int64_t n = length[0].item<std::int64_t>();
        std::vector<at::Tensor> bytes = {bytes_of(rank() == root ? text : std::string(), n)};
        impl_->group->broadcast(bytes, options)->wait(impl_->timeout);
        return std::string(static_cast<const char*>(bytes[0].data_ptr()),
                           static_cast<std::size_t>(n));
    });
}

void ProcessGroup::barrier() {
    guarded(rank(), "the barrier", impl_->timeout,
            [&] { impl_->group->barrier()->wait(impl_->timeout); });
}

#else

struct ProcessGroup::Impl {};

std::unique_ptr<ProcessGroup> ProcessGroup::open(const RankFacts&, std::chrono::milliseconds) {
    throw DistError(
        "this loom was built without Gloo's headers, so it cannot train on several processes; "
        "install libgloo-dev and rebuild loom");
}

void ProcessGroup::all_reduce_sum(at::Tensor&) {}
bool ProcessGroup::device_collectives(const c10::Device&) const {
    return false;
}
void ProcessGroup::all_reduce_sum_on_device(at::Tensor&) {}
bool ProcessGroup::any(bool here) {
    return here;
}
std::vector<std::string> ProcessGroup::all_gather(const std::string& mine) {
    return {mine};
}
std::string ProcessGroup::broadcast(const std::string& text, int) {
    return text;
}
void ProcessGroup::barrier() {}

#endif

ProcessGroup::ProcessGroup(RankFacts facts, std::unique_ptr<Impl> impl)
    : facts_(std::move(facts)), impl_(std::move(impl)) {}

ProcessGroup::~ProcessGroup() = default;

}  // namespace loom::dist
