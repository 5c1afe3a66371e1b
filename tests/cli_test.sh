#!/usr/bin/env bash
# End-to-end checks of the srdma command: help on every subcommand, errors to
# stderr with a non-zero exit, and golden simulator runs.
set -u
srdma=$1
golden=$2
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

for sub in "" "info" "demo" "perf" "run" "cq-pool-bench" "sim" "sim bitmap" "sim buddy" "sim cq-pool"; do
  # shellcheck disable=SC2086
  "$srdma" $sub --help >/dev/null 2>&1 || fail "srdma $sub --help"
done

out=$("$srdma" 2>/dev/null) && fail "no subcommand should fail"
err=$("$srdma" sim bitmap --num 6 --reserved 0 </dev/null 2>&1 >/dev/null) && fail "--num 6 should fail"
[[ $err == *EINVAL* ]] || fail "--num 6 error on stderr: '$err'"
err=$("$srdma" sim buddy --max-order 40 </dev/null 2>&1 >/dev/null) && fail "--max-order 40 should fail"
[[ $err == *EINVAL* ]] || fail "--max-order 40 error on stderr: '$err'"
err=$("$srdma" info -p num_bogus=3 2>&1 >/dev/null) && fail "unknown profile field should fail"
[[ $err == *num_bogus* ]] || fail "unknown field named: '$err'"
err=$("$srdma" info -p reserved_qps=-1 2>&1 >/dev/null) && fail "bad profile should fail"
err=$("$srdma" perf write_bw --verify -t 4 -n 10 2>&1 >/dev/null) && fail "perf --verify -t 4 should fail"
[[ $err == *EINVAL* ]] || fail "perf --verify -t 4 error on stderr: '$err'"
"$srdma" perf read_bw --verify -n 50 --copy-ms 0 >/dev/null || fail "srdma perf read_bw --verify"
"$srdma" perf write_bw -u 18 -n 50 --copy-ms 0 >/dev/null || fail "srdma perf write_bw -u 18"
err=$("$srdma" perf write_bw -u 32 -n 10 2>&1 >/dev/null) && fail "perf -u 32 should fail"
[[ $err == *EINVAL*qp-timeout* ]] || fail "perf -u 32 error on stderr: '$err'"
# nvmf gen-dhchap-key: nvme-cli's secret format, and a refusal of a bad length or transform.
key=$("$srdma" nvmf gen-dhchap-key --key-length 48 --hmac 2) || fail "gen-dhchap-key"
[[ $key =~ ^DHHC-1:02:[A-Za-z0-9+/=]{72}:$ ]] || fail "gen-dhchap-key printed '$key'"
[[ $("$srdma" nvmf gen-dhchap-key) != $("$srdma" nvmf gen-dhchap-key) ]] || fail "gen-dhchap-key repeats itself"
err=$("$srdma" nvmf gen-dhchap-key --key-length 33 2>&1 >/dev/null) && fail "--key-length 33 should fail"
[[ $err == *EINVAL* ]] || fail "--key-length 33 error on stderr: '$err'"
err=$("$srdma" nvmf gen-dhchap-key --hmac 4 2>&1 >/dev/null) && fail "--hmac 4 should fail"
[[ $err == *EINVAL* ]] || fail "--hmac 4 error on stderr: '$err'"
# --impair and --mtu: a bad value is a readable EINVAL naming the option, before any device opens.
for args in "perf write_bw --impair loss=1" "perf write_bw --impair bogus" "perf write_bw --mtu 1000" \
            "blk bench --ios 10 --impair loss=0.1,loss=0.2" "blk bench --ios 10 --mtu 8192"; do
  opt=$(grep -oE -- '--(impair|mtu)' <<<"$args")
  # shellcheck disable=SC2086
  err=$("$srdma" $args 2>&1 >/dev/null) && fail "srdma $args should fail"
  [[ $err == *EINVAL*"$opt"* ]] || fail "srdma $args: error on stderr names $opt: '$err'"
done
"$srdma" perf write_bw -n 200 -s 8192 --mtu 1024 --impair loss=0.02,dup=0.02,seed=3 --copy-ms 0 |
  grep -q "retransmissions" || fail "srdma perf --impair shows the transport counters"

for t in "$golden"/*.in; do
  name=$(basename "$t" .in)
  args=$(head -1 "$t" | sed 's/^# args: //')
  # shellcheck disable=SC2086
  # Results compare whole; an error compares by its code (the reason is prose).
  actual=$(tail -n +2 "$t" | "$srdma" $args | sed -E 's/^(error [A-Z]+) .*/\1/')
  expected=$(sed -E 's/^(error [A-Z]+) .*/\1/' "$golden/$name.out")
  [[ "$actual" == "$expected" ]] || { fail "golden $name"; diff <(echo "$expected") <(echo "$actual") | head; }
done

"$srdma" info >/dev/null || fail "srdma info"
"$srdma" info -p num_mpt=1000 | grep -q "num_mpt 1000 -> 1024" || fail "srdma info shows the repair"
"$srdma" demo | grep -q "key_mismatch" || fail "srdma demo shows a stale key refused"
# A device on a loopback address of this run's own: its port is RoCEv2.
ip=127.$(($$ % 200 + 20)).$(($$ / 200 % 250)).9
"$srdma" info --ip "$ip" | grep -q "gid\[0\].*(::ffff:$ip)" || fail "srdma info --ip shows the RoCEv2 GID"
err=$("$srdma" info --ip 1.2.3 2>&1 >/dev/null) && fail "a bad --ip should fail"
[[ $err == *"EINVAL"* ]] || fail "bad --ip: $err"

[[ $fails == 0 ]] && echo "cli: all passed"
exit $((fails > 0))
