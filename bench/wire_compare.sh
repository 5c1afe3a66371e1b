#!/usr/bin/env bash
# wire_compare.sh: srdma against UCX (tcp) and iperf3 on this machine, side by
# side in one run, the tools alternating over R rounds.
#
#   bench/wire_compare.sh [-r ROUNDS] [-k]
#
#   -r N   rounds (default $ROUNDS or 3); each round runs every measurement once,
#          the order rotated by one each round
#   -k     keep the logs directory (it is always kept when a measurement failed)
#
# Environment:
#   SRDMA          the srdma binary (default build/rel/srdma under the repo root,
#                  built with `ninja -C build/rel srdma` when missing). It is
#                  copied once at the start, so every round measures the same
#                  binary even if it is rebuilt meanwhile.
#   ROUNDS         as -r
#   TRIES          attempts per measurement before it counts as missing (3)
#   UCX_BW_ITERS   -n of ucp_put_bw (default: calibrated to ~3 s)
#   IDLE_SECONDS   the idle-CPU window (5)
#
# Measurements (all over lo, each pair of processes on the same 2-core box):
#   srdma write_bw 64 KiB (RoCEv2/UDP, 127.0.0.2 -> 127.0.0.1, -D 3)
#   UCX ucp_put_bw 64 KiB over tcp (UCX_TLS=tcp,self on both sides)
#   iperf3 UDP 4 KiB datagrams, unlimited rate, receiver's rate and loss; TCP too
#   srdma send_lat 8 B, t_typical (median); UCX ucp_am_lat 8 B over tcp, the
#   50.0%ile column (both are half the round trip)
#   CPU of an srdma perf server waiting for its client, over IDLE_SECONDS
#
# A measurement that fails says why (on stderr and under the table) and counts
# as missing, never as zero. Exit status: 0 when every measurement gave at least
# one value, 1 otherwise, 2 on a usage or setup error.

set -u -o pipefail
# The wire between processes (UDP on lo), not the same-host path; with
# PATH_UNDER_TEST=same_host (bench/same_host_compare.sh) the same
# measurements go through the same-host path's rings, against UCX's
# shared-memory transports, with that issue's targets.
PATH_UNDER_TEST=${PATH_UNDER_TEST:-wire}
if [[ $PATH_UNDER_TEST == same_host ]]; then
  export SRDMA_SAME_HOST=1
  UCX_TLS_USE=${UCX_TLS_USE:-sm,self}
  NAME=same_host_compare BW_TARGET=1.0 LAT_TARGET=1.5 UDP_TARGET=1.0
else
  export SRDMA_SAME_HOST=0
  UCX_TLS_USE=tcp,self
  # Issue 38's targets on this machine kind.
  NAME=wire_compare BW_TARGET=2.0 LAT_TARGET=0.8 UDP_TARGET=2.0
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
IDLE_SECONDS=${IDLE_SECONDS:-5}
parse_opts "$@"
# A failed client's WHY: its last lines without ucx_perftest's [thread N] ones.
CLOG_SKIP='^\[thread'

# ---------------------------------------------------------------- setup
say "work in $ROOT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wire_compare.XXXXXX") || { echo "wire_compare: mktemp failed" >&2; exit 2; }

if [[ -z ${SRDMA:-} ]]; then
  SRDMA=$ROOT/build/rel/srdma
  if [[ ! -x $SRDMA ]]; then
    if [[ ! -f $ROOT/build/rel/build.ninja ]]; then
      say "configuring build/rel (Release)"
      cmake -S "$ROOT" -B "$ROOT/build/rel" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$WORK/cmake.log" 2>&1 \
        || { tail -n 20 "$WORK/cmake.log" >&2; echo "wire_compare: cmake failed (log: $WORK/cmake.log)" >&2; FAILED_ANY=1; exit 2; }
    fi
    say "building srdma: ninja -C build/rel srdma"
    ninja -C "$ROOT/build/rel" srdma >"$WORK/ninja.log" 2>&1 \
      || { tail -n 20 "$WORK/ninja.log" >&2; echo "wire_compare: ninja failed (log: $WORK/ninja.log)" >&2; FAILED_ANY=1; exit 2; }
  fi
fi
[[ -x $SRDMA ]] || { echo "wire_compare: SRDMA=$SRDMA is not an executable" >&2; exit 2; }

