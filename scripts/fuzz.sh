#!/usr/bin/env bash
# The capsule parser, the RoCEv2 frame parser, the CM MAD codec and the
# DH-HMAC-CHAP messages and state machines under libFuzzer (clang, with ASan
# and UBSan).
#   scripts/fuzz.sh [seconds [capsule|roce|cm|auth]]
#                               build fuzz/capsule_fuzz.cc, fuzz/roce_frame_fuzz.cc,
#                               fuzz/cm_mad_fuzz.cc and fuzz/auth_fuzz.cc and run them
#                               for `seconds` in all (default 20, a quarter each; all of
#                               it when one is named), from the seed corpora fuzz/corpus/,
#                               fuzz/roce_corpus/, fuzz/cm_corpus/ and fuzz/auth_corpus/
#   scripts/fuzz.sh --corpus    regenerate the corpora from the builders
# FUZZ_FLAGS adds libFuzzer flags to every run (e.g. -use_value_profile=1
# for a long run). A crash leaves its input in build/fuzz/capsule-*,
# build/fuzz/roce-*, build/fuzz/cm-* or build/fuzz/auth-*.
# The parsers are built straight from their sources: the rest of the project
# needs libstdc++'s <expected>, which clang 14 cannot compile, and the parsers
# (nvmf/capsule_parser, hca/roce_frame, nvmf/auth_{messages,crypto,dhchap})
# deliberately do not.
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
  g++ -std=c++2b -O1 -Isrc -Iinclude fuzz/make_roce_corpus.cc src/hca/roce_frame.cc src/hca/ring_train.cc -lz -lisal \
    -o "$out/make_roce_corpus"
  rm -rf fuzz/roce_corpus && mkdir -p fuzz/roce_corpus
  "$out/make_roce_corpus" fuzz/roce_corpus
  ls -l fuzz/roce_corpus
  g++ -std=c++2b -O1 -Isrc -Iinclude fuzz/make_cm_corpus.cc src/cm/cm_mad.cc src/cm/cma_header.cc \
    -o "$out/make_cm_corpus"
  rm -rf fuzz/cm_corpus && mkdir -p fuzz/cm_corpus
  "$out/make_cm_corpus" fuzz/cm_corpus
  ls -l fuzz/cm_corpus
  g++ -std=c++2b -O1 -Isrc -Iinclude fuzz/make_auth_corpus.cc src/nvmf/auth_messages.cc \
    src/nvmf/auth_crypto.cc src/nvmf/auth_dhchap.cc -lcrypto -o "$out/make_auth_corpus"
  rm -rf fuzz/auth_corpus && mkdir -p fuzz/auth_corpus
  "$out/make_auth_corpus" fuzz/auth_corpus
  ls -l fuzz/auth_corpus
  exit 0
fi

seconds=${1:-20}
only=${2:-}
case $only in
  "") roce_seconds=$((seconds / 4)); ((roce_seconds >= 1)) || roce_seconds=1
      cm_seconds=$roce_seconds auth_seconds=$roce_seconds
      capsule_seconds=$((seconds - 3 * roce_seconds)); ((capsule_seconds >= 1)) || capsule_seconds=1 ;;
  capsule) capsule_seconds=$seconds roce_seconds=0 cm_seconds=0 auth_seconds=0 ;;
  roce) capsule_seconds=0 roce_seconds=$seconds cm_seconds=0 auth_seconds=0 ;;
  cm) capsule_seconds=0 roce_seconds=0 cm_seconds=$seconds auth_seconds=0 ;;
  auth) capsule_seconds=0 roce_seconds=0 cm_seconds=0 auth_seconds=$seconds ;;
  *) echo "usage: $0 [seconds [capsule|roce|cm|auth]] | --corpus" >&2; exit 2 ;;
esac

cxx=(clang++ -std=c++2b -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
     -Wall -Wextra -Isrc -Iinclude)
# All built at once (each a few seconds of clang), before any runs.
builds=()
if ((capsule_seconds > 0)); then
  "${cxx[@]}" fuzz/capsule_fuzz.cc src/nvmf/capsule_parser.cc src/nvmf/auth_messages.cc src/nvmf/status.cc \
    -o "$out/capsule_fuzz" &
  builds+=($!)
fi
if ((roce_seconds > 0)); then
  # roce_frame.cc needs only zlib (crc32); packet.h's helpers are inline.
  "${cxx[@]}" fuzz/roce_frame_fuzz.cc src/hca/roce_frame.cc src/hca/ring_train.cc -lz -lisal -o "$out/roce_frame_fuzz" &
  builds+=($!)
fi
if ((cm_seconds > 0)); then
  # The codec needs only the standard library.
  "${cxx[@]}" fuzz/cm_mad_fuzz.cc src/cm/cm_mad.cc src/cm/cma_header.cc -o "$out/cm_mad_fuzz" &
  builds+=($!)
fi
if ((auth_seconds > 0)); then
  # The message codec and both state machines; the primitives are libcrypto's.
  "${cxx[@]}" fuzz/auth_fuzz.cc src/nvmf/auth_messages.cc src/nvmf/auth_crypto.cc src/nvmf/auth_dhchap.cc \
    -lcrypto -o "$out/auth_fuzz" &
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

if ((auth_seconds > 0)); then
  mkdir "$work/auth" && cp fuzz/auth_corpus/* "$work/auth"/
  # A mode byte and a message: the longest is a Reply with SHA-512 and
  # ffdhe8192 (1168 bytes); longer inputs reach the trailing-bytes paths.
  "$out/auth_fuzz" -max_total_time="$auth_seconds" -print_final_stats=1 -max_len=1400 \
    -artifact_prefix="$out/auth-" ${FUZZ_FLAGS:-} "$work/auth"
  echo "auth fuzz: ${auth_seconds}s clean"
fi
