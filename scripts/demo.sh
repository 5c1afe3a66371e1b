#!/usr/bin/env bash
# The main job: install, build, and run the device demo.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build/release srdma
./build/release/srdma info
./build/release/srdma demo
./build/release/srdma perf write_bw -s 65536 -n 20000
./build/release/srdma perf send_lat -s 8 -n 20000
