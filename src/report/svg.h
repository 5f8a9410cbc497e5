// The drawing primitives every HexiSeq figure shares (the report page and docs/evaluation.md's
// charts): escaping of user text for HTML/SVG, compact number formatting, the Okabe-Ito
// colour-blind-safe palette, and a small SVG writer whose shapes carry hover text (<title>).
// Deliberately plain: no layout engine, coordinates are given by the caller in SVG user units.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace hexiseq::report {

// Escapes & < > " ' so that any user string (cluster, device, model, file names) is safe both as
// element text and inside a double- or single-quoted attribute.
std::string Escape(std::string_view text);

// printf-style formatting of one number, e.g. Fmt("%.1f%%", 12.34) = "12.3%".
std::string Fmt(const char* format, double value);
// Tokens/s with a K/M suffix ("1.23M", "45.6K", "789"); "-" for values <= 0.
std::string Tps(double tokens_per_second);
// Seconds in the most readable unit: "1.23 s", "45.6 ms", "789 us".
std::string Duration(double seconds);

// Okabe & Ito (2008), "Color Universal Design": eight colours distinguishable under the common
// colour-vision deficiencies. Order: orange, sky blue, bluish green, yellow, blue, vermillion,
// reddish purple, black.
inline constexpr std::array<const char*, 8> kOkabeIto = {
    "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000"};
inline constexpr const char* kGrey = "#BBBBBB";       // idle, unused
inline constexpr const char* kLightGrey = "#EEEEEE";  // backgrounds, reserve
inline constexpr const char* kInk = "#222222";        // text and outlines

// `color` ("#RRGGBB") moved towards white by `amount` in [0, 1] (negative: towards black).
std::string Lighten(std::string_view color, double amount);

// One SVG document built element by element. Every shape may carry a hover text, written as a
// <title> child (browsers show it as a tooltip; it is also what screen readers read).
class Svg {
 public:
  // `label` becomes the figure's aria-label; `css_class` its class attribute.
  Svg(double width, double height, std::string_view css_class, std::string_view label);

  void Rect(double x, double y, double width, double height, std::string_view fill,
            std::string_view title = {}, std::string_view extra_attributes = {});
  void Line(double x1, double y1, double x2, double y2, std::string_view stroke,
            double stroke_width = 1, std::string_view extra_attributes = {});
  // Text is escaped here; `anchor` is start|middle|end.
  void Text(double x, double y, std::string_view text, std::string_view anchor = "start",
            double font_size = 11, std::string_view extra_attributes = {});
  void OpenGroup(std::string_view attributes);
  void CloseGroup();
  // Appends trusted markup (already escaped).
  void Raw(std::string_view markup);

  // The whole <svg> element, without an XML prolog (fits inline in HTML and stands alone).
  std::string Finish() const;

  double width() const { return width_; }
  double height() const { return height_; }

 private:
  void Attribute(std::string_view name, std::string_view value);
  // Ends an element: extra attributes, then "/>" or ">content</tag>".
  void Close(std::string_view extra_attributes, std::string_view tag, std::string_view content);

  double width_, height_;
  std::string open_, body_;
};

// Round-number axis ticks from 0 to at least `max_value`: about `count` steps of 1, 2 or 5 x 10^k.
double NiceStep(double max_value, int count);

}  // namespace hexiseq::report
