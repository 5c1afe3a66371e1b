#!/usr/bin/env bash
# libfabric (libfabric-bin: fi_info, fi_pingpong) unmodified on softrdma's
# libibverbs.so.1 and librdmacm.so.1:
#  - fi_info -p verbs lists an FI_EP_MSG and an FI_EP_DGRAM endpoint of the
#    verbs provider and an FI_EP_RDM one of verbs;ofi_rxm;
#  - fi_pingpong -c (every message's data checked) over msg (verbs), rdm
#    (verbs;ofi_rxm: RC QPs through the RDMA CM), dgram (verbs: UD) and rdm
#    (verbs;ofi_rxd: over UD), both sides exiting 0 with a result row for
#    every size they ran:
#      * between two hosts: two network namespaces joined by a veth pair
#        (192.0.2.1/24, 192.0.2.2/24);
#      * between two processes on one host: one namespace whose two
#        interfaces hold 192.0.2.11 and 192.0.2.12, a process on each (each
#        process's device serves one address of the host's);
#      * msg and rdm (rxm) between two processes on one host with no
#        SRDMA_ADDR at all: both share the host's device (the host model).
# The verbs provider offers FI_EP_MSG on the devices whose interface address
# (not lo's) rdma_bind_addr takes, so each process's SRDMA_ADDR is an
# interface address of its namespace. A server is ready once its control
# port (TCP, -B) listens; every wait is bounded. Skips (77) without
# libfabric-bin, or where namespaces cannot be made (not root).
#
#   libfabric_programs_test.sh LIBDIR   (softrdma's drop-in directory)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/process_lib.sh source-path=SCRIPTDIR
source "$here/process_lib.sh"
libdir=${1:?usage: libfabric_programs_test.sh LIBDIR}
libdir=$(cd "$libdir" 2>/dev/null && pwd) || { echo "FAIL: no directory '$1'" >&2; exit 1; }
for f in librdmacm.so.1 libibverbs.so.1; do
  [[ -e $libdir/$f ]] || { echo "FAIL: no $f in '$libdir'" >&2; exit 1; }
done
skip() {
  echo "SKIP: $*"
  exit 77
}
for p in fi_info fi_pingpong ip ss timeout; do
  command -v "$p" >/dev/null 2>&1 || skip "not installed: $p (apt-get install libfabric-bin iproute2)"
done
[[ $(id -u) == 0 ]] || skip "not root: network namespaces need CAP_NET_ADMIN"

logs=$(mktemp -d)
tag=$$-$RANDOM
ns_a=srdma-fa-$tag ns_b=srdma-fb-$tag ns_h=srdma-fh-$tag
cleanup() {
  local ns
  for ns in "$ns_a" "$ns_b" "$ns_h"; do ip netns del "$ns" 2>/dev/null; done
  [[ ${PP_KEEP:-} ]] || rm -rf "$logs"
}
trap cleanup EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
show() { # show NAME: the last lines of a run's output
  echo "  --- $1"
  tail -n 15 "$logs/$1" | sed 's/^/  | /'
}

for ns in "$ns_a" "$ns_b" "$ns_h"; do
  err=$(ip netns add "$ns" 2>&1) || skip "cannot create a network namespace: $err"
  ip -n "$ns" link set lo up
done
err=$(ip netns exec "$ns_a" true 2>&1) || skip "cannot enter a network namespace: $err"
# Two hosts: a veth pair across the namespaces.
err=$(ip -n "$ns_a" link add va type veth peer name vb netns "$ns_b" 2>&1) || skip "cannot create a veth pair: $err"
ip -n "$ns_a" addr add 192.0.2.1/24 dev va
ip -n "$ns_b" addr add 192.0.2.2/24 dev vb
# One host: both ends of a veth pair in one namespace, an address on each.
ip -n "$ns_h" link add h0 type veth peer name h1
ip -n "$ns_h" addr add 192.0.2.11/24 dev h0
ip -n "$ns_h" addr add 192.0.2.12/24 dev h1
ip -n "$ns_a" link set va up
ip -n "$ns_b" link set vb up
ip -n "$ns_h" link set h0 up
ip -n "$ns_h" link set h1 up
links_up() {
  ip -n "$ns_a" -o link show va | grep -q 'state UP' && ip -n "$ns_b" -o link show vb | grep -q 'state UP' &&
    ip -n "$ns_h" -o link show h0 | grep -q 'state UP' && ip -n "$ns_h" -o link show h1 | grep -q 'state UP'
}
wait_for 10000 links_up || { fail "the veth pairs did not come up within 10 s"; exit 1; }
echo "hosts $ns_a (192.0.2.1) and $ns_b (192.0.2.2); one host $ns_h (192.0.2.11, 192.0.2.12); logs $logs"

