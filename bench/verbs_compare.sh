#!/usr/bin/env bash
# verbs_compare.sh: perftest through softrdma's libibverbs.so.1 against
# `srdma perf` on the same wire, side by side in one run, the tools
# alternating over R rounds.
#
#   bench/verbs_compare.sh [-r ROUNDS] [-k]
#
#   -r N   rounds (default $ROUNDS or 3); each round runs every measurement once,
#          the order rotated by one each round
#   -k     keep the logs directory (it is always kept when a measurement failed)
#
# Environment:
#   SRDMA          the srdma binary (default build/rel/srdma under the repo root)
#   VERBS_LIB      the directory of softrdma's libibverbs.so.1 (default
#                  build/rel/lib/softrdma). Both are built with
#                  `ninja -C build/rel srdma srdma_ibverbs` when missing and
#                  copied once at the start, so every round measures the same
#                  binaries even if they are rebuilt meanwhile.
#   ROUNDS         as -r
#   TRIES          attempts per measurement before it counts as missing (3)
#   BW_SECONDS     -D of both bandwidth tests (3)
#   LAT_ITERS      -n of both latency tests (20000)
#
# Measurements (all over lo: a server on 127.X.Y.1 and its client on
# 127.X.Y.2, one pair of addresses for the whole run, each process with its
# own RoCEv2 device on UDP 4791; the same 2-core box):
#   verbs write_bw  ib_write_bw -s 65536 -D BW_SECONDS, LD_LIBRARY_PATH at the
#                   library, SRDMA_ADDR per side: the client's BW average[MB/sec]
#   srdma write_bw  srdma perf write_bw -s 65536 -D BW_SECONDS with perftest's
#                   queue settings (-t 128 -Q 1 -I 0, the values ib_write_bw's
#                   header shows; checked every run): bw_avg_mib_s
#   verbs send_lat  ib_send_lat -s 8 -n LAT_ITERS: the client's t_typical[usec]
#   srdma send_lat  srdma perf send_lat -s 8 -n LAT_ITERS -I 0 (perftest sends
#                   nothing inline on this device, its header's "Max inline
#                   data: 0[B]"): t_p50_us, its t_typical
#   srdma send_lat (inline)  the same with srdma perf's default -I 236, for
#                   reference (bench/wire_compare.sh's number)
# Both MB/s are MiB/s (2^20 B/s; perftest's help says so); both latencies are
# half the round trip, the median of the iterations.
#
# A measurement that fails says why (on stderr and under the table) and counts
# as missing, never as zero. Exit status: 0 when every measurement gave at least
# one value in each round, 1 otherwise, 2 on a usage or setup error.

set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-3}
TRIES=${TRIES:-3}
BW_SECONDS=${BW_SECONDS:-3}
LAT_ITERS=${LAT_ITERS:-20000}
KEEP=0

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0" >&2; exit 2; }
while getopts "r:kh" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;;
    k) KEEP=1 ;;
    *) usage ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "verbs_compare: -r/ROUNDS must be a positive integer, not '$ROUNDS'" >&2; exit 2; }
[[ $TRIES =~ ^[1-9][0-9]*$ ]] || { echo "verbs_compare: TRIES must be a positive integer" >&2; exit 2; }
[[ $BW_SECONDS =~ ^[1-9][0-9]*$ ]] || { echo "verbs_compare: BW_SECONDS must be a positive integer" >&2; exit 2; }
[[ $LAT_ITERS =~ ^[1-9][0-9]*$ ]] || { echo "verbs_compare: LAT_ITERS must be a positive integer" >&2; exit 2; }

say() { printf '[verbs_compare %s] %s\n' "$(date +%T)" "$*" >&2; }
now_ns() { date +%s%N; }

