#!/usr/bin/env bash
# The srdma tools over RoCEv2 on IPv6, between processes on ::1 (IPv6
# loopback has one address: every device of the run is on ::1 at this run's
# own RoCEv2 port, SRDMA_PORT, steered as a host's processes are):
#  - srdma info --ip ::1: GID 0 is ::1 itself, not IPv4-mapped;
#  - srdma perf write_bw --verify and send_lat, a server and a client
#    process, the side channel on TCP over IPv6: both exit 0, every WRITE
#    read back and checked, the reports show the IPv6 GIDs and [::1]:PORT;
#  - srdma nvmf target --ip ::1, srdma nvmf discover of it (adrfam ipv6,
#    traddr ::1), srdma blk bench --connect [::1]:PORT --verify against it:
#    no verify or I/O error; SIGTERM stops the target (exit 0);
#  - the refusals, EINVAL naming the option and the value: a hostname, an
#    unbracketed IPv6 address before a port (::1:4420), an unclosed bracket
#    ([::1), a server or target of the other family than --ip.
# Every wait is bounded and polls for its event. Skips (77) without IPv6
# on lo or without ss.
#
#   ipv6_tools_test.sh SRDMA   (PP_KEEP=1 keeps the logs)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/perf_processes.sh source-path=SCRIPTDIR
source "$here/perf_processes.sh"
if [[ $(cat /proc/sys/net/ipv6/conf/lo/disable_ipv6 2>/dev/null || echo 1) != 0 ]]; then
  echo "SKIP: no IPv6 on lo"
  exit 77
fi
command -v ss >/dev/null || { echo "SKIP: no ss (apt-get install iproute2)"; exit 77; }
pp_init "${1:?usage: ipv6_tools_test.sh SRDMA}"
srdma=$PP_BIN

# This run's RoCEv2 port on ::1 (below the ephemeral ports), and its TCP
# ports for the side channel.
export SRDMA_PORT=$((10000 + ($$ * 7) % 20000))
unset SRDMA_ADDR
pp_programs_addresses 30000
echo "devices on [::1]:$SRDMA_PORT, TCP ports from $port_base, logs in $PP_TMP"

# refused NAME TEXT CMD...: CMD exits 1 with "EINVAL" and TEXT on stderr.
refused() {
  local name=$1 text=$2
  shift 2
  pp_run "$name" 20 "$@" || return 1
  if ((PP_RC != 1)) || ! grep -q "EINVAL" "$PP_TMP/$name.err" || ! grep -qF -- "$text" "$PP_TMP/$name.err"; then
    pp_fail "$name: exit $PP_RC, expected 1 with EINVAL and '$text': $(cat "$PP_TMP/$name.err")"
    return 1
  fi
  echo "ok   refused: $* -> $(cat "$PP_TMP/$name.err")"
}

# ---------------------------------------------------------------------------
echo "--- srdma info"
if pp_run info 20 "$srdma" info --ip ::1 && ((PP_RC == 0)); then
  grep -qE "gid\[0\] +0000:0000:0000:0000:0000:0000:0000:0001 \(::1\)$" "$PP_TMP/info.out" ||
    pp_fail "info --ip ::1: no GID ::1: $(grep 'gid\[0\]' "$PP_TMP/info.out")"
  grep -qE "link_layer +Ethernet \(RoCEv2, UDP $SRDMA_PORT\)" "$PP_TMP/info.out" ||
    pp_fail "info --ip ::1: not on RoCEv2: $(grep link_layer "$PP_TMP/info.out")"
  echo "ok   info --ip ::1: $(grep 'gid\[0\]' "$PP_TMP/info.out" | tr -s ' ')"
else
  pp_fail "info --ip ::1: exit $PP_RC: $(cat "$PP_TMP/info.err")"
fi
refused info-host "--ip: 'localhost' is not an IPv4 or IPv6 address" "$srdma" info --ip localhost
refused info-bracket "--ip: '[::1]' is not an IPv4 or IPv6 address" "$srdma" info --ip "[::1]"

