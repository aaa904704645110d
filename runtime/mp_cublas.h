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

/* ---- cuBLASLt: mixed_float8's FP8 products (sm_89 and later) ---------------
 * The few types, values and functions of cublasLt.h that the FP8 products
 * use (runtime/mp_cuda_fp8.h): a matmul descriptor (f32 compute and scale
 * type, the two operations, each FP8 operand's scale by device pointer),
 * four matrix layouts, a preference (the workspace's size) and one
 * heuristic's algorithm. tests/cuda/blas_abi.cu checks them against the
 * real header, as cuBLAS's above. */
enum {
    MP_BLAS_R_8F_E4M3 = 28, MP_BLAS_R_8F_E5M2 = 29,     /* cudaDataType */
    MP_LT_DESC_TRANSA = 3, MP_LT_DESC_TRANSB = 4,       /* cublasLtMatmulDescAttributes_t */
    MP_LT_DESC_A_SCALE_POINTER = 17, MP_LT_DESC_B_SCALE_POINTER = 18,
    MP_LT_PREF_MAX_WORKSPACE_BYTES = 1,                 /* cublasLtMatmulPreferenceAttributes_t */
};

typedef void *MpLtHandle, *MpLtDesc, *MpLtLayout, *MpLtPref;   /* cublasLt..._t */
typedef struct MpLtAlgo { uint64_t data[8]; } MpLtAlgo;        /* cublasLtMatmulAlgo_t */
typedef struct MpLtHeuristic {                                 /* cublasLtMatmulHeuristicResult_t */
    MpLtAlgo algo;
    size_t workspace_size;
    MpBlasStatus state;
    float waves;
    int reserved[4];
} MpLtHeuristic;

typedef MpBlasStatus (*MpLtCreateFn)(MpLtHandle *);
typedef MpBlasStatus (*MpLtDescCreateFn)(MpLtDesc *, int, int);
typedef MpBlasStatus (*MpLtDescDestroyFn)(MpLtDesc);
typedef MpBlasStatus (*MpLtDescSetFn)(MpLtDesc, int, const void *, size_t);
typedef MpBlasStatus (*MpLtLayoutCreateFn)(MpLtLayout *, int, uint64_t, uint64_t, int64_t);
typedef MpBlasStatus (*MpLtLayoutDestroyFn)(MpLtLayout);
typedef MpBlasStatus (*MpLtPrefCreateFn)(MpLtPref *);
typedef MpBlasStatus (*MpLtPrefDestroyFn)(MpLtPref);
typedef MpBlasStatus (*MpLtPrefSetFn)(MpLtPref, int, const void *, size_t);
typedef MpBlasStatus (*MpLtHeuristicFn)(MpLtHandle, MpLtDesc, MpLtLayout, MpLtLayout, MpLtLayout,
                                        MpLtLayout, MpLtPref, int, MpLtHeuristic *, int *);
typedef MpBlasStatus (*MpLtMatmulFn)(MpLtHandle, MpLtDesc, const void *, const void *, MpLtLayout,
                                     const void *, MpLtLayout, const void *, const void *, MpLtLayout,
                                     void *, MpLtLayout, const MpLtAlgo *, void *, size_t,
                                     struct CUstream_st *);

typedef struct MpBlasLt {
    void *lib;
    MpLtCreateFn create;
    MpLtDescCreateFn desc_create;
    MpLtDescDestroyFn desc_destroy;
    MpLtDescSetFn desc_set;
    MpLtLayoutCreateFn layout_create;
    MpLtLayoutDestroyFn layout_destroy;
    MpLtPrefCreateFn pref_create;
    MpLtPrefDestroyFn pref_destroy;
    MpLtPrefSetFn pref_set;
    MpLtHeuristicFn heuristic;
    MpLtMatmulFn matmul;
} MpBlasLt;

static const char *const mp_blaslt_names[] = {
    "libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so",
    "/usr/local/cuda/lib64/libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.12",
    "/usr/local/cuda/lib64/libcublasLt.so",
};

/* Loads cuBLASLt into *b (beside cuBLAS, which loads it too): 0, or -1 with
 * one line in msg. */
static inline int mp_blaslt_load(MpBlasLt *b, char *msg, size_t cap)
{
    int n = (int)(sizeof mp_blaslt_names / sizeof mp_blaslt_names[0]);
    memset(b, 0, sizeof *b);
    for (int i = 0; !b->lib && i < n; i++)
        b->lib = dlopen(mp_blaslt_names[i], RTLD_NOW | RTLD_LOCAL);
    if (!b->lib) {
        snprintf(msg, cap, "cannot load cuBLASLt (libcublasLt.so.13, .so.12 or .so)");
        return -1;
    }
    const MpDlSym syms[] = {
        {(void **)&b->create, "cublasLtCreate"},
        {(void **)&b->desc_create, "cublasLtMatmulDescCreate"},
        {(void **)&b->desc_destroy, "cublasLtMatmulDescDestroy"},
        {(void **)&b->desc_set, "cublasLtMatmulDescSetAttribute"},
        {(void **)&b->layout_create, "cublasLtMatrixLayoutCreate"},
        {(void **)&b->layout_destroy, "cublasLtMatrixLayoutDestroy"},
        {(void **)&b->pref_create, "cublasLtMatmulPreferenceCreate"},
        {(void **)&b->pref_destroy, "cublasLtMatmulPreferenceDestroy"},
        {(void **)&b->pref_set, "cublasLtMatmulPreferenceSetAttribute"},
        {(void **)&b->heuristic, "cublasLtMatmulAlgoGetHeuristic"},
        {(void **)&b->matmul, "cublasLtMatmul"},
    };
    return mp_dl_syms(b->lib, syms, sizeof syms / sizeof syms[0], "cuBLASLt",
                      "cuBLAS 12 or later is needed", msg, cap);
}

#endif
