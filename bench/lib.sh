# shellcheck shell=bash disable=SC2034
# bench/lib.sh: what bench/wire_compare.sh and bench/verbs_compare.sh share.
# Sourced, not run, by a script under `set -u -o pipefail`.
#
# Expects:  NAME, the script's name (say's prefix, the usage errors' prefix).
# Sets on sourcing:  ROUNDS and TRIES (from the environment, default 3),
#   KEEP=0, FAILED_ANY=0, PIDS=(), WORK="", the maps VAL[key,round],
#   NOTE[key,round], MEDV[key], the list FAILS, run_pair's knobs WHY_LABEL=0
#   and CLOG_SKIP="", and the EXIT/INT/TERM traps (cleanup: kill PIDS, remove
#   WORK unless KEEP or FAILED_ANY).
# The script then sets WORK (its logs directory), MEAS (its measurements, each
#   run as m_MEAS ROUND TRY, which sets WHY and fails, or fills VAL) and
#   KEYS[MEAS] (MEAS's result keys), and may redefine need_tool (and NEED_WHY).
#
# Offers:
#   parse_opts "$@"      -r ROUNDS, -k (KEEP=1), -h; checks ROUNDS and TRIES
#   say MSG..., now_ns
#   alive PID, wait_exit PID SECONDS (sets WRC, WKILLED)
#   hexport, hexip4, port_in_use, pid_has_inode, listening_by,
#   udp_bound_inodes, wait_ready, next_port (sets PORT),
#   pick_addr_pair (sets IP_A, IP_B)
#   is_num, json_get, calc, median
#   record_fail, run_pair, wait_udp_free, with_tries,
#   run_rounds (sets START, LOAD0, LOAD1), row (sets MEDV)
#   build_rel_if_missing (needs ROOT, SRDMA, VERBS_LIB, WORK)
# Helpers that fail say why in WHY. (SC2034 is off: the variables set here
# are read by the scripts.)

ROUNDS=${ROUNDS:-3}
TRIES=${TRIES:-3}
KEEP=0

usage() { sed -n '2,/^$/{s/^# \{0,1\}//;p}' "$0" >&2; exit 2; }
parse_opts() {
  local opt OPTIND=1
  while getopts "r:kh" opt; do
    case $opt in
      r) ROUNDS=$OPTARG ;;
      k) KEEP=1 ;;
      *) usage ;;
    esac
  done
  [[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "$NAME: -r/ROUNDS must be a positive integer, not '$ROUNDS'" >&2; exit 2; }
  [[ $TRIES =~ ^[1-9][0-9]*$ ]] || { echo "$NAME: TRIES must be a positive integer" >&2; exit 2; }
}

say() { printf '[%s %s] %s\n' "$NAME" "$(date +%T)" "$*" >&2; }
now_ns() { date +%s%N; }

