#!/usr/bin/env bash
# Unmodified verbs programs over RoCEv2 on IPv6: two processes, each with
# SRDMA_ADDR=::1 and this run's own SRDMA_PORT (IPv6 loopback has one
# address: the two devices share ::1 and the port as a host's processes do),
# on softrdma's libibverbs.so.1:
#  - ibv_devinfo -v shows GID[0] ::1, RoCE v2 (the IPv6 address itself,
#    not an IPv4-mapped one);
#  - ibv_rc_pingpong -g 0 and ibv_ud_pingpong -g 0 (the peer's IPv6 GID in
#    the QP's address vector, and in ibv_create_ah): both sides exit 0 and
#    print "N iters in";
#  - rping -s -a ::1 / rping -c -a ::1 -C 10 -v on softrdma's librdmacm.so.1
#    too (rdma_bind_addr and rdma_resolve_addr of sockaddr_in6, the CM's
#    MADs and its IP header over IPv6): both exit 0, the client prints its
#    10 pings.
# Every server listens on a TCP port of this run's own; the client starts
# once the server listens (ss). Every wait is bounded. Skips (77) without
# the programs or without IPv6 on lo.
#
#   ipv6_programs_test.sh LIBDIR   (softrdma's libibverbs.so.1 directory)
set -uo pipefail
libdir=${1:?usage: ipv6_programs_test.sh LIBDIR}
libdir=$(cd "$libdir" 2>/dev/null && pwd) || { echo "FAIL: no directory '$1'" >&2; exit 1; }
for f in libibverbs.so.1 librdmacm.so.1; do
  [[ -e $libdir/$f ]] || { echo "FAIL: no $f in '$libdir'" >&2; exit 1; }
done
missing=()
for p in ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong rping ss timeout stdbuf; do
  command -v "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "SKIP: not installed: ${missing[*]} (apt-get install ibverbs-utils rdmacm-utils iproute2)"
  exit 77
fi
if [[ $(cat /proc/sys/net/ipv6/conf/lo/disable_ipv6 2>/dev/null || echo 1) != 0 ]]; then
  echo "SKIP: no IPv6 on lo"
  exit 77
fi

logs=$(mktemp -d)
[[ ${PP_KEEP:-} ]] || trap 'rm -rf "$logs"' EXIT
# This run's RoCEv2 port on ::1, and TCP ports for the programs' exchange.
roce_port=$((40000 + $$ % 5000))
tcp_port=$((45000 + ($$ % 500) * 8))
failures=0
echo "devices on [::1]:$roce_port, TCP ports from $tcp_port, library $libdir, logs $logs"

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
now_ms() { date +%s%3N; }
side() { # side CMD... : runs CMD on softrdma's device at ::1
  env LD_LIBRARY_PATH="$libdir" SRDMA_ADDR=::1 SRDMA_PORT="$roce_port" SRDMA_VERBS_DEBUG=1 stdbuf -oL -eL "$@"
}
# Waits (at most 15 s) until TCP port $1 is listened on (udp:PORT: until
# the server's device has bound its UDP port), or $2 has exited.
wait_listen() {
  local deadline=$(($(now_ms) + 15000)) what=(-Hltn "sport = :$1")
  [[ $1 == udp:* ]] && what=(-Hlun "src [::1]:${1#udp:}")
  while (($(now_ms) < deadline)); do
    ss "${what[@]}" 2>/dev/null | grep -q . && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
# run_pair NAME "SERVER CMD" "CLIENT CMD" [LISTEN PORT]: both must exit 0;
# sets $out_s, $out_c. The client starts once the server's TCP port is
# listened on.
run_pair() {
  local name=$1 server=$2 client=$3 listen=$4 spid rc_c rc_s
  out_s=$logs/$name.server
  out_c=$logs/$name.client
  # shellcheck disable=SC2086
  side timeout 60 $server >"$out_s" 2>&1 &
  spid=$!
  if ! wait_listen "$listen" "$spid"; then
    fail "$name: the server did not listen on TCP $listen"
    tail -n 5 "$out_s"
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    return 1
  fi
  # shellcheck disable=SC2086
  side timeout 60 $client >"$out_c" 2>&1
  rc_c=$?
  wait "$spid"
  rc_s=$?
  if ((rc_c != 0 || rc_s != 0)); then
    fail "$name: client exit $rc_c, server exit $rc_s"
    echo "--- server:"; tail -n 8 "$out_s"; echo "--- client:"; tail -n 8 "$out_c"
    return 1
  fi
  echo "ok: $name (client and server exit 0)"
}

# The GID table: the IPv6 address, RoCE v2.
if side timeout 30 ibv_devinfo -v >"$logs/devinfo" 2>&1; then
  if grep -qE '^[[:space:]]+GID\[  0\]:[[:space:]]+::1, RoCE v2$' "$logs/devinfo"; then
    echo "ok: ibv_devinfo -v: GID[  0] ::1, RoCE v2"
  else
    fail "ibv_devinfo -v: no 'GID[  0]: ::1, RoCE v2'"
    grep -E 'GID|link_layer' "$logs/devinfo"
  fi
else
  fail "ibv_devinfo -v exited non-zero"
  tail -n 5 "$logs/devinfo"
fi

for prog in rc ud; do
  tcp_port=$((tcp_port + 1))
  size=4096
  [[ $prog == ud ]] && size=1024 # a UD datagram fits in the MTU
  if run_pair "ibv_${prog}_pingpong" "ibv_${prog}_pingpong -g 0 -n 200 -s $size -p $tcp_port" \
    "ibv_${prog}_pingpong -g 0 -n 200 -s $size -p $tcp_port localhost" "$tcp_port"; then
    for f in "$out_s" "$out_c"; do
      grep -qE '^200 iters in [0-9.]+ seconds' "$f" || fail "ibv_${prog}_pingpong: no '200 iters in' in ${f##*/}"
      grep -qE 'remote address: .*GID ::1$' "$f" || fail "ibv_${prog}_pingpong: the peer's GID is not ::1 in ${f##*/}"
    done
  fi
done

# The RDMA CM over IPv6: a REQ ... RTU on QP1 between the two devices on
# ::1, the cma_hdr of IP version 6, then rping's RDMA traffic. The server
# is ready once its device holds the RoCEv2 port (its listen follows by
# microseconds; a REQ that comes first waits for it).
cm_port=$((tcp_port + 1))
if run_pair rping "rping -s -a ::1 -p $cm_port -v -C 10" "rping -c -a ::1 -p $cm_port -v -C 10" "udp:$roce_port"; then
  n=$(grep -c "^ping data: rdma-ping-" "$out_c")
  ((n == 10)) || fail "rping: the client printed $n pings, not 10"
fi

if ((failures)); then
  echo "$failures failure(s); logs in $logs"
  PP_KEEP=1
  trap - EXIT
  exit 1
fi
echo "all passed"
