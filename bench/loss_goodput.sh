#!/usr/bin/env bash
# loss_goodput.sh: srdma write_bw 64 KiB under packet loss against the same
# binary's clean rate, in process and across processes, one run, the cases
# alternating over R rounds.
#
#   bench/loss_goodput.sh [-r ROUNDS] [-k]
#
#   -r N   rounds (default $ROUNDS or 3); each round runs every case once,
#          the order rotated by one each round
#   -k     keep the logs directory (it is always kept when a case failed)
#
# Environment:
#   SRDMA       the srdma binary (default build/rel/srdma, built when missing);
#               copied once at the start
#   MTUS        path MTUs (default "4096 1024")
#   LOSSES      loss rates (default "0.001 0.01 0.05"); 0 (clean) is always run
#   MODES       "inproc across" (default both)
#   SECONDS_PER each run's duration, perf's -D (default 2)
#   VERIFY      1: every run with --verify (one WR in flight per QP, each
#               checked: a test of correctness more than of goodput)
#   ROUNDS, TRIES as in bench/lib.sh
#
# Every case is `srdma perf write_bw -s 65536 --mtu M -D S [--impair
# loss=P,seed=N]` (with VERIFY=1 also --verify: every WR moves a pattern of
# its own, checked on completion). Across
# processes both sides send through the impaired link, server on IP_A and
# client on IP_B (RoCEv2 on lo, SRDMA_SAME_HOST=0). A run that ends in an
# error (RETRY_EXC_ERR, a verify mismatch) is missing, never zero.
#
# The targets (issue 38): goodput at 0.1% loss >= 0.9x clean, at 1% >= 0.5x,
# at 5% >= 0.2x, in process and across processes, at MTU 4096 and 1024.

set -u -o pipefail
NAME=loss_goodput
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
parse_opts "$@"
MTUS=${MTUS:-"4096 1024"}
LOSSES=${LOSSES:-"0.001 0.01 0.05"}
MODES=${MODES:-"inproc across"}
SECONDS_PER=${SECONDS_PER:-2}
VERIFY=${VERIFY:-0}
export SRDMA_SAME_HOST=0

WORK=$(mktemp -d "${TMPDIR:-/tmp}/loss_goodput.XXXXXX") || { echo "$NAME: mktemp failed" >&2; exit 2; }
SRDMA=${SRDMA:-$ROOT/build/rel/srdma}
VERBS_LIB=${VERBS_LIB:-$ROOT/build/rel/lib/softrdma}
if [[ ! -x $SRDMA ]]; then
  [[ $SRDMA == "$ROOT/build/rel/srdma" ]] || { echo "$NAME: SRDMA=$SRDMA is not an executable" >&2; exit 2; }
  [[ -f $ROOT/build/rel/build.ninja ]] || cmake -S "$ROOT" -B "$ROOT/build/rel" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    >"$WORK/cmake.log" 2>&1 || { echo "$NAME: cmake failed (log: $WORK/cmake.log)" >&2; FAILED_ANY=1; exit 2; }
  ninja -C "$ROOT/build/rel" srdma >"$WORK/ninja.log" 2>&1 \
    || { echo "$NAME: ninja failed (log: $WORK/ninja.log)" >&2; FAILED_ANY=1; exit 2; }
fi
cp "$SRDMA" "$WORK/srdma" || { echo "$NAME: cannot copy $SRDMA" >&2; exit 2; }
SRDMA_DESC="$SRDMA ($(stat -c '%y' "$SRDMA" | cut -d. -f1))"
SRDMA=$WORK/srdma
pick_addr_pair

