#include "loom/guard/plan_store.h"

#include "loom/core/byte_size.h"

namespace loom::guard {

std::string describe(const PlanKey& key) {
    std::string s = key.arch + " " + key.model_fingerprint.substr(0, 12) + " on " +
                    key.device_name + " (" + format_bytes_human(key.total_memory) + "), " +
                    key.dtype + ", rank " + std::to_string(key.rank) + ", " +
                    std::to_string(key.max_resolution) + " px";
    if (key.frames > 1) s += ", " + std::to_string(key.frames) + " frames";
    return s + ", " + key.qtype;
}

}  // namespace loom::guard
