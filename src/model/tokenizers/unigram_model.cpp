#include "unigram_model.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "utf8_walk.h"

namespace loom {

namespace {

constexpr double kUnknownPenalty = 10.0;  // tokenizers' K_UNK_PENALTY

struct BestPath {
    std::int64_t id = -1;
    double score = 0.0;
    std::optional<std::size_t> starts_at;
};

}  // namespace

UnigramModel::UnigramModel(std::vector<std::pair<std::string, double>> vocab, std::int64_t unk_id)
    : pieces_(std::move(vocab)), unk_id_(unk_id) {
    min_score_ = std::numeric_limits<double>::infinity();
    ids_.reserve(pieces_.size());
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
        const auto& [piece, score] = pieces_[i];
        ids_[piece] = static_cast<std::int64_t>(i);  // a repeated piece: the last id, as a map
        max_piece_bytes_ = std::max(max_piece_bytes_, piece.size());
        min_score_ = std::min(min_score_, score);
    }
}

std::int64_t UnigramModel::id_of(std::string_view piece) const {
    const auto it = ids_.find(piece);
    return it == ids_.end() ? -1 : it->second;
}

void UnigramModel::encode(std::string_view word, std::vector<std::int64_t>& ids) const {
    const std::size_t size = word.size();
    const double unk_score = min_score_ - kUnknownPenalty;
    std::vector<BestPath> best(size + 1);
    best[0].starts_at = 0;
    for (std::size_t start = 0; start < size;) {
        const double here = best[start].score;
        const std::size_t char_length = utf8_walk::length_at(word, start);
        bool has_single = false;
        const std::size_t longest = std::min(max_piece_bytes_, size - start);
        for (std::size_t length = 1; length <= longest; ++length) {
            const auto it = ids_.find(word.substr(start, length));
            if (it == ids_.end()) continue;
            BestPath& target = best[start + length];
            const double candidate = pieces_[static_cast<std::size_t>(it->second)].second + here;
            if (!target.starts_at || candidate > target.score) {
                target = {it->second, candidate, start};
            }
            if (length == char_length) has_single = true;
        }
        if (!has_single) {
            BestPath& target = best[start + char_length];
            const double candidate = unk_score + here;
            if (!target.starts_at || candidate > target.score) {
                target = {unk_id_, candidate, start};
            }
        }
        start += char_length;
    }
    // Back from the end; runs of unknowns are fused into one piece.
    std::vector<std::int64_t> reversed;
    bool in_unknown_run = false;
    std::size_t unknown_end = 0;
    std::size_t unknown_start = 0;
    auto flush_unknown = [&] {
        if (!in_unknown_run) return;
        const std::int64_t id = id_of(word.substr(unknown_start, unknown_end - unknown_start));
        reversed.push_back(id >= 0 ? id : unk_id_);
        in_unknown_run = false;
    };
    for (std::size_t end = size; end > 0;) {
        const BestPath& node = best[end];
        const std::size_t start = *node.starts_at;
        if (node.id == unk_id_) {
            if (!in_unknown_run) unknown_end = end;
            in_unknown_run = true;
            unknown_start = start;
        } else {
            flush_unknown();
            reversed.push_back(node.id);
        }
        end = start;
    }
    flush_unknown();
    ids.insert(ids.end(), reversed.rbegin(), reversed.rend());
}

}  // namespace loom
