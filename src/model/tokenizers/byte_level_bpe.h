#pragma once

// Byte-level BPE as Hugging Face tokenizers' BPE model runs it behind a ByteLevel pre-tokenizer:
// a piece's UTF-8 bytes become GPT-2's byte symbols (bytes_to_unicode), and the merges are
// applied lowest rank first. Shared by the CLIP tokenizer (whose last symbol of a word carries
// "</w>") and the Qwen2 tokenizer (no suffix). Internal to the model layer.

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "clip_tokenizer_files.h"

namespace loom::tokenizer_detail {

class ByteLevelBpe {
  public:
    // Takes the vocabulary; `vocab_path` and `vocab_name` ("vocab.json", "model.vocab") name it in
    // error messages. `end_of_word` is BPE's end_of_word_suffix ("</w>" for CLIP, "" for GPT-2
    // style vocabularies). With `ignore_merges`, a piece that is itself in the vocabulary is one
    // token (tokenizers' BPE.ignore_merges).
    ByteLevelBpe(std::unordered_map<std::string, int64_t> vocabulary,
                 std::filesystem::path vocab_path, std::string vocab_name, std::string end_of_word,
                 bool ignore_merges = false);

    // The merges, in rank order: merges.txt's lines or tokenizer.json's model.merges.
    void load_merges_txt(const std::filesystem::path& path);
    void load_merges_json(const clip_tokenizer_detail::Json& merges,
                          const std::filesystem::path& path);

    // Appends the ids of one pre-tokenized piece (its UTF-8 bytes); a byte without a symbol in
    // the vocabulary becomes `unk`. Results are cached, up to kCacheCapacity pieces.
    void encode(const std::string& piece, int64_t unk, std::vector<int64_t>& ids) const;

    const std::unordered_map<std::string, int64_t>& vocab() const { return vocab_; }
    const std::filesystem::path& vocab_path() const { return vocab_path_; }

    static constexpr std::size_t kCacheCapacity = 100000;

  private:
    struct Merge {
        std::uint32_t rank;
        int64_t new_id;
    };
    static std::uint64_t pair_key(int64_t a, int64_t b) {
        return (static_cast<std::uint64_t>(a) << 32) | static_cast<std::uint64_t>(b);
    }

    // Adds the next merge; `where` ("line 3", "model.merges[2]") names it in error messages.
    void add_merge(const std::string& first, const std::string& second,
                   const std::filesystem::path& path, const std::string& where);
    std::vector<int64_t> merge(const std::string& piece, int64_t unk) const;

    std::unordered_map<std::string, int64_t> vocab_;
    std::filesystem::path vocab_path_;
    std::string vocab_name_;
    std::string end_of_word_;
    bool ignore_merges_;
    std::array<std::string, 256> symbols_;  // GPT-2's symbol of each byte
    std::uint32_t next_rank_ = 0;
    std::unordered_map<std::uint64_t, Merge> merges_;
    std::array<int64_t, 256> byte_id_{};       // id of the byte's symbol, -1 when absent
    std::array<int64_t, 256> byte_last_id_{};  // id of the byte's symbol + end_of_word

    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<int64_t>> cache_;
};

}  // namespace loom::tokenizer_detail
