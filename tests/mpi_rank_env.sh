#!/bin/sh
# mpirun's per-rank launcher for softrdma today: each rank's device gets
# an address of its own, SRDMA_NET.<rank + 1> (until one address serves
# many processes). Open MPI names the rank in OMPI_COMM_WORLD_RANK.
#   mpi_rank_env.sh PROGRAM [ARGS...]   (SRDMA_NET=127.x.y in the environment)
: "${SRDMA_NET:?set SRDMA_NET, e.g. 127.211.1}"
: "${OMPI_COMM_WORLD_RANK:?not started by Open MPI's mpirun}"
SRDMA_ADDR=$SRDMA_NET.$((OMPI_COMM_WORLD_RANK + 1))
export SRDMA_ADDR
exec "$@"
