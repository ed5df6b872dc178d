// `loom doctor`'s diagnosis over real-shaped logs (tests/doctor/logs): ai-toolkit, kohya
// sd-scripts, plain PyTorch scripts and loom's own console, loom.log and events.jsonl. Each
// fixture checks the case, the first change, the evidence line numbers and the parsed figures.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/utf8.h"
#include "loom/doctor/diagnosis.h"
#include "text_match.h"

namespace loom::doctor {
namespace {

// Sizes as PyTorch prints them ("23.53 GiB"), rounded to bytes the way the parser does.
std::uint64_t mib(double v) {
    return static_cast<std::uint64_t>(std::llround(v * 1048576.0));
}
std::uint64_t gib(double v) {
    return static_cast<std::uint64_t>(std::llround(v * 1073741824.0));
}

Diagnosis fixture(const std::string& name) {
    return diagnose_log_file("tests/doctor/logs/" + name);
}

std::string read_fixture(const std::string& name) {
    std::ifstream in("tests/doctor/logs/" + name, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

std::vector<std::size_t> evidence_lines(const Diagnosis& d) {
    std::vector<std::size_t> out;
    for (const EvidenceLine& e : d.evidence) out.push_back(e.line);
    return out;
}

bool has_evidence(const Diagnosis& d, std::size_t line, const std::string& note_part) {
    return std::any_of(d.evidence.begin(), d.evidence.end(), [&](const EvidenceLine& e) {
        return e.line == line && e.note.find(note_part) != std::string::npos;
    });
}

using loom::testing::contains;

// ---------------------------------------------------------------------------------------------
// ai-toolkit

TEST(DiagnosisAiToolkit, LoadOomWhileQuantizingIsBeforeStep1WithLowVramFirst) {
    const Diagnosis d = fixture("aitk_load_quantize_oom.log");
    EXPECT_EQ(to_string(d.tool), std::string("ai-toolkit"));
    EXPECT_EQ(to_string(d.log_case), std::string("before_step_1"));
    EXPECT_EQ(d.moment, "load");
    EXPECT_TRUE(contains(d.first_change, "`model.low_vram: true`")) << d.first_change;
    EXPECT_TRUE(contains(d.reason, "low_vram is off")) << d.reason;
    // "Error running job: X" and the traceback's last line are the same OOM.
    EXPECT_EQ(d.oom_count, 1u);
    EXPECT_FALSE(d.oom_step.has_value());
    EXPECT_EQ(evidence_lines(d), (std::vector<std::size_t>{18, 31, 32}));
    EXPECT_TRUE(has_evidence(d, 31, "the model load starts"));
    EXPECT_TRUE(has_evidence(d, 32, "first OOM (model load)"));
    // New-style message: 88 MiB free, but this process's PyTorch holds the card: not a worker.
    EXPECT_EQ(d.figures.line, 32u);
    EXPECT_EQ(d.figures.requested, mib(126.00));
    EXPECT_EQ(d.figures.free, mib(88.19));
    EXPECT_EQ(d.figures.total, gib(23.53));
    EXPECT_EQ(d.figures.allocated, gib(22.94));
    EXPECT_EQ(d.figures.reserved_unallocated, mib(60.12));
    EXPECT_EQ(d.figures.this_process, gib(23.43));
    EXPECT_FALSE(d.figures.reserved.has_value());
}

TEST(DiagnosisAiToolkit, BaselineSampleOomIsBeforeStep1FirstSample) {
    const Diagnosis d = fixture("aitk_baseline_sample_oom.log");
    EXPECT_EQ(to_string(d.log_case), std::string("before_step_1"));
    EXPECT_EQ(d.moment, "first_sample");
    EXPECT_TRUE(contains(d.first_change, "`train.skip_first_sample: true`")) << d.first_change;
    EXPECT_TRUE(contains(d.first_change, "`sample.width`")) << d.first_change;
    EXPECT_TRUE(contains(d.first_change, "`train.disable_sampling: true`")) << d.first_change;
    EXPECT_TRUE(has_evidence(d, 31, "the baseline sample starts"));
    EXPECT_TRUE(has_evidence(d, 33, "first OOM (baseline sample)"));
    EXPECT_EQ(d.figures.requested, gib(4.88));
    EXPECT_EQ(d.figures.free, mib(401.25));
    EXPECT_EQ(d.figures.total, gib(31.37));
    EXPECT_EQ(d.figures.reserved_unallocated, gib(2.87));
}

TEST(DiagnosisAiToolkit, Step2OomLoopIsEarlyStepsWithGradientCheckpointingFirst) {
    const Diagnosis d = fixture("aitk_step2_oom_loop.log");
    EXPECT_EQ(to_string(d.log_case), std::string("early_steps"));
    EXPECT_EQ(d.oom_step, 2);
    EXPECT_EQ(d.oom_count, 3u);  // three skipped batches; the abort is not a fourth sighting
    EXPECT_EQ(d.first_change, "set `train.gradient_checkpointing: true`");
    ASSERT_GE(d.further_changes.size(), 2u);
    EXPECT_TRUE(contains(d.further_changes[0], "`train.batch_size: 1`"));
    EXPECT_TRUE(contains(d.further_changes[1], "`datasets[].resolution`"));
    EXPECT_TRUE(contains(d.reason, "gradient checkpointing is off")) << d.reason;
    EXPECT_TRUE(contains(d.reason, "the run then gave up")) << d.reason;
    EXPECT_TRUE(has_evidence(d, 10, "gradient checkpointing"));
    EXPECT_TRUE(has_evidence(d, 31, "last successful training step before the OOM (step 1)"));
    EXPECT_TRUE(has_evidence(d, 32, "first OOM (training step, step 2, batch skipped)"));
    EXPECT_TRUE(has_evidence(d, 38, "the run gave up"));
    EXPECT_TRUE(d.figures.empty());  // ai-toolkit swallows the CUDA message when it skips
}

TEST(DiagnosisAiToolkit, OomAtASampleStepIsSamplingOnly) {
    const Diagnosis d = fixture("aitk_sampling_only.log");
    EXPECT_EQ(to_string(d.log_case), std::string("sampling_only"));
    EXPECT_FALSE(d.oom_step.has_value());  // no training step failed
    EXPECT_TRUE(contains(d.first_change, "`sample.width`")) << d.first_change;
    EXPECT_TRUE(contains(d.first_change, "`sample.sample_every`")) << d.first_change;
    EXPECT_TRUE(contains(d.first_change, "`train.disable_sampling: true`")) << d.first_change;
    EXPECT_TRUE(contains(d.reason, "up to step 500")) << d.reason;
    EXPECT_EQ(evidence_lines(d), (std::vector<std::size_t>{29, 32, 33}));
    EXPECT_TRUE(has_evidence(d, 29, "(step 500)"));
    EXPECT_TRUE(has_evidence(d, 33, "first OOM (sampling at step 500)"));
    EXPECT_EQ(d.figures.requested, gib(9.00));
    EXPECT_EQ(d.figures.free, gib(5.12));
}

TEST(DiagnosisAiToolkit, SkippedBatchThenMoreProgressIsSometimes) {
    const Diagnosis d = fixture("aitk_sometimes.log");
    EXPECT_EQ(to_string(d.log_case), std::string("sometimes"));
    EXPECT_EQ(d.oom_step, 348);
    EXPECT_EQ(d.oom_count, 2u);
    EXPECT_TRUE(contains(d.first_change, "drop the largest resolution bucket")) << d.first_change;
    EXPECT_TRUE(contains(d.reason, "OOM again at step 611")) << d.reason;
    EXPECT_TRUE(contains(d.reason, "18 successful steps after an OOM")) << d.reason;
    // The bar line and the skip message share a physical line (print after a \r redraw).
    EXPECT_TRUE(has_evidence(d, 29, "first OOM (training step, step 348, batch skipped)"));
    EXPECT_TRUE(has_evidence(d, 30, "training went on after the OOM (step 349)"));
    EXPECT_TRUE(has_evidence(d, 34, "step 611"));
}

TEST(DiagnosisAiToolkit, WanVideoOomIsVideoFramesWithFewerFramesFirst) {
    const Diagnosis d = fixture("aitk_wan_video.log");
    EXPECT_EQ(to_string(d.log_case), std::string("video_frames"));
    EXPECT_EQ(d.oom_step, 1);
    EXPECT_TRUE(contains(d.first_change, "`datasets[].num_frames`")) << d.first_change;
    EXPECT_TRUE(contains(d.first_change, "81 -> 41")) << d.first_change;
    // Batch size is already 1 in this log: the next rung is the largest bucket.
    ASSERT_FALSE(d.further_changes.empty());
    EXPECT_TRUE(contains(d.further_changes[0], "`datasets[].resolution`"));
    EXPECT_TRUE(has_evidence(d, 7, "frames per clip"));
    EXPECT_TRUE(has_evidence(d, 36, "first OOM (training step, step 1"));
    EXPECT_TRUE(has_evidence(d, 40, "the run gave up"));
}

TEST(DiagnosisAiToolkit, ZeroBytesFreeHeldByAnotherProcessIsWorkerState) {
    const Diagnosis d = fixture("aitk_zero_bytes_free.log");
    EXPECT_EQ(to_string(d.log_case), std::string("worker_state"));
    EXPECT_TRUE(contains(d.first_change, "fresh worker")) << d.first_change;
    EXPECT_TRUE(contains(d.reason, "0 bytes free of 23.56 GiB")) << d.reason;
    EXPECT_TRUE(contains(d.reason, "process 1873 held 21.92 GiB")) << d.reason;
    EXPECT_TRUE(has_evidence(d, 19, "first OOM (model load)"));
    EXPECT_TRUE(has_evidence(d, 5, "batch size"));
    EXPECT_EQ(d.figures.free, 0u);
    EXPECT_EQ(d.figures.allocated, gib(1.18));
    EXPECT_EQ(d.figures.this_process, gib(1.62));
    ASSERT_EQ(d.figures.processes.size(), 1u);
    EXPECT_EQ(d.figures.processes[0].pid, "1873");
    EXPECT_EQ(d.figures.processes[0].bytes, gib(21.92));
}

// ---------------------------------------------------------------------------------------------
// PyTorch scripts and kohya sd-scripts

TEST(DiagnosisPyTorch, OldMessageStyleOomInBackwardIsEarlySteps) {
    const Diagnosis d = fixture("pytorch_old_style.log");
    EXPECT_EQ(to_string(d.tool), std::string("pytorch"));
    EXPECT_EQ(to_string(d.log_case), std::string("early_steps"));
    EXPECT_EQ(d.oom_step, 1);
    EXPECT_TRUE(contains(d.first_change, "`--gradient_checkpointing`")) << d.first_change;
    EXPECT_TRUE(has_evidence(d, 29, "first OOM (training step, step 1)"));
    EXPECT_EQ(d.figures.line, 29u);
    EXPECT_EQ(d.figures.requested, gib(2.00));
    EXPECT_EQ(d.figures.total, gib(23.69));
    EXPECT_EQ(d.figures.allocated, gib(20.29));
    EXPECT_EQ(d.figures.free, gib(1.06));
    EXPECT_EQ(d.figures.reserved, gib(21.45));
}

TEST(DiagnosisPyTorch, NewMessageStyleZeroFreeHeldByPyTorchIsNotWorkerState) {
    const Diagnosis d = fixture("pytorch_new_style.log");
    EXPECT_EQ(to_string(d.log_case), std::string("early_steps"));
    EXPECT_EQ(d.oom_step, 3);
    EXPECT_TRUE(contains(d.reason, "after 2 successful steps")) << d.reason;
    EXPECT_TRUE(contains(d.reason, "batch size 4")) << d.reason;
    EXPECT_TRUE(has_evidence(d, 7, "(step 2)"));
    EXPECT_TRUE(has_evidence(d, 16, "first OOM (training step, step 3)"));
    // The bar's line ends in "Traceback (most recent call last):": only the bar is evidence.
    EXPECT_EQ(d.evidence[1].text,
              "Steps:   1%|          | 2/250 [00:07<15:31,  3.76s/it, loss=0.132, lr=0.0001]");
    EXPECT_EQ(d.figures.requested, mib(20.00));
    EXPECT_EQ(d.figures.total, gib(23.65));
    EXPECT_EQ(d.figures.free, 0u);
    EXPECT_EQ(d.figures.allocated, gib(22.90));
    EXPECT_EQ(d.figures.reserved_unallocated, mib(345.12));
    ASSERT_EQ(d.figures.processes.size(), 1u);
    EXPECT_EQ(d.figures.processes[0].pid, "4242");
    EXPECT_EQ(d.figures.processes[0].bytes, gib(23.64));
}

TEST(DiagnosisPyTorch, CublasAllocFailedBeforeTrainingIsWorkerState) {
    const Diagnosis d = fixture("cublas_alloc_failed.log");
    EXPECT_EQ(to_string(d.tool), std::string("pytorch"));
    EXPECT_EQ(to_string(d.log_case), std::string("worker_state"));
    EXPECT_TRUE(contains(d.reason, "CUBLAS_STATUS_ALLOC_FAILED")) << d.reason;
    EXPECT_TRUE(has_evidence(d, 18, "cuBLAS/cuDNN allocation"));
    EXPECT_TRUE(d.figures.empty());
}

TEST(DiagnosisKohya, Step1OomWithCheckpointingOnStartsWithBatchSize1) {
    const Diagnosis d = fixture("kohya_step1_oom.log");
    EXPECT_EQ(to_string(d.tool), std::string("kohya"));
    EXPECT_EQ(to_string(d.log_case), std::string("early_steps"));
    EXPECT_EQ(d.oom_step, 1);
    // --gradient_checkpointing is on the command line: the first change is the batch size.
    EXPECT_TRUE(contains(d.first_change, "`--train_batch_size=1`")) << d.first_change;
    EXPECT_TRUE(has_evidence(d, 1, "gradient checkpointing"));
    EXPECT_TRUE(has_evidence(d, 40, "first OOM (training step, step 1)"));
    EXPECT_EQ(d.figures.total, gib(11.72));  // PyTorch 2.1's "total capacty" typo
    EXPECT_EQ(d.figures.free, mib(842.56));
}

// ---------------------------------------------------------------------------------------------
// loom's own logs

TEST(DiagnosisLoom, ConsoleListsTheChangeLoomMade) {
    const Diagnosis d = fixture("loom_console.log");
    EXPECT_EQ(to_string(d.tool), std::string("loom"));
    EXPECT_EQ(to_string(d.log_case), std::string("early_steps"));
    EXPECT_EQ(d.oom_step, 3);
    EXPECT_EQ(d.first_change,
              "set `train.gradient_checkpointing: true` (loom already made this change, line 10)");
    EXPECT_EQ(evidence_lines(d), (std::vector<std::size_t>{8, 9}));
    ASSERT_EQ(d.loom_changes.size(), 1u);
    const LoomChange& c = d.loom_changes[0];
    EXPECT_EQ(c.line, 10u);
    EXPECT_EQ(c.knob, "train.gradient_checkpointing");
    EXPECT_EQ(c.from, "false");
    EXPECT_EQ(c.to, "true");
    EXPECT_EQ(c.rule, "train.gradient_checkpointing");
    EXPECT_EQ(c.reason, "a training step ran out of memory with gradient checkpointing off");
    EXPECT_EQ(c.phase, "train_step");
    EXPECT_EQ(c.step, 3);
    EXPECT_EQ(d.figures.requested, mib(16.0));
    EXPECT_EQ(d.figures.free, mib(7.0));
    EXPECT_EQ(d.figures.total, mib(96.0));
    EXPECT_TRUE(d.loom_outcome.empty());
}

// `loom train --nproc 2` with an OOM on rank 1 only: both ranks log the agreed OOM and the plan
// change ("[rank0]: " / "[rank1]: "); they are one OOM and one change, rank 1's lines first.
TEST(DiagnosisLoom, TwoRanksLoggingTheSameAgreedOomAreOneOom) {
    const Diagnosis d = fixture("loom_two_ranks_sometimes.log");
    EXPECT_EQ(to_string(d.log_case), std::string("sometimes"));
    EXPECT_EQ(d.oom_count, 1u);
    ASSERT_EQ(d.loom_changes.size(), 1u);
    EXPECT_EQ(d.loom_changes[0].knob, "datasets.max_bucket_pixels");
    EXPECT_EQ(d.loom_changes[0].line, 27u);
    EXPECT_TRUE(has_evidence(d, 24, "first OOM"));
    const auto first = std::find_if(d.evidence.begin(), d.evidence.end(),
                                    [](const EvidenceLine& e) { return e.line == 24; });
    ASSERT_NE(first, d.evidence.end());
    EXPECT_TRUE(contains(first->text, "[rank1] ")) << first->text;  // whose line it is
    // A second OOM at the same step (a retry that failed again) is a second OOM on each rank.
    std::string text = read_fixture("loom_two_ranks_sometimes.log");
    const std::string oom =
        "out of memory in train_step at step 3 (device): sim out of memory (injected: "
        "oom:phase=train_step:step=3). Tried to allocate 18.00 KiB; 1018.71 MiB free of 1.00 GiB "
        "budget\n";
    text += "[rank0]: [warning] " + oom + "[rank1]: [warning] " + oom;
    EXPECT_EQ(diagnose_log(text, "two ranks").oom_count, 2u);
}

TEST(DiagnosisLoom, LoomLogFirstSampleOomWithSeveralChangesInOneLine) {
    const Diagnosis d = fixture("loom.log");
    EXPECT_EQ(to_string(d.tool), std::string("loom"));
    EXPECT_EQ(to_string(d.log_case), std::string("before_step_1"));
    EXPECT_EQ(d.moment, "first_sample");
    EXPECT_EQ(d.oom_count, 2u);
    EXPECT_EQ(evidence_lines(d), (std::vector<std::size_t>{5, 7}));
    ASSERT_EQ(d.loom_changes.size(), 3u);
    EXPECT_EQ(d.loom_changes[0].knob, "sample.prompts_at_once");
    EXPECT_EQ(d.loom_changes[1].line, 8u);
    EXPECT_EQ(d.loom_changes[1].knob, "sample.width");
    EXPECT_EQ(d.loom_changes[1].from, "512");
    EXPECT_EQ(d.loom_changes[1].to, "256");
    EXPECT_EQ(d.loom_changes[2].knob, "sample.height");
    EXPECT_EQ(d.loom_changes[2].rule, "sample.halve_size");
    EXPECT_EQ(d.loom_changes[2].phase, "first_sample");
    EXPECT_EQ(d.figures.line, 5u);
    EXPECT_EQ(d.figures.free, mib(10.5));
}

TEST(DiagnosisLoom, EventsJsonlSampleOom) {
    const Diagnosis d = fixture("loom_events.jsonl");
    EXPECT_EQ(to_string(d.tool), std::string("loom"));
    EXPECT_EQ(to_string(d.log_case), std::string("sampling_only"));
    EXPECT_TRUE(contains(d.first_change, "(loom already made this change, line 7)"));
    EXPECT_EQ(evidence_lines(d), (std::vector<std::size_t>{5, 6}));
    EXPECT_TRUE(has_evidence(d, 6, "first OOM (sampling at step 200)"));
    ASSERT_EQ(d.loom_changes.size(), 2u);  // one decision, two knobs
    EXPECT_EQ(d.loom_changes[0].knob, "sample.width");
    EXPECT_EQ(d.loom_changes[1].knob, "sample.height");
    EXPECT_EQ(d.loom_changes[1].to, "128");
    EXPECT_EQ(d.loom_changes[1].step, 200);
    EXPECT_EQ(d.loom_changes[1].reason, "sampling ran out of memory; previews at half size");
    EXPECT_EQ(d.figures.requested, mib(16.0));
    EXPECT_EQ(d.figures.free, mib(12.0));
    EXPECT_EQ(d.figures.total, mib(96.0));
    EXPECT_EQ(d.figures.allocated, mib(84.0));
    EXPECT_EQ(d.figures.reserved, mib(84.0));
}

TEST(DiagnosisLoom, WorkerStateErrorLine) {
    const Diagnosis d = fixture("loom_worker_state.log");
    EXPECT_EQ(to_string(d.log_case), std::string("worker_state"));
    EXPECT_EQ(d.oom_count, 0u);
    EXPECT_EQ(d.loom_outcome.rfind("worker state: sim (simulated accelerator", 0), 0u)
        << d.loom_outcome;
    EXPECT_EQ(evidence_lines(d), (std::vector<std::size_t>{11}));
    EXPECT_EQ(d.figures.free, 0u);
    EXPECT_EQ(d.figures.total, mib(96.0));
}

// Real output of `loom train` on the tiny fixture with LOOM_FAULTS="oom:phase=train_step:step=3"
// (console and the run folder's events.jsonl): loom's ladder saw the failing batch come from the
// largest bucket while smaller ones had trained, which is the guide's "sometimes".
TEST(DiagnosisLoom, RealRunFollowsLoomsSometimesRule) {
    for (const char* name : {"loom_real_console.log", "loom_real_events.jsonl"}) {
        SCOPED_TRACE(name);
        const Diagnosis d = fixture(name);
        EXPECT_EQ(to_string(d.tool), std::string("loom"));
        EXPECT_EQ(to_string(d.log_case), std::string("sometimes"));
        EXPECT_EQ(d.oom_step, 3);
        EXPECT_TRUE(contains(d.first_change, "drop the largest resolution bucket"));
        EXPECT_TRUE(contains(d.reason, "loom: the failing batch came from the largest bucket"))
            << d.reason;
        ASSERT_EQ(d.loom_changes.size(), 1u);
        EXPECT_EQ(d.loom_changes[0].knob, "datasets.max_bucket_pixels");
        EXPECT_EQ(d.loom_changes[0].from, "none");
        EXPECT_EQ(d.loom_changes[0].to, "1024");
        EXPECT_EQ(d.loom_changes[0].rule, "train.sometimes_largest_bucket");
        EXPECT_EQ(d.figures.requested, 18432u);
        EXPECT_EQ(d.figures.total, mib(512.0));
    }
    EXPECT_TRUE(has_evidence(fixture("loom_real_console.log"), 12, "first OOM (training step"));
    EXPECT_TRUE(has_evidence(fixture("loom_real_events.jsonl"), 3, "first OOM (training step"));
}

TEST(DiagnosisLoom, DoesNotFitEvent) {
    const Diagnosis d = diagnose_log(
        R"({"event":"oom","phase":"train_step","step":1,"kind":"device_oom","free":0,"total":100663296,"allocated":98566144,"reserved":98566144,"message":"sim out of memory. Tried to allocate 8.00 MiB; 2.00 MiB free of 96.00 MiB budget"}
{"event":"does_not_fit","phase":"train_step","step":1,"rule":"ladder.exhausted","reason":"the smallest plan still needs 120.00 MiB"})",
        "events.jsonl");
    EXPECT_EQ(to_string(d.log_case), std::string("early_steps"));  // loom's own memory: config
    EXPECT_EQ(d.loom_outcome, "does not fit: the smallest plan still needs 120.00 MiB");
    EXPECT_TRUE(has_evidence(d, 2, "loom stopped: does not fit"));
}

TEST(DiagnosisLoom, DoesNotFitLineCarryingTheOom) {
    // oom.enabled: false — the first OOM ends the run and the error line is all there is.
    const Diagnosis d = diagnose_log(
        "[info] step 1/20 loss 0.2100 lr 1.00e-04 3.00 it/s mem 60.00 MiB ETA 00:00:06\n"
        "error: does not fit: out of memory in sample at step 10 (sim out of memory. Tried to "
        "allocate 8.00 MiB; 1.00 MiB free of 96.00 MiB budget) and oom.enabled is false, so loom "
        "did not try smaller settings; the plan was: batch 1\n",
        "console.txt");
    EXPECT_EQ(to_string(d.tool), std::string("loom"));
    EXPECT_EQ(to_string(d.log_case), std::string("sampling_only"));
    EXPECT_EQ(d.oom_count, 1u);
    EXPECT_EQ(d.loom_outcome.rfind("does not fit: out of memory in sample at step 10", 0), 0u);
    EXPECT_EQ(d.figures.requested, mib(8.0));
    EXPECT_TRUE(has_evidence(d, 2, "first OOM (sampling at step 10)"));
    EXPECT_TRUE(has_evidence(d, 2, "loom stopped: does not fit"));
}

TEST(DiagnosisLoom, DoesNotFitTailWithoutTheOomLines) {
    const Diagnosis d = diagnose_log(
        "error: does not fit: the smallest plan tried for train_step (batch 1, gradient "
        "checkpointing on, buckets [256]) still needs 130.00 MiB of 96.00 MiB\n",
        "tail.txt");
    EXPECT_EQ(to_string(d.log_case), std::string("early_steps"));
    EXPECT_TRUE(has_evidence(d, 1, "loom stopped: does not fit"));
}

// ---------------------------------------------------------------------------------------------
// Rules and edge cases

TEST(DiagnosisRules, NoOomLogSaysSo) {
    const Diagnosis d = fixture("no_oom.log");
    EXPECT_FALSE(d.found_oom());
    EXPECT_EQ(to_string(d.log_case), std::string("no_oom"));
    EXPECT_EQ(d.line_count, 27u);
    EXPECT_TRUE(d.first_change.empty());
    EXPECT_TRUE(contains(render(d), "case:  no_oom"));
}

TEST(DiagnosisRules, ConservativeConfigFailingAtItsFirstStepIsWorkerState) {
    const Diagnosis d = diagnose_log(R"(# Running job: tiny
"datasets": [ { "folder_path": "/data", "resolution": [ 512 ] } ],
"train": { "batch_size": 1, "gradient_checkpointing": true },
tiny:   0%|          | 0/1000 [00:00<?, ?it/s]
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 23.55 GiB of which 301.00 MiB is free. Of the allocated memory 22.80 GiB is allocated by PyTorch, and 20.00 MiB is reserved by PyTorch but unallocated.
)",
                                     "tiny.log");
    EXPECT_EQ(to_string(d.log_case), std::string("worker_state"));
    EXPECT_TRUE(contains(d.reason, "conservative config")) << d.reason;
}

TEST(DiagnosisRules, LibraryOomAfterGoodStepsIsNotWorkerState) {
    const Diagnosis d = diagnose_log(R"(Steps:   0%|          | 0/100 [00:00<?, ?it/s]
Steps:  40%|####      | 40/100 [01:00<01:30,  1.50s/it, loss=0.1]
RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED
)",
                                     "x.log");
    EXPECT_EQ(to_string(d.log_case), std::string("sometimes"));
    EXPECT_EQ(d.oom_step, 41);
}

TEST(DiagnosisRules, TracebackFramesNameThePhase) {
    // No sampling marker: only the frames (log_validation, a diffusers pipeline) say where.
    const Diagnosis d = diagnose_log(R"(Steps:   0%|          | 0/500 [00:00<?, ?it/s]
Steps:  20%|##        | 100/500 [05:00<20:00,  3.00s/it, loss=0.08, lr=0.0001]Traceback (most recent call last):
  File "/workspace/train_text_to_image_lora.py", line 951, in main
    images = log_validation(pipeline, args, accelerator, epoch)
  File "/workspace/train_text_to_image_lora.py", line 142, in log_validation
    images.append(pipeline(args.validation_prompt, num_inference_steps=30).images[0])
  File "/usr/lib/python3/site-packages/diffusers/pipelines/stable_diffusion/pipeline_stable_diffusion.py", line 1041, in __call__
    image = self.vae.decode(latents / self.vae.config.scaling_factor)[0]
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of 15.70 GiB of which 1.90 GiB is free.
)",
                                     "validation.log");
    EXPECT_EQ(to_string(d.log_case), std::string("sampling_only"));
    EXPECT_TRUE(has_evidence(d, 9, "first OOM (sampling at step 100)"));
}

