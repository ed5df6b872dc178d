#pragma once

// The Qwen2 tokenizer (Qwen2.5-VL's, Qwen-Image's text encoder; Qwen3's, Z-Image's), giving the
// same ids as transformers 5.23's Qwen2Tokenizer as the pipelines call it:
// tokenizer(texts, padding="max_length", max_length=..., truncation=True).
//
// ref: transformers models/qwen2/tokenization_qwen2.py::Qwen2Tokenizer (5.23)
//
// From tokenizer.json transformers takes the BPE vocabulary and merges (model.vocab,
// model.merges) and the added tokens. A folder saved without tokenizer.json (Qwen-Image's own
// tokenizer/) gives them as vocab.json and merges.txt, with the added tokens in
// tokenizer_config.json's added_tokens_decoder or, older still, added_tokens.json; a pad token in
// none of them is added after everything else, as Qwen2Tokenizer adds its special tokens. The
// rest of the pipeline is Qwen2Tokenizer's own, whatever the files say:
//  1. Added tokens ("<|endoftext|>", "<|im_start|>", ... with "normalized": false) are split out
//     of the raw text, leftmost-longest: "<|im_end|>" typed in a prompt is its id.
//  2. NFC on the rest (unicode_tables.h, probed from tokenizers).
//  3. Qwen2's Split regex, pieces kept whole ("isolated"):
//       (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//       \s*[\r\n]+|\s+(?!\S)|\s+
//     — digits one by one, a letter run with the one symbol or space before it.
//  4. ByteLevel (no prefix space) and BPE without an end-of-word suffix (byte_level_bpe.h).
//  5. No BOS or EOS: padding with the pad token (tokenizer_config.json's pad_token,
//     "<|endoftext|>" by default) on tokenizer_config.json's padding_side ("right" by default),
//     truncation on its truncation_side ("right").
//
// Thread-safety: const members may be called concurrently. Copies share the vocabulary.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

namespace loom {

class Qwen2Tokenizer {
  public:
    // Loads `dir`/tokenizer.json and `dir`/tokenizer_config.json (a diffusers tokenizer/
    // folder). Throws IoError or FormatError naming the file and key.
    static Qwen2Tokenizer from_folder(const std::filesystem::path& dir);

    // Token ids of `text` (UTF-8), untruncated. Throws loom::Error for invalid UTF-8.
    std::vector<std::int64_t> tokenize(std::string_view text) const;

    // tokenize(text) cut to `max_length` ids and padded to exactly that many, with the mask of
    // the real ones (1) and the padding (0).
    struct Encoding {
        std::vector<std::int64_t> ids;
        std::vector<std::int64_t> mask;
    };
    Encoding encode(std::string_view text, std::size_t max_length) const;
    // The two halves of encode, for a batch padded to its longest (padding=True): `ids` cut to
    // `max_length` on the truncation side, and `ids` (at most `length`) padded to `length`.
    std::vector<std::int64_t> truncated(std::vector<std::int64_t> ids,
                                        std::size_t max_length) const;
    Encoding padded(std::vector<std::int64_t> ids, std::size_t length) const;

    std::int64_t pad_id() const;
    // len(tokenizer): the vocabulary and the added tokens.
    std::size_t size() const;

  private:
    struct State;
    explicit Qwen2Tokenizer(std::shared_ptr<const State> state);
    std::shared_ptr<const State> state_;
};

}  // namespace loom
