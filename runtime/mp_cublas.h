/* mp_cublas.h - cuBLAS reached without link flags: `nvcc train.cu` must link
 * with no -lcublas, so the CUDA program loads libcublas with dlopen when it
 * starts and resolves the few functions it calls with dlsym.
 *
 * The types and enum values below are cuBLAS's documented ABI (cublas_api.h,
 * library_types.h of CUDA 12 and 13); tests/t_cuda_build.sh compiles a check
 * of every value against the real headers. A missing library or symbol is
 * one clear line and exit status 1 (mp_blas_load's message), never a crash.
 *
 * Also here, because it is easy to get wrong and testable on any CPU: the
 * mapping of a row-major product (the runtime's MpGemm convention, as
 * mp_gemm) onto cuBLAS's column-major one (mp_blas_args).
 *
 * Plain C as well as CUDA C++: tests/unit/test_cuda_host.c runs the loader
 * and the mapping with cc. */
#ifndef MP_CUBLAS_H
#define MP_CUBLAS_H

#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mp_model.h"

/* ---- the ABI ------------------------------------------------------------- */

enum {
    MP_BLAS_OP_N = 0, MP_BLAS_OP_T = 1,                 /* cublasOperation_t */
    MP_BLAS_R_32F = 0, MP_BLAS_R_16F = 2, MP_BLAS_R_16BF = 14,   /* cudaDataType */
    MP_BLAS_COMPUTE_32F = 68,                           /* cublasComputeType_t */
    MP_BLAS_GEMM_DEFAULT = -1,                          /* cublasGemmAlgo_t */
    MP_BLAS_DEFAULT_MATH = 0,                           /* cublasMath_t: no TF32 */
    MP_BLAS_TF32_TENSOR_OP_MATH = 3,
    MP_BLAS_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,  /* split-K sums stay f32 */
    MP_BLAS_STATUS_SUCCESS = 0,                         /* cublasStatus_t */
    MP_BLAS_STATUS_ARCH_MISMATCH = 8,
    MP_BLAS_STATUS_NOT_SUPPORTED = 15,
};

struct CUstream_st;                                     /* cudaStream_t */
typedef void *MpBlasHandle;                             /* cublasHandle_t */
typedef int MpBlasStatus;

typedef MpBlasStatus (*MpBlasCreateFn)(MpBlasHandle *);
typedef MpBlasStatus (*MpBlasSetStreamFn)(MpBlasHandle, struct CUstream_st *);
typedef MpBlasStatus (*MpBlasSetMathModeFn)(MpBlasHandle, int);
typedef MpBlasStatus (*MpBlasSetWorkspaceFn)(MpBlasHandle, void *, size_t);
typedef const char *(*MpBlasStatusStringFn)(MpBlasStatus);
typedef MpBlasStatus (*MpBlasGemmExFn)(MpBlasHandle, int, int, int, int, int, const void *,
                                       const void *, int, int, const void *, int, int,
                                       const void *, void *, int, int, int, int);
typedef MpBlasStatus (*MpBlasGemmBatchedFn)(MpBlasHandle, int, int, int, int, int,
                                            const void *, const void *, int, int, long long,
                                            const void *, int, int, long long, const void *,
                                            void *, int, int, long long, int, int, int);

typedef struct MpBlas {
    void *lib;
    MpBlasCreateFn create;
    MpBlasSetStreamFn set_stream;
    MpBlasSetMathModeFn set_math_mode;
    MpBlasSetWorkspaceFn set_workspace;
    MpBlasStatusStringFn status_string;
    MpBlasGemmExFn gemm;
    MpBlasGemmBatchedFn gemm_batched;
} MpBlas;

/* Where libcublas is looked for, in order: $MP_CUBLAS (a file), the
 * loader's own search (LD_LIBRARY_PATH, ld.so.cache) by versioned name,
 * then the toolkit's usual folder. */
static const char *const mp_blas_names[] = {
    "libcublas.so.13", "libcublas.so.12", "libcublas.so",
    "/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12",
    "/usr/local/cuda/lib64/libcublas.so",
};

/* The functions of a library loaded with dlopen, each into its pointer:
 * 0, or -1 naming the first one missing ("the loaded WHAT has no function
 * NAME (NEED)"). Used for cuBLAS here and NCCL (mp_nccl.h). */
typedef struct MpDlSym { void **fn; const char *name; } MpDlSym;

static inline int mp_dl_syms(void *lib, const MpDlSym *s, size_t n, const char *what,
                             const char *need, char *msg, size_t cap)
{
    for (size_t i = 0; i < n; i++) {
        void *p = dlsym(lib, s[i].name);
        if (!p) {
            snprintf(msg, cap, "the loaded %s has no function %s (%s)", what, s[i].name, need);
            return -1;
        }
        memcpy(s[i].fn, &p, sizeof p);
    }
    return 0;
}