# One snapshot of the binary for the whole run; a copy taken while the linker
# writes it fails the self-check and is taken again.
SRDMA_SRC=$SRDMA
SRDMA=$WORK/srdma
for ((i = 1; ; i++)); do
  if cp "$SRDMA_SRC" "$SRDMA" 2>/dev/null && "$SRDMA" perf --help >/dev/null 2>&1; then break; fi
  ((i >= 10)) && { echo "wire_compare: cannot take a working copy of $SRDMA_SRC" >&2; FAILED_ANY=1; exit 2; }
  say "copy of $SRDMA_SRC does not run (being rebuilt?); again in 2 s"
  sleep 2
done
SRDMA_DESC="$SRDMA_SRC ($(stat -c '%y' "$SRDMA_SRC" 2>/dev/null | cut -d. -f1), cksum $(cksum <"$SRDMA" | cut -d' ' -f1))"

# The other tools, installed when missing (root with apt only).
have_ucx=1 have_iperf=1
command -v ucx_perftest >/dev/null 2>&1 || have_ucx=0
command -v iperf3 >/dev/null 2>&1 || have_iperf=0
if ((!have_ucx || !have_iperf)) && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  say "installing ucx-utils iperf3"
  { DEBIAN_FRONTEND=noninteractive apt-get install -y ucx-utils iperf3 \
      || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y ucx-utils iperf3; }; } >"$WORK/apt.log" 2>&1 \
    || say "apt-get install failed (log: $WORK/apt.log)"
  command -v ucx_perftest >/dev/null 2>&1 && have_ucx=1
  command -v iperf3 >/dev/null 2>&1 && have_iperf=1
fi
command -v jq >/dev/null 2>&1 || command -v python3 >/dev/null 2>&1 \
  || { echo "wire_compare: needs jq or python3 to read JSON" >&2; exit 2; }

# ---------------------------------------------------------------- measurements
m_srdma_bw() {
  local r=$1 t=$2 d=$WORK/r$1.srdma_bw.$2 v
  wait_udp_free 127.0.0.1 127.0.0.2 || return 1
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.log
  SCMD=("$SRDMA" perf write_bw --ip 127.0.0.1 -p "$PORT" -s 65536 -D 3 --copy-ms 0 --json "$d.server.json")
  CCMD=("$SRDMA" perf write_bw --ip 127.0.0.2 -p "$PORT" -s 65536 -D 3 --copy-ms 0 --json "$d.client.json" 127.0.0.1)
  run_pair srdma_bw line '^waiting for a client on' 60 || return 1
  v=$(json_get "$d.client.json" '.results[0].bw_avg_mib_s') && is_num "$v" \
    || { WHY="no results[0].bw_avg_mib_s in the client's JSON ($d.client.json)"; return 1; }
  VAL[srdma_bw,$r]=$v
  VAL[srdma_bw_gb,$r]=$(calc "$v * 1048576 / 1e9")
  local f n=""
  for f in '.transport.client.retransmissions' '.transport.client.timeouts' '.transport.client.dropped_total' '.transport.server.duplicate_requests'; do
    n+=" ${f##*.}=$(json_get "$d.client.json" "$f" || echo '?')"
  done
  NOTE[srdma_bw,$r]+="${NOTE[srdma_bw,$r]:+; }transport:$n"
}

