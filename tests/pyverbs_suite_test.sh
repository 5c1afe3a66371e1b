#!/usr/bin/env bash
# rdma-core's own test suite (python3-pyverbs: its tests under
# /usr/share/doc/rdma-core/tests) run unmodified on softrdma's
# libibverbs.so.1 and librdmacm.so.1. A test that errors or fails fails
# this one (unless it is on not_yet_failing below: a missing feature whose
# test cannot skip, and which fails this one once it passes). So does
# every skip, unless its reason is on one of the two lists below:
#  - hardware: what needs one vendor's device, a GPU, dmabuf or a PCI
#    function (as the issue that asks for this suite allows);
#  - not yet: features softrdma does not have today, each naming what is
#    missing. This list only shrinks: a feature that lands takes its line
#    out, and its tests must then pass.
# The summary prints every skip reason with its count.
#
#   pyverbs_suite_test.sh LIBDIR   (softrdma's drop-in directory)
# As root the suite runs in a network and mount namespace of its own: its
# processes share the namespace's 127.0.0.1 with no SRDMA_ADDR (the host
# model), and the device gets the sysfs entry a kernel device has,
# /sys/class/infiniband/srdma0/device/net/lo, in a tmpfs over /sys/class
# (/sys/class/net stays the real one). The suite's rdmacm tests find a
# device's interface and address only there, and softrdma, having no
# kernel part, has no sysfs node of its own. Elsewhere the device is on
# 127.212.0.1, or on $PYVERBS_SRDMA_ADDR, and those tests skip.
set -uo pipefail
if [[ ${PYVERBS_INSIDE:-} != 1 ]] && ((EUID == 0)) && unshare -m -n true 2>/dev/null; then
  exec env PYVERBS_INSIDE=1 unshare -m -n -- "$0" "$@"
fi
inside=0 netdev=0
if [[ ${PYVERBS_INSIDE:-} == 1 ]]; then
  inside=1
  ip link set lo up
  sysfs=$(mktemp -d)
  if mount --make-rprivate / && mount -t sysfs sysfs "$sysfs" && mount -t tmpfs tmpfs /sys/class &&
    mkdir -p /sys/class/net /sys/class/infiniband/srdma0/device/net/lo &&
    mount --bind "$sysfs/class/net" /sys/class/net; then
    netdev=1
  else
    echo "note: no sysfs netdev for srdma0 (mounts refused): the rdmacm tests skip"
  fi
fi
libdir=${1:?usage: pyverbs_suite_test.sh LIBDIR}
libdir=$(cd "$libdir" 2>/dev/null && pwd) || { echo "FAIL: no directory '$1'" >&2; exit 1; }
for f in librdmacm.so.1 libibverbs.so.1; do
  [[ -e $libdir/$f ]] || { echo "FAIL: no $f in '$libdir'" >&2; exit 1; }
done
src=/usr/share/doc/rdma-core/tests
# Debian's python3, where python3-pyverbs installs (not whatever is first on PATH).
py=/usr/bin/python3
if [[ ! -e $src/run_tests.py && ! -e $src/run_tests.py.gz ]] || ! $py -c 'import pyverbs' 2>/dev/null; then
  echo "SKIP: python3-pyverbs is not installed (apt-get install python3-pyverbs)"
  exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Debian compresses the larger test files; the suite imports them as modules.
cp -r "$src" "$work/tests"
find "$work/tests" -name '*.gz' -exec gunzip -f {} +

