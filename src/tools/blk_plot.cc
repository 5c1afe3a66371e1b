#include "tools/blk_plot.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>

namespace srdma::tools {
namespace {

constexpr double kWidth = 800;
constexpr double kAscent = 0.8, kDescent = 0.25;  // of the font size
constexpr const char* kColors[] = {"#d95f02", "#1b9e77"};

// Estimated advance of one character, in em: wide for capitals, narrow for
// punctuation, a digit's width otherwise (DejaVu Sans' digits are 0.64).
double char_em(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c == 'I' ? 0.35 : 0.75;
  if (c == 'm' || c == 'w') return 0.92;
  if (c == '.' || c == ',' || c == ':' || c == 'i' || c == 'l' || c == 'j' || c == '/' || c == ' ' || c == 't' ||
      c == 'f' || c == 'r' || c == '(' || c == ')')
    return 0.42;
  return 0.64;
}

double text_width(const std::string& s, double size, bool bold = false) {
  double em = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c & 0xc0) == 0x80) continue;  // a UTF-8 continuation byte: one character already counted
    em += c < 0x80 ? char_em(c) : 0.64;
  }
  return em * size * (bold ? 1.1 : 1.0);  // bold glyphs are about a tenth wider
}

// The largest font size up to `size` at which `s` fits in `room` units.
double fit(const std::string& s, double size, double room, bool bold = false) {
  const double w = text_width(s, size, bold);
  return w <= room ? size : std::max(6.0, size * room / w);
}

// A bar's value: three significant digits or so, with an SI suffix.
std::string compact(double v) {
  const double a = std::fabs(v);
  if (a >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.1f}k", v / 1e3);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.2f}", v);
}

// Axis ticks: 0, step, ... up to the first multiple of a 1-2-2.5-5 step at
// or above `max`, about four of them.
struct Axis {
  double max = 1, step = 0.25;
  std::string label(double v) const {
    if (v == 0) return "0";
    if (max >= 1e6) return fmt::format("{:g}M", v / 1e6);
    if (max >= 1e4) return fmt::format("{:g}k", v / 1e3);
    return fmt::format("{:g}", v);
  }
};

Axis axis_for(double max) {
  if (!(max > 0) || !std::isfinite(max)) return {};
  const double raw = max / 4;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 2.5 ? 2.5 : norm <= 5 ? 5 : 10) * mag;
  return {std::ceil(max / step - 1e-9) * step, step};
}

std::string mode_label(const std::string& mode) {
  if (mode == "private") return "private CQs (one per queue)";
  if (mode == "pool") return "shared CQ pool";
  return mode;
}

// One category on the x axis and its bars: (mode index, value).
struct Group {
  std::string label;
  std::vector<std::pair<std::size_t, double>> bars;
};

