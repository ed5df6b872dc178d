#pragma once

// Small text helpers of `loom doctor`: reading words, numbers and `key: value` settings out of a
// log line, cleaning a line to keep as evidence, and the one wording helper the diagnosis and
// its rendering share. Logs are read as bytes: the helpers are ASCII-only and never throw on
// odd input. Internal to the doctor layer.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::doctor::detail {

inline bool contains(std::string_view s, std::string_view needle) {
    return s.find(needle) != std::string_view::npos;
}

inline bool starts_with(std::string_view s, std::string_view prefix) {
    return s.substr(0, prefix.size()) == prefix;
}

inline bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

inline bool is_alpha(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

inline bool is_word_char(char c) {
    return is_digit(c) || is_alpha(c) || c == '_';
}

// Without leading spaces and tabs, nor trailing spaces, tabs and '\r'.
std::string_view trim(std::string_view s);

std::string lower_ascii(std::string_view s);

// Drops ANSI colour sequences (ESC [ ... final byte): consoles captured with `script`, rich logs.
std::string strip_ansi(std::string_view s);

// Without a launcher's per-rank prefix: torchrun/DeepSpeed "[rank0]: ", torchrun --tee
// "[default0]:", mpirun "[1,0]<stderr>:". One space after the colon goes with the prefix, so a
// traceback's indentation is kept.
std::string_view strip_rank_prefix(std::string_view s);
// The rank that prefix names (mpirun's "[1,0]": the last number); nullopt without one.
std::optional<int> rank_in_prefix(std::string_view s);

// The message of a logging record, without its prefix: timestamps ("2025-03-01 10:00:00,123"),
// bracketed fields ("[INFO]", "[Rank 0]", "[logging.py:128:log_dist]"), a level word ("INFO    ",
// "INFO:__main__:") and "- " / "| " separators. Lines without a prefix are returned as they are.
std::string_view strip_log_prefix(std::string_view s);

// A line as evidence: trimmed, at most 240 bytes cut on a code point ("..." marks the cut), and
// valid UTF-8 (logs mix encodings; invalid bytes become U+FFFD so the terminal and the JSON
// output stay valid).
std::string evidence_text(std::string_view s);

// The integer at the start of `s`, after any quotes and spaces ("'4'", " 12/100"); at most 18
// digits are read.
std::optional<std::int64_t> leading_int(std::string_view s);

// "true"/"True"/"false"/"False" at the start of `s`, after any quotes and spaces.
std::optional<bool> leading_bool(std::string_view s);

// Every integer in `s` (resolution lists: "[512, 768, 1024]", "(1024, 1024)"); runs of more than
// 9 digits are skipped.
std::vector<std::int64_t> all_ints(std::string_view s);

// The text after `key` when `key` is a whole word followed by ':' or '=' — JSON ("key": v),
// YAML (key: v), TOML and command-line flags (--key=v).
std::optional<std::string_view> value_after_key(std::string_view s, std::string_view key);

// "1 line", "42 lines".
std::string plural(std::int64_t n, const char* word);

}  // namespace loom::doctor::detail
