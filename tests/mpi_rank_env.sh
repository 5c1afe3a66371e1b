#!/bin/sh
# An MPI launcher's per-rank wrapper for softrdma today: each rank's device
# gets an address of its own, SRDMA_NET.<rank + 1> (until one address
# serves many processes). Open MPI names the rank in OMPI_COMM_WORLD_RANK,
# MPICH's hydra in PMI_RANK.
#   mpi_rank_env.sh PROGRAM [ARGS...]   (SRDMA_NET=127.x.y in the environment)
: "${SRDMA_NET:?set SRDMA_NET, e.g. 127.211.1}"
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-}}
[ -n "$rank" ] || { echo "mpi_rank_env.sh: no rank (not started by mpirun)" >&2; exit 2; }
SRDMA_ADDR=$SRDMA_NET.$((rank + 1))
export SRDMA_ADDR
exec "$@"
