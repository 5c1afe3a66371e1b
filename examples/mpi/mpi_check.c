/*
 * mpi_check: an MPI program of our own whose every result is checked, run
 * by Open MPI over UCX on softrdma (tests/mpi_programs_test.sh).
 *
 *  - ping-pong between rank 0 and rank 1 at 8 B .. 1 MiB: each message
 *    carries a pattern of its size, iteration and sender, checked on
 *    arrival both ways;
 *  - MPI_Allreduce (sum of doubles and max of ints, 1 .. 64 Ki elements)
 *    whose results every rank checks against the closed form;
 *  - MPI_Bcast of a 1 MiB buffer from the last rank, and a barrier.
 *
 * Prints one line per check on rank 0 and exits non-zero on any mismatch.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, size, failures;

static void check(int ok, const char *what) {
  int all = 0, mine = ok ? 0 : 1;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("%s: %s (%d of %d ranks failed)\n", all ? "FAIL" : "ok", what, all, size);
  if (all) failures++;
}

static unsigned char pattern(size_t i, int iter, int from) { return (unsigned char)(i * 31 + iter * 7 + from * 101 + 1); }

static void fill(unsigned char *b, size_t n, int iter, int from) {
  for (size_t i = 0; i < n; i++) b[i] = pattern(i, iter, from);
}

static int same(const unsigned char *b, size_t n, int iter, int from) {
  for (size_t i = 0; i < n; i++)
    if (b[i] != pattern(i, iter, from)) return 0;
  return 1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) {
    fprintf(stderr, "mpi_check needs at least 2 ranks\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  enum { MAX = 1 << 20, ITERS = 20 };
  unsigned char *buf = malloc(MAX);
  if (!buf) MPI_Abort(MPI_COMM_WORLD, 2);

  /* Ping-pong, rank 0 <-> rank 1. */
  static const size_t sizes[] = {8, 64, 512, 4096, 32768, 262144, MAX};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    const size_t n = sizes[k];
    int ok = 1;
    double t0 = MPI_Wtime();
    for (int it = 0; it < ITERS && rank < 2; it++) {
      if (rank == 0) {
        fill(buf, n, it, 0);
        MPI_Send(buf, (int)n, MPI_BYTE, 1, it, MPI_COMM_WORLD);
        memset(buf, 0, n);
        MPI_Recv(buf, (int)n, MPI_BYTE, 1, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        ok &= same(buf, n, it, 1);
      } else {
        memset(buf, 0, n);
        MPI_Status st;
        MPI_Recv(buf, (int)n, MPI_BYTE, 0, it, MPI_COMM_WORLD, &st);
        int got = 0;
        MPI_Get_count(&st, MPI_BYTE, &got);
        ok &= got == (int)n && same(buf, n, it, 0);
        fill(buf, n, it, 1);
        MPI_Send(buf, (int)n, MPI_BYTE, 0, it, MPI_COMM_WORLD);
      }
    }
    double us = (MPI_Wtime() - t0) * 1e6 / (2.0 * ITERS);
    char what[120];
    snprintf(what, sizeof what, "ping-pong %zu B x %d, data checked both ways (%.1f us one way)", n, ITERS, us);
    check(ok, what);
  }

  /* Allreduce: sum of doubles, max of ints. */
  for (int n = 1; n <= (64 << 10); n *= 16) {
    double *d = malloc(sizeof(double) * (size_t)n), *dsum = malloc(sizeof(double) * (size_t)n);
    int *v = malloc(sizeof(int) * (size_t)n), *vmax = malloc(sizeof(int) * (size_t)n);
    if (!d || !dsum || !v || !vmax) MPI_Abort(MPI_COMM_WORLD, 2);
    for (int i = 0; i < n; i++) {
      d[i] = rank + 1 + i * 0.5; /* small integers and halves: exact in any order */
      v[i] = (i * 7 + rank * 13) % 1000;
    }
    MPI_Allreduce(d, dsum, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(v, vmax, n, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int ok = 1;
    for (int i = 0; i < n; i++) {
      double want = size * (size + 1) / 2.0 + size * i * 0.5;
      int wmax = 0;
      for (int r = 0; r < size; r++) {
        int x = (i * 7 + r * 13) % 1000;
        if (x > wmax) wmax = x;
      }
      ok &= dsum[i] == want && vmax[i] == wmax;
    }
    char what[120];
    snprintf(what, sizeof what, "allreduce of %d doubles (sum) and ints (max): every element right", n);
    check(ok, what);
    free(d);
    free(dsum);
    free(v);
    free(vmax);
  }

  /* Broadcast from the last rank. */
  if (rank == size - 1) fill(buf, MAX, 3, size - 1);
  else memset(buf, 0, MAX);
  MPI_Bcast(buf, MAX, MPI_BYTE, size - 1, MPI_COMM_WORLD);
  check(same(buf, MAX, 3, size - 1), "bcast of 1 MiB from the last rank");
  MPI_Barrier(MPI_COMM_WORLD);
  free(buf);
  if (rank == 0) printf("%s: %d check(s) failed on %d ranks\n", failures ? "FAIL" : "ok", failures, size);
  MPI_Finalize();
  return failures ? 1 : 0;
}
