#include "loom/device/faults.h"

#include <csignal>
#include <cstdlib>
#include <sstream>

#include "loom/core/error.h"

namespace loom {

namespace {

const char* const kGrammar =
    "rules are separated by ';': oom:phase=P[:step=N][:times=K][:during=update], oom:alloc=N, "
    "dirty, "
    "flaky:p=X:seed=S, host_oom:phase=P[:step=N][:times=K], kill:phase=P[:step=N]";

[[noreturn]] void bad_rule(const std::string& rule, const std::string& why) {
    throw UsageError("invalid fault rule '" + rule + "': " + why + " (" + kGrammar + ")");
}

std::vector<std::string> split(std::string_view text, char sep) {
    std::vector<std::string> parts;
    std::string part;
    for (char c : text) {
        if (c == sep) {
            parts.push_back(part);
            part.clear();
        } else {
            part.push_back(c);
        }
    }
    parts.push_back(part);
    return parts;
}

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return "";
    const auto e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
}

std::int64_t parse_int(const std::string& rule, const std::string& key, const std::string& v,
                       std::int64_t min) {
    std::size_t used = 0;
    long long value = 0;
    try {
        value = std::stoll(v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != v.size() || v.empty())
        bad_rule(rule, key + " must be a whole number, got '" + v + "'");
    if (value < min) bad_rule(rule, key + " must be >= " + std::to_string(min) + ", got " + v);
    return value;
}

FaultRule parse_rule(const std::string& rule) {
    const std::vector<std::string> parts = split(rule, ':');
    FaultRule r;
    r.text = rule;
    const std::string& head = parts[0];
    std::vector<std::pair<std::string, std::string>> params;
    for (std::size_t i = 1; i < parts.size(); ++i) {
        const std::size_t eq = parts[i].find('=');
        if (eq == std::string::npos) bad_rule(rule, "'" + parts[i] + "' is not KEY=VALUE");
        params.emplace_back(parts[i].substr(0, eq), parts[i].substr(eq + 1));
    }
    if (head == "dirty") {
        if (!params.empty()) bad_rule(rule, "dirty takes no parameters");
        r.kind = FaultRule::Kind::kDirty;
        return r;
    }
    if (head == "flaky") {
        r.kind = FaultRule::Kind::kFlaky;
        bool has_p = false;
        for (const auto& [k, v] : params) {
            if (k == "p") {
                char* end = nullptr;
                r.probability = std::strtod(v.c_str(), &end);
                if (v.empty() || *end != '\0' || r.probability < 0 || r.probability > 1) {
                    bad_rule(rule, "p must be a probability between 0 and 1, got '" + v + "'");
                }
                has_p = true;
            } else if (k == "seed") {
                r.seed = static_cast<std::uint64_t>(parse_int(rule, "seed", v, 0));
            } else {
                bad_rule(rule, "flaky has no parameter '" + k + "'");
            }
        }
        if (!has_p) bad_rule(rule, "flaky needs p=X");
        return r;
    }
    if (head != "oom" && head != "host_oom" && head != "kill") {
        bad_rule(rule, "unknown fault '" + head + "'");
    }
    bool has_phase = false;
    bool has_alloc = false;
    for (const auto& [k, v] : params) {
        if (k == "phase") {
            const auto phase = parse_phase(v);
            if (!phase) bad_rule(rule, "unknown phase '" + v + "' (phases: " + phase_names() + ")");
            r.phase = *phase;
            has_phase = true;
        } else if (k == "step") {
            r.step = parse_int(rule, "step", v, 0);
        } else if (k == "times") {
            r.times = static_cast<int>(parse_int(rule, "times", v, 1));
        } else if (k == "during" && head == "oom") {
            if (v != "update") bad_rule(rule, "during= takes 'update', got '" + v + "'");
            r.during_update = true;
        } else if (k == "alloc" && head == "oom") {
            r.allocation = static_cast<std::uint64_t>(parse_int(rule, "alloc", v, 1));
            has_alloc = true;
        } else {
            bad_rule(rule, head + " has no parameter '" + k + "'");
        }
    }
    if (head != "oom") {
        if (!has_phase) bad_rule(rule, head + " needs phase=P");
        if (head == "kill" && r.times != 1) bad_rule(rule, "kill has no times (it dies once)");
        r.kind = head == "kill" ? FaultRule::Kind::kKillInPhase : FaultRule::Kind::kHostOomInPhase;
        return r;
    }
    if (has_phase == has_alloc) bad_rule(rule, "oom needs exactly one of phase=P or alloc=N");
    if (has_alloc && (r.step || r.times != 1)) bad_rule(rule, "step and times go with phase=P");
    if (has_alloc && r.during_update) bad_rule(rule, "during=update goes with phase=train_step");
    r.kind = has_phase ? FaultRule::Kind::kOomInPhase : FaultRule::Kind::kOomAtAllocation;
    return r;
}

}  // namespace

std::vector<FaultRule> parse_faults(std::string_view text) {
    std::vector<FaultRule> rules;
    for (const std::string& raw : split(text, ';')) {
        const std::string rule = trim(raw);
        if (rule.empty()) continue;
        rules.push_back(parse_rule(rule));
    }
    return rules;
}

void FaultInjector::configure(std::vector<FaultRule> rules) {
    std::lock_guard<std::mutex> lock(mutex_);
    rules_ = std::move(rules);
    fired_.assign(rules_.size(), 0);
    rngs_.clear();
    for (const FaultRule& r : rules_) rngs_.emplace_back(r.seed);
    allocations_ = 0;
    failures_injected_ = 0;
}

bool FaultInjector::active() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return !rules_.empty();
}

