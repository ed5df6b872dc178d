// `loom doctor` over the corpus (tests/doctor/corpus, plus the fixtures of tests/doctor/logs): logs
// in the shapes ai-toolkit, kohya sd-scripts (and the GUIs and musubi-tuner built on it),
// OneTrainer, SimpleTuner, diffusion-pipe, diffusers scripts and loom itself print, written for
// this project from the structure of public issue reports. corpus/expected.tsv names each log's
// tool, case, a part of its first change, its phase and whether a traceback frame places the OOM.
// The corpus passes when at least 90% of the logs get all of them, every control says no_oom,
// and no log with a placement, caching, sampling or step frame is left with the phase "unknown".
// Each miss is printed.

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "loom/doctor/diagnosis.h"
#include "text_match.h"

namespace loom::doctor {
namespace {

const std::string kCorpus = "tests/doctor/corpus/";

struct Expected {
    std::string file;  // relative to kCorpus ("../logs/x.log" for the older fixtures)
    std::string tool;
    std::string log_case;
    std::string first_change;  // a part of it; "-" for no_oom
    std::string phase;         // "-": not checked
    bool frame = false;        // a traceback frame (placement, caching, sampling, step) places it
};

std::vector<std::string> split_tabs(const std::string& line) {
    std::vector<std::string> out;
    std::stringstream in(line);
    std::string field;
    while (std::getline(in, field, '\t')) out.push_back(field);
    return out;
}

std::vector<Expected> manifest() {
    std::ifstream in(kCorpus + "expected.tsv");
    std::vector<Expected> out;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line.front() == '#') continue;
        const std::vector<std::string> f = split_tabs(line);
        if (f.size() != 6) {
            ADD_FAILURE() << "expected.tsv: 6 tab-separated fields wanted: " << line;
            continue;
        }
        out.push_back({f[0], f[1], f[2], f[3], f[4], f[5] == "yes"});
    }
    return out;
}

// What went wrong for one log, or "" when it got everything expected.
std::string miss(const Expected& e, const Diagnosis& d) {
    std::string why;
    if (to_string(d.tool) != e.tool) why += " tool " + std::string(to_string(d.tool));
    if (to_string(d.log_case) != e.log_case) why += " case " + std::string(to_string(d.log_case));
    if (e.first_change != "-" && d.first_change.find(e.first_change) == std::string::npos) {
        why += " first change \"" + d.first_change + "\"";
    }
    if (e.phase != "-" && d.phase != e.phase) why += " phase \"" + d.phase + "\"";
    return why;
}

TEST(DoctorCorpus, NamesTheCaseAndFirstChangeOfTheLogsPeoplePaste) {
    const std::vector<Expected> logs = manifest();
    std::size_t corpus_logs = 0;
    std::size_t passed = 0;
    std::set<std::string> tools;
    std::set<std::string> cases;
    for (const Expected& e : logs) {
        if (e.file.rfind("../", 0) != 0) ++corpus_logs;
        tools.insert(e.tool);
        cases.insert(e.log_case);
        const Diagnosis d = diagnose_log_file(kCorpus + e.file);
        const std::string why = miss(e, d);
        if (why.empty()) {
            ++passed;
        } else {
            std::cout << "[ MISS ] " << e.file << ": expected " << e.tool << " / " << e.log_case
                      << " / \"" << e.first_change << "\" / " << e.phase << "; got" << why << "\n";
        }
        // Hard rules: a control is never an OOM, and a frame always places the OOM.
        if (e.log_case == "no_oom") {
            EXPECT_FALSE(d.found_oom()) << e.file << ": a control must answer no_oom";
        }
        if (e.frame) {
            EXPECT_NE(d.phase, "unknown") << e.file << ": a traceback frame places this OOM";
            EXPECT_FALSE(d.phase.empty()) << e.file;
        }
    }
    std::cout << "[ CORPUS ] " << passed << " of " << logs.size() << " logs (" << corpus_logs
              << " in corpus/) got the expected tool, case, first change and "
              << "phase\n";
    EXPECT_GE(corpus_logs, 25u);
    EXPECT_GE(passed * 10, logs.size() * 9) << "fewer than 90% of the corpus passes";
    for (const char* tool : {"loom", "ai-toolkit", "kohya", "pytorch"}) {
        EXPECT_TRUE(tools.count(tool)) << "the corpus has no " << tool << " log";
    }
    for (const LogCase c :
         {LogCase::kNoOom, LogCase::kBeforeStep1, LogCase::kEarlySteps, LogCase::kSamplingOnly,
          LogCase::kSometimes, LogCase::kVideoFrames, LogCase::kWorkerState, LogCase::kHostRam}) {
        EXPECT_TRUE(cases.count(to_string(c))) << "the corpus has no " << to_string(c) << " log";
    }
}

