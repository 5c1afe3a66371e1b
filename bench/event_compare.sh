#!/usr/bin/env bash
# event_compare.sh: issue 41's targets in one run, the tools alternating
# over R rounds: rsockets (rstream on softrdma's librdmacm.so.1) against
# the kernel's TCP (iperf3) at 64 KiB, and event-driven perftest
# (ib_send_lat -e) against polled (ib_send_lat) at 2 B and 4 KiB. With
# BASE_LIB, the same rstream and ib_send_lat -e runs on a second build's
# drop-ins too (base against new, same run).
#
#   bench/event_compare.sh [-r ROUNDS] [-k]
#
#   -r N   rounds (default $ROUNDS or 3); each round runs every measurement once,
#          the order rotated by one each round
#   -k     keep the logs directory (it is always kept when a measurement failed)
#
# Environment:
#   VERBS_LIB      the directory of softrdma's libibverbs.so.1 and librdmacm.so.1
#                  (default build/rel/lib/softrdma, built with `ninja -C build/rel
#                  srdma srdma_ibverbs srdma_rdmacm` when missing)
#   BASE_LIB       another build's directory of the two (optional): "base"
#   Both are copied once at the start, so every round measures the same
#   binaries even if they are rebuilt meanwhile.
#   ROUNDS, TRIES  as in bench/lib.sh
#   RS_COUNT       rstream -C (20000 transfers of 64 KiB each way)
#   TCP_SECONDS    iperf3 -t (5)
#   LAT_ITERS      ib_send_lat -n (5000)
#   SRDMA_TEST_NET 127.X of the addresses (default: a random X)
#
# Measurements (a server on 127.X.Y.1, its client on 127.X.Y.2, one pair of
# addresses for the whole run; each softrdma process has its own RoCEv2
# device on UDP 4791):
#   rstream        rstream -T b -S 65536 -C RS_COUNT (blocking; the client's
#                  Gb/sec: 64 KiB transfers one way, then as many back, the
#                  bytes of both over the time of both)
#   iperf3         iperf3 -c -l 65536 -t TCP_SECONDS over TCP on lo, the
#                  receiver's bits per second (JSON end.sum_received)
#   lat S          ib_send_lat -s S -n LAT_ITERS, client's t_typical[usec]
#   lat_e S        the same with -e (completion events)
#
# A measurement that fails says why and counts as missing, never as zero.
# Exit status: 0 when every measurement gave a value in each round, 1
# otherwise, 2 on a usage or setup error.

set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=event_compare
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
RS_COUNT=${RS_COUNT:-20000}
TCP_SECONDS=${TCP_SECONDS:-5}
LAT_ITERS=${LAT_ITERS:-5000}
parse_opts "$@"
for v in RS_COUNT TCP_SECONDS LAT_ITERS; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "$NAME: $v must be a positive integer" >&2; exit 2; }
done
WHY_LABEL=1
pick_addr_pair

say "work in $ROOT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/event_compare.XXXXXX") || { echo "$NAME: mktemp failed" >&2; exit 2; }
for t in rstream iperf3 ib_send_lat stdbuf; do
  command -v "$t" >/dev/null 2>&1 || { echo "$NAME: no $t (apt-get install -y rdmacm-utils iperf3 perftest)" >&2; exit 2; }
done
command -v jq >/dev/null 2>&1 || command -v python3 >/dev/null 2>&1 \
  || { echo "$NAME: needs jq or python3 to read JSON" >&2; exit 2; }

SRDMA=${SRDMA:-$ROOT/build/rel/srdma}
VERBS_LIB=${VERBS_LIB:-$ROOT/build/rel/lib/softrdma}
build_rel_if_missing
if [[ ! -e $VERBS_LIB/librdmacm.so.1 ]]; then
  [[ $VERBS_LIB == "$ROOT/build/rel/lib/softrdma" ]] || { echo "$NAME: no $VERBS_LIB/librdmacm.so.1" >&2; exit 2; }
  ninja -C "$ROOT/build/rel" srdma_rdmacm >"$WORK/ninja_rdmacm.log" 2>&1 \
    || { tail -n 20 "$WORK/ninja_rdmacm.log" >&2; FAILED_ANY=1; exit 2; }
fi

