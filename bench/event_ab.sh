#!/usr/bin/env bash
# Alternates one verbs program between two builds' drop-ins, ROUNDS times,
# in one sitting: the A/B comparisons in docs/BENCHMARKS.md.
#
#   bench/event_ab.sh LIBDIR_A LIBDIR_B [ROUNDS] -- PROGRAM ARGS...
#   e.g. bench/event_ab.sh old/lib/softrdma build/lib/softrdma 3 -- ib_send_lat -e -n 5000
#
# Server on 127.0.9.1, client on 127.0.9.2 (loopback only); prints each
# run's perftest result row or ibv_*_pingpong "usec/iter" line.
set -euo pipefail
a=${1:?usage: event_ab.sh LIBDIR_A LIBDIR_B [ROUNDS] -- PROGRAM ARGS...}
b=${2:?}
shift 2
rounds=3
if [[ ${1:-} != -- ]]; then rounds=$1; shift; fi
[[ ${1:-} == -- ]] && shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
port=$((19000 + $$ % 500 * 2))
for ((r = 1; r <= rounds; r++)); do
  for lib in "$a" "$b"; do
    port=$((port + 1))
    SRDMA_ADDR=127.0.9.1 LD_LIBRARY_PATH=$lib timeout 60 "$@" -p "$port" >"$tmp/s" 2>&1 &
    srv=$!
    sleep 0.8
    SRDMA_ADDR=127.0.9.2 LD_LIBRARY_PATH=$lib timeout 60 "$@" -p "$port" 127.0.9.1 >"$tmp/c" 2>&1 || true
    wait "$srv" || true
    row=$(grep -E '^ +[0-9]+ +[0-9]+ ' "$tmp/c" | tail -n 1 | tr -s ' ' || true)
    echo "$lib: ${row}$(grep 'iters in' "$tmp/c" || true)"
  done
done