void FaultInjector::set_phase(Phase phase, std::optional<std::int64_t> step) {
    std::lock_guard<std::mutex> lock(mutex_);
    phase_ = phase;
    step_ = step;
}

void FaultInjector::set_in_update(bool in_update) {
    std::lock_guard<std::mutex> lock(mutex_);
    in_update_ = in_update;
}

Phase FaultInjector::phase() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return phase_;
}

std::optional<std::int64_t> FaultInjector::step() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return step_;
}

std::optional<std::string> FaultInjector::on_device_allocation(std::uint64_t /*bytes*/) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++allocations_;
    std::optional<std::string> fire;
    for (std::size_t i = 0; i < rules_.size(); ++i) {
        const FaultRule& r = rules_[i];
        switch (r.kind) {
            case FaultRule::Kind::kDirty:
                if (!fire) fire = r.text;
                break;
            case FaultRule::Kind::kOomAtAllocation:
                if (allocations_ == r.allocation && fired_[i] == 0) {
                    ++fired_[i];
                    if (!fire) fire = r.text;
                }
                break;
            case FaultRule::Kind::kOomInPhase:
                if (phase_ == r.phase && (!r.step || step_ == r.step) && fired_[i] < r.times &&
                    (!r.during_update || in_update_) && !fire) {
                    ++fired_[i];
                    fire = r.text;
                }
                break;
            case FaultRule::Kind::kHostOomInPhase:
            case FaultRule::Kind::kKillInPhase: break;
            case FaultRule::Kind::kFlaky: {
                // Draw for every allocation so the sequence depends only on the seed and the
                // allocation count, not on which other rules fired.
                const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rngs_[i]);
                if (u < r.probability && !fire) fire = r.text;
                break;
            }
        }
    }
    if (fire) ++failures_injected_;
    return fire;
}

std::optional<std::string> FaultInjector::on_host_allocation(std::uint64_t /*bytes*/) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i = 0; i < rules_.size(); ++i) {
        const FaultRule& r = rules_[i];
        if (r.kind == FaultRule::Kind::kHostOomInPhase && phase_ == r.phase &&
            (!r.step || step_ == r.step) && fired_[i] < r.times) {
            ++fired_[i];
            ++failures_injected_;
            return r.text;
        }
    }
    return std::nullopt;
}

bool FaultInjector::kill_at_phase_start(Phase phase, std::optional<std::int64_t> step) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const FaultRule& r : rules_) {
        if (r.kind == FaultRule::Kind::kKillInPhase && phase == r.phase &&
            (!r.step || step == r.step)) {
            return true;
        }
    }
    return false;
}

bool FaultInjector::dirty() const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const FaultRule& r : rules_) {
        if (r.kind == FaultRule::Kind::kDirty) return true;
    }
    return false;
}

std::uint64_t FaultInjector::allocations_seen() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return allocations_;
}

std::uint64_t FaultInjector::failures_injected() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return failures_injected_;
}

FaultInjector& fault_injector() {
    static FaultInjector* injector = new FaultInjector();  // never destroyed: allocators may
                                                           // consult it during exit
    return *injector;
}

void configure_faults(const std::optional<std::string>& flag) {
    std::string text;
    if (flag) {
        text = *flag;
    } else if (const char* env = std::getenv("LOOM_FAULTS"); env != nullptr) {
        text = env;
    }
    fault_injector().configure(parse_faults(text));
}

PhaseScope::PhaseScope(Phase phase, std::optional<std::int64_t> step)
    : previous_(fault_injector().phase()), previous_step_(fault_injector().step()) {
    if (fault_injector().kill_at_phase_start(phase, step)) std::raise(SIGKILL);
    fault_injector().set_phase(phase, step);
}

PhaseScope::~PhaseScope() {
    fault_injector().set_phase(previous_, previous_step_);
}

UpdateScope::UpdateScope() {
    fault_injector().set_in_update(true);
}

UpdateScope::~UpdateScope() {
    fault_injector().set_in_update(false);
}

}  // namespace loom
