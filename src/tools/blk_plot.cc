#include "tools/blk_plot.h"

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

namespace srdma::tools {
namespace {

// One panel: a bar per mode, scaled to the largest value.
std::string panel(const std::string& title, const std::vector<BlkModeResult>& rs, double (*get)(const BlkModeResult&),
                  int x0) {
  constexpr int kW = 300, kH = 220, kBar = 70;
  double max = 0;
  for (const auto& r : rs) max = std::max(max, get(r));
  if (max <= 0) max = 1;
  std::string s = fmt::format(R"(<text x="{}" y="30" font-size="16" text-anchor="middle">{}</text>)", x0 + kW / 2, title);
  s += fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="black"/>)", x0 + 20, 40 + kH, x0 + kW - 20, 40 + kH);
  const char* colors[] = {"#d95f02", "#1b9e77"};
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const double v = get(rs[i]);
    const int h = static_cast<int>(kH * v / max);
    const int x = x0 + 50 + static_cast<int>(i) * (kBar + 50);
    s += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>)", x, 40 + kH - h, kBar, h, colors[i % 2]);
    s += fmt::format(R"(<text x="{}" y="{}" font-size="13" text-anchor="middle">{:.0f}</text>)", x + kBar / 2,
                     34 + kH - h, v);
    s += fmt::format(R"(<text x="{}" y="{}" font-size="14" text-anchor="middle">{}</text>)", x + kBar / 2, 60 + kH,
                     rs[i].mode);
  }
  return s;
}

}  // namespace

Result<void> write_plot(const std::string& path, const std::vector<BlkModeResult>& rs) {
  std::string svg = R"(<svg xmlns="http://www.w3.org/2000/svg" width="640" height="300" font-family="sans-serif">)";
  svg += R"(<rect width="100%" height="100%" fill="white"/>)";
  svg += panel("IOPS", rs, [](const BlkModeResult& r) { return r.iops; }, 0);
  svg += panel("interrupts/s", rs, [](const BlkModeResult& r) { return r.interrupts_per_s; }, 320);
  svg += "</svg>\n";
  std::ofstream f(path);
  if (!f) return make_error(EIO, fmt::format("cannot write {}", path));
  f << svg;
  if (!f) return make_error(EIO, fmt::format("cannot write {}", path));
  return {};
}

}  // namespace srdma::tools