# on NS ADDR CMD...: CMD in namespace NS on softrdma as the device at ADDR
# ("-": no SRDMA_ADDR, the device that stands for the host).
on() {
  local ns=$1 addr=$2
  shift 2
  if [[ $addr == - ]]; then
    ip netns exec "$ns" env -u SRDMA_ADDR LD_LIBRARY_PATH="$libdir" "$@"
  else
    ip netns exec "$ns" env LD_LIBRARY_PATH="$libdir" SRDMA_ADDR="$addr" "$@"
  fi
}

echo "--- fi_info -p verbs"
if on "$ns_a" 192.0.2.1 timeout 30 fi_info -p verbs >"$logs/fi_info" 2>&1; then
  # One "provider: ...", then its "type: ..." a few lines below.
  listed=$(awk '/provider:/ {p = $2} /type:/ {print p, $2}' "$logs/fi_info" | sort -u)
  for want in "verbs FI_EP_MSG" "verbs FI_EP_DGRAM" "verbs;ofi_rxm FI_EP_RDM"; do
    if grep -qxF "$want" <<<"$listed"; then
      echo "ok   fi_info lists $want"
    else
      fail "fi_info -p verbs does not list '$want' (it lists: $(tr '\n' ',' <<<"$listed"))"
    fi
  done
else
  fail "fi_info -p verbs exited $?"
  show fi_info
fi

# pingpong NAME NS_S ADDR_S NS_C ADDR_C PROVIDER EP [TARGET]: fi_pingpong
# -c, the server at ADDR_S, the client at ADDR_C connecting to TARGET
# (default ADDR_S).
port=47600
pingpong() {
  local name=$1 ns_s=$2 addr_s=$3 ns_c=$4 addr_c=$5 prov=$6 ep=$7 target=${8:-$3} spid rc_s rc_c rows
  port=$((port + 1))
  on "$ns_s" "$addr_s" timeout 60 fi_pingpong -p "$prov" -e "$ep" -c -I 100 -B "$port" >"$logs/$name.server" 2>&1 &
  spid=$!
  ctrl_listening() { ip netns exec "$ns_s" ss -Hltn "sport = :$port" | grep -q . || ! kill -0 "$spid" 2>/dev/null; }
  if ! wait_for 15000 ctrl_listening || ! kill -0 "$spid" 2>/dev/null; then
    fail "$name: the server did not listen on its control port $port within 15 s"
    kill "$spid" 2>/dev/null
    wait "$spid"
    show "$name.server"
    return
  fi
  on "$ns_c" "$addr_c" timeout 60 fi_pingpong -p "$prov" -e "$ep" -c -I 100 -P "$port" "$target" >"$logs/$name.client" 2>&1
  rc_c=$?
  wait "$spid"
  rc_s=$?
  # Result rows: size, "100" sent, "=100" acknowledged.
  rows=$(grep -cE '^[0-9]+[kmg]?[[:space:]]+100[[:space:]]+=100[[:space:]]' "$logs/$name.client")
  if ((rc_c != 0 || rc_s != 0)); then
    fail "$name: client exited $rc_c, server $rc_s (124: timed out)"
    show "$name.client"
    show "$name.server"
  elif ((rows == 0)); then
    fail "$name: the client printed no result row"
    show "$name.client"
  else
    echo "ok   $name: $rows sizes, largest: $(grep -E '^[0-9]' "$logs/$name.client" | tail -n1 | tr -s ' ')"
  fi
}

cases=("verbs msg" "verbs;ofi_rxm rdm" "verbs dgram" "verbs;ofi_rxd rdm")
echo "--- fi_pingpong -c between two hosts"
for c in "${cases[@]}"; do
  read -r prov ep <<<"$c"
  pingpong "hosts-${prov/;/+}-$ep" "$ns_a" 192.0.2.1 "$ns_b" 192.0.2.2 "$prov" "$ep"
done
echo "--- fi_pingpong -c between two processes on one host"
for c in "${cases[@]}"; do
  read -r prov ep <<<"$c"
  pingpong "host-${prov/;/+}-$ep" "$ns_h" 192.0.2.11 "$ns_h" 192.0.2.12 "$prov" "$ep"
done
# The host model: neither side has an SRDMA_ADDR, both share the host's
# device; the provider finds it through the interface address (it skips
# lo), and the client connects to that address.
echo "--- fi_pingpong -c between two processes on one host, no SRDMA_ADDR"
for c in "verbs msg" "verbs;ofi_rxm rdm"; do
  read -r prov ep <<<"$c"
  pingpong "shared-${prov/;/+}-$ep" "$ns_h" - "$ns_h" - "$prov" "$ep" 192.0.2.11
done

if ((failures)); then
  echo "FAILED: $failures"
  exit 1
fi
echo "PASSED"
