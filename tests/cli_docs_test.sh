#!/usr/bin/env bash
# The man pages, the bash completion and --version, against the command
# they describe (cmake/cli_docs.cmake makes them from srdma itself):
#
#   cli_docs_test.sh SRDMA DOCS_DIR DROPIN_DIR
#
#  - a page for srdma and for every subcommand --help lists (walked from
#    `srdma --help` down), and no other;
#  - each page renders with `man -l` at 80 columns with no warning;
#  - each page's OPTIONS and POSITIONALS are exactly what `--help` lists;
#  - the completion offers, after each command path, its subcommands and
#    every option --help lists; after `srdma run --`, commands;
#  - srdma --version names the version, a commit, and the version nodes
#    the built libibverbs.so.1 and librdmacm.so.1 define.
# Skips (77) in a build without the docs (the sanitized ones) or without man.
set -u
srdma=${1:?usage: cli_docs_test.sh SRDMA DOCS_DIR DROPIN_DIR}
docs=${2:?} dropins=${3:?}
[[ -d $docs/man1 ]] || { echo "SKIP: no man pages in $docs (sanitized builds make none)"; exit 77; }
command -v man >/dev/null || { echo "SKIP: no man (apt-get install man-db)"; exit 77; }
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# "-p,--profile" per option (CLI11's "{false}" on a negated flag dropped),
# from the SECTION ("Options" or "Positionals") of `srdma PATH --help`.
help_names() {  # SECTION PATH...
  local section=$1
  shift
  # shellcheck disable=SC2068
  "$srdma" $@ --help | awk -v s="$section:" '
    $0 == s {on = 1; next}
    on && /^$/ {on = 0}
    on && /^  [^ ]/ {sub(/\{[^}]*\}/, "", $1); print $1}' | sort
}
help_subcommands() {  # PATH...
  # shellcheck disable=SC2068
  "$srdma" $@ --help | awk '$0 == "Subcommands:" {on = 1; next} on && /^$/ {on = 0} on && /^  [^ ]/ {print $1}'
}
# The same from a page: each .TP term under .SH SECTION, its \fB...\fR
# names joined with commas (a positional's name is in \fI...\fR).
page_names() {  # SECTION PAGE
  awk -v s=".SH $1" '
    /^\.SH / {on = ($0 == s); next}
    on && prev == ".TP" {
      line = $0; gsub(/\\-/, "-", line); names = ""
      while (match(line, /\\f[BI][^\\]*\\fR/)) {
        n = substr(line, RSTART + 3, RLENGTH - 6)
        if (names == "" || substr(line, RSTART + 2, 1) == "B") names = names (names == "" ? "" : ",") n
        line = substr(line, RSTART + RLENGTH)
        if (substr(line, 1, 2) != ", ") break
      }
      print names
    }
    {prev = $0}' "$2" | sed 's/ .*//' | sort
}

# Every command path, from the top down.
paths=("")
for ((i = 0; i < ${#paths[@]}; i++)); do
  # shellcheck disable=SC2086
  for sub in $(help_subcommands ${paths[i]}); do paths+=("${paths[i]:+${paths[i]} }$sub"); done
done
expected_pages=$(for p in "${paths[@]}"; do echo "srdma${p:+-${p// /-}}.1"; done | sort)
actual_pages=$(cd "$docs/man1" && ls -- *.1 | sort)
[[ $expected_pages == "$actual_pages" ]] ||
  fail "pages differ from the subcommands: $(diff <(echo "$expected_pages") <(echo "$actual_pages") | grep '^[<>]' | xargs)"

checked=0
for p in "${paths[@]}"; do
  page=$docs/man1/srdma${p:+-${p// /-}}.1
  [[ -f $page ]] || continue
  warnings=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
  [[ -z $warnings ]] || fail "man -l ${page##*/}: $warnings"
  grep -qx ".B srdma${p:+ $p}" "$page" || fail "${page##*/}: its SYNOPSIS is not 'srdma $p'"
  # shellcheck disable=SC2086
  for section in OPTIONS:Options POSITIONALS:Positionals; do
    want=$(help_names "${section#*:}" $p)
    got=$(page_names "${section%:*}" "$page")
    [[ $want == "$got" ]] || fail "${page##*/} ${section%:*}: $(xargs <<<"$got"), --help: $(xargs <<<"$want")"
  done
  checked=$((checked + 1))
done
echo "ok   $checked pages: one per command, man -l without warnings, options as --help lists them"

# The completion, sourced as bash-completion would.
completion=$docs/completions/srdma
complete_words() {  # WORDS...: what _srdma offers for the last word
  bash -c 'source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _srdma
           printf "%s\n" "${COMPREPLY[@]}"' "$completion" "$@"
}
for p in "${paths[@]}"; do
  # shellcheck disable=SC2086
  offered=$(complete_words srdma $p "" | sort)
  # shellcheck disable=SC2086
  for w in $(help_subcommands $p) $(help_names Options $p | tr , ' '); do
    grep -qx -- "$w" <<<"$offered" || fail "completion after 'srdma $p' lacks $w"
  done
done
[[ $(complete_words srdma nvmf target --c) == "--config" ]] || fail "completion of 'srdma nvmf target --c'"
[[ -z $(complete_words srdma nvmf target --config "") ]] || fail "completion after --config offers words, not files"
complete_words srdma run -- "bas" | grep -qx bash || fail "completion after 'srdma run --' offers no commands"
echo "ok   completion: each command's subcommands and options; files after an option's value; commands after run --"

# --version against the drop-ins as built.
version=$("$srdma" --version) || fail "srdma --version exited $?"
[[ $(head -1 <<<"$version") =~ ^srdma\ [0-9]+\.[0-9]+\ \(softrdma\),\ git\ [0-9a-f]{12}(-dirty)?$|unknown ]] ||
  fail "srdma --version's first line: $(head -1 <<<"$version")"
for lib in libibverbs.so.1 librdmacm.so.1; do
  [[ -e $dropins/$lib ]] || continue
  line=$(grep "drop-in $lib " <<<"$version") || { fail "srdma --version does not name $lib"; continue; }
  real=$(readlink -f "$dropins/$lib")
  [[ $line == *"drop-in $lib ${real##*.so.}: rdma-core "* ]] || fail "$lib's version in: $line (built: ${real##*/})"
  # The version nodes the library defines (objdump's "Version definitions"), base node aside.
  nodes=$(objdump -p "$real" | awk '/^Version definitions:/ {on = 1; next} on && NF == 0 {on = 0} on && NF == 4 && $2 != "0x01" {print $4}')
  public=$(grep -v PRIVATE <<<"$nodes" | sort -V)
  [[ $line == *"$(head -1 <<<"$public") .. $(tail -1 <<<"$public")"* ]] ||
    fail "$lib: --version says '$line', the library defines $(xargs <<<"$public")"
  for private in $(grep PRIVATE <<<"$nodes"); do
    [[ $line == *"$private"* ]] || fail "$lib: --version does not name $private"
  done
done
echo "ok   srdma --version: $(tr '\n' ' ' <<<"$version")"

[[ $fails == 0 ]] && echo "cli docs: all passed"
exit $((fails > 0))
