#pragma once

// A small "{}"-style formatter for log lines and messages. loom does not use fmt in headers:
// the torch wheel ships its own fmt (12.x) in its include folder, which would shadow Debian's fmt
// (9.x, the one spdlog is built against) in every file that sees torch's headers.
//
// Placeholders: "{}" (operator<<), or "{:SPEC}" with SPEC = [<|>][width][.precision][f|e|g|d|x].
// "{{" and "}}" are literal braces. Extra arguments are appended; missing ones leave "{?}".

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

namespace detail {

// Appends `value` to `out` honouring `spec` (the text after ':' in "{:spec}").
void apply_spec(std::ostringstream& out, std::string_view spec,
                void (*write)(std::ostream&, const void*), const void* value);

std::string format_impl(
    std::string_view pattern,
    const std::vector<std::pair<void (*)(std::ostream&, const void*), const void*>>& args);

template <class T>
void write_value(std::ostream& out, const void* value) {
    out << *static_cast<const T*>(value);
}

}  // namespace detail

template <class... Args>
std::string format(std::string_view pattern, const Args&... args) {
    return detail::format_impl(pattern, {{&detail::write_value<Args>, &args}...});
}

}  // namespace loom
