#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions called through wait_for and the traps
# RoCEv2 on the wire, checked by an independent decoder and an independent
# ICRC computation.
#
#   wire_capture_test.sh SRDMA
#
# Captures lo with dumpcap (only this script's own loopback addresses: UDP
# 4791, and marker datagrams to port 9) while `srdma perf` servers and
# clients, each in a process of its own, run short tests one after the
# other over the RoCEv2 link: write_bw, read_bw, send_bw, write_lat,
# read_lat, send_lat, atomic_lat. Then:
#   1. tests/roce_icrc.py computes every frame's ICRC from the captured
#      bytes (zlib CRC-32 over the masked IPv4/UDP/BTH pseudo-headers, no
#      softrdma code) and requires each one right. It cuts the UDP GSO
#      datagrams the capture on lo holds into the frames a wire carries,
#      and `roce_icrc.py --self-test` shows, on this capture, that it
#      catches flipped bits and ignores the masked fields.
#   2. tshark decodes those frames (`--disable-protocol rpcordma`: its
#      heuristic claims small SEND payloads and calls them malformed); every
#      one must be InfiniBand, not malformed, without expert notes. Per test,
#      the opcodes it must make appear. Per QP and direction, request PSNs go
#      up by one per packet (a READ REQUEST by its response's packets),
#      responses carry their requests' PSNs; a PSN sent again must carry
#      what it carried the first time and is allowed only where the sender's
#      own report counts retransmissions (a busy machine delays ACKs past the
#      timer even on lo); no gaps, no NAKs. FIRST/MIDDLE carry the MTU,
#      LAST/ONLY at most that, PadCnt pads to 4, the AckReq bit ends every
#      message; RETH DMA length is the message size on WRITE FIRST/ONLY and
#      READ REQUEST and the payloads add up to it; AETH syndromes are ACKs
#      and MSNs count the messages done; AtomicETH addresses are 8-byte
#      aligned and the FETCH_ADD originals add up.
#
# Exit 77 (skipped) without tshark, dumpcap or python3, or where capturing
# on lo is not permitted. Every wait polls for its event with a limit;
# nothing sleeps to let something happen. Logs and captures are kept on
# failure (and with WIRE_CAPTURE_KEEP=1). WIRE_CAPTURE_ITERS: iterations
# per test (4; 2 in a sanitizer build).
set -u
# The frames under test are the wire's: not the same-host path's rings.
export SRDMA_SAME_HOST=0

BIN=${1:?usage: wire_capture_test.sh SRDMA}
HERE=$(cd "$(dirname "$0")" && pwd)
CHECK=$HERE/roce_icrc.py

skip() {
  echo "SKIP: $*"
  exit 77
}

[[ -x $BIN ]] || { echo "FAIL: '$BIN' is not an executable srdma" >&2; exit 1; }
command -v python3 >/dev/null || skip "python3 is not installed (package python3)"
command -v tshark >/dev/null || skip "tshark is not installed (package tshark)"
command -v dumpcap >/dev/null || skip "dumpcap is not installed (package wireshark-common, pulled in by tshark)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/srdma-wire.XXXXXX") || { echo "FAIL: cannot make a temporary directory" >&2; exit 1; }
PIDS=()
FAILS=0
CAP_PID=

# shellcheck source=tests/process_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/process_lib.sh"
alive() { kill -0 "$1" 2>/dev/null; }

cleanup() {
  local rc=$? pid
  trap - EXIT HUP INT TERM
  set +e
  for pid in "${PIDS[@]}" $CAP_PID; do
    if alive "$pid"; then
      kill -9 "$pid" 2>/dev/null
      echo "cleanup: killed PID $pid, still running at exit" >&2
    fi
    wait "$pid" 2>/dev/null
  done
  if ((rc != 0 && rc != 77)) || [[ -n ${WIRE_CAPTURE_KEEP:-} ]]; then
    echo "logs and captures kept in $TMP" >&2
  else
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "FAIL: $*"
  FAILS=$((FAILS + 1))
}


# A UDP datagram to MARK_IP port 9: the capture's own clock. Once it is in
# the capture file, so is everything sent before it.
MARK_IP=$(pid_ip $$ 0)
send_marker() {
  python3 - "$MARK_IP" "$1" <<'EOF'
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(sys.argv[2].encode(), (sys.argv[1], 9))
EOF
}
marker_captured() { grep -qaF "$1" "$PCAP"; }

# ---------------------------------------------------------------- capture

PCAP=$TMP/capture.pcapng
CAP_ERR=$TMP/dumpcap.err
dumpcap -i lo -B 64 -f "net $MARK_IP/30 and (udp port 4791 or udp dst port 9)" -w "$PCAP" >"$TMP/dumpcap.out" 2>"$CAP_ERR" &
CAP_PID=$!
# dumpcap says "Capturing on" before it opens the device: the header in the
# file, then a datagram seen in it (below), say it really captures.
capture_started() { ! alive "$CAP_PID" || { grep -q "^Capturing on" "$CAP_ERR" && [[ -s $PCAP ]]; }; }
if ! wait_for 15000 capture_started || ! alive "$CAP_PID"; then
  alive "$CAP_PID" && kill -9 "$CAP_PID" 2>/dev/null
  wait "$CAP_PID" 2>/dev/null
  CAP_PID=
  reason=$(grep -v "^Capturing on" "$CAP_ERR" | head -n 2 | tr '\n' ' ')
  if grep -qiE "permission|not permitted|operation not permitted|don't have permission|no such device|no suitable device|couldn't run|capabilit" "$CAP_ERR"; then
    skip "capturing on lo is not permitted here: $reason"
  fi
  skip "dumpcap cannot capture on lo: ${reason:-no output within 15 s}"
