#!/usr/bin/env bash
# The whole test suite: a normal build, then ASan+UBSan, then TSan, then a
# short libFuzzer run of the NVMe-oF capsule parser.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
jobs=$(nproc)

run_suite() {  # name, runner (a command prefix or ""), extra cmake args...
  local dir=build/$1 runner=$2
  shift 2
  echo "=== $dir"
  cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
  ninja -C "$dir" -j "$jobs"
  $runner ctest --test-dir "$dir" --output-on-failure -j "$jobs"
}

# Line tables only (-g1): a failure's stack still names files and lines, and
# the builds compile in half the time of full debug information.
run_suite debug "" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
# Clang's thread-safety analysis of the transport's locks, over the flags
# of the build just made.
echo "=== thread safety"
./scripts/thread_safety.sh build/debug
# Sanitizer builds at -O1: the usual choice for them, and quicker to compile.
sanitized=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O1")
run_suite asan "" "${sanitized[@]}" -DSRDMA_SANITIZE=address,undefined
# TSan cannot map its shadow under the high-entropy ASLR of newer kernels:
# run its tests without ASLR (setarch -R, inherited by ctest's children)
# rather than lowering vm.mmap_rnd_bits for the whole machine.
run_suite tsan "setarch $(uname -m) -R" "${sanitized[@]}" -DSRDMA_SANITIZE=thread
# The capsule parser under libFuzzer for a short while (clang, ASan+UBSan).
echo "=== fuzz"
./scripts/fuzz.sh 20
echo "all suites passed"
