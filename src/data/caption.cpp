#include "loom/data/caption.h"

#include <algorithm>
#include <vector>

#include "loom/config/job.h"
#include "loom/core/text.h"

namespace loom::data {

namespace {

std::vector<std::string> split_tokens(std::string_view caption) {
    std::vector<std::string> tokens;
    std::size_t start = 0;
    while (start <= caption.size()) {
        std::size_t comma = caption.find(',', start);
        if (comma == std::string_view::npos) comma = caption.size();
        const std::string_view token = trim_ascii_space(caption.substr(start, comma - start));
        if (!token.empty()) tokens.emplace_back(token);
        start = comma + 1;
    }
    return tokens;
}

std::string join_tokens(const std::vector<std::string>& tokens) {
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (i > 0) out += ", ";
        out += tokens[i];
    }
    return out;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
    std::size_t pos = 0;
    while ((pos = s.find(from, pos)) != std::string::npos) {
        s.replace(pos, from.size(), to);
        pos += to.size();
    }
}

}  // namespace

CaptionOptions CaptionOptions::from(const config::DatasetConfig& dataset) {
    CaptionOptions o;
    o.trigger_word = dataset.trigger_word;
    o.caption_dropout_rate = dataset.caption_dropout_rate;
    o.shuffle_tokens = dataset.shuffle_tokens;
    o.keep_tokens = dataset.keep_tokens;
    return o;
}

std::string inject_trigger(std::string_view caption, const std::optional<std::string>& trigger) {
    const std::string word = trigger.value_or("");
    std::string out(caption);
    replace_all(out, "[trigger]", word);
    replace_all(out, "[name]", word);
    if (!trim_ascii_space(word).empty() && out.find(word) == std::string::npos)
        out = out.empty() ? word : word + " " + out;  // no trailing space for an empty caption
    return out;
}

std::string normalize_tokens(std::string_view caption) {
    return join_tokens(split_tokens(caption));
}

std::string process_caption(std::string_view raw, const CaptionOptions& options, Rng& rng) {
    if (options.caption_dropout_rate > 0 && uniform01(rng) < options.caption_dropout_rate)
        return "";
    std::string caption = inject_trigger(normalize_tokens(raw), options.trigger_word);
    if (options.shuffle_tokens) {
        std::vector<std::string> tokens = split_tokens(caption);
        const std::size_t keep = std::size_t(std::max(options.keep_tokens, 0));
        shuffle(tokens, rng, std::min(keep, tokens.size()));
        caption = join_tokens(tokens);
    }
    return caption;
}

}  // namespace loom::data