TEST(DiagnosisRules, NotOomErrorsAreNotOom) {
    const Diagnosis d = diagnose_log(R"(Traceback (most recent call last):
  File "train.py", line 10, in <module>
    loss.backward()
RuntimeError: CUDA error: an illegal memory access was encountered
)",
                                     "x.log");
    EXPECT_FALSE(d.found_oom());
    EXPECT_TRUE(has_evidence(d, 4, "not an out-of-memory one"));
}

TEST(DiagnosisRules, EmptyLog) {
    const Diagnosis d = diagnose_log("", "empty.log");
    EXPECT_FALSE(d.found_oom());
    EXPECT_EQ(d.line_count, 0u);
    EXPECT_EQ(to_string(d.tool), std::string("unknown"));
}

TEST(DiagnosisRules, CrlfLineEndingsGiveTheSameDiagnosis) {
    std::string text = read_fixture("aitk_step2_oom_loop.log");
    const Diagnosis lf = diagnose_log(text, "lf.log");
    std::string crlf;
    for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    const Diagnosis d = diagnose_log(crlf, "crlf.log");
    EXPECT_EQ(to_string(d.log_case), std::string("early_steps"));
    EXPECT_EQ(d.oom_step, lf.oom_step);
    EXPECT_EQ(d.first_change, lf.first_change);
    EXPECT_EQ(evidence_lines(d), evidence_lines(lf));
    for (const EvidenceLine& e : d.evidence) EXPECT_EQ(e.text.find('\r'), std::string::npos);
}

