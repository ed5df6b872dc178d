#include "loom/report/html_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "loom/core/byte_size.h"
#include "loom/io/atomic_file.h"
#include "loom/report/svg_plot.h"

namespace loom::report {

namespace {

// One palette for every plot: the same thing has the same color everywhere.
constexpr const char* kLoss = "#1f77b4";
constexpr const char* kSmoothed = "#0b2e59";
constexpr const char* kLr = "#8c564b";
constexpr const char* kAllocated = "#2ca02c";
constexpr const char* kPeak = "#9467bd";
constexpr const char* kLimit = "#7f7f7f";
constexpr const char* kOom = "#d62728";
constexpr const char* kChange = "#ff7f0e";
constexpr const char* kSpeed = "#17becf";
constexpr const char* kSpans[] = {"#eef4fb", "#fbf3e9"};

constexpr const char* kStyle = R"css(
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1000px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
table { border-collapse: collapse; font-size: 13px; }
td, th { padding: 3px 10px 3px 0; text-align: left; vertical-align: top; }
th { color: #555; font-weight: normal; }
.facts td:first-child { color: #555; }
.status-failed, .status-does-not-fit, .status-worker-state { color: #b00020; font-weight: bold; }
.status-completed { color: #1a7f37; font-weight: bold; }
.error { background: #fdecea; border: 1px solid #f5c2c0; padding: 8px; white-space: pre-wrap; }
.legend { font-size: 12px; color: #444; margin: 2px 0 10px 64px; }
.legend span { margin-right: 14px; }
.legend i { display: inline-block; width: 14px; height: 3px; vertical-align: middle; margin-right: 4px; }
pre { background: #f6f8fa; padding: 8px; font-size: 12px; overflow-x: auto; }
.strip { display: flex; flex-wrap: wrap; gap: 8px; }
.strip figure { margin: 0; font-size: 11px; text-align: center; }
.strip img { width: 128px; image-rendering: pixelated; border: 1px solid #ddd; }
#sample-large { width: 384px; image-rendering: pixelated; border: 1px solid #ddd; }
.note { color: #666; font-size: 12px; }
)css";

std::string fmt(const char* format, double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), format, v);
    return buf;
}

std::string bytes(double b) {
    return format_bytes_human(static_cast<std::uint64_t>(std::max(0.0, b)));
}

double x_of(const std::optional<std::int64_t>& step) {
    return step ? double(*step) : 0.0;
}

std::string where(const std::string& phase, const std::optional<std::int64_t>& step) {
    return phase + (step ? " at step " + std::to_string(*step) : " (before training)");
}

// The plan's knobs in words: "gradient_checkpointing true, batch 4 x 1 accumulation, ...".
std::string short_plan(const std::string& plan) {
    return plan.empty() ? "?" : plan;
}

// TensorBoard's smoothing: an exponential moving average, debiased at the start.
std::vector<Point> smoothed(const std::vector<Point>& points, double weight) {
    std::vector<Point> out;
    out.reserve(points.size());
    double last = 0.0;
    double debias = 1.0;
    for (const Point& p : points) {
        if (!std::isfinite(p.y)) continue;
        last = last * weight + (1 - weight) * p.y;
        debias *= weight;
        out.push_back({p.x, last / (1 - debias)});
    }
    return out;
}

// Where each OOM and plan change is drawn: at its step, or — before training (load, cache,
// probe) — one slot each, in the order they happened, in a band left of step 0 as wide as 12% of
// the steps, so that a run that recovered five times before step 1 shows five marks, not one.
struct Plots {
    double x_min = 0.0;
    double x_max = 1.0;
    std::vector<double> oom_x;
    std::vector<double> change_x;
    std::vector<VerticalLine> changes;
};

Plots plot_frame(const RunData& run) {
    Plots f;
    for (const MetricPoint& m : run.metrics) f.x_max = std::max(f.x_max, double(m.step));
    f.x_max = std::max(f.x_max, double(run.steps_asked));
    // The step-less events in time order (OOMs first on a tie: the change answers it).
    std::vector<std::pair<std::string, int>> before;  // time, +i+1 for an OOM, -i-1 for a change
    for (std::size_t i = 0; i < run.ooms.size(); ++i) {
        if (!run.ooms[i].step) before.push_back({run.ooms[i].time, int(i) + 1});
    }
    for (std::size_t i = 0; i < run.changes.size(); ++i) {
        if (!run.changes[i].step) before.push_back({run.changes[i].time, -int(i) - 1});
    }
    std::stable_sort(before.begin(), before.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    const double band = before.empty() ? 0.0 : 0.12 * f.x_max;
    f.x_min = -band;
    f.oom_x.resize(run.ooms.size());
    f.change_x.resize(run.changes.size());
    for (std::size_t i = 0; i < run.ooms.size(); ++i) f.oom_x[i] = x_of(run.ooms[i].step);
    for (std::size_t i = 0; i < run.changes.size(); ++i) f.change_x[i] = x_of(run.changes[i].step);
    for (std::size_t k = 0; k < before.size(); ++k) {
        const double x = -band + (double(k) + 0.5) * band / double(before.size());
        const int id = before[k].second;
        (id > 0 ? f.oom_x[std::size_t(id - 1)] : f.change_x[std::size_t(-id - 1)]) = x;
    }
    for (std::size_t i = 0; i < run.changes.size(); ++i) {
        const PlanChange& c = run.changes[i];
        std::string moves;
        for (const KnobMove& m : c.moves) {
            moves += (moves.empty() ? "" : ", ") + m.knob + " " + m.from + " → " + m.to;
        }
        f.changes.push_back(
            {f.change_x[i], kChange, c.rule,
             c.rule + " (" + where(c.phase, c.step) + "): " + moves + " — " + c.reason});
    }
    return f;
}

// A plot over the run's steps (and the band before step 1).
PlotSpec step_plot(const char* id, const char* y_label, const Plots& frame) {
    PlotSpec p;
    p.id = id;
    p.y_label = y_label;
    p.x_min = frame.x_min;
    p.x_max = frame.x_max;
    return p;
}

std::string loss_plots(const RunData& run, const Plots& frame) {
    PlotSpec loss = step_plot("plot-loss", "loss", frame);
    Series raw{"loss", kLoss, {}, 2.0};
    for (const MetricPoint& m : run.metrics) raw.points.push_back({double(m.step), m.loss});
    Series smooth{"loss, smoothed (EMA 0.9)", kSmoothed, smoothed(raw.points, 0.9), 2.5};
    loss.series = {raw, smooth};
    loss.vlines = frame.changes;
    PlotSpec lr = step_plot("plot-lr", "learning rate", frame);
    lr.height = 150;
    lr.y_from_zero = true;
    Series rate{"learning rate", kLr, {}, 1.5};
    for (const MetricPoint& m : run.metrics) rate.points.push_back({double(m.step), m.lr});
    lr.series = {rate};
    return render_svg(loss) + render_svg(lr);
}

std::string memory_plot(const RunData& run, const Plots& frame) {
    PlotSpec p = step_plot("plot-memory", "device memory", frame);
    p.height = 280;
    p.y_from_zero = true;
    p.y_format = [](double v) { return bytes(v); };
    Series allocated{"allocated after the step", kAllocated, {}, 2.0};
    Series peak{"the step's peak", kPeak, {}, 2.0};
    for (const MetricPoint& m : run.metrics) {
        allocated.points.push_back({double(m.step), m.allocated});
        peak.points.push_back({double(m.step), m.peak_allocated});
    }
    p.series = {allocated, peak};
    // The device's memory as a line when it is on the scale of what the run used; far above it
    // (a 1 GiB budget for a 2 MiB model) it would flatten every line to the floor, so it is named.
    double used = 0.0;
    for (const MetricPoint& m : run.metrics) used = std::max(used, m.peak_allocated);
    for (const OomMark& o : run.ooms) used = std::max(used, o.peak);
    const std::string limit =
        (run.device.rfind("sim", 0) == 0 ? "budget " : "device ") + bytes(run.total);
    if (run.total > 0 && (used == 0.0 || run.total <= 4 * used)) {
        p.hlines.push_back({run.total, kLimit, limit});
    } else if (run.total > 0) {
        p.y_label += " (" + limit + ", off the scale)";
    }
    for (std::size_t i = 0; i < run.ooms.size(); ++i) {
        const OomMark& o = run.ooms[i];
        p.markers.push_back(
            {frame.oom_x[i], o.peak > 0 ? o.peak : run.total, kOom, "oom",
             "out of memory in " + where(o.phase, o.step) + " (" + o.kind + "): " + o.message});
    }
    p.vlines = frame.changes;
    return render_svg(p);
}

// Each plan in effect, its steps and their median step time: what a plan change cost or saved.
std::string speed_by_plan(const RunData& run,
                          const std::vector<std::pair<double, std::string>>& starts,
                          const Plots& frame) {
    std::ostringstream o;
    o << "<table id=\"plans\"><tr><th>plan in effect</th><th>steps</th><th>median step time</th>"
         "<th>it/s</th></tr>\n";
    for (std::size_t i = 0; i < starts.size(); ++i) {
        const double end = i + 1 < starts.size() ? starts[i + 1].first : frame.x_max + 1;
        std::vector<double> seconds;
        for (const MetricPoint& m : run.metrics) {
            if (m.step >= starts[i].first && m.step < end && m.step_seconds > 0) {
                seconds.push_back(m.step_seconds);
            }
        }
        if (seconds.empty()) continue;
        std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
        const double median = seconds[seconds.size() / 2];
        o << "<tr><td>" << escape_xml(short_plan(starts[i].second)) << "</td><td>" << seconds.size()
          << "</td><td>" << fmt("%.3f s", median) << "</td><td>" << fmt("%.2f", 1.0 / median)
          << "</td></tr>\n";
    }
    o << "</table>\n";
    return o.str();
}

// Each plan in effect, from the step its change happened to the next change.
std::string speed_plot(const RunData& run, const Plots& frame) {
    PlotSpec p = step_plot("plot-speed", "it/s", frame);
    p.y_from_zero = true;
    Series speed{"steps per second (1 / step time)", kSpeed, {}, 2.0};
    for (const MetricPoint& m : run.metrics) {
        if (m.step_seconds > 0) speed.points.push_back({double(m.step), 1.0 / m.step_seconds});
    }
    p.series = {speed};
    std::vector<std::pair<double, std::string>> starts{{frame.x_min, run.start_plan}};
    for (std::size_t i = 0; i < run.changes.size(); ++i) {
        starts.push_back({frame.change_x[i], run.changes[i].plan});
    }
    for (std::size_t i = 0; i < starts.size(); ++i) {
        const double end = i + 1 < starts.size() ? starts[i + 1].first : frame.x_max;
        if (end <= starts[i].first && i + 1 < starts.size()) continue;
        p.spans.push_back(
            {starts[i].first, end, kSpans[i % 2], "plan: " + short_plan(starts[i].second)});
    }
    p.vlines = frame.changes;
    return render_svg(p) + speed_by_plan(run, starts, frame);
}

// Per knob that changed: its value over the steps, as a row of labelled segments.
std::string plan_timeline(const RunData& run, const Plots& frame) {
    std::map<std::string, std::vector<std::pair<double, std::string>>> knobs;
    std::vector<std::string> order;
    for (std::size_t i = 0; i < run.changes.size(); ++i) {
        for (const KnobMove& m : run.changes[i].moves) {
            auto& values = knobs[m.knob];
            if (values.empty()) {
                order.push_back(m.knob);
                values.push_back({frame.x_min, m.from});
            }
            values.push_back({frame.change_x[i], m.to});
        }
    }
    if (order.empty()) return "<p class=\"note\">The plan did not change during the run.</p>\n";
    const int w = 960, left = 200, right = 16, row = 22;
    const int h = row * int(order.size()) + 24;
    const double pw = w - left - right;
    auto sx = [&](double x) { return left + (x - frame.x_min) / (frame.x_max - frame.x_min) * pw; };
    std::ostringstream o;
    o << "<svg class=\"plot\" id=\"plot-plan\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w
      << "\" height=\"" << h << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
    for (std::size_t k = 0; k < order.size(); ++k) {
        const auto& values = knobs[order[k]];
        const int y = int(k) * row + 4;
        o << "<text x=\"0\" y=\"" << y + 14 << "\" fill=\"#333\">" << escape_xml(order[k])
          << "</text>\n";
        for (std::size_t i = 0; i < values.size(); ++i) {
            const double a = sx(values[i].first);
            const double b = sx(i + 1 < values.size() ? values[i + 1].first : frame.x_max);
            o << "<rect class=\"segment\" x=\"" << fmt("%.1f", a) << "\" y=\"" << y << "\" width=\""
              << fmt("%.1f", std::max(2.0, b - a)) << "\" height=\"" << row - 4 << "\" fill=\""
              << kSpans[i % 2] << "\" stroke=\"#bbb\"><title>"
              << escape_xml(order[k] + " = " + values[i].second) << "</title></rect><text x=\""
              << fmt("%.1f", a + 3) << "\" y=\"" << y + 13 << "\">" << escape_xml(values[i].second)
              << "</text>\n";
        }
    }
    o << "<text x=\"" << w - right << "\" y=\"" << h - 4 << "\" text-anchor=\"end\" fill=\"#555\">"
      << (frame.x_min < 0 ? "before step 1, then " : "") << "step 0 – " << fmt("%.0f", frame.x_max)
      << "</text>\n</svg>\n";
    return o.str();
}

std::string recovery_table(const RunData& run) {
    if (run.ooms.empty() && run.changes.empty()) return "";
    std::ostringstream o;
    o << "<table "
         "id=\"recoveries\"><tr><th>time</th><th>what</th><th>where</th><th>detail</th></tr>\n";
    // Both lists are in file order; merged by time (ISO strings sort as times).
    std::size_t i = 0, j = 0;
    while (i < run.ooms.size() || j < run.changes.size()) {
        const bool oom = j >= run.changes.size() ||
                         (i < run.ooms.size() && run.ooms[i].time <= run.changes[j].time);
        if (oom) {
            const OomMark& m = run.ooms[i++];
            o << "<tr><td>" << escape_xml(m.time) << "</td><td style=\"color:" << kOom
              << "\">out of memory</td><td>" << escape_xml(where(m.phase, m.step)) << "</td><td>"
              << escape_xml(m.message) << "</td></tr>\n";
        } else {
            const PlanChange& c = run.changes[j++];
            std::string moves;
            for (const KnobMove& m : c.moves) {
                moves += (moves.empty() ? "" : ", ") + m.knob + " " + m.from + " → " + m.to;
            }
            o << "<tr><td>" << escape_xml(c.time) << "</td><td style=\"color:" << kChange << "\">"
              << escape_xml(c.rule) << "</td><td>" << escape_xml(where(c.phase, c.step))
              << "</td><td>" << escape_xml(moves) << " — " << escape_xml(c.reason)
              << "</td></tr>\n";
        }
    }
    o << "</table>\n";
    return o.str();
}

std::string samples_section(const RunData& run, const std::string& base) {
    std::vector<const SampleImage*> grids;
    for (const SampleImage& s : run.samples) {
        if (s.grid) grids.push_back(&s);
    }
    if (grids.empty()) {
        for (const SampleImage& s : run.samples) grids.push_back(&s);
    }
    if (grids.empty())
        return "<p class=\"note\">No preview samples (sampling off, or none yet).</p>\n";
    std::ostringstream o;
    o << "<p><input type=\"range\" id=\"sample-range\" min=\"0\" max=\"" << grids.size() - 1
      << "\" value=\"" << grids.size() - 1
      << "\" style=\"width:400px\"> <span id=\"sample-step\">step " << grids.back()->step
      << "</span></p>\n<img id=\"sample-large\" src=\"" << escape_xml(base + grids.back()->file)
      << "\" alt=\"preview\">\n<div class=\"strip\">\n";
    for (const SampleImage* s : grids) {
        o << "<figure><img src=\"" << escape_xml(base + s->file) << "\" alt=\"step " << s->step
          << "\" data-step=\"" << s->step << "\"><figcaption>step " << s->step
          << "</figcaption></figure>\n";
    }
    o << "</div>\n<script>\n"
         "(function () {\n"
         "  var range = document.getElementById('sample-range');\n"
         "  var strip = document.querySelectorAll('.strip img');\n"
         "  range.addEventListener('input', function () {\n"
         "    var img = strip[Number(range.value)];\n"
         "    document.getElementById('sample-large').src = img.getAttribute('src');\n"
         "    document.getElementById('sample-step').textContent = 'step ' + img.dataset.step;\n"
         "  });\n"
         "})();\n</script>\n";
    return o.str();
}

std::string history_section(const std::optional<StoreHistory>& history) {
    if (!history) {
        return "<p class=\"note\">No stable-config store was read for this report.</p>\n";
    }
    std::ostringstream o;
    o << "<p class=\"note\">" << escape_xml(history->store_file)
      << (history->key.empty() ? "" : " — key: " + escape_xml(history->key)) << "</p>\n";
    if (history->runs.empty()) {
        o << "<p class=\"note\">The store has no run recorded in this folder.</p>\n";
        return o.str();
    }
    o << "<table id=\"history\"><tr><th>run</th><th>started</th><th>status</th><th>steps</th>"
         "<th>OOMs</th><th>ended on</th></tr>\n";
    for (const HistoryRun& r : history->runs) {
        o << "<tr" << (r.this_run ? " style=\"font-weight:bold\"" : "") << "><td>"
          << escape_xml(r.name) << "</td><td>" << escape_xml(r.started) << "</td><td>"
          << escape_xml(r.status) << "</td><td>" << (r.steps ? std::to_string(*r.steps) : "–")
          << "</td><td>" << (r.ooms ? std::to_string(*r.ooms) : "–") << "</td><td>"
          << escape_xml(r.end_plan) << "</td></tr>\n";
    }
    o << "</table>\n";
    if (!history->stables.empty()) {
        o << "<p>Stable plans for this key (newest first):</p>\n<table "
             "id=\"stables\"><tr><th>recorded</th>"
             "<th>by run</th><th>plan</th><th>it/s</th><th>peak</th></tr>\n";
        for (const HistoryStable& s : history->stables) {
            o << "<tr><td>" << escape_xml(s.time) << "</td><td>" << escape_xml(s.run_name)
              << "</td><td>" << escape_xml(s.plan) << "</td><td>" << fmt("%.2f", s.steps_per_second)
              << "</td><td>" << bytes(double(s.peak)) << "</td></tr>\n";
        }
        o << "</table>\n";
    }
    return o.str();
}

std::string header(const RenderInput& in) {
    const RunData& run = in.run;
    // The run's own word when it has one ("does not fit"), else "failed" for an error.
    const bool ended = run.status == "does not fit" || run.status == "worker state";
    const std::string status = in.error.empty() || ended ? run.status : "failed";
    std::string status_class = "status-" + status;
    std::replace(status_class.begin(), status_class.end(), ' ', '-');
    const std::int64_t last_step = run.metrics.empty() ? 0 : run.metrics.back().step;
    std::ostringstream o;
    o << "<h1>loom run report: " << escape_xml(run.name) << "</h1>\n<table class=\"facts\">\n";
    auto row = [&](const std::string& k, const std::string& v) {
        o << "<tr><td>" << escape_xml(k) << "</td><td>" << v << "</td></tr>\n";
    };
    row("status", "<span class=\"" + status_class + "\">" + escape_xml(status) + "</span>");
    auto link = [&](const char* file) {
        return "<a href=\"" + escape_xml(in.link_base + file) + "\">" + file + "</a>";
    };
    row("job", escape_xml(run.name) + " (" + link("config.yaml") + ", " + link("loom.log") + ", " +
                   link("events.jsonl") + ")");
    row("run folder", escape_xml(run.folder.string()));
    row("model", escape_xml(run.model.empty() ? "?" : run.model) +
                     (run.arch.empty() ? "" : " (" + escape_xml(run.arch) + ")"));
    row("device", escape_xml(run.device.empty() ? "?" : run.device) +
                      (run.total > 0 ? ", " + escape_xml(bytes(run.total)) : ""));
    row("steps", std::to_string(last_step) +
                     (run.steps_asked > 0 ? " of " + std::to_string(run.steps_asked) : ""));
    std::string time = escape_xml(run.started.empty() ? "?" : run.started);
    if (run.metrics.size() >= 2) {
        const double seconds =
            run.metrics.back().time - run.metrics.front().time + run.metrics.front().step_seconds;
        time += " — " + fmt("%.1f", seconds) + " s of training";
    }
    row("started", time);
    row("out-of-memory errors recovered",
        std::to_string(run.ooms.size()) + " (" + std::to_string(run.changes.size()) +
            " plan changes" +
            (run.measurements > 0 ? ", " + std::to_string(run.measurements) + " plans measured"
                                  : "") +
            ")");
    row("steps lost", std::to_string(steps_lost(run)));
    if (run.restarts > 0) {
        row("restarts after a crash",
            std::to_string(run.restarts) + " (the supervisor; see loom.log)");
    }
    row("final plan",
        escape_xml(run.changes.empty() ? short_plan(run.start_plan) : run.changes.back().plan));
    o << "</table>\n";
    if (!in.error.empty())
        o << "<p class=\"error\" id=\"error\">" << escape_xml(in.error) << "</p>\n";
    if (!run.end_reason.empty() && run.end_reason != in.error) {
        o << "<p class=\"error\">" << escape_xml(run.end_reason) << "</p>\n";
    }
    if (run.skipped_lines > 0) {
        o << "<p class=\"note\">" << run.skipped_lines
          << " lines of metrics.jsonl / events.jsonl were not readable and are left out.</p>\n";
    }
    return o.str();
}

}  // namespace

std::string render_html(const RenderInput& in) {
    const RunData& run = in.run;
    const Plots frame = plot_frame(run);
    std::ostringstream o;
    o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>loom: "
      << escape_xml(run.name) << "</title>\n<style>" << kStyle << "</style></head><body>\n";
    o << header(in);
    o << "<h2>Loss</h2>\n" << loss_plots(run, frame);
    o << "<h2>Device memory</h2>\n<p class=\"note\">Red triangles: out-of-memory errors (hover for "
         "the phase and message; those before step 1 in the grey band, in order). Orange lines: "
         "plan "
         "changes.</p>\n"
      << memory_plot(run, frame);
    o << "<h2>Throughput</h2>\n<p class=\"note\">Shaded: the plan in effect (hover for it).</p>\n"
      << speed_plot(run, frame);
    o << "<h2>Recoveries</h2>\n" << recovery_table(run);
    o << "<h2>Plan timeline</h2>\n" << plan_timeline(run, frame);
    o << "<h2>Samples</h2>\n" << samples_section(run, in.link_base);
    o << "<h2>Plans</h2>\n<p>plan.yaml (the plan the run is on):</p>\n<pre>"
      << escape_xml(run.final_plan_yaml.empty() ? "(none yet)" : run.final_plan_yaml) << "</pre>\n";
    o << "<p>stable.yaml (the plan recorded as stable):</p>\n<pre>"
      << escape_xml(run.stable_yaml.empty() ? "(none yet)" : run.stable_yaml) << "</pre>\n";
    o << "<h2>History of this job's key</h2>\n" << history_section(in.history);
    o << "<p class=\"note\">Written by loom report; reload to refresh.</p>\n</body></html>\n";
    return o.str();
}

void write_report(const std::filesystem::path& run_folder, const std::filesystem::path& out,
                  const std::optional<StoreHistory>& history, const std::string& error) {
    RenderInput in{read_run(run_folder), history, error, {}};
    const std::filesystem::path from = std::filesystem::absolute(out).parent_path();
    const std::filesystem::path to = std::filesystem::absolute(run_folder);
    if (from.lexically_normal() != to.lexically_normal()) {
        const std::string relative = to.lexically_relative(from).generic_string();
        in.link_base = (relative.empty() ? to.generic_string() : relative) + "/";
    }
    write_file_atomic(out, render_html(in));
}

}  // namespace loom::report
