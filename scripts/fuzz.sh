#!/usr/bin/env bash
# The capsule parser under libFuzzer (clang, with ASan and UBSan).
#   scripts/fuzz.sh [seconds]   build fuzz/capsule_fuzz.cc and run it that long
#                               (default 20) from the seed corpus fuzz/corpus/
#   scripts/fuzz.sh --corpus    regenerate fuzz/corpus/ from the capsule builders
# The parser is built straight from its sources: the rest of the project needs
# libstdc++'s <expected>, which clang 14 cannot compile, and the parser
# deliberately does not.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/fuzz
mkdir -p "$out"

if [[ ${1:-} == --corpus ]]; then
  g++ -std=c++2b -O1 -Isrc -Iinclude fuzz/make_corpus.cc src/nvmf/capsule.cc src/nvmf/status.cc \
    src/common/status.cc -lfmt -o "$out/make_corpus"
  rm -rf fuzz/corpus && mkdir -p fuzz/corpus
  "$out/make_corpus" fuzz/corpus
  ls -l fuzz/corpus
  exit 0
fi

seconds=${1:-20}
clang++ -std=c++2b -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -Isrc -Iinclude \
  fuzz/capsule_fuzz.cc src/nvmf/capsule_parser.cc src/nvmf/status.cc -o "$out/capsule_fuzz"
# Run on a scratch copy so new inputs the fuzzer finds do not land in git.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp fuzz/corpus/* "$work"/
"$out/capsule_fuzz" -max_total_time="$seconds" -print_final_stats=1 -max_len=9000 \
  -artifact_prefix="$out/" "$work"
echo "capsule fuzz: ${seconds}s clean"