hardware=(
  'over non MLX5 device'
  'This is not an MLX5 device'
  'over non EFA device'
  'Allocating dmabuf is not supported'
  'cuda-python'
  'PCI device must be passed by the user'
  # test_mlx5_timestamp converts with mlx5dv_ts_to_ns.
  'Converting timestamp to nanoseconds is not supported'
  # Raw Ethernet QPs: a NIC's packet steering (mlx4/mlx5); rxe has none either.
  'Create QP type 8 is not supported'
  'Create Raw Packet QP'
  # The machine's reservation (vm.nr_hugepages), not the device's.
  'There are no huge pages of size 2M allocated'
)
not_yet=()
# Without the namespaces (not root) the device has no sysfs netdev.
((netdev)) || not_yet+=("doesn't have net interface")
# Not yet, and the test cannot skip: it fails. Each is a test id (as the
# log's ERROR:/FAIL: line names it) and what is missing; any other test
# that fails still fails this one, and a listed test that passes fails it
# too (take its line out). This list only shrinks.
not_yet_failing=(
)

# An address of its own: other tests run beside this one.
log=$work/log
if ((inside)); then
  (cd "$work/tests" && env -u SRDMA_ADDR LD_LIBRARY_PATH=$libdir timeout 600 $py run_tests.py -v) >"$log" 2>&1
else
  (cd "$work/tests" && SRDMA_ADDR=${PYVERBS_SRDMA_ADDR:-127.212.0.1} LD_LIBRARY_PATH=$libdir timeout 600 $py run_tests.py -v) >"$log" 2>&1
fi
rc=$?
tail -n 4 "$log"

matches() {  # reason, patterns...
  local r=$1 p
  shift
  for p in "$@"; do [[ $r == *"$p"* ]] && return 0; done
  return 1
}
status=0
ran=$(sed -n 's/^Ran \([0-9]*\) tests.*/\1/p' "$log")
[[ -n $ran && $ran -gt 0 ]] || { echo "FAIL: the suite did not run (exit $rc)"; cat "$log"; exit 1; }
tolerated=0
is_not_yet_failing() {
  local t
  for t in "${not_yet_failing[@]}"; do [[ $1 == "$t" ]] && return 0; done
  return 1
}
while IFS= read -r line; do
  name=$(sed -E 's/^(ERROR|FAIL): ([^ ]+).*/\2/' <<<"$line")
  if is_not_yet_failing "$name"; then
    echo "not yet (fails): $line"
    tolerated=$((tolerated + 1))
  else
    echo "FAIL: a test errored or failed: $line"
    grep -A30 -F -x "$line" "$log" | head -60
    status=1
  fi
done < <(grep -E '^(ERROR|FAIL):' "$log")
# A listed test's verdict: on its own line, or on its docstring's (next) line.
for t in "${not_yet_failing[@]}"; do
  verdict=$(awk -v t="$t" '$1 == t && $2 ~ /^\(/ { if ($0 ~ / \.\.\. /) { print $NF } else { getline; print $NF }; exit }' "$log")
  if [[ $verdict == ok ]]; then
    echo "FAIL: $t passes now: take it off not_yet_failing"
    status=1
  fi
done
declare -A count=()
while IFS= read -r reason; do
  count[$reason]=$((${count[$reason]:-0} + 1))
done < <(sed -n "s/.* \.\.\. skipped '\(.*\)'$/\1/p; s/.* \.\.\. skipped \"\(.*\)\"$/\1/p" "$log")
skipped=0
echo "skips by reason:"
for reason in "${!count[@]}"; do
  n=${count[$reason]}
  skipped=$((skipped + n))
  if matches "$reason" "${hardware[@]}"; then
    kind=hardware
  elif matches "$reason" "${not_yet[@]}"; then
    kind=not-yet
  else
    kind=UNEXPECTED
    status=1
  fi
  printf '  %4d  %-10s %s\n' "$n" "$kind" "$reason"
done
echo "ran $ran, skipped $skipped, failed not-yet $tolerated, passed $((ran - skipped - tolerated)) (suite exit $rc)"
[[ $status == 0 && $rc != 0 && $tolerated == 0 ]] && { echo "FAIL: the suite exited $rc"; status=1; }
[[ $status == 0 ]] && echo "PASS" || echo "FAIL: an error, a failure or a skip that is on neither list"
exit $status
