/* mp_cuda.h - the CUDA program's device context: the GPU and cuBLAS found
 * at start, the one device allocation, the compute stream, the three
 * shapes of kernel every op is made of, and the one matrix product.
 *
 * Kernels: an op's work is a functor (a struct with the op's arguments and
 * an MP_HD operator()) run by one of three generic kernels:
 *   mp_cu_each(name, n, f)            f(i) for every item i < n (grid-stride)
 *   mp_cu_rows(name, rows, thr, f)    f(row, team): a block of thr threads
 *                                     per row; team.tid / team.nt is the
 *                                     thread's share, team.sum / max /
 *                                     argmax reduce over the block in a
 *                                     fixed order (deterministic),
 *                                     team.sum_cols over the block's warps
 *                                     lane by lane (a block of columns),
 *                                     team.sum_lanes / max_lanes over the
 *                                     lanes of one column of a middle-axis
 *                                     tile (lanes `period` apart);
 *                                     sums are compensated f32 (MpAcc)
 *   mp_cu_one(name, f)                f() on one thread (scalars, decisions)
 * so that the functors, where all the arithmetic is, also run on the CPU:
 * compiled with -DMP_CU_EMU (tests/cuda/mp_cuda_emu.h stands in for the
 * CUDA runtime and cuBLAS), the three shapes become loops on the host and
 * the whole program runs without a GPU, graph capture included.
 *
 * Memory: everything the device uses is cut from ONE cudaMalloc made at
 * start (mp_cu_start in mp_cuda_step.h): the activation arena (memplan.c's
 * offsets, as in the C program), the flat parameter / gradient / optimizer
 * buffers (the host runtime's layout), input slots, the workspace of
 * im2col, attention and reductions, cuBLAS's workspace, the loss-scale
 * state. Nothing is allocated after that.
 *
 * Order: every launch goes to one stream (mp_cu.st), so the order of the
 * model's calls is the order on the GPU and buffers shared by liveness
 * (memplan.c) are safe. In measure mode (the dry run at start) nothing is
 * launched and the launchers only note the workspace they need (mp_cu_ws).
 *
 * Errors: a CUDA or cuBLAS failure is one line on stderr and exit status 1
 * (as the C runtime's out-of-memory in kernels): the program cannot go on.
 * A kernel's fault shows at whichever call comes after it: reported as an
 * earlier kernel's (mp_cu_earlier) unless MP_CUDA_SYNC=1 waits after every
 * launch and product, which names the kernel, the op and its line. */
#ifndef MP_CUDA_H
#define MP_CUDA_H

#ifndef MP_CU_EMU
#include <cuda_runtime.h>
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mp_model.h"
#include "mp_util.h"
#include "mp_ckpt.h"
#include "mp_cublas.h"
#include "mp_nccl.h"
#include "mp_dist.h"
#include "mp_cuda_items.h"

#define MP_CU_ALIGN 256
#define MP_CU_HDR 256              /* bytes before an input slot's inputs */
#define MP_CU_BLAS_WS (32 << 20)   /* cuBLAS's workspace (Hopper wants 32 MiB) */

/* Per-step values the host writes before each step's inputs. */
typedef struct MpCuHdr {
    int64_t step;                  /* 1-based optimizer step */
    double lr;                     /* its learning rate */
} MpCuHdr;

/* What one call of the model's code runs with. */
typedef struct MpCuRun {
    int training;                  /* batch-norm batch statistics, dropout on */
    int check;                     /* eager: stop at the first non-finite value */
    int graph;                     /* a training step on the device (captured) */
    int64_t micro;                 /* micro-batch of the step */
    unsigned char *in;             /* device: this micro-batch's inputs */
    const MpCuHdr *hdr;            /* device: this step's header */
    uint64_t seed;                 /* dropout masks */
    float seed_grad;               /* eager: d(loss) the backward starts from */
    MpRun *run;                    /* eager: bad_op / bad_where go here */
} MpCuRun;

/* A parameter's lowp working copy in the arena (emit_cuda.c's table, the
 * C program's MpParam.work / work_dt): dt MP_F16 or MP_BF16 at byte offset
 * off, which the optimizer's pass (MpCuUpdate) writes as it updates the
 * value; MP_F32: no copy; MP_WORK_OTHER: several, only cast_params writes
 * them. */
typedef struct MpCuWork {
    int dt;
    int64_t off;
} MpCuWork;

/* The model's code (generated), as the runtime calls it. */
typedef struct MpCuModel {
    int64_t arena_bytes;           /* memplan.c's arena */
    int64_t in_bytes;              /* one micro-batch of every input */
    const int64_t *in_off;         /* each input's offset in it */
    void (*bind)(unsigned char *arena);
    void (*cast_params)(MpCuRun *r);
    int (*forward)(MpCuRun *r);
    int (*backward)(MpCuRun *r);
    const MpCuWork *work;          /* each parameter's working copy */
    int tf32;                      /* float32_matmul = "tf32": f32 products on TF32
                                      (cuBLAS's TF32 mode; mp_cu_blas_open) */
} MpCuModel;

/* Device-side state of the optimizer step and loss scaling. Its doubles
 * (and MpScaler's, mp_optim.h's factors) are scalars, worked on by one
 * thread a few times per step as the C program does, for torch parity:
 * the only double arithmetic the device does outside attention. */
typedef struct MpCuState {
    MpScaler ls;                   /* mp_optim.h's state machine, on the device */
    MpTrainCfg cfg;
    int64_t floor_skips, updates;
    int64_t halted_at;             /* step at which skipping reached the limit */
    int64_t step;                  /* the step these results are of */
    double loss_sum, grad_norm, scale_used;
    float loss, coef;              /* coef: clip factor, 1 = none */
    int taken;
    MpOptK k;                      /* this step's optimizer factors */
    double loss_total;             /* the sum of the step losses so far (loss_avg) */
    int fp8_lo, fp8_hi;            /* mixed_float8: the step's scale exponents (MpFp8.lo, hi) */
} MpCuState;

/* One range of a parameter in the flat buffers: of a trainable one, or of
 * one whose working copy only is written (a buffer: batch-norm statistics). */
