#!/usr/bin/env bash
# `srdma nvmf target` as srdma-nvmf-target.service runs it, under a harness
# that is the service manager's end of the notify protocol
# (tests/notify_socket.py on $NOTIFY_SOCKET), on loopback addresses only:
#
#   service_test.sh SRDMA
#
#  - READY=1 comes from the target's own PID once it listens, and
#    `srdma nvmf discover` then lists what the config allows each host;
#  - two hosts run verified I/O on one subsystem; SIGHUP (systemctl reload)
#    with a config that does not parse, then one that changes the port: each
#    is logged as refused between RELOADING=1 and READY=1, and the old
#    configuration stays in force;
#  - SIGHUP with a config that drops host B from the subsystem, removes a
#    subsystem and adds one: host A's connection goes on (its run ends with
#    no reconnect, no I/O or verify error), host B is disconnected at once
#    and refused from then on (its reconnects, a new connect, discovery);
#    discovery lists the new subsystem, not the removed one;
#  - SIGTERM (systemctl stop): STOPPING=1, the hosts disconnected, exit 0.
# Every wait polls its condition with a deadline; nothing sleeps to show
# that something did not happen. Logs are kept on failure.
set -u
BIN=${1:?usage: service_test.sh SRDMA}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/process_lib.sh
source "$here/process_lib.sh"
command -v python3 >/dev/null || { echo "SKIP: no python3 (the notify harness)"; exit 77; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/srdma-service.XXXXXX") || exit 1
PIDS=()
FAILS=0
cleanup() {
  local rc=$? pid
  trap - EXIT
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  if ((rc != 0)); then echo "logs kept in $TMP" >&2; else rm -rf "$TMP"; fi
  exit "$rc"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  FAILS=$((FAILS + 1))
}
t0=$(now_ms)
STEP_FAILS=0
ok() {  # a step passed, unless one of its checks failed
  ((FAILS == STEP_FAILS)) && echo "ok   $* (at $(($(now_ms) - t0)) ms)"
  STEP_FAILS=$FAILS
}
fatal() {
  fail "$*"
  tail -5 "$TMP"/*.log
  exit 1
}

# The target, host A, host B, and discovery (as either host) each on a
# device of its own.
T_IP=$(pid_ip $$ 1) A_IP=$(pid_ip $$ 2) B_IP=$(pid_ip $$ 3) D_IP=$(pid_ip $$ 0)
KEEP=nqn.2026-12.io.softrdma:service-keep
GONE=nqn.2026-12.io.softrdma:service-gone
NEW=nqn.2026-12.io.softrdma:service-new
HOST_A=nqn.2026-12.io.softrdma:host-a
HOST_B=nqn.2026-12.io.softrdma:host-b
SIZE=$((16 << 20))
CONFIG=$TMP/nvmf-target.json
config() {  # subsystem entries, as JSON objects
  local IFS=,
  printf '{"ip": "%s", "port": 4420, "subsystems": [%s]}\n' "$T_IP" "$*" >"$CONFIG.new"
  mv "$CONFIG.new" "$CONFIG"
}
subsystem() {  # NQN HOSTS_JSON_ARRAY
  printf '{"nqn": "%s", "allowed_hosts": %s, "namespaces": [{"backend": "ram", "size": %d}]}' "$1" "$2" "$SIZE"
}

# The service manager's end.
SOCK=$TMP/notify.sock
python3 "$here/notify_socket.py" "$SOCK" "$TMP/notify.log" 2>>"$TMP/notify.err" &
PIDS+=($!)
wait_for 10000 grep -qs listening "$TMP/notify.log" || fatal "the notify harness never listened"
notified() { grep -c "pid=$TARGET_PID .*$1" "$TMP/notify.log"; }
# notified_n N TEXT: TEXT has come N times from the target.
notified_n() { (($(notified "$2") >= $1)); }

config "$(subsystem "$KEEP" "[\"$HOST_A\", \"$HOST_B\"]")" "$(subsystem "$GONE" "[]")"
NOTIFY_SOCKET=$SOCK "$BIN" nvmf target --config "$CONFIG" >"$TMP/target.log" 2>&1 &
TARGET_PID=$!
PIDS+=("$TARGET_PID")
wait_for 15000 notified_n 1 READY=1 || fatal "no READY=1 from the target (PID $TARGET_PID): $(cat "$TMP/notify.log")"
grep -q "listening on $T_IP:4420" "$TMP/target.log" || fail "READY=1 before the target listened"
ok "READY=1 from the target's PID: $(grep -m1 READY=1 "$TMP/notify.log" | cut -d' ' -f2-)"

discover() {  # HOSTNQN: the subsystems discovery lists for it, one line
  "$BIN" nvmf discover --ip "$D_IP" --hostnqn "$1" "$T_IP" 2>&1 | sed -n 's/^subnqn: *//p' | sort | xargs
}
[[ $(discover "$HOST_A") == "$GONE $KEEP" ]] || fail "discovery for A: $(discover "$HOST_A")"
[[ $(discover "$HOST_B") == "$GONE $KEEP" ]] || fail "discovery for B: $(discover "$HOST_B")"
ok "discover lists $KEEP and $GONE for hosts A and B"

# Both hosts on KEEP: A writes and verifies, B reads (its reads do not
# disturb A's verification), and gives up soon once it is refused.
bench() {  # NAME IP HOSTNQN EXTRA...
  local name=$1 ip=$2 host=$3
  shift 3
  "$BIN" blk bench --connect "$T_IP" --ip "$ip" --nqn "$KEEP" --hostnqn "$host" --size "$SIZE" --queues 1 --qd 4 \
    --cq pool "$@" >"$TMP/bench_$name.log" 2>&1 &
}
bench a "$A_IP" "$HOST_A" --rw randrw --verify --runtime 15  # outlasts the reloads on a busy host
A_PID=$!
PIDS+=("$A_PID")
bench b "$B_IP" "$HOST_B" --rw randread --runtime 30 --reconnect-delay 0.2 --ctrl-loss-tmo 1
B_PID=$!
PIDS+=("$B_PID")
running() { grep -q IOPS "$TMP/bench_$1.log"; }
wait_for 20000 running a || fatal "host A never ran I/O"
wait_for 20000 running b || fatal "host B never ran I/O"
ok "hosts A (verified randrw) and B (randread) run I/O on $KEEP"

# Reloads that must change nothing.
reload() {  # the Nth reload: SIGHUP, then RELOADING=1 and READY=1 number N+1
  local n=$1
  kill -HUP "$TARGET_PID"
  wait_for 10000 notified_n "$n" RELOADING=1 && wait_for 10000 notified_n $((n + 1)) READY=1
}
echo '{"ip": "'"$T_IP"'", "subsystems": [' >"$CONFIG"
reload 1 || fatal "no RELOADING=1/READY=1 for a broken config"
grep -q "reload of $CONFIG refused: EINVAL: the config: .*parse error.*; the running configuration stays" \
  "$TMP/target.log" || fail "a broken config is not refused in the log: $(tail -2 "$TMP/target.log")"
config "$(subsystem "$KEEP" "[\"$HOST_A\"]")"
sed -i 's/"port": 4420/"port": 4421/' "$CONFIG"
reload 2 || fatal "no RELOADING=1/READY=1 for a port change"
grep -q "refused: EINVAL: port: 4420 -> 4421 needs a restart" "$TMP/target.log" ||
  fail "a port change is not refused: $(tail -1 "$TMP/target.log")"
[[ $(discover "$HOST_B") == "$GONE $KEEP" ]] || fail "after refused reloads, B sees: $(discover "$HOST_B")"
kill -0 "$B_PID" 2>/dev/null || fail "host B stopped across refused reloads: $(tail -3 "$TMP/bench_b.log")"
ok "a config that does not parse, and one that changes the port: refused, logged, the old one in force"

# The real change: B leaves KEEP, GONE goes, NEW comes.
config "$(subsystem "$KEEP" "[\"$HOST_A\"]")" "$(subsystem "$NEW" "[]")"
reload 3 || fatal "no RELOADING=1/READY=1 for the change"
kill -0 "$A_PID" 2>/dev/null || fatal "host A's run ended before the reload: make its --runtime longer"
grep -q "reloaded: 2 subsystems (+1 -1), hosts changed on 1, 1 controllers disconnected" "$TMP/target.log" ||
  fail "the reload's summary: $(grep reload "$TMP/target.log" | tail -3)"
grep -q "of $HOST_B on $KEEP: the host is no longer allowed, disconnecting" "$TMP/target.log" ||
  fail "B's controller is not revoked: $(tail -3 "$TMP/target.log")"
grep -q "pid=$TARGET_PID READY=1 STATUS=serving 2 subsystems.*reloaded" "$TMP/notify.log" ||
  fail "READY=1 after the reload carries no status: $(tail -1 "$TMP/notify.log")"
ok "reloaded: $(grep -o 'reloaded: .*' "$TMP/target.log")"

[[ $(discover "$HOST_A") == "$KEEP $NEW" ]] || fail "discovery for A after the reload: $(discover "$HOST_A")"
[[ $(discover "$HOST_B") == "$NEW" ]] || fail "discovery for B after the reload: $(discover "$HOST_B")"
ok "discover: A sees $KEEP and $NEW, B only $NEW"

# B: disconnected, its reconnects refused, its run fails.
b_done() { ! kill -0 "$B_PID" 2>/dev/null; }
wait_for 20000 b_done || fail "host B still runs after it was removed"
wait "$B_PID"
rc=$?
((rc != 0)) || fail "host B's run succeeded after it was removed: $(tail -5 "$TMP/bench_b.log")"
grep -q "refused $HOST_B on $KEEP (queue 0): the host is not allowed" "$TMP/target.log" ||
  fail "B's reconnect is not refused as not allowed: $(grep "$HOST_B" "$TMP/target.log" | tail -3)"
if "$BIN" blk bench --connect "$T_IP" --ip "$B_IP" --nqn "$KEEP" --hostnqn "$HOST_B" --size "$SIZE" --ios 10 \
  --no-progress >"$TMP/b_again.log" 2>&1; then
  fail "a new connect of host B succeeded"
fi
ok "host B: disconnected, its reconnects and a new connect refused ($(grep srdma: "$TMP/bench_b.log" | tail -1))"

# A: its run goes on to the end, on the connection it had.
wait "$A_PID"
rc=$?
if ((rc != 0)); then
  fail "host A's run exited $rc: $(tail -5 "$TMP/bench_a.log")"
elif ! grep -qE '^reconnects +0$' "$TMP/bench_a.log" || ! grep -qE '^I/O errors +0$' "$TMP/bench_a.log" ||
  ! grep -qE '^verify errors +0$' "$TMP/bench_a.log"; then
  fail "host A's run across the reload: $(grep -E '^(reconnects|I/O errors|verify errors)' "$TMP/bench_a.log" | xargs)"
else
  ok "host A's connection survived the reload: $(grep -E '^(I/Os|reconnects|verify errors) ' "$TMP/bench_a.log" | tr -s ' ' | xargs)"
fi

# systemctl stop.
kill -TERM "$TARGET_PID"
stopped() { ! kill -0 "$TARGET_PID" 2>/dev/null; }
wait_for 20000 stopped || fatal "the target did not stop on SIGTERM"
wait "$TARGET_PID"
rc=$?
((rc == 0)) || fail "the target exited $rc on SIGTERM"
notified_n 1 STOPPING=1 || fail "no STOPPING=1"
grep -q "SIGTERM: disconnecting the hosts" "$TMP/target.log" && grep -q "stopped:" "$TMP/target.log" ||
  fail "SIGTERM did not drain: $(tail -2 "$TMP/target.log")"
ok "SIGTERM: STOPPING=1, drained, exit 0"

[[ $FAILS == 0 ]] && echo "service: all passed"
exit $((FAILS > 0))
