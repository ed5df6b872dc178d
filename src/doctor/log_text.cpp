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

std::string_view strip_rank_prefix(std::string_view s) {
    if (s.empty() || s.front() != '[') return s;
    const std::size_t close = s.find(']');
    if (close == std::string_view::npos || close > 16) return s;
    const std::string_view tag = s.substr(1, close - 1);
    std::string_view digits = tag;
    if (starts_with(tag, "rank")) digits = tag.substr(4);
    if (starts_with(tag, "default")) digits = tag.substr(7);
    bool ok = !digits.empty();
    for (char c : digits) ok = ok && (is_digit(c) || (c == ',' && digits.data() == tag.data()));
    if (!ok) return s;
    std::string_view rest = s.substr(close + 1);
    if (starts_with(rest, "<stderr>") || starts_with(rest, "<stdout>")) rest.remove_prefix(8);
    if (rest.empty() || rest.front() != ':') return s;
    rest.remove_prefix(1);
    if (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    return rest;
}

std::optional<int> rank_in_prefix(std::string_view s) {
    if (strip_rank_prefix(s).size() == s.size()) return std::nullopt;
    const std::size_t close = s.find(']');
    std::size_t start = close;
    while (start > 1 && is_digit(s[start - 1])) --start;
    if (start == close || close - start > 6) return std::nullopt;
    return std::atoi(std::string(s.substr(start, close - start)).c_str());
}

std::string_view strip_log_prefix(std::string_view s) {
    static constexpr std::string_view kLevels[] = {"INFO",  "WARNING", "WARN",
                                                   "DEBUG", "ERROR",   "CRITICAL"};
    for (int guard = 0; guard < 8; ++guard) {
        s = trim(s);
        if (s.size() >= 10 && is_digit(s[0]) && s[4] == '-' && s[7] == '-') {  // a date
            std::size_t i = 10;
            while (i < s.size() && (s[i] == ' ' || s[i] == 'T')) ++i;
            while (i < s.size() && (is_digit(s[i]) || s[i] == ':' || s[i] == '.' || s[i] == ',')) {
                ++i;
            }
            s.remove_prefix(i);
            continue;
        }
        if (!s.empty() && s.front() == '[') {
            const std::size_t close = s.find(']');
            if (close == std::string_view::npos || close > 48) return s;
            s.remove_prefix(close + 1);
            continue;
        }
        if (starts_with(s, "- ") || starts_with(s, "| ")) {
            s.remove_prefix(2);
            continue;
        }
        bool level = false;
        for (std::string_view l : kLevels) {
            if (!starts_with(s, l) || s.size() == l.size()) continue;
            const char next = s[l.size()];
            if (next == ' ') {
                s.remove_prefix(l.size());
            } else if (next == ':') {
                s.remove_prefix(l.size() + 1);
                const std::size_t colon = s.find(':');
                if (colon != std::string_view::npos &&
                    s.substr(0, colon).find(' ') == std::string_view::npos) {
                    s.remove_prefix(colon + 1);  // "INFO:__main__:message"
                }
            } else {
                continue;
            }
            level = true;
            break;
        }
        if (!level) return s;
    }
    return s;
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
