#pragma once

// Which process of a data-parallel run this is, as torchrun tells it through the environment:
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT (torchrun sets all five, also across
// nodes after its rendezvous). Without WORLD_SIZE (or with WORLD_SIZE=1) the process trains
// alone. No torch.

#include <functional>
#include <optional>
#include <string>

namespace loom::dist {

struct RankFacts {
    int rank = 0;
    int world_size = 1;
    int local_rank = 0;  // which device of this node (cuda:LOCAL_RANK)
    // RANK and WORLD_SIZE are set (torchrun, `loom train --nproc`): the process trains through
    // the process group, also as the one rank of WORLD_SIZE=1 (the GPU check's smoke run).
    bool launched = false;
    std::string master_addr = "127.0.0.1";
    int master_port = 29500;

    bool distributed() const { return world_size > 1; }
    // Rank 0 alone writes the run folder (LoRA files, samples, checkpoints, plan, events, store).
    bool leader() const { return rank == 0; }
};

// A variable's value, or nullopt when it is not set.
using Environment = std::function<std::optional<std::string>(const std::string& name)>;
Environment process_environment();

// The rank facts `env` gives. Throws UsageError naming the variable and what it must be: a
// RANK, WORLD_SIZE or LOCAL_RANK that is not a whole number, a rank outside 0..WORLD_SIZE-1,
// WORLD_SIZE > 1 without RANK, a MASTER_PORT outside 1..65535.
RankFacts rank_from_environment(const Environment& env);

// The fault-injection rules (LOOM_FAULTS / --faults, device/faults.h) that apply in `rank`: a
// rule with a `rank=R` field (`oom:phase=train_step:step=3:rank=1`) is kept, without the field,
// in rank R only; a rule without one applies in every rank. Throws UsageError naming a rule
// whose rank is not a whole number from 0.
std::string faults_for_rank(const std::string& rules, int rank);

}  // namespace loom::dist
