#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions called through wait_for and the traps
# Congestion control on the wire, checked by an independent decoder.
#
#   cnp_capture_test.sh SRDMA
#
# Captures lo while two `srdma perf write_bw` runs go between processes of
# their own, each client behind a 0.2 Gb/s bottleneck port that marks CE
# (slow enough that a sanitizer build's client overruns it too):
#   1. with congestion control (the default): the client's requests leave
#      ECN-capable (IP ECN 10, or 11 where the port marked them), the server
#      answers marks with CNPs, and tshark decodes every CNP as RoCEv2:
#      BTH opcode 0x81 (129), to the client's QP (the destination QP of the
#      server's ACKs), PSN 0, 16 reserved bytes (a UDP length of 40), not
#      malformed; tests/roce_icrc.py finds every ICRC right, the CNPs'
#      included; the two reports agree (CNPs sent by the server, received
#      by the client, the client's rate cut);
#   2. with SRDMA_CC=0 on both sides, through the same port with room for
#      the whole run (no tail drop to recover from): no ECN bits, no CNPs,
#      nothing cut, though the queue stands above the ECN threshold.
#
# Exit 77 (skipped) without tshark, dumpcap or python3, or where capturing
# on lo is not permitted. Every wait polls for its event with a limit.
# The capture is kept on failure (and with CNP_CAPTURE_KEEP=1).
set -u
export SRDMA_SAME_HOST=0  # the wire's frames, not the same-host rings

BIN=${1:?usage: cnp_capture_test.sh SRDMA}
HERE=$(cd "$(dirname "$0")" && pwd)

