#!/usr/bin/env bash
# UCX (Debian 12's ucx-utils, UCX 1.13) on softrdma's libibverbs.so.1,
# unmodified, between two processes on loopback addresses of their own
# (127.X.Y.1 server, 127.X.Y.2 client; SRDMA_ADDR each, RoCEv2 over UDP):
#  - ucx_info -d lists srdma0:1 with the transports rc_verbs and ud_verbs;
#  - ucx_perftest with UCX_NET_DEVICES=srdma0:1, over rc_verbs and over
#    ud_verbs (UCX_TLS, with self; RC with ud_verbs:aux for UCP's wireup), runs the UCP tests ucp_put_bw, ucp_get,
#    ucp_am_bw, ucp_am_lat, tag_lat and the UCT tests put_bw and am_lat at
#    8 B, 4 KiB, 64 KiB and 1 MiB: both sides exit 0 and the client's
#    "Final:" row has the iterations asked for and a latency or bandwidth
#    > 0. UCT carries what a transport offers, no more: rc_verbs' active
#    messages end at its segment (8 KiB) and ud_verbs' at its MTU, and
#    ud_verbs has no RDMA (UCP emulates it over active messages); those
#    UCT runs are not made (the list below says which).
# UCX keeps a verbs device only if /dev/infiniband/<dev_name> is a
# character device (`srdma devnode`, see README "Running verbs programs").
# This test creates it with `srdma devnode` when it is missing (root only)
# and removes it at exit; one that was there stays.
#
# Skips (77) when ucx-utils is not installed. Every wait is bounded; a hang
# is a failure with the logs' tails printed.
#
#   ucx_programs_test.sh SRDMA LIBDIR   (PP_KEEP=1 keeps the logs)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/perf_processes.sh source-path=SCRIPTDIR
source "$here/perf_processes.sh"
srdma=${1:?usage: ucx_programs_test.sh SRDMA LIBDIR}
libdir=${2:?usage: ucx_programs_test.sh SRDMA LIBDIR}
libdir=$(cd "$libdir" 2>/dev/null && pwd) || { echo "FAIL: no directory '$2'" >&2; exit 1; }
[[ -e $libdir/libibverbs.so.1 ]] || { echo "FAIL: no libibverbs.so.1 in '$libdir'" >&2; exit 1; }
for p in ucx_info ucx_perftest; do
  command -v "$p" >/dev/null 2>&1 || { echo "SKIP: $p is not installed (apt-get install ucx-utils)"; exit 77; }
done
for p in ss stdbuf; do
  command -v "$p" >/dev/null 2>&1 || { echo "FAIL: no '$p' command (iproute2, coreutils)"; exit 1; }
done

pp_setup
PP_READY_S=20
PP_SERVER_EXIT_S=15
start_us=$(pp_now_us)
budget_s=200 # no run starts after this, so that ctest's TIMEOUT (240) never cuts the logs
limit=40     # any one client run, seconds

node=/dev/infiniband/srdma0
if [[ ! -c $node ]]; then
  if ((EUID != 0)); then
    echo "FAIL: $node is missing and only root can create it: run \`sudo srdma devnode\` once (see README)"
    exit 1
  fi
  "$srdma" devnode || { echo "FAIL: srdma devnode"; exit 1; }
  pp_on_exit "$srdma" devnode --remove
fi

pp_programs_addresses 24000
echo "server $ip_a, client $ip_b, TCP ports from $port_base, library $libdir"

side() { # ADDR TLS
  printf '%s\n' env "LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "SRDMA_ADDR=$1" \
    SRDMA_VERBS_DEBUG=1 UCX_NET_DEVICES=srdma0:1 "UCX_TLS=$2" UCX_WARN_UNUSED_ENV_VARS=n stdbuf -oL
}

in_budget() {
  if (($(pp_now_us) - start_us > budget_s * 1000000)); then
    pp_fail "$1: not run, the test has been running for over ${budget_s}s"
    return 1
  fi
}

bad() {
  pp_fail "$1: $3"
  echo "  --- ${2##*/} (last lines)"
  tail -n 15 "$2" | sed 's/^/  | /'
}

# ---------------------------------------------------------------------------
echo "--- ucx_info -d"
mapfile -t info_env < <(side "$ip_a" all)
if in_budget ucx_info && pp_run ucx_info "$limit" "${info_env[@]}" ucx_info -d; then
  f=$PP_TMP/ucx_info.out
  if ((PP_RC != 0)); then
    pp_fail "ucx_info -d exited $PP_RC"
    pp_show ucx_info
  else
    # "# Memory domain: srdma0", then per transport "Transport: X" and "Device: srdma0:1".
    tls=$(awk '/^# Memory domain:/ {md = $4} /Transport:/ {tl = $3} /Device:/ && md == "srdma0" {print tl ":" $3}' "$f" | sort -u | tr '\n' ' ')
    if [[ $tls == *"rc_verbs:srdma0:1"* && $tls == *"ud_verbs:srdma0:1"* ]]; then
      echo "ok   ucx_info -d: srdma0:1 with rc_verbs and ud_verbs"
    else
      bad "ucx_info -d" "$f" "srdma0:1 lacks rc_verbs or ud_verbs (found: '$tls')"
    fi
  fi
