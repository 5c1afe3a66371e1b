#include "tools/cli_docs.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace srdma::tools {
namespace {

std::vector<const CLI::App*> subcommands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

// "srdma nvmf target": the words that reach `app`.
std::string command_path(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* p = app.get_parent(); p != nullptr; p = p->get_parent()) path = p->get_name() + " " + path;
  return path;
}

std::string page_name(const CLI::App& app) {
  std::string name = command_path(app);
  std::replace(name.begin(), name.end(), ' ', '-');
  return name;
}

// Text as roff reads it: backslashes escaped, a leading dot or quote kept
// from being a request, and a hyphen that starts a word (an option: -s,
// --json) a minus sign rather than a hyphen.
std::string roff(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool line_start = i == 0 || text[i - 1] == '\n';
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-' && (i == 0 || std::string_view(" \n([,/|=").find(text[i - 1]) != std::string_view::npos ||
                            (i > 0 && text[i - 1] == '-'))) {
      out += "\\-";
    } else {
      out += c;
    }
  }
  return out;
}

// A footer or description: a blank line separates paragraphs.
std::string roff_paragraphs(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (line.empty()) {
      if (!first) out += ".PP\n";
      continue;
    }
    out += roff(line) + "\n";
    first = false;
  }
  return out;
}

std::string option_term(const CLI::Formatter& f, const CLI::Option& o) {
  // The names as --help lists them ("-p,--profile"), then what follows them
  // there (" TEXT ...", " UINT=4420", " REQUIRED").
  std::string names;
  std::string all = o.get_positional() ? o.get_name(true, false) : o.get_name(false, true);
  // A negated flag's "{false}" is CLI11's note of the value it sets, not its name.
  if (const auto brace = all.find('{'); brace != std::string::npos) all.erase(brace, all.find('}', brace) + 1 - brace);
  std::size_t start = 0;
  while (start <= all.size()) {
    std::size_t comma = all.find(',', start);
    if (comma == std::string::npos) comma = all.size();
    if (!names.empty()) names += ", ";
    names += "\\fB" + roff(all.substr(start, comma - start)) + "\\fR";
    start = comma + 1;
  }
  std::string opts = f.make_option_opts(&o);
  if (!opts.empty()) names += " \\fI" + roff(opts.substr(opts.front() == ' ' ? 1 : 0)) + "\\fR";
  return names;
}

std::string synopsis(const CLI::App& app) {
  std::string s = ".B " + roff(command_path(app)) + "\n";
  if (!app.get_options([](const CLI::Option* o) { return o->nonpositional(); }).empty()) s += "[\\fIOPTIONS\\fR]\n";
  for (const CLI::Option* o : app.get_options([](const CLI::Option* o) { return o->get_positional(); })) {
    const std::string name = "\\fI" + roff(o->get_name(true, false)) + "\\fR";
    s += (o->get_required() ? name : "[" + name + "]") + "\n";
  }
  if (!subcommands(app).empty()) s += "\\fICOMMAND\\fR\n";
  if (app.get_prefix_command()) s += "[\\fB\\-\\-\\fR] \\fIPROGRAM\\fR [\\fIARGS\\fR...]\n";
  return s;
}