// ---------------------------------------------------------------------------------------------
// The classes of issue 25, one by one, with the evidence lines the answer quotes.

Diagnosis corpus(const std::string& name) {
    return diagnose_log_file(kCorpus + name);
}

bool has_evidence(const Diagnosis& d, const std::string& text_part, const std::string& note_part) {
    for (const EvidenceLine& e : d.evidence) {
        if (e.text.find(text_part) != std::string::npos &&
            e.note.find(note_part) != std::string::npos) {
            return true;
        }
    }
    return false;
}

using loom::testing::contains;

TEST(DoctorCorpusClasses, OomKillerIsHostRamWithItsOwnFirstChange) {
    const Diagnosis d = corpus("aitk_wan22_oom_killer.log");
    EXPECT_EQ(to_string(d.log_case), std::string("host_ram"));
    EXPECT_EQ(d.phase, "train_step");
    EXPECT_TRUE(contains(d.first_change, "`datasets[].cache_latents_to_disk: true`"))
        << d.first_change;
    EXPECT_TRUE(has_evidence(d, "Killed", "first OOM (training step, step 151, host RAM)"));
    EXPECT_EQ(d.oom_count, 1u);  // dmesg's lines tell the same death again
    EXPECT_TRUE(has_evidence(d, "Out of memory: Killed process 48812", "the same death, told"));
    bool supervisor = false;
    for (const std::string& c : d.further_changes) supervisor |= contains(c, "supervisor");
    EXPECT_TRUE(supervisor);
    EXPECT_TRUE(contains(render(d), "case:  host_ram - host RAM ran out, not the GPU"));
}

TEST(DoctorCorpusClasses, SigkillExitCodesAndTheCpuAllocatorAreHostRam) {
    for (const char* name : {"kohya_gui_sigkill_load.log", "dpipe_wan14b_exit_minus9.log",
                             "diffusers_cpu_allocator_load.log", "kohya_windows_paging_file.log"}) {
        SCOPED_TRACE(name);
        const Diagnosis d = corpus(name);
        EXPECT_EQ(to_string(d.log_case), std::string("host_ram"));
        EXPECT_EQ(d.phase, "load");
    }
    EXPECT_TRUE(has_evidence(corpus("dpipe_wan14b_exit_minus9.log"), "exits with return code = -9",
                             "host RAM"));
}

TEST(DoctorCorpusClasses, LoomsOwnHostRamAndSupervisorRestart) {
    const Diagnosis console = corpus("loom_host_ram_console.log");
    EXPECT_EQ(to_string(console.log_case), std::string("host_ram"));
    EXPECT_TRUE(contains(console.first_change, "(loom already made this change, line 7)"))
        << console.first_change;
    const Diagnosis events = corpus("loom_supervisor_restart_events.jsonl");
    EXPECT_EQ(to_string(events.log_case), std::string("host_ram"));
    EXPECT_TRUE(has_evidence(events, "\"memory_related\":true", "host RAM"));
    EXPECT_TRUE(contains(events.first_change, "(loom already made this change, line 4)"))
        << events.first_change;
    ASSERT_EQ(events.loom_changes.size(), 1u);
    EXPECT_EQ(events.loom_changes[0].knob, "host.memory_caches");
    EXPECT_EQ(events.loom_changes[0].to, "false");
}

TEST(DoctorCorpusClasses, RankPrefixedTracebacksAreRead) {
    const Diagnosis d = corpus("dpipe_rank0_train_batch_sometimes.log");
    EXPECT_EQ(to_string(d.log_case), std::string("sometimes"));
    EXPECT_EQ(d.oom_step, 13);
    EXPECT_EQ(d.figures.requested, 1202590843u);  // 1.12 GiB, read through "[rank0]: "
    const Diagnosis two = corpus("dpipe_wan_i2v_two_gpus_video.log");
    EXPECT_EQ(to_string(two.log_case), std::string("video_frames"));
    EXPECT_EQ(two.oom_count, 1u);  // both ranks' tracebacks are one OOM
    EXPECT_TRUE(contains(two.first_change, "81 -> 41")) << two.first_change;
    EXPECT_TRUE(has_evidence(two, "in train_batch", "traceback frame: train_step phase"));
}

TEST(DoctorCorpusClasses, PlacementFramesAreTheLoad) {
    const Diagnosis d = corpus("onetrainer_setup_train_device_load.log");
    EXPECT_EQ(to_string(d.log_case), std::string("before_step_1"));
    EXPECT_EQ(d.moment, "load");
    const Diagnosis rich = corpus("kohya_gui_rich_prepare_load.log");
    EXPECT_EQ(rich.moment, "load");
    // No marker line before it: the frame alone says where.
    const Diagnosis bare = diagnose_log(R"(Traceback (most recent call last):
  File "/w/train.py", line 88, in main
    pipe.transformer.to("cuda")
  File "/v/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1355, in to
    return self._apply(convert)
  File "/v/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1341, in convert
    return t.to(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 90.00 MiB. GPU 0 has a total capacity of 11.99 GiB of which 40.00 MiB is free. Of the allocated memory 11.20 GiB is allocated by PyTorch, and 10.00 MiB is reserved by PyTorch but unallocated.
)",
                                        "bare.log");
    EXPECT_EQ(bare.phase, "load");
    EXPECT_TRUE(has_evidence(bare, "in to", "a model moving to the device (load phase)"));
}

