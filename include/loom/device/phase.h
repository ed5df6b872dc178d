#pragma once

// The phases of a training job (DESIGN.md "Recovery specification"). The guard marks the current
// phase; fault injection fires by phase; events name the phase an OOM happened in.

#include <optional>
#include <string>
#include <string_view>

namespace loom {

enum class Phase { kNone, kLoad, kCache, kProbe, kFirstSample, kSample, kTrainStep, kSave };

// "load", "cache", "probe", "first_sample", "sample", "train_step", "save" ("none" for kNone).
const char* to_string(Phase phase);

// The phase named `text`, or nullopt.
std::optional<Phase> parse_phase(std::string_view text);

// "load, cache, probe, first_sample, sample, train_step, save", for messages.
std::string phase_names();

}  // namespace loom