// A panel in `at`: its title on top, then headroom for the tallest bar's
// value label, the plot area, and the category labels below it; on the
// left the unit (vertical) and the tick labels, whose width sets where the
// plot area starts.
void panel(PlotLayout& L, const PlotBox& at, const std::string& title, const std::string& unit,
           const std::vector<Group>& groups, const std::vector<BlkModeResult>& rs) {
  constexpr double kTitle = 14, kValue = 12, kTick = 11, kUnit = 12, kCategory = 12, kGap = 6;
  const double title_base = at.y + kAscent * kTitle + 4;
  L.texts.push_back({title, at.x + at.w / 2, title_base, fit(title, kTitle, at.w - 8, true), TextAnchor::kMiddle, false, true});
  const double plot_top = title_base + kDescent * kTitle + 4 + (kAscent + kDescent) * kValue + 4;
  const double plot_bottom = at.y + at.h - (4 + (kAscent + kDescent) * kCategory + 4);

  double max = 0;
  for (const auto& g : groups)
    for (const auto& [m, v] : g.bars) max = std::max(max, v);
  const Axis axis = axis_for(max);
  std::vector<double> ticks;
  for (double t = 0; t <= axis.max * (1 + 1e-9); t += axis.step) ticks.push_back(t);
  double tick_w = 0;
  for (double t : ticks) tick_w = std::max(tick_w, text_width(axis.label(t), kTick));

  const double unit_size = fit(unit, kUnit, plot_bottom - plot_top);
  const double unit_x = at.x + 4 + kAscent * unit_size;  // rotated: the ascent lies to the left of the baseline
  L.texts.push_back({unit, unit_x, (plot_top + plot_bottom) / 2, unit_size, TextAnchor::kMiddle, true, false});
  const double plot_left = unit_x + kDescent * unit_size + kGap + tick_w + kGap;
  const double plot_right = at.x + at.w - 8;
  const double plot_h = plot_bottom - plot_top;
  auto y_of = [&](double v) { return plot_bottom - plot_h * std::clamp(v / axis.max, 0.0, 1.0); };

  for (double t : ticks) {
    const double y = y_of(t);
    L.lines.push_back({plot_left, y, plot_right, y, t == 0 ? "#000000" : "#dddddd"});
    L.lines.push_back({plot_left - 4, y, plot_left, y, "#000000"});
    L.texts.push_back({axis.label(t), plot_left - kGap, y + 0.35 * kTick, kTick, TextAnchor::kEnd, false, false});
  }
  L.lines.push_back({plot_left, plot_top, plot_left, plot_bottom, "#000000"});

  const double group_w = (plot_right - plot_left) / static_cast<double>(std::max<std::size_t>(1, groups.size()));
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const double gx = plot_left + group_w * static_cast<double>(g);
    const auto n = static_cast<double>(std::max<std::size_t>(1, groups[g].bars.size()));
    const double bar_w = std::min(64.0, (group_w * 0.8 - kGap * (n - 1)) / n);
    double x = gx + (group_w - (n * bar_w + (n - 1) * kGap)) / 2;
    for (const auto& [m, v] : groups[g].bars) {
      const double top = y_of(v);
      L.bars.push_back({{x, top, bar_w, plot_bottom - top}, kColors[m % 2], rs[m].mode, v});
      const std::string value = compact(v);
      L.texts.push_back({value, x + bar_w / 2, top - 4 - kDescent * kValue, fit(value, kValue, bar_w + kGap - 2),
                         TextAnchor::kMiddle, false, false});
      x += bar_w + kGap;
    }
    const std::string& label = groups[g].label;
    L.texts.push_back({label, gx + group_w / 2, plot_bottom + 4 + kAscent * kCategory, fit(label, kCategory, group_w - 4),
                       TextAnchor::kMiddle, false, false});
  }
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

PlotBox PlotText::box() const {
  const double w = text_width(text, size, bold);
  const double start = anchor == TextAnchor::kStart ? 0 : anchor == TextAnchor::kMiddle ? -w / 2 : -w;
  if (vertical)  // rotated -90 degrees about (x, y): the text runs upwards, its ascent to the left
    return {x - kAscent * size, y - start - w, (kAscent + kDescent) * size, w};
  return {x + start, y - kAscent * size, w, (kAscent + kDescent) * size};
}

PlotLayout layout_plot(const std::vector<BlkModeResult>& rs) {
  PlotLayout L;
  L.width = kWidth;
  const std::string title = "srdma blk bench: private CQs against the shared CQ pool";
  L.texts.push_back({title, kWidth / 2, 26, fit(title, 18, kWidth - 20, true), TextAnchor::kMiddle, false, true});

  // The legend, centred: a swatch and the mode's name each.
  constexpr double kLegend = 13, kSwatch = 12, kLegendY = 50;
  double legend_w = 0;
  for (const auto& r : rs) legend_w += kSwatch + 6 + text_width(mode_label(r.mode), kLegend) + 30;
  double x = std::max(10.0, (kWidth - (legend_w - 30)) / 2);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    L.swatches.push_back({x, kLegendY - kSwatch + 1, kSwatch, kSwatch});
    L.swatch_fills.push_back(kColors[i % 2]);
    const std::string label = mode_label(rs[i].mode);
    L.texts.push_back({label, x + kSwatch + 6, kLegendY, kLegend, TextAnchor::kStart, false, false});
    x += kSwatch + 6 + text_width(label, kLegend) + 30;
  }

  // Top row: one bar per mode in three panels; below, latency grouped by percentile.
  auto per_mode = [&](double BlkModeResult::*f) {
    std::vector<Group> gs;
    for (std::size_t i = 0; i < rs.size(); ++i) gs.push_back({rs[i].mode, {{i, rs[i].*f}}});
    return gs;
  };
  constexpr double kRow1 = 64, kRow1H = 280, kRow2 = kRow1 + kRow1H + 10, kRow2H = 300, kMargin = 10;
  const double w3 = (kWidth - 2 * kMargin) / 3;
  panel(L, {kMargin, kRow1, w3, kRow1H}, "IOPS", "I/Os per second", per_mode(&BlkModeResult::iops), rs);
  panel(L, {kMargin + w3, kRow1, w3, kRow1H}, "Interrupts per second", "completion events/s",
        per_mode(&BlkModeResult::interrupts_per_s), rs);
  panel(L, {kMargin + 2 * w3, kRow1, w3, kRow1H}, "CPU per I/O", "CPU µs per I/O",
        per_mode(&BlkModeResult::cpu_us_per_io), rs);
  std::vector<Group> lat;
  for (auto [label, f] : {std::pair{"p50", &BlkModeResult::lat_p50_us}, std::pair{"p99", &BlkModeResult::lat_p99_us},
                          std::pair{"p99.99", &BlkModeResult::lat_p9999_us}}) {
    Group g{label, {}};
    for (std::size_t i = 0; i < rs.size(); ++i) g.bars.emplace_back(i, rs[i].*f);
    lat.push_back(std::move(g));
  }
  panel(L, {kMargin, kRow2, kWidth - 2 * kMargin, kRow2H}, "Latency percentiles", "latency, µs", lat, rs);
  L.height = kRow2 + kRow2H + kMargin;
  return L;
}

