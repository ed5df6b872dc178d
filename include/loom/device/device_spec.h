#pragma once

// Device names as users write them: "cuda", "cuda:N", "cpu", "sim".

#include <string>
#include <string_view>

namespace loom {

enum class DeviceKind { kCpu, kCuda, kSim };

struct DeviceSpec {
    DeviceKind kind = DeviceKind::kCpu;
    int index = 0;  // CUDA ordinal; 0 for cpu and sim

    std::string to_string() const;  // "cuda:1", "cpu", "sim"
    bool operator==(const DeviceSpec& o) const { return kind == o.kind && index == o.index; }
};

// Throws loom::Error naming the text and the accepted forms.
DeviceSpec parse_device_spec(std::string_view text);

}  // namespace loom
