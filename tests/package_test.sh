#!/usr/bin/env bash
# softrdma's Debian packages (cmake/package.cmake), made from this build and
# installed into a fresh root:
#
#   package_test.sh BUILD_DIR SOURCE_DIR LIBDIR CXX
#
#  1. cpack makes srdma, libsrdma-dev and srdma-dropins; each holds its own
#     files and no other's; Depends come from dpkg-shlibdeps (and
#     srdma-dropins does not depend on the libibverbs1 it stands in for).
#  2. lintian finds no error and no warning (the tags that stay are
#     overridden in the packages, each with why).
#  3. `apt-get install ./*.deb`, simulated (-s), resolves against this
#     machine's packages, and against none at all: a fresh Debian 12, every
#     dependency from the archive's package lists (when apt has them).
#  4. dpkg installs the three into a fresh root (dpkg --root: the
#     maintainer scripts run chrooted there, under /bin/sh). From that root:
#     srdma --version and srdma info; examples/consumer built against its
#     libsrdma-dev with find_package(srdma) and with pkg-config, and run;
#     ibv_devinfo on its srdma-dropins through its srdma run; no drop-in on
#     the loader's path; the unit passes systemd-analyze verify and its
#     security exposure stays low.
#  5. dpkg removes them, then purges them: the root holds exactly what it
#     held before, and dpkg knows none of them.
# Why not a debootstrap chroot: minutes of download and unpacking per run;
# step 3 proves what it would (a fresh Debian 12 can install them), step 4
# runs the installed files (on this machine's libraries).
# Exits 77 (skipped) without dpkg, cpack, lintian or apt-get, or in a build
# without the drop-ins (the sanitized ones).
set -uo pipefail
build=$(realpath "${1:?usage: package_test.sh BUILD_DIR SOURCE_DIR LIBDIR CXX}")
src=$(realpath "${2:?}") libdir=${3:?} cxx=${4:?}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/process_lib.sh
source "$here/process_lib.sh"

skip() {
  echo "SKIP: $*"
  exit 77
}
[[ -e $build/lib/softrdma/libibverbs.so.1 ]] || skip "this build has no drop-ins (sanitized builds)"
for tool in cpack dpkg dpkg-deb dpkg-shlibdeps lintian apt-get; do
  command -v "$tool" >/dev/null || skip "no $tool (scripts/setup.sh installs it)"
done
# dpkg --root chroots into the root for the maintainer scripts: as root,
# or in a user namespace where this user is root (with a mount namespace to
# put /dev/null there).
if (($(id -u) != 0)); then
  unshare --map-root-user --mount true 2>/dev/null || skip "not root, and no user namespace to be root in"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/srdma-package.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
step_ms=$(now_ms)
ok() {
  echo "ok   $* ($(($(now_ms) - step_ms)) ms)"
  step_ms=$(now_ms)
}

# 1. The packages.
if ! (cd "$build" && cpack -G DEB -B "$tmp/out" >"$tmp/cpack.log" 2>&1); then
  tail -20 "$tmp/cpack.log"
  fail "cpack -G DEB failed"
  exit 1
fi
debs=()
for p in srdma libsrdma-dev srdma-dropins; do
  deb=$(ls "$tmp/out/${p}_"*.deb 2>/dev/null)
  [[ -f $deb ]] || { fail "no ${p}_*.deb"; continue; }
  debs+=("$deb")
  dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$tmp/$p.files"
