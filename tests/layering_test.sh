#!/usr/bin/env bash
# The layers' include rules that the build's include roots cannot see:
# include/srdma holds both the verbs core's API and the vocabulary every
# layer speaks (status, access flags, work requests and completions, ...).
# The device layers (common, alloc, hca) and the NVMe-oF foundation may use
# only the vocabulary; the core's API (devices, PDs, MRs, CQs, QPs, pools)
# is for the core and above. Exits non-zero naming every violation.
set -euo pipefail
src=${1:?usage: layering_test.sh SRC_DIR}
vocabulary='access|async_event|counters|impair|net|poll_context|profile|qp_attr|status|translation|usage|wc|wr'
lower=("$src/common" "$src/alloc" "$src/hca")
nvmf_base=$(ls "$src"/nvmf/{status,capsule,capsule_parser,namespace,ram_namespace,file_namespace,subsystem,wire,block_io}.* 2>/dev/null)
bad=0
check() {  # pattern, what, files...
  local pattern=$1 what=$2
  shift 2
  if grep -nE "$pattern" "$@"; then
    echo "layering: $what" >&2
    bad=1
  fi
}
for f in $(find "${lower[@]}" -name '*.h' -o -name '*.cc') $nvmf_base; do
  if grep -nE '#include "srdma/' "$f" | grep -vE "\"srdma/($vocabulary)\.h\"" ; then
    echo "layering: $f includes a verbs-core API header" >&2
    bad=1
  fi
done
check '#include "(core|nvmf|tools)/' "the device layers include a higher layer" $(find "${lower[@]}" -name '*.h' -o -name '*.cc')
check '#include "(hca|core|tools)/' "the NVMe-oF foundation includes an RDMA layer" $nvmf_base
# The issue's own check, verbatim.
check '#include "core|srdma/mr.h' "src/hca includes a core header" -r "$src/hca"
if ((bad)); then exit 1; fi
echo "layering: ok"
