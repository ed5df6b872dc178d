#include "loom/device/sim_allocator.h"

#include <ATen/core/Tensor.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <new>
#include <string>

#include "loom/core/byte_size.h"
#include "loom/device/faults.h"

namespace loom {

namespace {

thread_local int host_scope_depth = 0;

// Every block starts with this header; the tensor data follows at kHeaderBytes, which keeps the
// 64-byte alignment c10's CPU allocator guarantees. The DataPtr's context is the data pointer
// itself (c10's raw_allocate, used for kernel scratch buffers, requires it), so the deleter finds
// the header just before it.
struct BlockHeader {
    std::uint64_t bytes;
    std::uint32_t device_resident;
    std::uint32_t magic;
};
constexpr std::size_t kHeaderBytes = 64;
constexpr std::uint32_t kMagic = 0x6c6f6f6d;  // "loom"
static_assert(sizeof(BlockHeader) <= kHeaderBytes);

BlockHeader* header_of(void* data) {
    return reinterpret_cast<BlockHeader*>(static_cast<char*>(data) - kHeaderBytes);
}

// Raises `peak` to at least `value`.
void raise_peak(std::atomic<std::uint64_t>& peak, std::uint64_t value) {
    std::uint64_t seen = peak.load();
    while (seen < value && !peak.compare_exchange_weak(seen, value)) {
    }
}

}  // namespace

HostAllocations::HostAllocations() {
    ++host_scope_depth;
}
HostAllocations::~HostAllocations() {
    --host_scope_depth;
}
bool HostAllocations::active() {
    return host_scope_depth > 0;
}

SimAllocator& SimAllocator::install() {
    static SimAllocator* instance = [] {
        auto* a = new SimAllocator();  // static lifetime: c10 keeps the raw pointer
        // Priority above the default CPU allocator's (0) so no later default registration wins.
        c10::SetCPUAllocator(a, /*priority=*/10);
        return a;
    }();
    return *instance;
}

void SimAllocator::set_budget(std::uint64_t budget) {
    // current_ is not reset: device-resident blocks of an earlier session that are still alive
    // are still on the device, and their frees must find them counted.
    budget_.store(budget);
    device_thread_.store(std::this_thread::get_id());
    peak_.store(current_.load());
    device_allocations_.store(0);
    enabled_.store(true);
}

void SimAllocator::disable() {
    enabled_.store(false);
}

void SimAllocator::record(Event::Kind kind, std::uint64_t bytes, std::uint64_t allocated_after) {
    if (!recording_.load()) return;
    std::lock_guard<std::mutex> lock(history_mutex_);
    history_.push_back({kind, bytes, allocated_after});
}

void SimAllocator::start_recording() {
    std::lock_guard<std::mutex> lock(history_mutex_);
    history_.clear();
    recording_.store(true);
}

std::vector<SimAllocator::Event> SimAllocator::stop_recording() {
    recording_.store(false);
    std::lock_guard<std::mutex> lock(history_mutex_);
    return std::move(history_);
}

void SimAllocator::refuse(std::uint64_t bytes, std::uint64_t free, const std::string& why) {
    record(Event::Kind::kOom, bytes, current_.load());
    throw c10::OutOfMemoryError("sim out of memory" + why + ". Tried to allocate " +
                                format_bytes_human(bytes) + "; " + format_bytes_human(free) +
                                " free of " + format_bytes_human(budget_.load()) + " budget");
}

c10::DataPtr SimAllocator::allocate(size_t n) {
    // Only the device's thread allocates on the device, and only its host allocations meet
    // host faults: both in program order, whatever the other threads do.
    const bool device_thread = std::this_thread::get_id() == device_thread_.load();
    const bool device = enabled_.load() && device_thread && !HostScope::active() && n > 0;
    if (device) {
        const std::uint64_t budget = budget_.load();
        ++device_allocations_;
        if (auto rule = fault_injector().on_device_allocation(n)) {
            const std::uint64_t free =
                fault_injector().dirty() ? 0 : budget - std::min(budget, current_.load());
            refuse(n, free, " (injected: " + *rule + ")");
        }
        // Reserve the bytes first so concurrent allocations cannot both pass the check.
        std::uint64_t current = current_.load();
        while (true) {
            if (current + n > budget) refuse(n, budget - std::min(budget, current), "");
            if (current_.compare_exchange_weak(current, current + n)) break;
        }
        raise_peak(peak_, current + n);
        allocated_total_ += n;
        record(Event::Kind::kAlloc, n, current + n);
    } else if (n > 0 && enabled_.load() && device_thread) {
        if (auto rule = fault_injector().on_host_allocation(n)) {
            // The words c10's DefaultCPUAllocator uses when malloc fails: host RAM, not VRAM.
            throw c10::Error(c10::SourceLocation{__func__, __FILE__, __LINE__},
                             "DefaultCPUAllocator: can't allocate memory: you tried to allocate " +
                                 std::to_string(n) +
                                 " bytes. Error code 12 (Cannot allocate "
                                 "memory) (injected: " +
                                 *rule + ")");
        }
    }
    void* base = nullptr;
    try {
        base = c10::alloc_cpu(n + kHeaderBytes);
    } catch (...) {
        if (device) current_ -= n;
        throw;
    }
    auto* header = static_cast<BlockHeader*>(base);
    header->bytes = n;
    header->device_resident = device ? 1 : 0;
    header->magic = kMagic;
    void* data = static_cast<char*>(base) + kHeaderBytes;
    return {data, data, &SimAllocator::deleter, c10::Device(c10::DeviceType::CPU)};
}

void SimAllocator::deleter(void* data) {
    BlockHeader* header = header_of(data);
    if (header->device_resident != 0) {
        SimAllocator& self = install();
        const std::uint64_t after = (self.current_ -= header->bytes);
        self.record(Event::Kind::kFree, header->bytes, after);
    }
    c10::free_cpu(header);
}

void SimAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
    default_copy_data(dest, src, count);
}

bool SimAllocator::is_device_resident(const at::Tensor& tensor) {
    if (!tensor.defined() || !tensor.has_storage()) return false;
    const c10::DataPtr& ptr = tensor.storage().data_ptr();
    if (ptr.get_deleter() != &SimAllocator::deleter) return false;
    const BlockHeader* header = header_of(ptr.get());
    return header->magic == kMagic && header->device_resident != 0;
}

}  // namespace loom
