// The run report (issue 24) without a browser: downsampling keeps every spike, the run folder is
// read tolerantly, and the runs a report must survive — no step yet, failed at load, 100k steps,
// hostile text — each give a whole page. tests/report/test_report_browser.sh opens real reports
// in Chromium.

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "loom/guard/plan.h"
#include "loom/report/downsample.h"
#include "loom/report/html_report.h"
#include "loom/report/run_data.h"
#include "loom/report/store_history.h"
#include "loom/report/svg_plot.h"
#include "loom/store/stable_store.h"
#include "temp_dir.h"

namespace loom::report {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
}

std::string metrics_line(std::int64_t step, double loss, double peak) {
    std::ostringstream o;
    o << "{\"allocated\":1000000,\"loss\":" << loss << ",\"lr\":0.0001,\"peak_allocated\":" << peak
      << ",\"step\":" << step << ",\"step_seconds\":0.05,\"time\":" << 1796136062.0 + step * 0.05
      << "}\n";
    return o.str();
}

const char* kStart =
    R"j({"event":"start","device":"sim (simulated accelerator, budget 16.00 MiB)","total":16777216,)j"
    R"j("plan":"gradient_checkpointing false, batch 4 x 1 accumulation","time":"2026-12-01T10:00:00.000Z"})j"
    "\n";

std::size_t count_of(const std::string& text, const std::string& needle) {
    std::size_t n = 0;
    for (std::size_t at = text.find(needle); at != std::string::npos;
         at = text.find(needle, at + 1))
        ++n;
    return n;
}

TEST(Downsample, KeepsEverySpikeAndAtMostFourPointsAColumn) {
    std::vector<Point> points;
    for (int i = 0; i < 100000; ++i) points.push_back({double(i), std::sin(i * 0.01)});
    points[31337].y = 50.0;   // one spike up
    points[77777].y = -40.0;  // one down
    const std::vector<Point> kept = downsample_min_max(points, 0, 99999, 880);
    EXPECT_LE(kept.size(), 4u * 880u);
    double highest = -1e9, lowest = 1e9;
    for (const Point& p : kept) {
        highest = std::max(highest, p.y);
        lowest = std::min(lowest, p.y);
    }
    EXPECT_EQ(highest, 50.0);
    EXPECT_EQ(lowest, -40.0);
    for (std::size_t i = 1; i < kept.size(); ++i) EXPECT_LT(kept[i - 1].x, kept[i].x);
    // Few points are kept as they are.
    const std::vector<Point> few(points.begin(), points.begin() + 100);
    EXPECT_EQ(downsample_min_max(few, 0, 99, 880).size(), 100u);
}

