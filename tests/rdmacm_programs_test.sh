#!/usr/bin/env bash
# Unmodified RDMA CM programs (rdma-core's rdmacm-utils, perftest -R) on
# softrdma's librdmacm.so.1 and libibverbs.so.1, between two processes on
# loopback addresses of their own (127.X.Y.1 server, 127.X.Y.2 client;
# SRDMA_ADDR each, RoCEv2 over UDP):
#  - rping -C 10 -v: both sides exit 0, the client prints its 10 pings;
#  - ucmatose (a connection, data both ways, disconnect): both exit 0;
#  - rdma_server/rdma_client (rdma_getaddrinfo, rdma_create_ep, the
#    listener's QP attributes given to rdma_get_request's ID, the
#    rdma_verbs.h helpers): both exit 0 and print "end 0";
#  - cmtime -c 40: forty connections opened at once from one address, each
#    established and disconnected (the CM's per-source bound lets a burst in);
#  - udaddy (UD through the RDMA CM: RDMA_PS_UDP, SIDR_REQ/SIDR_REP, then
#    datagrams both ways on the QPN and Q_Key the exchange gave, and
#    replies on AHs made from the received GRH), with one ID and with four
#    at 2000-byte messages: both exit 0 and print "data transfers complete";
#  - mckey: two receivers (127.X.Y.1, .4) and a sender (.2) join one IPv4
#    group (239.X.Y.Z, this run's own) as UD multicast over RoCEv2; each
#    receiver takes the sender's 10 datagrams; all three exit 0 and print
#    "data transfers complete" (mckey pauses 3 s after joining);
#  - udpong (rsockets' datagram socket, whose UD QPs come from
#    RDMA_PS_UDP IDs): run when this librdmacm has datagram rsockets, else
#    reported as skipped;
#  - ib_write_bw, ib_send_lat, ib_read_bw, ib_send_bw and ib_atomic_lat
#    with -R (server on 0.0.0.0: the process's SRDMA_ADDR device): both
#    exit 0 and the client prints its result line;
#  - a connect to a port nobody listens on: REJECTED (status 8) within
#    seconds, and udaddy's SIDR_REQ there UNREACHABLE (status 1, "service
#    ID not supported"); to an address nobody is at: UNREACHABLE within
#    seconds.
# A server is ready once its device's UDP port (4791 at its address) is
# bound (ss) (perftest: once it says it waits for a client); its listen
# follows by microseconds, and a REQ that comes first waits for it (the
# CM's listen grace), so every client runs once. Every wait is bounded.
# Skips (77) without the programs.
#
#   rdmacm_programs_test.sh LIBDIR   (softrdma's librdmacm.so.1 directory)
set -uo pipefail
libdir=${1:?usage: rdmacm_programs_test.sh LIBDIR}
libdir=$(cd "$libdir" 2>/dev/null && pwd) || { echo "FAIL: no directory '$1'" >&2; exit 1; }
for f in librdmacm.so.1 libibverbs.so.1; do
  [[ -e $libdir/$f ]] || { echo "FAIL: no $f in '$libdir'" >&2; exit 1; }
done
missing=()
for p in rping ucmatose rdma_server rdma_client cmtime udaddy udpong mckey ib_write_bw ib_send_lat ss timeout; do
  command -v "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "SKIP: not installed: ${missing[*]} (apt-get install rdmacm-utils perftest iproute2)"
  exit 77
fi