TEST(DiagnosisRules, NonUtf8BytesAreReplacedInEvidence) {
    const std::string text =
        "Entra\xeene le mod\xe8le\n"
        "Steps:   0%|          | 0/10 [00:00<?, ?it/s]\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB (GPU 0; 7.79 GiB "
        "total capacity; 6.12 GiB already allocated; 3.31 MiB free; 6.45 GiB reserved in total by "
        "PyTorch) \xff\xfe\n";
    const Diagnosis d = diagnose_log(text, "latin1.log");
    EXPECT_EQ(to_string(d.log_case), std::string("early_steps"));
    ASSERT_TRUE(has_evidence(d, 3, "first OOM"));
    for (const EvidenceLine& e : d.evidence) {
        EXPECT_FALSE(find_invalid_utf8(e.text).has_value()) << e.text;
    }
    EXPECT_TRUE(contains(d.evidence.back().text, "\xEF\xBF\xBD"));
    EXPECT_FALSE(find_invalid_utf8(render(d)).has_value());
    EXPECT_FALSE(find_invalid_utf8(render_json(d)).has_value());
    EXPECT_EQ(d.figures.free, mib(3.31));
}

// A long run: 60 000 progress lines (about 6 MB) and an OOM at the end, read in one pass.
std::string long_log() {
    std::string text = "# Running job: long_run\n";
    for (int n = 0; n <= 60000; ++n) {
        text += "long_run:  50%|#####     | " + std::to_string(n) +
                "/120000 [1:00:00<1:00:00,  1.00it/s, lr: 1.0e-04 loss: 1.234e-01] padding to "
                "a realistic width\n";
    }
    text +=
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a "
        "total capacity of 23.55 GiB of which 512.00 MiB is free.\n";
    return text;
}

