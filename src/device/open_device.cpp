#include "device_impls.h"
#include "loom/core/error.h"

namespace loom {

std::unique_ptr<Device> open_device(const DeviceSpec& spec,
                                    std::optional<std::uint64_t> vram_limit) {
    switch (spec.kind) {
        case DeviceKind::kCpu: return std::make_unique<CpuDevice>();
        case DeviceKind::kSim:
            if (!vram_limit || *vram_limit == 0) {
                throw Error(
                    "the sim device needs a memory budget: pass --vram SIZE (e.g. --vram 96MiB) "
                    "or set oom.vram_limit in the job");
            }
            return std::make_unique<SimDevice>(*vram_limit);
        case DeviceKind::kCuda: return std::make_unique<CudaDevice>(spec.index, vram_limit);
    }
    throw Error("unknown device kind");
}

}  // namespace loom
