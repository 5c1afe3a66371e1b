#!/usr/bin/env bash
# Faults between two `srdma perf` processes on loopback addresses:
#  (a) a soak: write_bw, read_bw and send_bw with --verify at --mtu 1024,
#      sizes 1, 4095, 64 KiB and 1 MiB (256 KiB in sanitizer builds), both
#      processes sending through an impaired link (loss, reorder,
#      duplication): every run exits 0 with every byte checked, and the
#      transport did retransmit;
#  (b) a peer killed with SIGKILL mid-transfer: a client whose server dies
#      ends with "transport retry counter exceeded", non-zero, within a
#      bound; a server whose client dies exits non-zero, with an error
#      line, within the same bound.
# Measured times are printed.
#
#   process_faults_test.sh SRDMA   (PP_KEEP=1 keeps the logs)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/perf_processes.sh source-path=SCRIPTDIR
source "$here/perf_processes.sh"
pp_init "${1:?usage: process_faults_test.sh SRDMA}"

# Addresses and ports of this run's own, so that parallel runs do not meet:
# 127.X.Y.1 and 127.X.Y.2 (all of 127/8 is on lo), TCP ports from the PID.
net=127.$((RANDOM % 200 + 20)).$(($$ % 250 + 1))
ip_a=$net.1
ip_b=$net.2
port_base=$((20000 + ($$ % 1000) * 32))
port_next=0
next_port() {
  PORT=$((port_base + port_next % 32))
  port_next=$((port_next + 1))
}
echo "server $ip_a, client $ip_b, TCP ports from $port_base"
limit=60      # any one client run, seconds
kill_bound=10 # a killed peer's survivor must exit within this, seconds

# ---------------------------------------------------------------------------
echo "--- (a) soak: --verify --mtu 1024, both sides impaired (loss 2%, reorder 2%, dup 1%)"
# A sanitizer build moves a few MiB/s: a 1 MiB WRITE (1024 packets, acked at
# its end) would take longer than the QP's 67 ms ACK timeout, and the
# timeouts, not the impairment, would decide the run. There the biggest
# message is 256 KiB, and even that (256 packets, and go-back-N resending
# them after each loss) can outlast 67 ms seven times running on a busy
# 2-core host under TSan: the QPs there wait 1.07 s (-u 18, as a slow
# network's would) before they resend.
if ((PP_SLOW)); then
  small_n=20 big_n=2 sizes=(1 4095 65536 262144) qp_timeout=18
else
  small_n=60 big_n=6 sizes=(1 4095 65536 1048576) qp_timeout=14
fi
retrans_total=0 lost_total=0
runs=0 soak_failed=0
printf '  %-9s %8s %6s %6s %9s %15s %9s %9s\n' test bytes iters ms impair-lost retransmissions timeouts seq_naks
# The impairment's seeds: the server's run k uses SEED+2k, its client
# SEED+2k+1 (PP_SEED=N repeats a run's draws; timing still varies).
seed=${PP_SEED:-$((RANDOM * 8))}
echo "  impairment seeds from $seed"
seed=$((seed - 2))
for t in write_bw read_bw send_bw; do
  for s in "${sizes[@]}"; do
    n=$small_n
    ((s < 262144)) || n=$big_n
    next_port
    seed=$((seed + 2))
    name=soak-$t-$s
    json_c=$PP_TMP/$name.client.json
    json_s=$PP_TMP/$name.server.json
    common=("$t" --verify -s "$s" -n "$n" --mtu 1024 -u "$qp_timeout" --copy-ms 0 -p "$PORT")
    runs=$((runs + 1))
    before=$PP_FAILS
    if pp_pair "$name" "$limit" \
      "$PP_BIN" perf "${common[@]}" --ip "$ip_a" --impair "loss=0.02,reorder=0.02,dup=0.01,seed=$seed" \
      --json "$json_s" :: \
      "$PP_BIN" perf "${common[@]}" --ip "$ip_b" --impair "loss=0.02,reorder=0.02,dup=0.01,seed=$((seed + 1))" \
      --json "$json_c" "$ip_a"; then
      if [[ ! -s $json_c ]]; then
        pp_fail "$name: the client wrote no JSON"
        continue
      fi
      # The counters of both devices, from whichever JSON holds them (the
      # client's transport section; the server's own file if it writes one).
      r=$(pp_json_sum "$json_c" retransmissions) to=$(pp_json_sum "$json_c" timeouts)
      sn=$(pp_json_sum "$json_c" seq_naks_received)
      if [[ -s $json_s ]] && ! grep -q '"server"' "$json_c"; then
        r=$((r + $(pp_json_sum "$json_s" retransmissions)))
        to=$((to + $(pp_json_sum "$json_s" timeouts)))
        sn=$((sn + $(pp_json_sum "$json_s" seq_naks_received)))
      fi
      # The impairment applied: packets dropped by the impaired link
      # ("impair": {"dropped": N, ...}, the only numeric "dropped").
      lost=$(pp_json_sum "$json_c" dropped)
      [[ -s $json_s ]] && ! grep -q '"server"' "$json_c" && lost=$((lost + $(pp_json_sum "$json_s" dropped)))
      lost_total=$((lost_total + lost))
      retrans_total=$((retrans_total + r))
      printf '  %-9s %8s %6s %6s %11s %15s %9s %9s\n' "$t" "$s" "$n" "$PP_CLIENT_MS" "$lost" "$r" "$to" "$sn"
      while read -r v; do
        [[ $v == "$n" ]] || pp_fail "$name: JSON \"iterations\": $v, expected $n"
      done < <(pp_json_values "$json_c" iterations)
      grep -q '"retransmissions"' "$json_c" ||
        pp_fail "$name: no transport counters (\"retransmissions\") in the client's JSON"
    fi
    ((PP_FAILS == before)) || soak_failed=$((soak_failed + 1))
  done
