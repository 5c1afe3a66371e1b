#!/usr/bin/env bash
# softrdma installs like a library: `cmake --install` of this build into a
# temporary prefix, then examples/consumer built against that prefix twice,
# through find_package(srdma) and through pkg-config, and both programs run;
# the layout checked (the libibverbs drop-in only under <libdir>/softrdma,
# never beside the system's libibverbs), and the installed `srdma run`.
set -euo pipefail
build=${1:?usage: install_test.sh BUILD_DIR SOURCE_DIR LIBDIR HAS_DROPIN CXX}
src=$(realpath "${2:?}") libdir=${3:?} has_dropin=${4:?} cxx=${5:?}
case $has_dropin in 1|ON|TRUE|true) has_dropin=1 ;; *) has_dropin=0 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
p=$(realpath "$tmp")/prefix
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

cmake --install "$build" --prefix "$p" >"$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }

# The layout.
for f in bin/srdma include/srdma/device.h include/srdma/status.h "$libdir/libsrdma.a" \
         "$libdir/cmake/srdma/srdmaConfig.cmake" "$libdir/cmake/srdma/srdmaConfigVersion.cmake" \
         "$libdir/cmake/srdma/srdmaTargets.cmake" "$libdir/pkgconfig/srdma.pc"; do
  [[ -e $p/$f ]] || fail "$f not installed"
done
[[ -x $p/bin/srdma ]] || fail "bin/srdma not executable"
diff <(cd "$src/include/srdma" && ls) <(cd "$p/include/srdma" && ls) >/dev/null ||
  fail "include/srdma is not exactly the public headers: $(ls "$p/include/srdma" | tr '\n' ' ')"
[[ -z $(find "$p/include" -mindepth 1 -not -path "$p/include/srdma*") ]] || fail "headers beyond include/srdma"
# One archive with every layer's objects (alloc, hca, core, nvmf, nvmf over RDMA).
members=$(ar t "$p/$libdir/libsrdma.a")
for o in status.cc.o buddy_allocator.cc.o soft_hca.cc.o udp_link.cc.o device.cc.o cq_pool.cc.o \
         capsule_parser.cc.o rdma_host.cc.o; do
  grep -qx "$o" <<<"$members" || fail "libsrdma.a has no $o"
done
# The drop-in: <libdir>/softrdma/libibverbs.so.1 if this build has it; never
# a libibverbs* directly in lib/ or <libdir>/, no libibverbs.so namelink.
dropin=$p/$libdir/softrdma/libibverbs.so.1
if ((has_dropin)); then
  [[ -e $dropin ]] || fail "$libdir/softrdma/libibverbs.so.1 not installed"
else
  [[ ! -e $dropin ]] || fail "$libdir/softrdma/libibverbs.so.1 installed, but this build has no drop-in"
fi
for d in "$p/lib" "$p/$libdir"; do
  stray=$(find "$d" -maxdepth 1 -name 'libibverbs*' 2>/dev/null)
  [[ -z $stray ]] || fail "libibverbs directly in ${d#"$p"/}: $stray"
done
[[ ! -e $p/$libdir/softrdma/libibverbs.so ]] || fail "a libibverbs.so namelink: a program could link the drop-in"

# find_package(srdma) with CMAKE_PREFIX_PATH, and nothing else.
if cmake -S "$src/examples/consumer" -B "$tmp/cmake" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
         -DCMAKE_PREFIX_PATH="$p" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$tmp/configure.log" 2>&1 &&
   cmake --build "$tmp/cmake" >"$tmp/build.log" 2>&1; then
  found=$(sed -n 's/^srdma_DIR:PATH=//p' "$tmp/cmake/CMakeCache.txt")
  [[ $found == "$p/$libdir/cmake/srdma" ]] || fail "find_package found srdma in '$found', not the prefix"
  out=$("$tmp/cmake/consumer") || fail "consumer (find_package) exited $?"
  [[ $out == "device srdma0: registered 65536 bytes"* ]] || fail "consumer (find_package) printed: $out"
else
  cat "$tmp/configure.log" "$tmp/build.log" 2>/dev/null | tail -30
  fail "examples/consumer does not build with find_package(srdma)"
fi

# pkg-config, with PKG_CONFIG_PATH (the Makefile: pkg-config --static --cflags --libs srdma).
mkdir -p "$tmp/make"
if PKG_CONFIG_PATH="$p/$libdir/pkgconfig" make -s -C "$tmp/make" -f "$src/examples/consumer/Makefile" \
       CXX="$cxx" CXXFLAGS= >"$tmp/make.log" 2>&1; then
  out=$("$tmp/make/consumer") || fail "consumer (pkg-config) exited $?"
  [[ $out == "device srdma0: registered 65536 bytes"* ]] || fail "consumer (pkg-config) printed: $out"
else
  tail -30 "$tmp/make.log"
  fail "examples/consumer does not build with pkg-config"
fi
cflags=$(PKG_CONFIG_PATH="$p/$libdir/pkgconfig" pkg-config --cflags srdma | xargs)
[[ $(realpath -m "${cflags#-I}") == "$p/include" ]] || fail "srdma.pc's include directory is not the prefix's: $cflags"

# The installed srdma run finds the installed drop-in.
if ((has_dropin)); then
  env=$(LD_LIBRARY_PATH= "$p/bin/srdma" run --ip 127.0.0.3 -- /usr/bin/env) || fail "installed srdma run exited $?"
  grep -qx "LD_LIBRARY_PATH=$p/$libdir/softrdma" <<<"$env" ||
    fail "installed srdma run: $(grep LD_LIBRARY_PATH <<<"$env"), not $p/$libdir/softrdma"
  grep -qx "SRDMA_ADDR=127.0.0.3" <<<"$env" || fail "installed srdma run: no SRDMA_ADDR=127.0.0.3"
else
  err=$("$p/bin/srdma" run -- /usr/bin/true 2>&1) && fail "srdma run without a drop-in should fail"
  [[ $err == *"$p/lib/softrdma"* ]] || fail "srdma run without a drop-in names $p/lib/softrdma: $err"
fi

[[ $fails == 0 ]] && echo "install: all passed (prefix layout, find_package, pkg-config, srdma run)"
exit $((fails > 0))
