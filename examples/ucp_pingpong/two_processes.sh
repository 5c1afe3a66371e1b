#!/usr/bin/env bash
# ucp_pingpong between two processes on softrdma's libibverbs.so.1, over
# rc_verbs (with ud_verbs:aux for UCP's wireup) and over ud_verbs: a server
# on one loopback address, a client on another (addresses and TCP port of
# this run's own). Both must exit 0 and print "ucp_pingpong: ok" (the
# 1 MiB PUT and every tagged message checked). UCX needs
# /dev/infiniband/srdma0: created with `srdma devnode` when missing (root
# only) and removed at exit; one that was there stays.
#
#   two_processes.sh UCP_PINGPONG SRDMA LIBDIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/perf_processes.sh
source "$here/../../tests/perf_processes.sh"
prog=${1:?usage: two_processes.sh UCP_PINGPONG SRDMA LIBDIR}
srdma=${2:?} libdir=${3:?}
command -v stdbuf >/dev/null || { echo "FAIL: no stdbuf (coreutils)"; exit 1; }
pp_setup
PP_READY_S=20
node=/dev/infiniband/srdma0
if [[ ! -c $node ]]; then
  ((EUID == 0)) || { echo "FAIL: $node is missing and only root can create it: run \`sudo srdma devnode\`"; exit 1; }
  "$srdma" devnode || { echo "FAIL: srdma devnode"; exit 1; }
  pp_on_exit "$srdma" devnode --remove
fi
net=127.$((RANDOM % 200 + 20)).$(($$ % 250 + 1))
port=$((30000 + $$ % 20000))
for tls in rc_verbs,ud_verbs:aux,self ud_verbs,self; do
  while pp_tcp_listening "$port"; do port=$((port + 1)); done
  env=(env "LD_LIBRARY_PATH=$libdir" UCX_NET_DEVICES=srdma0:1 "UCX_TLS=$tls" UCX_WARN_UNUSED_ENV_VARS=n SRDMA_VERBS_DEBUG=1)
  name=ucp-${tls%%,*}
  if pp_pair "$name" 60 "${env[@]}" "SRDMA_ADDR=$net.1" stdbuf -oL "$prog" -a "$net.1" -p "$port" :: \
    "${env[@]}" "SRDMA_ADDR=$net.2" stdbuf -oL "$prog" -a "$net.2" -p "$port" "$net.1"; then
    if grep -q "^ucp_pingpong: ok" "$PP_TMP/$name.server.out" && grep -q "^ucp_pingpong: ok" "$PP_TMP/$name.client.out"; then
      echo "ok   ${tls%%,*}: $(grep '^ucp_pingpong: ok' "$PP_TMP/$name.client.out")"
    else
      pp_fail "$name: no 'ucp_pingpong: ok' line on both sides"
      pp_show "$name.server"
      pp_show "$name.client"
    fi
  fi
  port=$((port + 1))
done
pp_finish
