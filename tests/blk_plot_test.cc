// srdma blk bench --plot: the SVG is well-formed, holds every value and
// label, and its layout has no text over a bar or over another text.
#include "tools/blk_plot.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace srdma::tools {
namespace {

BlkModeResult mode(const char* name, double iops, double irq, double cpu, double p50, double p99, double p9999) {
  BlkModeResult r;
  r.mode = name;
  r.iops = iops;
  r.interrupts_per_s = irq;
  r.cpu_us_per_io = cpu;
  r.lat_p50_us = p50;
  r.lat_p99_us = p99;
  r.lat_p9999_us = p9999;
  return r;
}

const std::vector<BlkModeResult> kTwoModes = {mode("private", 123456, 245678.9, 3.21, 12.3, 45.6, 789),
                                              mode("pool", 131072, 8123, 2.5, 11.9, 40.1, 1234)};

// A minimal XML reader: the prolog, elements nested and closed in order,
// attributes quoted, only the five predefined entities; it returns the
// unescaped text inside each <text> element.
struct Xml {
  std::vector<std::string> texts;
  std::string error;
};

std::string unescape(const std::string& s, std::string* error) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') *error = "a raw '<' in character data";
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const auto end = s.find(';', i);
    const std::string ent = end == std::string::npos ? "" : s.substr(i + 1, end - i - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else *error = "a bad entity near " + s.substr(i, 10);
    if (end == std::string::npos) return out;
    i = end;
  }
  return out;
}

