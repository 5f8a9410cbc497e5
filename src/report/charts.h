// The one bar-chart writer of the project: grouped vertical bars with a value axis, a legend,
// hover text on every bar and an optional reference line (the ideal). The evaluation charts
// (docs/evaluation/*.svg) and the report's strategies figure are both drawn by it.
// Values past the top of the axis are clipped (and their hover text says the true value);
// missing values (NaN: not applicable or infeasible) draw no bar.
#pragma once

#include <cmath>
#include <string>
#include <vector>

namespace hexiseq::report {

enum class ValueFormat { kPercent, kTokensPerSecond };

struct BarSeries {
  std::string name;
  std::string color;  // "#RRGGBB"
};

struct BarChart {
  std::string title;
  std::string css_class = "chart";
  std::vector<std::string> categories;          // one group of bars each, along the x axis
  std::vector<BarSeries> series;                // one bar per series inside each group
  std::vector<std::vector<double>> values;      // [category][series]; NaN: no bar
  std::vector<std::vector<std::string>> hover;  // same shape, optional; "" = value only
  std::vector<std::string> category_colors;     // optional, per category: overrides the series
                                                // colour (to single out one category)
  ValueFormat format = ValueFormat::kPercent;
  double y_max = 1;             // top of the value axis (values above are clipped)
  double tick_step = 0;         // 0: a round step giving about five ticks
  double reference = NAN;       // horizontal reference line (e.g. the ideal); NaN: none
  std::string reference_label;  // its legend entry
  double bar_width = 6;
  double group_gap = 10;
  double plot_height = 220;
  bool rotate_labels = true;  // category labels at 60 degrees (many narrow groups)
};

// REQUIRES: values.size() == categories.size() and each row has series.size() entries.
std::string BarChartSvg(const BarChart& chart);

// Layout constants of BarChartSvg, exposed so tests can check coordinates.
inline constexpr double kBarChartLeft = 60;  // x of the value axis
inline constexpr double kBarChartTop = 40;   // y of the top of the value axis

}  // namespace hexiseq::report
