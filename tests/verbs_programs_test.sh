#!/usr/bin/env bash
# Unmodified verbs programs (rdma-core's ibverbs-utils, perftest) on
# softrdma's libibverbs.so.1, between two processes on loopback addresses of
# their own (127.X.Y.1 server, 127.X.Y.2 client; SRDMA_ADDR each, RoCEv2
# over UDP):
#  - ibv_devices and ibv_devinfo -v show srdma0, PORT_ACTIVE, an Ethernet
#    link layer and GID 0 ::ffff:<address>, RoCE v2;
#  - ibv_rc_pingpong with -g 0, without -g (LIDs only: the library maps a LID
#    to an address of its own /16) and -s 8192 (above the 4096 MTU);
#    ibv_uc_pingpong, ibv_ud_pingpong (-s 1024, within the MTU) and
#    ibv_srq_pingpong with -g 0, and rc, srq and ud with -e (completion
#    events): both sides exit 0 and print "N iters in X
#    seconds = Y usec/iter" with N the iterations asked for, Y > 0 and sane;
#  - ibv_xsrq_pingpong -g 0 (XRC: XRC domain, XRC SRQs, XRC_SEND and
#    XRC_RECV QPs): both sides exit 0 and print "success";
#  - perftest ib_{write,read,send,atomic}_{bw,lat} and ib_send_bw --use-srq,
#    each once plain and once with -a (every size 2 .. 8 MiB; not the
#    atomics, which perftest runs at 8 bytes only):
#    both sides exit 0 and the client prints a result line per size with
#    the iterations asked for, a bandwidth > 0 or a typical latency > 0 and
#    below a bound.
# Every server listens on a TCP port of this run's own (from the PID, -p);
# the client starts once `ss` shows it listening. Every wait is bounded; a
# hang is a failure with the logs' tails printed. Skips (77) without the
# programs (apt-get install ibverbs-utils perftest).
#
#   verbs_programs_test.sh LIBDIR   (the directory of softrdma's
#                                    libibverbs.so.1; PP_KEEP=1 keeps the logs)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/perf_processes.sh source-path=SCRIPTDIR
source "$here/perf_processes.sh"
libdir=${1:?usage: verbs_programs_test.sh LIBDIR}
libdir=$(cd "$libdir" 2>/dev/null && pwd) || { echo "FAIL: no directory '$1'" >&2; exit 1; }

skip() {
  echo "SKIP: $*"
  exit 77
}
if [[ ! -e $libdir/libibverbs.so.1 ]]; then
  echo "FAIL: no libibverbs.so.1 in '$libdir'" >&2
  exit 1
fi
missing=()
for p in ibv_devices ibv_devinfo ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_srq_pingpong ibv_xsrq_pingpong \
  ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat ib_atomic_lat; do
  command -v "$p" >/dev/null 2>&1 || missing+=("$p")
