#pragma once

// The state behind a CLIPTokenizer (clip_tokenizer.h), shared by its copies: the vocabulary, the
// BPE merge table and cache (clip_tokenizer_bpe.cpp), and the special and added tokens with the
// splitting of text around them (clip_tokenizer.cpp). Internal to the model layer.

#include <array>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "clip_tokenizer_files.h"
#include "loom/model/tokenizers/clip_tokenizer.h"

namespace loom {

class CLIPTokenizer::Impl {
  public:
    // Takes the vocabulary; `vocab_path` and `vocab_name` ("vocab.json", "model.vocab") name it in
    // error messages. Then the merges are added in rank order, and finally the special tokens.
    Impl(std::unordered_map<std::string, int64_t> vocabulary, std::filesystem::path vocab_path,
         std::string vocab_name);

    void load_merges_txt(const std::filesystem::path& path);
    void load_merges_json(const clip_tokenizer_detail::Json& merges,
                          const std::filesystem::path& path);
    void set_special_tokens(const clip_tokenizer_detail::SpecialTokens& special,
                            const std::string& source);

    void tokenize(std::string_view text, std::vector<int64_t>& ids) const;

    std::unordered_map<std::string, int64_t> vocab;
    int64_t bos = 0;
    int64_t eos = 0;
    int64_t unk = 0;
    int64_t pad = 0;
    int max_length = 77;

  private:
    struct Merge {
        std::uint32_t rank;
        int64_t new_id;
    };
    struct AddedToken {
        std::string content;  // UTF-8, for the raw text
        std::u32string content32;
        int64_t id;
    };

    static std::uint64_t pair_key(int64_t a, int64_t b) {
        return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint64_t>(b);
    }

    // Adds the next merge; `where` ("line 3", "model.merges[2]") names it in error messages.
    void add_merge(const std::string& first, const std::string& second,
                   const std::filesystem::path& path, const std::string& where);
    void normalized_segment(std::u32string_view text, std::vector<int64_t>& ids) const;
    void add_piece(std::u32string_view piece, std::vector<int64_t>& ids) const;
    std::vector<int64_t> bpe(const std::string& piece) const;

    std::filesystem::path vocab_path_;
    std::string vocab_name_;
    std::uint32_t next_rank_ = 0;
    std::unordered_map<std::uint64_t, Merge> merges_;
    std::array<int64_t, 256> byte_id_{};       // id of the byte's symbol, -1 when absent
    std::array<int64_t, 256> byte_last_id_{};  // id of the byte's symbol + "</w>"
    std::vector<AddedToken> raw_tokens_;
    std::vector<AddedToken> normalized_tokens_;

    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace loom