fi
START_MARK="srdma-wire-capture-start-$$-$RANDOM$RANDOM"
send_marker "$START_MARK"
if ! wait_for 15000 marker_captured "$START_MARK"; then
  fail "dumpcap runs but a datagram sent on lo did not reach its capture file within 15 s"
  exit 1
fi
echo "capturing on lo (dumpcap PID $CAP_PID) into $PCAP"

# ---------------------------------------------------------------- traffic

# The tests run one after the other, each with a server and a client in
# processes of their own, on this script's loopback addresses (SERVER_IP,
# CLIENT_IP: no other process uses them) and a TCP port from its PID. A
# marker datagram before each test tells the checks which frames are whose;
# the manifest, which test ran with which size and MTU.
SERVER_IP=$(pid_ip $$ 1)
CLIENT_IP=$(pid_ip $$ 2)
PORT=$((20000 + $$ % 12000))
MANIFEST=$TMP/manifest
: >"$MANIFEST"

# retransmissions SIDE DIR: what SIDE (client, server) counted, from the
# first report that has its transport line; -1 without one.
retransmissions() {
  local n
  n=$(cat "$2/client.out" "$2/server.out" 2>/dev/null |
    sed -n "s/^ *transport $1: .*retransmissions \([0-9][0-9]*\).*/\1/p" | head -n1)
  echo "${n:--1}"
}

# run_pair NAME SIZE MTU ITERS TEST [OPTIONS...]
run_pair() {
  local name=$1 size=$2 mtu=$3 iters=$4 test=$5
  shift 5
  local dir=$TMP/$name srv_pid cli_pid rc t0
  t0=$(now_ms)
  mkdir -p "$dir"
  send_marker "srdma-wire-test-$$-$name"
  "$BIN" perf "$test" --ip "$SERVER_IP" -p "$PORT" -s "$size" --mtu "$mtu" -n "$iters" "$@" \
    >"$dir/server.out" 2>"$dir/server.err" &
  srv_pid=$!
  PIDS+=("$srv_pid")
  server_ready() { grep -q "^waiting for a client on " "$dir/server.out" || ! alive "$srv_pid"; }
  if ! wait_for 20000 server_ready || ! grep -q "^waiting for a client on " "$dir/server.out"; then
    fail "$name: the server did not say it was waiting within 20 s (or exited):"
    sed 's/^/    server: /' "$dir/server.out" "$dir/server.err"
    kill -9 "$srv_pid" 2>/dev/null
    wait "$srv_pid" 2>/dev/null
    return 1
  fi
  "$BIN" perf "$test" --ip "$CLIENT_IP" -p "$PORT" -s "$size" --mtu "$mtu" -n "$iters" "$@" "$SERVER_IP" \
    >"$dir/client.out" 2>"$dir/client.err" &
  cli_pid=$!
  PIDS+=("$cli_pid")
  if ! wait_for 30000 eval "! alive $cli_pid"; then
    fail "$name: the client did not finish within 30 s"
    kill -9 "$cli_pid" "$srv_pid" 2>/dev/null
  fi
  wait "$cli_pid"
  rc=$?
  if ((rc != 0)); then
    fail "$name: the client exited $rc:"
    sed 's/^/    client: /' "$dir/client.out" "$dir/client.err"
  fi
  if ! wait_for 10000 eval "! alive $srv_pid"; then
    fail "$name: the server did not exit within 10 s of its client"
    kill -9 "$srv_pid" 2>/dev/null
  fi
  wait "$srv_pid"
  rc=$?
  if ((rc != 0)); then
    fail "$name: the server exited $rc:"
    sed 's/^/    server: /' "$dir/server.out" "$dir/server.err"
  fi
  # The sides' own count of retransmissions (the report's "transport
  # client: ... retransmissions N" lines; -1 when there is none): the
  # checks allow a PSN sent again only where its sender counted one.
  echo "$name $test $SERVER_IP $CLIENT_IP $size $mtu $iters $(retransmissions client "$dir") $(retransmissions server "$dir")" >>"$MANIFEST"
  echo "ran $name: srdma perf $test -s $size --mtu $mtu -n $iters${*:+ $*} (server $SERVER_IP, client $CLIENT_IP, TCP port $PORT): $(($(now_ms) - t0)) ms"
}

