#!/usr/bin/env bash
# The main job: install, build, and run the NVMe-oF block benchmark that
# compares private CQs with the shared CQ pool (under a minute on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build/release srdma
./build/release/srdma blk bench --cq both "$@"