# ---------------------------------------------------------------------------
echo "--- srdma perf between processes over ::1"
# perf_pair NAME TEST ARGS...: a server and a client on ::1; both exit 0,
# and each report shows ::1 as both GIDs and the side channel at [::1]:PORT.
perf_pair() {
  local name=$1 t=$2
  shift 2
  pp_next_port || return 1
  local -a common=("$t" -p "$PORT" --copy-ms 0 --mtu 1024 "$@")
  pp_pair "$name" 60 "$srdma" perf "${common[@]}" --ip ::1 --json "$PP_TMP/$name.server.json" :: \
    "$srdma" perf "${common[@]}" --ip ::1 --json "$PP_TMP/$name.client.json" ::1 || return 1
  local who
  for who in server client; do
    local out=$PP_TMP/$name.$who.out json=$PP_TMP/$name.$who.json
    (($(grep -c "^ GID: ::1$" "$out") == 2)) || pp_fail "$name: the $who's report does not show GID ::1 twice"
    grep -qF "Data ex. method : TCP side channel ([::1]:$PORT)" "$out" ||
      pp_fail "$name: the $who's side channel is not [::1]:$PORT: $(grep 'Data ex.' "$out")"
    [[ $(pp_json_strings "$json" local_gid) == ::1 && $(pp_json_strings "$json" remote_gid) == ::1 ]] ||
      pp_fail "$name: the $who's JSON GIDs: $(pp_json_strings "$json" local_gid) $(pp_json_strings "$json" remote_gid)"
  done
  grep -qF "waiting for a client on [::1]:$PORT" "$PP_TMP/$name.server.out" ||
    pp_fail "$name: the server did not wait on [::1]:$PORT"
}
if perf_pair write_bw write_bw --verify -s 70000 -n 40; then
  iters=$(pp_json_values "$PP_TMP/write_bw.client.json" iterations | head -1)
  [[ $iters == 40 ]] || pp_fail "write_bw: $iters iterations, not 40"
  grep -q "Verify          : ON" "$PP_TMP/write_bw.client.out" || pp_fail "write_bw: --verify not on"
  echo "ok   write_bw --verify over ::1: $(grep -E '^ 70000 ' "$PP_TMP/write_bw.client.out" | tr -s ' ')"
fi
if perf_pair send_lat send_lat -n 200; then
  iters=$(pp_json_values "$PP_TMP/send_lat.client.json" iterations | head -1)
  [[ $iters == 200 ]] || pp_fail "send_lat: $iters iterations, not 200"
  echo "ok   send_lat over ::1: $(grep -E '^ 2 ' "$PP_TMP/send_lat.client.out" | tr -s ' ')"
fi
refused perf-family "the server ::1 is IPv6 and this side's device (--ip) 127.0.0.1 is IPv4" \
  "$srdma" perf write_bw -p "$port_base" --ip 127.0.0.1 ::1
refused perf-server "the server: 'localhost' is not an IPv4 or IPv6 address" \
  "$srdma" perf write_bw -p "$port_base" --ip ::1 localhost
refused perf-ip "--ip: '::1:4420:x' is not an IPv4 or IPv6 address" "$srdma" perf write_bw --ip ::1:4420:x