/* Loads cuBLAS into *b. 0, or -1 with one line in msg (no newline). */
static inline int mp_blas_load(MpBlas *b, char *msg, size_t cap)
{
    const char *env = getenv("MP_CUBLAS");
    int n = (int)(sizeof mp_blas_names / sizeof mp_blas_names[0]);
    memset(b, 0, sizeof *b);
    if (env && *env) {
        if (!(b->lib = dlopen(env, RTLD_NOW | RTLD_LOCAL))) {
            const char *why = dlerror();
            snprintf(msg, cap, "cannot load cuBLAS from MP_CUBLAS=%s: %s", env, why ? why : "?");
            return -1;
        }
    }
    for (int i = 0; !b->lib && i < n; i++)
        b->lib = dlopen(mp_blas_names[i], RTLD_NOW | RTLD_LOCAL);
    if (!b->lib) {
        snprintf(msg, cap, "cannot load cuBLAS (libcublas.so.13, .so.12 or .so, on the library "
                 "path or in /usr/local/cuda/lib64): install the CUDA toolkit's libraries, add "
                 "their folder to LD_LIBRARY_PATH, or set MP_CUBLAS=/path/to/libcublas.so");
        return -1;
    }
    const MpDlSym syms[] = {
        {(void **)&b->create, "cublasCreate_v2"},
        {(void **)&b->set_stream, "cublasSetStream_v2"},
        {(void **)&b->set_math_mode, "cublasSetMathMode"},
        {(void **)&b->set_workspace, "cublasSetWorkspace_v2"},
        {(void **)&b->status_string, "cublasGetStatusString"},
        {(void **)&b->gemm, "cublasGemmEx"},
        {(void **)&b->gemm_batched, "cublasGemmStridedBatchedEx"},
    };
    return mp_dl_syms(b->lib, syms, sizeof syms / sizeof syms[0], "cuBLAS",
                      "cuBLAS 12 or later is needed", msg, cap);
}

/* ---- a row-major product on a column-major library ------------------------- */

/* C[i] = alpha op(A[i]) op(B[i]) + beta C[i], i < batch, row-major, with
 * A[i] at A + i*sa elements (0: shared), likewise B and C; as mp_gemm. */
typedef struct MpCuGemm {
    int ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    const void *A; int adt; int64_t lda;
    const void *B; int bdt; int64_t ldb;
    void *C; int cdt; int64_t ldc;
    int64_t batch, sa, sb, sc;
} MpCuGemm;

/* The same product as cuBLAS sees it. A row-major matrix read column-major
 * is its transpose, so C^T = op(B)^T op(A)^T: cuBLAS's A is our B. */
typedef struct MpBlasArgs {
    int opa, opb, m, n, k;
    const void *A; int atype, lda; long long sa;
    const void *B; int btype, ldb; long long sb;
    void *C; int ctype, ldc; long long sc;
    int batch;
} MpBlasArgs;

static inline int mp_blas_type(int dt)
{
    return dt == MP_F32 ? MP_BLAS_R_32F : dt == MP_F16 ? MP_BLAS_R_16F
         : dt == MP_BF16 ? MP_BLAS_R_16BF : -1;
}

/* 1 when cuBLAS can do g with f32 accumulation: A and B of one float type,
 * C f32 or that type (f32 inputs: f32 C), every size an int. */
static inline int mp_blas_can(const MpCuGemm *g)
{
    int64_t big = g->M > g->N ? g->M : g->N;
    big = big > g->K ? big : g->K;
    if (mp_blas_type(g->adt) < 0 || g->adt != g->bdt || mp_blas_type(g->cdt) < 0)
        return 0;
    if (g->adt == MP_F32 && g->cdt != MP_F32)
        return 0;
    return big < INT_MAX && g->lda < INT_MAX && g->ldb < INT_MAX && g->ldc < INT_MAX
        && g->batch < INT_MAX && g->K > 0;
}

static inline MpBlasArgs mp_blas_args(const MpCuGemm *g)
{
    MpBlasArgs a;
    a.opa = g->tb ? MP_BLAS_OP_T : MP_BLAS_OP_N;
    a.opb = g->ta ? MP_BLAS_OP_T : MP_BLAS_OP_N;
    a.m = (int)g->N;
    a.n = (int)g->M;
    a.k = (int)g->K;
    a.A = g->B; a.atype = mp_blas_type(g->bdt); a.lda = (int)g->ldb; a.sa = g->sb;
    a.B = g->A; a.btype = mp_blas_type(g->adt); a.ldb = (int)g->lda; a.sb = g->sa;
    a.C = g->C; a.ctype = mp_blas_type(g->cdt); a.ldc = (int)g->ldc; a.sc = g->sc;
    a.batch = (int)g->batch;
    return a;
}

#endif
