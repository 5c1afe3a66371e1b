#!/usr/bin/env bash
# srdma run: `run_test.sh SRDMA HAS_DROPIN errors|env`.
#   errors: a missing program, a bad --ip, a program that cannot be exec'd
#           (127), no drop-in (an error naming the directories searched)
#   env:    what the program gets: LD_LIBRARY_PATH starting with the drop-in's
#           directory, SRDMA_ADDR from --ip (IPv4 or IPv6; ::ffff:a.b.c.d
#           as a.b.c.d), its arguments untouched. Exits 77
#           (skipped) when this build has no drop-in (srdma_ibverbs is not
#           built with sanitizers).
set -u
srdma=${1:?usage: run_test.sh SRDMA HAS_DROPIN errors|env}
case ${2:?} in 1|ON|TRUE|true) has_dropin=1 ;; *) has_dropin=0 ;; esac
mode=${3:?}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

if [[ $mode == errors ]]; then
  err=$("$srdma" run 2>&1 >/dev/null); rc=$?
  ((rc == 1)) || fail "srdma run without a program: exit $rc, not 1"
  [[ $err == *EINVAL*"needs a program"* ]] || fail "srdma run without a program: '$err'"
  err=$("$srdma" run -- 2>&1 >/dev/null) && fail "srdma run -- without a program should fail"
  err=$("$srdma" run stray -- /usr/bin/true 2>&1 >/dev/null) && fail "srdma run with a word before -- should fail"
  [[ $err == *EINVAL*"'stray' before --"* ]] || fail "srdma run stray --: '$err'"
  for ip in 1.2.3 300.1.1.1 127.0.0.1x localhost "[::1]" ::1::2 ""; do
    [[ -z $ip ]] && continue
    err=$("$srdma" run --ip "$ip" -- /usr/bin/true 2>&1 >/dev/null); rc=$?
    ((rc == 1)) || fail "srdma run --ip $ip: exit $rc, not 1"
    [[ $err == *EINVAL*"--ip: '$ip' is not an IPv4 or IPv6 address"* ]] ||
      fail "srdma run --ip $ip: error names the option and the address: '$err'"
  done
  if ((has_dropin)); then
    for prog in /nonexistent/program srdma-no-such-program; do
      err=$("$srdma" run -- "$prog" 2>&1 >/dev/null); rc=$?
      ((rc == 127)) || fail "srdma run -- $prog: exit $rc, not 127"
      [[ $err == "srdma run: $prog: No such file or directory" ]] || fail "srdma run -- $prog: '$err'"
    done
    err=$("$srdma" run -- /dev/null 2>&1 >/dev/null); rc=$?
    ((rc == 127)) && [[ $err == "srdma run: /dev/null: Permission denied" ]] || fail "srdma run -- /dev/null: $rc '$err'"
  else
    err=$("$srdma" run -- /usr/bin/true 2>&1 >/dev/null); rc=$?
    ((rc == 1)) || fail "srdma run without a drop-in: exit $rc, not 1"
    [[ $err == *ENOENT*libibverbs.so.1*lib/softrdma* ]] || fail "no drop-in: the error names the directories: '$err'"
  fi
  [[ $fails == 0 ]] && echo "srdma run errors: all passed"
  exit $((fails > 0))
fi

if ((!has_dropin)); then
  echo "skipped: this build has no libibverbs drop-in (srdma_ibverbs is not built with sanitizers)"
  exit 77
fi
env=$(env -u SRDMA_ADDR LD_LIBRARY_PATH=/opt/old "$srdma" run --ip 127.0.0.2 -- /usr/bin/env) || fail "srdma run env: exit $?"
ld=$(sed -n 's/^LD_LIBRARY_PATH=//p' <<<"$env")
dir=${ld%%:*}
[[ -e $dir/libibverbs.so.1 ]] || fail "LD_LIBRARY_PATH '$ld' does not start with the drop-in's directory"
[[ $ld == "$dir:/opt/old" ]] || fail "LD_LIBRARY_PATH '$ld': the drop-in's directory, then the old value"
grep -qx "SRDMA_ADDR=127.0.0.2" <<<"$env" || fail "no SRDMA_ADDR=127.0.0.2 in: $env"
# IPv6 as given (RFC 5952 text); an IPv4-mapped address as its IPv4 one.
for pair in "::1 ::1" "0:0::1 ::1" "fd00::a:1 fd00::a:1" "::ffff:127.0.0.3 127.0.0.3"; do
  read -r given want <<<"$pair"
  env=$(env -u SRDMA_ADDR "$srdma" run --ip "$given" -- /usr/bin/env) || fail "srdma run --ip $given: exit $?"
  grep -qx "SRDMA_ADDR=$want" <<<"$env" || fail "--ip $given: no SRDMA_ADDR=$want in: $(grep SRDMA_ADDR <<<"$env")"
done
env=$(env -u SRDMA_ADDR -u LD_LIBRARY_PATH "$srdma" run -- /usr/bin/env) || fail "srdma run env: exit $?"
grep -qx "LD_LIBRARY_PATH=$dir" <<<"$env" || fail "no old LD_LIBRARY_PATH: $(grep LD_LIBRARY_PATH <<<"$env"), not $dir"
grep -q "^SRDMA_ADDR=" <<<"$env" && fail "SRDMA_ADDR set without --ip"
# The program's arguments are its own, options included.
out=$("$srdma" run -- /bin/sh -c 'printf "%s|" "$@"' sh --ip 1.2.3 -- --help) || fail "srdma run -- sh: exit $?"
[[ $out == "--ip|1.2.3|--|--help|" ]] || fail "the program's arguments: '$out'"
# Its exit status is the program's.
"$srdma" run -- /bin/sh -c 'exit 7'; rc=$?
((rc == 7)) || fail "srdma run -- sh -c 'exit 7': exit $rc"
[[ $fails == 0 ]] && echo "srdma run env: all passed (drop-in $dir)"
exit $((fails > 0))
