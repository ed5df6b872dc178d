#include "loom/core/format.h"

#include <charconv>
#include <iomanip>

namespace loom::detail {

void apply_spec(std::ostringstream& out, std::string_view spec,
                void (*write)(std::ostream&, const void*), const void* value) {
    std::ostringstream field;
    std::size_t i = 0;
    char align = '\0';
    if (i < spec.size() && (spec[i] == '<' || spec[i] == '>')) align = spec[i++];
    int width = 0;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9')
        width = width * 10 + (spec[i++] - '0');
    if (i < spec.size() && spec[i] == '.') {
        ++i;
        int precision = 0;
        while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
            precision = precision * 10 + (spec[i++] - '0');
        }
        field << std::setprecision(precision);
    }
    if (i < spec.size()) {
        switch (spec[i]) {
            case 'f': field << std::fixed; break;
            case 'e': field << std::scientific; break;
            case 'x': field << std::hex; break;
            default: break;  // 'g', 'd': the stream defaults
        }
    }
    write(field, value);
    const std::string text = field.str();
    const std::size_t pad = width > static_cast<int>(text.size()) ? width - text.size() : 0;
    // Numbers align right by default, like fmt; everything is text here, so '<' is the default.
    if (align == '>')
        out << std::string(pad, ' ') << text;
    else
        out << text << std::string(pad, ' ');
}

std::string format_impl(
    std::string_view pattern,
    const std::vector<std::pair<void (*)(std::ostream&, const void*), const void*>>& args) {
    std::ostringstream out;
    std::size_t next = 0;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '{' && i + 1 < pattern.size() && pattern[i + 1] == '{') {
            out << '{';
            ++i;
        } else if (c == '}' && i + 1 < pattern.size() && pattern[i + 1] == '}') {
            out << '}';
            ++i;
        } else if (c == '{') {
            const std::size_t close = pattern.find('}', i);
            if (close == std::string_view::npos) {
                out << pattern.substr(i);
                break;
            }
            std::string_view inside = pattern.substr(i + 1, close - i - 1);
            if (next < args.size()) {
                const std::string_view spec =
                    (!inside.empty() && inside.front() == ':') ? inside.substr(1) : "";
                apply_spec(out, spec, args[next].first, args[next].second);
                ++next;
            } else {
                out << "{?}";
            }
            i = close;
        } else {
            out << c;
        }
    }
    for (; next < args.size(); ++next) {
        out << ' ';
        args[next].first(out, args[next].second);
    }
    return out.str();
}

}  // namespace loom::detail
