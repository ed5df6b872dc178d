#pragma once

// Model architecture names of the ai-toolkit schema (`model.arch`, and the legacy is_* flags),
// and which of them loom trains. Pure data: the model layer's registry implements the trainable
// ones and a test keeps the two lists in step.

#include <string>
#include <string_view>
#include <vector>

namespace loom::config {

struct ArchName {
    const char* name;
    bool trainable;  // loom can train a LoRA for it
    // A video model loom trains: datasets may hold clips, whose frame counts are 1 + 4k (Wan's
    // VAE compresses 4 frames into one after the first).
    bool video = false;
};

// Every arch string ai-toolkit accepts.
const std::vector<ArchName>& known_archs();

// nullptr when `name` is not an ai-toolkit arch.
const ArchName* find_arch(std::string_view name);

// Names of the trainable archs, comma-separated, for messages.
std::string trainable_arch_list();

}  // namespace loom::config
