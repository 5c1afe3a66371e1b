#!/usr/bin/env bash
# The CM's MADs on the wire, checked by tshark's InfiniBand dissector.
#
#   cm_capture_test.sh SRDMA_TESTS
#
# Captures lo with dumpcap while the CM agent tests run over the RoCEv2
# link (Links/CmAgentTest.*/Udp: a connection set up with REQ/REP/RTU and
# torn down with DREQ/DREP; a REQ to a service nobody listens on; a REQ
# the consumer rejects; a SIDR_REQ answered by a SIDR_REP with a UD QP's
# number, and one to a service nobody listens on), then requires of every
# datagram between the test
# process's two addresses: UD SEND ONLY to QP 1 from QP 1 with the GSI
# Q_Key 0x80010000, a MAD of base version 1, class 0x07 (CM), class
# version 2, method Send, not malformed and without expert notes; the
# messages in the order the tests make them; the comm IDs, QPNs and the
# REJ reasons (8, invalid service ID; 28, consumer defined) tie up; each
# SIDR_REP carries its SIDR_REQ's transaction ID. (tshark 4.0 names the
# SIDR attributes but does not decode their fields.)
#
# Exit 77 (skipped) without tshark or dumpcap, or where capturing on lo is
# not permitted. Every wait polls with a limit; nothing sleeps to let
# something happen. Logs and the capture are kept on failure.
set -u

