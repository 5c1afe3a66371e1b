#!/usr/bin/env bash
# The Debian packages from this tree, in one command:
#
#   ./packaging/deb.sh [BUILD_DIR]      (default build/deb; JOBS=N: ninja -j N)
#
# installs what the build needs (scripts/setup.sh), configures a build with
# Debian's hardening flags (dpkg-buildflags), builds only what the packages
# hold, and runs cpack: BUILD_DIR/packages/srdma_*.deb, libsrdma-dev_*.deb,
# srdma-dropins_*.deb. Then:  apt-get install ./BUILD_DIR/packages/*.deb
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
dir=${1:-build/deb}
# -D_FORTIFY_SOURCE (CPPFLAGS: CMake reads only CXXFLAGS), -fstack-protector-strong,
# full RELRO with bindnow: what a package built by debhelper gets.
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
CXXFLAGS="$(dpkg-buildflags --get CPPFLAGS) $(dpkg-buildflags --get CXXFLAGS)"
LDFLAGS=$(dpkg-buildflags --get LDFLAGS)
export CXXFLAGS LDFLAGS
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSRDMA_BENCH=OFF >/dev/null
ninja -C "$dir" -j "${JOBS:-$(nproc)}" srdma_package_contents
rm -rf "$dir/packages"
(cd "$dir" && cpack -G DEB -B packages >/dev/null)
rm -rf "$dir/packages/_CPack_Packages"
ls "$dir"/packages/*.deb
