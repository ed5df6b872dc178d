#pragma once

// The state behind a CLIPTokenizer (clip_tokenizer.h), shared by its copies: the vocabulary, the
// BPE merge table and cache (byte_level_bpe.h, with CLIP's "</w>"), and the special and added
// tokens with the splitting of text around them (clip_tokenizer.cpp). Internal to the model layer.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "byte_level_bpe.h"
#include "clip_tokenizer_files.h"
#include "loom/model/tokenizers/clip_tokenizer.h"

namespace loom {

class CLIPTokenizer::Impl {
  public:
    // Takes the vocabulary; `vocab_path` and `vocab_name` ("vocab.json", "model.vocab") name it in
    // error messages. Then the merges are added in rank order, and finally the special tokens.
    Impl(std::unordered_map<std::string, int64_t> vocabulary, std::filesystem::path vocab_path,
         std::string vocab_name);

    void load_merges_txt(const std::filesystem::path& path) { bpe_.load_merges_txt(path); }
    void load_merges_json(const clip_tokenizer_detail::Json& merges,
                          const std::filesystem::path& path) {
        bpe_.load_merges_json(merges, path);
    }
    void set_special_tokens(const clip_tokenizer_detail::SpecialTokens& special,
                            const std::string& source);

    void tokenize(std::string_view text, std::vector<int64_t>& ids) const;

    const std::unordered_map<std::string, int64_t>& vocab() const { return bpe_.vocab(); }
    int64_t bos = 0;
    int64_t eos = 0;
    int64_t unk = 0;
    int64_t pad = 0;
    int max_length = 77;

  private:
    struct AddedToken {
        std::string content;  // UTF-8, for the raw text
        std::u32string content32;
        int64_t id;
    };

    void normalized_segment(std::u32string_view text, std::vector<int64_t>& ids) const;
    void add_piece(std::u32string_view piece, std::vector<int64_t>& ids) const;

    tokenizer_detail::ByteLevelBpe bpe_;
    std::vector<AddedToken> raw_tokens_;
    std::vector<AddedToken> normalized_tokens_;
};

}  // namespace loom
