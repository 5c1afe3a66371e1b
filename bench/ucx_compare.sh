#!/usr/bin/env bash
# ucx_compare.sh: UCX's ucx_perftest over softrdma's libibverbs.so.1
# (rc_verbs) against `srdma perf` between the same two addresses, side by
# side in one run, the tools alternating over R rounds: issue 35's UCX
# targets (ucp_put_bw at 64 KiB >= 0.9x srdma perf write_bw at 64 KiB;
# ucp_am_lat at 8 B <= 1.2x srdma perf send_lat).
#
#   bench/ucx_compare.sh [-r ROUNDS] [-k]
#
#   -r N   rounds (default $ROUNDS or 3); each round runs every measurement once,
#          the order rotated by one each round
#   -k     keep the logs directory (it is always kept when a measurement failed)
#
# Environment:
#   SRDMA          the srdma binary (default build/rel/srdma under the repo root)
#   VERBS_LIB      the directory of softrdma's libibverbs.so.1 (default
#                  build/rel/lib/softrdma); both built with
#                  `ninja -C build/rel srdma srdma_ibverbs` when missing and
#                  copied once at the start.
#   ROUNDS, TRIES  as in bench/lib.sh
#   BW_ITERS       -n of both bandwidth tests (20000: about a second)
#   LAT_ITERS      -n of both latency tests (20000)
#
# Measurements (a server on 127.X.Y.1 and its client on 127.X.Y.2, each
# process its own RoCEv2 device on UDP 4791; UCX with UCX_NET_DEVICES=srdma0:1
# and UCX_TLS=rc_verbs,ud_verbs:aux,self, so nothing but softrdma carries
# it; UCX needs /dev/infiniband/srdma0, `srdma devnode`):
#   ucx put_bw   ucx_perftest -t ucp_put_bw -s 65536 -n BW_ITERS: the client's
#                "Final:" average bandwidth (UCX's MB/s are MiB/s)
#   srdma bw     srdma perf write_bw -s 65536 -n BW_ITERS (its defaults):
#                bw_avg_mib_s
#   ucx am_lat   ucx_perftest -t ucp_am_lat -s 8 -n LAT_ITERS: the client's
#                "Final:" 50th percentile (half the round trip)
#   srdma lat    srdma perf send_lat -s 8 -n LAT_ITERS (its defaults):
#                t_p50_us
#
# A measurement that fails says why and counts as missing, never as zero.
# Exit status: 0 when every measurement gave a value in each round, 1
# otherwise, 2 on a usage or setup error.

set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=ucx_compare
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
BW_ITERS=${BW_ITERS:-20000}
LAT_ITERS=${LAT_ITERS:-20000}
parse_opts "$@"
[[ $BW_ITERS =~ ^[1-9][0-9]*$ && $LAT_ITERS =~ ^[1-9][0-9]*$ ]] \
  || { echo "ucx_compare: BW_ITERS and LAT_ITERS must be positive integers" >&2; exit 2; }
WHY_LABEL=1
pick_addr_pair

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ucx_compare.XXXXXX") || { echo "ucx_compare: mktemp failed" >&2; exit 2; }
command -v ucx_perftest >/dev/null 2>&1 || { echo "ucx_compare: no ucx_perftest (apt-get install -y ucx-utils)" >&2; exit 2; }
[[ -c /dev/infiniband/srdma0 ]] || { echo "ucx_compare: no /dev/infiniband/srdma0: run \`sudo srdma devnode\` once" >&2; exit 2; }

SRDMA=${SRDMA:-$ROOT/build/rel/srdma}
VERBS_LIB=${VERBS_LIB:-$ROOT/build/rel/lib/softrdma}
build_rel_if_missing
# One snapshot of each for the whole run.
LIB=$WORK/lib
mkdir -p "$LIB"
if ! cp "$SRDMA" "$WORK/srdma" || ! cp -L "$VERBS_LIB/libibverbs.so.1" "$LIB/libibverbs.so.1"; then
  echo "ucx_compare: cannot copy $SRDMA and $VERBS_LIB/libibverbs.so.1" >&2; exit 2
fi
SRDMA_DESC="$SRDMA ($(stat -L -c '%y' "$SRDMA" | cut -d. -f1))"
SRDMA=$WORK/srdma
UCX_ENV=(UCX_NET_DEVICES=srdma0:1 "UCX_TLS=rc_verbs,ud_verbs:aux,self" UCX_WARN_UNUSED_ENV_VARS=n)
UCX_A=(env "LD_LIBRARY_PATH=$LIB" "SRDMA_ADDR=$IP_A" "${UCX_ENV[@]}")
UCX_B=(env "LD_LIBRARY_PATH=$LIB" "SRDMA_ADDR=$IP_B" "${UCX_ENV[@]}")

# ucx_final LOG COLUMN: COLUMN of the "Final:" row (2 iterations, 3 the 50th
# percentile, 4 average, 5 overall latency, 6 average bandwidth, 7 overall).
ucx_final() { awk -v c="$2" '$1 == "Final:" { print $c; exit }' "$1"; }