# The cases: MODE_MTU_LOSS, each a measurement of its own (m_<key>).
MEAS=()
declare -A KEYS CASE_MODE CASE_MTU CASE_LOSS
for mode in $MODES; do
  for mtu in $MTUS; do
    for loss in 0 $LOSSES; do
      k=${mode}_${mtu}_${loss//./p}
      MEAS+=("$k"); KEYS[$k]=$k
      CASE_MODE[$k]=$mode CASE_MTU[$k]=$mtu CASE_LOSS[$k]=$loss
      eval "m_$k() { measure $k \"\$@\"; }"
    done
  done
done

measure() {
  local k=$1 r=$2 t=$3 d=$WORK/$1.r$2.t$3 v impair=()
  local mtu=${CASE_MTU[$k]} loss=${CASE_LOSS[$k]}
  [[ $loss != 0 ]] && impair=(--impair "loss=$loss,seed=$((r * 10 + t))")
  local common=(-s 65536 --mtu "$mtu" -D "$SECONDS_PER" --copy-ms 0 "${impair[@]}")
  ((VERIFY)) && common+=(--verify)
  if [[ ${CASE_MODE[$k]} == inproc ]]; then
    if ! timeout -k 5 $((SECONDS_PER * 10 + 30)) "$SRDMA" perf write_bw "${common[@]}" --json "$d.json" >"$d.log" 2>&1; then
      WHY="exit status $?: $(tail -n 3 "$d.log" | tr '\n' ' ')"; return 1
    fi
  else
    wait_udp_free "$IP_A" "$IP_B" || return 1
    next_port || { WHY="no free TCP port"; return 1; }
    SLOG=$d.server.log CLOG=$d.log
    SCMD=("$SRDMA" perf write_bw --ip "$IP_A" -p "$PORT" "${impair[@]}")
    CCMD=("$SRDMA" perf write_bw --ip "$IP_B" -p "$PORT" "${common[@]}" --json "$d.json" "$IP_A")
    run_pair "$k" line '^waiting for a client on' $((SECONDS_PER * 10 + 30)) || return 1
  fi
  v=$(json_get "$d.json" '.results[0].bw_avg_mib_s') && is_num "$v" \
    || { WHY="no results[0].bw_avg_mib_s in $d.json"; return 1; }
  VAL[$k,$r]=$v
  local f n=""
  for f in retransmissions timeouts tail_probes rto_expiries; do
    n+=" $f=$(json_get "$d.json" ".transport.client.$f" || echo '?')"
  done
  NOTE[$k,$r]+="${NOTE[$k,$r]:+; }client:$n"
}

run_rounds

{
  echo "# $NAME: write_bw 64 KiB under loss, against the clean rate of the same binary"
  echo
  echo "- date: $START (ended $(date -u '+%H:%M:%S UTC'))"
  echo "- cpu: $(lscpu 2>/dev/null | grep 'Model name' | sed 's/  */ /g'); $(nproc) online"
  echo "- load average: $LOAD0 at the start, $LOAD1 at the end"
  echo "- kernel: $(uname -r); srdma: $SRDMA_DESC, repo at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "- each run: write_bw -s 65536 --mtu M -D $SECONDS_PER$( ((VERIFY)) && echo ' --verify') [--impair loss=P,seed=N]; across: $IP_B -> $IP_A"
  echo
  hdr="| case | what |"; sep="| --- | --- |"
  for ((r = 1; r <= ROUNDS; r++)); do hdr+=" r$r |"; sep+=" ---: |"; done
  echo "$hdr median | unit |"; echo "$sep ---: | --- |"
  for k in "${MEAS[@]}"; do
    row "$k" srdma "${CASE_MODE[$k]}, MTU ${CASE_MTU[$k]}, loss ${CASE_LOSS[$k]}" "MiB/s" "%.1f"
  done
  echo
  echo "| ratio to clean (of medians) | value | target | |"
  echo "| --- | ---: | --- | --- |"
  for k in "${MEAS[@]}"; do
    loss=${CASE_LOSS[$k]}
    [[ $loss == 0 ]] && continue
    clean=${CASE_MODE[$k]}_${CASE_MTU[$k]}_0
    case $loss in 0.001) tgt=0.9 ;; 0.01) tgt=0.5 ;; 0.05) tgt=0.2 ;; *) tgt="" ;; esac
    a=${MEDV[$k]:-} b=${MEDV[$clean]:-}
    if [[ -z $a || -z $b ]]; then
      printf '| %s | missing | >= %s | MISSING |\n' "$k" "$tgt"; continue
    fi
    v=$(calc "$a / $b")
    verdict=""
    [[ -n $tgt ]] && verdict=$(awk -v v="$v" -v t="$tgt" 'BEGIN { print (v >= t) ? "met" : "NOT met" }')
    printf '| %s | %.3f | >= %s | %s |\n' "$k" "$v" "$tgt" "$verdict"
  done
  notes=""
  for k in "${MEAS[@]}"; do
    for ((r = 1; r <= ROUNDS; r++)); do
      [[ -n ${NOTE[$k,$r]:-} ]] && notes+="- r$r $k: ${NOTE[$k,$r]}"$'\n'
    done
  done
  [[ -n $notes ]] && { echo; echo "Transport counters (client):"; printf '%s' "$notes"; }
  if ((${#FAILS[@]})); then
    echo; echo "Missing (counted as missing, not as zero):"
    printf -- '- %s\n' "${FAILS[@]}"
    echo "Logs: $WORK"
  fi
}

exit $((FAILED_ANY ? 1 : 0))
