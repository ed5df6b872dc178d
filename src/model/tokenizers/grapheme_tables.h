#pragma once

// The grapheme-cluster classes of code points (UAX #29, reduced to what the T5 tokenizer's
// precompiled normalizer needs; see scripts/gen_grapheme_tables.py). Internal to the model layer.

namespace loom::unicode {

enum class GraphemeClass {
    other,
    control,  // Control, CR, LF: nothing joins it
    joins,    // Extend, ZWJ, SpacingMark: joins the cluster before it
    prepend,  // Prepend: joins the cluster after it
};

GraphemeClass grapheme_class(char32_t c);

}  // namespace loom::unicode