TEST(DiagnosisRules, MultiMegabyteLogInOnePass) {
    const std::string text = long_log();
    ASSERT_GT(text.size(), 5u * 1024 * 1024);
    const Diagnosis d = diagnose_log(text, "long.log");
    EXPECT_EQ(to_string(d.log_case), std::string("sometimes"));  // late OOM after good steps
    EXPECT_EQ(d.oom_step, 60001);
    EXPECT_EQ(d.line_count, 60003u);
    EXPECT_TRUE(has_evidence(d, 60003, "first OOM (training step, step 60001)"));
    EXPECT_TRUE(has_evidence(d, 60002, "(step 60000)"));

    // The same from a file, and as one 6 MB physical line of \r-separated tqdm redraws.
    const std::filesystem::path file =
        std::filesystem::temp_directory_path() / "loom_doctor_long.log";
    {
        std::string one_line = text;
        std::replace(one_line.begin(), one_line.end() - 200, '\n', '\r');
        std::ofstream(file, std::ios::binary) << one_line;
    }
    const Diagnosis f = diagnose_log_file(file);
    std::filesystem::remove(file);
    EXPECT_EQ(to_string(f.log_case), std::string("sometimes"));
    EXPECT_EQ(f.oom_step, 60001);
    EXPECT_EQ(f.line_count, 2u);
    for (const EvidenceLine& e : f.evidence) EXPECT_LE(e.text.size(), 250u);
}