std::string man_page(const CLI::App& app, const std::string& version) {
  const std::string name = page_name(app);
  std::string upper = name;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string p;
  p += ".\\\" Made by `srdma --generate-man` from the command's own definition\n";
  p += ".\\\" (src/tools/main.cc, the source of --help too): do not edit.\n";
  p += fmt::format(".TH {} 1 \"\" \"softrdma {}\" \"softrdma manual\"\n", roff(upper), version);
  p += ".nh\n.ad l\n";  // no hyphenation, no stretched spaces: option names and paths stay whole
  p += ".SH NAME\n" + roff(name) + " \\- " + roff(app.get_description()) + "\n";
  p += ".SH SYNOPSIS\n" + synopsis(app);
  p += ".SH DESCRIPTION\n" + roff_paragraphs(app.get_description() + ".");
  if (!app.get_footer().empty()) p += ".PP\n" + roff_paragraphs(app.get_footer());
  const CLI::Formatter f;
  auto list = [&](const char* title, const std::vector<const CLI::Option*>& opts) {
    if (opts.empty()) return;
    p += fmt::format(".SH {}\n", title);
    for (const CLI::Option* o : opts) p += ".TP\n" + option_term(f, *o) + "\n" + roff(o->get_description()) + "\n";
  };
  list("POSITIONALS", app.get_options([](const CLI::Option* o) { return o->get_positional(); }));
  list("OPTIONS", app.get_options([](const CLI::Option* o) { return o->nonpositional(); }));
  std::vector<std::string> see_also;
  if (const auto subs = subcommands(app); !subs.empty()) {
    p += ".SH COMMANDS\n";
    for (const CLI::App* s : subs) {
      p += ".TP\n.B " + roff(s->get_name()) + "\n" + roff(s->get_description()) + "\n";
      see_also.push_back(page_name(*s));
    }
  }
  if (app.get_parent() != nullptr) see_also.insert(see_also.begin(), page_name(*app.get_parent()));
  if (!see_also.empty()) {
    p += ".SH SEE ALSO\n";
    for (std::size_t i = 0; i < see_also.size(); ++i)
      p += ".BR " + roff(see_also[i]) + " (1)" + (i + 1 < see_also.size() ? "," : "") + "\n";
  }
  return p;
}

Result<void> write_pages(const CLI::App& app, const std::string& dir, const std::string& version) {
  const std::string path = dir + "/" + page_name(app) + ".1";
  std::ofstream out(path);
  out << man_page(app, version);
  out.close();
  if (!out) return make_error(EIO, fmt::format("{}: cannot write it", path));
  for (const CLI::App* s : subcommands(app))
    if (auto r = write_pages(*s, dir, version); !r) return r;
  return {};
}

void completion_cases(const CLI::App& app, std::string& walk, std::string& words, std::string& values) {
  const std::string path = command_path(app);
  std::string w;
  for (const CLI::App* s : subcommands(app)) {
    w += s->get_name() + " ";
    walk += fmt::format("      \"{} {}\") path=\"{} {}\" ;;\n", path, s->get_name(), path, s->get_name());
  }
  for (const CLI::Option* o : app.get_options([](const CLI::Option* o) { return o->nonpositional(); })) {
    for (const auto& n : o->get_snames()) w += "-" + n + " ";
    for (const auto& n : o->get_lnames()) w += "--" + n + " ";
    if (o->get_expected_max() > 0) {  // it takes a value
      for (const auto& n : o->get_snames()) values += fmt::format("    \"{} -{}\") return ;;\n", path, n);
      for (const auto& n : o->get_lnames()) values += fmt::format("    \"{} --{}\") return ;;\n", path, n);
    }
  }
  if (!w.empty()) w.pop_back();
  words += fmt::format("    \"{}\") words=\"{}\" ;;\n", path, w);
  for (const CLI::App* s : subcommands(app)) completion_cases(*s, walk, words, values);
}

}  // namespace

Result<void> write_man_pages(const CLI::App& app, const std::string& dir, const std::string& version) {
  return write_pages(app, dir, version);
}

std::string bash_completion(const CLI::App& app) {
  std::string walk, words, values;
  completion_cases(app, walk, words, values);
  const std::string name = app.get_name();
  return fmt::format(R"(# bash completion for {0}: made by `{0} --generate-bash-completion` from the
# command's own definition (src/tools/main.cc); do not edit.
_{0}() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} path={0} i words=
  # The subcommands typed so far; after `run --`, the program's own words.
  for ((i = 1; i < COMP_CWORD; i++)); do
    if [[ $path == "{0} run" && ${{COMP_WORDS[i]}} == -- ]]; then
      ((i == COMP_CWORD - 1)) && mapfile -t COMPREPLY < <(compgen -c -- "$cur" | sort -u)
      return
    fi
    case "$path ${{COMP_WORDS[i]}}" in
{1}    esac
  done
  # After an option that takes a value: the shell's default (file names).
  case "$path $prev" in
{3}  esac
  case $path in
{2}  esac
  mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
}}
complete -o default -F _{0} {0}
)",
                     name, walk, words, values);
}

}  // namespace srdma::tools
