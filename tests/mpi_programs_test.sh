#!/usr/bin/env bash
# Open MPI 4.1 (openmpi-bin) over UCX (pml ucx) on softrdma's
# libibverbs.so.1, unmodified, on one host: examples/mpi/mpi_check (a
# ping-pong at 8 B .. 1 MiB, allreduces and a broadcast, every result
# checked on every rank) with
#  - 2 ranks and 4 ranks over UCX's rc_verbs (UCX_TLS=rc_verbs,
#    ud_verbs:aux for wireup, self),
#  - 2 ranks over ud_verbs alone (UCX_TLS=ud_verbs,self),
# and, given MPICH's build of it (MPICH_CHECK; Debian 12's MPICH runs on
# UCX, ch4:ucx), with MPICH's mpirun.mpich: 2 and 4 ranks over rc_verbs,
# MPIR_CVAR_NOLOCAL=1 so that ranks on one node use UCX, not MPICH's shm.
# UCX restricted to the device srdma0:1, so that nothing else (shared
# memory, TCP) can carry a byte: pml ucx then either runs on softrdma or
# fails. Every rank opens the device on the host's one address (the host
# model): as root the test runs in a network namespace of its own, where
# the ranks have no SRDMA_ADDR at all and share its 127.0.0.1; elsewhere
# they share one 127.X.Y.1. Every run must exit 0 with mpi_check's "ok: 0
# check(s) failed on N ranks"; every run is bounded (timeout).
# UCX needs /dev/infiniband/srdma0 (`srdma devnode`): created here when
# missing (root only) and removed at exit. Skips (77) without mpirun.
#
#   mpi_programs_test.sh SRDMA LIBDIR MPI_CHECK [MPICH_CHECK]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srdma=${1:?usage: mpi_programs_test.sh SRDMA LIBDIR MPI_CHECK}
libdir=$(cd "${2:?}" 2>/dev/null && pwd) || { echo "FAIL: no directory '$2'" >&2; exit 1; }
prog=${3:?}
mpich_prog=${4:-}
[[ -x $prog ]] || { echo "FAIL: no program '$prog'" >&2; exit 1; }
[[ -z $mpich_prog || -x $mpich_prog ]] || { echo "FAIL: no program '$mpich_prog'" >&2; exit 1; }
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun is not installed (apt-get install openmpi-bin)"; exit 77; }
if [[ ${SRDMA_MPI_INSIDE:-} != 1 ]] && ((EUID == 0)) && unshare -n true 2>/dev/null; then
  exec env SRDMA_MPI_INSIDE=1 unshare -n -- "$0" "$@"
fi
inside=0
if [[ ${SRDMA_MPI_INSIDE:-} == 1 ]]; then
  ip link set lo up
  unset SRDMA_ADDR
  inside=1
fi

logs=$(mktemp -d)
node=/dev/infiniband/srdma0
created=0
cleanup() {
  ((created)) && "$srdma" devnode --remove >/dev/null
  rm -rf "$logs"
}
trap cleanup EXIT
if [[ ! -c $node ]]; then
  ((EUID == 0)) || { echo "FAIL: $node is missing and only root can create it: run \`sudo srdma devnode\`"; exit 1; }
  "$srdma" devnode || { echo "FAIL: srdma devnode"; exit 1; }
  created=1
fi
status=0
run() {  # NAME RANKS TLS [mpich]
  local name=$1 np=$2 tls=$3 flavour=${4:-openmpi} log=$logs/$1.log
  local -a cmd addr=() xaddr=()
  if ((!inside)); then
    addr=("SRDMA_ADDR=127.$((RANDOM % 200 + 20)).$(($$ % 250 + 1)).1")
    xaddr=(-x "${addr[0]}")
  fi
  if [[ $flavour == mpich ]]; then
    # hydra passes the whole environment to every rank. MPIR_CVAR_NOLOCAL:
    # ranks on one node talk through the netmod (UCX), not MPICH's own
    # shared memory.
    cmd=(env "LD_LIBRARY_PATH=$libdir" "${addr[@]}" MPIR_CVAR_NOLOCAL=1 SRDMA_VERBS_DEBUG=1 UCX_NET_DEVICES=srdma0:1 "UCX_TLS=$tls"
         UCX_WARN_UNUSED_ENV_VARS=n mpirun.mpich -np "$np" "$mpich_prog")
  else
    cmd=(mpirun --allow-run-as-root --oversubscribe -np "$np" --mca pml ucx --mca btl self,tcp --mca osc ^ucx
         -x "LD_LIBRARY_PATH=$libdir" "${xaddr[@]}" -x SRDMA_VERBS_DEBUG=1
         -x UCX_NET_DEVICES=srdma0:1 -x "UCX_TLS=$tls" -x UCX_WARN_UNUSED_ENV_VARS=n
         "$prog")
  fi
  timeout -k 5 120 "${cmd[@]}" >"$log" 2>&1
  local rc=$?
  if ((rc == 0)) && grep -q "^ok: 0 check(s) failed on $np ranks" "$log"; then
    echo "ok   $name: $flavour, $np ranks, UCX_TLS=$tls, $(grep -c '^ok:' "$log") checks passed"
    grep -E "^ok: ping-pong (8|1048576) B" "$log" | sed 's/^/       /'
  else
    echo "FAIL $name: exit $rc ($( ((rc == 124)) && echo "timed out" || echo "see below"))"
    tail -n 30 "$log" | sed 's/^/  | /'
    status=1
  fi
}
run rc-2 2 rc_verbs,ud_verbs:aux,self
run rc-4 4 rc_verbs,ud_verbs:aux,self
run ud-2 2 ud_verbs,self
if [[ -n $mpich_prog ]]; then
  command -v mpirun.mpich >/dev/null || { echo "FAIL: mpirun.mpich is missing beside $mpich_prog"; exit 1; }
  run mpich-rc-2 2 rc_verbs,ud_verbs:aux,self mpich
  run mpich-rc-4 4 rc_verbs,ud_verbs:aux,self mpich
fi
exit $status
