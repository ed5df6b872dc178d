#include "byte_level_bpe.h"

#include <nlohmann/json.hpp>

#include <queue>
#include <utility>

#include "clip_tokenizer_text.h"
#include "loom/core/error.h"

namespace loom::tokenizer_detail {

using clip_tokenizer_detail::append_utf8;
using clip_tokenizer_detail::Json;
using clip_tokenizer_detail::read_file;

namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the others for
// U+0100 onwards, so that every byte is a visible character in vocab.json.
std::array<std::string, 256> byte_symbols() {
    std::array<std::string, 256> symbols;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        append_utf8(printable ? static_cast<char32_t>(b) : next++, symbols[b]);
    }
    return symbols;
}

// Splits "a b" (two non-empty tokens separated by one space) as tokenizers does; false when the
// line is not of that form.
bool split_merge(std::string_view line, std::string& first, std::string& second) {
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
        return false;
    }
    first.assign(line.substr(0, space));
    second.assign(line.substr(space + 1));
    return true;
}

}  // namespace

ByteLevelBpe::ByteLevelBpe(std::unordered_map<std::string, int64_t> vocabulary,
                           std::filesystem::path vocab_path, std::string vocab_name,
                           std::string end_of_word, bool ignore_merges)
    : vocab_(std::move(vocabulary)),
      vocab_path_(std::move(vocab_path)),
      vocab_name_(std::move(vocab_name)),
      end_of_word_(std::move(end_of_word)),
      ignore_merges_(ignore_merges),
      symbols_(byte_symbols()) {
    for (int b = 0; b < 256; ++b) {
        const auto mid = vocab_.find(symbols_[b]);
        const auto last = vocab_.find(symbols_[b] + end_of_word_);
        byte_id_[b] = mid == vocab_.end() ? -1 : mid->second;
        byte_last_id_[b] = last == vocab_.end() ? -1 : last->second;
    }
}

void ByteLevelBpe::add_merge(const std::string& first, const std::string& second,
                             const std::filesystem::path& path, const std::string& where) {
    const auto lookup = [&](const std::string& token) {
        const auto it = vocab_.find(token);
        if (it == vocab_.end()) {
            throw FormatError(path.string(),
                              where + ": token \"" + token + "\" is not in " + vocab_name_);
        }
        return it->second;
    };
    const int64_t a = lookup(first);
    const int64_t b = lookup(second);
    const int64_t merged = lookup(first + second);
    // Like tokenizers' HashMap collect, a repeated merge keeps its last rank.
    merges_[pair_key(a, b)] = Merge{next_rank_++, merged};
}

void ByteLevelBpe::load_merges_txt(const std::filesystem::path& path) {
    const std::string text = read_file(path);
    std::size_t line_number = 0;
    std::string first;
    std::string second;
    for (std::size_t begin = 0; begin < text.size();) {
        std::size_t end = text.find('\n', begin);
        if (end == std::string::npos) end = text.size();
        std::string_view line(text.data() + begin, end - begin);
        begin = end + 1;
        ++line_number;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.substr(0, 8) == "#version") continue;
        if (!split_merge(line, first, second)) {
            throw FormatError(path.string(), "line " + std::to_string(line_number) +
                                                 " is not a merge (two tokens separated by one "
                                                 "space): \"" +
                                                 std::string(line) + "\"");
        }
        add_merge(first, second, path, "line " + std::to_string(line_number));
    }
}

void ByteLevelBpe::load_merges_json(const Json& merges, const std::filesystem::path& path) {
    std::string first;
    std::string second;
    for (std::size_t i = 0; i < merges.size(); ++i) {
        const Json& merge = merges[i];
        const std::string where = "model.merges[" + std::to_string(i) + "]";
        bool ok = false;
        if (merge.is_string()) {
            ok = split_merge(merge.get_ref<const std::string&>(), first, second);
        } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                   merge[1].is_string()) {
            first = merge[0].get<std::string>();
            second = merge[1].get<std::string>();
            ok = true;
        }
        if (!ok) {
            throw FormatError(path.string(),
                              where +
                                  " must be \"a b\" (two tokens separated by one space) or a "
                                  "pair [\"a\", \"b\"], not " +
                                  merge.dump());
        }
        add_merge(first, second, path, where);
    }
}

void ByteLevelBpe::encode(const std::string& piece, int64_t unk, std::vector<int64_t>& ids) const {
    {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        const auto it = cache_.find(piece);
        if (it != cache_.end()) {
            ids.insert(ids.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int64_t> result;
    if (ignore_merges_) {
        // The piece as its byte symbols, looked up whole.
        std::string symbols;
        for (char byte : piece) symbols += symbols_[static_cast<unsigned char>(byte)];
        const auto whole = vocab_.find(symbols + end_of_word_);
        if (whole != vocab_.end()) result.push_back(whole->second);
    }
    if (result.empty()) result = merge(piece, unk);
    ids.insert(ids.end(), result.begin(), result.end());
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(piece, std::move(result));
}

// tokenizers' BPE::merge_word + Word::merge_all: one symbol per byte (the last with the
// end-of-word suffix), then the lowest-ranked adjacent pair is merged first, the leftmost one on
// ties.
std::vector<int64_t> ByteLevelBpe::merge(const std::string& piece, int64_t unk) const {
    struct Symbol {
        int64_t id;
        std::ptrdiff_t prev;
        std::ptrdiff_t next;
        bool removed;
    };
    struct Candidate {
        std::uint32_t rank;
        std::size_t pos;
        int64_t new_id;
        bool operator<(const Candidate& o) const {  // reversed: std::priority_queue is a max-heap
            return rank != o.rank ? rank > o.rank : pos > o.pos;
        }
    };
    const auto n = static_cast<std::ptrdiff_t>(piece.size());
    std::vector<Symbol> symbols;
    symbols.reserve(piece.size());
    for (std::ptrdiff_t i = 0; i < n; ++i) {
        const auto byte = static_cast<unsigned char>(piece[static_cast<std::size_t>(i)]);
        const int64_t id = i + 1 == n ? byte_last_id_[byte] : byte_id_[byte];
        symbols.push_back({id < 0 ? unk : id, i - 1, i + 1 == n ? -1 : i + 1, false});
    }
    std::priority_queue<Candidate> queue;
    const auto push = [&](std::size_t pos, int64_t left, int64_t right) {
        const auto it = merges_.find(pair_key(left, right));
        if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
    };
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) push(i, symbols[i].id, symbols[i + 1].id);

    while (!queue.empty()) {
        const Candidate top = queue.top();
        queue.pop();
        Symbol& left = symbols[top.pos];
        if (left.removed || left.next < 0) continue;
        const auto next_pos = static_cast<std::size_t>(left.next);
        const Symbol right = symbols[next_pos];
        // A stale entry: the pair at this position changed since it was queued.
        const auto current = merges_.find(pair_key(left.id, right.id));
        if (current == merges_.end() || current->second.new_id != top.new_id) continue;

        left.id = top.new_id;
        left.next = right.next;
        symbols[next_pos].removed = true;
        if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
        if (left.prev >= 0) {
            const auto prev = static_cast<std::size_t>(left.prev);
            push(prev, symbols[prev].id, left.id);
        }
        if (left.next >= 0) push(top.pos, left.id, symbols[static_cast<std::size_t>(left.next)].id);
    }
    std::vector<int64_t> ids;
    for (const Symbol& s : symbols) {
        if (!s.removed) ids.push_back(s.id);
    }
    return ids;
}

}  // namespace loom::tokenizer_detail
