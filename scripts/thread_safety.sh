#!/usr/bin/env bash
# Clang's thread-safety analysis (-Wthread-safety) over the transport
# (src/hca): every field a lock guards (GUARDED_BY) is touched only with
# it held, every function that needs a lock (REQUIRES) is called with it.
#   scripts/thread_safety.sh [build-dir]   (default build/debug: its
#                                           compile_commands.json)
# Syntax only, with clang 16 over the flags GCC builds with. libstdc++
# 12's <expected> asks for __cpp_concepts 202002, which clang 16 meets
# but does not announce: the script announces it.
# -Wno-thread-safety-precise: a role reaches its QP's lock through a
# reference (sq_mutex(qp_)), which clang cannot prove is the lock the QP
# holds when it calls the role; the imprecise check (some lock of that
# name is held) still runs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/debug}
clang=${CLANGXX:-clang++-16}
command -v "$clang" >/dev/null || { echo "thread_safety.sh: $clang not found (apt-get install clang-16)" >&2; exit 1; }
python3 - "$build/compile_commands.json" "$clang" <<'PY' | xargs -0 -P "$(nproc)" -n 1 bash -c
import json, shlex, sys
entries = json.load(open(sys.argv[1]))
flags = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety-analysis", "-Werror=thread-safety-attributes",
         "-Werror=thread-safety-reference", "-Wno-thread-safety-precise",
         "-U__cpp_concepts", "-D__cpp_concepts=202002L", "-Wno-builtin-macro-redefined"]
for e in entries:
    f = e["file"]
    if "/src/hca/" not in f:
        continue
    args = shlex.split(e["command"])[1:]
    keep, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = True
            continue
        if a.startswith("-std="):
            a = "-std=c++2b"
        if a.startswith("-W") or a.startswith("-g") or a.startswith("-O") or a.startswith("-f"):
            continue
        keep.append(a)
    cmd = [sys.argv[2]] + keep + flags + [f]
    sys.stdout.write("cd " + shlex.quote(e["directory"]) + " && " + shlex.join(cmd) + "\0")
PY
echo "thread safety: src/hca clean"
