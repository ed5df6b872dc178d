#pragma once

// The T5 tokenizer (Flux's tokenizer_2, Wan's UMT5 tokenizer), giving the same ids as
// transformers 5.23's T5Tokenizer (T5TokenizerFast is the same class there, backed by Hugging
// Face tokenizers) as diffusers' pipelines call it: tokenizer(prompt, padding="max_length",
// max_length=max_sequence_length, truncation=True).
//
// ref: transformers models/t5/tokenization_t5.py::T5Tokenizer (5.23)
//
// From tokenizer.json transformers takes only the Unigram vocabulary (model.vocab, model.unk_id),
// the precompiled charsmap (the "Precompiled" normalizer, alone or inside a Sequence) and the
// added tokens; the rest of the pipeline is T5Tokenizer's own, whatever the file says:
//  1. Added tokens (<pad>, </s>, <unk>, <extra_id_N>, all "normalized": false) are split out of
//     the raw text, leftmost-longest: "</s>" typed in a prompt is the eos id.
//  2. The rest is normalized with the charsmap (precompiled_charsmap.h: SentencePiece's NFKC
//     rules, grapheme cluster by cluster), when the file has one.
//  3. WhitespaceSplit (Unicode White_Space; the spaces are dropped), then Metaspace: "▁" before
//     each word that does not start with one, and a new piece at every "▁".
//  4. Unigram Viterbi per piece (unigram_model.h); no byte fallback.
//  5. "</s>" appended; with a max_length, the ids before it are cut to max_length - 1 and "<pad>"
//     fills the rest.
// transformers 4.x ran tokenizer.json's own pipeline instead; on FLUX.1's file that differs only
// around whitespace (a trailing space gave one more "▁" token).
//
// Thread-safety: const members may be called concurrently. Copies share the vocabulary.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

namespace loom {

class T5Tokenizer {
  public:
    // Loads `dir`/tokenizer.json (a diffusers tokenizer_2/ or a Wan tokenizer/ folder). A folder
    // with only spiece.model is refused with the command that converts it. Throws IoError or
    // FormatError naming the file and key.
    static T5Tokenizer from_folder(const std::filesystem::path& dir);
    static T5Tokenizer from_file(const std::filesystem::path& tokenizer_json);

    // Token ids of `text` (UTF-8) without "</s>", untruncated. Throws loom::Error for invalid
    // UTF-8.
    std::vector<std::int64_t> tokenize(std::string_view text) const;
    // tokenize(text) + "</s>", cut to max_length (the last id stays "</s>") and padded with
    // "<pad>" to exactly max_length ids. max_length must be at least 1.
    std::vector<std::int64_t> encode(std::string_view text, std::size_t max_length) const;

    std::int64_t pad_id() const;
    std::int64_t eos_id() const;
    std::size_t vocab_size() const;

  private:
    struct State;
    explicit T5Tokenizer(std::shared_ptr<const State> state);
    std::shared_ptr<const State> state_;
};

}  // namespace loom
