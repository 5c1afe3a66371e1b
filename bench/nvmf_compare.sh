#!/usr/bin/env bash
# bench/nvmf_compare.sh: the seeds' table across processes. A target process
# (`srdma nvmf target`) serves a host process (`srdma blk bench --connect`)
# over RoCEv2 on loopback, once with private CQs on both sides and once
# with the shared CQ pool on both sides, alternating the order each round;
# prints the medians of both sides' interrupts/s and CPU per I/O and the
# host's IOPS and latency, with pool/private ratios.
#
#   bench/nvmf_compare.sh [-r ROUNDS] [-k]
#     -r ROUNDS  rounds (default 3); -k keep the logs
#   Environment: SRDMA (the binary, default build/rel/srdma), CONTROLLERS
#     (4), QUEUES (2), QD (32), RUNTIME (5 s), RW (randread), BS (4096),
#     SIZE (256 MiB)
#
# The target's side comes from the line it logs when SIGTERM stops it
# (interrupts, CPU seconds), so each mode gets a target process of its own.
set -u -o pipefail
NAME=nvmf_compare
cd "$(dirname "$0")/.."
source bench/lib.sh
parse_opts "$@"
SRDMA=${SRDMA:-build/rel/srdma}
[[ -x $SRDMA ]] || { echo "$NAME: no srdma binary at '$SRDMA' (build first)" >&2; exit 2; }
CONTROLLERS=${CONTROLLERS:-4}
QUEUES=${QUEUES:-2}
QD=${QD:-32}
RUNTIME=${RUNTIME:-5}
RW=${RW:-randread}
BS=${BS:-4096}
SIZE=${SIZE:-$((256 << 20))}
NQN=nqn.2026-12.io.softrdma:compare
WORK=$(mktemp -d)
net=127.$((RANDOM % 200 + 20)).$(($$ % 250 + 1))
T_IP=$net.1
H_IP=$net.2

# run_mode ROUND MODE: one target process and one host run; fills VAL.
run_mode() {
  local round=$1 mode=$2 tlog=$WORK/target.$1.$2 json=$WORK/host.$1.$2.json hlog=$WORK/host.$1.$2.log
  local flags=() tpid line
  [[ $mode == private ]] && flags=(--private-cqs)
  "$SRDMA" nvmf target --ip "$T_IP" --nqn "$NQN" --size "$SIZE" "${flags[@]}" >"$tlog" 2>&1 &
  tpid=$!
  PIDS+=("$tpid")
  local deadline=$(($(date +%s) + 15))
  until grep -q "listening on" "$tlog"; do
    alive "$tpid" && (($(date +%s) < deadline)) || { say "the $mode target did not start: $(tail -2 "$tlog")"; return 1; }
    sleep 0.05
  done
  if ! "$SRDMA" blk bench --connect "$T_IP" --ip "$H_IP" --nqn "$NQN" --cq "$mode" --controllers "$CONTROLLERS" \
      --queues "$QUEUES" --qd "$QD" --runtime "$RUNTIME" --rw "$RW" --bs "$BS" --size "$SIZE" --no-progress \
      --json "$json" >"$hlog" 2>&1; then
    say "blk bench ($mode) failed: $(tail -3 "$hlog")"
    kill "$tpid" 2>/dev/null
    return 1
  fi
  kill -TERM "$tpid"
  wait_exit "$tpid" 20
  line=$(grep -o "stopped: .*" "$tlog") || { say "the $mode target logged no totals"; return 1; }
  local m=".modes.$mode" ios iops
  ios=$(json_get "$json" "$m.ios") && iops=$(json_get "$json" "$m.iops") || { say "no $mode results"; return 1; }
  local secs t_irq t_cpu
  secs=$(calc "$ios / $iops")
  t_irq=$(sed -E 's/.*interrupts=([0-9]+).*/\1/' <<<"$line")
  t_cpu=$(sed -E 's/.*cpu_s=([0-9.]+).*/\1/' <<<"$line")
  VAL[$mode.iops,$round]=$iops
  VAL[$mode.lat_p50,$round]=$(json_get "$json" "$m.lat_p50_us")
  VAL[$mode.lat_p99,$round]=$(json_get "$json" "$m.lat_p99_us")
  VAL[$mode.host_irq,$round]=$(json_get "$json" "$m.interrupts_per_s")
  VAL[$mode.host_cpu,$round]=$(json_get "$json" "$m.cpu_us_per_io")
  VAL[$mode.host_cqs,$round]=$(json_get "$json" "$m.cq_footprint.cqs")
  VAL[$mode.target_irq,$round]=$(calc "$t_irq / $secs")
  VAL[$mode.target_cpu,$round]=$(calc "$t_cpu * 1e6 / $ios")
  say "round $round $mode: $(printf '%.0f' "$iops") IOPS, target $t_irq interrupts, ${t_cpu} s CPU"
}

say "target $T_IP, host $H_IP, $CONTROLLERS controllers x $QUEUES queues, qd $QD, $BS B $RW, $RUNTIME s, $ROUNDS rounds"
say "$(lscpu | grep -m1 'Model name' | tr -s ' '), load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 1; r <= ROUNDS; r++)); do
  order=(private pool)
  ((r % 2 == 0)) && order=(pool private)
  for mode in "${order[@]}"; do
    run_mode "$r" "$mode" || { FAILED_ANY=1; exit 1; }
  done
done

med() {  # med KEY: the median over the rounds
  local vals=() r
  for ((r = 1; r <= ROUNDS; r++)); do vals+=("${VAL[$1,$r]}"); done
  median "${vals[@]}"
}
printf '\n| %-28s | %12s | %12s | %12s |\n' "median of $ROUNDS rounds" private pool pool/private
printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..30})" "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..14})"
for k in "iops:host IOPS" "lat_p50:host latency p50 (us)" "lat_p99:host latency p99 (us)" \
    "host_irq:host interrupts/s" "target_irq:target interrupts/s" "host_cpu:host CPU us per I/O" \
    "target_cpu:target CPU us per I/O" "host_cqs:host CQs"; do
  key=${k%%:*}
  a=$(med "private.$key")
  b=$(med "pool.$key")
  printf '| %-28s | %12.1f | %12.1f | %11.2fx |\n' "${k#*:}" "$a" "$b" "$(calc "$b / $a")"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
