#include "loom/config/prompt_flags.h"

#include <cerrno>
#include <cstdlib>
#include <type_traits>

#include "loom/core/error.h"
#include "loom/core/text.h"

namespace loom::config {

namespace {

template <class T>
T number(const std::string& text, const std::string& flag, const std::string& value) {
    const std::string v(trim_ascii_space(value));
    char* end = nullptr;
    errno = 0;
    const double parsed = std::strtod(v.c_str(), &end);
    const bool integral = std::is_integral_v<T>;
    if (v.empty() || end != v.c_str() + v.size() || errno != 0 ||
        (integral && parsed != static_cast<double>(static_cast<std::int64_t>(parsed)))) {
        throw Error("sample prompt '" + text + "': --" + flag + " takes " +
                    (integral ? "a whole number" : "a number") + ", not '" + v +
                    "'; fix the flag or remove it");
    }
    return static_cast<T>(parsed);
}

}  // namespace

PromptFlags parse_prompt_flags(const std::string& text) {
    PromptFlags out;
    const std::string whole(trim_ascii_space(text));
    std::size_t at = whole.find("--");
    out.prompt = std::string(trim_ascii_space(whole.substr(0, at)));
    while (at != std::string::npos) {
        const std::size_t next = whole.find("--", at + 2);
        const std::string part =
            whole.substr(at + 2, next == std::string::npos ? next : next - at - 2);
        at = next;
        // ai-toolkit: the flag is the part up to its first space, the value the rest, trimmed.
        const std::size_t space = part.find(' ');
        const std::string flag(trim_ascii_space(part.substr(0, space)));
        const std::string value = space == std::string::npos
                                      ? std::string()
                                      : std::string(trim_ascii_space(part.substr(space)));
        if (flag == "n") {
            out.neg = value;
        } else if (flag == "w") {
            out.width = number<int>(text, flag, value);
        } else if (flag == "h") {
            out.height = number<int>(text, flag, value);
        } else if (flag == "d" || flag == "seed") {
            out.seed = number<std::int64_t>(text, flag, value);
        } else if (flag == "l" || flag == "cfg") {
            out.guidance_scale = number<double>(text, flag, value);
        } else if (flag == "s" || flag == "steps") {
            out.steps = number<int>(text, flag, value);
        } else if (flag == "frames" || flag == "num_frames") {
            out.frames = number<int>(text, flag, value);
        } else if (flag == "fps") {
            out.fps = number<int>(text, flag, value);
        } else if (flag == "ctrl_img") {
            out.ctrl_img = value;
        } else {
            out.unused.push_back("--" + flag);
        }
    }
    return out;
}

}  // namespace loom::config