TEST(DoctorCorpusClasses, ABarPrintedAfterTheErrorIsAFinishedStep) {
    const Diagnosis d = corpus("kohya_late_bar_after_error.log");
    EXPECT_EQ(to_string(d.log_case), std::string("early_steps"));
    EXPECT_EQ(d.oom_step, 2);
    EXPECT_TRUE(contains(d.reason, "after 1 successful step")) << d.reason;
    EXPECT_TRUE(has_evidence(d, "1/2100", "step 1 had finished: the bar was printed after"));
    // Progress that goes on after an OOM is still training that went on.
    const Diagnosis on = diagnose_log(R"(Steps:   0%|          | 0/100 [00:00<?, ?it/s]
Steps:  20%|##        | 20/100 [00:40<02:40,  2.00s/it, loss=0.1]
RuntimeError: CUDA out of memory. Tried to allocate 1.00 GiB
Steps:  21%|##        | 21/100 [00:42<02:38,  2.00s/it, loss=0.1]
Steps:  22%|##        | 22/100 [00:44<02:36,  2.00s/it, loss=0.1]
)",
                                      "on.log");
    EXPECT_EQ(to_string(on.log_case), std::string("sometimes"));
    EXPECT_EQ(on.oom_step, 21);
}

TEST(DoctorCorpusClasses, WrappedRichMessagesGiveTheirFigures) {
    const Diagnosis d = corpus("kohya_rich_wrapped_step_oom.log");
    EXPECT_EQ(to_string(d.log_case), std::string("early_steps"));
    EXPECT_EQ(d.phase, "train_step");
    ASSERT_TRUE(d.figures.free.has_value());
    EXPECT_EQ(*d.figures.free, 0u);               // "0 bytes" / "free;" on two lines
    EXPECT_EQ(d.figures.reserved, 14624363643u);  // 13.62 GiB
    EXPECT_EQ(d.figures.total, 15837691904u);     // 14.75 GiB
    const Diagnosis gui = corpus("kohya_gui_rich_prepare_load.log");
    EXPECT_EQ(gui.figures.total, 8589934592u);      // "GPU 0 has a" / "total capacty of 8.00"
    EXPECT_EQ(gui.figures.allocated, 7741678551u);  // "7.21" / "GiB is allocated"
}

TEST(DoctorCorpusClasses, AnsiColouredTracebacksAreRead) {
    const Diagnosis d = corpus("aitk_ansi_sampling_oom.log");
    EXPECT_EQ(to_string(d.log_case), std::string("sampling_only"));
    EXPECT_EQ(d.figures.requested, 3393024164u);  // 3.16 GiB
    for (const EvidenceLine& e : d.evidence) EXPECT_EQ(e.text.find('\x1b'), std::string::npos);
}

TEST(DoctorCorpusClasses, SmallRequestWithPlentyFreeSaysMemoryIsHeldElsewhere) {
    const Diagnosis d = corpus("aitk_qwen_small_alloc_plenty_free.log");
    EXPECT_EQ(to_string(d.log_case), std::string("early_steps"));
    EXPECT_TRUE(contains(d.reason, "only 80.00 MiB was asked for while 6.18 GiB was free"))
        << d.reason;
    EXPECT_TRUE(contains(d.reason, "held elsewhere")) << d.reason;
    ASSERT_FALSE(d.further_changes.empty());
    EXPECT_TRUE(contains(d.further_changes[0], "expandable_segments:True"));
    // A card this process's PyTorch filled is not "held elsewhere".
    EXPECT_FALSE(contains(corpus("kohya_sometimes_step_1337.log").reason, "held elsewhere"));
}

TEST(DoctorCorpusClasses, ControlsShowTheErrorThatEndedThem) {
    const Diagnosis d = corpus("control_device_mismatch.log");
    EXPECT_FALSE(d.found_oom());
    EXPECT_TRUE(has_evidence(d, "Expected all tensors to be on the same device", "not an out-of"));
}

TEST(DoctorCorpusClasses, JsonCarriesThePhase) {
    EXPECT_TRUE(
        contains(render_json(corpus("kohya_cache_latents_oom.log")), "\"phase\": \"cache\""));
}

}  // namespace
}  // namespace loom::doctor