BIN=${1:?usage: cm_capture_test.sh SRDMA_TESTS}
skip() {
  echo "SKIP: $*"
  exit 77
}
[[ -x $BIN ]] || { echo "FAIL: '$BIN' is not the srdma_tests executable" >&2; exit 1; }
command -v tshark >/dev/null || skip "tshark is not installed (package tshark)"
command -v dumpcap >/dev/null || skip "dumpcap is not installed (package wireshark-common)"
command -v python3 >/dev/null || skip "python3 is not installed (package python3)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/srdma-cm.XXXXXX") || exit 1
CAP=$TMP/cm.pcapng
CAP_PID=
TEST_PID=
FAILS=0
cleanup() {
  local rc=$? pid
  trap - EXIT HUP INT TERM
  for pid in $TEST_PID $CAP_PID; do kill -9 "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  if ((rc != 0 && rc != 77)); then echo "logs and capture kept in $TMP" >&2; else rm -rf "$TMP"; fi
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
# shellcheck source=tests/process_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/process_lib.sh"

# Markers (UDP to port 9 from this script) bracket the test: once the end
# marker is in the file, so is everything the test sent.
MARK_IP=$(pid_ip $$ 3)
send_marker() {
  python3 -c 'import socket,sys; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(sys.argv[2].encode(), (sys.argv[1], 9))' \
    "$MARK_IP" "$1"
}
marker_seen() {
  send_marker "$1"
  tshark -r "$CAP" -Y "udp.dstport == 9 && data.data == $(printf '%s' "$1" | od -An -tx1 | tr -d ' \n' | sed 's/../&:/g;s/:$//')" \
    -T fields -e frame.number 2>/dev/null | grep -q .
}

dumpcap -q -i lo -f "udp port 4791 or (udp port 9 and host $MARK_IP)" -w "$CAP" 2>"$TMP/dumpcap.log" &
CAP_PID=$!
if ! wait_for 10000 marker_seen start; then
  grep -qiE "permission|not permitted|operation not" "$TMP/dumpcap.log" && skip "no permission to capture on lo"
  fail "dumpcap never captured the start marker: $(tail -3 "$TMP/dumpcap.log")"
  exit 1
fi

"$BIN" --gtest_filter='Links/CmAgentTest.*/Udp' >"$TMP/tests.log" 2>&1 &
TEST_PID=$!
A=$(pid_ip "$TEST_PID" 1)
B=$(pid_ip "$TEST_PID" 2)
wait "$TEST_PID"
rc=$?
TEST_PID=
((rc == 0)) || { fail "the CM agent tests failed (exit $rc):"; tail -20 "$TMP/tests.log"; }
wait_for 10000 marker_seen end || fail "the end marker never reached the capture"
kill "$CAP_PID" 2>/dev/null
wait "$CAP_PID" 2>/dev/null
CAP_PID=

# One line per datagram between the two devices, in capture order.
fields=(ip.src ip.dst infiniband.bth.opcode infiniband.bth.destqp infiniband.deth.q_key infiniband.deth.srcqp
  infiniband.mad.baseversion infiniband.mad.mgmtclass infiniband.mad.classversion infiniband.mad.method
  infiniband.mad.attributeid infiniband.mad.transactionid _ws.malformed _ws.expert
  infiniband.cm.req.serviceid infiniband.cm.req.localqpn infiniband.cm.rep.remotecommid infiniband.cm.rep.localqpn
  infiniband.cm.rtu.localcommid infiniband.cm.rtu.remotecommid infiniband.cm.rej.remotecommid infiniband.cm.rej.reason
  infiniband.cm.dreq.localcommid infiniband.cm.dreq.remotecommid infiniband.cm.req.remoteqpneecn
  infiniband.cm.drsp.localcommid infiniband.cm.drsp.remotecommid)
args=()
for f in "${fields[@]}"; do args+=(-e "$f"); done
# The MADs: what goes to or comes from a QP 1 (the RC QPs' SEND and ACK in
# between are the connection at work). rpcordma's heuristic would claim
# that SEND and call it malformed.
tshark -r "$CAP" --disable-protocol rpcordma \
  -Y "ip.addr == $A && ip.addr == $B && udp.dstport == 4791 && (infiniband.bth.destqp == 1 || infiniband.deth.srcqp == 1)" \
  -T fields -E separator=/t -E occurrence=f \
  "${args[@]}" >"$TMP/mads.tsv" 2>"$TMP/tshark.log" || fail "tshark could not read the capture: $(tail -3 "$TMP/tshark.log")"

python3 - "$TMP/mads.tsv" "$A" "$B" <<'EOF' || FAILS=$((FAILS + 1))
import sys
path, a, b = sys.argv[1:4]
names = ["src", "dst", "opcode", "destqp", "qkey", "srcqp", "basever", "class", "classver", "method", "attr",
         "tid", "malformed", "expert", "req_sid", "req_qpn", "rep_rcid", "rep_qpn", "rtu_lcid", "rtu_rcid",
         "rej_rcid", "rej_reason", "dreq_lcid", "dreq_rcid", "dreq_rqpn", "drep_lcid", "drep_rcid"]
rows = []
for line in open(path):
    v = line.rstrip("\n").split("\t")
    v += [""] * (len(names) - len(v))
    rows.append(dict(zip(names, v)))
bad = 0
def fail(msg):
    global bad
    bad += 1
    print("FAIL:", msg)
def num(s):
    return int(s, 0) if s else None
attr_name = {0x10: "REQ", 0x11: "MRA", 0x12: "REJ", 0x13: "REP", 0x14: "RTU", 0x15: "DREQ", 0x16: "DREP",
             0x17: "SIDR_REQ", 0x18: "SIDR_REP"}
seq = []
firsts = []
seen = set()
for i, r in enumerate(rows, 1):
    where = f"datagram {i} ({r['src']} -> {r['dst']})"
    if num(r["opcode"]) != 0x64: fail(f"{where}: BTH opcode {r['opcode']}, not UD SEND ONLY (0x64)")
    if num(r["destqp"]) != 1: fail(f"{where}: DestQP {r['destqp']}, not the GSI QP 1")
    if num(r["qkey"]) != 0x80010000: fail(f"{where}: Q_Key {r['qkey']}, not 0x80010000")
    if num(r["srcqp"]) != 1: fail(f"{where}: source QP {r['srcqp']}, not 1")
    if (num(r["basever"]), num(r["class"]), num(r["classver"]), num(r["method"])) != (1, 7, 2, 3):
        fail(f"{where}: MAD base {r['basever']} class {r['class']} version {r['classver']} method {r['method']}")
    if r["malformed"] or r["expert"]: fail(f"{where}: tshark says malformed/expert: {r['malformed']} {r['expert']}")
    name = attr_name.get(num(r["attr"]) or 0, f"attribute {r['attr']}")
    # A resend (a slow host's retry) repeats sender, attribute and
    # transaction ID: the order is that of the first of each.
    key = (r["src"], r["attr"], r["tid"])
    if key in seen:
        continue
    seen.add(key)
    seq.append((name, r["src"] == a))
    firsts.append(r)
# The tests' order: connect/disconnect, then no listener, then a consumer
# reject; then SIDR: resolved, and to a service nobody listens on.
want = [("REQ", True), ("REP", False), ("RTU", True), ("DREQ", True), ("DREP", False),
        ("REQ", True), ("REJ", False), ("REQ", True), ("REJ", False),
        ("SIDR_REQ", True), ("SIDR_REP", False), ("SIDR_REQ", True), ("SIDR_REP", False)]
got = [s for s in seq]
if got != want:
    fail(f"messages {[(n, 'a->b' if d else 'b->a') for n, d in got]}, expected {[(n, 'a->b' if d else 'b->a') for n, d in want]}")
else:
    req, rep, rtu, dreq, drep, req2, rej2, req3, rej3, sreq, srep, sreq2, srep2 = firsts
    for q, p in ((sreq, srep), (sreq2, srep2)):
        if q["tid"] != p["tid"]: fail(f"SIDR_REP transaction ID {p['tid']} is not its SIDR_REQ's {q['tid']}")
    active, passive = num(rep["rep_rcid"]), num(rtu["rtu_rcid"])
    if num(rtu["rtu_lcid"]) != active: fail(f"RTU local comm ID {rtu['rtu_lcid']} is not the one the REP answered ({active:#x})")
    if (num(dreq["dreq_lcid"]), num(dreq["dreq_rcid"])) != (active, passive): fail("DREQ comm IDs do not match the connection's")
    if num(dreq["dreq_rqpn"]) != num(rep["rep_qpn"]): fail(f"DREQ remote QPN {dreq['dreq_rqpn']} is not the REP's QPN {rep['rep_qpn']}")
    if (num(drep["drep_lcid"]), num(drep["drep_rcid"])) != (passive, active): fail("DREP comm IDs do not answer the DREQ")
    if num(req["req_sid"]) != 0x0000000001060000 | 4420: fail(f"REQ service ID {req['req_sid']}")
    if num(rej2["rej_reason"]) != 8: fail(f"REJ to a service nobody listens on: reason {rej2['rej_reason']}, not 8")
    if num(rej3["rej_reason"]) != 28: fail(f"a consumer's REJ: reason {rej3['rej_reason']}, not 28")
    resent = len(rows) - len(firsts)
    print(f"ok   {len(rows)} MADs ({resent} resent) decode as InfiniBand CM: " + " ".join(n for n, _ in seq))
sys.exit(1 if bad else 0)
EOF

if ((FAILS)); then
  echo "cm_capture: $FAILS failure(s)"
  exit 1
fi
echo "cm_capture: every MAD decodes as InfiniBand CM as expected"
