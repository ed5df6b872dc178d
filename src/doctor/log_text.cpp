// Small text helpers of `loom doctor` (log_text.h): the byte-level reading every recogniser of
// log_scanner.cpp builds on.

#include "log_text.h"

#include <cstdlib>

#include "loom/core/utf8.h"

namespace loom::doctor::detail {

namespace {

constexpr std::size_t kMaxEvidenceText = 240;  // bytes of a line kept as evidence

}  // namespace

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
        s.remove_suffix(1);
    }
    return s;
}

std::string lower_ascii(std::string_view s) {
    std::string out(s);
    for (char& c : out) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
}

std::string strip_ansi(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\x1b' && i + 1 < s.size() && s[i + 1] == '[') {
            i += 2;
            while (i < s.size() && !(s[i] >= '@' && s[i] <= '~')) ++i;
            continue;
        }
        out.push_back(s[i]);
    }
    return out;
}

std::string evidence_text(std::string_view s) {
    s = trim(s);
    bool truncated = false;
    if (s.size() > kMaxEvidenceText) {
        std::size_t cut = kMaxEvidenceText;
        while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
        s = s.substr(0, cut);
        truncated = true;
    }
    std::string out;
    while (!s.empty()) {
        const std::optional<TextPosition> bad = find_invalid_utf8(s);
        const std::size_t good = bad ? bad->offset : s.size();
        out.append(s.substr(0, good));
        if (!bad) break;
        out.append("\xEF\xBF\xBD");
        s.remove_prefix(good + 1);
    }
    if (truncated) out += "...";
    return out;
}

std::optional<std::int64_t> leading_int(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size() && (s[i] == '"' || s[i] == '\'' || s[i] == ' ')) ++i;
    const std::size_t start = i;
    while (i < s.size() && is_digit(s[i]) && i - start < 18) ++i;
    if (i == start) return std::nullopt;
    return std::strtoll(std::string(s.substr(start, i - start)).c_str(), nullptr, 10);
}

std::optional<bool> leading_bool(std::string_view s) {
    while (!s.empty() && (s.front() == '"' || s.front() == '\'' || s.front() == ' ')) {
        s.remove_prefix(1);
    }
    if (starts_with(s, "true") || starts_with(s, "True")) return true;
    if (starts_with(s, "false") || starts_with(s, "False")) return false;
    return std::nullopt;
}

std::vector<std::int64_t> all_ints(std::string_view s) {
    std::vector<std::int64_t> out;
    for (std::size_t i = 0; i < s.size();) {
        if (!is_digit(s[i])) {
            ++i;
            continue;
        }
        const std::size_t start = i;
        while (i < s.size() && is_digit(s[i])) ++i;
        if (i - start <= 9) out.push_back(std::stoll(std::string(s.substr(start, i - start))));
    }
    return out;
}

std::optional<std::string_view> value_after_key(std::string_view s, std::string_view key) {
    for (std::size_t pos = s.find(key); pos != std::string_view::npos;
         pos = s.find(key, pos + key.size())) {
        const std::size_t end = pos + key.size();
        if (pos > 0 && is_word_char(s[pos - 1])) continue;
        if (end < s.size() && is_word_char(s[end])) continue;
        std::size_t i = end;
        while (i < s.size() && (s[i] == '"' || s[i] == '\'' || s[i] == ' ')) ++i;
        if (i < s.size() && (s[i] == ':' || s[i] == '=')) {
            ++i;
            while (i < s.size() && s[i] == ' ') ++i;
            return s.substr(i);
        }
    }
    return std::nullopt;
}

std::string plural(std::int64_t n, const char* word) {
    return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

}  // namespace loom::doctor::detail