logs=$(mktemp -d)
[[ ${PP_KEEP:-} ]] || trap 'rm -rf "$logs"' EXIT
net=${SRDMA_TEST_NET:-127.$((RANDOM % 200 + 20))}.$(($$ % 250 + 1))
ip_a=$net.1
ip_b=$net.2
ip_nobody=$net.3
port=$((30000 + ($$ % 500) * 16))
failures=0
echo "server $ip_a, client $ip_b, ports from $port, library $libdir, logs $logs"

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
now_ms() { date +%s%3N; }
side() { # side ADDR CMD... : runs CMD on softrdma as the device at ADDR
  local addr=$1
  shift
  env LD_LIBRARY_PATH="$libdir" SRDMA_ADDR="$addr" stdbuf -oL -eL "$@"
}
# Waits (at most 15 s) until the device at $1 has its UDP port bound, or
# the server ($2) has exited.
wait_device() {
  local deadline=$(($(now_ms) + 15000))
  while (($(now_ms) < deadline)); do
    ss -Hlun "src $1:4791" 2>/dev/null | grep -q . && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
# run_pair NAME "SERVER CMD" "CLIENT CMD": both must exit 0; sets $out_s, $out_c.
run_pair() {
  local name=$1 server=$2 client=$3 ready=${4:-} spid rc_c rc_s deadline
  out_s=$logs/$name.server
  out_c=$logs/$name.client
  port=$((port + 1))
  server=${server//@PORT@/$port}
  client=${client//@PORT@/$port}
  # shellcheck disable=SC2086
  side "$ip_a" timeout 60 $server >"$out_s" 2>&1 &
  spid=$!
  if ! wait_device "$ip_a" "$spid"; then
    fail "$name: the server did not open its device"
    tail -n 5 "$out_s"
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    return 1
  fi
  # perftest says when it listens: wait (bounded) for that.
  if [[ $ready ]]; then
    deadline=$(($(now_ms) + 15000))
    while ! grep -q "$ready" "$out_s" && kill -0 "$spid" 2>/dev/null && (($(now_ms) < deadline)); do sleep 0.05; done
  fi
  # shellcheck disable=SC2086
  side "$ip_b" timeout 60 $client >"$out_c" 2>&1
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

if run_pair rping "rping -s -a $ip_a -p @PORT@ -v -C 10" "rping -c -a $ip_a -p @PORT@ -v -C 10"; then
  n=$(grep -c "^ping data: rdma-ping-" "$out_c")
  ((n == 10)) || fail "rping: the client printed $n pings, not 10"
fi

if run_pair ucmatose "ucmatose -b $ip_a -p @PORT@" "ucmatose -s $ip_a -b $ip_b -p @PORT@"; then
  grep -q "data transfers complete" "$out_c" || fail "ucmatose: no data transfers on the client"
  grep -q "disconnect" "$out_s" || fail "ucmatose: the server did not disconnect"
fi

if run_pair rdma_verbs "rdma_server -s $ip_a -p @PORT@" "rdma_client -s $ip_a -p @PORT@"; then
  grep -q "rdma_server: end 0" "$out_s" || fail "rdma_server: no 'end 0'"
  grep -q "rdma_client: end 0" "$out_c" || fail "rdma_client: no 'end 0'"
fi

# cmtime's server serves until killed: its client's exit and table decide.
port=$((port + 1))
side "$ip_a" timeout 60 cmtime -b "$ip_a" -p "$port" >"$logs/cmtime.server" 2>&1 &
cmtime_srv=$!
if wait_device "$ip_a" "$cmtime_srv"; then
  side "$ip_b" timeout 30 cmtime -s "$ip_a" -p "$port" -c 40 >"$logs/cmtime.client" 2>&1
  rc=$?
  if ((rc != 0)) || grep -q "REJECTED\|UNREACHABLE\|failure" "$logs/cmtime.client" ||
    ! grep -qE "^connect +:" "$logs/cmtime.client"; then
    fail "cmtime -c 40: exit $rc"
    tail -n 12 "$logs/cmtime.client"
  else
    echo "ok: cmtime -c 40 (forty connections at once, established and disconnected)"
  fi
else
  fail "the cmtime server did not open its device"
fi
# The background side is a subshell around `timeout`, which passes the
# signal on to cmtime; the wait holds the next pair until its device closed.
pkill -TERM -P "$cmtime_srv" 2>/dev/null
wait "$cmtime_srv" 2>/dev/null

# UD through the RDMA CM. udaddy's port is fixed (7174): each address pair
# is the test's own.
if run_pair udaddy "udaddy -b $ip_a" "udaddy -s $ip_a -b $ip_b"; then
  grep -q "data transfers complete" "$out_s" || fail "udaddy: no data transfers on the server"
  grep -q "data transfers complete" "$out_c" || fail "udaddy: no data transfers on the client"
fi
if run_pair udaddy_c4 "udaddy -b $ip_a -c 4 -C 50 -S 2000" "udaddy -s $ip_a -b $ip_b -c 4 -C 50 -S 2000"; then
  grep -q "data transfers complete" "$out_s" || fail "udaddy -c 4: no data transfers on the server"
  grep -q "data transfers complete" "$out_c" || fail "udaddy -c 4: no data transfers on the client"
fi

# Multicast: two receivers join first (each says so), then the sender.
group=239.$((RANDOM % 200 + 20)).$(($$ % 250 + 1)).$((RANDOM % 250 + 1))
ip_c=$net.4
recv_pids=()
for ip in "$ip_a" "$ip_c"; do
  side "$ip" timeout 30 mckey -m "$group" -b "$ip" -C 10 >"$logs/mckey.$ip" 2>&1 &
  recv_pids+=($!)
done
joined() { grep -q "mckey: joined" "$logs/mckey.$ip_a" && grep -q "mckey: joined" "$logs/mckey.$ip_c"; }
deadline=$(($(now_ms) + 15000))
while ! joined && (($(now_ms) < deadline)); do sleep 0.05; done
if joined; then
  side "$ip_b" timeout 30 mckey -m "$group" -b "$ip_b" -s -C 10 >"$logs/mckey.sender" 2>&1
  rc_s=$?
  rcs=()
  for pid in "${recv_pids[@]}"; do
    wait "$pid"
    rcs+=($?)
  done
  if ((rc_s != 0 || rcs[0] != 0 || rcs[1] != 0)) || ! grep -q "data transfers complete" "$logs/mckey.$ip_a" ||
    ! grep -q "data transfers complete" "$logs/mckey.$ip_c"; then
    fail "mckey: sender exit $rc_s, receivers exit ${rcs[*]}"
    tail -n 5 "$logs/mckey.sender" "$logs/mckey.$ip_a" "$logs/mckey.$ip_c"
  else
    echo "ok: mckey (group $group: two receivers took the sender's 10 datagrams each)"
  fi
else
  fail "mckey: the receivers did not join $group"
  tail -n 5 "$logs/mckey.$ip_a" "$logs/mckey.$ip_c"
  kill "${recv_pids[@]}" 2>/dev/null
  wait "${recv_pids[@]}" 2>/dev/null
fi

# udpong needs rsockets (its datagram socket); without them it cannot start.
# Its server serves until killed: env, stdbuf and timeout exec, so $! is
# timeout's PID, which passes the SIGTERM on (a function run in the
# background would leave udpong running with the device's address bound).
port=$((port + 1))
env LD_LIBRARY_PATH="$libdir" SRDMA_ADDR="$ip_a" stdbuf -oL -eL timeout 30 udpong -b "$ip_a" -p "$port" >"$logs/udpong.server" 2>&1 &
udpong_srv=$!
# wait_device returns once the device is bound or the server has exited:
# without datagram rsockets it exits at once, saying so.
if ! wait_device "$ip_a" "$udpong_srv" && grep -q "Function not implemented" "$logs/udpong.server"; then
  echo "skip: udpong (this librdmacm has no datagram rsockets yet: $(head -n 1 "$logs/udpong.server"))"
elif kill -0 "$udpong_srv" 2>/dev/null; then
  side "$ip_b" timeout 30 udpong -s "$ip_a" -b "$ip_b" -p "$port" -C 1000 -S 1000 >"$logs/udpong.client" 2>&1
  rc=$?
  if ((rc != 0)) || ! grep -qE "^custom +1000 +1k" "$logs/udpong.client"; then
    fail "udpong: client exit $rc"
    tail -n 8 "$logs/udpong.client"
  else
    echo "ok: udpong (1000 datagrams of 1000 bytes)"
  fi
else
  fail "the udpong server did not open its device"
  tail -n 5 "$logs/udpong.server"
fi
kill "$udpong_srv" 2>/dev/null
wait "$udpong_srv" 2>/dev/null

# perftest over the RDMA CM (-R): a handshake connection, then the test's
# own, which the server listens for only after the handshake told the
# client to connect (the race the CM's listen grace absorbs).
for prog in ib_write_bw ib_send_lat ib_read_bw ib_send_bw ib_atomic_lat; do
  if run_pair "$prog" "$prog -R -p @PORT@" "$prog -R -p @PORT@ $ip_a" "Waiting for client to connect"; then
    # The result line: the message size (bytes), the iterations, then numbers > 0.
    if ! awk '$1 ~ /^[0-9]+$/ && NF >= 4 && $2 ~ /^[0-9]+$/ && $3 + 0 > 0 { found = 1 } END { exit !found }' "$out_c"; then
      fail "$prog: no result line on the client"
      tail -n 5 "$out_c"
    fi
  fi
done

# Refused: a listening device, no listener on the port -> REJECTED 8.
port=$((port + 1))
side "$ip_a" timeout 30 rping -s -a "$ip_a" -p "$port" -C 1 >"$logs/holder" 2>&1 &
holder=$!
if wait_device "$ip_a" "$holder"; then
  start=$(now_ms)
  side "$ip_b" timeout 20 ucmatose -s "$ip_a" -b "$ip_b" -p $((port + 1)) >"$logs/refused" 2>&1
  rc=$?
  took=$(($(now_ms) - start))
  if ! grep -q "RDMA_CM_EVENT_REJECTED, error: 8" "$logs/refused" || ((rc == 0 || took > 5000)); then
    fail "refused connect: exit $rc after $took ms"
    cat "$logs/refused"
  else
    echo "ok: refused connect: REJECTED (8) after $took ms"
  fi
  # The same for UD: nobody listens on 7174 there -> SIDR_REP "unsupported".
  start=$(now_ms)
  side "$ip_b" timeout 20 udaddy -s "$ip_a" -b "$ip_b" >"$logs/udaddy_refused" 2>&1
  rc=$?
  took=$(($(now_ms) - start))
  if ! grep -q "RDMA_CM_EVENT_UNREACHABLE, error: 1" "$logs/udaddy_refused" || ((rc == 0 || took > 5000)); then
    fail "refused udaddy: exit $rc after $took ms"
    cat "$logs/udaddy_refused"
  else
    echo "ok: refused udaddy: UNREACHABLE (1, service ID not supported) after $took ms"
  fi
else
  fail "the refusing server did not open its device"
fi
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

# Nobody at the address -> UNREACHABLE (-ETIMEDOUT) after the CM's retries.
start=$(now_ms)
side "$ip_b" timeout 30 ucmatose -s "$ip_nobody" -b "$ip_b" -p "$port" >"$logs/unreachable" 2>&1
rc=$?
took=$(($(now_ms) - start))
if ! grep -q "RDMA_CM_EVENT_UNREACHABLE" "$logs/unreachable" || ((rc == 0 || took > 10000)); then
  fail "unreachable connect: exit $rc after $took ms"
  cat "$logs/unreachable"
else
  echo "ok: unreachable connect: UNREACHABLE after $took ms"
fi

if ((failures)); then
  echo "FAILED: $failures"
  exit 1
fi
echo "PASS"
