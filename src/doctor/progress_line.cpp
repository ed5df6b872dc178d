// Progress lines (progress_line.h): tqdm bars and loom's step lines.

#include "progress_line.h"

#include "log_text.h"

namespace loom::doctor::detail {

std::optional<BarUpdate> parse_tqdm(std::string_view s) {
    const std::size_t bar = s.find("%|");
    if (bar == std::string_view::npos) return std::nullopt;
    const std::size_t bar_end = s.find('|', bar + 2);
    if (bar_end == std::string_view::npos) return std::nullopt;
    std::size_t i = bar_end + 1;
    while (i < s.size() && s[i] == ' ') ++i;
    const std::optional<std::int64_t> n = leading_int(s.substr(i));
    if (!n) return std::nullopt;
    while (i < s.size() && is_digit(s[i])) ++i;
    if (i >= s.size() || s[i] != '/') return std::nullopt;
    std::size_t desc_end = bar;
    while (desc_end > 0 && (is_digit(s[desc_end - 1]) || s[desc_end - 1] == ' ')) --desc_end;
    std::string_view desc = trim(s.substr(0, desc_end));
    if (!desc.empty() && desc.back() == ':') desc.remove_suffix(1);
    const std::size_t bracket = s.find('[', i);
    return BarUpdate{*n, trim(desc),
                     bracket == std::string_view::npos ? std::string_view{} : s.substr(bracket)};
}

std::optional<std::int64_t> parse_loom_step(std::string_view s) {
    constexpr std::string_view kStep = "step ";
    for (std::size_t pos = s.find(kStep); pos != std::string_view::npos;
         pos = s.find(kStep, pos + 1)) {
        if (pos > 0 && s[pos - 1] != ' ') continue;
        std::string_view rest = s.substr(pos + kStep.size());
        const std::optional<std::int64_t> n = leading_int(rest);
        if (!n) continue;
        const std::size_t slash = rest.find('/');
        const std::size_t loss = rest.find(" loss ");
        if (slash != std::string_view::npos && loss != std::string_view::npos && slash < loss) {
            return n;
        }
    }
    return std::nullopt;
}

}  // namespace loom::doctor::detail