# ---------------------------------------------------------------- processes
PIDS=()
WORK=""
FAILED_ANY=0
alive() {  # a live, unreaped, non-zombie process
  local st
  [[ -r /proc/$1/stat ]] || return 1
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $st && $st != Z && $st != X ]]
}
cleanup() {
  local p live=()
  for p in "${PIDS[@]}"; do alive "$p" && { kill -TERM "$p" 2>/dev/null; live+=("$p"); }; done
  if ((${#live[@]})); then
    local i
    for ((i = 0; i < 30; i++)); do
      local any=0
      for p in "${live[@]}"; do alive "$p" && any=1; done
      ((any)) || break
      sleep 0.1
    done
    for p in "${live[@]}"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
  fi
  if [[ -n $WORK && -d $WORK ]]; then
    if ((KEEP || FAILED_ANY)); then say "logs kept in $WORK"; else rm -rf "$WORK"; fi
  fi
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

# wait_exit PID SECONDS: wait for PID to end (killing it after SECONDS);
# sets WRC (its exit status) and WKILLED (1 when we had to kill it).
wait_exit() {
  local pid=$1 deadline=$(($(now_ns) + $2 * 1000000000)) i
  WKILLED=0
  while alive "$pid" && (($(now_ns) < deadline)); do sleep 0.05; done
  if alive "$pid"; then
    WKILLED=1
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < 40; i++)); do alive "$pid" || break; sleep 0.05; done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  WRC=$?
}

# ---------------------------------------------------------------- sockets
hexport() { printf '%04X' "$1"; }
# hexip4 A.B.C.D: the address as /proc/net/{tcp,udp} print it (host order, x86)
hexip4() { local IFS=.; set -- $1; printf '%02X%02X%02X%02X' "$4" "$3" "$2" "$1"; }
# port_in_use PORT: any TCP or UDP socket (v4 or v6) bound to PORT
port_in_use() {
  local h; h=$(hexport "$1")
  awk -v h=":$h" 'FNR > 1 && substr($2, length($2) - 4) == h { f = 1 } END { exit !f }' \
    /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6 2>/dev/null
}
# pid_has_inode PID INODE
pid_has_inode() {
  local fd
  for fd in /proc/$1/fd/*; do
    [[ $(readlink "$fd" 2>/dev/null) == "socket:[$2]" ]] && return 0
  done
  return 1
}
# listening_by PID PORT: PID holds a TCP socket listening on PORT
listening_by() {
  local h ino; h=$(hexport "$2")
  for ino in $(awk -v h=":$h" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == h { print $10 }' \
                 /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
    pid_has_inode "$1" "$ino" && return 0
  done
  return 1
}
# udp_bound_inodes IP PORT
udp_bound_inodes() {
  awk -v a="$(hexip4 "$1"):$(hexport "$2")" 'FNR > 1 && $2 == a { print $10 }' /proc/net/udp 2>/dev/null
}
# wait_ready PID KIND ARG LOG SECONDS: KIND "line" (ARG: a regex that the
# server's LOG must show) or "listen" (ARG: the TCP port PID must listen on).
# Polls every 20 ms; fails when PID ends or SECONDS pass. Sets WHY on failure.
wait_ready() {
  local pid=$1 kind=$2 arg=$3 log=$4 deadline=$(($(now_ns) + $5 * 1000000000))
  WHY=""
  while (($(now_ns) < deadline)); do
    if ! alive "$pid"; then
      wait "$pid" 2>/dev/null; WHY="server exited (status $?) before it was ready: $(tail -n 3 "$log" | tr '\n' ' ')"
      return 1
    fi
    case $kind in
      line) grep -qE "$arg" "$log" 2>/dev/null && return 0 ;;
      listen) listening_by "$pid" "$arg" && return 0 ;;
    esac
    sleep 0.02
  done
  WHY="server not ready after $5 s ($kind $arg): $(tail -n 3 "$log" | tr '\n' ' ')"
  return 1
}

# Ports: a block of our own from $$, skipping any that is bound.
PORT_BASE=$((10000 + ($$ % 680) * 32))
PORT_SEQ=0
next_port() {
  local p i
  for ((i = 0; i < 1000; i++)); do
    p=$((PORT_BASE + PORT_SEQ)); PORT_SEQ=$((PORT_SEQ + 1))
    ((p > 32000)) && { PORT_BASE=10000; PORT_SEQ=0; continue; }
    port_in_use "$p" || { PORT=$p; return 0; }
  done
  return 1
}

# Addresses: one pair for the whole run, 127.X.Y.1 (servers) and 127.X.Y.2
# (clients), of this run's own (tests bind 127.0.0.x:4791, and LIDs in the
# library's /16 must not be 0).
NET=127.$((RANDOM % 200 + 20)).$(($$ % 250 + 1))
IP_A=$NET.1
IP_B=$NET.2

# ---------------------------------------------------------------- numbers
is_num() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; }
# json_get FILE PATH (jq syntax: .a.b[0].c); prints the value, fails on null/missing
json_get() {
  local v
  if command -v jq >/dev/null 2>&1; then
    v=$(jq -er "$2" "$1" 2>/dev/null) || return 1
  else
    local py; py=$(sed -E 's/\.([A-Za-z_][A-Za-z0-9_]*)/["\1"]/g' <<<"$2")
    v=$(python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
try: v = eval("d" + sys.argv[2])
except Exception: sys.exit(1)
if v is None: sys.exit(1)
print(v)' "$1" "$py" 2>/dev/null) || return 1
  fi
  [[ -n $v && $v != null ]] || return 1
  printf '%s\n' "$v"
}
calc() { awk "BEGIN { printf \"%.10g\", $* }"; }
median() {  # values as arguments
  (($#)) || return 1
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%.10g", v[(NR + 1) / 2]; else printf "%.10g", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ---------------------------------------------------------------- setup
say "work in $ROOT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/verbs_compare.XXXXXX") || { echo "verbs_compare: mktemp failed" >&2; exit 2; }

for t in ib_write_bw ib_send_lat; do
  command -v "$t" >/dev/null 2>&1 \
    || { echo "verbs_compare: no $t (apt-get install -y perftest)" >&2; exit 2; }
done
command -v jq >/dev/null 2>&1 || command -v python3 >/dev/null 2>&1 \
  || { echo "verbs_compare: needs jq or python3 to read JSON" >&2; exit 2; }

SRDMA=${SRDMA:-$ROOT/build/rel/srdma}
VERBS_LIB=${VERBS_LIB:-$ROOT/build/rel/lib/softrdma}
want=()
[[ -x $SRDMA ]] || want+=(srdma)
[[ -e $VERBS_LIB/libibverbs.so.1 ]] || want+=(srdma_ibverbs)
if ((${#want[@]})); then
  if [[ $SRDMA != "$ROOT/build/rel/srdma" || $VERBS_LIB != "$ROOT/build/rel/lib/softrdma" ]]; then
    echo "verbs_compare: SRDMA=$SRDMA or VERBS_LIB=$VERBS_LIB/libibverbs.so.1 is missing" >&2; exit 2
  fi
  if [[ ! -f $ROOT/build/rel/build.ninja ]]; then
    say "configuring build/rel (Release)"
    cmake -S "$ROOT" -B "$ROOT/build/rel" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$WORK/cmake.log" 2>&1 \
      || { tail -n 20 "$WORK/cmake.log" >&2; echo "verbs_compare: cmake failed (log: $WORK/cmake.log)" >&2; FAILED_ANY=1; exit 2; }
  fi
  say "building: ninja -C build/rel ${want[*]}"
  ninja -C "$ROOT/build/rel" "${want[@]}" >"$WORK/ninja.log" 2>&1 \
    || { tail -n 20 "$WORK/ninja.log" >&2; echo "verbs_compare: ninja failed (log: $WORK/ninja.log)" >&2; FAILED_ANY=1; exit 2; }
fi
[[ -x $SRDMA ]] || { echo "verbs_compare: SRDMA=$SRDMA is not an executable" >&2; exit 2; }

# One snapshot of each for the whole run; a copy taken while the linker
# writes it fails the self-check and is taken again.
SRDMA_SRC=$SRDMA LIB_SRC=$VERBS_LIB/libibverbs.so.1
SRDMA=$WORK/srdma
LIB=$WORK/lib
mkdir -p "$LIB"
for ((i = 1; ; i++)); do
  if cp "$SRDMA_SRC" "$SRDMA" 2>/dev/null && "$SRDMA" perf --help >/dev/null 2>&1 \
     && cp -L "$LIB_SRC" "$LIB/libibverbs.so.1" 2>/dev/null \
     && LD_LIBRARY_PATH=$LIB SRDMA_ADDR=$IP_A ibv_devices 2>/dev/null | grep -qw srdma0; then
    break
  fi
  ((i >= 10)) && { echo "verbs_compare: cannot take working copies of $SRDMA_SRC and $LIB_SRC" >&2; FAILED_ANY=1; exit 2; }
  say "copy of $SRDMA_SRC or $LIB_SRC does not run (being rebuilt?); again in 2 s"
  sleep 2
done
desc() { echo "$1 ($(stat -L -c '%y' "$1" 2>/dev/null | cut -d. -f1), cksum $(cksum <"$2" | cut -d' ' -f1))"; }
SRDMA_DESC=$(desc "$SRDMA_SRC" "$SRDMA")
LIB_DESC=$(desc "$LIB_SRC" "$LIB/libibverbs.so.1")
# The programs' environment: the library first, the side's own address.
VERBS_A=(env "LD_LIBRARY_PATH=$LIB" "SRDMA_ADDR=$IP_A")
VERBS_B=(env "LD_LIBRARY_PATH=$LIB" "SRDMA_ADDR=$IP_B")

# ---------------------------------------------------------------- results
declare -A VAL   # VAL[key,round] = number
declare -A NOTE  # NOTE[key,round] = extra facts of that run
FAILS=()
record_fail() {  # key round reason
  FAILS+=("round $2, $1: $3")
  FAILED_ANY=1
  say "round $2: $1 MISSING: $3"
}

# run_pair LABEL READY_KIND READY_ARG CLIENT_TIMEOUT: runs the server SCMD
# (array) into $SLOG, waits until it is ready, runs the client CCMD into $CLOG
# under a timeout, then waits for the server. Sets WHY on failure.
run_pair() {
  local label=$1 kind=$2 arg=$3 ct=$4 spid cpid crc
  WHY=""
  "${SCMD[@]}" >"$SLOG" 2>&1 </dev/null &
  spid=$!; PIDS+=("$spid")
  if ! wait_ready "$spid" "$kind" "$arg" "$SLOG" 20; then
    wait_exit "$spid" 0
    return 1
  fi
  timeout -k 5 "$ct" "${CCMD[@]}" >"$CLOG" 2>&1 </dev/null &
  cpid=$!; PIDS+=("$cpid")
  wait "$cpid"; crc=$?
  # A server whose client failed may wait for it forever: give it 2 s then.
  wait_exit "$spid" $((crc == 0 ? 15 : 2))
  if ((crc != 0)); then
    local t=""; ((crc == 124 || crc == 137)) && t=" (timed out after ${ct} s)"
    WHY="$label: client exit status $crc$t: $(tail -n 3 "$CLOG" | tr '\n' ' ')"
    ((WKILLED)) && WHY+="; server killed after the client ended"
    return 1
  fi
  if ((WKILLED)); then
    WHY="$label: server still running 15 s after its client succeeded; killed: $(tail -n 3 "$SLOG" | tr '\n' ' ')"
    return 1
  fi
  if ((WRC != 0)); then
    WHY="$label: server exit status $WRC: $(tail -n 3 "$SLOG" | tr '\n' ' ')"
    return 1
  fi
  return 0
}

# Each device binds UDP 4791 on its address: wait (bounded) while another
# program (a previous run's process) still holds one of ours.
wait_udp_free() {
  local ip deadline=$(($(now_ns) + 30 * 1000000000)) busy
  while :; do
    busy=""
    for ip in "$@"; do [[ -n $(udp_bound_inodes "$ip" 4791) ]] && busy+=" $ip:4791"; done
    [[ -z $busy ]] && return 0
    (($(now_ns) >= deadline)) && { WHY="UDP$busy still bound by another program after 30 s"; return 1; }
    sleep 0.2
  done
}

# with_tries KEY ROUND FUNC: FUNC sets WHY and fails, or succeeds
with_tries() {
  local key=$1 r=$2 fn=$3 t
  for ((t = 1; t <= TRIES; t++)); do
    if "$fn" "$r" "$t"; then
      ((t > 1)) && NOTE[$key,$r]+="${NOTE[$key,$r]:+; }succeeded at attempt $t"
      return 0
    fi
    if ((t < TRIES)); then say "round $r: $key attempt $t failed: $WHY; retrying"; sleep 1; fi
  done
  WHY+=" (after $TRIES attempts)"
  return 1
}

# perftest_header LOG NAME: the value after "NAME :" in perftest's header
perftest_header() {
  sed -nE "s/^ *$2 *: *([^ 	]+).*/\1/p" "$1" | head -n 1
}
# perftest_row LOG COLUMN: COLUMN of the first result row (a line of numbers
# under the "#bytes" header)
perftest_row() {
  awk -v c="$2" '/^ *#bytes/ { on = 1; next } on && $1 ~ /^[0-9]+$/ { print $c; exit }' "$1"
}

# ---------------------------------------------------------------- measurements
# perftest's queue settings for ib_write_bw (its defaults; each run checks
# its header says these), given to srdma perf write_bw too.
BW_TX=128 BW_CQ_MOD=1 BW_INLINE=0

m_verbs_bw() {
  local r=$1 d=$WORK/r$1.verbs_bw.$2 v tx cq il
  wait_udp_free "$IP_A" "$IP_B" || return 1
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.log
  SCMD=("${VERBS_A[@]}" ib_write_bw -s 65536 -D "$BW_SECONDS" -p "$PORT")
  CCMD=("${VERBS_B[@]}" ib_write_bw -s 65536 -D "$BW_SECONDS" -p "$PORT" "$IP_A")
  run_pair verbs_bw listen "$PORT" $((BW_SECONDS + 60)) || return 1
  grep -qE '^ *#bytes +#iterations +BW peak\[MB/sec\] +BW average\[MB/sec\] +MsgRate\[Mpps\]' "$CLOG" \
    || { WHY="unexpected ib_write_bw result header (columns changed?): see $CLOG"; return 1; }
  v=$(perftest_row "$CLOG" 4) && is_num "$v" && awk -v v="$v" 'BEGIN { exit !(v > 0) }' \
    || { WHY="no BW average[MB/sec] > 0 in the client's result row ($CLOG)"; return 1; }
  tx=$(perftest_header "$CLOG" 'TX depth') cq=$(perftest_header "$CLOG" 'CQ Moderation')
  il=$(perftest_header "$CLOG" 'Max inline data')
  [[ $tx == "$BW_TX" && $cq == "$BW_CQ_MOD" && $il == "${BW_INLINE}[B]" ]] \
    || NOTE[verbs_bw,$r]+="${NOTE[verbs_bw,$r]:+; }WARNING: ib_write_bw ran with TX depth $tx, CQ Moderation $cq, Max inline data $il, not the $BW_TX, $BW_CQ_MOD, ${BW_INLINE}[B] given to srdma perf"
  VAL[verbs_bw,$r]=$v
  VAL[verbs_bw_gb,$r]=$(calc "$v * 1048576 / 1e9")
  NOTE[verbs_bw,$r]+="${NOTE[verbs_bw,$r]:+; }$(perftest_row "$CLOG" 2) iterations, $(perftest_row "$CLOG" 5) Mpps"
}

m_srdma_bw() {
  local r=$1 d=$WORK/r$1.srdma_bw.$2 v
  wait_udp_free "$IP_A" "$IP_B" || return 1
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.log
  local common=(write_bw -s 65536 -D "$BW_SECONDS" -t "$BW_TX" -Q "$BW_CQ_MOD" -I "$BW_INLINE" --copy-ms 0 -p "$PORT")
  SCMD=("$SRDMA" perf "${common[@]}" --ip "$IP_A" --json "$d.server.json")
  CCMD=("$SRDMA" perf "${common[@]}" --ip "$IP_B" --json "$d.client.json" "$IP_A")
  run_pair srdma_bw line '^waiting for a client on' $((BW_SECONDS + 60)) || return 1
  v=$(json_get "$d.client.json" '.results[0].bw_avg_mib_s') && is_num "$v" \
    || { WHY="no results[0].bw_avg_mib_s in the client's JSON ($d.client.json)"; return 1; }
  VAL[srdma_bw,$r]=$v
  VAL[srdma_bw_gb,$r]=$(calc "$v * 1048576 / 1e9")
  local f n=""
  for f in '.transport.client.retransmissions' '.transport.client.timeouts'; do
    n+=" ${f##*.}=$(json_get "$d.client.json" "$f" || echo '?')"
  done
  NOTE[srdma_bw,$r]+="${NOTE[srdma_bw,$r]:+; }transport:$n"
}

m_verbs_lat() {
  local r=$1 d=$WORK/r$1.verbs_lat.$2 v il
  wait_udp_free "$IP_A" "$IP_B" || return 1
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.log
  SCMD=("${VERBS_A[@]}" ib_send_lat -s 8 -n "$LAT_ITERS" -p "$PORT")
  CCMD=("${VERBS_B[@]}" ib_send_lat -s 8 -n "$LAT_ITERS" -p "$PORT" "$IP_A")
  run_pair verbs_lat listen "$PORT" 120 || return 1
  grep -qE '^ *#bytes +#iterations +t_min\[usec\] +t_max\[usec\] +t_typical\[usec\] +t_avg\[usec\]' "$CLOG" \
    || { WHY="unexpected ib_send_lat result header (columns changed?): see $CLOG"; return 1; }
  v=$(perftest_row "$CLOG" 5) && is_num "$v" && awk -v v="$v" 'BEGIN { exit !(v > 0) }' \
    || { WHY="no t_typical[usec] > 0 in the client's result row ($CLOG)"; return 1; }
  il=$(perftest_header "$CLOG" 'Max inline data')
  [[ $il == "0[B]" ]] || NOTE[verbs_lat,$r]+="${NOTE[verbs_lat,$r]:+; }WARNING: ib_send_lat sent inline up to $il, srdma perf -I 0 nothing"
  VAL[verbs_lat,$r]=$v
  NOTE[verbs_lat,$r]+="${NOTE[verbs_lat,$r]:+; }avg $(perftest_row "$CLOG" 6) us, 99% $(perftest_row "$CLOG" 8) us"
}

# srdma_lat_run KEY ROUND TRY INLINE
srdma_lat_run() {
  local key=$1 r=$2 d=$WORK/r$2.$1.$3 v
  wait_udp_free "$IP_A" "$IP_B" || return 1
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.log
  local common=(send_lat -s 8 -n "$LAT_ITERS" -I "$4" -p "$PORT")
  SCMD=("$SRDMA" perf "${common[@]}" --ip "$IP_A" --json "$d.server.json")
  CCMD=("$SRDMA" perf "${common[@]}" --ip "$IP_B" --json "$d.client.json" "$IP_A")
  run_pair "$key" line '^waiting for a client on' 120 || return 1
  v=$(json_get "$d.client.json" '.results[0].t_p50_us') && is_num "$v" \
    || { WHY="no results[0].t_p50_us in the client's JSON ($d.client.json)"; return 1; }
  VAL[$key,$r]=$v
  local a p99
  a=$(json_get "$d.client.json" '.results[0].t_avg_us') && p99=$(json_get "$d.client.json" '.results[0].t_p99_us') \
    && NOTE[$key,$r]+="${NOTE[$key,$r]:+; }avg $(printf '%.2f' "$a") us, 99% $(printf '%.2f' "$p99") us"
}
m_srdma_lat() { srdma_lat_run srdma_lat "$1" "$2" 0; }
m_srdma_lat_inline() { srdma_lat_run srdma_lat_inline "$1" "$2" 236; }

# ---------------------------------------------------------------- run
MEAS=(verbs_bw srdma_bw verbs_lat srdma_lat srdma_lat_inline)
declare -A KEYS=([verbs_bw]="verbs_bw verbs_bw_gb" [srdma_bw]="srdma_bw srdma_bw_gb" [verbs_lat]=verbs_lat
                 [srdma_lat]=srdma_lat [srdma_lat_inline]=srdma_lat_inline)

START=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= ROUNDS; r++)); do
  n=${#MEAS[@]}
  for ((j = 0; j < n; j++)); do
    m=${MEAS[$(((j + r - 1) % n))]}
    say "round $r/$ROUNDS: $m"
    if ! with_tries "$m" "$r" "m_$m"; then
      read -ra keys <<<"${KEYS[$m]}"
      record_fail "${keys[0]}" "$r" "$WHY"   # its other rows show missing too
    fi
  done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- report

declare -A MEDV
row() {  # key tool what unit fmt
  local key=$1 tool=$2 what=$3 unit=$4 fmt=$5 r vals=() cells="" m
  for ((r = 1; r <= ROUNDS; r++)); do
    if [[ -n ${VAL[$key,$r]:-} ]]; then
      vals+=("${VAL[$key,$r]}"); cells+=" $(printf "$fmt" "${VAL[$key,$r]}") |"
    else
      cells+=" missing |"
    fi
  done
  if m=$(median "${vals[@]}"); then
    MEDV[$key]=$m
    m=$(printf "$fmt" "$m"); ((${#vals[@]} < ROUNDS)) && m+=" (of ${#vals[@]})"
  else
    m="missing"
  fi
  printf '| %s | %s |%s %s | %s |\n' "$tool" "$what" "$cells" "$m" "$unit"
}
ratio_line() {  # label num den
  local label=$1 a=${MEDV[$2]:-} b=${MEDV[$3]:-}
  if [[ -z $a || -z $b ]] || awk -v b="$b" 'BEGIN { exit !(b == 0) }'; then
    printf '| %s | missing |\n' "$label"; return
  fi
  printf '| %s | %.3f |\n' "$label" "$(calc "$a / $b")"
}

{
  echo "# verbs_compare: perftest on softrdma's libibverbs.so.1 vs srdma perf, cross-process on lo"
  echo
  echo "- date: $START (ended $(date -u '+%H:%M:%S UTC'))"
  echo "- cpu: $(lscpu 2>/dev/null | grep 'Model name' | sed 's/  */ /g' || echo 'lscpu failed'); $(nproc) online"
  echo "- load average: $LOAD0 at the start, $LOAD1 at the end"
  echo "- kernel: $(uname -r); repo at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src include 2>/dev/null || echo ' (with uncommitted changes under src/ or include/)')"
  echo "- srdma: $SRDMA_DESC"
  echo "- libibverbs.so.1: $LIB_DESC"
  echo "- perftest: $(dpkg-query -W -f '${Version}' perftest 2>/dev/null || echo '?'); addresses $IP_A (servers), $IP_B (clients)"
  echo "- rounds: $ROUNDS, the order rotated each round: ${MEAS[*]}"
  echo
  hdr="| tool | what |"; sep="| --- | --- |"
  for ((r = 1; r <= ROUNDS; r++)); do hdr+=" r$r |"; sep+=" ---: |"; done
  echo "$hdr median | unit |"; echo "$sep ---: | --- |"
  row verbs_bw         verbs "ib_write_bw -s 65536 -D $BW_SECONDS (client's BW average[MB/sec])" "MiB/s" "%.1f"
  row srdma_bw         srdma "perf write_bw -s 65536 -D $BW_SECONDS -t $BW_TX -Q $BW_CQ_MOD -I $BW_INLINE (bw_avg_mib_s)" "MiB/s" "%.1f"
  row verbs_bw_gb      verbs "ib_write_bw, same runs" "GB/s" "%.3f"
  row srdma_bw_gb      srdma "perf write_bw, same runs" "GB/s" "%.3f"
  row verbs_lat        verbs "ib_send_lat -s 8 -n $LAT_ITERS (client's t_typical[usec])" "µs" "%.2f"
  row srdma_lat        srdma "perf send_lat -s 8 -n $LAT_ITERS -I 0 (t_p50_us)" "µs" "%.2f"
  row srdma_lat_inline srdma "perf send_lat -s 8 -n $LAT_ITERS -I 236, inline (reference)" "µs" "%.2f"
  echo
  echo "| ratio (of medians) | value |"
  echo "| --- | ---: |"
  ratio_line "write_bw: library (ib_write_bw) / srdma perf" verbs_bw srdma_bw
  ratio_line "send_lat: library (ib_send_lat) / srdma perf -I 0" verbs_lat srdma_lat
  ratio_line "send_lat: library (ib_send_lat) / srdma perf -I 236" verbs_lat srdma_lat_inline
  echo
  echo "Units: MiB/s = 2^20 B/s (perftest's MB/sec is MiB/s, its help says); GB/s = 10^9 B/s. Latencies are half"
  echo "the round trip, the median of the iterations (perftest's t_typical, srdma perf's t_typical = t_p50_us)."
  notes=""
  for k in verbs_bw srdma_bw verbs_lat srdma_lat srdma_lat_inline; do
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
