#!/usr/bin/env bash
# rsockets between two processes on loopback addresses of their own
# (127.X.Y.1 server, 127.X.Y.2 client; SRDMA_ADDR each) on softrdma's
# librdmacm.so.1 and libibverbs.so.1:
#  - rstream (rdma-core's rsocket benchmark) blocking (-T b) at 4 KiB,
#    64 KiB and 1 MiB, non-blocking (its default) with data verification
#    (-T v) over its whole size series, async (-T a, rpoll before each
#    call) at 64 KiB: both sides exit 0 and print their result line;
#  - rcopy: a 3 MB random file copied, compared by checksum;
#  - riostream (riomap/riowrite direct placement) at 4 KiB x 100 and
#    1 MiB x 20, with -T v: both exit 0 (its latency runs, whose peers spin
#    on memory, are left out: see docs/DESIGN.md);
#  - through Debian's librspreload.so: stream_check (plain sockets, 50 MB
#    in writes of 1 B to 1 MiB, poll() and O_NONBLOCK, every byte checked
#    and the count and hash confirmed), and iperf3 -c for 2 s at 64 KiB
#    (iperf3 -1 server): both exit 0 and the receiver reports bytes;
#  - rsocket_hostile: a fake peer with bad private data, reserved and
#    unknown immediates, oversized DATA and a write past the advertised
#    buffer; each connection ends with an error, the server survives.
# A server is ready once its device's UDP port (4791 at its address) is
# bound; its listen follows at once and a REQ that comes first waits for it
# (the CM's listen grace). Every wait is bounded. Skips (77) without
# rdmacm-utils, iperf3, the preload library or ss.
#
#  - AF_INET6 rsockets on the IPv6 addresses that stand for IPv4 ones:
#    rstream -b ::1 with -s ::ffff:A (blocking, 64 KiB), rstream -f ip
#    with the server unbound (getaddrinfo's passive ::) and -T v; a real
#    IPv6 destination (2001:db8::1) refused with EAFNOSUPPORT and a reason;
#  - udpong (datagram rsockets: the first datagram over UDP, then UD) with
#    1000 datagrams of 1000 bytes, after a stray UDP datagram to its port;
#    and with its server unbound (::1, an AF_INET6 datagram rsocket) and
#    its client to ::ffff:A;
#  - rsocket_duplex: 64 MB each way at once, a sender and a receiver thread
#    per side on one rsocket, every byte checked.
#
#   rsocket_programs_test.sh LIBDIR RSOCKET_HOSTILE STREAM_CHECK RSOCKET_DUPLEX
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/perf_processes.sh source-path=SCRIPTDIR
source "$here/perf_processes.sh"
libdir=${1:?usage: rsocket_programs_test.sh LIBDIR RSOCKET_HOSTILE STREAM_CHECK RSOCKET_DUPLEX}
hostile=${2:?usage: rsocket_programs_test.sh LIBDIR RSOCKET_HOSTILE STREAM_CHECK RSOCKET_DUPLEX}
stream_check=${3:?usage: rsocket_programs_test.sh LIBDIR RSOCKET_HOSTILE STREAM_CHECK RSOCKET_DUPLEX}
duplex=${4:?usage: rsocket_programs_test.sh LIBDIR RSOCKET_HOSTILE STREAM_CHECK RSOCKET_DUPLEX}
libdir=$(cd "$libdir" 2>/dev/null && pwd) || { echo "FAIL: no directory '$1'" >&2; exit 1; }
for f in "$libdir/librdmacm.so.1" "$libdir/libibverbs.so.1"; do
  [[ -e $f ]] || { echo "FAIL: no $f" >&2; exit 1; }
done
for f in "$hostile" "$stream_check" "$duplex"; do
  [[ -x $f ]] || { echo "FAIL: '$f' is not executable" >&2; exit 1; }
done
preload=/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so
missing=()
for p in rstream rcopy riostream udpong iperf3 ss timeout stdbuf sha256sum; do
  command -v "$p" >/dev/null 2>&1 || missing+=("$p")
