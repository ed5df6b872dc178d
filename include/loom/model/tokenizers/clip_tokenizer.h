#pragma once

// CLIP's byte-level BPE tokenizer, giving the same token ids as transformers' CLIPTokenizer
// (transformers 5.x, backed by Hugging Face tokenizers) as diffusers' Stable Diffusion pipelines
// call it: tokenizer(prompt, padding="max_length", max_length=tokenizer.model_max_length,
// truncation=True).
//
// ref: transformers models/clip/tokenization_clip.py::CLIPTokenizer (5.23)
//
// The pipeline, step by step as the reference runs it:
//  1. Added tokens (bos, eos, unk, pad and any in tokenizer_config.json's added_tokens_decoder
//     or tokenizer.json's added_tokens) are split out of the text first, leftmost-longest: those
//     marked "normalized": false in the raw text, the others after step 2. "<|startoftext|>" typed
//     in a prompt is the bos id, and with SDXL's second tokenizer (pad "!") every "!" in a prompt
//     is the pad id 0.
//  2. Each remaining piece is normalized: Unicode NFC, every run of whitespace (Oniguruma's \s)
//     to one space, then per-character lower-casing (Rust's char::to_lowercase: 'İ' becomes
//     "i\u0307", a final 'Σ' becomes 'σ'). No ftfy, no accent stripping: transformers 5.x has no
//     slow CLIP tokenizer, and the ftfy/BasicTokenizer clean-up of transformers 4.x is gone.
//  3. Pre-tokenization with CLIP's regex
//     <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
//     (spaces dropped), then GPT-2's byte-level regex, which only further splits the literal
//     "<|startoftext|>"/"<|endoftext|>" pieces into "<|", the word and "|>".
//  4. Byte-level BPE of each piece's UTF-8 bytes, "</w>" appended to the last byte, merges
//     applied lowest rank first (ties: leftmost). A byte with no vocabulary entry becomes the unk
//     id.
// The Unicode data behind steps 2-3 is probed from the reference (see unicode_tables.h).
//
// Thread-safety: all const members may be called concurrently. BPE results are cached per piece
// behind a mutex; the cache stops growing at kCacheCapacity pieces. Copies are cheap and share
// the vocabulary and the cache.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

class CLIPTokenizer {
  public:
    static constexpr std::size_t kCacheCapacity = 100000;

    // Loads a diffusers `tokenizer/` (or `tokenizer_2/`) folder as transformers 5.23's
    // CLIPTokenizer.from_pretrained does:
    //  - Vocabulary and merges: from tokenizer.json (the Hugging Face tokenizers serialization;
    //    transformers 5's save_pretrained writes only it and tokenizer_config.json) when the
    //    folder has one, even with vocab.json and merges.txt next to it, which are then not read
    //    (transformers prefers tokenizer.json: TokenizersBackend.convert_to_native_format);
    //    otherwise from vocab.json and merges.txt (as transformers 4 saves). Of tokenizer.json,
    //    model.vocab (token -> id), model.merges ("a b" strings or ["a", "b"] pairs) and
    //    added_tokens are used. CLIPTokenizer rebuilds the rest itself, so like transformers the
    //    normalizer, pre-tokenizer, post-processor, padding and truncation are ignored, and so is
    //    model.unk_token (the unk token is tokenizer_config.json's). model.type must be "BPE" (or
    //    absent, as in old serializations) and model.end_of_word_suffix "</w>": transformers
    //    would assume "</w>" whatever the file says, loom refuses a vocabulary built otherwise.
    //  - Special tokens (bos, eos, unk, pad) and their "normalized" flags: tokenizer_config.json's
    //    added_tokens_decoder when it has one (even an empty one; tokenizer.json's added_tokens
    //    and special_tokens_map.json are then not read), else tokenizer_config.json overridden by
    //    special_tokens_map.json, the flags coming from tokenizer.json's added_tokens. An added
    //    token must be in the vocabulary (in tokenizer.json with the same id) and may not set
    //    lstrip, rstrip or single_word.
    //  - model_max_length from tokenizer_config.json; without it the maximum length is 77 (the
    //    reference would have none and refuse to pad). A "fast_tokenizer_files" entry naming a
    //    versioned tokenizer.*.json is not followed.
    // Throws IoError (missing or unreadable file) or FormatError (malformed contents, naming the
    // file and the offending key).
    static CLIPTokenizer from_folder(const std::filesystem::path& dir);

    // Loads vocab.json and merges.txt with CLIP's default special tokens: bos "<|startoftext|>",
    // eos and unk "<|endoftext|>", and `pad_token` ("!" for SDXL's second text encoder). All are
    // matched in the raw text, as transformers does for a folder without config files.
    // Throws IoError or FormatError; FormatError also when a special token is not in the
    // vocabulary or max_length < 2.
    static CLIPTokenizer from_files(const std::filesystem::path& vocab_json,
                                    const std::filesystem::path& merges_txt,
                                    std::string pad_token = "<|endoftext|>", int max_length = 77);

    // Token ids of `text` (UTF-8) without bos/eos, untruncated. Special tokens written in the
    // text come out as their ids. Throws loom::Error when `text` is not valid UTF-8.
    std::vector<int64_t> tokenize(std::string_view text) const;

    // bos + tokenize(text) + eos, truncated to max_length() (the last id stays eos) and padded
    // with pad_id() to exactly max_length() ids. Throws loom::Error for invalid UTF-8.
    std::vector<int64_t> encode(std::string_view text) const;

    int64_t bos_id() const;
    int64_t eos_id() const;
    int64_t pad_id() const;
    int64_t unk_id() const;
    int max_length() const;

    // Number of entries in vocab.json (or tokenizer.json's model.vocab).
    std::size_t vocab_size() const;

  private:
    class Impl;
    explicit CLIPTokenizer(std::shared_ptr<const Impl> impl);
    std::shared_ptr<const Impl> impl_;
};

}  // namespace loom
