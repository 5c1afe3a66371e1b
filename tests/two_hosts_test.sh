#!/usr/bin/env bash
# Two hosts: `srdma perf` between two network namespaces joined by a veth
# pair with a 1500-byte MTU (192.0.2.1/24 and 192.0.2.2/24, inside the
# namespaces only). Every perf test runs server in one, client in the other,
# and exits 0; the client's JSON says the path MTU was the device's active
# MTU, 1024 on a 1500-byte link; --mtu 4096 is refused; --verify moves 64 KiB
# WRs byte-exact. Skips (77) where namespaces cannot be made.
#
#   two_hosts_test.sh SRDMA        (PP_KEEP=1 keeps the logs)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/perf_processes.sh source-path=SCRIPTDIR
source "$here/perf_processes.sh"
pp_init "${1:?usage: two_hosts_test.sh SRDMA}"

skip() {
  echo "SKIP: $*"
  exit 77
}
[[ $(id -u) == 0 ]] || skip "not root: network namespaces and a veth pair need CAP_NET_ADMIN"
command -v ip >/dev/null || skip "no 'ip' command (iproute2 is not installed)"

tag=$$-$RANDOM
ns_a=srdma-a-$tag
ns_b=srdma-b-$tag
ip_a=192.0.2.1
ip_b=192.0.2.2
port=18515  # the default: each namespace has ports of its own
pp_on_exit ip netns del "$ns_a"
pp_on_exit ip netns del "$ns_b"
if ! err=$(ip netns add "$ns_a" 2>&1) || ! err=$(ip netns add "$ns_b" 2>&1); then
  skip "cannot create a network namespace: $err"
fi
if ! err=$(ip netns exec "$ns_a" true 2>&1); then
  skip "cannot enter a network namespace (ip netns exec): $err"
fi
if ! err=$(ip -n "$ns_a" link add va mtu 1500 type veth peer name vb mtu 1500 netns "$ns_b" 2>&1); then
  skip "cannot create a veth pair between the namespaces: $err"
fi
ip -n "$ns_a" addr add "$ip_a/24" dev va
ip -n "$ns_b" addr add "$ip_b/24" dev vb
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set va up
ip -n "$ns_b" link set vb up
# Both ends up (carrier on): a bounded poll.
deadline=$(($(pp_now_us) + 10000000))
until ip -n "$ns_a" -o link show va | grep -q 'state UP' && ip -n "$ns_b" -o link show vb | grep -q 'state UP'; do
  if (($(pp_now_us) > deadline)); then
    ip -n "$ns_a" -o link show va
    ip -n "$ns_b" -o link show vb
    pp_fail "the veth pair did not come up within 10 s"
    pp_finish
  fi
  sleep 0.02
done
echo "namespaces $ns_a ($ip_a, va) and $ns_b ($ip_b, vb), veth MTU 1500"

if ((PP_SLOW)); then
  bw_n=40 lat_n=100 verify_n=20
else
  bw_n=300 lat_n=500 verify_n=100
fi
client_limit=60

# Command prefixes (not functions: the PID a test holds must be srdma's own,
# and `ip netns exec` execs it). The client's last word is the server's address.
server=(ip netns exec "$ns_a" "$PP_BIN" perf --ip "$ip_a" -p "$port")
client=(ip netns exec "$ns_b" "$PP_BIN" perf --ip "$ip_b" -p "$port")

