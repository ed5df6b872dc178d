#pragma once

// The report's plots: inline SVG drawn by loom (no script, no external file), x = training step.
// A plot has line series (downsampled per pixel column, downsample.h), horizontal reference
// lines (a budget), vertical annotated lines (plan changes), markers (OOMs) and shaded spans (the
// plan in effect). Each drawn part carries a class ("series", "marker oom", "change", "span") and
// a <title> so a browser shows what it is on hover.

#include <functional>
#include <string>
#include <vector>

#include "loom/report/downsample.h"

namespace loom::report {

struct Series {
    std::string name;
    std::string color;
    std::vector<Point> points;  // increasing x
    double width = 1.5;
    bool dashed = false;
};

struct VerticalLine {
    double x = 0.0;
    std::string color;
    std::string label;  // drawn at the top
    std::string title;  // on hover
};

struct HorizontalLine {
    double y = 0.0;
    std::string color;
    std::string label;
};

struct Marker {
    double x = 0.0;
    double y = 0.0;
    std::string color;
    std::string css_class;  // "oom"
    std::string title;
};

struct Span {
    double x0 = 0.0;
    double x1 = 0.0;
    std::string color;
    std::string title;
};

struct PlotSpec {
    std::string id;
    std::string y_label;
    int width = 960;
    int height = 240;
    bool y_from_zero = false;
    bool log_y = false;
    double x_min = 0.0;  // the x span (steps); x_max <= x_min: from the data
    double x_max = 0.0;
    // x below 0 is the time before step 1 (load, cache, probe): a grey band labelled so, with
    // no step ticks.
    std::function<std::string(double)> y_format;  // tick labels; default: %g
    std::vector<Series> series;
    std::vector<HorizontalLine> hlines;
    std::vector<VerticalLine> vlines;
    std::vector<Marker> markers;
    std::vector<Span> spans;
};

// Text safe inside HTML and SVG text and attributes.
std::string escape_xml(const std::string& text);

// The <svg> element, with a legend of the series under it.
std::string render_svg(const PlotSpec& spec);

// Round tick values covering [lo, hi]: about `count`, steps of 1, 2 or 5 x 10^k.
std::vector<double> nice_ticks(double lo, double hi, int count);

}  // namespace loom::report