std::vector<std::string> layout_faults(const PlotLayout& L) {
  std::vector<std::string> faults;
  const PlotBox canvas{0, 0, L.width, L.height};
  for (std::size_t i = 0; i < L.texts.size(); ++i) {
    const PlotText& t = L.texts[i];
    const PlotBox b = t.box();
    if (!b.inside(canvas)) faults.push_back(fmt::format("text '{}' leaves the canvas", t.text));
    for (const auto& bar : L.bars)
      if (b.overlaps(bar.box)) faults.push_back(fmt::format("text '{}' overlaps the {} bar of {}", t.text, bar.mode, bar.value));
    for (const auto& s : L.swatches)
      if (b.overlaps(s)) faults.push_back(fmt::format("text '{}' overlaps a legend swatch", t.text));
    for (std::size_t j = i + 1; j < L.texts.size(); ++j)
      if (b.overlaps(L.texts[j].box()))
        faults.push_back(fmt::format("text '{}' overlaps text '{}'", t.text, L.texts[j].text));
  }
  return faults;
}

std::string render_svg(const PlotLayout& L) {
  std::string s = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"  // one line with <svg: tools that sniff the first line
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\" "
      "font-family=\"DejaVu Sans, Arial, Helvetica, sans-serif\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      L.width, L.height);
  for (const auto& l : L.lines)
    s += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\"/>\n", l.x1, l.y1, l.x2,
                     l.y2, l.stroke);
  for (const auto& b : L.bars)
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"><title>{}: {}</title></rect>\n",
                     b.box.x, b.box.y, b.box.w, b.box.h, b.fill, escape(b.mode), compact(b.value));
  for (std::size_t i = 0; i < L.swatches.size(); ++i) {
    const PlotBox& w = L.swatches[i];
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"{}\"/>\n", w.x, w.y, w.w,
                     w.h, L.swatch_fills[i]);
  }
  for (const auto& t : L.texts) {
    const char* anchor = t.anchor == TextAnchor::kStart ? "start" : t.anchor == TextAnchor::kMiddle ? "middle" : "end";
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{:.1f}\" text-anchor=\"{}\"{}{}>{}</text>\n", t.x, t.y,
                     t.size, anchor, t.bold ? " font-weight=\"bold\"" : "",
                     t.vertical ? fmt::format(" transform=\"rotate(-90 {:.1f} {:.1f})\"", t.x, t.y) : std::string(),
                     escape(t.text));
  }
  s += "</svg>\n";
  return s;
}

Result<void> write_plot(const std::string& path, const std::vector<BlkModeResult>& rs) {
  const std::string svg = render_svg(layout_plot(rs));
  std::ofstream f(path);
  if (!f) return make_error(EIO, fmt::format("cannot write {}", path));
  f << svg;
  if (!f) return make_error(EIO, fmt::format("cannot write {}", path));
  return {};
}

}  // namespace srdma::tools