# snapshot SRC_DIR DEST_DIR: the two drop-ins, taken again while one is being written
snapshot() {
  local i
  mkdir -p "$2"
  for ((i = 1; ; i++)); do
    if cp -L "$1/libibverbs.so.1" "$1/librdmacm.so.1" "$2/" 2>/dev/null \
       && LD_LIBRARY_PATH=$2 SRDMA_ADDR=$IP_A ibv_devices 2>/dev/null | grep -qw srdma0; then
      return 0
    fi
    ((i >= 10)) && { echo "$NAME: cannot take working copies from $1" >&2; FAILED_ANY=1; exit 2; }
    say "copy of $1 does not run (being rebuilt?); again in 2 s"
    sleep 2
  done
}
desc() { echo "$1 ($(stat -L -c '%y' "$1/libibverbs.so.1" | cut -d. -f1), cksum $(cat "$2/libibverbs.so.1" "$2/librdmacm.so.1" | cksum | cut -d' ' -f1))"; }
snapshot "$VERBS_LIB" "$WORK/new"
NEW_DESC=$(desc "$VERBS_LIB" "$WORK/new")
BASE_DESC=""
if [[ -n ${BASE_LIB:-} ]]; then
  snapshot "$BASE_LIB" "$WORK/base"
  BASE_DESC=$(desc "$BASE_LIB" "$WORK/base")
fi
# side LIB ADDR: the environment of a program on the drop-ins at LIB as the device at ADDR
side() { SIDE=(env "LD_LIBRARY_PATH=$1" "SRDMA_ADDR=$2" stdbuf -oL -eL); }

perftest_row() {
  awk -v c="$2" '/^ *#bytes/ { on = 1; next } on && $1 ~ /^[0-9]+$/ { print $c; exit }' "$1"
}

# ---------------------------------------------------------------- measurements
# rstream_run KEY ROUND TRY LIB
rstream_run() {
  local key=$1 r=$2 d=$WORK/r$2.$1.$3 lib=$4 v
  wait_udp_free "$IP_A" "$IP_B" || return 1
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.log
  local args=(-T b -S 65536 -C "$RS_COUNT" -p "$PORT")
  side "$lib" "$IP_A"; SCMD=("${SIDE[@]}" rstream -b "$IP_A" "${args[@]}")
  side "$lib" "$IP_B"; CCMD=("${SIDE[@]}" rstream -s "$IP_A" -b "$IP_B" "${args[@]}")
  # rstream prints its header once it listens (line-buffered by stdbuf)
  run_pair "$key" line '^name' 300 || return 1
  v=$(awk '$1 == "custom" { print $7 }' "$CLOG" | tail -n 1)
  is_num "$v" || { WHY="no custom result line with Gb/sec in $CLOG"; return 1; }
  VAL[$key,$r]=$v
  NOTE[$key,$r]+="${NOTE[$key,$r]:+; }$(awk '$1 == "custom" { print $6 " for " $5 }' "$CLOG" | tail -n 1)"
}
m_rstream() { rstream_run rstream "$1" "$2" "$WORK/new"; }
m_rstream_base() { rstream_run rstream_base "$1" "$2" "$WORK/base"; }

m_iperf3() {
  local r=$1 d=$WORK/r$1.iperf3.$2 v
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.json
  SCMD=(iperf3 -s -1 -B "$IP_A" -p "$PORT")
  CCMD=(iperf3 -c "$IP_A" -B "$IP_B" -p "$PORT" -t "$TCP_SECONDS" -l 65536 -J)
  run_pair iperf3 listen "$PORT" $((TCP_SECONDS + 60)) || return 1
  v=$(json_get "$CLOG" '.end.sum_received.bits_per_second') && is_num "$v" \
    || { WHY="no end.sum_received.bits_per_second in $CLOG"; return 1; }
  VAL[iperf3,$r]=$(calc "$v / 1e9")
}

# lat_run KEY ROUND TRY LIB SIZE [-e]
lat_run() {
  local key=$1 r=$2 d=$WORK/r$2.$1.$3 lib=$4 size=$5 v
  shift 5
  wait_udp_free "$IP_A" "$IP_B" || return 1
  next_port || { WHY="no free TCP port"; return 1; }
  SLOG=$d.server.log CLOG=$d.client.log
  side "$lib" "$IP_A"; SCMD=("${SIDE[@]}" ib_send_lat -s "$size" -n "$LAT_ITERS" -p "$PORT" "$@")
  side "$lib" "$IP_B"; CCMD=("${SIDE[@]}" ib_send_lat -s "$size" -n "$LAT_ITERS" -p "$PORT" "$@" "$IP_A")
  run_pair "$key" listen "$PORT" 120 || return 1
  v=$(perftest_row "$CLOG" 5) && is_num "$v" && awk -v v="$v" 'BEGIN { exit !(v > 0) }' \
    || { WHY="no t_typical[usec] > 0 in the client's result row ($CLOG)"; return 1; }
  VAL[$key,$r]=$v
  NOTE[$key,$r]+="${NOTE[$key,$r]:+; }avg $(perftest_row "$CLOG" 6) us, 99% $(perftest_row "$CLOG" 8) us"
}
m_lat2() { lat_run lat2 "$1" "$2" "$WORK/new" 2; }
m_lat2e() { lat_run lat2e "$1" "$2" "$WORK/new" 2 -e; }
m_lat4k() { lat_run lat4k "$1" "$2" "$WORK/new" 4096; }
m_lat4ke() { lat_run lat4ke "$1" "$2" "$WORK/new" 4096 -e; }
m_lat2e_base() { lat_run lat2e_base "$1" "$2" "$WORK/base" 2 -e; }
m_lat4ke_base() { lat_run lat4ke_base "$1" "$2" "$WORK/base" 4096 -e; }