# ---------------------------------------------------------------- processes
PIDS=()
WORK=""
FAILED_ANY=0
alive() {  # a live, unreaped, non-zombie process
  local st
  [[ -r /proc/$1/stat ]] || return 1
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [[ -n $st && $st != Z && $st != X ]]
}
cleanup() {
  local p live=()
  for p in "${PIDS[@]}"; do alive "$p" && { kill -TERM "$p" 2>/dev/null; live+=("$p"); }; done
  if ((${#live[@]})); then
    local i
    for ((i = 0; i < 30; i++)); do
      local any=0
      for p in "${live[@]}"; do alive "$p" && any=1; done
      ((any)) || break
      sleep 0.1
    done
    for p in "${live[@]}"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
  fi
  if [[ -n $WORK && -d $WORK ]]; then
    if ((KEEP || FAILED_ANY)); then say "logs kept in $WORK"; else rm -rf "$WORK"; fi
  fi
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

# wait_exit PID SECONDS: wait for PID to end (killing it after SECONDS);
# sets WRC (its exit status) and WKILLED (1 when we had to kill it).
wait_exit() {
  local pid=$1 deadline=$(($(now_ns) + $2 * 1000000000)) i
  WKILLED=0
  while alive "$pid" && (($(now_ns) < deadline)); do sleep 0.05; done
  if alive "$pid"; then
    WKILLED=1
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < 40; i++)); do alive "$pid" || break; sleep 0.05; done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  WRC=$?
}

# ---------------------------------------------------------------- sockets
hexport() { printf '%04X' "$1"; }
# hexip4 A.B.C.D: the address as /proc/net/{tcp,udp} print it (host order, x86)
hexip4() { local IFS=.; set -- $1; printf '%02X%02X%02X%02X' "$4" "$3" "$2" "$1"; }
# port_in_use PORT: any TCP or UDP socket (v4 or v6) bound to PORT
port_in_use() {
  local h; h=$(hexport "$1")
  awk -v h=":$h" 'FNR > 1 && substr($2, length($2) - 4) == h { f = 1 } END { exit !f }' \
    /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6 2>/dev/null
}
# pid_has_inode PID INODE
pid_has_inode() {
  local fd
  for fd in /proc/$1/fd/*; do
    [[ $(readlink "$fd" 2>/dev/null) == "socket:[$2]" ]] && return 0
  done
  return 1
}
# listening_by PID PORT: PID holds a TCP socket listening on PORT
listening_by() {
  local h ino; h=$(hexport "$2")
  for ino in $(awk -v h=":$h" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == h { print $10 }' \
                 /proc/net/tcp /proc/net/tcp6 2>/dev/null); do
    pid_has_inode "$1" "$ino" && return 0
  done
  return 1
}
# udp_bound_inodes IP PORT
udp_bound_inodes() {
  awk -v a="$(hexip4 "$1"):$(hexport "$2")" 'FNR > 1 && $2 == a { print $10 }' /proc/net/udp 2>/dev/null
}
# wait_ready PID KIND ARG LOG SECONDS: KIND "line" (ARG: a regex that the
# server's LOG must show) or "listen" (ARG: the TCP port PID must listen on).
# Polls every 20 ms; fails when PID ends or SECONDS pass. Sets WHY on failure.
wait_ready() {
  local pid=$1 kind=$2 arg=$3 log=$4 deadline=$(($(now_ns) + $5 * 1000000000))
  WHY=""
  while (($(now_ns) < deadline)); do
    if ! alive "$pid"; then
      wait "$pid" 2>/dev/null; WHY="server exited (status $?) before it was ready: $(tail -n 3 "$log" | tr '\n' ' ')"
      return 1
    fi
    case $kind in
      line) grep -qE "$arg" "$log" 2>/dev/null && return 0 ;;
      listen) listening_by "$pid" "$arg" && return 0 ;;
    esac
    sleep 0.02
  done
  WHY="server not ready after $5 s ($kind $arg): $(tail -n 3 "$log" | tr '\n' ' ')"
  return 1
}

# Ports: a block of our own from $$, skipping any that is bound.
PORT_BASE=$((10000 + ($$ % 680) * 32))
PORT_SEQ=0
next_port() {
  local p i
  for ((i = 0; i < 1000; i++)); do
    p=$((PORT_BASE + PORT_SEQ)); PORT_SEQ=$((PORT_SEQ + 1))
    ((p > 32000)) && { PORT_BASE=10000; PORT_SEQ=0; continue; }
    port_in_use "$p" || { PORT=$p; return 0; }
  done
  return 1
}

# pick_addr_pair: IP_A=127.X.Y.1 (servers) and IP_B=127.X.Y.2 (clients), a
# pair of this run's own (tests bind 127.0.0.x:4791, and LIDs in the
# library's /16 must not be 0).
pick_addr_pair() {
  local net=127.$((RANDOM % 200 + 20)).$(($$ % 250 + 1))
  IP_A=$net.1
  IP_B=$net.2
}

# ---------------------------------------------------------------- numbers
is_num() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; }
# json_get FILE PATH (jq syntax: .a.b[0].c); prints the value, fails on null/missing
json_get() {
  local v
  if command -v jq >/dev/null 2>&1; then
    v=$(jq -er "$2" "$1" 2>/dev/null) || return 1
  else
    local py; py=$(sed -E 's/\.([A-Za-z_][A-Za-z0-9_]*)/["\1"]/g' <<<"$2")
    v=$(python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
try: v = eval("d" + sys.argv[2])
except Exception: sys.exit(1)
if v is None: sys.exit(1)
print(v)' "$1" "$py" 2>/dev/null) || return 1
  fi
  [[ -n $v && $v != null ]] || return 1
  printf '%s\n' "$v"
}
calc() { awk "BEGIN { printf \"%.10g\", $* }"; }
median() {  # values as arguments
  (($#)) || return 1
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%.10g", v[(NR + 1) / 2]; else printf "%.10g", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ---------------------------------------------------------------- results
declare -gA VAL   # VAL[key,round] = number
declare -gA NOTE  # NOTE[key,round] = extra facts of that run
declare -gA MEDV  # MEDV[key] = the median that row printed
FAILS=()
record_fail() {  # key round reason
  FAILS+=("round $2, $1: $3")
  FAILED_ANY=1
  say "round $2: $1 MISSING: $3"
}

# run_pair LABEL READY_KIND READY_ARG CLIENT_TIMEOUT: runs the server SCMD
# (array) into $SLOG, waits until it is ready, runs the client CCMD into $CLOG
# under a timeout, then waits for the server. Sets WHY on failure: with
# WHY_LABEL=1 it starts "LABEL: ", and the client's log lines that match the
# grep regex CLOG_SKIP (when set) are left out of it.
WHY_LABEL=0
CLOG_SKIP=""
run_pair() {
  local label=$1 kind=$2 arg=$3 ct=$4 spid cpid crc pre=""
  ((WHY_LABEL)) && pre="$label: "
  WHY=""
  "${SCMD[@]}" >"$SLOG" 2>&1 </dev/null &
  spid=$!; PIDS+=("$spid")
  if ! wait_ready "$spid" "$kind" "$arg" "$SLOG" 20; then
    wait_exit "$spid" 0
    return 1
  fi
  timeout -k 5 "$ct" "${CCMD[@]}" >"$CLOG" 2>&1 </dev/null &
  cpid=$!; PIDS+=("$cpid")
  wait "$cpid"; crc=$?
  # A server whose client failed may wait for it forever: give it 2 s then.
  wait_exit "$spid" $((crc == 0 ? 15 : 2))
  if ((crc != 0)); then
    local t="" tl; ((crc == 124 || crc == 137)) && t=" (timed out after ${ct} s)"
    if [[ -n $CLOG_SKIP ]]; then tl=$(grep -v -- "$CLOG_SKIP" "$CLOG" | tail -n 3 | tr '\n' ' ')
    else tl=$(tail -n 3 "$CLOG" | tr '\n' ' '); fi
    WHY="${pre}client exit status $crc$t: $tl"
    ((WKILLED)) && WHY+="; server killed after the client ended"
    return 1
  fi
  if ((WKILLED)); then
    WHY="${pre}server still running 15 s after its client succeeded; killed: $(tail -n 3 "$SLOG" | tr '\n' ' ')"
    return 1
  fi
  if ((WRC != 0)); then
    WHY="${pre}server exit status $WRC: $(tail -n 3 "$SLOG" | tr '\n' ' ')"
    return 1
  fi
  return 0
}

# srdma's RoCEv2 devices bind UDP 4791 on their address: wait (bounded) while
# another program (a previous run's process) still holds one of ours.
wait_udp_free() {
  local ip deadline=$(($(now_ns) + 30 * 1000000000)) busy
  while :; do
    busy=""
    for ip in "$@"; do [[ -n $(udp_bound_inodes "$ip" 4791) ]] && busy+=" $ip:4791"; done
    [[ -z $busy ]] && return 0
    (($(now_ns) >= deadline)) && { WHY="UDP$busy still bound by another program after 30 s"; return 1; }
    sleep 0.2
  done
}

# with_tries KEY ROUND FUNC: FUNC sets WHY and fails, or succeeds
with_tries() {
  local key=$1 r=$2 fn=$3 t
  for ((t = 1; t <= TRIES; t++)); do
    if "$fn" "$r" "$t"; then
      ((t > 1)) && NOTE[$key,$r]+="${NOTE[$key,$r]:+; }succeeded at attempt $t"
      return 0
    fi
    if ((t < TRIES)); then say "round $r: $key attempt $t failed: $WHY; retrying"; sleep 1; fi
  done
  WHY+=" (after $TRIES attempts)"
  return 1
}

# need_tool MEAS: fails (with the reason in NEED_WHY) when MEAS cannot run at
# all; then run_rounds records each of its keys missing instead of trying it.
need_tool() { return 0; }
NEED_WHY=""

# run_rounds: each of MEAS once a round through with_tries, ROUNDS rounds, the
# order rotated by one each round; a MEAS that fails has its first key
# recorded missing (its other rows show missing too).
run_rounds() {
  local r j n=${#MEAS[@]} m k keys
  START=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
  LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
  for ((r = 1; r <= ROUNDS; r++)); do
    for ((j = 0; j < n; j++)); do
      m=${MEAS[$(((j + r - 1) % n))]}
      if ! need_tool "$m"; then
        # shellcheck disable=SC2153  # KEYS is the script's
        for k in ${KEYS[$m]}; do record_fail "$k" "$r" "$NEED_WHY"; done
        continue
      fi
      say "round $r/$ROUNDS: $m"
      if ! with_tries "$m" "$r" "m_$m"; then
        read -ra keys <<<"${KEYS[$m]}"
        record_fail "${keys[0]}" "$r" "$WHY"
      fi
    done
  done
  LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)
}

# row KEY TOOL WHAT UNIT FMT: one table row, KEY's value in each round and
# their median (kept in MEDV[KEY] for the ratios)
row() {
  local key=$1 tool=$2 what=$3 unit=$4 fmt=$5 r vals=() cells="" m
  for ((r = 1; r <= ROUNDS; r++)); do
    if [[ -n ${VAL[$key,$r]:-} ]]; then
      vals+=("${VAL[$key,$r]}"); cells+=" $(printf "$fmt" "${VAL[$key,$r]}") |"
    else
      cells+=" missing |"
    fi
  done
  if m=$(median "${vals[@]}"); then
    MEDV[$key]=$m
    m=$(printf "$fmt" "$m"); ((${#vals[@]} < ROUNDS)) && m+=" (of ${#vals[@]})"
  else
    m="missing"
  fi
  printf '| %s | %s |%s %s | %s |\n' "$tool" "$what" "$cells" "$m" "$unit"
}

# ---------------------------------------------------------------- binaries
# build_rel_if_missing: when SRDMA or VERBS_LIB/libibverbs.so.1 is missing
# and they are the defaults (build/rel), configures build/rel (Release) if
# needed and builds what is missing; a missing one named in the environment
# is an error. Exits 2 on failure (logs in WORK).
build_rel_if_missing() {
  local want=()
  [[ -x $SRDMA ]] || want+=(srdma)
  [[ -e $VERBS_LIB/libibverbs.so.1 ]] || want+=(srdma_ibverbs)
  if ((${#want[@]})); then
    if [[ $SRDMA != "$ROOT/build/rel/srdma" || $VERBS_LIB != "$ROOT/build/rel/lib/softrdma" ]]; then
      echo "$NAME: SRDMA=$SRDMA or VERBS_LIB=$VERBS_LIB/libibverbs.so.1 is missing" >&2; exit 2
    fi
    if [[ ! -f $ROOT/build/rel/build.ninja ]]; then
      say "configuring build/rel (Release)"
      cmake -S "$ROOT" -B "$ROOT/build/rel" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$WORK/cmake.log" 2>&1 \
        || { tail -n 20 "$WORK/cmake.log" >&2; echo "$NAME: cmake failed (log: $WORK/cmake.log)" >&2; FAILED_ANY=1; exit 2; }
    fi
    say "building: ninja -C build/rel ${want[*]}"
    ninja -C "$ROOT/build/rel" "${want[@]}" >"$WORK/ninja.log" 2>&1 \
      || { tail -n 20 "$WORK/ninja.log" >&2; echo "$NAME: ninja failed (log: $WORK/ninja.log)" >&2; FAILED_ANY=1; exit 2; }
  fi
}
