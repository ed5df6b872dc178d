#include "qwen2_pre_tokenizer.h"

#include <cstddef>

#include "loom/model/tokenizers/unicode_tables.h"

namespace loom::tokenizer_detail {

namespace {

using unicode::is_letter;
using unicode::is_number;
using unicode::is_whitespace;

bool is_line_break(char32_t c) {
    return c == U'\r' || c == U'\n';
}

// [^\s\p{L}\p{N}]
bool is_symbol(char32_t c) {
    return !is_whitespace(c) && !is_letter(c) && !is_number(c);
}

// ASCII case folding is all (?i:...) needs for these letters.
char32_t fold(char32_t c) {
    return c >= U'A' && c <= U'Z' ? c - U'A' + U'a' : c;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d): the contraction's length at `i`, or 0.
std::size_t contraction(std::u32string_view text, std::size_t i) {
    static constexpr std::u32string_view kSuffixes[] = {U"s", U"t",  U"re", U"ve",
                                                        U"m", U"ll", U"d"};
    if (text[i] != U'\'') return 0;
    for (std::u32string_view suffix : kSuffixes) {
        if (text.size() - i - 1 < suffix.size()) continue;
        bool same = true;
        for (std::size_t k = 0; k < suffix.size(); ++k) {
            same = same && fold(text[i + 1 + k]) == suffix[k];
        }
        if (same) return 1 + suffix.size();
    }
    return 0;
}

// The end of the run of code points from `i` that satisfy `keep`.
template <typename Predicate>
std::size_t run_end(std::u32string_view text, std::size_t i, Predicate keep) {
    while (i < text.size() && keep(text[i])) ++i;
    return i;
}

// The length of the regex's match at `i`, its alternatives tried in order.
std::size_t match_length(std::u32string_view text, std::size_t i) {
    const std::size_t n = text.size();
    const char32_t c = text[i];
    if (const std::size_t len = contraction(text, i)) return len;
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (is_letter(c)) return run_end(text, i, is_letter) - i;
    if (!is_line_break(c) && !is_number(c) && i + 1 < n && is_letter(text[i + 1])) {
        return run_end(text, i + 1, is_letter) - i;
    }
    // \p{N}
    if (is_number(c)) return 1;
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    const std::size_t symbols = c == U' ' && i + 1 < n && is_symbol(text[i + 1]) ? i + 1 : i;
    if (is_symbol(text[symbols])) {
        return run_end(text, run_end(text, symbols, is_symbol), is_line_break) - i;
    }
    // What is left starts a whitespace run.
    const std::size_t end = run_end(text, i, is_whitespace);
    // \s*[\r\n]+: up to the run's last line break.
    for (std::size_t k = end; k > i; --k) {
        if (is_line_break(text[k - 1])) return k - i;
    }
    // \s+(?!\S): the run, less its last space when something follows it.
    if (end == n || end - i == 1) return end - i;
    return end - 1 - i;
}

}  // namespace

void qwen2_pre_tokenize(std::u32string_view text, std::vector<std::u32string_view>& pieces) {
    for (std::size_t i = 0; i < text.size();) {
        const std::size_t len = match_length(text, i);
        pieces.push_back(text.substr(i, len));
        i += len;
    }
}

}  // namespace loom::tokenizer_detail