# What runs: every opcode perf makes, each segmentation (FIRST/MIDDLE/LAST
# and ONLY, a LAST with PadCnt 3, READ responses of both kinds), both ways
# for the ping-pong tests. A sanitizer build runs the same with fewer
# iterations. On a machine so busy that the runs have taken BUDGET seconds
# (default 70, of ctest's 120), the rest are left out, said so, and what
# ran is checked.
ITERS=${WIRE_CAPTURE_ITERS:-4}
if grep -qaE '__(tsan|asan|msan)_init' "$BIN"; then ITERS=${WIRE_CAPTURE_ITERS:-2}; fi
BUDGET_MS=$((${WIRE_CAPTURE_BUDGET_S:-70} * 1000))
T_START=$(now_ms)
LEFT_OUT=()
while read -r name size mtu; do
  if (($(now_ms) - T_START > BUDGET_MS)); then
    LEFT_OUT+=("$name")
    continue
  fi
  run_pair "$name" "$size" "$mtu" "$ITERS" "$name"
done <<'RUNS'
write_bw 8192 1024
read_bw 8192 1024
send_bw 1001 256
write_lat 5 1024
read_lat 64 256
send_lat 64 1024
atomic_lat 8 1024
RUNS
if ((${#LEFT_OUT[@]})); then
  echo "NOTE: the runs took over ${WIRE_CAPTURE_BUDGET_S:-70} s on this busy machine; left out: ${LEFT_OUT[*]}"
fi

END_MARK="srdma-wire-capture-end-$$-$RANDOM$RANDOM"
send_marker "$END_MARK"
wait_for 15000 marker_captured "$END_MARK" || fail "the end marker did not reach the capture file within 15 s"
kill -INT "$CAP_PID"
if ! wait_for 15000 eval '! alive '"$CAP_PID"; then
  fail "dumpcap did not stop within 15 s of SIGINT"
  kill -9 "$CAP_PID"
fi
wait "$CAP_PID"
CAP_PID=
# "Packets received/dropped on interface 'Loopback: lo': N/D (...)"
stats=$(grep -m1 "received/dropped" "$CAP_ERR")
captured=$(tr '\r' '\n' <"$CAP_ERR" | sed -n 's/^Packets captured: \([0-9]*\).*/\1/p')
if [[ $stats =~ :\ ([0-9]+)/([0-9]+) ]]; then
  if ((BASH_REMATCH[2] != 0)); then
    fail "the capture dropped ${BASH_REMATCH[2]} packets: its frames are not the whole run ($stats)"
  fi
  if [[ -n $captured ]] && ((captured != BASH_REMATCH[1])); then
    fail "the kernel handed dumpcap ${BASH_REMATCH[1]} packets but it wrote $captured"
  fi
else
  fail "dumpcap did not report its counts: $(tr '\n' ' ' <"$CAP_ERR")"
fi
echo "capture stopped: ${captured:-?} packets ($(($(wc -l <"$MANIFEST") + 2)) of them the markers)"

# ---------------------------------------------------------------- ICRCs

SPLIT=$TMP/frames.pcap
if ! python3 "$CHECK" --split "$SPLIT" --min-frames 20 "$PCAP" >"$TMP/icrc.out" 2>&1; then
  fail "ICRC check: roce_icrc.py found frames whose ICRC is wrong (or cannot read the capture):"
  sed 's/^/    /' "$TMP/icrc.out" | head -60
else
  tail -n1 "$TMP/icrc.out"
fi
if ! python3 "$CHECK" --self-test "$PCAP" >"$TMP/selftest.out" 2>&1; then
  fail "the ICRC checker's self-test on this capture failed:"
  sed 's/^/    /' "$TMP/selftest.out" | head -40
else
  sed 's/^/  /' "$TMP/selftest.out"
fi
[[ -s $SPLIT ]] || { fail "no frames to decode"; exit 1; }

# ---------------------------------------------------------------- decode

FIELDS=(frame.number frame.protocols ip.src ip.dst udp.srcport udp.dstport udp.length udp.payload
  infiniband.bth.opcode infiniband.bth.se infiniband.bth.m infiniband.bth.padcnt infiniband.bth.tver
  infiniband.bth.p_key infiniband.bth.destqp infiniband.bth.a infiniband.bth.psn
  infiniband.reth.va infiniband.reth.r_key infiniband.reth.dmalen
  infiniband.aeth.syndrome infiniband.aeth.msn
  infiniband.atomiceth.swapdt infiniband.atomiceth.cmpdt infiniband.atomicacketh.origremdt
  infiniband.immdt infiniband.ieth _ws.malformed _ws.expert.message _ws.expert.severity)
args=()
for f in "${FIELDS[@]}"; do args+=(-e "$f"); done
if ! tshark -n -r "$SPLIT" --disable-protocol rpcordma -T fields -E header=y -E separator=/t -E quote=n \
  -E occurrence=a -E aggregator=';' "${args[@]}" >"$TMP/fields.tsv" 2>"$TMP/tshark.err"; then
  fail "tshark cannot read the frames: $(grep -v 'Running as user' "$TMP/tshark.err" | head -5)"
fi
# The markers are not RoCEv2 and must not be there; the raw capture must
# decode too (a GSO datagram shows as its first frame with a long payload).
tshark -n -r "$PCAP" --disable-protocol rpcordma -Y 'udp.dstport == 4791 and (_ws.malformed or not infiniband)' \
  -T fields -e frame.number >"$TMP/raw_bad.txt" 2>>"$TMP/tshark.err"
if [[ -s $TMP/raw_bad.txt ]]; then
  fail "in the raw capture, UDP/4791 packets that tshark does not decode as InfiniBand or calls malformed: $(head -20 "$TMP/raw_bad.txt" | tr '\n' ' ')"
fi

python3 - "$TMP/fields.tsv" "$MANIFEST" >"$TMP/decode.out" 2>&1 <<'EOF'
import sys
from collections import defaultdict

fields_path, manifest_path = sys.argv[1], sys.argv[2]
M24 = 1 << 24
NAMES = {0: "SEND_FIRST", 1: "SEND_MIDDLE", 2: "SEND_LAST", 3: "SEND_LAST_IMM", 4: "SEND_ONLY",
         5: "SEND_ONLY_IMM", 6: "WRITE_FIRST", 7: "WRITE_MIDDLE", 8: "WRITE_LAST", 9: "WRITE_LAST_IMM",
         10: "WRITE_ONLY", 11: "WRITE_ONLY_IMM", 12: "READ_REQUEST", 13: "READ_RESPONSE_FIRST",
         14: "READ_RESPONSE_MIDDLE", 15: "READ_RESPONSE_LAST", 16: "READ_RESPONSE_ONLY", 17: "ACKNOWLEDGE",
         18: "ATOMIC_ACKNOWLEDGE", 19: "COMPARE_SWAP", 20: "FETCH_ADD", 22: "SEND_LAST_INV", 23: "SEND_ONLY_INV"}
# Extended headers after the BTH, by opcode.
EXT = {0: 0, 1: 0, 2: 0, 3: 4, 4: 0, 5: 4, 6: 16, 7: 0, 8: 0, 9: 4, 10: 16, 11: 20, 12: 16, 13: 4, 14: 0,
       15: 4, 16: 4, 17: 4, 18: 12, 19: 28, 20: 28, 22: 4, 23: 4}
RESPONSES = {13, 14, 15, 16, 17, 18}
FIRST = {0, 6}
MIDDLE = {1, 7}
LAST = {2, 3, 8, 9, 22}
ONLY = {4, 5, 10, 11, 23}
SENDS = {0, 1, 2, 3, 4, 5, 22, 23}
WRITES = {6, 7, 8, 9, 10, 11}
ATOMICS = {19, 20}
# What each test must put on the wire: (direction, opcodes); c2s is client
# to server.
EXPECT = {
    "write_bw": [("c2s", {6, 7, 8}), ("s2c", {17})],
    "read_bw": [("c2s", {12}), ("s2c", {13, 14, 15})],
    "send_bw": [("c2s", {0, 1, 2}), ("s2c", {17})],
    "write_lat": [("c2s", {10}), ("s2c", {10}), ("c2s", {17}), ("s2c", {17})],
    "read_lat": [("c2s", {12}), ("s2c", {16})],
    "send_lat": [("c2s", {4}), ("s2c", {4}), ("c2s", {17}), ("s2c", {17})],
    "atomic_lat": [("c2s", {20}), ("s2c", {18})],
}

failures = []


def fail(msg):
    failures.append(msg)


def num(v):
    if v == "":
        return None
    return int(v, 0)


rows = []
with open(fields_path) as f:
    header = f.readline().rstrip("\n").split("\t")
    for line in f:
        vals = line.rstrip("\n").split("\t")
        vals += [""] * (len(header) - len(vals))
        rows.append(dict(zip(header, vals)))

tests = {}
order = []
for line in open(manifest_path):
    name, test, a, b, size, mtu, iters, cretx, sretx = line.split()
    tests[name] = dict(name=name, test=test, server=a, client=b, size=int(size), mtu=int(mtu), iters=int(iters),
                       client_retx=int(cretx), server_retx=int(sretx))
    order.append(name)

# The markers (UDP to port 9) split the frames by test.
current = None
frames = []
for r in rows:
    if r["udp.dstport"] == "9":
        text = bytes.fromhex(r["udp.payload"].replace(":", "")).decode("ascii", "replace")
        current = None
        if "-test-" in text:
            current = text.rsplit("-", 1)[1] if text.rsplit("-", 1)[1] in tests else None
            if current is None:
                fail("a marker for no test in the manifest: %r" % text)
        continue
    r["test"] = current
    frames.append(r)
rows = frames

# 1. Every frame: InfiniBand, nothing malformed, no expert notes.
for r in rows:
    n = r["frame.number"]
    protos = r["frame.protocols"].split(":")
    if "infiniband" not in protos or r["infiniband.bth.opcode"] == "":
        fail("frame %s does not decode as InfiniBand (%s)" % (n, r["frame.protocols"]))
        continue
    after = protos[protos.index("infiniband") + 1:]
    if any(p != "data" for p in after):
        fail("frame %s: after InfiniBand, tshark decodes %s" % (n, ":".join(after)))
    if r["_ws.malformed"] or "_ws.malformed" in protos:
        fail("frame %s: tshark calls it malformed (%s)" % (n, r["_ws.malformed"] or r["_ws.expert.message"]))
    if r["_ws.expert.message"]:
        fail("frame %s: tshark expert info: %s (severity %s)" % (n, r["_ws.expert.message"],
                                                               r["_ws.expert.severity"]))

# 2. Per test, per direction, per destination QP.
seen = defaultdict(lambda: defaultdict(int))   # test -> (direction, op) -> count
flows = defaultdict(list)                      # (test, direction, qp, kind) -> rows
for r in rows:
    if r["infiniband.bth.opcode"] == "":
        continue
    n = r["frame.number"]
    if r["test"] is None:
        fail("frame %s: RoCEv2 outside any test (before the first, or after the last)" % n)
        continue
    t = tests[r["test"]]
    src, dst = r["ip.src"], r["ip.dst"]
    if (src, dst) == (t["client"], t["server"]):
        d = "c2s"
    elif (src, dst) == (t["server"], t["client"]):
        d = "s2c"
    else:
        fail("frame %s: %s -> %s during %s, between %s and %s" % (n, src, dst, t["name"], t["client"], t["server"]))
        continue
    op = num(r["infiniband.bth.opcode"])
    seen[t["name"]][(d, op)] += 1
    kind = "resp" if op in RESPONSES else "req"
    flows[(t["name"], d, num(r["infiniband.bth.destqp"]), kind)].append(r)
    # Header fields every frame must have right.
    if op not in NAMES:
        fail("frame %s: opcode 0x%02x is no RC opcode" % (n, op))
    if num(r["infiniband.bth.tver"]) != 0 or num(r["infiniband.bth.p_key"]) not in (0xFFFF, 0x7FFF):
        fail("frame %s: TVer %s, P_Key %s" % (n, r["infiniband.bth.tver"], r["infiniband.bth.p_key"]))
    payload = num(r["udp.length"]) - 8 - 12 - EXT.get(op, 0) - 4
    r["payload"] = payload - num(r["infiniband.bth.padcnt"])
    if payload < 0 or payload % 4:
        fail("frame %s: %s with %d bytes after its headers: not a multiple of 4" % (n, NAMES.get(op), payload))
    if r["payload"] < 0 or (payload and (-r["payload"]) % 4 != num(r["infiniband.bth.padcnt"])):
        fail("frame %s: PadCnt %s does not pad %d bytes to 4" % (n, r["infiniband.bth.padcnt"], r["payload"]))

for name in order:
    have = seen[name]
    for d, ops in EXPECT[tests[name]["test"]]:
        for op in sorted(ops):
            if not have.get((d, op)):
                fail("%s: no %s frame %s" % (name, NAMES[op], "client to server" if d == "c2s" else "server to client"))

def ahead(a, b):
    """How far PSN b is after a (mod 2^24), negative when before."""
    d = (b - a) % M24
    return d if d < M24 // 2 else d - M24


def read_packets(r, mtu):
    """The PSNs a READ REQUEST takes: its response's packets."""
    return max(1, -(-(num(r["infiniband.reth.dmalen"]) or 0) // mtu))


# 3. Requests: PSNs, segmentation, RETH, AtomicETH. Returns the messages
# (first and last PSN, class, length, frame...) for the response checks and
# the packets sent again. A packet is new (its PSN the next one: one per
# packet, a READ REQUEST as many as its response has packets), or sent again
# (a PSN already sent: go-back-N after a timeout or a NAK; it must carry
# what it carried the first time, a READ resumed inside its range the rest
# of it), or a gap (always wrong). Sending again is right only where the
# requester's own counters say it retransmitted: a busy machine can delay
# an ACK past the timeout even on lo.
def signature(r):
    return (num(r["infiniband.bth.opcode"]), r["payload"], r["infiniband.reth.va"], r["infiniband.reth.r_key"],
            r["infiniband.reth.dmalen"], r["infiniband.atomiceth.swapdt"], r["infiniband.atomiceth.cmpdt"],
            r["infiniband.immdt"], r["infiniband.ieth"])


def check_requests(t, key, rs, counted_retx):
    mtu, size = t["mtu"], t["size"]
    where = "%s %s to QP 0x%06x" % (t["name"], "client->server" if key[1] == "c2s" else "server->client", key[2])
    msgs = []
    sent = {}    # PSN -> (signature, frame) of its first sending
    reads = []   # (first PSN, packets, row) of every READ REQUEST
    next_new = None
    again = 0
    cur = None  # the message being segmented: [class, first psn, bytes, dmalen, frame]
    for r in rs:
        n, op, psn = r["frame.number"], num(r["infiniband.bth.opcode"]), num(r["infiniband.bth.psn"])
        if next_new is not None and psn != next_new:
            orig = sent.get(psn)
            inside = None
            if orig is None and op == 12:
                inside = next((x for x in reads if 0 < ahead(x[0], psn) < x[1]), None)
            if orig is not None or inside is not None:
                again += 1
                first_time = orig[1] if orig is not None else inside[2]["frame.number"]
                if counted_retx <= 0:
                    fail("%s: frame %s: %s PSN %d sent again (the first time in frame %s), and the requester %s" % (
                        where, n, NAMES.get(op), psn, first_time,
                        "counted no retransmission" if counted_retx == 0 else "did not report its counters"))
                if orig is not None and signature(r) != orig[0]:
                    fail("%s: frame %s: PSN %d sent again, but not as in frame %s: %s vs %s" % (
                        where, n, psn, orig[1], signature(r), orig[0]))
                if inside is not None:
                    o = inside[2]
                    skip = ahead(inside[0], psn) * mtu
                    if (num(r["infiniband.reth.va"]) != num(o["infiniband.reth.va"]) + skip
                            or num(r["infiniband.reth.dmalen"]) != num(o["infiniband.reth.dmalen"]) - skip
                            or r["infiniband.reth.r_key"] != o["infiniband.reth.r_key"]):
                        fail("%s: frame %s: READ_REQUEST resumed at PSN %d does not ask for the rest of frame %s's" % (
                            where, n, psn, o["frame.number"]))
                continue
            fail("%s: frame %s: %s with PSN %d, expected %d (a gap)" % (where, n, NAMES.get(op), psn, next_new))
        sent[psn] = (signature(r), n)
        pl = r["payload"]
        if op in FIRST | MIDDLE and pl != mtu:
            fail("%s: frame %s: %s carries %d bytes, not the MTU %d" % (where, n, NAMES[op], pl, mtu))
        if op in LAST | ONLY and pl > mtu:
            fail("%s: frame %s: %s carries %d bytes, more than the MTU %d" % (where, n, NAMES[op], pl, mtu))
        if op in LAST and pl == 0:
            fail("%s: frame %s: %s with no payload" % (where, n, NAMES[op]))
        if op in (FIRST | ONLY | {12}) & (WRITES | {12}):
            dl = num(r["infiniband.reth.dmalen"])
            if dl != size:
                fail("%s: frame %s: %s RETH DMA length %s, the message is %d bytes" % (where, n, NAMES[op], dl, size))
            if num(r["infiniband.reth.r_key"]) is None or num(r["infiniband.reth.va"]) is None:
                fail("%s: frame %s: %s without RETH VA / R_Key" % (where, n, NAMES[op]))
        elif r["infiniband.reth.dmalen"]:
            fail("%s: frame %s: %s has a RETH" % (where, n, NAMES.get(op)))
        if op in MIDDLE | LAST and cur is None:
            fail("%s: frame %s: %s outside a message" % (where, n, NAMES[op]))
        if op in FIRST | ONLY | {12} | ATOMICS and cur is not None:
            fail("%s: frame %s: %s inside a message begun at PSN %d" % (where, n, NAMES[op], cur[1]))
            cur = None
        if cur is not None and op in MIDDLE | LAST and (cur[0] == "send") != (op in SENDS):
            fail("%s: frame %s: %s inside a %s" % (where, n, NAMES[op], cur[0]))
        if op in LAST | ONLY and num(r["infiniband.bth.a"]) != 1:
            fail("%s: frame %s: %s, the end of a message, without the AckReq bit" % (where, n, NAMES[op]))
        if op in FIRST:
            cur = ["send" if op in SENDS else "write", psn, pl, num(r["infiniband.reth.dmalen"]), n]
        elif op in MIDDLE and cur is not None:
            cur[2] += pl
        elif op in LAST and cur is not None:
            cur[2] += pl
            if cur[2] != size:
                fail("%s: the %s begun in frame %s moves %d bytes, not %d" % (where, cur[0], cur[4], cur[2], size))
            msgs.append(dict(first=cur[1], last=psn, cls=cur[0], len=cur[2], frame=cur[4], op=op))
            cur = None
        elif op in ONLY:
            if op in SENDS and pl != size:
                fail("%s: frame %s: %s of %d bytes, not %d" % (where, n, NAMES[op], pl, size))
            msgs.append(dict(first=psn, last=psn, cls="send" if op in SENDS else "write", len=pl, frame=n, op=op))
        elif op == 12:
            npk = read_packets(r, mtu)
            reads.append((psn, npk, r))
            msgs.append(dict(first=psn, last=(psn + npk - 1) % M24, cls="read", len=num(r["infiniband.reth.dmalen"]),
                             frame=n, op=op))
        elif op in ATOMICS:
            va = num(r["infiniband.reth.va"])
            if va is None or va % 8:
                fail("%s: frame %s: %s VA %s, not 8-byte aligned" % (where, n, NAMES[op], r["infiniband.reth.va"]))
            if r["infiniband.atomiceth.swapdt"] == "" or r["infiniband.atomiceth.cmpdt"] == "":
                fail("%s: frame %s: %s without Swap/Add or Compare" % (where, n, NAMES[op]))
            msgs.append(dict(first=psn, last=psn, cls="atomic", len=8, frame=n, op=op, va=va,
                             add=num(r["infiniband.atomiceth.swapdt"])))
        next_new = (psn + (read_packets(r, mtu) if op == 12 else 1)) % M24
    if cur is not None:
        fail("%s: the %s begun in frame %s never ends" % (where, cur[0], cur[4]))
    return msgs, again


def check_responses(t, key, rs, msgs, requests_again):
    """Responses from the other side to the request flow `msgs`. A response
    to a PSN already answered is right only after a request was sent again
    (C9-105: a duplicate SEND/WRITE is ACKed again, a duplicate READ is
    executed again, a duplicate atomic answered with the saved original)."""
    mtu = t["mtu"]
    where = "%s %s to QP 0x%06x" % (t["name"], "client->server" if key[1] == "c2s" else "server->client", key[2])
    by_first = {m["first"]: m for m in msgs}
    top = None       # the highest PSN answered
    prev_msn = None
    read = None      # [message, next psn, bytes, expected bytes]
    atomics = []     # (message, original, frame) of each atomic's first answer
    originals = {}   # atomic PSN -> original value first answered
    again = 0
    for r in rs:
        n, op, psn = r["frame.number"], num(r["infiniband.bth.opcode"]), num(r["infiniband.bth.psn"])
        syn, msn = num(r["infiniband.aeth.syndrome"]), num(r["infiniband.aeth.msn"])
        # A READ's later responses follow its first one; anything else
        # answers a PSN beyond the highest answered, or is a duplicate.
        continuing = op in (14, 15) and read is not None
        dup = top is not None and not continuing and ahead(top, psn) <= 0
        if dup:
            again += 1
            if not requests_again:
                fail("%s: frame %s: %s with PSN %d, at or before PSN %d already answered, and no request was sent again"
                     % (where, n, NAMES[op], psn, top))
        if top is None or ahead(top, psn) > 0:
            top = psn
        if op in (13, 15, 16, 17, 18):
            if syn is None or msn is None:
                fail("%s: frame %s: %s without AETH" % (where, n, NAMES[op]))
                continue
            cls = syn >> 5
            if cls != 0:
                kind = {1: "RNR NAK", 3: "NAK"}.get(cls, "reserved syndrome")
                fail("%s: frame %s: %s with AETH syndrome 0x%02x (%s) on a clean run" % (where, n, NAMES[op], syn, kind))
            if prev_msn is not None and ahead(prev_msn, msn) < 0:
                fail("%s: frame %s: MSN %d after MSN %d" % (where, n, msn, prev_msn))
            prev_msn = msn
            # The MSN counts the messages completed: those that end at or
            # before this PSN (a READ counts once it is answered: its own
            # responses may or may not count it yet). A duplicate's ACK
            # carries the MSN of now.
            done = sum(1 for m in msgs if ahead(m["last"], psn) >= 0)
            started = sum(1 for m in msgs if ahead(m["first"], psn) >= 0)
            if op in (17, 18) and not dup and msn != done % M24:
                fail("%s: frame %s: %s PSN %d carries MSN %d; %d messages end at or before that PSN" % (
                    where, n, NAMES[op], psn, msn, done))
            if op in (17, 18) and dup and ahead(done % M24, msn) < 0:
                fail("%s: frame %s: %s (a duplicate's) PSN %d carries MSN %d; %d messages end at or before that PSN" % (
                    where, n, NAMES[op], psn, msn, done))
            if op in (13, 15, 16) and not dup and msn not in (done % M24, started % M24, (started - 1) % M24):
                fail("%s: frame %s: %s PSN %d carries MSN %d; %d messages before it" % (where, n, NAMES[op], psn, msn, done))
        if op == 17:
            m = next((m for m in msgs if ahead(m["first"], psn) >= 0 and ahead(psn, m["last"]) >= 0), None)
            if m is None or m["cls"] in ("read", "atomic"):
                fail("%s: frame %s: ACKNOWLEDGE PSN %d is no PSN of a SEND or WRITE sent to this side" % (where, n, psn))
        elif op in (13, 16):
            if read is not None:
                fail("%s: frame %s: %s while the READ of frame %s is unanswered" % (where, n, NAMES[op], read[0]["frame"]))
                read = None
            m = by_first.get(psn)
            skip = 0
            if m is None and dup:  # a READ executed again from inside its range
                m = next((x for x in msgs if x["cls"] == "read" and 0 < ahead(x["first"], psn) <= ahead(x["first"], x["last"])), None)
                skip = ahead(m["first"], psn) * mtu if m else 0
            if m is None or m["cls"] != "read":
                fail("%s: frame %s: %s PSN %d answers no READ REQUEST" % (where, n, NAMES[op], psn))
                continue
            want = m["len"] - skip
            if op == 16:
                if r["payload"] != want or want > mtu:
                    fail("%s: frame %s: READ_RESPONSE_ONLY of %d bytes for a READ of %d" % (where, n, r["payload"], want))
            else:
                if r["payload"] != mtu:
                    fail("%s: frame %s: READ_RESPONSE_FIRST of %d bytes, not the MTU" % (where, n, r["payload"]))
                read = [m, (psn + 1) % M24, r["payload"], want]
        elif op in (14, 15):
            if read is None:
                fail("%s: frame %s: %s outside a READ response" % (where, n, NAMES[op]))
                continue
            if psn != read[1]:
                fail("%s: frame %s: %s PSN %d, expected %d" % (where, n, NAMES[op], psn, read[1]))
            if op == 14 and r["payload"] != mtu:
                fail("%s: frame %s: READ_RESPONSE_MIDDLE of %d bytes, not the MTU" % (where, n, r["payload"]))
            read[1] = (psn + 1) % M24
            read[2] += r["payload"]
            if op == 15:
                if read[2] != read[3] or psn != read[0]["last"]:
                    fail("%s: READ of frame %s answered with %d bytes ending at PSN %d; it asked %d bytes, PSNs to %d" % (
                        where, read[0]["frame"], read[2], psn, read[3], read[0]["last"]))
                read = None
        elif op == 18:
            m = by_first.get(psn)
            if m is None or m["cls"] != "atomic":
                fail("%s: frame %s: ATOMIC_ACKNOWLEDGE PSN %d answers no atomic" % (where, n, psn))
            elif r["infiniband.atomicacketh.origremdt"] == "":
                fail("%s: frame %s: ATOMIC_ACKNOWLEDGE without its original value" % (where, n))
            else:
                v = num(r["infiniband.atomicacketh.origremdt"])
                if psn in originals:
                    if originals[psn] != v:
                        fail("%s: frame %s: a duplicate atomic answered %d, the first answer was %d" % (
                            where, n, v, originals[psn]))
                else:
                    originals[psn] = v
                    atomics.append((m, v, n))
    if read is not None:
        fail("%s: the READ of frame %s is answered only in part" % (where, read[0]["frame"]))
    # Every request answered: READs and atomics by their own responses, the
    # last SEND/WRITE by an ACK at or after its PSN.
    answered = set()
    for r in rs:
        answered.add(num(r["infiniband.bth.psn"]))
    for m in msgs:
        if m["cls"] in ("read", "atomic") and m["first"] not in answered:
            fail("%s: the %s of frame %s (PSN %d) was never answered" % (where, m["cls"].upper(), m["frame"], m["first"]))
    if msgs and top is not None and ahead(top, msgs[-1]["last"]) > 0:
        fail("%s: the last request (PSN %d) is not acknowledged; the last response is PSN %d" % (where, msgs[-1]["last"], top))
    if msgs and top is None:
        fail("%s: %d requests and no response at all" % (where, len(msgs)))
    # FETCH_ADD on one word: each original is the one before plus its add.
    for (m1, v1, n1), (m2, v2, n2) in zip(atomics, atomics[1:]):
        if m1["op"] == 20 and m1["va"] == m2["va"] and v2 != (v1 + m1["add"]) % (1 << 64):
            fail("%s: FETCH_ADD originals: %d (frame %s) + %d is not %d (frame %s)" % (where, v1, n1, m1["add"], v2, n2))
    return again


summary = []
for t in (tests[name] for name in order):
    nframes = sum(seen[t["name"]].values())
    for d in ("c2s", "s2c"):
        other = "s2c" if d == "c2s" else "c2s"
        req_keys = [k for k in flows if k[0] == t["name"] and k[1] == d and k[3] == "req"]
        resp_keys = [k for k in flows if k[0] == t["name"] and k[1] == other and k[3] == "resp"]
        allmsgs = []
        counted = t["client_retx"] if d == "c2s" else t["server_retx"]
        sent_again = 0
        for k in req_keys:
            msgs, again = check_requests(t, k, flows[k], counted)
            allmsgs.append((k, msgs))
            sent_again += again
        answered_again = 0
        # With one QP each way the responses' flow is the requests' partner.
        if len(req_keys) == 1 and len(resp_keys) == 1:
            answered_again = check_responses(t, resp_keys[0], flows[resp_keys[0]], allmsgs[0][1], sent_again > 0)
        elif len(req_keys) > 1 or len(resp_keys) > 1:
            summary.append("%s: %d request and %d response flows: responses not paired" % (t["name"], len(req_keys), len(resp_keys)))
        elif req_keys and not resp_keys:
            fail("%s: requests %s and no responses" % (t["name"], "client->server" if d == "c2s" else "server->client"))
        for k, msgs in allmsgs:
            if len(msgs) < t["iters"]:
                fail("%s: %d messages %s, the test runs %d iterations" % (t["name"], len(msgs), d, t["iters"]))
        if sent_again or answered_again:
            summary.append("%s: %s requests sent again %d, responses to them %d (the requester counted %s "
                           "retransmissions: the timer fired, the machine was slow)" % (
                               t["name"], "client->server" if d == "c2s" else "server->client", sent_again,
                               answered_again, counted if counted >= 0 else "unknown"))
    ops = ", ".join("%s %s x%d" % ("c>s" if d == "c2s" else "s>c", NAMES.get(op, op), c)
                    for (d, op), c in sorted(seen[t["name"]].items()))
    summary.append("%s: %d frames: %s" % (t["name"], nframes, ops))

for s in summary:
    print("decode: " + s)
for f in failures[:80]:
    print("FAIL: " + f)
if len(failures) > 80:
    print("FAIL: ... and %d more" % (len(failures) - 80))
print("decode: %d frames, %d failures" % (len(rows), len(failures)))
sys.exit(1 if failures else 0)
EOF
decode_rc=$?
cat "$TMP/decode.out"
if ((decode_rc != 0)); then
  FAILS=$((FAILS + 1))
fi

if ((FAILS)); then
  echo "wire_capture: $FAILS failure(s)"
  exit 1
fi
echo "wire_capture: every frame decodes as InfiniBand as expected, every ICRC right"
exit 0
