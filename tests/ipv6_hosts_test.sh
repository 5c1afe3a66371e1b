#!/usr/bin/env bash
# Two hosts on IPv4 and IPv6 side by side: two network namespaces joined by
# a veth pair (192.0.2.1/24 and 2001:db8::1/64 in one, .2 and ::2 in the
# other, inside the namespaces only), softrdma's libibverbs.so.1 and
# librdmacm.so.1:
#  - rping over IPv6 and rping over IPv4 at once, a server of each family
#    in the first namespace and their clients in the second: every side
#    exits 0 and the clients print their pings. The IPv6 server has never
#    addressed its client: the client's CM REQ is heard through the CM's
#    bounded allowance for IPv6 sources (net.h, kMaxIpv6Arrivals);
#  - ibv_rc_pingpong -g 0 over IPv6, its GIDs exchanged over TCP on IPv4
#    (the program's server listens on IPv4): both sides print "N iters
#    in";
#  - NVMe-oF over IPv6 and over IPv4: `srdma nvmf target` in the first
#    namespace, `srdma blk bench --connect --verify` in the second; the
#    path MTU is the port's (1024 on the veth's 1500 bytes): exits 0 with
#    no verify or I/O errors; --mtu 4096 is refused (EINVAL naming it).
# Every wait is bounded. Skips (77) without root, namespaces, veth,
# rdmacm-utils or ibverbs-utils.
#
#   ipv6_hosts_test.sh LIBDIR SRDMA   (softrdma's libibverbs.so.1 directory, the srdma binary)
set -uo pipefail
libdir=${1:?usage: ipv6_hosts_test.sh LIBDIR SRDMA}
srdma=${2:?usage: ipv6_hosts_test.sh LIBDIR SRDMA}
[[ -x $srdma ]] || { echo "FAIL: '$srdma' is not executable" >&2; exit 1; }
libdir=$(cd "$libdir" 2>/dev/null && pwd) || { echo "FAIL: no directory '$1'" >&2; exit 1; }
skip() {
  echo "SKIP: $*"
  exit 77
}
[[ $(id -u) == 0 ]] || skip "not root: network namespaces and a veth pair need CAP_NET_ADMIN"
for p in ip rping ibv_rc_pingpong timeout stdbuf; do
  command -v "$p" >/dev/null 2>&1 || skip "not installed: $p (apt-get install iproute2 rdmacm-utils ibverbs-utils)"
done

logs=$(mktemp -d)
tag=$$-$RANDOM
ns_a=srdma6-a-$tag ns_b=srdma6-b-$tag
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  [[ ${PP_KEEP:-} ]] || rm -rf "$logs"
}
trap cleanup EXIT
ip netns add "$ns_a" 2>/dev/null && ip netns add "$ns_b" 2>/dev/null || skip "cannot create a network namespace"
ip -n "$ns_a" link add va type veth peer name vb netns "$ns_b" 2>/dev/null || skip "cannot create a veth pair"
ip -n "$ns_a" addr add 192.0.2.1/24 dev va
ip -n "$ns_b" addr add 192.0.2.2/24 dev vb
# nodad: the addresses are usable at once, not after duplicate detection.
ip -n "$ns_a" addr add 2001:db8::1/64 dev va nodad || skip "no IPv6 in the namespace"
ip -n "$ns_b" addr add 2001:db8::2/64 dev vb nodad || skip "no IPv6 in the namespace"
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set va up
ip -n "$ns_b" link set vb up
for _ in $(seq 500); do  # carrier on both ends: 10 s at most
  ip -n "$ns_a" -o link show va | grep -q 'state UP' && ip -n "$ns_b" -o link show vb | grep -q 'state UP' && break
  sleep 0.02
done

fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
show() {
  echo "  --- $1"
  tail -n 8 "$logs/$1" | sed 's/^/  | /'
}
# in_ns NS ADDR CMD...: CMD in namespace NS on softrdma as the device at ADDR.
in_ns() {
  local ns=$1 addr=$2
  shift 2
  ip netns exec "$ns" env "LD_LIBRARY_PATH=$libdir" "SRDMA_ADDR=$addr" stdbuf -oL -eL timeout 40 "$@"
}
# device_up NS ADDR: a softrdma device bound ADDR's RoCEv2 port in NS (its
# listen follows at once; a REQ that comes first waits for it) within 10 s.
device_up() {
  local a=$2
  [[ $a == *:* ]] && a="[$a]"
  for _ in $(seq 500); do
    ip netns exec "$1" ss -Hlun "src $a:4791" 2>/dev/null | grep -q . && return 0
    sleep 0.02
  done
  return 1
}
# listening NS PORT: a TCP listener on PORT in NS within 10 s.
listening() {
  for _ in $(seq 500); do
    ip netns exec "$1" ss -Hltn "sport = :$2" 2>/dev/null | grep -q . && return 0
    sleep 0.02
  done
  return 1
}