# ---------------------------------------------------------------------------
echo "--- srdma nvmf target --ip ::1, discover, blk bench --connect [::1]:PORT"
NQN=nqn.2026-12.io.softrdma:ipv6
SIZE=$((16 << 20))
pp_start target "$srdma" nvmf target --ip ::1 --nqn "$NQN" --size "$SIZE"
target=$PP_PID
if pp_wait_output "$PP_TMP/target.out" "listening on [::1]:4420" 20 "$target"; then
  echo "ok   $(grep -m1 'listening on' "$PP_TMP/target.out" | cut -d' ' -f3-)"
  # Discovery, the target as a bare IPv6 address (the default port).
  if pp_run discover 30 "$srdma" nvmf discover --ip ::1 ::1 && ((PP_RC == 0)); then
    for want in "^subnqn:  $NQN$" "^traddr:  ::1$" "^adrfam:  ipv6$" "^trsvcid: 4420$" "^rdma_prtype: roce-v2$"; do
      grep -qE "$want" "$PP_TMP/discover.out" || pp_fail "nvmf discover: no '$want' in: $(cat "$PP_TMP/discover.out")"
    done
    echo "ok   nvmf discover ::1: $(grep -m1 'Number of Records' "$PP_TMP/discover.out")"
  else
    pp_fail "nvmf discover --ip ::1 ::1: exit $PP_RC: $(tail -3 "$PP_TMP/discover.err")"
  fi
  # A verified randrw load, both CQ modes, through the CM over IPv6.
  if pp_run bench 90 "$srdma" blk bench --connect "[::1]:4420" --ip ::1 --nqn "$NQN" --size "$SIZE" --queues 2 \
    --qd 8 --ios 2000 --rw randrw --verify --no-progress && ((PP_RC == 0)); then
    if grep -qE '^verify errors +0 +0 ' "$PP_TMP/bench.out" && grep -qE '^I/O errors +0 +0 ' "$PP_TMP/bench.out"; then
      echo "ok   blk bench --connect [::1]:4420 --verify: $(grep -E '^IOPS' "$PP_TMP/bench.out" | tr -s ' ')"
    else
      pp_fail "blk bench over ::1 reported errors: $(cat "$PP_TMP/bench.out")"
    fi
  else
    pp_fail "blk bench --connect [::1]:4420: exit $PP_RC: $(tail -5 "$PP_TMP/bench.err" "$PP_TMP/bench.out")"
  fi
  # A port nobody listens on is refused by the target's CM, over IPv6 too.
  if pp_run noport 30 "$srdma" blk bench --connect "[::1]:4421" --ip ::1 --nqn "$NQN" --ios 10 --no-progress; then
    if ((PP_RC != 1)) || ! grep -q ECONNREFUSED "$PP_TMP/noport.err"; then
      pp_fail "[::1]:4421, no listener: exit $PP_RC, not ECONNREFUSED: $(tail -2 "$PP_TMP/noport.err")"
    else
      echo "ok   no listener at [::1]:4421: $(cat "$PP_TMP/noport.err")"
    fi
  fi
  kill -TERM "$target"
  if pp_wait_exit "$target" 20; then
    ((PP_RC == 0)) || pp_fail "the target exited $PP_RC on SIGTERM: $(tail -3 "$PP_TMP/target.out" "$PP_TMP/target.err")"
  else
    pp_fail "the target did not stop within 20 s of SIGTERM"
  fi
else
  pp_fail "the target never listened on [::1]:4420"
  pp_show target
fi
bench=("$srdma" blk bench --nqn "$NQN" --ios 10 --no-progress)
refused connect-unbracketed "--connect '::1:4420': an IPv6 address with a port is bracketed: [::1]:4420" \
  "${bench[@]}" --connect ::1:4420 --ip ::1
refused connect-open "--connect '[::1': no ']' closes the IPv6 address" "${bench[@]}" --connect "[::1" --ip ::1
refused connect-name "--connect 'localhost:4420': 'localhost' is not an IPv4 or IPv6 address" \
  "${bench[@]}" --connect localhost:4420 --ip ::1
refused connect-family "--connect ::1 is IPv6 and --ip 127.0.0.1 is IPv4" \
  "${bench[@]}" --connect "[::1]:4420" --ip 127.0.0.1
refused target-ip "--ip: 'localhost' is not an IPv4 or IPv6 address" \
  "$srdma" nvmf target --ip localhost --nqn "$NQN" --size "$SIZE"
refused discover-unbracketed "target '::1:4420': an IPv6 address with a port is bracketed" \
  "$srdma" nvmf discover --ip ::1 ::1:4420
refused discover-family "the target 127.0.0.1 is IPv4 and --ip ::1 is IPv6" "$srdma" nvmf discover --ip ::1 127.0.0.1

pp_finish
