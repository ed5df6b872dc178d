#pragma once

// Qwen2's pre-tokenizer regex (qwen2_tokenizer.h, step 3), matched by hand over code points with
// the Oniguruma character classes of unicode_tables.h. Pure: thread-safe. Internal to the model
// layer.

#include <string_view>
#include <vector>

namespace loom::tokenizer_detail {

// Splits `text` (already NFC) into the regex's matches, which cover it, appending views into
// `text` to `pieces`.
void qwen2_pre_tokenize(std::u32string_view text, std::vector<std::u32string_view>& pieces);

}  // namespace loom::tokenizer_detail