echo "--- rping over IPv6 and over IPv4 at once, across the veth"
in_ns "$ns_a" 2001:db8::1 rping -s -a 2001:db8::1 -p 7174 -C 10 >"$logs/rping6.server" 2>&1 &
s6=$!
in_ns "$ns_a" 192.0.2.1 rping -s -a 192.0.2.1 -p 7175 -C 10 >"$logs/rping4.server" 2>&1 &
s4=$!
pids+=("$s6" "$s4")
device_up "$ns_a" 2001:db8::1 && device_up "$ns_a" 192.0.2.1 || fail "the rping servers did not open their devices"
in_ns "$ns_b" 2001:db8::2 rping -c -a 2001:db8::1 -p 7174 -C 10 -v >"$logs/rping6.client" 2>&1 &
c6=$!
in_ns "$ns_b" 192.0.2.2 rping -c -a 192.0.2.1 -p 7175 -C 10 -v >"$logs/rping4.client" 2>&1 &
c4=$!
pids+=("$c6" "$c4")
for side in "rping6.client $c6" "rping4.client $c4" "rping6.server $s6" "rping4.server $s4"; do
  read -r name pid <<<"$side"
  if ! wait "$pid"; then
    fail "$name exited non-zero"
    show "$name"
  fi
done
for fam in 6 4; do
  n=$(grep -c 'ping data: rdma-ping-' "$logs/rping$fam.client")
  if ((n == 10)); then echo "ok   rping over IPv$fam: 10 pings"; else fail "rping over IPv$fam: $n pings of 10"; show "rping$fam.client"; fi
done

echo "--- ibv_rc_pingpong -g 0 over IPv6 (its TCP exchange over IPv4)"
in_ns "$ns_a" 2001:db8::1 ibv_rc_pingpong -g 0 -p 18601 -n 200 >"$logs/pp.server" 2>&1 &
ps=$!
pids+=("$ps")
if listening "$ns_a" 18601; then
  in_ns "$ns_b" 2001:db8::2 ibv_rc_pingpong -g 0 -p 18601 -n 200 192.0.2.1 >"$logs/pp.client" 2>&1 || {
    fail "ibv_rc_pingpong client exited non-zero"
    show pp.client
  }
else
  fail "ibv_rc_pingpong's server did not listen"
fi
wait "$ps" || { fail "ibv_rc_pingpong server exited non-zero"; show pp.server; }
if grep -q '200 iters in' "$logs/pp.client" && grep -q '200 iters in' "$logs/pp.server"; then
  echo "ok   ibv_rc_pingpong -g 0 over IPv6: $(grep 'iters in' "$logs/pp.client")"
else
  fail "ibv_rc_pingpong over IPv6: no '200 iters in' on both sides"
fi

echo "--- NVMe-oF across the veth, over IPv6 and over IPv4"
for v in "6 2001:db8::1 [2001:db8::1]:4420 2001:db8::2" "4 192.0.2.1 192.0.2.1:4420 192.0.2.2"; do
  read -r fam tip target hip <<<"$v"
  nqn=nqn.2026-12.io.softrdma:hosts$fam
  ip netns exec "$ns_a" timeout 60 "$srdma" nvmf target --ip "$tip" --nqn "$nqn" >"$logs/target$fam" 2>&1 &
  tpid=$!
  pids+=("$tpid")
  if ! device_up "$ns_a" "$tip"; then
    fail "the IPv$fam target did not open its device"
    show "target$fam"
    continue
  fi
  if ip netns exec "$ns_b" timeout 60 "$srdma" blk bench --connect "$target" --ip "$hip" --nqn "$nqn" \
    --controllers 1 --queues 2 --ios 2000 --verify --no-progress >"$logs/host$fam" 2>&1; then
    echo "ok   NVMe-oF over IPv$fam: blk bench --verify, $(grep -m1 -o 'MTU [0-9]*' "$logs/host$fam")"
    grep -q 'MTU 1024' "$logs/host$fam" || fail "NVMe-oF over IPv$fam: not at the port's MTU 1024"
  else
    fail "NVMe-oF over IPv$fam: blk bench exited non-zero"
    show "host$fam"
    show "target$fam"
  fi
  # A path MTU beyond the host port's (1024) is refused before any connect.
  if ip netns exec "$ns_b" timeout 60 "$srdma" blk bench --connect "$target" --ip "$hip" --nqn "$nqn" \
    --mtu 4096 --ios 10 --no-progress >"$logs/host$fam.mtu" 2>&1; then
    fail "blk bench --mtu 4096 on a 1500-byte link exited 0"
  elif grep -q "EINVAL.*--mtu 4096: the port's active MTU is 1024" "$logs/host$fam.mtu"; then
    echo "ok   blk bench --mtu 4096 over IPv$fam refused: the port's active MTU is 1024"
  else
    fail "blk bench --mtu 4096 over IPv$fam: not refused with EINVAL naming --mtu"
    show "host$fam.mtu"
  fi
  kill -TERM "$tpid" 2>/dev/null
  wait "$tpid" 2>/dev/null
done

((fails == 0)) || { echo "$fails failed"; exit 1; }
echo "all passed"