TEST(SvgPlot, TicksAreRoundAndTextIsEscaped) {
    EXPECT_EQ(nice_ticks(0, 100, 4), (std::vector<double>{0, 50, 100}));
    EXPECT_EQ(nice_ticks(0, 1, 2), (std::vector<double>{0, 0.5, 1}));
    EXPECT_EQ(nice_ticks(0, 1000, 4), (std::vector<double>{0, 500, 1000}));
    EXPECT_EQ(nice_ticks(3, 97, 8), (std::vector<double>{20, 40, 60, 80}));
    EXPECT_EQ(escape_xml("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
}

TEST(RunData, ReadsAFolderAndSkipsWhatIsNotJson) {
    loom::test::TempDir dir;
    const fs::path run = dir / "my_run";
    write(
        run / "events.jsonl",
        std::string(kStart) + "not json at all\n" +
            R"({"event":"oom","phase":"load","step":null,"kind":"device","message":"m","peak":100,"time":"2026-12-01T10:00:01.000Z"})"
            "\n"
            R"({"event":"change","phase":"load","step":null,"rule":"load.low_vram","reason":"r","changes":[{"knob":"model.low_vram","from":"0","to":"1"}],"plan":"p1","time":"2026-12-01T10:00:02.000Z"})"
            "\n"
            R"({"event":"save","step":4,"final":true,"time":"2026-12-01T10:00:09.000Z"})"
            "\n");
    write(run / "metrics.jsonl", metrics_line(1, 0.5, 2e6) + "{broken\n" +
                                     metrics_line(2, 0.4, 2e6) + metrics_line(4, 0.3, 2e6));
    write(run / "samples" / "2026__000000004_grid.png", "png");
    write(run / "samples" / "2026__000000004_0.png", "png");
    write(run / "samples" / "notes.txt", "x");
    const RunData d = read_run(run);
    EXPECT_EQ(d.name, "my_run");
    EXPECT_EQ(d.metrics.size(), 3u);
    EXPECT_EQ(d.skipped_lines, 2u);
    ASSERT_EQ(d.ooms.size(), 1u);
    EXPECT_FALSE(d.ooms[0].step);
    ASSERT_EQ(d.changes.size(), 1u);
    EXPECT_EQ(d.changes[0].moves.at(0).to, "1");
    EXPECT_EQ(d.status, "completed");
    EXPECT_EQ(d.total, 16777216.0);
    EXPECT_EQ(d.samples.size(), 2u);
    EXPECT_EQ(steps_lost(d), 1);  // step 3 is missing
}

// A folder trained again with --fresh keeps the old run's lines; a resumed run repeats the steps
// after its checkpoint. The report shows the newest run, each step once, in step order.
TEST(RunData, OnlyTheRunSinceTheLastFreshStartEachStepOnce) {
    loom::test::TempDir dir;
    const fs::path run = dir / "again";
    const std::string old_start =
        R"j({"event":"start","fresh":true,"total":1,"time":"2026-12-01T09:00:00.000Z"})j"
        "\n";
    const std::string new_start =
        R"j({"event":"start","fresh":true,"total":2,"time":"2026-12-01T10:00:00.000Z"})j"
        "\n";
    const std::string resume =
        R"j({"event":"start","fresh":false,"total":2,"time":"2026-12-01T10:05:00.000Z"})j"
        "\n";
    write(
        run / "events.jsonl",
        old_start +
            R"j({"event":"oom","phase":"load","kind":"device","message":"old","time":"2026-12-01T09:00:01.000Z"})j"
            "\n" +
            new_start + resume);
    const double ten = 1796119200.0;  // 2026-12-01T10:00:00Z
    auto line = [](std::int64_t step, double loss, double time) {
        return "{\"step\":" + std::to_string(step) + ",\"loss\":" + std::to_string(loss) +
               ",\"time\":" + std::to_string(time) + "}\n";
    };
    write(run / "metrics.jsonl", line(1, 9.0, ten - 3600) + line(2, 9.0, ten - 3599) +
                                     line(1, 0.5, ten + 1) + line(2, 0.4, ten + 2) +
                                     line(3, 0.3, ten + 3) + line(2, 0.2, ten + 301) +
                                     line(3, 0.1, ten + 302));
    write(run / "samples" /
              (std::to_string(std::int64_t(ten - 3600) * 1000) + "__000000002_grid.png"),
          "old");
    write(run / "samples" / (std::to_string(std::int64_t(ten + 2) * 1000) + "__000000002_grid.png"),
          "new");
    const RunData d = read_run(run);
    EXPECT_TRUE(d.ooms.empty());  // the old run's
    EXPECT_EQ(d.total, 2.0);
    ASSERT_EQ(d.metrics.size(), 3u);
    EXPECT_EQ(d.metrics[0].loss, 0.5);
    EXPECT_EQ(d.metrics[1].loss, 0.2);  // step 2 trained again after the resume
    EXPECT_EQ(d.metrics[2].loss, 0.1);
    ASSERT_EQ(d.samples.size(), 1u);
    EXPECT_NE(d.samples[0].file.find(std::to_string(std::int64_t(ten + 2) * 1000)),
              std::string::npos);
}

TEST(HtmlReport, ARunWithNoStepYetIsAWholePage) {
    loom::test::TempDir dir;
    const fs::path run = dir / "fresh";
    write(run / "events.jsonl", kStart);
    write_report(run, run / "report.html");
    std::ifstream in(run / "report.html");
    const std::string html((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
    EXPECT_NE(html.find("</html>"), std::string::npos);
    EXPECT_NE(html.find("no steps yet"), std::string::npos);
    EXPECT_NE(html.find("status-running"), std::string::npos);
    // Loss, learning rate, memory, throughput; no plan timeline (the plan did not change).
    EXPECT_EQ(count_of(html, "<svg"), 4u);
    EXPECT_NE(html.find("The plan did not change"), std::string::npos);
}

TEST(HtmlReport, AFailedLoadShowsTheErrorAndEveryOom) {
    loom::test::TempDir dir;
    const fs::path run = dir / "failed";
    std::string events = kStart;
    for (int i = 0; i < 3; ++i) {
        events +=
            R"({"event":"oom","phase":"load","step":null,"kind":"device","message":"sim out of memory <level )" +
            std::to_string(i) + R"(>","peak":16000000,"time":"2026-12-01T10:00:0)" +
            std::to_string(i + 1) +
            R"(.000Z"})"
            "\n";
    }
    events +=
        R"({"event":"does_not_fit","phase":"load","rule":"load.low_vram","reason":"does not fit: the smallest plan tried","time":"2026-12-01T10:00:05.000Z"})"
        "\n";
    write(run / "events.jsonl", events);
    RenderInput in{read_run(run), std::nullopt,
                   "does not fit: the smallest plan tried <low_vram 3>"};
    const std::string html = render_html(in);
    EXPECT_NE(html.find("id=\"error\""), std::string::npos);
    EXPECT_NE(html.find("&lt;low_vram 3&gt;"), std::string::npos);  // escaped, never markup
    EXPECT_EQ(html.find("<low_vram 3>"), std::string::npos);
    EXPECT_EQ(count_of(html, "class=\"marker oom\""), 3u);
    EXPECT_NE(html.find("status-failed"), std::string::npos);
}

TEST(HtmlReport, AHundredThousandStepsStayLight) {
    loom::test::TempDir dir;
    const fs::path run = dir / "long";
    std::string events = kStart;
    events +=
        R"({"event":"oom","phase":"train_step","step":50000,"kind":"device","message":"m","peak":16000000,"time":"2026-12-01T11:00:00.000Z"})"
        "\n";
    events +=
        R"({"event":"change","phase":"train_step","step":50000,"rule":"train.gradient_checkpointing","reason":"r","changes":[{"knob":"train.gradient_checkpointing","from":"false","to":"true"}],"plan":"p","time":"2026-12-01T11:00:00.001Z"})"
        "\n";
    write(run / "events.jsonl", events);
    {
        std::ofstream m(run / "metrics.jsonl");
        for (int s = 1; s <= 100000; ++s) m << metrics_line(s, s == 60000 ? 9.0 : 0.1, 8e6);
    }
    write_report(run, run / "report.html");
    const auto size = fs::file_size(run / "report.html");
    EXPECT_LT(size, 3u * 1024 * 1024) << size;
    std::ifstream in(run / "report.html");
    const std::string html((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(html.find("</html>"), std::string::npos);
    EXPECT_EQ(count_of(html, "class=\"marker oom\""), 1u);
    EXPECT_NE(html.find("<td>100000</td>"), std::string::npos) << "the header counts the steps";
}

TEST(StoreHistory, ListsTheRunsOfThisRunsKeyAndItsStablePlans) {
    loom::test::TempDir dir;
    store::StableStore s = store::StableStore::open(dir / "stable.db");
    guard::PlanKey key;
    key.arch = "sd1";
    key.model_fingerprint = std::string(64, 'a');
    key.device_name = "sim";
    key.total_memory = 16 << 20;
    key.dtype = "float32";
    key.rank = 4;
    key.max_resolution = 64;
    key.frames = 1;
    guard::PlanKey other = key;
    other.rank = 8;
    const fs::path run = dir / "runs" / "second";
    guard::Plan plan;
    guard::RunFacts first{key,   "first", fs::absolute(dir / "runs" / "first").string(),
                          "job", 0,       plan};
    guard::RunFacts unrelated{other, "other", fs::absolute(dir / "runs" / "other").string(),
                              "job", 0,       plan};
    guard::RunFacts second{key, "second", fs::absolute(run).string(), "job", 0, plan};
    const std::int64_t a = s.add_run(first);
    s.add_run(unrelated);
    guard::StableFacts stable;
    stable.step = 50;
    stable.steps_on_plan = 50;
    stable.peak = 1000;
    stable.steps_per_second = 3.5;
    stable.plan = plan;
    s.add_stable(a, stable);
    s.add_run(second);
    const StoreHistory h = read_history(s, run);
    ASSERT_EQ(h.runs.size(), 2u);
    EXPECT_EQ(h.runs[0].name, "first");
    EXPECT_EQ(h.runs[1].name, "second");
    EXPECT_TRUE(h.runs[1].this_run);
    EXPECT_FALSE(h.runs[0].this_run);
    ASSERT_EQ(h.stables.size(), 1u);
    EXPECT_EQ(h.stables[0].run_name, "first");
    EXPECT_TRUE(read_history(s, dir / "runs" / "never").runs.empty());
    EXPECT_FALSE(read_history_file(dir / "missing.db", run));
}

}  // namespace
}  // namespace loom::report