fi

# ---------------------------------------------------------------------------
# run TLS NAME SIZE ITERS ARGS...: ucx_perftest's server on ip_a, its client
# on ip_b; the client's "Final:" row must have ITERS iterations and a
# positive latency (lat tests) or bandwidth (bw tests).
run() {
  local tls=$1 test=$2 size=$3 iters=$4
  shift 4
  local name="$test-${tls%%,*}-$size"
  in_budget "$name" || return 0
  pp_next_port || return 0
  local -a a b
  mapfile -t a < <(side "$ip_a" "$tls")
  mapfile -t b < <(side "$ip_b" "$tls")
  pp_pair "$name" "$limit" --listen "$PORT" "${a[@]}" ucx_perftest -p "$PORT" :: \
    "${b[@]}" ucx_perftest "$ip_a" -p "$PORT" -t "$test" -s "$size" -n "$iters" -w $((iters / 10 + 1)) "$@" || return 0
  local f=$PP_TMP/$name.client.out row
  row=$(grep -E '^Final:' "$f" | tail -n 1) || true
  if [[ -z $row ]]; then
    bad "$name" "$f" "no 'Final:' row"
    return 0
  fi
  # Final: ITERS lat50 lat_avg lat_overall bw_avg bw_overall rate_avg rate_overall
  local n lat bw rate
  read -r _ n _ lat _ bw _ rate _ <<<"$row"
  if ((n != iters)); then
    bad "$name" "$f" "$n iterations, expected $iters"
  elif [[ $test == *lat* ]] && ! awk -v v="$lat" 'BEGIN { exit !(v > 0) }'; then
    bad "$name" "$f" "average latency $lat usec, not > 0"
  elif [[ $test != *lat* ]] && ! awk -v v="$rate" 'BEGIN { exit !(v > 0) }'; then
    bad "$name" "$f" "average message rate $rate msg/s, not > 0"
  else
    printf 'ok   %-22s %8d B -n %-5d %10s usec avg %9s MB/s %8s msg/s %6d ms\n' "${tls%%,*} $test" "$size" "$iters" \
      "$lat" "$bw" "$rate" "$PP_CLIENT_MS"
  fi
}

# Iterations per size: enough to move data in each direction, little
# enough for the whole matrix to stay in budget on two busy cores.
iters_for() {
  case $1 in
    8) echo 1000 ;;
    4096) echo 500 ;;
    65536) echo 100 ;;
    *) echo 10 ;;
  esac
}
sizes=(8 4096 65536 1048576)

# UCP connects an RC endpoint through a transport that needs no connection
# (its wireup messages): ud_verbs as "aux", which carries nothing else.
for tls in rc_verbs,ud_verbs:aux,self ud_verbs,self; do
  echo "--- UCP over ${tls%%,*} (UCX_TLS=$tls)"
  for t in ucp_put_bw ucp_get ucp_am_bw ucp_am_lat tag_lat; do
    for s in "${sizes[@]}"; do run "$tls" "$t" "$s" "$(iters_for "$s")"; done
  done
done

echo "--- UCT"
# put_bw: short up to the inline size, bcopy within a segment, zcopy above.
run rc_verbs put_bw 8 "$(iters_for 8)" -x rc_verbs -d srdma0:1 -D short
run rc_verbs put_bw 4096 "$(iters_for 4096)" -x rc_verbs -d srdma0:1 -D bcopy
run rc_verbs put_bw 65536 "$(iters_for 65536)" -x rc_verbs -d srdma0:1 -D zcopy
run rc_verbs put_bw 1048576 "$(iters_for 1048576)" -x rc_verbs -d srdma0:1 -D zcopy
# am_lat: an active message is at most one segment (rc_verbs) or one MTU
# (ud_verbs): 8 B short, 4 KiB - header bcopy.
run rc_verbs am_lat 8 "$(iters_for 8)" -x rc_verbs -d srdma0:1 -D short
run rc_verbs am_lat 4096 "$(iters_for 4096)" -x rc_verbs -d srdma0:1 -D bcopy
run ud_verbs am_lat 8 "$(iters_for 8)" -x ud_verbs -d srdma0:1 -D short
run ud_verbs am_lat 2048 "$(iters_for 4096)" -x ud_verbs -d srdma0:1 -D bcopy

echo "--- $((($(pp_now_us) - start_us) / 1000)) ms in all"
pp_finish
