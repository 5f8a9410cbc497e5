// Escaping, number formatting, colour mixing and the SVG writer shared by every figure.
#include "report/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hexiseq::report {

std::string Escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string Tps(double tokens_per_second) {
  if (tokens_per_second <= 0) return "-";
  if (tokens_per_second >= 1e6) return Fmt("%.2fM", tokens_per_second / 1e6);
  if (tokens_per_second >= 1e3) return Fmt("%.1fK", tokens_per_second / 1e3);
  return Fmt("%.0f", tokens_per_second);
}

std::string Duration(double seconds) {
  const double magnitude = std::abs(seconds);
  if (magnitude >= 1) return Fmt("%.3g s", seconds);
  if (magnitude >= 1e-3) return Fmt("%.3g ms", seconds * 1e3);
  return Fmt("%.3g us", seconds * 1e6);
}

std::string Lighten(std::string_view color, double amount) {
  if (color.size() != 7 || color[0] != '#') return std::string(color);
  const double target = amount >= 0 ? 255.0 : 0.0;
  const double weight = std::min(1.0, std::abs(amount));
  std::string out = "#";
  for (int channel = 0; channel < 3; ++channel) {
    const int value = std::stoi(std::string(color.substr(1 + 2 * channel, 2)), nullptr, 16);
    const int mixed = static_cast<int>(std::lround(value + (target - value) * weight));
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02X", std::clamp(mixed, 0, 255));
    out += hex;
  }
  return out;
}

namespace {

std::string Coord(double value) { return Fmt("%.1f", value); }

std::string TitleElement(std::string_view title) {
  return title.empty() ? std::string() : "<title>" + Escape(title) + "</title>";
}

}  // namespace

Svg::Svg(double width, double height, std::string_view css_class, std::string_view label)
    : width_(width), height_(height) {
  open_ = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " + Coord(width) + " " +
          Coord(height) + "\" width=\"" + Coord(width) + "\" height=\"" + Coord(height) +
          "\" class=\"" + Escape(css_class) + "\" role=\"img\" aria-label=\"" + Escape(label) +
          "\" font-family=\"sans-serif\" font-size=\"11\">\n";
}

void Svg::Attribute(std::string_view name, std::string_view value) {
  body_ += ' ';
  body_ += name;
  body_ += "=\"";
  body_ += value;
  body_ += '"';
}

void Svg::Close(std::string_view extra_attributes, std::string_view tag, std::string_view content) {
  if (!extra_attributes.empty()) {
    body_ += ' ';
    body_ += extra_attributes;
  }
  if (content.empty()) {
    body_ += "/>\n";
    return;
  }
  body_ += '>';
  body_ += content;
  body_ += "</";
  body_ += tag;
  body_ += ">\n";
}

void Svg::Rect(double x, double y, double width, double height, std::string_view fill,
               std::string_view title, std::string_view extra_attributes) {
  body_ += "<rect";
  Attribute("x", Coord(x));
  Attribute("y", Coord(y));
  Attribute("width", Coord(std::max(0.0, width)));
  Attribute("height", Coord(std::max(0.0, height)));
  Attribute("fill", fill);
  Close(extra_attributes, "rect", TitleElement(title));
}

void Svg::Line(double x1, double y1, double x2, double y2, std::string_view stroke,
               double stroke_width, std::string_view extra_attributes) {
  body_ += "<line";
  Attribute("x1", Coord(x1));
  Attribute("y1", Coord(y1));
  Attribute("x2", Coord(x2));
  Attribute("y2", Coord(y2));
  Attribute("stroke", stroke);
  Attribute("stroke-width", Coord(stroke_width));
  Close(extra_attributes, "line", {});
}

void Svg::Text(double x, double y, std::string_view text, std::string_view anchor, double font_size,
               std::string_view extra_attributes) {
  body_ += "<text";
  Attribute("x", Coord(x));
  Attribute("y", Coord(y));
  Attribute("text-anchor", anchor);
  Attribute("font-size", Coord(font_size));
  Close(extra_attributes, "text", Escape(text));
}

void Svg::OpenGroup(std::string_view attributes) {
  body_ += "<g " + std::string(attributes) + ">\n";
}

void Svg::CloseGroup() { body_ += "</g>\n"; }

void Svg::Raw(std::string_view markup) { body_ += markup; }

std::string Svg::Finish() const { return open_ + body_ + "</svg>\n"; }

double NiceStep(double max_value, int count) {
  if (max_value <= 0 || count < 1) return 1;
  const double raw = max_value / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double factor : {1.0, 2.0, 5.0, 10.0})
    if (factor * power >= raw) return factor * power;
  return 10 * power;
}

}  // namespace hexiseq::report
