#!/usr/bin/env bash
# One host, many processes (hca/host_steering.h): 3 and then 8 processes of
# examples/host_mesh, all on the host's default address (no SRDMA_ADDR), run
# RC in every pairing with every byte checked; then kill -9 of one of four
# mid-transfer: the survivors' QPs to it end in RETRY_EXC_ERR or a flush in
# bounded time while their traffic with each other is unharmed. After each
# run nothing of ours is left in /dev/shm. Runs in a network namespace of
# its own (its 127.0.0.1 is private); skips (77) where none can be made.
#
#   host_processes_test.sh HOST_MESH DROPIN_DIR     (PP_KEEP=1 keeps the logs)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mesh=${1:?usage: host_processes_test.sh HOST_MESH DROPIN_DIR}
dropin=${2:?usage: host_processes_test.sh HOST_MESH DROPIN_DIR}

if [[ ${SRDMA_HOST_TEST_INSIDE:-} != 1 ]]; then
  [[ $(id -u) == 0 ]] || { echo "SKIP: not root: a network namespace needs CAP_SYS_ADMIN"; exit 77; }
  command -v unshare >/dev/null || { echo "SKIP: no unshare (util-linux)"; exit 77; }
  unshare -n true 2>/dev/null || { echo "SKIP: cannot create a network namespace"; exit 77; }
  exec env SRDMA_HOST_TEST_INSIDE=1 unshare -n -- "$0" "$@"
fi

# shellcheck source=tests/perf_processes.sh source-path=SCRIPTDIR
source "$here/perf_processes.sh"
pp_setup
ip link set lo up
unset SRDMA_ADDR SRDMA_EXCLUSIVE SRDMA_REGISTRY_DIR
export LD_LIBRARY_PATH=$dropin
ns=$(stat -L -c %i /proc/self/ns/net)
ours() { compgen -G "/dev/shm/srdma-$(id -u)-$ns-*" || true; }
if grep -qaE '__(tsan|asan)_init' "$dropin/libibverbs.so.1"; then PP_SLOW=1; fi
limit=$((PP_SLOW ? 240 : 90))

# mesh N [VICTIM]: N ranks; with VICTIM, kill it once the others send.
mesh() {
  local n=$1 victim=${2:-} dir pids=() r
  dir=$(mktemp -d "$PP_TMP/mesh$n.XXXX")
  for ((r = 0; r < n; r++)); do
    pp_start "mesh$n-$r" "$mesh" "$dir" "$r" "$n" $victim
    pids+=("$PP_PID")
  done
  if [[ -n $victim ]]; then
    for ((r = 0; r < n; r++)); do
      local want="sending"
      ((r == victim)) && want="victim waiting"
      if ! pp_wait_output "$PP_TMP/mesh$n-$r.out" "$want" "$limit" "${pids[r]}"; then
        pp_fail "rank $r of $n never said '$want'"
        pp_show "mesh$n-$r"
        return 1
      fi
    done
    pp_kill "${pids[victim]}"
    touch "$dir/killed"
  fi
  local slots=()
  for ((r = 0; r < n; r++)); do
    [[ -n $victim ]] && ((r == victim)) && continue
    if ! pp_wait_exit "${pids[r]}" "$limit"; then
      pp_fail "rank $r of $n hung (${limit} s)"
      pp_show "mesh$n-$r"
      continue
    fi
    if ((PP_RC != 0)) || ! grep -q "ok, " "$PP_TMP/mesh$n-$r.out"; then
      pp_fail "rank $r of $n: exit $PP_RC"
      pp_show "mesh$n-$r"
      continue
    fi
    slots+=("$(sed -n 's/.*slot \([0-9]*\),.*/\1/p' "$PP_TMP/mesh$n-$r.out")")
    if [[ -n $victim ]] && ! grep -qE "QP to killed rank $victim: (transport retry counter exceeded|Work Request Flushed Error)" "$PP_TMP/mesh$n-$r.out"; then
      pp_fail "rank $r never saw its QP to the killed rank end"
    fi
  done
  local distinct
  distinct=$(printf '%s\n' "${slots[@]}" | sort -u | wc -l)
  ((distinct == ${#slots[@]})) || pp_fail "ranks shared a slot: ${slots[*]}"
  echo "mesh of $n${victim:+ (rank $victim killed)}: slots ${slots[*]}"
  grep -h "QP to killed" "$PP_TMP"/mesh"$n"-*.out 2>/dev/null || true
  if [[ -n $(ours) ]]; then pp_fail "left in /dev/shm after the last process: $(ours)"; fi
}

mesh 3
mesh 8
mesh 4 2
pp_finish