typedef struct MpCuTile {
    int64_t start, len;
    int no_decay;                  /* the parameter's MpParam.no_decay */
    int train;                     /* 1: updated by the optimizer */
    int work_dt;                   /* MP_F16 / MP_BF16: its copy written; else 0 */
    int64_t work_at;               /* the copy of element `start`, bytes into the arena */
} MpCuTile;

/* mixed_float8 with cuBLASLt: an operand the next product quantises
 * (mp_cuda_fp8.h), x[0..n) of type xt with scale slot `slot` */
typedef struct MpCuFp8Src {
    const void *x;
    int xt, slot;
    int64_t n;
} MpCuFp8Src;

typedef struct MpCu {
    MpTrainer *t;
    const MpCuModel *model;
    int started, host, measure, graphs, sms;
    char device[64];               /* the GPU's name */
    int64_t ws_need;
    cudaStream_t st, cp;           /* compute; input copies */
    MpBlas blas;
    MpBlasHandle handle;
    unsigned char *mem;            /* the one allocation */
    int64_t mem_bytes;
    unsigned char *arena, *ws, *blas_ws, *in[3];   /* in[2]: evaluation, eager */
    float *params, *grads, *slot[MP_OPT_SLOTS], *outs;
    MpAcc *part;                   /* the unscale pass's partial sums (two each) */
    int nparts;
    MpCuState *state;
    MpCuTile *tiles;
    int64_t ntiles;
    int work_all;                  /* every working copy is written by the update */
    int work_stale;                /* ... and they must be cast before the next step */
    int64_t slot_bytes, in_base;   /* a step slot: header, sample indices at
                                      MP_CU_HDR, inputs at in_base */
    int64_t copy_bytes;            /* what the host copies into a slot */
    unsigned char **data;          /* the training set on the device, per
                                      input, or NULL: gathered on the host */
    unsigned char *stage[2];       /* pinned host copies of the step slots */
    MpCuState *hstate;             /* pinned, read back when a log is due */
    float *hgrads;                 /* host mode: gradients read back */
    cudaGraphExec_t exec[2];
    cudaEvent_t copied[2], done[2];
    MpOrder snap;                  /* data order after step snap_step (a sync) */
    int64_t snap_step;
    int sync;                      /* MP_CUDA_SYNC=1: a wait after every launch */
    int warm;                      /* a step has run eagerly: graphs may be captured */
    int capturing;                 /* errors are noted, not fatal: eager steps then */
    char capture_err[160];         /* the first error while capturing */
    int blas_off;                  /* the built-in product: cuBLAS refused one, or MP_CUBLAS=off */
    MpNccl nccl;                   /* data parallel, more than one rank: */
    MpNcclComm comm;               /* the gradients summed over the ranks */
    const char *op, *where;        /* the model's op being launched, its source line */
    MpFp8 *fp8;                    /* mixed_float8 (mp_cuda_fp8.h): the scales' state on the
                                      device, NULL under the other policies; */
    MpFp8 fp8_at;                  /* ... its arrays' device addresses, */
    float *fp8_part;               /* ... a tensor's amax in parts, */
    uint16_t *fp8_q[2];            /* ... a product's two quantised operands (bf16), */
    int64_t fp8_need;              /* ... and their bytes (measured as mp_cu_ws); */
    int fp8_lt;                    /* ... 1: FP8 products through cuBLASLt (sm_89 on), */
    int (*fp8_product)(const MpCuGemm *);   /* ... which mp_cu_gemm hands them to */
    MpBlasLt lt;
    MpLtHandle lt_handle;
    MpCuFp8Src fp8_src[2];         /* ... the operands the next product quantises, */
    unsigned char *fp8_b[2];       /* ... as e4m3 / e5m2 bytes, */
    float *fp8_scale;              /* ... each one's 2^-e (cuBLASLt's scale pointers) */
    int cc;                        /* the GPU's compute capability, 10 major + minor */
} MpCu;

MP_STATE MpCu mp_cu;          /* both parts use it (mp_model.h) */

/* ---- errors --------------------------------------------------------------- */

static inline void mp_cu_die(const char *what, const char *why)
{
    fprintf(stderr, "error: CUDA: %s: %s\n", what, why);
    exit(1);
}

/* While a step is captured an error ends nothing: it is kept, the capture
 * is dropped and steps run eagerly (mp_cu_capture). */
static inline int mp_cu_captured_err(const char *what, const char *why)
{
    if (!mp_cu.capturing)
        return 0;
    if (!mp_cu.capture_err[0])
        snprintf(mp_cu.capture_err, sizeof mp_cu.capture_err, "%s: %s", what, why);
    return 1;
}

/* The GPU's own execution errors (a kernel's fault): sticky, so every CUDA
 * call after the fault returns them, and the call that sees one is not the
 * one that failed. */
static inline int mp_cu_sticky(cudaError_t rc)
{
    switch ((int)rc) {
    case 214:                      /* cudaErrorECCUncorrectable */
    case 700:                      /* cudaErrorIllegalAddress */
    case 702:                      /* cudaErrorLaunchTimeout */
    case 710:                      /* cudaErrorAssert */
    case 714: case 715: case 716: case 717: case 718:   /* stack, instruction, alignment, ... */
    case 719:                      /* cudaErrorLaunchFailure */
    case 721:                      /* cudaErrorTensorMemoryLeak */
    case 911:                      /* cudaErrorExternalDevice */
        return 1;
    default:
        return 0;
    }
}

/* A sticky error seen by a later call: an earlier kernel (or product)
 * failed, which one only MP_CUDA_SYNC=1 can tell (a wait after every
 * launch and product: the fault then shows at its own). Never survived,
 * not even while capturing. */
static inline void mp_cu_earlier(cudaError_t rc)
{
    if (mp_cu.sync)                /* waited for every kernel: a copy or NCCL's work */
        fprintf(stderr, "error: CUDA: earlier work on the GPU failed: %s (the last op launched: "
                "%s at %s)\n", cudaGetErrorString(rc), mp_cu.op ? mp_cu.op : "none",
                mp_cu.where ? mp_cu.where : "?");
    else
        fprintf(stderr, "error: CUDA: an earlier kernel failed: %s (rerun with MP_CUDA_SYNC=1 to "
                "name the kernel, the op and its source line)\n", cudaGetErrorString(rc));
    exit(1);
}

