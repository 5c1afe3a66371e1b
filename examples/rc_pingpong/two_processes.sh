#!/usr/bin/env bash
# rc_pingpong between two processes over RoCEv2: a server on one loopback
# address, a client on another (addresses and port of this run's own).
set -euo pipefail
pingpong=${1:?usage: two_processes.sh RC_PINGPONG}
base=127.$(($$ % 200 + 20)).$(($$ / 200 % 250))
server=$base.21 client=$base.22 port=$((20000 + $$ % 20000))
out=$(mktemp)
pid=
trap '[[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -f "$out"' EXIT
"$pingpong" --ip "$server" -p "$port" >"$out" 2>&1 &
pid=$!
"$pingpong" --ip "$client" --peer "$server" -p "$port" -n 500 -s 256
wait "$pid" || { pid=; echo "server failed:"; cat "$out"; exit 1; }
pid=
cat "$out"
grep -q "served 500 messages of 256 bytes" "$out"
