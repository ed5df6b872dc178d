#include "loom/report/downsample.h"

#include <algorithm>

namespace loom::report {

std::vector<Point> downsample_min_max(const std::vector<Point>& points, double x0, double x1,
                                      std::size_t columns) {
    if (points.size() <= 4 * columns || columns == 0) return points;
    const double width = x1 > x0 ? x1 - x0 : 1.0;
    auto column_of = [&](double x) {
        const double c = (x - x0) / width * double(columns);
        return std::min(columns - 1, std::size_t(std::max(0.0, c)));
    };
    std::vector<Point> out;
    out.reserve(4 * columns);
    std::size_t i = 0;
    while (i < points.size()) {
        const std::size_t column = column_of(points[i].x);
        std::size_t first = i, lowest = i, highest = i, last = i;
        for (++i; i < points.size() && column_of(points[i].x) == column; ++i) {
            if (points[i].y < points[lowest].y) lowest = i;
            if (points[i].y > points[highest].y) highest = i;
            last = i;
        }
        std::size_t kept[] = {first, std::min(lowest, highest), std::max(lowest, highest), last};
        std::size_t previous = points.size();
        for (std::size_t k : kept) {
            if (k != previous) out.push_back(points[k]);
            previous = k;
        }
    }
    return out;
}

}  // namespace loom::report