done
((${#missing[@]} == 0)) || skip "not installed: ${missing[*]} (apt-get install ibverbs-utils perftest)"
command -v ss >/dev/null 2>&1 || skip "no 'ss' command (iproute2 is not installed)"
command -v stdbuf >/dev/null 2>&1 || skip "no 'stdbuf' command (coreutils)"

pp_setup
PP_READY_S=15
PP_SERVER_EXIT_S=10
start_us=$(pp_now_us)
budget_s=480 # no run starts after this, so that ctest's TIMEOUT (540) never cuts the logs
limit=60     # any one client run, seconds (an -a latency run: 12 s idle, 45 s on a loaded 2-core box)

# This run's own addresses and TCP ports (perf_processes.sh).
pp_programs_addresses 20000
echo "server $ip_a, client $ip_b, TCP ports from $port_base, library $libdir"

# Both sides: softrdma's libibverbs first, the side's own address, the
# library's error reasons on stderr, and stdout line-buffered (stdbuf), so
# that a program killed as hung still shows how far it got.
side_a=(env "LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "SRDMA_ADDR=$ip_a" SRDMA_VERBS_DEBUG=1 stdbuf -oL)
side_b=(env "LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "SRDMA_ADDR=$ip_b" SRDMA_VERBS_DEBUG=1 stdbuf -oL)

# in_budget NAME: there is time left for another run.
in_budget() {
  if (($(pp_now_us) - start_us > budget_s * 1000000)); then
    pp_fail "$1: not run, the test has been running for over ${budget_s}s"
    return 1
  fi
}

# two_sides NAME PROGRAM ARGS...: the server `PROGRAM ARGS -p PORT` on
# ip_a, then the client `PROGRAM ARGS -p PORT ip_a` on ip_b. Returns 0 when
# both exited 0 (pp_pair), with the client's and server's stdout in CLIENT_OUT
# and SERVER_OUT.
two_sides() {
  local name=$1
  shift
  in_budget "$name" || return 1
  pp_next_port || return 1
  CLIENT_OUT=$PP_TMP/$name.client.out SERVER_OUT=$PP_TMP/$name.server.out
  pp_pair "$name" "$limit" --listen "$PORT" "${side_a[@]}" "$@" -p "$PORT" :: \
    "${side_b[@]}" "$@" -p "$PORT" "$ip_a"
}

# bad NAME FILE MESSAGE: a failed check of FILE's contents, with its tail.
bad() {
  pp_fail "$1: $3"
  echo "  --- ${2##*/} (last lines)"
  tail -n 15 "$2" | sed 's/^/  | /'
}

# ---------------------------------------------------------------------------
echo "--- devices"
if in_budget ibv_devices && pp_run ibv_devices "$limit" "${side_a[@]}" ibv_devices; then
  f=$PP_TMP/ibv_devices.out
  if ((PP_RC != 0)); then
    pp_fail "ibv_devices exited $PP_RC"
    pp_show ibv_devices
  elif grep -qE '^[[:space:]]+srdma0[[:space:]]+[0-9a-f]{16}$' "$f"; then
    echo "ok   ibv_devices: srdma0 and its node GUID"
  else
    bad ibv_devices "$f" "no 'srdma0 <node GUID>' line"
  fi
fi
if in_budget ibv_devinfo && pp_run ibv_devinfo "$limit" "${side_a[@]}" ibv_devinfo -v; then
  f=$PP_TMP/ibv_devinfo.out
  if ((PP_RC != 0)); then
    pp_fail "ibv_devinfo -v exited $PP_RC"
    pp_show ibv_devinfo
  else
    ok=1
    grep -qE '^hca_id:[[:space:]]+srdma0$' "$f" || { bad "ibv_devinfo -v" "$f" "no 'hca_id: srdma0'"; ok=0; }
    grep -qE '^[[:space:]]+state:[[:space:]]+PORT_ACTIVE \(4\)$' "$f" || { bad "ibv_devinfo -v" "$f" "port 1 is not PORT_ACTIVE"; ok=0; }
    grep -qE '^[[:space:]]+link_layer:[[:space:]]+Ethernet$' "$f" || { bad "ibv_devinfo -v" "$f" "link_layer is not Ethernet"; ok=0; }
    grep -qE "^[[:space:]]+GID\[  0\]:[[:space:]]+::ffff:${ip_a//./\\.}, RoCE v2\$" "$f" ||
      { bad "ibv_devinfo -v" "$f" "no 'GID[  0]: ::ffff:$ip_a, RoCE v2'"; ok=0; }
    if ((ok)); then echo "ok   ibv_devinfo -v: srdma0, PORT_ACTIVE, Ethernet, GID[  0] ::ffff:$ip_a RoCE v2"; fi
  fi
fi

# ---------------------------------------------------------------------------
echo "--- rdma-core pingpongs"
pp_iters=200
pp_max_us=100000 # usec/iter above this is no ping-pong on lo
# pingpong_line NAME FILE: FILE's "N iters in X seconds = Y usec/iter" line
# with N == pp_iters, 0 < Y < pp_max_us, and a rate > 0 on its bytes line.
# Sets PING_USEC.
pingpong_line() {
  local name=$1 f=$2 line n us mbit
  line=$(grep -E '^[0-9]+ iters in [0-9.]+ seconds = [0-9.]+ usec/iter$' "$f" | tail -n 1) || true
  if [[ -z $line ]]; then
    bad "$name" "$f" "no 'N iters in X seconds = Y usec/iter' line"
    return 1
  fi
  read -r n _ _ _ _ _ us _ <<<"$line"
  mbit=$(sed -nE 's/^[0-9]+ bytes in [0-9.]+ seconds = ([0-9.]+) Mbit\/sec$/\1/p' "$f" | tail -n 1)
  if ((n != pp_iters)); then
    bad "$name" "$f" "$n iters, expected $pp_iters"
  elif ! awk -v u="$us" -v m="$pp_max_us" 'BEGIN { exit !(u > 0 && u < m) }'; then
    bad "$name" "$f" "$us usec/iter: not in (0, $pp_max_us)"
  elif [[ -z $mbit ]] || ! awk -v r="$mbit" 'BEGIN { exit !(r > 0) }'; then
    bad "$name" "$f" "no 'bytes in X seconds = R Mbit/sec' line with R > 0"
  else
    PING_USEC=$us
    return 0
  fi
  return 1
}

pingpong() { # NAME PROGRAM ARGS...
  local name=$1 c s
  shift
  two_sides "$name" "$@" -n "$pp_iters" || return 0
  pingpong_line "$name (client)" "$CLIENT_OUT" || return 0
  c=$PING_USEC
  pingpong_line "$name (server)" "$SERVER_OUT" || return 0
  s=$PING_USEC
  printf 'ok   %-34s %4d iters, %9s usec/iter (client), %9s (server), %5d ms\n' "$*" "$pp_iters" "$c" "$s" "$PP_CLIENT_MS"
}

pingpong rc_pingpong-g0 ibv_rc_pingpong -g 0
pingpong rc_pingpong-lid ibv_rc_pingpong
pingpong rc_pingpong-8k ibv_rc_pingpong -g 0 -s 8192
pingpong uc_pingpong ibv_uc_pingpong -g 0
pingpong ud_pingpong ibv_ud_pingpong -g 0 -s 1024
pingpong srq_pingpong ibv_srq_pingpong -g 0
# XRC between two processes: each side's XRC_SEND QP sends into the other's
# XRC SRQ through its XRC_RECV QP (it prints no timing, only "success").
if two_sides xsrq_pingpong ibv_xsrq_pingpong -g 0 -n 50; then
  if grep -q '^success' "$CLIENT_OUT" && grep -q '^success' "$SERVER_OUT"; then
    echo "ok   ibv_xsrq_pingpong -g 0 -n 50 (XRC), both sides"
  else
    bad xsrq_pingpong "$CLIENT_OUT" "no 'success' from both sides"
  fi
fi
# Event-driven (-e): each side sleeps in ibv_get_cq_event on one channel for
# its send and receive CQs; a lost or reordered wakeup hangs the pair.
pingpong rc_pingpong-e ibv_rc_pingpong -g 0 -e
pingpong srq_pingpong-e ibv_srq_pingpong -g 0 -e
pingpong ud_pingpong-e ibv_ud_pingpong -g 0 -s 1024 -e
# And long: 100000 round trips, 400000 wakeups a pair (a rare lost or
# early one shows here; each takes seconds now that a blocked consumer
# receives its own completions).
pp_iters=100000
pingpong rc_pingpong-e-100k ibv_rc_pingpong -g 0 -e
pingpong srq_pingpong-e-100k ibv_srq_pingpong -g 0 -e
pingpong ud_pingpong-e-100k ibv_ud_pingpong -g 0 -s 1024 -e
pp_iters=200

# ---------------------------------------------------------------------------
echo "--- perftest"
pt_n=200   # plain runs
pt_all_n=20 # -a runs: every size
all_sizes=()
for ((e = 1; e <= 23; e++)); do all_sizes+=($((1 << e))); done
# A latency's bound: 50 ms, plus 0.1 us a byte (10 MB/s) for big messages.
lat_max_us() { echo $((50000 + $1 / 10)); }

# perftest_rows FILE KIND: the client's result rows under the header of KIND
# (bw or lat), as "bytes iterations value rate" (BW average[MB/sec] and
# MsgRate[Mpps], or t_typical[usec] and t_avg[usec]); fails when the header
# is not there.
perftest_rows() {
  local f=$1 kind=$2 header
  if [[ $kind == bw ]]; then
    header='^ *#bytes +#iterations +BW peak\[MB/sec\] +BW average\[MB/sec\] +MsgRate\[Mpps\]'
  else
    header='^ *#bytes +#iterations +t_min\[usec\] +t_max\[usec\] +t_typical\[usec\] +t_avg\[usec\]'
  fi
  grep -qE "$header" "$f" || return 1
  awk -v h="$header" -v kind="$kind" '
    $0 ~ h { on = 1; next }
    on && /^-+$/ { on = 0; next }
    on && $1 ~ /^[0-9]+$/ { print $1, $2, (kind == "bw" ? $4 : $5), (kind == "bw" ? $5 : $6) }' "$f"
}

# perftest NAME EXPECTED-SIZES KIND PROGRAM ARGS...: both sides, then the
# client's rows: exactly the EXPECTED-SIZES (space-separated), each with the
# -n iterations, a message rate > 0 and a bandwidth > 0 (perftest prints MB/s
# to two decimals: below 4 KiB a slow run's rounds to 0.00), or a typical
# latency in (0, lat_max_us). (The atomic tests run without -a: perftest
# refuses it there, "Message size cannot be changed for Atomic tests"; their
# one size is 8.)
perftest() {
  local name=$1 sizes=$2 kind=$3 n
  shift 3
  n=$pt_n
  if [[ " $* " == *" -a "* ]]; then n=$pt_all_n; fi
  two_sides "$name" "$@" -n "$n" || return 0
  # perftest calibrates its clock for every latency report and divides by
  # zero when that fails on a busy host ("Correlation coefficient r^2 <
  # 0.9" on stderr, an inf row): that is perftest's, not ours; run again once.
  if [[ $kind == lat ]] && grep -q "Correlation coefficient r^2" "${CLIENT_OUT%.out}.err" 2>/dev/null; then
    echo "note $name: perftest's clock calibration failed on this busy host; running it again"
    two_sides "$name" "$@" -n "$n" || return 0
  fi
  local rows got=() b it v rate ok=1 lo="" hi=""
  if ! rows=$(perftest_rows "$CLIENT_OUT" "$kind"); then
    bad "$name" "$CLIENT_OUT" "no $kind result header"
    return 0
  fi
  while read -r b it v rate; do
    [[ -n $b ]] || continue
    got+=("$b")
    if ((it != n)); then
      bad "$name" "$CLIENT_OUT" "size $b: $it iterations, expected $n"
      ok=0
    elif [[ $kind == bw ]] && ! awk -v r="$rate" 'BEGIN { exit !(r > 0) }'; then
      bad "$name" "$CLIENT_OUT" "size $b: MsgRate $rate Mpps, not > 0"
      ok=0
    elif [[ $kind == bw ]] && ((b >= 4096)) && ! awk -v v="$v" 'BEGIN { exit !(v > 0) }'; then
      bad "$name" "$CLIENT_OUT" "size $b: BW average $v MB/s, not > 0"
      ok=0
    elif [[ $kind == lat ]] && ! awk -v v="$v" -v m="$(lat_max_us "$b")" 'BEGIN { exit !(v > 0 && v < m) }'; then
      bad "$name" "$CLIENT_OUT" "size $b: t_typical $v usec, not in (0, $(lat_max_us "$b"))"
      ok=0
    fi
    [[ -n $lo ]] || lo=$v
    hi=$v
  done <<<"$rows"
  if [[ "${got[*]}" != "$sizes" ]]; then
    bad "$name" "$CLIENT_OUT" "result rows for sizes '${got[*]}', expected '$sizes'"
    ok=0
  fi
  if ((ok)); then
    local unit="MB/s avg" what=""
    if [[ $kind == lat ]]; then unit="usec typical"; fi
    if ((${#got[@]} == 1)); then
      what="$lo $unit"
    else
      what="${#got[@]} sizes, $lo $unit at ${got[0]} B .. $hi at ${got[-1]} B"
    fi
    printf 'ok   %-34s -n %-4d %s, %5d ms\n' "$*" "$n" "$what" "$PP_CLIENT_MS"
  fi
}

all="${all_sizes[*]}"
perftest write_bw 65536 bw ib_write_bw
perftest read_bw 65536 bw ib_read_bw
perftest send_bw 65536 bw ib_send_bw
perftest send_bw-srq 65536 bw ib_send_bw --use-srq
perftest atomic_bw 8 bw ib_atomic_bw
perftest write_lat 2 lat ib_write_lat
perftest read_lat 2 lat ib_read_lat
perftest send_lat 2 lat ib_send_lat
perftest atomic_lat 8 lat ib_atomic_lat
# Every size: most of the test's time, and not for the data. perftest
# samples the clock (get_cpu_mhz: at least 219 ms of spinning on
# gettimeofday) for every size's report, once in a BW test and twice in a
# latency test, on both sides.
# No ib_atomic_bw/ib_atomic_lat -a: perftest refuses it while parsing its
# options ("Message size cannot be changed for Atomic tests", exit 1, with
# any libibverbs), before it opens a device.
perftest write_bw-a "$all" bw ib_write_bw -a
perftest read_bw-a "$all" bw ib_read_bw -a
perftest send_bw-a "$all" bw ib_send_bw -a
perftest send_bw-srq-a "$all" bw ib_send_bw --use-srq -a
perftest write_lat-a "$all" lat ib_write_lat -a
perftest read_lat-a "$all" lat ib_read_lat -a
perftest send_lat-a "$all" lat ib_send_lat -a
# The event-driven forms (perftest has none for WRITE): both sides sleep in
# ibv_get_cq_event, one channel for the send and the receive CQ, and poll
# one CQE per event. A wakeup lost, or a reply seen before the ACK of what
# it answers, hangs them or fails a send (-n 2000: thousands of wakeups).
perftest send_bw-e 65536 bw ib_send_bw -e
perftest read_bw-e 65536 bw ib_read_bw -e
perftest atomic_bw-e 8 bw ib_atomic_bw -e
perftest read_lat-e 2 lat ib_read_lat -e
perftest atomic_lat-e 8 lat ib_atomic_lat -e
pt_n=2000 perftest send_lat-e 2 lat ib_send_lat -e
pt_n=10000 perftest send_lat-e-10k 2 lat ib_send_lat -e
pt_n=10000 perftest read_lat-e-10k 2 lat ib_read_lat -e
pt_n=10000 perftest atomic_lat-e-10k 8 lat ib_atomic_lat -e
pt_n=10000 perftest send_bw-e-10k 65536 bw ib_send_bw -e
perftest send_lat-e-a "$all" lat ib_send_lat -e -a
perftest send_bw-e-a "$all" bw ib_send_bw -e -a

echo "--- $(( ($(pp_now_us) - start_us) / 1000 )) ms in all"
pp_finish