TEST(DiagnosisRules, UnreadableFilesAreIoErrors) {
    EXPECT_THROW(diagnose_log_file("tests/doctor/logs/does_not_exist.log"), IoError);
    EXPECT_THROW(diagnose_log_file("tests/doctor/logs"), IoError);
}

TEST(DiagnosisOutput, RenderShowsCaseChangeEvidenceAndFigures) {
    const std::string out = render(fixture("pytorch_old_style.log"));
    EXPECT_TRUE(contains(out, "case:  early_steps - OOM in the first training steps (step 1)"));
    EXPECT_TRUE(contains(out, "first change:\n  turn on gradient checkpointing"));
    EXPECT_TRUE(contains(out, "\n  29: torch.cuda.OutOfMemoryError: CUDA out of memory."));
    EXPECT_TRUE(contains(out, "  tried to allocate       2.00 GiB\n"));
    EXPECT_TRUE(contains(out, "  free                    1.06 GiB of 23.69 GiB\n"));
    EXPECT_TRUE(contains(out, "  reserved by PyTorch     21.45 GiB in total\n"));
}

TEST(DiagnosisOutput, RenderJsonHasTheStableFields) {
    const std::string out = render_json(fixture("loom_console.log"));
    EXPECT_TRUE(contains(out, "\"case\": \"early_steps\"")) << out;
    EXPECT_TRUE(contains(out, "\"tool\": \"loom\""));
    EXPECT_TRUE(contains(out, "\"oom_step\": 3"));
    EXPECT_TRUE(contains(out, "\"requested\": 16777216"));
    EXPECT_TRUE(contains(out, "\"knob\": \"train.gradient_checkpointing\""));
}

}  // namespace
}  // namespace loom::doctor
