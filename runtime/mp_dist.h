/* mp_dist.h - data parallel (TRAINER.md "Data parallel"): the few
 * collective operations the trainer needs, over MPI when the program is
 * built with -DMP_USE_MPI (`mpicc -O3 -DMP_USE_MPI train.c -lm`), and
 * no-ops for one process otherwise: without the define no MPI symbol is
 * referenced and the program is the one-process trainer.
 *
 * What the trainer does with them (mp_train.h, mp_infer.h):
 *   - every rank draws the same epoch permutation (same seed); a step is
 *     N x A micro-batches (A = the train block's accumulate) and rank r
 *     trains on micro-batches r, r + N, r + 2N, ... of them, with the loss
 *     seed S / (N A): one process with accumulate N A sees the same ones;
 *   - one all-reduce (sum) of the flat gradient buffer before unscaling,
 *     so every rank makes the same overflow decision and the same update;
 *   - the step's micro-batch losses in one all-reduce of N A doubles, each
 *     slot written by one rank (x + 0 is exact), summed in micro-batch
 *     order: the logged loss is bit-identical to one process's;
 *   - evaluation: batch j on rank j % N, per-batch sums combined the same
 *     way, so the result is bit-identical to one process's;
 *   - a stop flag (SIGINT / SIGTERM) agreed on before every step;
 *   - mixed_float8's amaxes of a step: the largest over the ranks (one
 *     all-reduce of a float per scale), so the scales are those of one
 *     process (Transformer Engine reduces amaxes across its group too);
 *   - batch-norm running statistics stay per rank (as in PyTorch's DDP);
 *     rank 0's are broadcast before an evaluation, and rank 0 writes them.
 * Only rank 0 writes files (checkpoints, exports, predictions, logs,
 * TensorBoard). An error on any rank prints "rank R: ..." and ends the job
 * with MPI_Abort and the program's exit code, so no rank waits forever in
 * a collective that another will never reach.
 * Invariants: every collective is called by every rank in the same order;
 * buffers larger than INT_MAX elements are reduced in chunks. */
#ifndef MP_DIST_H
#define MP_DIST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "mp_util.h"

typedef struct MpDist {
    int rank, size;             /* this process, of size (1 without MPI) */
    int local;                  /* index on its machine (the CUDA program's GPU) */
    int on;                     /* MPI was initialised */
} MpDist;

/* both parts of a program built in two parts read it (mp_model.h): the
 * CUDA program's loss note asks which micro-batch is this rank's first */
#ifdef MP_PART_MODEL
extern MpDist mp_dist;
#else
MP_STATE MpDist mp_dist = {0, 1, 0, 0};
#endif

#ifdef MP_USE_MPI
#include <limits.h>
#include <mpi.h>

static MP_UNUSED void mp_dist_init(int *argc, char ***argv)
{
    MPI_Comm node;
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        fprintf(stderr, "error: MPI_Init failed (start the program with mpirun)\n");
        exit(1);
    }
    mp_dist.on = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &mp_dist.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mp_dist.size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mp_dist.rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &mp_dist.local);
    MPI_Comm_free(&node);
}

/* Sum over ranks, in place; every rank gets the result. */
static MP_UNUSED void mp_dist_sum_f32(float *buf, int64_t n)
{
    for (int64_t at = 0; mp_dist.size > 1 && at < n; at += INT_MAX)
        MPI_Allreduce(MPI_IN_PLACE, buf + at, (int)(n - at < INT_MAX ? n - at : INT_MAX),
                      MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static MP_UNUSED void mp_dist_sum_f64(double *buf, int64_t n)
{
    for (int64_t at = 0; mp_dist.size > 1 && at < n; at += INT_MAX)
        MPI_Allreduce(MPI_IN_PLACE, buf + at, (int)(n - at < INT_MAX ? n - at : INT_MAX),
                      MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

/* Largest over ranks, in place (mixed_float8's amaxes: no NaN in buf,
 * mp_fp8_observe keeps one as +inf). */
static MP_UNUSED void mp_dist_max_f32(float *buf, int64_t n)
{
    for (int64_t at = 0; mp_dist.size > 1 && at < n; at += INT_MAX)
        MPI_Allreduce(MPI_IN_PLACE, buf + at, (int)(n - at < INT_MAX ? n - at : INT_MAX),
                      MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
}

/* Rank 0's bytes to every rank. */
static MP_UNUSED void mp_dist_bcast(void *buf, int64_t bytes)
{
    for (int64_t at = 0; mp_dist.size > 1 && at < bytes; at += INT_MAX)
        MPI_Bcast((char *)buf + at, (int)(bytes - at < INT_MAX ? bytes - at : INT_MAX), MPI_BYTE,
                  0, MPI_COMM_WORLD);
}

/* The end of the job: an error ends every rank with its code; a code the
 * ranks agreed on (done, stopped by a signal) is each rank's exit status. */
static MP_UNUSED int mp_dist_exit(int rc, int agreed)
{
    if (!mp_dist.on)
        return rc;
    if (rc && !agreed && mp_dist.size > 1) {
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, rc);
    }
    MPI_Finalize();
    return rc;
}
#else
static MP_UNUSED void mp_dist_init(int *argc, char ***argv) { (void)argc; (void)argv; }
static MP_UNUSED void mp_dist_sum_f32(float *buf, int64_t n) { (void)buf; (void)n; }
static MP_UNUSED void mp_dist_sum_f64(double *buf, int64_t n) { (void)buf; (void)n; }
static MP_UNUSED void mp_dist_max_f32(float *buf, int64_t n) { (void)buf; (void)n; }
static MP_UNUSED void mp_dist_bcast(void *buf, int64_t bytes) { (void)buf; (void)bytes; }
static MP_UNUSED int mp_dist_exit(int rc, int agreed) { (void)agreed; return rc; }
#endif

/* Rank 0 writes the files and the log lines. */
static MP_UNUSED int mp_dist_writer(void) { return mp_dist.rank == 0; }

#endif
