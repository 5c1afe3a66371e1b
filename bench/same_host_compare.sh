#!/usr/bin/env bash
# same_host_compare.sh: bench/wire_compare.sh's measurements between two
# processes of one host through the same-host path (shared-memory rings,
# SRDMA_SAME_HOST=1), against UCX over its shared-memory transports
# (UCX_TLS=sm,self unless UCX_TLS_USE says otherwise). Options and
# environment as wire_compare.sh's; targets: write_bw >= 1.0x ucp_put_bw,
# send_lat <= 1.5x ucp_am_lat.
exec env PATH_UNDER_TEST=same_host "$(dirname "${BASH_SOURCE[0]}")/wire_compare.sh" "$@"
