# shellcheck shell=bash disable=SC2034  # PP_* are read by the tests that source this
# Helpers for the tests that run `srdma perf` or other programs between
# processes (sourced by two_hosts_test.sh, process_faults_test.sh and
# verbs_programs_test.sh; not a test of its own).
#
# Every process a test starts runs in the background with its stdout and
# stderr in files under $PP_TMP, is remembered by its PID, and is killed (by
# that PID, with SIGKILL) on exit if it is still running. Every wait is
# bounded: a process that does not exit in time is a failure ("hang"), never
# a stuck test. Nothing sleeps to prove anything: waits poll for the event
# (an output line, an exit) every 20 ms up to a limit.
#
# Functions that check something report a failure with pp_fail (which counts
# it and goes on) and then return non-zero; the test ends with pp_finish.

# Microseconds since the epoch, without a fork.
pp_now_us() { local t=${EPOCHREALTIME/[.,]/}; echo $((10#$t)); }

# pp_init SRDMA: sets PP_BIN, then as pp_setup; PP_SLOW=1 for a sanitizer
# build (the tests then move less data).
pp_init() {
  PP_BIN=$1
  if [[ ! -x $PP_BIN ]]; then
    echo "FAIL: '$PP_BIN' is not an executable srdma" >&2
    exit 1
  fi
  pp_setup
  if grep -qaE '__(tsan|asan|msan)_init' "$PP_BIN"; then PP_SLOW=1; fi
}

# pp_setup: PP_TMP, the traps and the counters, for a test that runs
# programs other than srdma (PP_SLOW=0).
pp_setup() {
  PP_TMP=$(mktemp -d "${TMPDIR:-/tmp}/srdma-processes.XXXXXX")
  PP_PIDS=()
  PP_ON_EXIT=()
  PP_FAILS=0
  PP_SLOW=0
  # How long a server may take to open its device and say it is waiting
  # (or listen), and to exit once its client is done.
  PP_READY_S=${PP_READY_S:-30}
  PP_SERVER_EXIT_S=${PP_SERVER_EXIT_S:-20}
  trap pp_cleanup EXIT
  trap 'exit 129' HUP
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

# pp_on_exit CMD ARGS...: a command run when the test exits, after its
# processes are killed; in the reverse order of registration.
pp_on_exit() {
  local cmd
  printf -v cmd '%q ' "$@"
  PP_ON_EXIT+=("$cmd")
}

pp_cleanup() {
  local rc=$? pid i
  trap - EXIT HUP INT TERM
  set +e
  {
    for pid in "${PP_PIDS[@]}"; do
      if pp_alive "$pid"; then
        kill -9 "$pid"
        echo "cleanup: killed PID $pid, still running at exit" >&3
      fi
    done
    for pid in "${PP_PIDS[@]}"; do wait "$pid"; done
  } 3>&2 2>/dev/null
  for ((i = ${#PP_ON_EXIT[@]} - 1; i >= 0; i--)); do
    eval "${PP_ON_EXIT[i]}" >/dev/null 2>&1
  done
  if [[ -n ${PP_TMP:-} && -d $PP_TMP ]]; then
    if [[ -n ${PP_KEEP:-} ]]; then
      echo "logs kept in $PP_TMP" >&2
    else
      rm -rf "$PP_TMP"
    fi
  fi
  exit "$rc"
}

# pp_fail MESSAGE: counts a failure and goes on (returns 0, so that set -e
# does not end the test at its first failure).
pp_fail() {
  echo "FAIL: $*"
  PP_FAILS=$((PP_FAILS + 1))
}

# pp_finish: the test's exit, 0 when nothing failed.
pp_finish() {
  if ((PP_FAILS)); then
    echo "$PP_FAILS check(s) failed"
    exit 1
  fi
  echo "all checks passed"
  exit 0
}

# pp_alive PID: the process exists and is not a zombie.
pp_alive() {
  local stat
  kill -0 "$1" 2>/dev/null || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat%% *} != Z ]]
}

# pp_start NAME CMD...: runs CMD in the background, stdout to
# $PP_TMP/NAME.out and stderr to $PP_TMP/NAME.err; PP_PID is its PID.
pp_start() {
  local name=$1
  shift
  "$@" >"$PP_TMP/$name.out" 2>"$PP_TMP/$name.err" </dev/null &
  PP_PID=$!
  PP_PIDS+=("$PP_PID")
}

# pp_wait_exit PID SECONDS: waits up to SECONDS for PID to exit. Returns 0
# when it did, with its exit status in PP_RC; 1 when it is still running.
# Either way PP_WAITED_MS is how long this waited.
pp_wait_exit() {
  local pid=$1 limit_us=$(($2 * 1000000)) start now
  start=$(pp_now_us)
  while pp_alive "$pid"; do
    now=$(pp_now_us)
    if ((now - start >= limit_us)); then
      PP_WAITED_MS=$(((now - start) / 1000))
      return 1
    fi
    sleep 0.02
  done
  now=$(pp_now_us)
  PP_WAITED_MS=$(((now - start) / 1000))
  PP_RC=0
  wait "$pid" || PP_RC=$?
  return 0
} 2>/dev/null  # with bash's "PID Killed ..." notices: PP_RC says it

# pp_kill PID: SIGKILL and reap (bounded).
pp_kill() {
  kill -9 "$1" 2>/dev/null || true
  pp_wait_exit "$1" 10 || true
}

# pp_wait_output FILE TEXT SECONDS PID: waits until FILE holds the fixed
# string TEXT. Returns 0 when it does, 1 on timeout, 2 when PID exited
# without writing it.
pp_wait_output() {
  local file=$1 text=$2 limit_us=$(($3 * 1000000)) pid=$4 start
  start=$(pp_now_us)
  until grep -qF -- "$text" "$file" 2>/dev/null; do
    if ! pp_alive "$pid"; then
      grep -qF -- "$text" "$file" 2>/dev/null && return 0
      return 2
    fi
    (($(pp_now_us) - start < limit_us)) || return 1
    sleep 0.02
  done
} 2>/dev/null

# pp_tcp_listening PORT: some socket (IPv4 or IPv6) listens on TCP PORT.
pp_tcp_listening() {
  [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
}

# pp_programs_addresses PORT_BASE: a run's own addresses and ports, so that
# parallel runs do not meet: ip_a=127.X.Y.1 and ip_b=127.X.Y.2 (all of
# 127/8 is on lo; X >= 20 keeps clear of the other tests' 127.0.0.x; Y >= 1:
# LIDs (Y << 8 | 1, 2) are not 0), and 64 TCP ports from PORT_BASE plus the
# PID's share, handed out by pp_next_port. SRDMA_TEST_NET (say 127.215)
# fixes 127.X for a run that must stay in a range of its own.
pp_programs_addresses() {
  net=${SRDMA_TEST_NET:-127.$((RANDOM % 200 + 20))}.$(($$ % 250 + 1))
  ip_a=$net.1
  ip_b=$net.2
  port_base=$(($1 + ($$ % 500) * 64))
  port_next=0
}

# pp_next_port: sets PORT to the next of the run's ports that nothing
# listens on.
pp_next_port() {
  local i
  for ((i = 0; i < 64; i++)); do
    PORT=$((port_base + port_next % 64))
    port_next=$((port_next + 1))
    pp_tcp_listening "$PORT" || return 0
  done
  pp_fail "no free TCP port in $port_base..$((port_base + 63))"
  return 1
}

# pp_wait_listen PORT SECONDS PID: waits until TCP PORT is listened on.
# Returns 0 when it is, 1 on timeout, 2 when PID exited first.
pp_wait_listen() {
  local port=$1 limit_us=$(($2 * 1000000)) pid=$3 start
  start=$(pp_now_us)
  until pp_tcp_listening "$port"; do
    pp_alive "$pid" || return 2
    (($(pp_now_us) - start < limit_us)) || return 1
    sleep 0.02
  done
}

# pp_show NAME: the tails of a process's output, for a failure's context.
pp_show() {
  local f
  for f in "$PP_TMP/$1.out" "$PP_TMP/$1.err"; do
    [[ -s $f ]] || continue
    echo "  --- ${f##*/} (last lines)"
    tail -n 15 "$f" | sed 's/^/  | /'
  done
}

# pp_sanitizer_clean NAME: no sanitizer report in the process's stderr.
pp_sanitizer_clean() {
  if grep -qE 'ERROR: (Address|Leak|Undefined|Memory)Sanitizer|WARNING: ThreadSanitizer|SUMMARY: [A-Za-z]+Sanitizer|runtime error:' \
    "$PP_TMP/$1.err" 2>/dev/null; then
    pp_fail "$1: a sanitizer report on stderr"
    pp_show "$1"
    return 1
  fi
}

# pp_run NAME SECONDS CMD...: runs CMD to completion, at most SECONDS (then
# SIGKILL, PP_RC=124 and a "hang" failure). PP_RC is its exit status,
# PP_WAITED_MS how long it ran.
pp_run() {
  local name=$1 limit=$2
  shift 2
  pp_start "$name" "$@"
  local pid=$PP_PID
  if ! pp_wait_exit "$pid" "$limit"; then
    pp_kill "$pid"
    PP_RC=124
    pp_fail "$name: still running after ${limit}s (hang): $*"
    pp_show "$name"
    return 1
  fi
}

# pp_start_server NAME [--listen PORT] CMD...: starts a server and waits
# (PP_READY_S) for its "waiting for a client" line, or with --listen until
# TCP PORT is listened on (a program that prints no such line; PORT must be
# free before). PP_SERVER_PID is its PID. Returns non-zero (after a failure)
# if it exits or stays silent.
pp_start_server() {
  local name=$1 r=0 port="" late before
  shift
  if [[ ${1:-} == --listen ]]; then
    port=$2
    shift 2
  fi
  pp_start "$name" "$@"
  PP_SERVER_PID=$PP_PID
  if [[ -n $port ]]; then
    late="not listening on TCP port $port" before="listening on TCP port $port"
    pp_wait_listen "$port" "$PP_READY_S" "$PP_SERVER_PID" || r=$?
  else
    late="no 'waiting for a client' line" before="waiting for a client"
    pp_wait_output "$PP_TMP/$name.out" "waiting for a client" "$PP_READY_S" "$PP_SERVER_PID" || r=$?
  fi
  case $r in
    0) return 0 ;;
    1) pp_fail "$name: $late within ${PP_READY_S}s: $*" ;;
    *)
      PP_RC=0
      wait "$PP_SERVER_PID" 2>/dev/null || PP_RC=$?
      pp_fail "$name: exited with status $PP_RC before $before: $*"
      ;;
  esac
  pp_show "$name"
  pp_kill "$PP_SERVER_PID"
  return 1
}

# pp_pair NAME SECONDS [--listen PORT] SERVER-CMD... :: CLIENT-CMD...: a
# server (ready as pp_start_server says), then its client (at most SECONDS),
# then the server's exit (at most PP_SERVER_EXIT_S). Sets PP_CLIENT_RC,
# PP_SERVER_RC (124: killed, hung) and PP_CLIENT_MS. Returns 0 when both
# exited 0 without sanitizer reports; otherwise reports the failure and
# returns 1.
pp_pair() {
  local name=$1 limit=$2
  shift 2
  local -a srv=()
  if [[ ${1:-} == --listen ]]; then
    srv=(--listen "$2")
    shift 2
  fi
  while (($#)) && [[ $1 != :: ]]; do
    srv+=("$1")
    shift
  done
  (($#)) && shift
  PP_CLIENT_RC=124 PP_SERVER_RC=124 PP_CLIENT_MS=0
  pp_start_server "$name.server" "${srv[@]}" || return 1
  local spid=$PP_SERVER_PID ok=0
  pp_run "$name.client" "$limit" "$@" || ok=1
  PP_CLIENT_RC=$PP_RC PP_CLIENT_MS=$PP_WAITED_MS
  if pp_wait_exit "$spid" "$PP_SERVER_EXIT_S"; then
    PP_SERVER_RC=$PP_RC
  else
    pp_kill "$spid"
    pp_fail "$name: the server was still running ${PP_SERVER_EXIT_S}s after its client exited (status $PP_CLIENT_RC)"
    ok=1
  fi
  if ((PP_CLIENT_RC != 0 || PP_SERVER_RC != 0)); then
    ((PP_CLIENT_RC == 124 || PP_SERVER_RC == 124)) ||
      pp_fail "$name: client exited $PP_CLIENT_RC, server exited $PP_SERVER_RC"
    pp_show "$name.server"
    pp_show "$name.client"
    ok=1
  fi
  pp_sanitizer_clean "$name.server" || ok=1
  pp_sanitizer_clean "$name.client" || ok=1
  return $ok
}

# pp_json_values FILE KEY: every number written as "KEY": N in FILE (the
# tool pretty-prints its JSON, one member per line), one a line.
pp_json_values() {
  grep -oE "\"$2\": *-?[0-9][0-9.eE+-]*" "$1" 2>/dev/null | sed -E 's/.*: *//'
}

# pp_json_sum FILE KEY: the sum of every integer "KEY" in FILE (0 if none).
pp_json_sum() {
  local v sum=0
  while read -r v; do
    [[ $v =~ ^[0-9]+$ ]] && sum=$((sum + v))
  done < <(pp_json_values "$1" "$2")
  echo "$sum"
}

# pp_json_strings FILE KEY: every string written as "KEY": "S" in FILE.
pp_json_strings() {
  grep -oE "\"$2\": *\"[^\"]*\"" "$1" 2>/dev/null | sed -E 's/^[^:]*: *"//; s/"$//'
}
