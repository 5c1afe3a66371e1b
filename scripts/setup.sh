#!/usr/bin/env bash
# Installs the Debian 12 packages softrdma needs (skips what is present).
set -euo pipefail
packages=(g++ cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev libfmt-dev libcli11-dev nlohmann-json3-dev liburing-dev zlib1g-dev clang libclang-rt-14-dev clang-16
  libisal-dev libssl-dev tshark python3 iproute2
  libibverbs-dev ibverbs-utils perftest librdmacm-dev rdmacm-utils ucx-utils libucx-dev libfabric-bin python3-pyverbs openmpi-bin libopenmpi-dev mpich libmpich-dev iperf3
  dpkg-dev lintian man-db systemd)  # the Debian packages and their tests (tests/package_test.sh, cli_docs_test.sh)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) == 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
