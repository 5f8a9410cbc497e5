// Grouped bar charts (see charts.h): axis and grid, bars with hover text, category labels, legend.
#include "report/charts.h"

#include <algorithm>

#include "report/svg.h"

namespace hexiseq::report {
namespace {

constexpr double kRightMargin = 20;
constexpr double kRotatedLabelSpace = 150;  // below the axis, for labels at 60 degrees
constexpr double kFlatLabelSpace = 50;
constexpr double kLegendEntryWidth = 110;

std::string FormatValue(ValueFormat format, double value) {
  return format == ValueFormat::kPercent ? Fmt("%.1f%%", 100 * value) : Tps(value) + " tokens/s";
}

std::string FormatTick(ValueFormat format, double value) {
  if (format == ValueFormat::kPercent) return Fmt("%.0f%%", 100 * value);
  return value > 0 ? Tps(value) : "0";
}

double GroupWidth(const BarChart& chart) {
  return static_cast<double>(chart.series.size()) * chart.bar_width + chart.group_gap;
}

double ValueY(const BarChart& chart, double value) {
  const double clipped = std::clamp(value / chart.y_max, 0.0, 1.0);
  return kBarChartTop + chart.plot_height - clipped * chart.plot_height;
}

void DrawAxis(const BarChart& chart, Svg& svg) {
  const double step = chart.tick_step > 0 ? chart.tick_step : NiceStep(chart.y_max, 5);
  for (double tick = 0; tick <= chart.y_max * (1 + 1e-9); tick += step) {
    const double y = ValueY(chart, tick);
    svg.Line(kBarChartLeft, y, svg.width() - 10, y, "#DDDDDD");
    svg.Text(kBarChartLeft - 6, y + 3, FormatTick(chart.format, tick), "end", 10);
  }
}

void DrawBars(const BarChart& chart, Svg& svg) {
  const double bottom = kBarChartTop + chart.plot_height;
  for (size_t category = 0; category < chart.categories.size(); ++category) {
    const double x0 = kBarChartLeft + category * GroupWidth(chart) + chart.group_gap / 2;
    for (size_t series = 0; series < chart.series.size(); ++series) {
      const double value = chart.values[category][series];
      if (std::isnan(value)) continue;
      const double top = ValueY(chart, value);
      std::string title = chart.categories[category] + " " + chart.series[series].name + ": " +
                          FormatValue(chart.format, value);
      if (category < chart.hover.size() && series < chart.hover[category].size() &&
          !chart.hover[category][series].empty())
        title = chart.hover[category][series];
      const bool singled_out =
          category < chart.category_colors.size() && !chart.category_colors[category].empty();
      svg.Rect(x0 + series * chart.bar_width, top, chart.bar_width - 1, bottom - top,
               singled_out ? chart.category_colors[category] : chart.series[series].color, title,
               "class=\"bar\"");
    }
    const double label_x = x0 + chart.series.size() * chart.bar_width / 2;
    if (chart.rotate_labels) {
      svg.Text(0, 0, chart.categories[category], "start", 8,
               "transform=\"translate(" + Fmt("%.1f", label_x) + "," + Fmt("%.1f", bottom + 8) +
                   ") rotate(60)\"");
    } else {
      svg.Text(label_x, bottom + 14, chart.categories[category], "middle", 10);
    }
  }
}

void DrawReference(const BarChart& chart, Svg& svg) {
  if (std::isnan(chart.reference)) return;
  const double y = ValueY(chart, chart.reference);
  svg.Line(kBarChartLeft, y, svg.width() - 10, y, kInk, 1.5,
           "stroke-dasharray=\"6 3\" class=\"reference\"");
  svg.Text(svg.width() - 12, y - 4,
           chart.reference_label + ": " + FormatValue(chart.format, chart.reference), "end", 10);
}

void DrawLegend(const BarChart& chart, Svg& svg) {
  const double y = svg.height() - 16;
  double x = kBarChartLeft;
  for (const BarSeries& series : chart.series) {
    svg.Rect(x, y, 10, 10, series.color);
    svg.Text(x + 14, y + 9, series.name, "start", 10);
    x += kLegendEntryWidth;
  }
  if (!std::isnan(chart.reference)) {
    svg.Line(x, y + 5, x + 16, y + 5, kInk, 1.5, "stroke-dasharray=\"6 3\"");
    svg.Text(x + 20, y + 9, chart.reference_label, "start", 10);
  }
}

}  // namespace

std::string BarChartSvg(const BarChart& chart) {
  const double width = kBarChartLeft +
                       static_cast<double>(chart.categories.size()) * GroupWidth(chart) +
                       kRightMargin + (std::isnan(chart.reference) ? 0 : 60);
  const double label_space = chart.rotate_labels ? kRotatedLabelSpace : kFlatLabelSpace;
  const double height = kBarChartTop + chart.plot_height + label_space;
  Svg svg(std::max(width, 2 * kLegendEntryWidth + kBarChartLeft), height, chart.css_class,
          chart.title);
  svg.Rect(0, 0, svg.width(), svg.height(), "white");
  svg.Text(kBarChartLeft, 16, chart.title, "start", 13);
  DrawAxis(chart, svg);
  DrawBars(chart, svg);
  DrawReference(chart, svg);
  DrawLegend(chart, svg);
  return svg.Finish();
}

}  // namespace hexiseq::report
