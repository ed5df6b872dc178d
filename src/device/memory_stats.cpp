#include "loom/device/memory_stats.h"

#include "loom/core/byte_size.h"

namespace loom {

std::string MemoryStats::to_string() const {
    return "allocated " + format_bytes_human(allocated) + ", reserved " +
           format_bytes_human(reserved) + ", peak " + format_bytes_human(peak_allocated) +
           ", free " + format_bytes_human(free) + " of " + format_bytes_human(total);
}

}  // namespace loom
