#include "loom/dist/rank.h"

#include <cstdlib>
#include <string>

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
    std::string out;
    std::size_t start = 0;
    while (start <= rules.size()) {
        std::size_t end = rules.find(';', start);
        if (end == std::string::npos) end = rules.size();
        const std::string rule = rules.substr(start, end - start);
        start = end + 1;
        std::string kept;
        std::optional<long long> only;
        std::size_t f = 0;
        while (f <= rule.size()) {
            std::size_t g = rule.find(':', f);
            if (g == std::string::npos) g = rule.size();
            const std::string field = rule.substr(f, g - f);
            f = g + 1;
            if (field.rfind("rank=", 0) == 0) {
                only = whole_number(field.substr(5));
                if (!only || *only < 0) {
                    throw UsageError("fault rule '" + rule + "': rank= must be a whole number " +
                                     "from 0 (the rank the rule applies in)");
                }
                continue;
            }
            kept += (kept.empty() ? "" : ":") + field;
        }
        if (only && *only != rank) continue;
        if (kept.empty()) continue;
        out += (out.empty() ? "" : ";") + kept;
    }
    return out;
}

}  // namespace loom::dist
