#pragma once

// Many points onto few pixels without losing a spike: per pixel column, the first, lowest,
// highest and last point (in that column's x order), so a line drawn through what is kept has
// the same envelope as the line through every point. 100k steps of metrics become at most four
// points per column of the plot.

#include <cstddef>
#include <vector>

namespace loom::report {

struct Point {
    double x = 0.0;
    double y = 0.0;
};

// `points` in increasing x; `columns` > 0 columns spanning [x0, x1]. Points outside the span go
// to the nearest edge column. Returns the kept points in x order.
std::vector<Point> downsample_min_max(const std::vector<Point>& points, double x0, double x1,
                                      std::size_t columns);

}  // namespace loom::report
