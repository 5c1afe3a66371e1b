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
NAME=verbs_compare
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
BW_SECONDS=${BW_SECONDS:-3}
LAT_ITERS=${LAT_ITERS:-20000}
parse_opts "$@"
[[ $BW_SECONDS =~ ^[1-9][0-9]*$ ]] || { echo "verbs_compare: BW_SECONDS must be a positive integer" >&2; exit 2; }
[[ $LAT_ITERS =~ ^[1-9][0-9]*$ ]] || { echo "verbs_compare: LAT_ITERS must be a positive integer" >&2; exit 2; }
WHY_LABEL=1   # this script's failure reasons start "LABEL: "
pick_addr_pair

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
build_rel_if_missing
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

# ---------------------------------------------------------------- perftest output
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

run_rounds

# ---------------------------------------------------------------- report
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
