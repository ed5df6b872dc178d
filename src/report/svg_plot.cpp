#include "loom/report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace loom::report {

namespace {

// The plot area inside the SVG: room for tick labels on the left and below, labels on top.
constexpr int kLeft = 64;
constexpr int kRight = 16;
constexpr int kTop = 22;
constexpr int kBottom = 28;

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", v);
    return buf;
}

std::string default_format(double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return buf;
}

}  // namespace

std::string escape_xml(const std::string& text) {
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        switch (c) {
            case '&': out += "&amp;"; break;
            case '<': out += "&lt;"; break;
            case '>': out += "&gt;"; break;
            case '"': out += "&quot;"; break;
            case '\'': out += "&#39;"; break;
            default: out += c;
        }
    }
    return out;
}

std::vector<double> nice_ticks(double lo, double hi, int count) {
    if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi) || count < 1) return {lo};
    const double raw = (hi - lo) / count;
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    double step = magnitude;
    for (const double m : {1.0, 2.0, 5.0, 10.0}) {
        step = m * magnitude;
        if (step >= raw) break;
    }
    std::vector<double> ticks;
    for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) {
        ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
    }
    return ticks;
}

std::string render_svg(const PlotSpec& spec) {
    const int w = spec.width;
    const int h = spec.height;
    const double pw = w - kLeft - kRight;
    const double ph = h - kTop - kBottom;
    const auto y_format = spec.y_format ? spec.y_format : default_format;

    // The spans of x and y over everything drawn.
    double x0 = spec.x_min, x1 = spec.x_max;
    double y0 = std::numeric_limits<double>::infinity(), y1 = -y0;
    const bool x_from_data = !(x1 > x0);
    if (x_from_data) {
        x0 = std::numeric_limits<double>::infinity();
        x1 = -x0;
    }
    auto see_y = [&](double y) {
        if (!std::isfinite(y) || (spec.log_y && y <= 0)) return;
        y0 = std::min(y0, y);
        y1 = std::max(y1, y);
    };
    for (const Series& s : spec.series) {
        for (const Point& p : s.points) {
            if (x_from_data) {
                x0 = std::min(x0, p.x);
                x1 = std::max(x1, p.x);
            }
            see_y(p.y);
        }
    }
    for (const HorizontalLine& l : spec.hlines) see_y(l.y);
    for (const Marker& m : spec.markers) see_y(m.y);
    const bool empty = !(y1 >= y0);
    if (!std::isfinite(x0) || !std::isfinite(x1)) x0 = 0, x1 = 1;
    if (x1 <= x0) x1 = x0 + 1;
    if (empty) y0 = 0, y1 = 1;
    if (spec.y_from_zero && !spec.log_y) y0 = std::min(0.0, y0);
    if (y1 <= y0) y1 = y0 + (y0 == 0 ? 1 : std::abs(y0) * 0.1);
    if (!spec.log_y) y1 += (y1 - y0) * 0.05;  // room above the highest point
    auto ty = [&](double y) { return spec.log_y ? std::log10(std::max(y, 1e-300)) : y; };
    const double ly0 = ty(y0), ly1 = spec.log_y && ty(y1) <= ly0 ? ly0 + 1 : ty(y1);
    auto sx = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
    auto sy = [&](double y) { return kTop + ph - (ty(y) - ly0) / (ly1 - ly0) * ph; };

    std::ostringstream o;
    o << "<svg class=\"plot\" id=\"" << escape_xml(spec.id)
      << "\" xmlns=\"http://www.w3.org/2000/svg\" "
      << "width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << " " << h << "\">\n";
    o << "<rect class=\"area\" x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << pw
      << "\" height=\"" << ph << "\" fill=\"#ffffff\" stroke=\"#c8c8c8\"/>\n";
    for (const Span& s : spec.spans) {
        const double a = std::clamp(sx(s.x0), double(kLeft), kLeft + pw);
        const double b = std::clamp(sx(s.x1), double(kLeft), kLeft + pw);
        o << "<rect class=\"span\" x=\"" << number(a) << "\" y=\"" << kTop << "\" width=\""
          << number(std::max(0.0, b - a)) << "\" height=\"" << ph << "\" fill=\"" << s.color
          << "\"><title>" << escape_xml(s.title) << "</title></rect>\n";
    }
    // Grid and tick labels.
    o << "<g class=\"axes\" font-family=\"sans-serif\" font-size=\"11\" fill=\"#555\">\n";
    std::vector<double> yticks;
    if (spec.log_y) {
        for (double e = std::floor(ly0); e <= std::ceil(ly1); e += 1) {
            const double v = std::pow(10.0, e);
            if (ty(v) >= ly0 - 1e-9 && ty(v) <= ly1 + 1e-9) yticks.push_back(v);
        }
    } else {
        yticks = nice_ticks(y0, y1, 4);
    }
    for (const double t : yticks) {
        const double y = sy(t);
        if (y < kTop - 0.5 || y > kTop + ph + 0.5) continue;
        o << "<line x1=\"" << kLeft << "\" x2=\"" << number(kLeft + pw) << "\" y1=\"" << number(y)
          << "\" y2=\"" << number(y) << "\" stroke=\"#eeeeee\"/>"
          << "<text x=\"" << kLeft - 4 << "\" y=\"" << number(y + 4) << "\" text-anchor=\"end\">"
          << escape_xml(y_format(t)) << "</text>\n";
    }
    if (x0 < 0) {
        o << "<rect class=\"before\" x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\""
          << number(sx(0) - kLeft) << "\" height=\"" << ph << "\" fill=\"#f2f2f2\"/>"
          << "<text x=\"" << number((kLeft + sx(0)) / 2) << "\" y=\"" << h - kBottom + 16
          << "\" text-anchor=\"middle\">before step 1</text>\n";
    }
    // Steps are whole: no tick between two.
    std::vector<double> xticks = nice_ticks(std::max(0.0, x0), x1, 8);
    xticks.erase(
        std::remove_if(xticks.begin(), xticks.end(), [](double t) { return t != std::floor(t); }),
        xticks.end());
    for (const double t : xticks) {
        const double x = sx(t);
        if (x0 < 0 && x - sx(0) < 30 && t > 0) continue;  // clear of the band's label
        o << "<text x=\"" << number(x) << "\" y=\"" << h - kBottom + 16
          << "\" text-anchor=\"middle\">" << escape_xml(default_format(t)) << "</text>\n";
    }
    o << "<text x=\"8\" y=\"14\">" << escape_xml(spec.y_label) << "</text>\n";
    o << "<text x=\"" << w - kRight << "\" y=\"" << h - 2 << "\" text-anchor=\"end\">step</text>\n";
    o << "</g>\n";
    if (empty) {
        o << "<text class=\"empty\" x=\"" << number(kLeft + pw / 2) << "\" y=\""
          << number(kTop + ph / 2) << "\" text-anchor=\"middle\" font-family=\"sans-serif\" "
          << "font-size=\"13\" fill=\"#888\">no steps yet</text>\n";
    }
    for (const HorizontalLine& l : spec.hlines) {
        const double y = sy(l.y);
        o << "<line class=\"limit\" x1=\"" << kLeft << "\" x2=\"" << number(kLeft + pw)
          << "\" y1=\"" << number(y) << "\" y2=\"" << number(y) << "\" stroke=\"" << l.color
          << "\" stroke-width=\"1.5\" stroke-dasharray=\"6 3\"><title>" << escape_xml(l.label)
          << "</title></line><text x=\"" << number(kLeft + pw - 4) << "\" y=\"" << number(y - 4)
          << "\" text-anchor=\"end\" font-family=\"sans-serif\" font-size=\"11\" fill=\"" << l.color
          << "\">" << escape_xml(l.label) << "</text>\n";
    }
    const auto columns = static_cast<std::size_t>(pw);
    for (const Series& s : spec.series) {
        if (s.points.empty()) continue;
        o << "<polyline class=\"series\" fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\""
          << s.width << "\"" << (s.dashed ? " stroke-dasharray=\"4 2\"" : "") << " points=\"";
        for (const Point& p : downsample_min_max(s.points, x0, x1, columns)) {
            if (!std::isfinite(p.y) || (spec.log_y && p.y <= 0)) continue;
            o << number(sx(p.x)) << "," << number(sy(p.y)) << " ";
        }
        o << "\"><title>" << escape_xml(s.name) << "</title></polyline>\n";
        if (s.points.size() == 1) {  // a single step: a dot, or nothing would show
            o << "<circle class=\"series\" cx=\"" << number(sx(s.points[0].x)) << "\" cy=\""
              << number(sy(s.points[0].y)) << "\" r=\"3\" fill=\"" << s.color << "\"/>\n";
        }
    }
    for (std::size_t i = 0; i < spec.vlines.size(); ++i) {
        const VerticalLine& l = spec.vlines[i];
        const double x = std::clamp(sx(l.x), double(kLeft), kLeft + pw);
        const int label_y = kTop + 11 + int(i % 3) * 11;  // neighbours' labels on other rows
        o << "<g class=\"change\"><title>" << escape_xml(l.title) << "</title><line x1=\""
          << number(x) << "\" x2=\"" << number(x) << "\" y1=\"" << kTop << "\" y2=\""
          << number(kTop + ph) << "\" stroke=\"" << l.color
          << "\" stroke-width=\"1.5\" stroke-dasharray=\"3 3\"/><text x=\"" << number(x + 3)
          << "\" y=\"" << label_y << "\" font-family=\"sans-serif\" font-size=\"10\" fill=\""
          << l.color << "\">" << escape_xml(l.label) << "</text></g>\n";
    }
    for (const Marker& m : spec.markers) {
        const double x = std::clamp(sx(m.x), double(kLeft), kLeft + pw);
        const double y = std::clamp(sy(m.y), double(kTop), kTop + ph);
        // A downward triangle at the point, 7 px: visible over lines and spans.
        o << "<path class=\"marker " << escape_xml(m.css_class) << "\" d=\"M" << number(x - 7)
          << "," << number(y - 12) << " L" << number(x + 7) << "," << number(y - 12) << " L"
          << number(x) << "," << number(y) << " Z\" fill=\"" << m.color
          << "\" stroke=\"#000000\" stroke-width=\"0.5\"><title>" << escape_xml(m.title)
          << "</title></path>\n";
    }
    o << "</svg>\n";
    if (!spec.series.empty()) {
        o << "<div class=\"legend\">";
        for (const Series& s : spec.series) {
            o << "<span><i style=\"background:" << s.color << "\"></i>" << escape_xml(s.name)
              << "</span>";
        }
        o << "</div>\n";
    }
    return o.str();
}

}  // namespace loom::report