MEAS=(rstream iperf3 lat2 lat2e lat4k lat4ke)
[[ -n $BASE_DESC ]] && MEAS=(rstream rstream_base iperf3 lat2 lat2e lat2e_base lat4k lat4ke lat4ke_base)
declare -A KEYS=()
for m in "${MEAS[@]}"; do KEYS[$m]=$m; done

run_rounds

# ---------------------------------------------------------------- report
ratio_line() {  # label num den target
  local a=${MEDV[$2]:-} b=${MEDV[$3]:-}
  if [[ -z $a || -z $b ]] || awk -v b="$b" 'BEGIN { exit !(b == 0) }'; then
    printf '| %s | missing | %s |\n' "$1" "$4"; return
  fi
  printf '| %s | %.3f | %s |\n' "$1" "$(calc "$a / $b")" "$4"
}
{
  echo "# event_compare: rstream vs iperf3 (TCP), ib_send_lat -e vs ib_send_lat, cross-process on lo"
  echo
  echo "- date: $START (ended $(date -u '+%H:%M:%S UTC'))"
  echo "- cpu: $(lscpu 2>/dev/null | grep 'Model name' | sed 's/  */ /g' || echo 'lscpu failed'); $(nproc) online"
  echo "- load average: $LOAD0 at the start, $LOAD1 at the end"
  echo "- kernel: $(uname -r); repo at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- src include 2>/dev/null || echo ' (with uncommitted changes under src/ or include/)')"
  echo "- new: $NEW_DESC"
  [[ -n $BASE_DESC ]] && echo "- base: $BASE_DESC"
  echo "- addresses $IP_A (servers), $IP_B (clients); rounds: $ROUNDS, the order rotated each round: ${MEAS[*]}"
  echo
  hdr="| tool | what |" sep="| --- | --- |"
  for ((r = 1; r <= ROUNDS; r++)); do hdr+=" r$r |"; sep+=" ---: |"; done
  echo "$hdr median | unit |"; echo "$sep ---: | --- |"
  row rstream      new  "rstream -T b -S 65536 -C $RS_COUNT (client's Gb/sec)" "Gb/s" "%.2f"
  [[ -n $BASE_DESC ]] && row rstream_base base "the same" "Gb/s" "%.2f"
  row iperf3       TCP  "iperf3 -l 65536 -t $TCP_SECONDS (receiver)" "Gb/s" "%.2f"
  row lat2         new  "ib_send_lat -s 2 -n $LAT_ITERS (t_typical)" "µs" "%.2f"
  row lat2e        new  "ib_send_lat -e -s 2 -n $LAT_ITERS" "µs" "%.2f"
  [[ -n $BASE_DESC ]] && row lat2e_base base "ib_send_lat -e -s 2 -n $LAT_ITERS" "µs" "%.2f"
  row lat4k        new  "ib_send_lat -s 4096 -n $LAT_ITERS" "µs" "%.2f"
  row lat4ke       new  "ib_send_lat -e -s 4096 -n $LAT_ITERS" "µs" "%.2f"
  [[ -n $BASE_DESC ]] && row lat4ke_base base "ib_send_lat -e -s 4096 -n $LAT_ITERS" "µs" "%.2f"
  echo
  echo "| ratio (of medians) | value | target |"
  echo "| --- | ---: | --- |"
  ratio_line "rstream / iperf3 TCP, 64 KiB" rstream iperf3 ">= 2"
  [[ -n $BASE_DESC ]] && ratio_line "base rstream / iperf3 TCP" rstream_base iperf3 ""
  ratio_line "ib_send_lat -e / polled, 2 B" lat2e lat2 "<= 2"
  ratio_line "ib_send_lat -e / polled, 4 KiB" lat4ke lat4k "<= 2"
  if [[ -n $BASE_DESC ]]; then
    ratio_line "base ib_send_lat -e / new polled, 2 B" lat2e_base lat2 ""
    ratio_line "base ib_send_lat -e / new polled, 4 KiB" lat4ke_base lat4k ""
  fi
  notes=""
  for k in "${MEAS[@]}"; do
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
