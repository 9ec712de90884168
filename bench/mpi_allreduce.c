/* OpenMPI peer for bench/allreduce.sh: all-reduce bus bandwidth of
 * MPI_Allreduce(MPI_SUM, MPI_FLOAT) in place, between the ranks mpirun
 * starts, measured exactly as bench_allreduce measures our ring. Per size of
 * float32:
 *   - one all-reduce of known values (rank r contributes (i % 1024) + r at
 *     element i, so every sum is an exact integer in float32), checked on
 *     every rank;
 *   - one more, timed, to pick K so the size runs for about --seconds (at
 *     least 3; the slowest rank's time via MPI_MAX, so all agree);
 *   - the buffer zeroed, MPI_Barrier, K timed all-reduces, and the slowest
 *     rank's elapsed time (MPI_MAX) is the time of K operations.
 * Rank 0 prints one JSON line per (n, size):
 *   {"impl":"openmpi","n":N,"bytes":B,"iters":K,"seconds_per_op":t,
 *    "algbw_gbps":B/t/1e9,"busbw_gbps":algbw*2*(N-1)/N}
 * A wrong sum prints "error: ..." and aborts with exit code 1.
 *
 * Built by bench/allreduce.sh (mpicc -O2) into the build directory; run as
 *   mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self \
 *     --mca btl_tcp_if_include lo -np N mpi_allreduce [--sizes-mib 1,4,16,64]
 *     [--seconds 1.0] [--max-iters 100000]
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double Slowest(double seconds) {
  double worst = 0;
  MPI_Allreduce(&seconds, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char* sizes = "1,4,16,64";
  double seconds = 1.0;
  long max_iters = 100000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--sizes-mib") == 0) {
      sizes = argv[i + 1];
    } else if (strcmp(argv[i], "--seconds") == 0) {
      seconds = atof(argv[i + 1]);
    } else if (strcmp(argv[i], "--max-iters") == 0) {
      max_iters = atol(argv[i + 1]);
    } else {
      if (rank == 0) fprintf(stderr, "mpi_allreduce: unknown argument %s\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  if (max_iters < 3) max_iters = 3;

  /* Warm-up: connections and buffers. */
  {
    const int count = 1 << 18;
    float* w = calloc((size_t)count, sizeof(float));
    for (int i = 0; i < 3; ++i) MPI_Allreduce(MPI_IN_PLACE, w, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    free(w);
  }

  const char* p = sizes;
  while (*p) {
    char* end = NULL;
    const long mib = strtol(p, &end, 10);
    if (end == p || mib <= 0 || (*end != ',' && *end != '\0')) {
      if (rank == 0) fprintf(stderr, "mpi_allreduce: bad --sizes-mib %s\n", sizes);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    p = *end == ',' ? end + 1 : end;
    const long count = mib * (1L << 20) / (long)sizeof(float);
    const size_t bytes = (size_t)count * sizeof(float);
    float* d = malloc(bytes);
    if (!d) MPI_Abort(MPI_COMM_WORLD, 1);

    for (long i = 0; i < count; ++i) d[i] = (float)((i % 1024) + rank);
    MPI_Allreduce(MPI_IN_PLACE, d, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const long ranks_sum = (long)n * (n - 1) / 2;
    for (long i = 0; i < count; ++i) {
      const float want = (float)((long)n * (i % 1024) + ranks_sum);
      if (d[i] != want) {
        printf("error: wrong all-reduce result on rank %d at element %ld of %ld: got %g, want %g\n", rank, i, count,
               (double)d[i], (double)want);
        fflush(stdout);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }

    memset(d, 0, bytes);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, d, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double one = Slowest(MPI_Wtime() - t0);
    long iters = (long)ceil(seconds / (one > 1e-6 ? one : 1e-6));
    if (iters < 3) iters = 3;
    if (iters > max_iters) iters = max_iters;

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (long k = 0; k < iters; ++k) MPI_Allreduce(MPI_IN_PLACE, d, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double total = Slowest(MPI_Wtime() - t0);

    if (rank == 0) {
      const double per_op = total / (double)iters;
      const double algbw = (double)bytes / per_op / 1e9;
      printf("{\"impl\":\"openmpi\",\"n\":%d,\"bytes\":%zu,\"iters\":%ld,\"seconds_per_op\":%.9g,"
             "\"algbw_gbps\":%.6g,\"busbw_gbps\":%.6g}\n",
             n, bytes, iters, per_op, algbw, algbw * 2.0 * (n - 1) / n);
      fflush(stdout);
    }
    free(d);
  }
  MPI_Finalize();
  return 0;
}