done
if ((lost_total == 0)); then
  pp_fail "the impaired links dropped nothing in $runs runs: did --impair apply?"
elif ((retrans_total > 0)); then
  if ((soak_failed == 0)); then
    echo "ok   $runs impaired --verify runs, every one exit 0; $lost_total packets dropped by the impairment, $retrans_total retransmissions"
  else
    echo "     $soak_failed of $runs impaired --verify runs failed (above); the rest: $lost_total packets dropped by the impairment, $retrans_total retransmissions"
  fi
else
  pp_fail "no retransmissions in any of $runs impaired runs: did the impairment apply, did recovery run?"
fi

# ---------------------------------------------------------------------------
# start_long NAME: a server and a client on a long write_bw (-D 30), the
# client past its report header (connected, about to move data; the tool
# flushes its output there). Sets SRV_PID and CLI_PID; non-zero after a
# failure.
start_long() {
  local name=$1 r=0
  next_port
  # -t 16, not the default 128: this is about a peer's death, not about
  # how the link copes with 8 MiB in flight.
  local -a common=(write_bw -D 30 -t 16 --copy-ms 0 -p "$PORT")
  pp_start_server "$name.server" "$PP_BIN" perf "${common[@]}" --ip "$ip_a" || return 1
  SRV_PID=$PP_SERVER_PID
  pp_start "$name.client" "$PP_BIN" perf "${common[@]}" --ip "$ip_b" "$ip_a"
  CLI_PID=$PP_PID
  pp_wait_output "$PP_TMP/$name.client.out" "#bytes" 15 "$CLI_PID" || r=$?
  if ((r != 0)); then
    if ((r == 1)); then
      pp_fail "$name: no report header ('#bytes') from the client within 15 s (is stdout flushed after the header?)"
    else
      pp_fail "$name: the client exited before its report header"
    fi
    pp_show "$name.client"
    pp_show "$name.server"
    pp_kill "$CLI_PID"
    pp_kill "$SRV_PID"
    return 1
  fi
  # Both still running: the header can also come out as a client exits.
  local who
  for who in client server; do
    local pid=$CLI_PID
    [[ $who == server ]] && pid=$SRV_PID
    if ! pp_alive "$pid"; then
      pp_wait_exit "$pid" 1 || true
      pp_fail "$name: the $who exited (status $PP_RC) before anything was killed, in a 30 s run"
      pp_show "$name.$who"
      pp_kill "$CLI_PID"
      pp_kill "$SRV_PID"
      return 1
    fi
  done
}

echo "--- (b) kill -9 the server mid-transfer: the client must fail, not hang"
if start_long kill-server; then
  t0=$(pp_now_us)
  kill -9 "$SRV_PID" 2>/dev/null || true
  pp_wait_exit "$SRV_PID" 5 || true
  if pp_wait_exit "$CLI_PID" "$kill_bound"; then
    ms=$((($(pp_now_us) - t0) / 1000)) rc=$PP_RC
    err=$(cat "$PP_TMP/kill-server.client.err")
    echo "  the client exited $rc, ${ms} ms after the server was killed: $(grep -m1 'srdma: E' <<<"$err" || true)"
    if ((rc == 0)); then
      pp_fail "kill-server: the client exited 0 after losing its server"
    elif ((rc >= 128)); then
      pp_fail "kill-server: the client died of signal $((rc - 128))"
      pp_show kill-server.client
    elif [[ $err != *"transport retry counter exceeded"* ]]; then
      pp_fail "kill-server: the client's stderr lacks 'transport retry counter exceeded'"
      pp_show kill-server.client
    else
      echo "ok   kill -9 server: client ended in ${ms} ms (bound ${kill_bound} s) with the retry counter exceeded"
    fi
    pp_sanitizer_clean kill-server.client || true
  else
    pp_fail "kill-server: the client was still running ${kill_bound} s after its server was killed (hang)"
    pp_show kill-server.client
    pp_kill "$CLI_PID"
  fi
fi

echo "--- (b) kill -9 the client mid-transfer: the server must exit, not hang"
if start_long kill-client; then
  t0=$(pp_now_us)
  kill -9 "$CLI_PID" 2>/dev/null || true
  pp_wait_exit "$CLI_PID" 5 || true
  if pp_wait_exit "$SRV_PID" "$kill_bound"; then
    ms=$((($(pp_now_us) - t0) / 1000)) rc=$PP_RC
    err=$(cat "$PP_TMP/kill-client.server.err")
    how=$(grep -m1 'srdma: E' <<<"$err" || true)
    echo "  the server exited $rc, ${ms} ms after the client was killed: ${how:-(nothing on stderr)}"
    if ((rc >= 128)); then
      pp_fail "kill-client: the server died of signal $((rc - 128))"
      pp_show kill-client.server
    elif ((rc == 0)) || [[ -z $how ]]; then
      pp_fail "kill-client: the server exited $rc without an error line: its run was cut short"
      pp_show kill-client.server
    else
      echo "ok   kill -9 client: server exited $rc in ${ms} ms (bound ${kill_bound} s)"
    fi
    pp_sanitizer_clean kill-client.server || true
  else
    pp_fail "kill-client: the server was still running ${kill_bound} s after its client was killed (hang)"
    pp_show kill-client.server
    pp_kill "$SRV_PID"
  fi
fi

pp_finish