/* A library call (cuBLAS, NCCL) failed: because an earlier kernel did, if
 * CUDA holds a sticky error (the library's own status says only that it
 * could not launch). */
static inline void mp_cu_lib_failed(void)
{
    cudaError_t rc = cudaGetLastError();
    if (mp_cu_sticky(rc))
        mp_cu_earlier(rc);
}

static inline void mp_cu_ok(cudaError_t rc, const char *what)
{
    if (mp_cu_sticky(rc))
        mp_cu_earlier(rc);
    if (rc != cudaSuccess && !mp_cu_captured_err(what, cudaGetErrorString(rc)))
        mp_cu_die(what, cudaGetErrorString(rc));
}

/* The generated code names each op before launching its kernels, so that
 * MP_CUDA_SYNC=1 can say which one of the model's lines failed. */
static inline void mp_cu_at(const char *op, const char *where)
{
    mp_cu.op = op;
    mp_cu.where = where;
}

/* Work of the model's op just queued (`what` 'name': kernel or product):
 * with MP_CUDA_SYNC=1 waited for, so that its own fault is named with the
 * op and line; rc, an error of its launch, is named the same way. A sticky
 * error from before (rc, or MP_CUDA_SYNC=1's wait when rc was already that)
 * is an earlier kernel's, not this one's: mp_cu_earlier. */
static inline void mp_cu_queued(const char *what, const char *name, cudaError_t rc)
{
    if (mp_cu_sticky(rc))
        mp_cu_earlier(rc);
    if (rc == cudaSuccess && mp_cu.sync && !mp_cu.capturing)
        rc = cudaStreamSynchronize(mp_cu.st);
    if (rc == cudaSuccess || (!mp_cu_sticky(rc) && mp_cu_captured_err(name, cudaGetErrorString(rc))))
        return;
    if (mp_cu.op) {
        fprintf(stderr, "error: CUDA: %s '%s' of op %s at %s: %s\n", what, name, mp_cu.op,
                mp_cu.where ? mp_cu.where : "?", cudaGetErrorString(rc));
        exit(1);
    }
    mp_cu_die(name, cudaGetErrorString(rc));
}

/* After a kernel's launch: its launch error, its fault (MP_CUDA_SYNC=1). */
static inline void mp_cu_launched(const char *name)
{
    mp_cu_queued("kernel", name, cudaGetLastError());
}

/* Blocks for a grid-stride loop over n items. */
static inline int mp_cu_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads, most = (int64_t)(mp_cu.sms > 0 ? mp_cu.sms : 80) * 32;
    return (int)(b < 1 ? 1 : b > most ? most : b);
}

/* Threads for a block that works on one row of len elements. */
static inline int mp_cu_row_threads(int64_t len)
{
    int t = 32;
    while (t < 256 && t < len)
        t *= 2;
    return t;
}

/* The workspace, at least `bytes` of it (measure mode: noted, NULL). */
static inline unsigned char *mp_cu_ws(int64_t bytes)
{
    if (bytes > mp_cu.ws_need)
        mp_cu.ws_need = bytes;
    return mp_cu.measure ? NULL : mp_cu.ws;
}

static inline int64_t mp_cu_round_up(int64_t n) { return (n + MP_CU_ALIGN - 1) / MP_CU_ALIGN * MP_CU_ALIGN; }

static inline void mp_cu_memset(void *p, int64_t bytes)
{
    if (!mp_cu.measure && bytes > 0)
        mp_cu_ok(cudaMemsetAsync(p, 0, (size_t)bytes, mp_cu.st), "cudaMemsetAsync");
}

/* ---- block-wide reductions (blockDim a multiple of 32, up to 1024) -------- */

/* Sums are compensated f32 sums (MpAcc, mp_cuda_items.h): each thread's
 * share added with TwoSum, the shares joined with TwoSum in the tree below,
 * so no device reduction runs in double (1/64 rate on consumer GPUs). */
#ifdef __CUDA_ARCH__
struct MpCuJoin { __device__ MpAcc operator()(MpAcc a, MpAcc b) const { return mp_acc_join(a, b); } };
struct MpCuCount { __device__ long long operator()(long long a, long long b) const { return a + b; } };
struct MpCuMax { __device__ float operator()(float a, float b) const { return b > a ? b : a; } };