Xml parse(const std::string& doc) {
  Xml x;
  std::vector<std::string> open;
  std::size_t i = 0;
  if (doc.rfind("<?xml", 0) != 0) return {{}, "no XML declaration"};
  i = doc.find("?>");
  if (i == std::string::npos) return {{}, "an unterminated declaration"};
  i += 2;
  bool root_seen = false;
  std::string in_text;
  while (i < doc.size()) {
    const auto lt = doc.find('<', i);
    const std::string chars = doc.substr(i, lt == std::string::npos ? std::string::npos : lt - i);
    const std::string data = unescape(chars, &x.error);
    if (!open.empty() && open.back() == "text") in_text += data;
    else if (open.empty() && data.find_first_not_of(" \n\t") != std::string::npos)
      x.error = "text outside the root element: " + data;
    if (lt == std::string::npos) break;
    const auto gt = doc.find('>', lt);
    if (gt == std::string::npos) return {{}, "an unterminated tag"};
    std::string tag = doc.substr(lt + 1, gt - lt - 1);
    i = gt + 1;
    if (tag.starts_with('/')) {
      if (open.empty() || open.back() != tag.substr(1)) return {{}, "a mismatched </" + tag.substr(1) + ">"};
      if (open.back() == "text") x.texts.push_back(std::exchange(in_text, {}));
      open.pop_back();
      continue;
    }
    const bool empty = tag.ends_with('/');
    if (empty) tag.pop_back();
    const std::string name = tag.substr(0, tag.find_first_of(" \n"));
    if (open.empty() && root_seen) return {{}, "a second root element"};
    root_seen = true;
    // Attributes: name="value" pairs, nothing else.
    std::size_t a = name.size();
    while (true) {
      a = tag.find_first_not_of(" \n", a);
      if (a == std::string::npos) break;
      const auto eq = tag.find('=', a);
      if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"')
        return {{}, "an unquoted attribute in <" + name + ">"};
      const auto close = tag.find('"', eq + 2);
      if (close == std::string::npos) return {{}, "an unterminated attribute in <" + name + ">"};
      (void)unescape(tag.substr(eq + 2, close - eq - 2), &x.error);
      a = close + 1;
    }
    if (!empty) open.push_back(name);
  }
  if (!open.empty()) x.error = "<" + open.back() + "> is never closed";
  if (!root_seen) x.error = "no root element";
  return x;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(BlkPlot, WritesWellFormedSvg) {
  const std::string path = ::testing::TempDir() + "blk_plot.svg";
  ASSERT_TRUE(write_plot(path, kTwoModes));
  const std::string doc = read(path);
  const Xml x = parse(doc);
  EXPECT_EQ(x.error, "");
  EXPECT_NE(doc.find("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"800\""), std::string::npos);
  // A second opinion where Python is installed (scripts/setup.sh installs it).
  if (std::system("command -v python3 >/dev/null 2>&1") == 0) {
    const std::string check = "python3 -c 'import sys, xml.dom.minidom; xml.dom.minidom.parse(sys.argv[1])' " + path;
    EXPECT_EQ(std::system(check.c_str()), 0);
  }
}

TEST(BlkPlot, HoldsEveryValueAndLabel) {
  const Xml x = parse(render_svg(layout_plot(kTwoModes)));
  ASSERT_EQ(x.error, "");
  auto has = [&](const std::string& s) { return std::find(x.texts.begin(), x.texts.end(), s) != x.texts.end(); };
  // Every bar's value, as labelled.
  for (const char* v : {"123.5k", "131.1k", "245.7k", "8123", "3.21", "2.50", "12.3", "11.9", "45.6", "40.1", "789",
                        "1234"})
    EXPECT_TRUE(has(v)) << v;
  // Panel titles, units, categories, the legend, and the axes' zero.
  for (const char* l : {"IOPS", "Interrupts per second", "CPU per I/O", "Latency percentiles", "I/Os per second",
                        "completion events/s", "CPU µs per I/O", "latency, µs", "p50", "p99", "p99.99", "private",
                        "pool", "private CQs (one per queue)", "shared CQ pool", "0"})
    EXPECT_TRUE(has(l)) << l;
  // Ticks reach the tallest bar: the IOPS axis ends at 150k (steps of 50k).
  EXPECT_TRUE(has("150k"));
  EXPECT_TRUE(has("50k"));
}

TEST(BlkPlot, EscapesModeNames) {
  auto rs = kTwoModes;
  rs[1].mode = "pool<&>";
  const Xml x = parse(render_svg(layout_plot(rs)));
  EXPECT_EQ(x.error, "");
  EXPECT_NE(std::find(x.texts.begin(), x.texts.end(), "pool<&>"), x.texts.end());
}

TEST(BlkPlot, NothingOverlapsAcrossShapesOfResults) {
  const std::vector<std::vector<BlkModeResult>> cases = {
      kTwoModes,
      {kTwoModes[1]},  // one mode alone
      {mode("private", 0, 0, 0, 0, 0, 0), mode("pool", 0, 0, 0, 0, 0, 0)},
      // The tallest bar at its axis' top (the old chart's title ran into its label).
      {mode("private", 400000, 2000000, 10, 100, 200, 500), mode("pool", 400000, 2000000, 10, 100, 200, 500)},
      // Wide numbers and disparate bars side by side.
      {mode("private", 987654321, 123456789, 1234.5, 98765, 876543, 9876543), mode("pool", 1, 0.5, 0.01, 0.02, 3, 7)},
  };
  for (const auto& rs : cases) {
    const PlotLayout L = layout_plot(rs);
    EXPECT_EQ(L.width, 800);
    EXPECT_EQ(L.bars.size(), rs.size() * 6);  // three panels of one bar per mode, three percentiles per mode
    const auto faults = layout_faults(L);
    EXPECT_TRUE(faults.empty()) << faults.front();
    for (const auto& t : L.texts) EXPECT_GE(t.size, 8) << t.text;  // readable at 800 px
  }
}

TEST(BlkPlot, TheLayoutCheckFindsAnOverlap) {
  PlotLayout L = layout_plot(kTwoModes);
  ASSERT_TRUE(layout_faults(L).empty());
  // A value label moved into its bar, and the title onto the legend.
  const PlotBar& bar = L.bars[0];
  L.texts.push_back({"1", bar.box.x + bar.box.w / 2, bar.box.y + bar.box.h / 2, 12});
  L.texts.push_back({"srdma", 400, 50, 18});
  const auto faults = layout_faults(L);
  ASSERT_GE(faults.size(), 2u);
  EXPECT_NE(faults[0].find("overlaps"), std::string::npos) << faults[0];
}

TEST(BlkPlot, VerticalTextBoxIsRotated) {
  const PlotText t{"abcd", 100, 200, 10, TextAnchor::kMiddle, true};
  const PlotBox b = t.box();
  EXPECT_LT(b.w, b.h);  // taller than wide
  EXPECT_DOUBLE_EQ(b.x, 100 - 8);
  EXPECT_DOUBLE_EQ(b.y + b.h / 2, 200);
}

TEST(BlkPlot, AnUnwritablePathIsEio) {
  auto r = write_plot("/nonexistent-dir/chart.svg", kTwoModes);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EIO);
  EXPECT_NE(r.error().reason.find("/nonexistent-dir/chart.svg"), std::string::npos);
}

}  // namespace
}  // namespace srdma::tools