done
((${#debs[@]} == 3)) || exit 1
has() { grep -qx -- "$2" "$tmp/$1.files" || fail "$1 has no $2"; }
has srdma /usr/bin/srdma
has srdma /usr/lib/systemd/system/srdma-nvmf-target.service
has srdma /usr/share/man/man1/srdma.1.gz
has srdma /usr/share/man/man1/srdma-nvmf-target.1.gz
has srdma /usr/share/bash-completion/completions/srdma
has srdma /usr/share/doc/srdma/examples/nvmf-target.json
has libsrdma-dev "/usr/$libdir/libsrdma.a"
has libsrdma-dev /usr/include/srdma/device.h
has libsrdma-dev "/usr/$libdir/cmake/srdma/srdmaConfig.cmake"
has libsrdma-dev "/usr/$libdir/pkgconfig/srdma.pc"
has srdma-dropins "/usr/$libdir/softrdma/libibverbs.so.1"
has srdma-dropins "/usr/$libdir/softrdma/librdmacm.so.1"
for p in srdma libsrdma-dev srdma-dropins; do
  has "$p" "/usr/share/doc/$p/copyright"
  has "$p" "/usr/share/doc/$p/changelog.gz"
done
# No file in two packages; nothing of the drop-ins outside <libdir>/softrdma.
dups=$(cat "$tmp"/*.files | grep -v '/$' | sort | uniq -d)
[[ -z $dups ]] || fail "files in two packages: $dups"
grep -E '/lib(ibverbs|rdmacm)' "$tmp"/*.files | grep -v "/usr/$libdir/softrdma/" &&
  fail "a drop-in outside /usr/$libdir/softrdma"
grep -q "softrdma/lib.*\.so$" "$tmp/srdma-dropins.files" && fail "a drop-in namelink (.so): a program could link it"
depends() { dpkg-deb -f "$tmp/out/${1}_"*.deb Depends; }
[[ $(depends srdma) == *libc6*libfmt9*liburing2* ]] || fail "srdma's Depends lack what it links: $(depends srdma)"
[[ $(depends srdma-dropins) == *libc6*libstdc++6* ]] || fail "srdma-dropins' Depends: $(depends srdma-dropins)"
[[ $(depends srdma-dropins) == *libibverbs1* ]] && fail "srdma-dropins depends on libibverbs1: $(depends srdma-dropins)"
[[ $(depends libsrdma-dev) == *libfmt-dev*libisal-dev*liburing-dev* ]] ||
  fail "libsrdma-dev's Depends lack the libraries srdma.pc requires: $(depends libsrdma-dev)"
ok "cpack: ${debs[*]##*/}"

# 2. lintian: errors and warnings fail; what it says at info level is shown.
lintian --info --display-level ">=info" --tag-display-limit 0 "${debs[@]}" >"$tmp/lintian.log" 2>&1
grep -E '^[EW]: ' "$tmp/lintian.log" && fail "lintian (above)"
grep -E '^I: ' "$tmp/lintian.log" | sed 's/^/     lintian /'
ok "lintian: no error, no warning"

# 3. apt-get install ./*.deb, simulated.
if ! apt-get -s install "${debs[@]}" >"$tmp/apt.log" 2>&1 || ! grep -q "^Inst srdma " "$tmp/apt.log"; then
  tail -5 "$tmp/apt.log"
  fail "apt-get -s install ./*.deb on this machine"
fi
if compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null; then
  : >"$tmp/empty-status"
  if apt-get -s -o Dir::State::status="$tmp/empty-status" install "${debs[@]}" >"$tmp/apt-fresh.log" 2>&1 &&
    grep -q "^Inst libfmt9 " "$tmp/apt-fresh.log" && grep -q "^Inst srdma-dropins " "$tmp/apt-fresh.log"; then
    ok "apt-get -s install ./*.deb: here, and on a system with nothing installed ($(grep -c '^Inst ' "$tmp/apt-fresh.log") packages from the archive)"
  else
    grep -E '^E:|^ [a-z]' "$tmp/apt-fresh.log" | head -10
    fail "apt-get -s install ./*.deb with nothing installed"
  fi
else
  ok "apt-get -s install ./*.deb here (no package lists: apt-get update for the fresh-system check)"
fi

# 4. A fresh root: an empty dpkg database, and of the essential system what
# the maintainer scripts use: /bin/sh and rm (with their libraries), and
# /dev/null.
root=$tmp/root
mkdir -p "$root"/var/lib/dpkg/{info,updates,triggers,alternatives} "$root/dev"
: >"$root/var/lib/dpkg/status"
for f in /bin/sh /bin/rm $(ldd /bin/sh /bin/rm | awk '/=> \// {print $3} /^\t\// {print $1}' | sort -u); do
  mkdir -p "$root$(dirname "$f")"
  cp "$(readlink -f "$f")" "$root$f"
done
if (($(id -u) == 0)); then
  mknod -m 666 "$root/dev/null" c 1 3
else
  : >"$root/dev/null"  # where /dev/null is bound in the namespace (dpkg_root)
fi
dpkg_root() {
  if (($(id -u) == 0)); then
    dpkg --root="$root" "$@"
  else
    unshare --map-root-user --mount sh -c 'mount --bind /dev/null "$0/dev/null" && exec dpkg --root="$0" "$@"' \
      "$root" "$@"
  fi
}
snapshot() { (cd "$root" && find . -path ./var/lib/dpkg -prune -o -print | sort); }
snapshot >"$tmp/before"
# --force-depends: the root has none of the libraries; this machine has them (step 3).
if ! dpkg_root --force-depends -i "${debs[@]}" \
  >"$tmp/dpkg-i.log" 2>&1; then
  tail -20 "$tmp/dpkg-i.log"
  fail "dpkg -i into the fresh root"
fi
installed=$(dpkg --root="$root" -l 2>/dev/null | awk '/^ii/ {print $2}' | xargs)
[[ $installed == "libsrdma-dev srdma srdma-dropins" ]] || fail "installed in the root: '$installed'"
ok "dpkg -i into a fresh root: $installed"

r_srdma=$root/usr/bin/srdma
version=$("$r_srdma" --version) || fail "srdma --version from the root"
[[ $version == "srdma "*git*"libibverbs.so.1 1.14."*IBVERBS_1.1*"librdmacm.so.1"* ]] ||
  fail "srdma --version: $version"
"$r_srdma" info | grep -q "srdma0" || fail "srdma info from the root"
ok "srdma --version, srdma info: $(head -1 <<<"$version")"

# examples/consumer against the root's libsrdma-dev, both ways.
if cmake -S "$src/examples/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$root/usr" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$tmp/consumer.log" 2>&1 &&
  cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1; then
  found=$(sed -n 's/^srdma_DIR:PATH=//p' "$tmp/consumer/CMakeCache.txt")
  [[ $found == "$root/usr/$libdir/cmake/srdma" ]] || fail "find_package found srdma in '$found', not the root"
  [[ $("$tmp/consumer/consumer") == "device srdma0: registered 65536 bytes"* ]] || fail "consumer (find_package) ran wrong"
else
  tail -20 "$tmp/consumer.log"
  fail "examples/consumer does not build with find_package(srdma) against libsrdma-dev"
fi
mkdir -p "$tmp/make"
if PKG_CONFIG_PATH="$root/usr/$libdir/pkgconfig" make -s -C "$tmp/make" -f "$src/examples/consumer/Makefile" \
  CXX="$cxx" CXXFLAGS= >"$tmp/make.log" 2>&1; then
  [[ $("$tmp/make/consumer") == "device srdma0: registered 65536 bytes"* ]] || fail "consumer (pkg-config) ran wrong"
else
  tail -20 "$tmp/make.log"
  fail "examples/consumer does not build with pkg-config against libsrdma-dev"
fi
ok "examples/consumer against libsrdma-dev: find_package(srdma) and pkg-config"

# ibv_devinfo (the system's ibverbs-utils) on the root's drop-ins.
if command -v ibv_devinfo >/dev/null; then
  ip=$(pid_ip $$ 1)
  if out=$("$r_srdma" run --ip "$ip" -- ibv_devinfo 2>&1) && grep -q "hca_id:.*srdma0" <<<"$out" &&
    grep -q "PORT_ACTIVE" <<<"$out"; then
    ok "srdma run -- ibv_devinfo on srdma-dropins: $(grep -m1 hca_id <<<"$out" | xargs), PORT_ACTIVE"
  else
    fail "srdma run -- ibv_devinfo on the root's drop-ins: $out"
  fi
else
  echo "     (no ibv_devinfo: apt-get install ibverbs-utils)"
fi
# The drop-ins stay off the loader's path: nothing of theirs in <libdir>.
stray=$(find "$root/usr/$libdir" "$root/usr/lib" -maxdepth 1 \( -name 'libibverbs*' -o -name 'librdmacm*' \))
[[ -z $stray ]] || fail "a drop-in on the loader's path: $stray"

# The unit: systemd's own checks, srdma named by its path in the root.
unit=$root/usr/lib/systemd/system/srdma-nvmf-target.service
grep -qx "ExecStart=/usr/bin/srdma nvmf target --config /etc/srdma/nvmf-target.json" "$unit" ||
  fail "the unit's ExecStart: $(grep ExecStart= "$unit")"
if command -v systemd-analyze >/dev/null; then
  sed "s|/usr/bin/srdma|$r_srdma|" "$unit" >"$tmp/srdma-nvmf-target.service"
  MANPATH=$root/usr/share/man systemd-analyze verify "$tmp/srdma-nvmf-target.service" >"$tmp/verify.log" 2>&1 ||
    fail "systemd-analyze verify: $(cat "$tmp/verify.log")"
  # Exposure on systemd's 0..10 scale, 2.0 at most ("OK" is below 5).
  systemd-analyze security --offline=true --threshold=20 "$tmp/srdma-nvmf-target.service" >"$tmp/security.log" 2>&1 ||
    fail "systemd-analyze security: $(tail -1 "$tmp/security.log")"
  ok "the unit: systemd-analyze verify; $(grep -o 'Overall exposure level.*' "$tmp/security.log")"
fi

# 5. Removed, then purged: nothing of theirs stays.
if ! dpkg_root -r srdma libsrdma-dev srdma-dropins >"$tmp/dpkg-r.log" 2>&1; then
  tail -20 "$tmp/dpkg-r.log"
  fail "dpkg -r"
fi
diff "$tmp/before" <(snapshot) >"$tmp/left.diff" || fail "dpkg -r left files behind: $(cat "$tmp/left.diff")"
dpkg_root -P srdma libsrdma-dev srdma-dropins >"$tmp/dpkg-p.log" 2>&1 || fail "dpkg -P"
diff "$tmp/before" <(snapshot) >"$tmp/left.diff" || fail "dpkg -P left files behind: $(cat "$tmp/left.diff")"
known=$(dpkg --root="$root" -l 2>/dev/null | awk '/^[a-z][a-z] / {print $2}' | xargs)
[[ -z $known ]] || fail "dpkg still knows: $known"
info=$(ls "$root/var/lib/dpkg/info" | grep -E '^(srdma|libsrdma-dev|srdma-dropins)[.:]')
[[ -z $info ]] || fail "dpkg's info holds: $info"
ok "dpkg -r and -P leave the root as it was"

[[ $fails == 0 ]] && echo "package: all passed"
exit $((fails > 0))
