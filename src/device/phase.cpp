#include "loom/device/phase.h"

#include <array>
#include <utility>

namespace loom {

namespace {
constexpr std::array<std::pair<Phase, const char*>, 7> kNames{{
    {Phase::kLoad, "load"},
    {Phase::kCache, "cache"},
    {Phase::kProbe, "probe"},
    {Phase::kFirstSample, "first_sample"},
    {Phase::kSample, "sample"},
    {Phase::kTrainStep, "train_step"},
    {Phase::kSave, "save"},
}};
}  // namespace

const char* to_string(Phase phase) {
    for (const auto& [p, name] : kNames) {
        if (p == phase) return name;
    }
    return "none";
}

std::optional<Phase> parse_phase(std::string_view text) {
    for (const auto& [p, name] : kNames) {
        if (text == name) return p;
    }
    return std::nullopt;
}

std::string phase_names() {
    std::string out;
    for (const auto& [p, name] : kNames) {
        if (!out.empty()) out += ", ";
        out += name;
    }
    return out;
}

}  // namespace loom
