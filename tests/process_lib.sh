# shellcheck shell=bash
# What the tests that run softrdma processes share: a clock, a bounded
# wait that polls, and the loopback addresses of a PID. Sourced.

now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((10#$t / 1000)); }

# wait_for LIMIT_MS CMD...: polls CMD every 20 ms until it succeeds (0) or
# LIMIT_MS pass (1).
wait_for() {
  local limit=$1 t0
  shift
  t0=$(now_ms)
  until "$@"; do
    (($(now_ms) - t0 > limit)) && return 1
    sleep 0.02
  done
}

# The loopback addresses of a PID: 127.b.c.d with the PID's bits spread so
# that no two live processes share one (the scheme tests/loopback.h uses),
# K = 0..3 within the PID's block of four.
pid_ip() {
  local p=$1 k=$2
  echo "127.$(((p >> 14) & 255)).$(((p >> 6) & 255)).$((((p & 63) << 2) | k))"
}
