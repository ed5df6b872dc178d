#pragma once

// Small text helpers shared by the layers that read user text (captions, config values).

#include <string_view>

namespace loom {

// ASCII whitespace: space, \t, \n, \r, \f, \v (what std::isspace means in the "C" locale, without
// its locale dependence).
constexpr bool is_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// `s` without leading and trailing ASCII whitespace; a view into `s`.
constexpr std::string_view trim_ascii_space(std::string_view s) {
    while (!s.empty() && is_ascii_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
    return s;
}

}  // namespace loom