# check_json NAME FILE MTU ITERS: the client's JSON says the path MTU was MTU
# (and, if it reports them, the port's active MTU 1024 and a RoCE link) and
# that every iteration ran.
check_json() {
  local name=$1 json=$2 want_mtu=$3 iters=$4 v fails=$PP_FAILS
  if [[ ! -s $json ]]; then
    pp_fail "$name: the client wrote no JSON ($json)"
    return 1
  fi
  local -a mtus
  mapfile -t mtus < <(pp_json_values "$json" mtu)
  if ((${#mtus[@]} == 0)); then
    pp_fail "$name: no \"mtu\" in the client's JSON"
  fi
  for v in "${mtus[@]}"; do
    [[ $v == "$want_mtu" ]] || pp_fail "$name: JSON \"mtu\": $v, expected $want_mtu"
  done
  # The port's active MTU and the link, from the JSON's "link" section.
  mapfile -t mtus < <(pp_json_values "$json" active_mtu)
  [[ ${mtus[*]} == 1024 ]] || pp_fail "$name: JSON link \"active_mtu\": '${mtus[*]}', expected 1024 (a 1500-byte link)"
  v=$(pp_json_strings "$json" type)
  [[ $v == roce_v2 ]] || pp_fail "$name: JSON link \"type\": '$v', expected roce_v2"
  while read -r v; do
    [[ $v == "$iters" ]] || pp_fail "$name: JSON \"iterations\": $v, expected $iters"
  done < <(pp_json_values "$json" iterations)
  ((PP_FAILS == fails))
}

# refused_mtu FILE: an EINVAL that names the MTU.
refused_mtu() { grep -E 'EINVAL' "$1" | grep -qi 'mtu'; }

echo "--- every test, server in $ns_a, client in $ns_b"
for t in write_bw read_bw send_bw write_lat read_lat send_lat atomic_lat; do
  case $t in *_bw) n=$bw_n ;; *) n=$lat_n ;; esac
  json=$PP_TMP/$t.json
  if pp_pair "$t" "$client_limit" "${server[@]}" "$t" -n "$n" --copy-ms 0 :: "${client[@]}" "$t" -n "$n" --copy-ms 0 --json "$json" "$ip_a"; then
    check_json "$t" "$json" 1024 "$n" && echo "ok   $t -n $n: client ${PP_CLIENT_MS} ms, path MTU 1024"
  fi
done

echo "--- --mtu 512 (below the active MTU) is used as asked"
json=$PP_TMP/mtu512.json
if pp_pair mtu512 "$client_limit" "${server[@]}" write_bw -n "$bw_n" --mtu 512 --copy-ms 0 :: \
  "${client[@]}" write_bw -n "$bw_n" --mtu 512 --copy-ms 0 --json "$json" "$ip_a"; then
  check_json mtu512 "$json" 512 "$bw_n" && echo "ok   write_bw --mtu 512"
fi

echo "--- --mtu 4096 is refused on a 1500-byte link (active MTU 1024)"
# The client, against a server that is waiting: EINVAL naming --mtu.
if pp_start_server mtu4096.server "${server[@]}" write_bw -n "$bw_n" --copy-ms 0; then
  spid=$PP_SERVER_PID
  if pp_run mtu4096.client "$client_limit" "${client[@]}" write_bw -n "$bw_n" --mtu 4096 --copy-ms 0 "$ip_a"; then
    err=$(cat "$PP_TMP/mtu4096.client.err")
    if ((PP_RC == 0)); then
      pp_fail "client --mtu 4096 on a 1500-byte link exited 0"
      pp_show mtu4096.client
    elif ! refused_mtu "$PP_TMP/mtu4096.client.err"; then
      pp_fail "client --mtu 4096: exit $PP_RC, stderr should say EINVAL and name the MTU: '$err'"
    else
      echo "ok   client --mtu 4096 refused: $(grep -m1 EINVAL <<<"$err")"
    fi
    pp_sanitizer_clean mtu4096.client || true
  fi
  # The server either still waits for a client or saw this one give up;
  # either way it must not hang once asked to stop.
  if pp_alive "$spid"; then
    pp_kill "$spid"
  else
    pp_wait_exit "$spid" 1 || true
    echo "  note: the server exited $PP_RC after the refused client"
  fi
fi
# The server side: it knows its port's active MTU before any client comes,
# so it may refuse at once; if it waits instead, the first client must get
# the refusal (EINVAL naming the MTU) and the server must exit with it.
pp_start mtu4096.lone "${server[@]}" write_bw -n "$bw_n" --mtu 4096 --copy-ms 0
lone=$PP_PID r=0
pp_wait_output "$PP_TMP/mtu4096.lone.out" "waiting for a client" "$PP_READY_S" "$lone" || r=$?
case $r in
  0)
    echo "  note: server --mtu 4096 waits for a client before refusing (it could refuse at once)"
    if pp_run mtu4096.lone-client "$client_limit" "${client[@]}" write_bw -n "$bw_n" --copy-ms 0 "$ip_a"; then
      if ((PP_RC == 0)); then
        pp_fail "a client of a server started with --mtu 4096 on a 1500-byte link exited 0"
      elif ! grep -E 'srdma: E' "$PP_TMP/mtu4096.lone-client.err" | grep -qi 'mtu'; then
        pp_fail "client of server --mtu 4096: exit $PP_RC, stderr should give the server's reason (the MTU): '$(cat "$PP_TMP/mtu4096.lone-client.err")'"
      else
        echo "ok   the client of server --mtu 4096 got the refusal: $(grep -m1 'srdma: E' "$PP_TMP/mtu4096.lone-client.err")"
      fi
      pp_sanitizer_clean mtu4096.lone-client || true
    fi
    if ! pp_wait_exit "$lone" "$PP_SERVER_EXIT_S"; then
      pp_fail "server --mtu 4096 still running ${PP_SERVER_EXIT_S}s after refusing its client"
      pp_kill "$lone"
      r=-1
    fi
    ;;
  1)
    pp_fail "server --mtu 4096 on a 1500-byte link neither refused nor waited within ${PP_READY_S}s"
    pp_show mtu4096.lone
    pp_kill "$lone"
    r=-1
    ;;
  *) pp_wait_exit "$lone" 5 || true ;;
esac
if ((r >= 0)); then
  if ((PP_RC == 0)); then
    pp_fail "server --mtu 4096 on a 1500-byte link exited 0"
  elif ! refused_mtu "$PP_TMP/mtu4096.lone.err"; then
    pp_fail "server --mtu 4096: exit $PP_RC, stderr should say EINVAL and name the MTU: '$(cat "$PP_TMP/mtu4096.lone.err")'"
  else
    echo "ok   server --mtu 4096 refused (exit $PP_RC): $(grep -m1 EINVAL "$PP_TMP/mtu4096.lone.err")"
  fi
  pp_sanitizer_clean mtu4096.lone || true
fi

echo "--- --verify -s 65536"
for t in write_bw read_bw send_bw; do
  json=$PP_TMP/verify-$t.json
  if pp_pair "verify-$t" "$client_limit" "${server[@]}" "$t" --verify -s 65536 -n "$verify_n" --copy-ms 0 :: \
    "${client[@]}" "$t" --verify -s 65536 -n "$verify_n" --copy-ms 0 --json "$json" "$ip_a"; then
    check_json "verify-$t" "$json" 1024 "$verify_n" &&
      echo "ok   $t --verify -s 65536 -n $verify_n: client ${PP_CLIENT_MS} ms"
  fi
done

pp_finish
