#pragma once

// A SentencePiece Unigram model as Hugging Face tokenizers runs it (models/unigram, the
// "optimized" Viterbi): the best-scoring segmentation of a word into vocabulary pieces, a code
// point with no piece of its own becoming the unk id at the lowest score minus 10, consecutive
// unknowns fused into one unk. Ties keep the first candidate found (earliest start, then
// shortest piece). No byte fallback: transformers 5's T5Tokenizer builds its Unigram without it,
// whatever tokenizer.json says. Internal to the model layer.

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace loom {

class UnigramModel {
  public:
    // `vocab` in id order: (piece, log-probability score). Every piece is a candidate, special
    // tokens included, as in the reference.
    UnigramModel(std::vector<std::pair<std::string, double>> vocab, std::int64_t unk_id);

    // Appends the ids of `word` (valid UTF-8, one pre-tokenized piece) to `ids`.
    void encode(std::string_view word, std::vector<std::int64_t>& ids) const;

    std::size_t size() const { return pieces_.size(); }
    // The id of `piece`, or -1.
    std::int64_t id_of(std::string_view piece) const;

  private:
    std::vector<std::pair<std::string, double>> pieces_;
    std::unordered_map<std::string_view, std::int64_t> ids_;  // views into pieces_
    std::size_t max_piece_bytes_ = 0;
    double min_score_ = 0.0;
    std::int64_t unk_id_;
};

}  // namespace loom
