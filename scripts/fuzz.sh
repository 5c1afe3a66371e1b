#!/usr/bin/env bash
# The capsule parser, the RoCEv2 frame parser and the CM MAD codec under
# libFuzzer (clang, with ASan and UBSan).
#   scripts/fuzz.sh [seconds [capsule|roce|cm]]
#                               build fuzz/capsule_fuzz.cc, fuzz/roce_frame_fuzz.cc and
#                               fuzz/cm_mad_fuzz.cc and run them for `seconds` in all
#                               (default 20, a third each; all of it when one is named),
#                               from the seed corpora fuzz/corpus/, fuzz/roce_corpus/
#                               and fuzz/cm_corpus/
#   scripts/fuzz.sh --corpus    regenerate the corpora from the builders
# FUZZ_FLAGS adds libFuzzer flags to both runs (e.g. -use_value_profile=1
# for a long run). A crash leaves its input in build/fuzz/capsule-*
# or build/fuzz/roce-*.
# The parsers are built straight from their sources: the rest of the project
# needs libstdc++'s <expected>, which clang 14 cannot compile, and the parsers
# (nvmf/capsule_parser, hca/roce_frame) deliberately do not.
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
  g++ -std=c++2b -O1 -Isrc -Iinclude fuzz/make_roce_corpus.cc src/hca/roce_frame.cc -lz -lisal \
    -o "$out/make_roce_corpus"
  rm -rf fuzz/roce_corpus && mkdir -p fuzz/roce_corpus
  "$out/make_roce_corpus" fuzz/roce_corpus
  ls -l fuzz/roce_corpus
  g++ -std=c++2b -O1 -Isrc -Iinclude fuzz/make_cm_corpus.cc src/cm/cm_mad.cc src/cm/cma_header.cc \
    -o "$out/make_cm_corpus"
  rm -rf fuzz/cm_corpus && mkdir -p fuzz/cm_corpus
  "$out/make_cm_corpus" fuzz/cm_corpus
  ls -l fuzz/cm_corpus
  exit 0
fi

seconds=${1:-20}
only=${2:-}
case $only in
  "") roce_seconds=$((seconds / 3)); ((roce_seconds >= 1)) || roce_seconds=1
      cm_seconds=$roce_seconds
      capsule_seconds=$((seconds - 2 * roce_seconds)); ((capsule_seconds >= 1)) || capsule_seconds=1 ;;
  capsule) capsule_seconds=$seconds roce_seconds=0 cm_seconds=0 ;;
  roce) capsule_seconds=0 roce_seconds=$seconds cm_seconds=0 ;;
  cm) capsule_seconds=0 roce_seconds=0 cm_seconds=$seconds ;;
  *) echo "usage: $0 [seconds [capsule|roce|cm]] | --corpus" >&2; exit 2 ;;
esac

cxx=(clang++ -std=c++2b -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
     -Wall -Wextra -Isrc -Iinclude)
# All built at once (each a few seconds of clang), before any runs.
builds=()
if ((capsule_seconds > 0)); then
  "${cxx[@]}" fuzz/capsule_fuzz.cc src/nvmf/capsule_parser.cc src/nvmf/status.cc -o "$out/capsule_fuzz" &
  builds+=($!)
fi
if ((roce_seconds > 0)); then
  # roce_frame.cc needs only zlib (crc32); packet.h's helpers are inline.
  "${cxx[@]}" fuzz/roce_frame_fuzz.cc src/hca/roce_frame.cc -lz -lisal -o "$out/roce_frame_fuzz" &
  builds+=($!)
fi
if ((cm_seconds > 0)); then
  # The codec needs only the standard library.
  "${cxx[@]}" fuzz/cm_mad_fuzz.cc src/cm/cm_mad.cc src/cm/cma_header.cc -o "$out/cm_mad_fuzz" &
  builds+=($!)
fi
for pid in "${builds[@]}"; do wait "$pid"; done

# Run on scratch copies so new inputs the fuzzers find do not land in git.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ((capsule_seconds > 0)); then
  mkdir "$work/capsule" && cp fuzz/corpus/* "$work/capsule"/
  "$out/capsule_fuzz" -max_total_time="$capsule_seconds" -print_final_stats=1 -max_len=9000 \
    -artifact_prefix="$out/capsule-" ${FUZZ_FLAGS:-} "$work/capsule"
  echo "capsule fuzz: ${capsule_seconds}s clean"
fi

if ((roce_seconds > 0)); then
  mkdir "$work/roce" && cp fuzz/roce_corpus/* "$work/roce"/
  # max_len a little past the longest acceptable frame (4140 bytes), so the
  # too-long refusal is reached too.
  "$out/roce_frame_fuzz" -max_total_time="$roce_seconds" -print_final_stats=1 -max_len=4200 \
    -artifact_prefix="$out/roce-" ${FUZZ_FLAGS:-} "$work/roce"
  echo "roce frame fuzz: ${roce_seconds}s clean"
fi

if ((cm_seconds > 0)); then
  mkdir "$work/cm" && cp fuzz/cm_corpus/* "$work/cm"/
  # A MAD is 256 bytes; longer inputs reach the wrong-size refusal.
  "$out/cm_mad_fuzz" -max_total_time="$cm_seconds" -print_final_stats=1 -max_len=300 \
    -artifact_prefix="$out/cm-" ${FUZZ_FLAGS:-} "$work/cm"
  echo "cm mad fuzz: ${cm_seconds}s clean"
fi
