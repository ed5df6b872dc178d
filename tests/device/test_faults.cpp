// Fault rules: the grammar, and that each fires exactly when specified and never otherwise.

#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/device/faults.h"

namespace loom {
namespace {

std::string parse_error(const char* text) {
    try {
        parse_faults(text);
    } catch (const UsageError& e) {
        return e.what();
    }
    return "";
}

// Which of `count` allocations fail under `injector`, 1-based.
std::vector<int> failing(FaultInjector& injector, int count) {
    std::vector<int> out;
    for (int i = 1; i <= count; ++i) {
        if (injector.on_device_allocation(1024)) out.push_back(i);
    }
    return out;
}

TEST(FaultGrammar, ParsesEveryRule) {
    const auto rules = parse_faults(
        "oom:phase=sample:times=2; oom:phase=train_step:step=3;oom:alloc=1234;dirty;"
        "flaky:p=0.25:seed=7");
    ASSERT_EQ(rules.size(), 5u);
    EXPECT_EQ(rules[0].kind, FaultRule::Kind::kOomInPhase);
    EXPECT_EQ(rules[0].phase, Phase::kSample);
    EXPECT_EQ(rules[0].times, 2);
    EXPECT_FALSE(rules[0].step.has_value());
    EXPECT_EQ(rules[1].phase, Phase::kTrainStep);
    EXPECT_EQ(rules[1].step, 3);
    EXPECT_EQ(rules[1].times, 1);
    EXPECT_EQ(rules[2].kind, FaultRule::Kind::kOomAtAllocation);
    EXPECT_EQ(rules[2].allocation, 1234u);
    EXPECT_EQ(rules[3].kind, FaultRule::Kind::kDirty);
    EXPECT_EQ(rules[4].kind, FaultRule::Kind::kFlaky);
    EXPECT_DOUBLE_EQ(rules[4].probability, 0.25);
    EXPECT_EQ(rules[4].seed, 7u);
    EXPECT_TRUE(parse_faults("").empty());
}

TEST(FaultGrammar, MalformedRulesAreClearErrors) {
    const std::string grammar =
        " (rules are separated by ';': oom:phase=P[:step=N][:times=K][:during=update], "
        "oom:alloc=N, dirty, "
        "flaky:p=X:seed=S, host_oom:phase=P[:step=N][:times=K], kill:phase=P[:step=N])";
    EXPECT_EQ(parse_error("oom:phase=training"),
              "invalid fault rule 'oom:phase=training': unknown phase 'training' (phases: load, "
              "cache, probe, first_sample, sample, train_step, save)" +
                  grammar);
    EXPECT_EQ(parse_error("oom"),
              "invalid fault rule 'oom': oom needs exactly one of phase=P or alloc=N" + grammar);
    EXPECT_EQ(parse_error("oom:alloc=0"),
              "invalid fault rule 'oom:alloc=0': alloc must be >= 1, got 0" + grammar);
    EXPECT_EQ(parse_error("oom:phase=sample:times=x"),
              "invalid fault rule 'oom:phase=sample:times=x': times must be a whole number, got "
              "'x'" +
                  grammar);
    EXPECT_EQ(parse_error("oom:alloc=3:times=2"),
              "invalid fault rule 'oom:alloc=3:times=2': step and times go with phase=P" + grammar);
    EXPECT_EQ(parse_error("flaky:p=2"),
              "invalid fault rule 'flaky:p=2': p must be a probability between 0 and 1, got '2'" +
                  grammar);
    EXPECT_EQ(parse_error("flaky:seed=1"),
              "invalid fault rule 'flaky:seed=1': flaky needs p=X" + grammar);
    EXPECT_EQ(parse_error("dirty:now=1"),
              "invalid fault rule 'dirty:now=1': dirty takes no parameters" + grammar);
    EXPECT_EQ(parse_error("boom"), "invalid fault rule 'boom': unknown fault 'boom'" + grammar);
    EXPECT_EQ(parse_error("oom:phase"),
              "invalid fault rule 'oom:phase': 'phase' is not KEY=VALUE" + grammar);
    EXPECT_EQ(parse_error("host_oom:alloc=3"),
              "invalid fault rule 'host_oom:alloc=3': host_oom has no parameter 'alloc'" + grammar);
    EXPECT_EQ(parse_error("kill:step=2"),
              "invalid fault rule 'kill:step=2': kill needs phase=P" + grammar);
    EXPECT_EQ(
        parse_error("kill:phase=load:times=2"),
        "invalid fault rule 'kill:phase=load:times=2': kill has no times (it dies once)" + grammar);
}

TEST(FaultFiring, HostRuleFiresOnHostAllocationsOnlyInItsPhase) {
    FaultInjector injector;
    injector.configure(parse_faults("host_oom:phase=train_step:step=2:times=2"));
    EXPECT_FALSE(injector.on_host_allocation(64));  // no phase yet
    injector.set_phase(Phase::kTrainStep, 1);
    EXPECT_FALSE(injector.on_host_allocation(64));
    injector.set_phase(Phase::kTrainStep, 2);
    EXPECT_FALSE(injector.on_device_allocation(64));  // device allocations are not its business
    EXPECT_TRUE(injector.on_host_allocation(64));
    EXPECT_TRUE(injector.on_host_allocation(64));
    EXPECT_FALSE(injector.on_host_allocation(64));  // times=2
}

TEST(FaultFiring, KillRuleMatchesThePhaseAndStepThatBegin) {
    FaultInjector injector;
    injector.configure(parse_faults("kill:phase=train_step:step=3"));
    EXPECT_FALSE(injector.kill_at_phase_start(Phase::kLoad, std::nullopt));
    EXPECT_FALSE(injector.kill_at_phase_start(Phase::kTrainStep, 2));
    EXPECT_TRUE(injector.kill_at_phase_start(Phase::kTrainStep, 3));
    injector.configure(parse_faults("kill:phase=load"));
    EXPECT_TRUE(injector.kill_at_phase_start(Phase::kLoad, std::nullopt));
}

TEST(FaultFiring, AllocationRuleFiresOnExactlyThatAllocation) {
    FaultInjector injector;
    injector.configure(parse_faults("oom:alloc=5"));
    EXPECT_EQ(failing(injector, 20), std::vector<int>{5});
}

TEST(FaultFiring, PhaseRuleFiresOnlyInItsPhaseAndTimes) {
    FaultInjector injector;
    injector.configure(parse_faults("oom:phase=sample:times=2"));
    injector.set_phase(Phase::kTrainStep, 1);
    EXPECT_TRUE(failing(injector, 10).empty());
    injector.set_phase(Phase::kSample);
    EXPECT_EQ(failing(injector, 10), (std::vector<int>{1, 2}));  // the next two allocations
    injector.set_phase(Phase::kTrainStep, 2);
    injector.set_phase(Phase::kSample);
    EXPECT_TRUE(failing(injector, 10).empty());  // spent
}

TEST(FaultFiring, PhaseRuleWithStepWaitsForThatStep) {
    FaultInjector injector;
    injector.configure(parse_faults("oom:phase=train_step:step=3"));
    for (int step = 1; step <= 5; ++step) {
        injector.set_phase(Phase::kTrainStep, step);
        EXPECT_EQ(failing(injector, 4), step == 3 ? std::vector<int>{1} : std::vector<int>{})
            << "step " << step;
    }
}

TEST(FaultFiring, DuringUpdateWaitsForTheOptimizerUpdate) {
    FaultInjector injector;
    injector.configure(parse_faults("oom:phase=train_step:step=2:during=update"));
    injector.set_phase(Phase::kTrainStep, 2);
    EXPECT_TRUE(failing(injector, 5).empty());  // the forward and backward passes
    injector.set_in_update(true);
    EXPECT_EQ(failing(injector, 3), std::vector<int>{1});
    injector.set_in_update(false);
    EXPECT_NE(parse_error("oom:phase=train_step:during=forward"), "");
    EXPECT_NE(parse_error("oom:alloc=3:during=update"), "");
}

TEST(FaultFiring, DirtyFailsEverythingAndReportsIt) {
    FaultInjector injector;
    EXPECT_FALSE(injector.dirty());
    injector.configure(parse_faults("dirty"));
    EXPECT_TRUE(injector.dirty());
    EXPECT_EQ(failing(injector, 3), (std::vector<int>{1, 2, 3}));
}

TEST(FaultFiring, FlakyIsSeededAndBounded) {
    FaultInjector a;
    FaultInjector b;
    a.configure(parse_faults("flaky:p=0.3:seed=11"));
    b.configure(parse_faults("flaky:p=0.3:seed=11"));
    const auto fa = failing(a, 1000);
    EXPECT_EQ(fa, failing(b, 1000));  // same seed, same failures
    EXPECT_GT(fa.size(), 240u);       // about 300 of 1000
    EXPECT_LT(fa.size(), 360u);
    FaultInjector never;
    never.configure(parse_faults("flaky:p=0:seed=1"));
    EXPECT_TRUE(failing(never, 200).empty());
    FaultInjector always;
    always.configure(parse_faults("flaky:p=1:seed=1"));
    EXPECT_EQ(failing(always, 50).size(), 50u);
}

TEST(FaultFiring, NoRulesNeverFire) {
    FaultInjector injector;
    EXPECT_FALSE(injector.active());
    injector.set_phase(Phase::kSample);
    EXPECT_TRUE(failing(injector, 100).empty());
    EXPECT_EQ(injector.allocations_seen(), 100u);
}

TEST(FaultFiring, PhaseScopeRestores) {
    fault_injector().set_phase(Phase::kTrainStep, 4);
    {
        PhaseScope scope(Phase::kSample);
        EXPECT_EQ(fault_injector().phase(), Phase::kSample);
    }
    EXPECT_EQ(fault_injector().phase(), Phase::kTrainStep);
    EXPECT_EQ(fault_injector().step(), 4);
    fault_injector().set_phase(Phase::kNone);
}

}  // namespace
}  // namespace loom
