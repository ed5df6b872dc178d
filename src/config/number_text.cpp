#include "number_text.h"

#include <cctype>
#include <charconv>
#include <system_error>

namespace loom::config::detail {

std::optional<long long> parse_integer_text(std::string_view text) {
    if (!text.empty() && text.front() == '+') text.remove_prefix(1);
    if (text.empty()) return std::nullopt;
    long long value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
}

std::optional<double> parse_float_text(std::string_view text) {
    if (!text.empty() && text.front() == '+') text.remove_prefix(1);
    if (text.empty()) return std::nullopt;
    // Only digits, one sign, a dot and an exponent: from_chars alone would also take "inf",
    // "nan" and hexadecimal forms.
    for (char c : text) {
        if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != 'E' &&
            c != '-' && c != '+') {
            return std::nullopt;
        }
    }
    double value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
}

std::string format_float(double value) {
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
    std::string text(buf, ec == std::errc() ? end : buf);
    // YAML 1.1 readers (PyYAML) need a dot to see a float, even before an exponent.
    if (text.find('.') == std::string::npos) {
        const std::size_t e = text.find_first_of("eE");
        if (e == std::string::npos)
            text += ".0";
        else
            text.insert(e, ".0");
    }
    return text;
}

std::string format_number(double value) {
    char buf[64];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
    return std::string(buf, ec == std::errc() ? end : buf);
}

}  // namespace loom::config::detail