done
[[ -e $preload ]] || missing+=("$preload")
if ((${#missing[@]})); then
  echo "SKIP: not installed: ${missing[*]} (apt-get install rdmacm-utils librdmacm1 iperf3 iproute2)"
  exit 77
fi

pp_setup
pp_programs_addresses 26000
echo "server $ip_a, client $ip_b, ports from $port_base, library $libdir"
limit=60
side() { # side ADDR CMD...: CMD on softrdma as the device at ADDR
  local addr=$1
  shift
  env "LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "SRDMA_ADDR=$addr" stdbuf -oL -eL "$@"
}
preloaded() { # preloaded ADDR CMD...: the same through librspreload.so
  local addr=$1
  shift
  side "$addr" env "LD_PRELOAD=$preload" "$@"
}
# wait_device ADDR PID: the device at ADDR has its UDP port bound (15 s at
# most), or PID exited first.
wait_device() {
  local start
  start=$(pp_now_us)
  until ss -Hlun "src $1:4791" 2>/dev/null | grep -q .; do
    pp_alive "$2" || return 1
    (($(pp_now_us) - start < 15000000)) || return 1
    sleep 0.02
  done
}
show() {
  echo "  --- $1"
  tail -n 12 "$1" | sed 's/^/  | /'
}
# pair NAME SERVER_WRAPPER "SERVER ARGS" CLIENT_WRAPPER "CLIENT ARGS":
# @PORT@, @A@ substituted; both must exit 0 (the server within 20 s of the
# client). Sets out_s and out_c.
pair() {
  local name=$1 swrap=$2 sargs=$3 cwrap=$4 cargs=$5 spid rc_c
  pp_next_port || return 1
  sargs=${sargs//@PORT@/$PORT} cargs=${cargs//@PORT@/$PORT}
  sargs=${sargs//@A@/$ip_a} cargs=${cargs//@A@/$ip_a}
  out_s=$PP_TMP/$name.server out_c=$PP_TMP/$name.client
  # shellcheck disable=SC2086
  $swrap "$ip_a" timeout $limit $sargs >"$out_s" 2>&1 &
  spid=$!
  PP_PIDS+=("$spid")
  if ! wait_device "$ip_a" "$spid"; then
    pp_fail "$name: the server did not open its device"
    show "$out_s"
    pp_kill "$spid"
    return 1
  fi
  rc_c=0
  # shellcheck disable=SC2086
  $cwrap "$ip_b" timeout $limit $cargs >"$out_c" 2>&1 || rc_c=$?
  if ! pp_wait_exit "$spid" 20; then
    pp_fail "$name: the server did not exit (client exit $rc_c)"
    show "$out_s"
    show "$out_c"
    pp_kill "$spid"
    return 1
  fi
  if ((rc_c != 0 || PP_RC != 0)); then
    pp_fail "$name: client exit $rc_c, server exit $PP_RC"
    show "$out_s"
    show "$out_c"
    return 1
  fi
}
# result_line NAME: both rstream/riostream sides printed a custom result.
result_line() {
  local f
  for f in "$out_s" "$out_c"; do
    if ! grep -qE '^(custom|[0-9]+[kmg]?_(bw|lat)) ' "$f"; then
      pp_fail "$1: no result line in ${f##*/}"
      show "$f"
      return 1
    fi
  done
  echo "ok   $1: $(grep -E '^(custom|[0-9]+[kmg]?_(bw|lat)) ' "$out_c" | tail -n 1 | tr -s ' ')"
}

echo "--- rstream"
for v in "b 4096 2000" "b 65536 1000" "b 1048576 100" "a 65536 500"; do
  read -r t size count <<<"$v"
  args="-T $t -S $size -C $count"
  pair "rstream-$t-$size" side "rstream -b @A@ -p @PORT@ $args" side "rstream -s @A@ -p @PORT@ $args" &&
    result_line "rstream -T $t -S $size -C $count"
done
# The default (non-blocking) over rstream's whole size series, data verified.
if pair rstream-verify side "rstream -b @A@ -p @PORT@ -T v" side "rstream -s @A@ -p @PORT@ -T v"; then
  n=$(grep -cE '_(lat|bw) ' "$out_c" || true)
  if ((n >= 6)); then echo "ok   rstream -T v: $n sizes, data verified"; else pp_fail "rstream -T v: $n result lines"; show "$out_c"; fi
fi

echo "--- AF_INET6 rsockets: IPv6 addresses that stand for IPv4 ones"
# The server on ::1 (a loopback address: the device's, as rdma_bind_addr
# takes it), the client to ::ffff:A; blocking, 64 KiB.
pair rstream-v6-loopback side "rstream -b ::1 -p @PORT@ -T b -S 65536 -C 200" \
  side "rstream -s ::ffff:@A@ -p @PORT@ -T b -S 65536 -C 200" &&
  result_line "rstream -b ::1 / -s ::ffff:A -T b -S 65536 -C 200"
# -f ip (numeric hosts), the server on getaddrinfo's passive answer (::
# before 0.0.0.0 where the host has IPv6), data verified.
pair rstream-f-ip side "rstream -f ip -p @PORT@ -T v -S 4096 -C 500" \
  side "rstream -f ip -s ::ffff:@A@ -p @PORT@ -T v -S 4096 -C 500" &&
  result_line "rstream -f ip (server unbound, client -s ::ffff:A) -T v -S 4096 -C 500"
# A real IPv6 address is refused: EAFNOSUPPORT, the reason under
# SRDMA_VERBS_DEBUG.
pp_next_port || true
out=$PP_TMP/rstream-v6-real.client
if side "$ip_b" env SRDMA_VERBS_DEBUG=1 timeout $limit rstream -s 2001:db8::1 -p "$PORT" -S 4096 -C 10 >"$out" 2>&1; then
  pp_fail "rstream -s 2001:db8::1: exit 0, expected a refusal"
  show "$out"
elif grep -q "rconnect: Address family not supported" "$out" && grep -q "not an IPv4 one" "$out"; then
  echo "ok   rstream -s 2001:db8::1: refused (EAFNOSUPPORT, with the reason)"
else
  pp_fail "rstream -s 2001:db8::1: not refused with EAFNOSUPPORT and a reason"
  show "$out"
fi

echo "--- rcopy"
src=$PP_TMP/rcopy.src dst=$PP_TMP/rcopy.dst
head -c 3000000 /dev/urandom >"$src"
pp_next_port || true
rcopy_port=$PORT
# env and timeout exec: $! is timeout's PID, which passes SIGTERM on.
env "LD_LIBRARY_PATH=$libdir" "SRDMA_ADDR=$ip_a" timeout $limit rcopy -p "$rcopy_port" >"$PP_TMP/rcopy.server" 2>&1 &
rpid=$!
PP_PIDS+=("$rpid")
if wait_device "$ip_a" "$rpid"; then
  if side "$ip_b" timeout $limit rcopy "$src" "$ip_a:$dst" -p "$rcopy_port" >"$PP_TMP/rcopy.client" 2>&1; then
    # rcopy's server closes the file before it answers the client.
    if [[ $(sha256sum <"$src") == $(sha256sum <"$dst" 2>/dev/null) ]]; then
      echo "ok   rcopy: 3000000 bytes, same sha256"
    else
      pp_fail "rcopy: the copy differs"
    fi
  else
    pp_fail "rcopy: client exit non-zero"
    show "$PP_TMP/rcopy.client"
    show "$PP_TMP/rcopy.server"
  fi
else
  pp_fail "rcopy: the server did not open its device"
fi
kill -TERM "$rpid" 2>/dev/null # rcopy's server serves until killed
pp_wait_exit "$rpid" 10 || pp_kill "$rpid"

echo "--- riostream"
for v in "4096 100" "1048576 20"; do
  read -r size count <<<"$v"
  args="-T v -S $size -C $count"
  pair "riostream-$size" side "riostream -b @A@ -p @PORT@ $args" side "riostream -s @A@ -p @PORT@ $args" &&
    result_line "riostream -T v -S $size -C $count"
done

echo "--- through librspreload.so"
if pair stream_check preloaded "$stream_check server @A@ @PORT@ 50000000" preloaded "$stream_check client @A@ @PORT@ 50000000"; then
  if grep -q "50000000 bytes checked" "$out_s" && grep -q "50000000 bytes sent and confirmed" "$out_c"; then
    echo "ok   stream_check: 50000000 bytes, every byte checked, count and hash confirmed"
  else
    pp_fail "stream_check: no confirmation"
    show "$out_s"
    show "$out_c"
  fi
fi
if pair iperf3 preloaded "iperf3 -s -1 -B @A@ -p @PORT@" preloaded "iperf3 -c @A@ -B $ip_b -p @PORT@ -t 2 -l 65536"; then
  line=$(grep -E 'receiver$' "$out_c" | tail -n 1 | tr -s ' ')
  if [[ $line =~ ([0-9.]+)\ ([KMG])Bytes ]] && [[ ${BASH_REMATCH[1]} != 0.00 ]]; then
    echo "ok   iperf3 over rsockets: $line"
  else
    pp_fail "iperf3: no receiver bytes"
    show "$out_c"
  fi
fi

echo "--- datagrams (udpong: UD after a first datagram over UDP)"
# A stray datagram first (no ds_udp_header): the server drops it and serves.
pp_next_port || true
udp_port=$PORT
env "LD_LIBRARY_PATH=$libdir" "SRDMA_ADDR=$ip_a" stdbuf -oL timeout $limit udpong -b "$ip_a" -p "$udp_port" >"$PP_TMP/udpong.server" 2>&1 &
upid=$!
PP_PIDS+=("$upid")
if wait_device "$ip_a" "$upid"; then
  echo "not an rsocket's datagram" >"/dev/udp/$ip_a/$udp_port" || true
  if side "$ip_b" timeout $limit udpong -s "$ip_a" -p "$udp_port" -C 1000 -S 1000 >"$PP_TMP/udpong.client" 2>&1 &&
    grep -qE '^custom +1000 +1k' "$PP_TMP/udpong.client"; then
    echo "ok   udpong: 1000 datagrams of 1000 bytes (after a stray one)"
  else
    pp_fail "udpong failed"
    show "$PP_TMP/udpong.client"
    show "$PP_TMP/udpong.server"
  fi
else
  pp_fail "udpong: the server did not open its device"
fi
kill -TERM "$upid" 2>/dev/null # udpong's server serves until killed
pp_wait_exit "$upid" 10 || pp_kill "$upid"
# udpong's server as Debian runs it, unbound: getaddrinfo(NULL) gives ::1
# (an AF_INET6 datagram rsocket) or 127.0.0.1, the device's address as a
# loopback one; the client sends to ::ffff:A, and the server reports the
# client's address as AF_INET6 (recvfrom).
pp_next_port || true
udp_port=$PORT
env "LD_LIBRARY_PATH=$libdir" "SRDMA_ADDR=$ip_a" stdbuf -oL timeout $limit udpong -p "$udp_port" >"$PP_TMP/udpong6.server" 2>&1 &
upid=$!
PP_PIDS+=("$upid")
if wait_device "$ip_a" "$upid"; then
  if side "$ip_b" timeout $limit udpong -s "::ffff:$ip_a" -p "$udp_port" -C 1000 -S 1000 >"$PP_TMP/udpong6.client" 2>&1 &&
    grep -qE '^custom +1000 +1k' "$PP_TMP/udpong6.client"; then
    echo "ok   udpong (server unbound, client -s ::ffff:A): 1000 datagrams of 1000 bytes; $(grep -m1 'client login' "$PP_TMP/udpong6.server")"
  else
    pp_fail "udpong (server unbound) failed"
    show "$PP_TMP/udpong6.client"
    show "$PP_TMP/udpong6.server"
  fi
else
  pp_fail "udpong (server unbound): the server did not open its device"
  show "$PP_TMP/udpong6.server"
fi
kill -TERM "$upid" 2>/dev/null
pp_wait_exit "$upid" 10 || pp_kill "$upid"

echo "--- both directions at once, two threads per side"
pp_next_port || true
if env "LD_LIBRARY_PATH=$libdir" timeout $limit "$duplex" "${ip_a%.1}" "$PORT" 64000000 >"$PP_TMP/duplex.out" 2>&1 &&
  grep -q "server: 64000000 bytes each way, checked" "$PP_TMP/duplex.out" &&
  grep -q "client: 64000000 bytes each way, checked" "$PP_TMP/duplex.out"; then
  echo "ok   rsocket_duplex: 64000000 bytes each way at once, checked on both sides"
else
  pp_fail "rsocket_duplex failed"
  show "$PP_TMP/duplex.out"
fi

echo "--- a hostile peer"
pp_next_port || true
if side "$ip_a" timeout $limit "$hostile" "${ip_a%.1}" "$PORT" >"$PP_TMP/hostile.out" 2>&1; then
  echo "ok   $(tail -n 1 "$PP_TMP/hostile.out")"
else
  pp_fail "rsocket_hostile failed"
  show "$PP_TMP/hostile.out"
fi

pp_finish
