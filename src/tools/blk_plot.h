// `srdma blk bench --plot`: an SVG chart comparing the CQ modes (private
// CQs against the shared pool): IOPS, interrupts per second and CPU per
// I/O side by side, and the latency percentiles (p50 / p99 / p99.99)
// grouped below, every bar labelled with its value, every axis with ticks
// and units.
//
// Written directly rather than through a plotting package: the layout is
// computed here (layout_plot) as boxes of text and bars, so that a test can
// prove from those boxes that nothing overlaps, and the chart needs no
// dependency. Text widths are estimated per character class (capitals
// 0.75 em, digits 0.64, punctuation 0.42; bold a tenth wider), at or above
// DejaVu Sans' widths, so the estimate errs on the wide side.
#pragma once

#include <string>
#include <vector>

#include "srdma/status.h"
#include "tools/blk_bench.h"

namespace srdma::tools {

// An axis-aligned box in SVG user units (y grows downwards).
struct PlotBox {
  double x = 0, y = 0, w = 0, h = 0;
  // Strictly overlapping: boxes that only touch do not.
  bool overlaps(const PlotBox& o) const { return x < o.x + o.w && o.x < x + w && y < o.y + o.h && o.y < y + h; }
  bool inside(const PlotBox& o) const { return x >= o.x && y >= o.y && x + w <= o.x + o.w && y + h <= o.y + o.h; }
};

enum class TextAnchor { kStart, kMiddle, kEnd };

struct PlotText {
  std::string text;  // UTF-8, unescaped
  double x = 0, y = 0;  // the anchor point on the baseline (for vertical text: rotated -90 degrees about it)
  double size = 12;     // font size
  TextAnchor anchor = TextAnchor::kMiddle;
  bool vertical = false;
  bool bold = false;
  // The box the text covers, from the estimated width and the font's
  // ascent (0.8 em) and descent (0.25 em).
  PlotBox box() const;
};

struct PlotBar {
  PlotBox box;
  std::string fill;
  std::string mode;
  double value = 0;
};

struct PlotLine {
  double x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  std::string stroke;
};

struct PlotLayout {
  double width = 0, height = 0;
  std::vector<PlotText> texts;
  std::vector<PlotBar> bars;
  std::vector<PlotLine> lines;  // axes and grid lines (behind the bars)
  std::vector<PlotBox> swatches;  // legend colour squares, one per mode
  std::vector<std::string> swatch_fills;
};

// The chart's layout, 800 units wide, for the modes in `results` (any
// number; colours repeat after two).
PlotLayout layout_plot(const std::vector<BlkModeResult>& results);
// The layout's faults, described: a text box overlapping a bar, a swatch or
// another text, or anything outside the canvas. Empty when it is clean.
std::vector<std::string> layout_faults(const PlotLayout& layout);
std::string render_svg(const PlotLayout& layout);

// Writes render_svg(layout_plot(results)) to `path`; EIO naming the path.
Result<void> write_plot(const std::string& path, const std::vector<BlkModeResult>& results);

}  // namespace srdma::tools