# ucx_run KEY ROUND TRY TEST SIZE ITERS COLUMN
ucx_run() {
  local key=$1 r=$2 d=$WORK/r$2.$1.$3 v
  wait_udp_free "$IP_A" "$IP_B" || return 1
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.log
  SCMD=("${UCX_A[@]}" ucx_perftest -p "$PORT")
  CCMD=("${UCX_B[@]}" ucx_perftest "$IP_A" -p "$PORT" -t "$4" -s "$5" -n "$6")
  run_pair "$key" listen "$PORT" 120 || return 1
  v=$(ucx_final "$CLOG" "$7") && is_num "$v" && awk -v v="$v" 'BEGIN { exit !(v > 0) }' \
    || { WHY="no Final: value > 0 in column $7 of the client's output ($CLOG)"; return 1; }
  VAL[$key,$r]=$v
}
m_ucx_bw() { ucx_run ucx_bw "$1" "$2" ucp_put_bw 65536 "$BW_ITERS" 6; }
m_ucx_lat() { ucx_run ucx_lat "$1" "$2" ucp_am_lat 8 "$LAT_ITERS" 3; }

# srdma_run KEY ROUND TRY JSONPATH perf-args...
srdma_run() {
  local key=$1 r=$2 d=$WORK/r$2.$1.$3 path=$4 v
  shift 4
  wait_udp_free "$IP_A" "$IP_B" || return 1
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.log
  SCMD=("$SRDMA" perf "$@" -p "$PORT" --ip "$IP_A" --json "$d.server.json")
  CCMD=("$SRDMA" perf "$@" -p "$PORT" --ip "$IP_B" --json "$d.client.json" "$IP_A")
  run_pair "$key" line '^waiting for a client on' 120 || return 1
  v=$(json_get "$d.client.json" "$path") && is_num "$v" || { WHY="no $path in $d.client.json"; return 1; }
  VAL[$key,$r]=$v
}
m_srdma_bw() { srdma_run srdma_bw "$1" "$2" '.results[0].bw_avg_mib_s' write_bw -s 65536 -n "$BW_ITERS"; }
m_srdma_lat() { srdma_run srdma_lat "$1" "$2" '.results[0].t_p50_us' send_lat -s 8 -n "$LAT_ITERS"; }

MEAS=(ucx_bw srdma_bw ucx_lat srdma_lat)
declare -A KEYS=([ucx_bw]=ucx_bw [srdma_bw]=srdma_bw [ucx_lat]=ucx_lat [srdma_lat]=srdma_lat)
run_rounds

ratio_line() {  # label num den target
  local a=${MEDV[$2]:-} b=${MEDV[$3]:-}
  if [[ -z $a || -z $b ]]; then printf '| %s | missing | %s |\n' "$1" "$4"; return; fi
  printf '| %s | %.3f | %s |\n' "$1" "$(calc "$a / $b")" "$4"
}
{
  echo "# ucx_compare: UCX (rc_verbs) on softrdma's libibverbs.so.1 vs srdma perf, cross-process on lo"
  echo
  echo "- date: $START (ended $(date -u '+%H:%M:%S UTC'))"
  echo "- cpu: $(lscpu 2>/dev/null | grep 'Model name' | sed 's/  */ /g'); $(nproc) online"
  echo "- load average: $LOAD0 at the start, $LOAD1 at the end"
  echo "- repo at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'); srdma: $SRDMA_DESC"
  echo "- ucx: $(dpkg-query -W -f '${Version}' ucx-utils 2>/dev/null || echo '?'); addresses $IP_A (servers), $IP_B (clients)"
  echo "- rounds: $ROUNDS, the order rotated each round: ${MEAS[*]}"
  echo
  hdr="| tool | what |"; sep="| --- | --- |"
  for ((r = 1; r <= ROUNDS; r++)); do hdr+=" r$r |"; sep+=" ---: |"; done
  echo "$hdr median | unit |"; echo "$sep ---: | --- |"
  row ucx_bw   ucx   "ucp_put_bw -s 65536 -n $BW_ITERS (Final: average)" "MiB/s" "%.1f"
  row srdma_bw srdma "perf write_bw -s 65536 -n $BW_ITERS (bw_avg_mib_s)" "MiB/s" "%.1f"
  row ucx_lat  ucx   "ucp_am_lat -s 8 -n $LAT_ITERS (Final: 50th percentile)" "µs" "%.2f"
  row srdma_lat srdma "perf send_lat -s 8 -n $LAT_ITERS (t_p50_us)" "µs" "%.2f"
  echo
  echo "| ratio (of medians) | value | target |"
  echo "| --- | ---: | --- |"
  ratio_line "ucp_put_bw / srdma perf write_bw, 64 KiB" ucx_bw srdma_bw ">= 0.9"
  ratio_line "ucp_am_lat / srdma perf send_lat, 8 B" ucx_lat srdma_lat "<= 1.2"
  if ((${#FAILS[@]})); then
    echo; echo "Missing (counted as missing, not as zero):"
    printf -- '- %s\n' "${FAILS[@]}"
    echo "Logs: $WORK"
  fi
}
exit $((FAILED_ANY ? 1 : 0))