static __device__ __forceinline__ float mp_cu_shfl_down(float v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
static __device__ __forceinline__ long long mp_cu_shfl_down(long long v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
static __device__ __forceinline__ MpAcc mp_cu_shfl_down(MpAcc v, int o)
{
    MpAcc r = {__shfl_down_sync(0xffffffffu, v.s, o), __shfl_down_sync(0xffffffffu, v.c, o)};
    return r;
}

/* Every thread of the block gets op over all threads' v, combined in a
 * fixed order (so sums are deterministic); idle lanes bring `none`. */
template <class T, class Op>
static __device__ T mp_cu_block_reduce(T v, T none, Op op)
{
    __shared__ T sh[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v = op(v, mp_cu_shfl_down(v, o));
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? sh[lane] : none;
        for (int o = 16; o > 0; o >>= 1)
            v = op(v, mp_cu_shfl_down(v, o));
        if (lane == 0)
            sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

static __device__ MpAcc mp_cu_block_acc(MpAcc v) { return mp_cu_block_reduce(v, mp_acc_zero(), MpCuJoin()); }
static __device__ long long mp_cu_block_count(long long v) { return mp_cu_block_reduce(v, 0ll, MpCuCount()); }

/* Every thread gets the sum over its group of `width` lanes (lanes g width
 * ... g width + width - 1, g = lane / width) of the values those lanes
 * brought in every warp: lane by lane in order, each lane's warps in order,
 * one compensated sum. A block of columns: lane l reads column l of the
 * rows its warp takes, and width lanes make one output (width 1: a column
 * each; batch norm's S columns a channel). */
static __device__ MpAcc mp_cu_block_sum_cols(MpAcc v, int width)
{
    __shared__ MpAcc sh[32][32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5, l0 = lane / width * width;
    __syncthreads();
    sh[w][lane] = v;
    __syncthreads();
    MpAcc s = mp_acc_zero();
    for (int l = l0; l < l0 + width && l < 32; l++)
        for (int i = 0; i < nw; i++)
            s = mp_acc_join(s, sh[i][l]);
    return s;
}
static __device__ float mp_cu_block_max(float v) { return mp_cu_block_reduce(v, -INFINITY, MpCuMax()); }

/* Every thread gets op over the lanes l of every warp with l = lane mod
 * period (l < 32 / period * period): lane by lane in order, each lane's
 * warps in order. A tile of a middle axis: lane l reads column l % period
 * of row l / period of the rows its warp takes (mp_cu_mid_at), so one
 * column's values sit in lanes period apart. */
template <class T, class Op>
static __device__ T mp_cu_block_lanes(T v, T none, Op op, int period)
{
    __shared__ T sh[32][32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5, end = 32 / period * period;
    __syncthreads();
    sh[w][lane] = v;
    __syncthreads();
    T s = none;
    for (int l = lane % period; l < end; l += period)
        for (int i = 0; i < nw; i++)
            s = op(s, sh[i][l]);
    return s;
}

static __device__ __forceinline__ int64_t mp_cu_warp_argmax(float *v, int64_t at)
{
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_down_sync(0xffffffffu, *v, o);
        long long j = __shfl_down_sync(0xffffffffu, (long long)at, o);
        at = mp_cu_argmax_pick(*v, at, u, j, v);
    }
    return at;
}

/* The block's first maximum: its index (-1 for none). */
static __device__ int64_t mp_cu_block_argmax(float v, int64_t at)
{
    __shared__ float shv[32];
    __shared__ long long shi[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    at = mp_cu_warp_argmax(&v, at);
    __syncthreads();
    if (lane == 0) {
        shv[w] = v;
        shi[w] = at;
    }
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? shv[lane] : -INFINITY;
        at = lane < nw ? shi[lane] : -1;
        at = mp_cu_warp_argmax(&v, at);
        if (lane == 0)
            shi[0] = at;
    }
    __syncthreads();
    return shi[0];
}
#endif

#ifdef MP_CU_EMU
/* The GPU's reduction tree (mp_cu_block_reduce) over the values the
 * stand-in's threads brought: shuffle-down within each warp of 32, the
 * warps' results through warp 0, so the stand-in's sums are the GPU's. */
template <class T, class Op>
static inline T mp_cu_emu_warp(T *x, Op op)
{
    /* lane l takes lane l + o's value; only lanes below o feed lane 0 later */
    for (int o = 16; o > 0; o >>= 1)
        for (int l = 0; l < o; l++)
            x[l] = op(x[l], x[l + o]);
    return x[0];
}

template <class T, class Op>
static inline T mp_cu_emu_tree(const T *v, int nt, T none, Op op)
{
    T sh[32], x[32];
    int nw = nt / 32;
    for (int w = 0; w < nw; w++) {
        memcpy(x, v + 32 * w, sizeof x);
        sh[w] = mp_cu_emu_warp(x, op);
    }
    for (int l = 0; l < 32; l++)
        x[l] = l < nw ? sh[l] : none;
    return mp_cu_emu_warp(x, op);
}

/* mp_cu_warp_argmax and mp_cu_block_argmax's order. */
static inline int64_t mp_cu_emu_warp_arg(float *x, int64_t *at)
{
    for (int o = 16; o > 0; o >>= 1)
        for (int l = 0; l < o; l++)
            at[l] = mp_cu_argmax_pick(x[l], at[l], x[l + o], at[l + o], &x[l]);
    return at[0];
}

static inline int64_t mp_cu_emu_tree_arg(const float *v, const int64_t *at, int nt, float *best)
{
    float shv[32], x[32];
    int64_t shi[32], a[32];
    int nw = nt / 32;
    for (int w = 0; w < nw; w++) {
        memcpy(x, v + 32 * w, sizeof x);
        memcpy(a, at + 32 * w, sizeof a);
        shi[w] = mp_cu_emu_warp_arg(x, a);
        shv[w] = x[0];
    }
    for (int l = 0; l < 32; l++) {
        x[l] = l < nw ? shv[l] : -INFINITY;
        a[l] = l < nw ? shi[l] : -1;
    }
    int64_t r = mp_cu_emu_warp_arg(x, a);
    *best = x[0];
    return r;
}

struct MpCuEmuJoin {
    MpAcc operator()(MpAcc a, MpAcc b) const { return mp_acc_join(a, b); }
};
struct MpCuEmuCount {
    int64_t operator()(int64_t a, int64_t b) const { return a + b; }
};
struct MpCuEmuMax {
    float operator()(float a, float b) const { return b > a ? b : a; }
};

/* The stand-in's compensated sums: thread i's MpAcc is (as[i], ac[i]). */
static inline std::vector<MpAcc> mp_cu_emu_accs(const MpEmuBlock *b)
{
    std::vector<MpAcc> v((size_t)b->nt);
    for (int i = 0; i < b->nt; i++)
        v[(size_t)i] = MpAcc{b->as[(size_t)i], b->ac[(size_t)i]};
    return v;
}

static void mp_cu_emu_none(MpEmuBlock *b) { (void)b; }
static void mp_cu_emu_acc(MpEmuBlock *b)
{
    MpAcc r = mp_cu_emu_tree(mp_cu_emu_accs(b).data(), b->nt, mp_acc_zero(), MpCuEmuJoin());
    b->rs[0] = r.s;
    b->rc[0] = r.c;
}
static void mp_cu_emu_count(MpEmuBlock *b) { b->ra = mp_cu_emu_tree(b->a.data(), b->nt, (int64_t)0, MpCuEmuCount()); }
static void mp_cu_emu_max(MpEmuBlock *b) { b->rf = mp_cu_emu_tree(b->f.data(), b->nt, -INFINITY, MpCuEmuMax()); }
static void mp_cu_emu_arg(MpEmuBlock *b) { b->ra = mp_cu_emu_tree_arg(b->f.data(), b->a.data(), b->nt, &b->rf); }

/* mp_cu_block_lanes' order: lanes lane mod period in order, each lane's
 * warps in order; out[lane] each lane's result */
template <class T, class Op>
static inline void mp_cu_emu_lanes(const T *v, int nt, int period, T none, Op op, T *out)
{
    int end = 32 / period * period;
    for (int lane = 0; lane < 32; lane++) {
        T s = none;
        for (int l = lane % period; l < end; l += period)
            for (int w = 0; w < nt / 32; w++)
                s = op(s, v[w * 32 + l]);
        out[lane] = s;
    }
}
static void mp_cu_emu_lanes_acc(MpEmuBlock *b)
{
    MpAcc r[32];
    mp_cu_emu_lanes(mp_cu_emu_accs(b).data(), b->nt, b->width, mp_acc_zero(), MpCuEmuJoin(), r);
    for (int l = 0; l < 32; l++) {
        b->rs[l] = r[l].s;
        b->rc[l] = r[l].c;
    }
}
static void mp_cu_emu_lanes_max(MpEmuBlock *b)
{
    mp_cu_emu_lanes(b->f.data(), b->nt, b->width, -INFINITY, MpCuEmuMax(), b->rm);
}

/* mp_cu_block_sum_cols' order: group by group, lane by lane, warps in order */
static void mp_cu_emu_cols(MpEmuBlock *b)
{
    std::vector<MpAcc> v = mp_cu_emu_accs(b);
    for (int g0 = 0; g0 < 32; g0 += b->width) {
        MpAcc s = mp_acc_zero();
        for (int l = g0; l < g0 + b->width && l < 32; l++)
            for (int w = 0; w < b->nt / 32; w++)
                s = mp_acc_join(s, v[(size_t)(w * 32 + l)]);
        for (int l = g0; l < g0 + b->width && l < 32; l++) {
            b->rs[l] = s.s;
            b->rc[l] = s.c;
        }
    }
}
#endif

/* A row's threads: this thread's share and the block-wide reductions. In
 * the stand-in each thread is a fiber and a reduction a barrier (emu NULL
 * with MP_EMU_SERIAL=1: one thread, the reductions identities). */
typedef struct MpCuTeam {
    int tid, nt;
#ifdef MP_CU_EMU
    MpEmuBlock *emu;
#endif
#ifdef __cplusplus
    /* a barrier (__syncthreads): the block's writes to its shared memory
     * before it are seen by every thread after it */
    MP_HD void sync() const
    {
#ifdef __CUDA_ARCH__
        __syncthreads();
#elif defined(MP_CU_EMU)
        if (emu)
            mp_emu_barrier(emu, 1, mp_cu_emu_none);
#endif
    }
    /* the compensated sum of every thread's v (mp_cu_block_acc) */
    MP_HD MpAcc sum(MpAcc v) const
    {
#ifdef __CUDA_ARCH__
        return mp_cu_block_acc(v);
#elif defined(MP_CU_EMU)
        if (!emu)
            return v;
        emu->as[(size_t)tid] = v.s;
        emu->ac[(size_t)tid] = v.c;
        mp_emu_barrier(emu, 5, mp_cu_emu_acc);
        return MpAcc{emu->rs[0], emu->rc[0]};
#else
        return v;
#endif
    }
    /* an exact count: the sum of every thread's v */
    MP_HD int64_t count(int64_t v) const
    {
#ifdef __CUDA_ARCH__
        return (int64_t)mp_cu_block_count((long long)v);
#elif defined(MP_CU_EMU)
        if (!emu)
            return v;
        emu->a[(size_t)tid] = v;
        mp_emu_barrier(emu, 6, mp_cu_emu_count);
        return emu->ra;
#else
        return v;
#endif
    }
#ifdef MP_CU_EMU
    /* the stand-in's compensated sum over groups of lanes: every thread's v
     * posted, `combine` run at barrier `kind` with `width`, the result of
     * the thread's lane (sum_cols and sum_lanes differ only in these) */
    MpAcc emu_groups(MpAcc v, int width, int kind, void (*combine)(MpEmuBlock *)) const
    {
        if (!emu)
            return v;
        emu->as[(size_t)tid] = v.s;
        emu->ac[(size_t)tid] = v.c;
        emu->width = width;
        mp_emu_barrier(emu, kind, combine);
        return MpAcc{emu->rs[tid % 32], emu->rc[tid % 32]};
    }
#endif
    /* the sum over the thread's group of `width` lanes, every warp's (see
     * mp_cu_block_sum_cols); width the same in every thread */
    MP_HD MpAcc sum_cols(MpAcc v, int width) const
    {
#ifdef __CUDA_ARCH__
        return mp_cu_block_sum_cols(v, width);
#elif defined(MP_CU_EMU)
        return emu_groups(v, width, 4, mp_cu_emu_cols);
#else
        (void)width;
        return v;
#endif
    }
    /* the compensated sum over the lanes lane mod period of every warp
     * (mp_cu_block_lanes); period (1..32) the same in every thread */
    MP_HD MpAcc sum_lanes(MpAcc v, int period) const
    {
#ifdef __CUDA_ARCH__
        return mp_cu_block_lanes(v, mp_acc_zero(), MpCuJoin(), period);
#elif defined(MP_CU_EMU)
        return emu_groups(v, period, 7, mp_cu_emu_lanes_acc);
#else
        (void)period;
        return v;
#endif
    }
    /* the maximum over the same lanes */
    MP_HD float max_lanes(float v, int period) const
    {
#ifdef __CUDA_ARCH__
        return mp_cu_block_lanes(v, -INFINITY, MpCuMax(), period);
#elif defined(MP_CU_EMU)
        if (!emu)
            return v;
        emu->f[(size_t)tid] = v;
        emu->width = period;
        mp_emu_barrier(emu, 8, mp_cu_emu_lanes_max);
        return emu->rm[tid % 32];
#else
        (void)period;
        return v;
#endif
    }
    MP_HD float max(float v) const
    {
#ifdef __CUDA_ARCH__
        return mp_cu_block_max(v);
#elif defined(MP_CU_EMU)
        if (!emu)
            return v;
        emu->f[(size_t)tid] = v;
        mp_emu_barrier(emu, 2, mp_cu_emu_max);
        return emu->rf;
#else
        return v;
#endif
    }
    MP_HD int64_t argmax(float v, int64_t at) const
    {
#ifdef __CUDA_ARCH__
        return mp_cu_block_argmax(v, at);
#elif defined(MP_CU_EMU)
        if (!emu)
            return at;
        emu->f[(size_t)tid] = v;
        emu->a[(size_t)tid] = at;
        mp_emu_barrier(emu, 3, mp_cu_emu_arg);
        return emu->ra;
#else
        (void)v;
        return at;
#endif
    }
#endif
} MpCuTeam;

/* name: n floats of the block's shared memory (one such array per functor,
 * n a constant; in the stand-in the block's MpEmuBlock holds it). */
#ifdef __CUDA_ARCH__
#define MP_CU_SHARED_F32(name, n, t) __shared__ float name[n]
#elif defined(MP_CU_EMU)
#define MP_CU_SHARED_F32(name, n, t) float *name = mp_emu_shared((t).emu, (size_t)(n))
#else
#define MP_CU_SHARED_F32(name, n, t) float *name = (float *)0  /* nvcc's host pass: never run */
#endif

/* ---- the three kernel shapes ------------------------------------------------ */

/* Launch bounds: every kernel is compiled for the most threads a block it
 * is launched with has (__launch_bounds__, its template argument NT, so
 * that it shows in the kernel's name in ptxas's report: tests/t_cuda_build.sh
 * checks registers x NT against an SM's 64K registers there). `each`: 256;
 * `one`: 1; `rows`: MP_CU_ROWS_MOST, or the functor's own `static constexpr
 * int most` (the column and middle-axis kernels, MP_CU_COL_MOST). Without
 * it ptxas may use more registers than a block of more threads can have,
 * and that launch fails (a -G build's 72 registers at 1024 threads). */
#define MP_CU_EACH_THREADS 256
#define MP_CU_ROWS_MOST 256
#define MP_CU_COL_MOST 1024

template <class F, class = void> struct MpCuMost { static constexpr int n = MP_CU_ROWS_MOST; };
template <class F> struct MpCuMost<F, decltype((void)F::most)> { static constexpr int n = F::most; };

/* The blocks of NT threads an SM must hold at once (__launch_bounds__'s
 * second argument): 1, or a rows functor's MpCuMinBlocks specialisation
 * (the Tensor Core attention's 4: at 128 threads ptxas keeps to 128
 * registers, t_cuda_build's bound, where unbounded it takes 156). */
template <class F> struct MpCuMinBlocks { static constexpr int n = 1; };

/* A rows block of `threads` must fit its kernel's bound: a launch past it
 * is the runtime's bug, stopped here (in the stand-in too). */
template <class F>
static inline void mp_cu_rows_fit(const char *name, int threads)
{
    if (threads >= 32 && threads % 32 == 0 && threads <= MpCuMost<F>::n)
        return;
    fprintf(stderr, "error: CUDA: kernel '%s': a block of %d threads, built for at most %d "
            "(a bug in the CUDA runtime: mp_cuda.h)\n", name, threads, MpCuMost<F>::n);
    exit(1);
}

#ifndef MP_CU_EMU
template <int NT, class F>
static __global__ void __launch_bounds__(NT) mp_cu_k_each(int64_t n, F f)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        f(i);
}

template <int NT, class F, int MB = MpCuMinBlocks<F>::n>
static __global__ void __launch_bounds__(NT, MB) mp_cu_k_rows(int64_t rows, F f)
{
    MpCuTeam t = {(int)threadIdx.x, (int)blockDim.x};
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
        f(r, t);
}

template <int NT, class F>
static __global__ void __launch_bounds__(NT) mp_cu_k_one(F f) { f(); }

template <class F>
static inline void mp_cu_each(const char *name, int64_t n, F f)
{
    if (mp_cu.measure || n <= 0)
        return;
    mp_cu_k_each<MP_CU_EACH_THREADS, F><<<mp_cu_blocks(n, MP_CU_EACH_THREADS), MP_CU_EACH_THREADS,
                                          0, mp_cu.st>>>(n, f);
    mp_cu_launched(name);
}

template <class F>
static inline void mp_cu_rows(const char *name, int64_t rows, int threads, F f)
{
    if (mp_cu.measure || rows <= 0)
        return;
    mp_cu_rows_fit<F>(name, threads);
    mp_cu_k_rows<MpCuMost<F>::n, F><<<mp_cu_blocks(rows, 1), threads, 0, mp_cu.st>>>(rows, f);
    mp_cu_launched(name);
}

template <class F>
static inline void mp_cu_one(const char *name, F f)
{
    if (mp_cu.measure)
        return;
    mp_cu_k_one<1, F><<<1, 1, 0, mp_cu.st>>>(f);
    mp_cu_launched(name);
}
#else
/* The CPU stand-in (tests/cuda/mp_cuda_emu.h): the same functors on the
 * host, queued on the stream (or recorded while a graph is captured); the
 * grid of a GPU launch, items in a permuted order, rows' threads as fibers. */
template <class F>
static inline void mp_cu_each(const char *name, int64_t n, F f)
{
    if (mp_cu.measure || n <= 0)
        return;
    mp_cu_emu_run(mp_cu.st, name, [=]() {
        int64_t i, stride;
        mp_emu_order(n, &i, &stride);
        for (int64_t k = 0; k < n; k++, i = i + stride >= n ? i + stride - n : i + stride)
            f(i);
    });
    mp_cu_launched(name);
}

template <class F>
static inline void mp_cu_rows(const char *name, int64_t rows, int threads, F f)
{
    if (mp_cu.measure || rows <= 0)
        return;
    mp_cu_rows_fit<F>(name, threads);
    int nb = mp_cu_blocks(rows, 1);
    mp_cu_emu_run(mp_cu.st, name, [=]() {
        mp_emu_rows(name, nb, threads, [&](int b, int tid, int nt, MpEmuBlock *blk) {
            MpCuTeam t = {tid, nt, blk};
            for (int64_t r = b; r < rows; r += nb)
                f(r, t);
        });
    });
    mp_cu_launched(name);
}

template <class F>
static inline void mp_cu_one(const char *name, F f)
{
    if (mp_cu.measure)
        return;
    mp_cu_emu_run(mp_cu.st, name, [=]() { f(); });
    mp_cu_launched(name);
}
#endif

/* ---- matrix products ------------------------------------------------------ */

/* The product in f32 for type mixes cuBLAS has no routine for (and K = 0):
 * element (b, i, j) of C per item. Slow; models never need it in practice. */
struct MpCuGemmF {
    MpCuGemm g;
    int rnd;                       /* MP_TF32: f32 operands rounded to TF32, as cuBLAS's TF32 mode */
    MP_HD void operator()(int64_t e) const
    {
        int64_t j = e % g.N, i = e / g.N % g.M, b = e / (g.N * g.M);
        const char *A = (const char *)g.A + b * g.sa * mp_cu_dt_size(g.adt);
        const char *B = (const char *)g.B + b * g.sb * mp_cu_dt_size(g.bdt);
        char *C = (char *)g.C + b * g.sc * mp_cu_dt_size(g.cdt);
        float acc = 0.0f;
        for (int64_t k = 0; k < g.K; k++)
            acc += mp_round(mp_cu_ld(A, g.adt, g.ta ? k * g.lda + i : i * g.lda + k), rnd)
                 * mp_round(mp_cu_ld(B, g.bdt, g.tb ? j * g.ldb + k : k * g.ldb + j), rnd);
        mp_cu_st_beta(C, g.cdt, i * g.ldc + j, g.alpha * acc, g.beta);
    }
};

static inline void mp_cu_blas_ok(MpBlasStatus s, const char *what)
{
    const char *why = mp_cu.blas.status_string ? mp_cu.blas.status_string(s) : "failed";
    if (s != MP_BLAS_STATUS_SUCCESS)
        mp_cu_lib_failed();
    if (s != MP_BLAS_STATUS_SUCCESS && !mp_cu_captured_err(what, why))
        mp_cu_die(what, why);
}

/* float32_matmul = "tf32": the model's f32 products run on TF32. */
static inline int mp_cu_tf32(void) { return mp_cu.model && mp_cu.model->tf32 && !mp_gemm_exact; }

#ifdef MP_CU_EMU
static inline int mp_cu_emu_type(int blas_type)
{
    return blas_type == MP_BLAS_R_16F ? MP_F16 : blas_type == MP_BLAS_R_16BF ? MP_BF16 : MP_F32;
}

/* What cuBLAS does with a: C = alpha opA(A) opB(B) + beta C, column-major,
 * for each of the batch. Read row-major, a column-major matrix is its
 * transpose, so this is the row-major C^T = opB(B)^T opA(A)^T of mp_gemm. */
static inline void mp_cu_emu_gemm(const MpBlasArgs *a, float alpha, float beta)
{
    int at = mp_cu_emu_type(a->atype), bt = mp_cu_emu_type(a->btype), ct = mp_cu_emu_type(a->ctype);
    for (int b = 0; b < a->batch; b++)
        mp_gemm(a->opb == MP_BLAS_OP_T, a->opa == MP_BLAS_OP_T, a->n, a->m, a->k, alpha,
                (const char *)a->B + b * a->sb * mp_cu_dt_size(bt), bt, a->ldb,
                (const char *)a->A + b * a->sa * mp_cu_dt_size(at), at, a->lda, beta,
                (char *)a->C + b * a->sc * mp_cu_dt_size(ct), ct, a->ldc);
}
#endif

/* One product handed to cuBLAS: its status. */
static inline MpBlasStatus mp_cu_blas_gemm(const MpBlasArgs *a, float alpha, float beta)
{
#ifdef MP_CU_EMU
    /* cuBLAS sets a handle up at its first product (its kernels, and
     * without a user workspace an allocation), which stream capture
     * refuses: the stand-in refuses it too, so a step captured without the
     * eager warm-up step before it fails (tests/t_cuda_emu.sh) */
    static int set_up;
    if (mp_emu_fail("blas"))
        return MP_BLAS_STATUS_NOT_SUPPORTED;
    if (!set_up && mp_emu_refuse())
        return 13;                 /* CUBLAS_STATUS_EXECUTION_FAILED */
    set_up = 1;
    MpBlasArgs c = *a;
    mp_cu_emu_run(mp_cu.st, a->batch == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx",
                  [=]() { mp_cu_emu_gemm(&c, alpha, beta); });
    return MP_BLAS_STATUS_SUCCESS;
#else
    if (a->batch == 1)
        return mp_cu.blas.gemm(mp_cu.handle, a->opa, a->opb, a->m, a->n, a->k, &alpha, a->A, a->atype,
                               a->lda, a->B, a->btype, a->ldb, &beta, a->C, a->ctype, a->ldc,
                               MP_BLAS_COMPUTE_32F, MP_BLAS_GEMM_DEFAULT);
    return mp_cu.blas.gemm_batched(mp_cu.handle, a->opa, a->opb, a->m, a->n, a->k, &alpha, a->A,
                                   a->atype, a->lda, a->sa, a->B, a->btype, a->ldb, a->sb, &beta,
                                   a->C, a->ctype, a->ldc, a->sc, a->batch, MP_BLAS_COMPUTE_32F,
                                   MP_BLAS_GEMM_DEFAULT);
#endif
}

/* The one entry point for products: C = alpha op(A) op(B) + beta C. When
 * cuBLAS cannot do them on this GPU (NOT_SUPPORTED, ARCH_MISMATCH) every
 * product from then on is the built-in one, after one note. A product of
 * mixed_float8's operands waiting to be quantised is cuBLASLt's FP8
 * product where it can be (mp_cu_fp8_product). */
static inline void mp_cu_gemm(const MpCuGemm *g)
{
    if (mp_cu.measure || g->M <= 0 || g->N <= 0 || g->batch <= 0)
        return;
    if (mp_cu.fp8_src[0].x && mp_cu.fp8_product && mp_cu.fp8_product(g))
        return;
    if (!mp_cu.blas_off && mp_blas_can(g)) {
        MpBlasArgs a = mp_blas_args(g);
        MpBlasStatus s = mp_cu_blas_gemm(&a, g->alpha, g->beta);
        const char *fn = a.batch == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx";
        if (s == MP_BLAS_STATUS_SUCCESS) {
            if (mp_cu.sync)        /* its kernels' fault named here, not at the next launch */
                mp_cu_queued("product", fn, cudaSuccess);
            return;
        }
        if (s != MP_BLAS_STATUS_NOT_SUPPORTED && s != MP_BLAS_STATUS_ARCH_MISMATCH) {
            mp_cu_blas_ok(s, fn);
            return;
        }
        fprintf(stderr, "note: cuBLAS cannot run this program's products on this GPU (%s); the "
                "built-in product is used instead (slower)\n",
                s == MP_BLAS_STATUS_ARCH_MISMATCH ? "ARCH_MISMATCH" : "NOT_SUPPORTED");
        mp_cu.blas_off = 1;
    }
    MpCuGemmF f = {*g, mp_cu_tf32() && g->adt == MP_F32 && g->bdt == MP_F32 ? MP_TF32 : 0};
    mp_cu_each("gemm", g->batch * g->M * g->N, f);
}

static inline MpCuGemm mp_cu_gemm_of(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                                     const void *A, int adt, int64_t lda, const void *B, int bdt,
                                     int64_t ldb, float beta, void *C, int cdt, int64_t ldc)
{
    MpCuGemm g = {ta, tb, M, N, K, alpha, beta, A, adt, lda, B, bdt, ldb, C, cdt, ldc, 1, 0, 0, 0};
    return g;
}

/* ---- start: the device, cuBLAS, streams ------------------------------------ */

/* cuBLAS loaded and set up on the compute stream: 0, or -1 with e set. */
static inline int mp_cu_blas_open(MpErr *e)
{
    const char *env = getenv("MP_CUBLAS");
    if (env && !strcmp(env, "off")) {   /* every product on the built-in kernel (slower) */
        mp_cu.blas_off = 1;
        return 0;
    }
#ifdef MP_CU_EMU
    (void)e;                       /* products: mp_cu_emu_gemm, through mp_gemm, */
    mp_gemm_tf32 = mp_cu_tf32();   /* which rounds f32 operands as the TF32 mode */
#else
    char msg[512];
    if (mp_blas_load(&mp_cu.blas, msg, sizeof msg))
        return mp_errf(e, "%s", msg);
    MpBlasStatus s = mp_cu.blas.create(&mp_cu.handle);
    if (s != MP_BLAS_STATUS_SUCCESS)
        return mp_errf(e, "cuBLAS: cannot start: %s", mp_cu.blas.status_string(s));
    /* float32_matmul (the plan's tf32 products): cuBLAS's TF32 Tensor Core mode */
    int math = (mp_cu_tf32() ? MP_BLAS_TF32_TENSOR_OP_MATH : MP_BLAS_DEFAULT_MATH)
             | MP_BLAS_DISALLOW_REDUCED_PRECISION_REDUCTION;
    mp_cu_blas_ok(mp_cu.blas.set_math_mode(mp_cu.handle, math), "cublasSetMathMode");
    mp_cu_blas_ok(mp_cu.blas.set_stream(mp_cu.handle, mp_cu.st), "cublasSetStream");
#endif
    return 0;
}

/* The GPU, streams, cuBLAS: 0, or -1 with e set ("no CUDA device: ..."). */
static inline int mp_cu_open(MpErr *e)
{
    int n = 0, drv = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc == cudaErrorInsufficientDriver && cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
        return mp_errf(e, "the NVIDIA driver is too old for this program: it runs CUDA %d.%d, the "
                       "program was built with CUDA %d.%d (update the driver, or build with an "
                       "older CUDA toolkit)", drv / 1000, drv % 1000 / 10, CUDART_VERSION / 1000,
                       CUDART_VERSION % 1000 / 10);
    if (rc == cudaErrorInsufficientDriver)   /* and no driver version: none loaded */
        return mp_errf(e, "no CUDA device: no NVIDIA driver is loaded (%s)", cudaGetErrorString(rc));
    if (rc != cudaSuccess || n < 1)
        return mp_errf(e, "no CUDA device: %s", rc != cudaSuccess ? cudaGetErrorString(rc)
                       : "the driver sees none");
    const char *dev = getenv("MP_CUDA_DEVICE");
    int d = dev && *dev ? atoi(dev) : mp_dist.local % n;   /* data parallel: a GPU per rank */
    cudaDeviceProp prop;
    if ((rc = cudaSetDevice(d)) != cudaSuccess || (rc = cudaGetDeviceProperties(&prop, d)) != cudaSuccess)
        return mp_errf(e, "no CUDA device: device %d: %s", d, cudaGetErrorString(rc));
    mp_cu.sms = prop.multiProcessorCount;
    mp_cu.cc = prop.major * 10 + prop.minor;
    snprintf(mp_cu.device, sizeof mp_cu.device, "%s", prop.name);
    const char *sync = getenv("MP_CUDA_SYNC");
    mp_cu.sync = sync && *sync == '1';
    if ((rc = cudaStreamCreateWithFlags(&mp_cu.st, cudaStreamNonBlocking)) != cudaSuccess
        || (rc = cudaStreamCreateWithFlags(&mp_cu.cp, cudaStreamNonBlocking)) != cudaSuccess)
        return mp_errf(e, "CUDA: cannot create a stream: %s", cudaGetErrorString(rc));
    return mp_cu_blas_open(e);
}

#endif
