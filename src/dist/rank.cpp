#include "loom/dist/rank.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "loom/core/error.h"

namespace loom::dist {

namespace {

// A whole number, or nullopt for anything else ("", "2x", "1.5").
std::optional<long long> whole_number(const std::string& text) {
    if (text.empty()) return std::nullopt;
    std::size_t used = 0;
    try {
        const long long v = std::stoll(text, &used);
        if (used != text.size()) return std::nullopt;
        return v;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

int read_int(const Environment& env, const std::string& name, long long low, long long high,
             int fallback, const std::string& what) {
    const std::optional<std::string> text = env(name);
    if (!text) return fallback;
    const std::optional<long long> v = whole_number(*text);
    if (!v || *v < low || *v > high) {
        throw UsageError("the environment variable " + name + " is '" + *text + "'; it must be " +
                         what + " (torchrun sets it; unset it to train in one process)");
    }
    return static_cast<int>(*v);
}

}  // namespace

Environment process_environment() {
    return [](const std::string& name) -> std::optional<std::string> {
        const char* v = std::getenv(name.c_str());
        if (v == nullptr) return std::nullopt;
        return std::string(v);
    };
}

RankFacts rank_from_environment(const Environment& env) {
    RankFacts f;
    f.world_size = read_int(env, "WORLD_SIZE", 1, 1 << 20, 1, "the number of processes, 1 or more");
    if (f.distributed() && !env("RANK")) {
        throw UsageError("WORLD_SIZE is " + std::to_string(f.world_size) +
                         " but RANK is not set; launch with torchrun (or loom train --nproc N), "
                         "which gives every process its rank");
    }
    f.rank =
        read_int(env, "RANK", 0, f.world_size - 1, 0,
                 "this process's rank, 0 to WORLD_SIZE - 1 = " + std::to_string(f.world_size - 1));
    f.local_rank = read_int(env, "LOCAL_RANK", 0, 1 << 20, f.rank, "0 or more");
    f.launched = env("RANK").has_value() && env("WORLD_SIZE").has_value();
    if (const std::optional<std::string> addr = env("MASTER_ADDR"); addr && !addr->empty())
        f.master_addr = *addr;
    f.master_port = read_int(env, "MASTER_PORT", 1, 65535, f.master_port, "a port, 1 to 65535");
    return f;
}

std::string faults_for_rank(const std::string& rules, int rank) {
    // Rules are separated by ';', a rule's fields by ':' (device/faults.h).
    const auto split = [](const std::string& text, char sep) {
        std::vector<std::string> parts;
        std::size_t start = 0;
        for (std::size_t end; (end = text.find(sep, start)) != std::string::npos; start = end + 1)
            parts.push_back(text.substr(start, end - start));
        parts.push_back(text.substr(start));
        return parts;
    };
    std::vector<std::string> kept_rules;
    for (const std::string& rule : split(rules, ';')) {
        std::vector<std::string> kept;
        std::optional<long long> only;
        for (const std::string& field : split(rule, ':')) {
            if (field.rfind("rank=", 0) != 0) {
                kept.push_back(field);
                continue;
            }
            only = whole_number(field.substr(5));
            if (!only || *only < 0) {
                throw UsageError("fault rule '" + rule +
                                 "': rank= must be a whole number from 0 (the rank the rule "
                                 "applies in)");
            }
        }
        if ((only && *only != rank) || kept.empty() || (kept.size() == 1 && kept[0].empty()))
            continue;
        std::string text;
        for (const std::string& f : kept) text += (text.empty() ? "" : ":") + f;
        kept_rules.push_back(text);
    }
    std::string out;
    for (const std::string& r : kept_rules) out += (out.empty() ? "" : ";") + r;
    return out;
}

}  // namespace loom::dist
