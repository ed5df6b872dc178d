#pragma once

// Caption processing, as ai-toolkit's FileItemDTO.get_caption (dataloader_mixins caption.py) and
// inject_trigger_into_prompt (prompt_utils.py) do it. Pure functions; randomness comes from the
// Rng the caller passes (data_order.h derives one per item, so a resumed run repeats it).
//
// process_caption, in order:
//   1. caption_dropout_rate: with that probability the whole caption becomes "" (no trigger);
//   2. tokens: split at ',', trim each, drop empty ones, join with ", " (always, as ai-toolkit);
//   3. trigger (inject_trigger): "[trigger]" and "[name]" become the trigger word; when the
//      trigger word does not occur in the caption (case-sensitive substring) it is prepended as
//      "<trigger> <caption>";
//   4. shuffle_tokens: the comma tokens after the first keep_tokens are shuffled.
// Differences from ai-toolkit, on purpose: keep_tokens keeps the first tokens in place when
// shuffling (kohya's meaning, which users expect; ai-toolkit uses it only for token dropout,
// which loom does not implement), and tokens are shuffled once, after the trigger is added,
// instead of before and after; dropout stays active with cache_text_embeddings, because loom's
// text cache is keyed by the caption text.

#include <optional>
#include <string>
#include <string_view>

#include "loom/data/rng.h"

namespace loom::config {
struct DatasetConfig;
}

namespace loom::data {

struct CaptionOptions {
    std::optional<std::string> trigger_word;
    double caption_dropout_rate = 0.0;
    bool shuffle_tokens = false;
    int keep_tokens = 0;

    // The dataset's settings (trigger_word already resolved by the config layer).
    static CaptionOptions from(const config::DatasetConfig& dataset);
};

// Step 3 above. Without a trigger word (nullopt or blank) the placeholders are removed and
// nothing is prepended.
std::string inject_trigger(std::string_view caption, const std::optional<std::string>& trigger);

// Step 2 above: "a,  b ,,c" -> "a, b, c".
std::string normalize_tokens(std::string_view caption);

// Steps 1-4. Draws from `rng` only when dropout or shuffling is on: one uniform01 for dropout,
// then the shuffle.
std::string process_caption(std::string_view raw, const CaptionOptions& options, Rng& rng);

}  // namespace loom::data
