// Rank facts from torchrun's environment, and a clear error for each variable that is wrong.

#include <gtest/gtest.h>

#include <map>

#include "loom/core/error.h"
#include "loom/dist/rank.h"

namespace loom::dist {
namespace {

Environment env_of(std::map<std::string, std::string> vars) {
    return [vars](const std::string& name) -> std::optional<std::string> {
        const auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

std::string error_of(std::map<std::string, std::string> vars) {
    try {
        rank_from_environment(env_of(std::move(vars)));
    } catch (const UsageError& e) {
        return e.what();
    }
    return "";
}

TEST(RankFacts, AloneWithoutTorchrunsVariables) {
    const RankFacts f = rank_from_environment(env_of({}));
    EXPECT_FALSE(f.distributed());
    EXPECT_TRUE(f.leader());
    EXPECT_EQ(f.world_size, 1);
    EXPECT_EQ(f.master_addr, "127.0.0.1");
}

TEST(RankFacts, AsTorchrunSetsThem) {
    const RankFacts f = rank_from_environment(env_of({{"RANK", "2"},
                                                      {"WORLD_SIZE", "4"},
                                                      {"LOCAL_RANK", "0"},
                                                      {"MASTER_ADDR", "node0.cluster"},
                                                      {"MASTER_PORT", "29400"}}));
    EXPECT_TRUE(f.distributed());
    EXPECT_FALSE(f.leader());
    EXPECT_EQ(f.rank, 2);
    EXPECT_EQ(f.world_size, 4);
    EXPECT_EQ(f.local_rank, 0);  // the second node's first GPU
    EXPECT_EQ(f.master_addr, "node0.cluster");
    EXPECT_EQ(f.master_port, 29400);
    // LOCAL_RANK defaults to the rank on one machine.
    EXPECT_EQ(rank_from_environment(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}})).local_rank, 1);
}

TEST(RankFacts, EachWrongVariableIsNamed) {
    EXPECT_NE(error_of({{"WORLD_SIZE", "two"}}).find("WORLD_SIZE is 'two'"), std::string::npos);
    EXPECT_NE(error_of({{"WORLD_SIZE", "2"}}).find("RANK is not set"), std::string::npos);
    const std::string outside = error_of({{"WORLD_SIZE", "2"}, {"RANK", "2"}});
    EXPECT_NE(outside.find("RANK is '2'"), std::string::npos) << outside;
    EXPECT_NE(outside.find("0 to WORLD_SIZE - 1 = 1"), std::string::npos) << outside;
    EXPECT_NE(error_of({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_PORT", "70000"}})
                  .find("MASTER_PORT is '70000'"),
              std::string::npos);
    EXPECT_NE(error_of({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"LOCAL_RANK", "-1"}})
                  .find("LOCAL_RANK is '-1'"),
              std::string::npos);
}

TEST(RankFaults, ARuleWithARankAppliesInThatRankOnly) {
    const std::string rules = "oom:phase=train_step:step=3:rank=1;kill:phase=save;dirty:rank=0";
    EXPECT_EQ(faults_for_rank(rules, 0), "kill:phase=save;dirty");
    EXPECT_EQ(faults_for_rank(rules, 1), "oom:phase=train_step:step=3;kill:phase=save");
    EXPECT_EQ(faults_for_rank(rules, 2), "kill:phase=save");
    EXPECT_EQ(faults_for_rank("", 1), "");
    EXPECT_EQ(faults_for_rank("oom:alloc=4", 3), "oom:alloc=4");
}

TEST(RankFaults, ARankThatIsNotOneIsAUsageErrorNamingTheRule) {
    for (const char* bad : {"oom:phase=load:rank=x", "oom:phase=load:rank=-1", "oom:rank="}) {
        try {
            faults_for_rank(bad, 0);
            ADD_FAILURE() << bad << " was accepted";
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
        }
    }
}

}  // namespace
}  // namespace loom::dist
