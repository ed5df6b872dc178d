#include "loom/device/device_spec.h"

#include <cctype>

#include "loom/core/error.h"

namespace loom {

std::string DeviceSpec::to_string() const {
    switch (kind) {
        case DeviceKind::kCpu: return "cpu";
        case DeviceKind::kSim: return "sim";
        case DeviceKind::kCuda: return "cuda:" + std::to_string(index);
    }
    return "cpu";
}

DeviceSpec parse_device_spec(std::string_view text) {
    if (text == "cpu") return {DeviceKind::kCpu, 0};
    if (text == "sim") return {DeviceKind::kSim, 0};
    if (text == "cuda") return {DeviceKind::kCuda, 0};
    if (text.substr(0, 5) == "cuda:" && text.size() > 5 && text.size() <= 8) {
        int index = 0;
        bool digits = true;
        for (char c : text.substr(5)) {
            digits = digits && std::isdigit(static_cast<unsigned char>(c));
            index = index * 10 + (c - '0');
        }
        if (digits) return {DeviceKind::kCuda, index};
    }
    throw Error("invalid device '" + std::string(text) + "' (use cuda, cuda:N, cpu or sim)");
}

}  // namespace loom
