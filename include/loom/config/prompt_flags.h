#pragma once

// ai-toolkit's flags inside a preview prompt: "make the person smile --ctrl_img /x/p1.jpg --w 768"
// is the prompt text before the first "--", then "--flag value" pairs, as
// toolkit/config_modules.py GenerateImageConfig._process_prompt_string splits it (so a prompt
// that means "--" literally is cut there too, as in ai-toolkit). The flags loom applies are
// parsed here; the rest are named in `unused` for a warning.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom::config {

struct PromptFlags {
    std::string prompt;                    // the text before the first "--", trimmed
    std::optional<std::string> neg;        // --n
    std::optional<int> width;              // --w
    std::optional<int> height;             // --h
    std::optional<std::int64_t> seed;      // --d, --seed
    std::optional<double> guidance_scale;  // --l, --cfg
    std::optional<int> steps;              // --s, --steps
    std::optional<int> frames;             // --frames, --num_frames
    std::optional<int> fps;                // --fps
    std::optional<std::string> ctrl_img;   // --ctrl_img: a Kontext preview's control image
    std::vector<std::string> unused;       // flags loom does not apply (--m, --p2, --gr, ...)
};

// Throws loom::Error naming the prompt and the flag when a number flag's value is not a number
// ("--w big").
PromptFlags parse_prompt_flags(const std::string& text);

}  // namespace loom::config