skip() {
  echo "SKIP: $*"
  exit 77
}
[[ -x $BIN ]] || { echo "FAIL: '$BIN' is not an executable srdma" >&2; exit 1; }
command -v python3 >/dev/null || skip "python3 is not installed (package python3)"
command -v tshark >/dev/null || skip "tshark is not installed (package tshark)"
command -v dumpcap >/dev/null || skip "dumpcap is not installed (package wireshark-common)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/srdma-cnp.XXXXXX") || { echo "FAIL: no temporary directory" >&2; exit 1; }
PIDS=()
FAILS=0
CAP_PID=
# shellcheck source=tests/process_lib.sh
source "$HERE/process_lib.sh"
alive() { kill -0 "$1" 2>/dev/null; }
cleanup() {
  local rc=$? pid
  trap - EXIT HUP INT TERM
  set +e
  for pid in "${PIDS[@]}" $CAP_PID; do
    alive "$pid" && kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  if ((rc != 0 && rc != 77)) || [[ -n ${CNP_CAPTURE_KEEP:-} ]]; then
    echo "logs and capture kept in $TMP" >&2
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

# This script's four loopback addresses: k0 also takes the marker datagrams
# (port 9) that say the capture holds everything sent before them.
IP0=$(pid_ip $$ 0)
ON_SERVER=$(pid_ip $$ 1)
ON_CLIENT=$(pid_ip $$ 2)
OFF_SERVER=$(pid_ip $$ 3)
OFF_CLIENT=$IP0
PORT=$((20000 + ($$ + 7) % 12000))
send_marker() {
  python3 - "$IP0" "$1" <<'EOF'
import socket, sys
socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(sys.argv[2].encode(), (sys.argv[1], 9))
EOF
}
marker_captured() { grep -qaF "$1" "$PCAP"; }

PCAP=$TMP/capture.pcapng
CAP_ERR=$TMP/dumpcap.err
dumpcap -i lo -B 64 -f "net $IP0/30 and (udp port 4791 or udp dst port 9)" -w "$PCAP" >/dev/null 2>"$CAP_ERR" &
CAP_PID=$!
capture_started() { ! alive "$CAP_PID" || { grep -q "^Capturing on" "$CAP_ERR" && [[ -s $PCAP ]]; }; }
if ! wait_for 15000 capture_started || ! alive "$CAP_PID"; then
  reason=$(grep -v "^Capturing on" "$CAP_ERR" | head -n 2 | tr '\n' ' ')
  CAP_PID=
  skip "dumpcap cannot capture on lo here: ${reason:-no output within 15 s}"
fi
MARK="srdma-cnp-start-$$-$RANDOM"
send_marker "$MARK"
wait_for 15000 marker_captured "$MARK" || { fail "a datagram on lo did not reach the capture within 15 s"; exit 1; }

# run NAME SERVER CLIENT IMPAIR [ENV...]: one write_bw run; the client behind the port.
run() {
  local name=$1 server=$2 client=$3 impair=$4 srv_pid rc
  shift 4
  local dir=$TMP/$name
  mkdir -p "$dir"
  env "$@" "$BIN" perf write_bw --ip "$server" -p "$PORT" -s 65536 -n 100 >"$dir/server.out" 2>"$dir/server.err" &
  srv_pid=$!
  PIDS+=("$srv_pid")
  server_ready() { grep -q "^waiting for a client on " "$dir/server.out" || ! alive "$srv_pid"; }
  if ! wait_for 20000 server_ready || ! alive "$srv_pid"; then
    fail "$name: the server did not start: $(cat "$dir/server.out" "$dir/server.err")"
    return 1
  fi
  env "$@" timeout 60 "$BIN" perf write_bw --ip "$client" -p "$PORT" -s 65536 -n 100 --impair "$impair" "$server" \
    >"$dir/client.out" 2>"$dir/client.err"
  rc=$?
  ((rc == 0)) || fail "$name: the client exited $rc: $(cat "$dir/client.out" "$dir/client.err" | tail -20)"
  wait_for 10000 eval "! alive $srv_pid" || { fail "$name: the server did not exit"; kill -9 "$srv_pid"; }
  wait "$srv_pid" || fail "$name: the server failed: $(tail -20 "$dir/server.err")"
}
run cc_on "$ON_SERVER" "$ON_CLIENT" rate=0.2,queue=500,ecn=20
run cc_off "$OFF_SERVER" "$OFF_CLIENT" rate=0.2,queue=100000,ecn=20 SRDMA_CC=0

MARK="srdma-cnp-end-$$-$RANDOM"
send_marker "$MARK"
wait_for 15000 marker_captured "$MARK" || fail "the end marker did not reach the capture within 15 s"
kill -INT "$CAP_PID"
wait_for 15000 eval "! alive $CAP_PID" || kill -9 "$CAP_PID"
wait "$CAP_PID"
CAP_PID=

# Every ICRC right, the CNPs' included (GSO datagrams cut into frames).
SPLIT=$TMP/frames.pcap
if python3 "$HERE/roce_icrc.py" --split "$SPLIT" --min-frames 20 "$PCAP" >"$TMP/icrc.out" 2>&1; then
  tail -n1 "$TMP/icrc.out"
else
  fail "roce_icrc.py: $(tail -20 "$TMP/icrc.out")"
fi

tshark -n -r "$SPLIT" -Y 'udp.dstport == 4791' -T fields -E separator=/t -E occurrence=f \
  -e ip.src -e ip.dst -e ip.dsfield.ecn -e udp.length -e infiniband.bth.opcode -e infiniband.bth.destqp \
  -e infiniband.bth.psn -e _ws.malformed -e _ws.expert.message >"$TMP/frames.tsv" 2>"$TMP/tshark.err" ||
  fail "tshark cannot read the frames: $(head -5 "$TMP/tshark.err")"

python3 - "$TMP/frames.tsv" "$ON_SERVER" "$ON_CLIENT" "$OFF_SERVER" "$OFF_CLIENT" >"$TMP/check.out" 2>&1 <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
on_s, on_c, off_s, off_c = sys.argv[2:6]
bad = []
def frames(src, dst):
    return [r + [""] * (9 - len(r)) for r in rows if r[0] == src and r[1] == dst]
CNP = 129
for name, s, c, cc in (("cc_on", on_s, on_c, True), ("cc_off", off_s, off_c, False)):
    c2s, s2c = frames(c, s), frames(s, c)
    if not c2s or not s2c:
        bad.append("%s: no frames both ways" % name)
        continue
    for r in c2s + s2c:
        if r[4] == "" or r[7] or r[8]:
            bad.append("%s: a frame tshark does not decode cleanly: %s" % (name, r))
    reqs = [r for r in c2s if int(r[4]) != CNP]
    cnps = [r for r in s2c if int(r[4]) == CNP]
    acks = [r for r in s2c if int(r[4]) == 17]
    ecn = {int(r[2]) for r in reqs}
    if any(int(r[4]) == CNP for r in c2s):
        bad.append("%s: a CNP from the client, whose requests nobody marked" % name)
    if cc:
        if not ecn <= {2, 3} or 3 not in ecn:
            bad.append("cc_on: requests' ECN codepoints %s (want ECT(0) and CE only, CE at least once)" % sorted(ecn))
        if not cnps:
            bad.append("cc_on: no CNP on the wire")
        client_qps = {r[5] for r in acks}
        for r in cnps:
            if r[3] != "40" or int(r[6], 0) != 0 or r[5] not in client_qps:
                bad.append("cc_on: CNP not to the client's QP %s, PSN 0, UDP length 40: %s" % (client_qps, r))
                break
        print("cc_on: %d requests (ECN %s), %d CNPs to QP %s" % (len(reqs), sorted(ecn), len(cnps), sorted(client_qps)))
    else:
        if ecn != {0}:
            bad.append("cc_off: requests' ECN codepoints %s (want none)" % sorted(ecn))
        if cnps:
            bad.append("cc_off: %d CNPs on the wire" % len(cnps))
        print("cc_off: %d requests (ECN %s), no CNP" % (len(reqs), sorted(ecn)))
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
EOF
rc=$?
cat "$TMP/check.out"
((rc == 0)) || FAILS=$((FAILS + 1))

# The reports: "congestion control: CNPs S sent / R received, rate cuts C".
cc_line() { grep -h -A1 "^ *transport $1:" "$2" | sed -n 's/.*congestion control: CNPs \([0-9]*\) sent \/ \([0-9]*\) received, rate cuts \([0-9]*\).*/\1 \2 \3/p' | head -n1; }
read -r s_sent _ _ <<<"$(cc_line server "$TMP/cc_on/client.out")"
read -r _ c_recv c_cuts <<<"$(cc_line client "$TMP/cc_on/client.out")"
if [[ -z ${s_sent:-} || -z ${c_recv:-} ]] || ((s_sent == 0 || c_recv == 0 || c_recv > s_sent || c_cuts == 0)); then
  fail "cc_on: the report's CNP counts (server sent ${s_sent:-?}, client received ${c_recv:-?}, cuts ${c_cuts:-?})"
fi
if grep -q "congestion control:" "$TMP/cc_off/client.out"; then
  fail "cc_off: the report shows congestion control at work: $(grep "congestion control:" "$TMP/cc_off/client.out")"
fi
if ((FAILS)); then
  echo "$FAILS failure(s)"
  exit 1
fi
echo "PASS: CNPs and ECN decode on the wire; with SRDMA_CC=0 neither appears"
