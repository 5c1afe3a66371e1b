#include <charconv>

#include "tools/sim.h"

namespace srdma::tools {

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    std::size_t j = i;
    while (j < line.size() && !(line[j] == ' ' || line[j] == '\t' || line[j] == '\r')) ++j;
    if (j > i) words.push_back(line.substr(i, j - i));
    i = j;
  }
  return words;
}

std::optional<std::uint64_t> parse_u64(std::string_view w) {
  int base = 10;
  if (w.size() > 2 && w[0] == '0' && (w[1] == 'x' || w[1] == 'X')) {
    w.remove_prefix(2);
    base = 16;
  }
  if (w.empty() || w[0] == '-' || w[0] == '+') return std::nullopt;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(w.data(), w.data() + w.size(), v, base);
  if (ec != std::errc() || p != w.data() + w.size()) return std::nullopt;
  return v;
}

std::optional<std::int64_t> parse_i64(std::string_view w) {
  bool negative = !w.empty() && w[0] == '-';
  if (negative) w.remove_prefix(1);
  auto magnitude = parse_u64(w);
  if (!magnitude || *magnitude > (std::uint64_t{1} << 63) - (negative ? 0 : 1)) return std::nullopt;
  return negative ? static_cast<std::int64_t>(0 - *magnitude) : static_cast<std::int64_t>(*magnitude);
}

std::string printable(std::string_view line) {
  constexpr std::size_t kMax = 64;
  std::string out;
  for (char c : line.substr(0, kMax)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (line.size() > kMax) out += "...";
  return out;
}

void print_error(std::ostream& out, const Error& e) {
  out << "error " << errno_name(e.code) << ' ' << e.reason << '\n';
}

}  // namespace srdma::tools
