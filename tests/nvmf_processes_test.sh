#!/usr/bin/env bash
# NVMe-oF between processes: `srdma nvmf target` serves a RAM namespace on
# one loopback address, and `srdma blk bench --connect` on another reaches
# it through the CM on the wire.
#
#   nvmf_processes_test.sh SRDMA
#
# Checks: a verified randrw run in both CQ modes against the target process
# exits 0 with no I/O or verify error; a host asking for a subsystem the
# target does not have, or a port nobody listens on, fails at once with a
# clear error; SIGTERM stops the target cleanly (exit 0, its last line); a
# file-backed target killed under a verified load and started again is
# reconnected to with no I/O lost and no verify error; DH-HMAC-CHAP between
# the processes, the right secrets and two wrong ones.
# Every wait polls for its event with a limit; nothing sleeps to let
# something happen. Logs are kept on failure.
set -u

BIN=${1:?usage: nvmf_processes_test.sh SRDMA}
[[ -x $BIN ]] || { echo "FAIL: '$BIN' is not an executable srdma" >&2; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/srdma-nvmf.XXXXXX") || exit 1
TARGET_PID=
BENCH_PID=
FAILS=0
cleanup() {
  local rc=$?
  trap - EXIT HUP INT TERM
  local pid
  for pid in $TARGET_PID $BENCH_PID; do kill -9 "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  if ((rc != 0)); then echo "logs kept in $TMP" >&2; else rm -rf "$TMP"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
fail() {
  echo "FAIL: $*"
  FAILS=$((FAILS + 1))
}
# shellcheck source=tests/process_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/process_lib.sh"
T_IP=$(pid_ip $$ 1)
H_IP=$(pid_ip $$ 2)
NQN=nqn.2026-12.io.softrdma:processes
SIZE=$((16 << 20))

"$BIN" nvmf target --ip "$T_IP" --nqn "$NQN" --size "$SIZE" >"$TMP/target.log" 2>&1 &
TARGET_PID=$!
listening() { grep -q "on $T_IP:4420" "$TMP/target.log"; }
if ! wait_for 10000 listening; then
  fail "the target never listened: $(tail -3 "$TMP/target.log")"
  exit 1
fi
echo "ok   target listening: $(grep -m1 "listening on" "$TMP/target.log")"

# Discovery: the target's discovery controller lists the subsystem.
if "$BIN" nvmf discover --ip "$H_IP" "$T_IP" >"$TMP/discover.log" 2>&1 &&
  grep -q "^subnqn:  $NQN$" "$TMP/discover.log" && grep -q "^traddr:  $T_IP$" "$TMP/discover.log" &&
  grep -q "^trsvcid: 4420$" "$TMP/discover.log"; then
  echo "ok   nvmf discover: $(grep -m1 'Number of Records' "$TMP/discover.log")"
else
  fail "nvmf discover did not list $NQN at $T_IP:4420:"
  cat "$TMP/discover.log"
fi

# Bad addresses are refused before anything is opened.
if "$BIN" nvmf discover --ip "$H_IP" 300.1.1.1 >"$TMP/bad_discover.log" 2>&1 ||
  ! grep -q "EINVAL" "$TMP/bad_discover.log"; then
  fail "nvmf discover of a bad address: $(cat "$TMP/bad_discover.log")"
fi
if "$BIN" nvmf discover --ip "$H_IP" "$T_IP:0" >"$TMP/bad_port.log" 2>&1 || ! grep -q "EINVAL" "$TMP/bad_port.log"; then
  fail "nvmf discover of port 0: $(cat "$TMP/bad_port.log")"
fi

# Three controllers of one host on the subsystem, each its slice of it.
bench=("$BIN" blk bench --connect "$T_IP" --ip "$H_IP" --nqn "$NQN" --size "$SIZE" --controllers 3 --queues 2 --qd 8
  --ios 4000 --rw randrw --verify --no-progress)
if "${bench[@]}" >"$TMP/bench.log" 2>&1; then
  if grep -qE '^verify errors +0 +0' "$TMP/bench.log" && grep -qE '^I/O errors +0 +0' "$TMP/bench.log"; then
    echo "ok   blk bench --connect --verify, 3 controllers, both CQ modes: $(grep -E '^IOPS' "$TMP/bench.log" | tr -s ' ')"
  else
    fail "blk bench reported errors:"
    cat "$TMP/bench.log"
  fi
else
  fail "blk bench --connect exited $?:"
  tail -20 "$TMP/bench.log"
fi

# Refusals: an unknown subsystem, then a port nobody listens on.
t0=$(now_ms)
if "$BIN" blk bench --connect "$T_IP" --ip "$H_IP" --nqn nqn.2026-12.io.softrdma:nobody --ios 10 --no-progress \
  >"$TMP/nqn.log" 2>&1; then
  fail "a host asking for an unknown subsystem succeeded"
elif ! grep -q "Connect Invalid Parameters" "$TMP/nqn.log"; then
  fail "an unknown subsystem failed without a reason: $(tail -2 "$TMP/nqn.log")"
else
  echo "ok   unknown subsystem refused: $(grep srdma: "$TMP/nqn.log" | tail -1)"
fi
if "$BIN" blk bench --connect "$T_IP:4421" --ip "$H_IP" --nqn "$NQN" --ios 10 --no-progress >"$TMP/port.log" 2>&1; then
  fail "a host connecting to a port nobody listens on succeeded"
elif ! grep -q "ECONNREFUSED" "$TMP/port.log"; then
  fail "a port nobody listens on is not ECONNREFUSED: $(tail -2 "$TMP/port.log")"
else
  echo "ok   no listener: $(grep srdma: "$TMP/port.log" | tail -1)"
fi
(($(now_ms) - t0 < 10000)) || fail "the refusals took $(($(now_ms) - t0)) ms"

# The target dies (SIGKILL) under a verified randrw load and a new one
# starts on the same file: the host reconnects, its I/O waits and is
# submitted again; no verify error, no I/O error.
kill -TERM "$TARGET_PID"
wait "$TARGET_PID" 2>/dev/null
TARGET_PID=

# DH-HMAC-CHAP: a target that makes its one allowed host authenticate both
# ways. The right secrets move data; a wrong host secret and a wrong
# controller secret are refused, logged and counted (SIGUSR1's counters).
HOSTNQN=nqn.2026-12.io.softrdma:auth-host
SECRET=$("$BIN" nvmf gen-dhchap-key --hmac 1) || fail "gen-dhchap-key"
CSECRET=$("$BIN" nvmf gen-dhchap-key --key-length 48)
OTHER=$("$BIN" nvmf gen-dhchap-key)
"$BIN" nvmf target --ip "$T_IP" --nqn "$NQN" --size "$SIZE" --allow-host "$HOSTNQN" --dhchap-secret "$SECRET" \
  --dhchap-ctrl-secret "$CSECRET" >"$TMP/auth_target.log" 2>&1 &
TARGET_PID=$!
wait_for 10000 grep -q "listening on $T_IP:4420" "$TMP/auth_target.log" || fail "the authenticating target never listened"
auth_bench=("$BIN" blk bench --connect "$T_IP" --ip "$H_IP" --nqn "$NQN" --size "$SIZE" --hostnqn "$HOSTNQN" --ios 500
  --rw randrw --verify --no-progress --cq pool)
if "${auth_bench[@]}" --dhchap-secret "$SECRET" --dhchap-ctrl-secret "$CSECRET" >"$TMP/auth_ok.log" 2>&1 &&
  grep -qE '^verify errors +0$' "$TMP/auth_ok.log" && grep -q "authenticated on queue 0" "$TMP/auth_target.log"; then
  echo "ok   DH-HMAC-CHAP both ways: $(grep -m1 'authenticated on queue 0' "$TMP/auth_target.log" | cut -d: -f4-)"
else
  fail "the host with the right secrets did not authenticate and run:"
  tail -5 "$TMP/auth_ok.log" "$TMP/auth_target.log"
fi
if "${auth_bench[@]}" --dhchap-secret "$OTHER" >"$TMP/auth_bad.log" 2>&1; then
  fail "a host with a wrong secret ran I/O"
elif ! grep -q "authentication failed" "$TMP/auth_bad.log"; then
  fail "a wrong host secret failed without saying so: $(tail -2 "$TMP/auth_bad.log")"
else
  echo "ok   wrong host secret refused: $(grep srdma: "$TMP/auth_bad.log" | tail -1)"
fi
if "${auth_bench[@]}" --dhchap-secret "$SECRET" --dhchap-ctrl-secret "$OTHER" >"$TMP/auth_ctrl.log" 2>&1; then
  fail "a host that expects another controller secret ran I/O"
else
  echo "ok   wrong controller secret caught: $(grep srdma: "$TMP/auth_ctrl.log" | tail -1)"
fi
kill -USR1 "$TARGET_PID"
counted() { grep -qE "counters: .* auth_failures=[1-9]" "$TMP/auth_target.log"; }
if wait_for 10000 counted && grep -q "authentication failed" "$TMP/auth_target.log"; then
  echo "ok   SIGUSR1: $(grep -oE 'authenticated=[0-9]+ auth_failures=[0-9]+' "$TMP/auth_target.log" | tail -1)"
else
  fail "the failures are not logged and counted: $(tail -3 "$TMP/auth_target.log")"
fi
kill -TERM "$TARGET_PID"
wait "$TARGET_PID" 2>/dev/null
TARGET_PID=

IMG=$TMP/disk.img
start_target() {
  "$BIN" nvmf target --ip "$T_IP" --nqn "$NQN" --size "$SIZE" --backend "file:$IMG" >>"$TMP/target2.log" 2>&1 &
  TARGET_PID=$!
  wait_for 10000 grep -q "listening on $T_IP:4420" "$TMP/target2.log"
}
start_target || fail "the file-backed target never listened"
"$BIN" blk bench --connect "$T_IP" --ip "$H_IP" --nqn "$NQN" --size "$SIZE" --queues 2 --qd 8 --runtime 4 --rw randrw \
  --verify --cq pool --reconnect-delay 0.2 --ctrl-loss-tmo 30 >"$TMP/restart.log" 2>&1 &
BENCH_PID=$!
# The first progress line: every queue is connected and I/O runs (a kill
# during the first connect would fail it: that one is not retried).
running() { grep -q "IOPS" "$TMP/restart.log"; }
wait_for 20000 running || fail "the host never ran I/O against the file-backed target"
kill -9 "$TARGET_PID"
wait "$TARGET_PID" 2>/dev/null
: >"$TMP/target2.log"
start_target || fail "the restarted target never listened"
wait "$BENCH_PID"
rc=$?
BENCH_PID=
if ((rc != 0)); then
  fail "blk bench across the restart exited $rc:"
  tail -20 "$TMP/restart.log"
elif ! grep -qE '^verify errors +0$' "$TMP/restart.log" || ! grep -qE '^I/O errors +0$' "$TMP/restart.log"; then
  fail "errors across the restart:"
  cat "$TMP/restart.log"
elif ! grep -qE '^reconnects +[1-9]' "$TMP/restart.log"; then
  fail "the host did not reconnect: $(grep -E '^reconnects' "$TMP/restart.log")"
else
  echo "ok   target restarted under verified load: $(grep -E '^(reconnects|I/Os) ' "$TMP/restart.log" | tr -s ' ' | tr '\n' ' ')"
fi

kill -TERM "$TARGET_PID"
stopped() { ! kill -0 "$TARGET_PID" 2>/dev/null; }
if wait_for 20000 stopped; then
  wait "$TARGET_PID"
  rc=$?
  TARGET_PID=
  if ((rc != 0)); then
    fail "the target exited $rc on SIGTERM"
  elif ! grep -qE "srdma nvmf target: stopped: interrupts=[0-9]+ .*cpu_s=[0-9.]+ " "$TMP/target2.log"; then
    fail "the target's last line is missing: $(tail -2 "$TMP/target.log")"
  else
    echo "ok   SIGTERM: $(tail -1 "$TMP/target2.log")"
  fi
else
  fail "the target did not stop within 20 s of SIGTERM"
fi

if ((FAILS)); then
  echo "nvmf_processes: $FAILS failure(s)"
  exit 1
fi
echo "nvmf_processes: a target process served a host process"