# ucx_final LOG: checks the header; UCX_F = the Final: line's 8 numbers
ucx_final() {
  UCX_F=()
  grep -q 'bandwidth (MB/s)' "$1" && grep -qE '(latency|overhead) \(usec\)' "$1" \
    && grep -qE '\| +Stage +\| +# iterations +\| +[0-9.]+%ile +\| +average +\| +overall +\| +average +\| +overall +\| +average +\| +overall +\|' "$1" \
    || { WHY="unexpected ucx_perftest header (columns changed?): see $1"; return 1; }
  local line; line=$(grep '^Final:' "$1" | tail -n 1)
  [[ -n $line ]] || { WHY="no Final: line from the ucx_perftest client: $(tail -n 2 "$1" | tr '\n' ' ')"; return 1; }
  set -- $line
  (($# == 9)) || { WHY="Final: line has $# fields, not 9: $line"; return 1; }
  shift
  local x; for x in "$@"; do is_num "$x" || { WHY="Final: line field '$x' is not a number: $line"; return 1; }; done
  UCX_F=("$@")
}

UCX_BW_N=${UCX_BW_ITERS:-}
ucx_bw_run() {  # d iters
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$1.server.log CLOG=$1.client.log
  SCMD=(env "UCX_TLS=$UCX_TLS_USE" ucx_perftest -p "$PORT" -t ucp_put_bw -s 65536 -n "$2")
  CCMD=(env "UCX_TLS=$UCX_TLS_USE" ucx_perftest 127.0.0.1 -p "$PORT" -t ucp_put_bw -s 65536 -n "$2")
  run_pair ucx_bw listen "$PORT" 120 || return 1
  ucx_final "$CLOG" || return 1
}
ucx_calibrate() {
  local d=$WORK/ucx_bw.calibrate rate
  if [[ -n $UCX_BW_N ]]; then return 0; fi
  if ucx_bw_run "$d" 3000; then
    rate=${UCX_F[7]}
    UCX_BW_N=$(awk -v r="$rate" 'BEGIN { n = int(3 * r); if (n < 1000) n = 1000; if (n > 2000000) n = 2000000; print n }')
    UCX_BW_HOW="calibrated: a 3000-iteration run gave ${rate} msg/s overall"
  else
    UCX_BW_N=8000
    UCX_BW_HOW="calibration run failed ($WHY); fixed -n 8000"
    say "UCX put_bw calibration failed: $WHY"
  fi
}
m_ucx_bw() {
  local r=$1 d=$WORK/r$1.ucx_bw.$2
  ucx_bw_run "$d" "$UCX_BW_N" || return 1
  # Final: iters, latency typical/avg/overall, bw avg/overall, rate avg/overall;
  # "average" is the last report interval's, "overall" the whole run's.
  VAL[ucx_bw,$r]=${UCX_F[4]}
  VAL[ucx_bw_gb,$r]=$(calc "${UCX_F[4]} * 1048576 / 1e9")
  NOTE[ucx_bw,$r]+="${NOTE[ucx_bw,$r]:+; }-n $UCX_BW_N, ${UCX_F[6]} msg/s overall"
}

m_ucx_lat() {
  local r=$1 d=$WORK/r$1.ucx_lat.$2
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.log
  SCMD=(env "UCX_TLS=$UCX_TLS_USE" ucx_perftest -p "$PORT" -t ucp_am_lat -s 8 -n 20000)
  CCMD=(env "UCX_TLS=$UCX_TLS_USE" ucx_perftest 127.0.0.1 -p "$PORT" -t ucp_am_lat -s 8 -n 20000)
  run_pair ucx_lat listen "$PORT" 120 || return 1
  ucx_final "$CLOG" || return 1
  grep -q 'latency (usec)' "$CLOG" || { WHY="ucp_am_lat header has no 'latency (usec)'"; return 1; }
  VAL[ucx_lat,$r]=${UCX_F[1]}
  NOTE[ucx_lat,$r]+="${NOTE[ucx_lat,$r]:+; }avg ${UCX_F[3]} us overall"
}

m_srdma_lat() {
  local r=$1 t=$2 d=$WORK/r$1.srdma_lat.$2 v tv
  wait_udp_free 127.0.0.1 127.0.0.2 || return 1
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.log
  SCMD=("$SRDMA" perf send_lat --ip 127.0.0.1 -p "$PORT" -s 8 -n 20000 --json "$d.server.json")
  CCMD=("$SRDMA" perf send_lat --ip 127.0.0.2 -p "$PORT" -s 8 -n 20000 --json "$d.client.json" 127.0.0.1)
  run_pair srdma_lat line '^waiting for a client on' 120 || return 1
  v=$(json_get "$d.client.json" '.results[0].t_p50_us') && is_num "$v" \
    || { WHY="no results[0].t_p50_us in the client's JSON ($d.client.json)"; return 1; }
  # The text: the column headed t_typical[usec], in the row under it.
  tv=$(awk '!c { for (i = 1; i <= NF; i++) if ($i == "t_typical[usec]") { c = i; next } }
            c && NF >= c { print $c; exit }' "$CLOG")
  VAL[srdma_lat,$r]=$v
  if is_num "$tv"; then
    VAL[srdma_lat_text,$r]=$tv
  else
    record_fail srdma_lat_text "$r" "no t_typical[usec] column in the client's text output ($CLOG)"
  fi
  local p99; p99=$(json_get "$d.client.json" '.results[0].t_p99_us') && NOTE[srdma_lat,$r]+="${NOTE[srdma_lat,$r]:+; }p99 $(printf '%.1f' "$p99") us"
}

m_iperf_udp() {
  local r=$1 d=$WORK/r$1.iperf_udp.$2 v loss key=sum_received
  next_port || { WHY="no free port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.json
  SCMD=(iperf3 -s -1 -B 127.0.0.1 -p "$PORT")
  CCMD=(iperf3 -c 127.0.0.1 -p "$PORT" -u -b 0 -l 4096 -t 3 -J)
  run_pair iperf_udp listen "$PORT" 30 || return 1
  v=$(json_get "$CLOG" '.error') && { WHY="iperf3: $v"; return 1; }
  # iperf3 >= 3.1x has end.sum_received (the receiver's count); older ones put
  # the receiver's numbers in end.sum. (In 3.12, end.sum.bits_per_second is the
  # sender's rate: only lost_* there come from the receiver.)
  json_get "$CLOG" '.end.sum_received' >/dev/null || key=sum
  v=$(json_get "$CLOG" ".end.$key.bits_per_second") && is_num "$v" \
    || { WHY="no end.$key.bits_per_second in iperf3's JSON ($CLOG)"; return 1; }
  loss=$(json_get "$CLOG" ".end.$key.lost_percent") && is_num "$loss" \
    || { WHY="no end.$key.lost_percent in iperf3's JSON ($CLOG)"; return 1; }
  VAL[udp_gb,$r]=$(calc "$v / 8 / 1e9")
  VAL[udp_loss,$r]=$loss
  local s; s=$(json_get "$CLOG" '.end.sum_sent.bits_per_second' || json_get "$CLOG" '.end.sum.bits_per_second') \
    && NOTE[udp_gb,$r]+="${NOTE[udp_gb,$r]:+; }end.$key; sender $(calc "$s / 8 / 1e9" | xargs printf '%.3f') GB/s"
}

m_iperf_tcp() {
  local r=$1 d=$WORK/r$1.iperf_tcp.$2 v
  next_port || { WHY="no free port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.json
  SCMD=(iperf3 -s -1 -B 127.0.0.1 -p "$PORT")
  CCMD=(iperf3 -c 127.0.0.1 -p "$PORT" -t 3 -J)
  run_pair iperf_tcp listen "$PORT" 30 || return 1
  v=$(json_get "$CLOG" '.error') && { WHY="iperf3: $v"; return 1; }
  v=$(json_get "$CLOG" '.end.sum_received.bits_per_second') && is_num "$v" \
    || { WHY="no end.sum_received.bits_per_second in iperf3's JSON ($CLOG)"; return 1; }
  VAL[tcp_gb,$r]=$(calc "$v / 8 / 1e9")
}

# CPU ticks (utime + stime) of a process and the sum over its threads, and the
# threads' run time in ns from schedstat (finer than the 1/CLK_TCK ticks).
cpu_sample() {  # pid -> "proc_ticks threads_ticks threads_ns nthreads"
  local pid=$1 f a b pt=0 tt=0 tn=0 nt=0 s
  s=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null) || return 1
  set -- $s
  pt=$((${12} + ${13}))   # fields 14, 15 of stat, counted after "pid (comm)"
  for f in /proc/$pid/task/*; do
    s=$(sed 's/.*) //' "$f/stat" 2>/dev/null) || continue
    set -- $s
    tt=$((tt + ${12} + ${13}))
    read -r a b <"$f/schedstat" 2>/dev/null && tn=$((tn + a))
    nt=$((nt + 1))
  done
  echo "$pt $tt $tn $nt"
}
m_idle() {
  local r=$1 d=$WORK/r$1.idle.$2 pid s0 s1 t0 t1 hz open="no" ino
  wait_udp_free 127.0.0.3 || return 1
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log
  "$SRDMA" perf write_bw --ip 127.0.0.3 -p "$PORT" >"$SLOG" 2>&1 </dev/null &
  pid=$!; PIDS+=("$pid")
  if ! wait_ready "$pid" line '^waiting for a client on' "$SLOG" 20; then wait_exit "$pid" 0; return 1; fi
  for ino in $(udp_bound_inodes 127.0.0.3 4791); do pid_has_inode "$pid" "$ino" && open="yes"; done
  hz=$(getconf CLK_TCK) || hz=100
  t0=$(now_ns); s0=$(cpu_sample "$pid") || { WHY="cannot read /proc/$pid/stat"; wait_exit "$pid" 0; return 1; }
  sleep "$IDLE_SECONDS"
  s1=$(cpu_sample "$pid"); t1=$(now_ns)
  if [[ -z $s1 ]] || ! alive "$pid"; then
    wait_exit "$pid" 0
    WHY="the waiting server ended during the window (status $WRC): $(tail -n 3 "$SLOG" | tr '\n' ' ')"
    return 1
  fi
  wait_exit "$pid" 0   # kills it: it waits for a client forever
  ((WKILLED)) || { WHY="the waiting server ended by itself (status $WRC)"; return 1; }
  set -- $s0 $s1
  VAL[idle_cpu,$r]=$(calc "($5 - $1) / $hz / (($t1 - $t0) / 1e9) * 100")
  VAL[idle_cpu_threads,$r]=$(calc "($6 - $2) / $hz / (($t1 - $t0) / 1e9) * 100")
  VAL[idle_cpu_ns,$r]=$(calc "($7 - $3) / ($t1 - $t0) * 100")
  NOTE[idle_cpu,$r]+="${NOTE[idle_cpu,$r]:+; }$8 thread(s); UDP 127.0.0.3:4791 bound by it: $open"
  [[ $open == yes ]] || IDLE_CLOSED+=" r$r"
}
IDLE_CLOSED=""

# ---------------------------------------------------------------- run
MEAS=(srdma_bw ucx_bw iperf_udp iperf_tcp srdma_lat ucx_lat idle)
declare -A KEYS=([srdma_bw]="srdma_bw srdma_bw_gb" [ucx_bw]="ucx_bw ucx_bw_gb" [iperf_udp]="udp_gb udp_loss"
                 [iperf_tcp]=tcp_gb [srdma_lat]="srdma_lat srdma_lat_text" [ucx_lat]=ucx_lat
                 [idle]="idle_cpu idle_cpu_threads idle_cpu_ns")
need_tool() {  # meas -> 0 when its tool is here
  case $1 in
    ucx_*) ((have_ucx)) ;;
    iperf_*) ((have_iperf)) ;;
    *) return 0 ;;
  esac
}
NEED_WHY="tool not installed (apt-get install -y ucx-utils iperf3)"

((have_ucx)) && { say "calibrating UCX put_bw iterations"; ucx_calibrate; }
run_rounds

# ---------------------------------------------------------------- report
ratio_line() {  # label num den target-op target
  local label=$1 a=${MEDV[$2]:-} b=${MEDV[$3]:-} op=$4 tgt=$5 v verdict
  if [[ -z $a || -z $b ]] || awk -v b="$b" 'BEGIN { exit !(b == 0) }'; then
    printf '| %s | missing | %s %s | MISSING |\n' "$label" "$op" "$tgt"; return
  fi
  v=$(calc "$a / $b")
  if [[ $op == ">=" ]]; then verdict=$(awk -v v="$v" -v t="$tgt" 'BEGIN { print (v >= t) ? "met" : "NOT met" }')
  else verdict=$(awk -v v="$v" -v t="$tgt" 'BEGIN { print (v <= t) ? "met" : "NOT met" }'); fi
  printf '| %s | %.3f | %s %s | %s |\n' "$label" "$v" "$op" "$tgt" "$verdict"
}

{
  echo "# $NAME: srdma ($PATH_UNDER_TEST) vs UCX ($UCX_TLS_USE) vs iperf3, cross-process on lo"
  echo
  echo "- date: $START (ended $(date -u '+%H:%M:%S UTC'))"
  echo "- cpu: $(lscpu 2>/dev/null | grep 'Model name' | sed 's/  */ /g' || echo 'lscpu failed'); $(nproc) online"
  echo "- load average: $LOAD0 at the start, $LOAD1 at the end"
  echo "- kernel: $(uname -r); srdma: $SRDMA_DESC, repo at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
  ((have_ucx)) && echo "- ucx_perftest: UCX $(ucx_info -v 2>/dev/null | sed -n 's/^# Version //p' | head -n 1), UCX_TLS=$UCX_TLS_USE on both sides; ucp_put_bw -n ${UCX_BW_N:-?} (${UCX_BW_HOW:-from UCX_BW_ITERS})"
  ((have_iperf)) && echo "- iperf3: $(iperf3 --version 2>/dev/null | head -n 1)"
  echo "- rounds: $ROUNDS, the order rotated each round: ${MEAS[*]}"
  echo
  hdr="| tool | what |"; sep="| --- | --- |"
  for ((r = 1; r <= ROUNDS; r++)); do hdr+=" r$r |"; sep+=" ---: |"; done
  echo "$hdr median | unit |"; echo "$sep ---: | --- |"
  row srdma_bw        srdma   "write_bw 64 KiB, RoCEv2 127.0.0.2 -> 127.0.0.1, -D 3 (bw_avg_mib_s)" "MiB/s" "%.1f"
  row srdma_bw_gb     srdma   "write_bw 64 KiB, same runs" "GB/s" "%.3f"
  row ucx_bw          UCX     "ucp_put_bw 64 KiB over $UCX_TLS_USE (Final: bandwidth overall, MB = 2^20 B)" "MiB/s" "%.1f"
  row ucx_bw_gb       UCX     "ucp_put_bw 64 KiB, same runs" "GB/s" "%.3f"
  row udp_gb          iperf3  "UDP 4 KiB datagrams, -b 0, receiver's rate" "GB/s" "%.3f"
  row udp_loss        iperf3  "UDP, same runs: lost" "%" "%.1f"
  row tcp_gb          iperf3  "TCP (reference), receiver's rate" "GB/s" "%.3f"
  row srdma_lat       srdma   "send_lat 8 B t_typical (JSON t_p50_us)" "µs" "%.2f"
  row srdma_lat_text  srdma   "send_lat 8 B t_typical[usec] (text), same runs" "µs" "%.2f"
  row ucx_lat         UCX     "ucp_am_lat 8 B over $UCX_TLS_USE, typical (Final: 50.0%ile column)" "µs" "%.2f"
  row idle_cpu        srdma   "server waiting for a client: utime+stime of /proc/PID/stat over ${IDLE_SECONDS} s" "% of one CPU" "%.2f"
  row idle_cpu_threads srdma  "same, summed over /proc/PID/task/*/stat" "% of one CPU" "%.2f"
  row idle_cpu_ns     srdma   "same, threads' schedstat run time (ns resolution)" "% of one CPU" "%.3f"
  echo
  echo "| ratio (of medians) | value | target | |"
  echo "| --- | ---: | --- | --- |"
  ratio_line "srdma write_bw / UCX put_bw" srdma_bw ucx_bw ">=" "$BW_TARGET"
  ratio_line "srdma write_bw / iperf3 UDP" srdma_bw_gb udp_gb ">=" "$UDP_TARGET"
  ratio_line "srdma send_lat / UCX am_lat" srdma_lat ucx_lat "<=" "$LAT_TARGET"
  if [[ -n ${MEDV[idle_cpu]:-} ]]; then
    printf '| idle srdma CPU (%% of one CPU) | %.2f | <= 1 | %s |\n' "${MEDV[idle_cpu]}" \
      "$(awk -v v="${MEDV[idle_cpu]}" 'BEGIN { print (v <= 1) ? "met" : "NOT met" }')"
  else
    echo "| idle srdma CPU (% of one CPU) | missing | <= 1 | MISSING |"
  fi
  [[ -n $IDLE_CLOSED ]] && { echo; echo "Warning: the waiting server held no UDP socket on 127.0.0.3:4791 in$IDLE_CLOSED: its device was not open while measured, so the idle CPU there is a process waiting for a client, not an idle open device."; }
  echo
  echo "Units: GB/s = 10^9 B/s; MiB/s = 2^20 B/s (ucx_perftest's \"MB/s\" divides by 1024*1024, and its Final: \"overall\""
  echo "columns cover the whole run, \"average\" only the last report interval). Latencies are half the round trip on both."
  echo "The idle CPU's tick columns resolve 1/$(getconf CLK_TCK 2>/dev/null || echo 100) s over the window ($(calc "100 / ${IDLE_SECONDS} / $(getconf CLK_TCK 2>/dev/null || echo 100)")% of one CPU)."
  notes=""
  for k in srdma_bw ucx_bw udp_gb srdma_lat ucx_lat idle_cpu; do
    for ((r = 1; r <= ROUNDS; r++)); do
      [[ -n ${NOTE[$k,$r]:-} ]] && notes+="- r$r $k: ${NOTE[$k,$r]}"$'\n'
    done
  done
  [[ -n $notes ]] && { echo; echo "Notes:"; printf '%s' "$notes"; }
  if ((${#FAILS[@]})); then
    echo; echo "Missing (counted as missing, not as zero):"
    printf -- '- %s\n' "${FAILS[@]}"
    echo "Logs: $WORK"
  fi
}

exit $((FAILED_ANY ? 1 : 0))
