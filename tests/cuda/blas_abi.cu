/* blas_abi.cu - runtime/mp_cublas.h declares cuBLAS's (and cuBLASLt's) types and enum values
 * itself (train.cu links no cuBLAS); here they are checked against the real
 * headers at compile time (tests/t_cuda_build.sh: nvcc -c, nothing linked). */
#include <cublas_api.h>
#include <cublasLt.h>
#include <library_types.h>
#include <stddef.h>
#include <type_traits>
#include "mp_model.h"
#include "mp_cublas.h"

#define SAME(a, b) ((int)(a) == (int)(b))

static_assert(SAME(MP_BLAS_OP_N, CUBLAS_OP_N) && SAME(MP_BLAS_OP_T, CUBLAS_OP_T), "cublasOperation_t");
static_assert(SAME(MP_BLAS_R_32F, CUDA_R_32F) && SAME(MP_BLAS_R_16F, CUDA_R_16F)
              && SAME(MP_BLAS_R_16BF, CUDA_R_16BF), "cudaDataType");
static_assert(SAME(MP_BLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F), "cublasComputeType_t");
static_assert(SAME(MP_BLAS_GEMM_DEFAULT, CUBLAS_GEMM_DEFAULT), "cublasGemmAlgo_t");
static_assert(SAME(MP_BLAS_DEFAULT_MATH, CUBLAS_DEFAULT_MATH)
              && SAME(MP_BLAS_TF32_TENSOR_OP_MATH, CUBLAS_TF32_TENSOR_OP_MATH)
              && SAME(MP_BLAS_DISALLOW_REDUCED_PRECISION_REDUCTION, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION), "cublasMath_t");
static_assert(SAME(MP_BLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS), "cublasStatus_t");
static_assert(SAME(MP_BLAS_STATUS_ARCH_MISMATCH, CUBLAS_STATUS_ARCH_MISMATCH), "cublasStatus_t");
static_assert(SAME(MP_BLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_NOT_SUPPORTED), "cublasStatus_t");
/* enums travel as int, the handle as a pointer, strides as long long */
static_assert(sizeof(cublasOperation_t) == sizeof(int) && sizeof(cudaDataType) == sizeof(int)
              && sizeof(cublasComputeType_t) == sizeof(int) && sizeof(cublasGemmAlgo_t) == sizeof(int)
              && sizeof(cublasMath_t) == sizeof(int) && sizeof(cublasStatus_t) == sizeof(int),
              "enum sizes");
static_assert(sizeof(cublasHandle_t) == sizeof(MpBlasHandle), "handle");
/* the function types, argument by argument, with the enums as int */
typedef cublasStatus_t (*RealGemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                   int, const void *, const void *, cudaDataType, int,
                                   const void *, cudaDataType, int, const void *, void *,
                                   cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
static const RealGemm real_gemm = cublasGemmEx;
typedef cublasStatus_t (*RealBatched)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void *, const void *, cudaDataType, int,
                                      long long int, const void *, cudaDataType, int,
                                      long long int, const void *, void *, cudaDataType, int,
                                      long long int, int, cublasComputeType_t, cublasGemmAlgo_t);
static const RealBatched real_batched = cublasGemmStridedBatchedEx;
typedef cublasStatus_t (*RealWorkspace)(cublasHandle_t, void *, size_t);
static const RealWorkspace real_ws = cublasSetWorkspace_v2;
typedef cublasStatus_t (*RealMath)(cublasHandle_t, cublasMath_t);
static const RealMath real_math = cublasSetMathMode;
typedef cublasStatus_t (*RealStream)(cublasHandle_t, cudaStream_t);
static const RealStream real_stream = cublasSetStream_v2;
typedef cublasStatus_t (*RealCreate)(cublasHandle_t *);
static const RealCreate real_create = cublasCreate_v2;
typedef const char *(*RealString)(cublasStatus_t);
static const RealString real_string = cublasGetStatusString;

/* The same function types with enums as int and the handle as void *
 * must be mp_cublas.h's own typedefs, exactly. */
template <class T> struct Abi {
    typedef typename std::conditional<std::is_enum<T>::value, int, T>::type type;
};
template <> struct Abi<cublasHandle_t> { typedef MpBlasHandle type; };
template <> struct Abi<cublasHandle_t *> { typedef MpBlasHandle *type; };
template <class F> struct AbiFn;
template <class R, class... A> struct AbiFn<R (*)(A...)> {
    typedef typename Abi<R>::type (*type)(typename Abi<A>::type...);
};
#define SAME_FN(real, ours) static_assert(std::is_same<AbiFn<real>::type, ours>::value, #ours)
SAME_FN(RealGemm, MpBlasGemmExFn);
SAME_FN(RealBatched, MpBlasGemmBatchedFn);
SAME_FN(RealWorkspace, MpBlasSetWorkspaceFn);
SAME_FN(RealMath, MpBlasSetMathModeFn);
SAME_FN(RealStream, MpBlasSetStreamFn);
SAME_FN(RealCreate, MpBlasCreateFn);
SAME_FN(RealString, MpBlasStatusStringFn);

/* cuBLASLt (mixed_float8's FP8 products) */
static_assert(SAME(MP_BLAS_R_8F_E4M3, CUDA_R_8F_E4M3) && SAME(MP_BLAS_R_8F_E5M2, CUDA_R_8F_E5M2), "fp8 types");
static_assert(SAME(MP_LT_DESC_TRANSA, CUBLASLT_MATMUL_DESC_TRANSA)
              && SAME(MP_LT_DESC_TRANSB, CUBLASLT_MATMUL_DESC_TRANSB)
              && SAME(MP_LT_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER)
              && SAME(MP_LT_DESC_B_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER),
              "cublasLtMatmulDescAttributes_t");
static_assert(SAME(MP_LT_PREF_MAX_WORKSPACE_BYTES, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES),
              "cublasLtMatmulPreferenceAttributes_t");
static_assert(sizeof(MpLtAlgo) == sizeof(cublasLtMatmulAlgo_t), "cublasLtMatmulAlgo_t");
static_assert(sizeof(MpLtHeuristic) == sizeof(cublasLtMatmulHeuristicResult_t)
              && offsetof(MpLtHeuristic, workspace_size) == offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize)
              && offsetof(MpLtHeuristic, state) == offsetof(cublasLtMatmulHeuristicResult_t, state),
              "cublasLtMatmulHeuristicResult_t");
template <> struct Abi<cublasLtHandle_t> { typedef MpLtHandle type; };
template <> struct Abi<cublasLtHandle_t *> { typedef MpLtHandle *type; };
template <> struct Abi<cublasLtMatmulDesc_t> { typedef MpLtDesc type; };
template <> struct Abi<cublasLtMatmulDesc_t *> { typedef MpLtDesc *type; };
template <> struct Abi<cublasLtMatrixLayout_t> { typedef MpLtLayout type; };
template <> struct Abi<cublasLtMatrixLayout_t *> { typedef MpLtLayout *type; };
template <> struct Abi<cublasLtMatmulPreference_t> { typedef MpLtPref type; };
template <> struct Abi<cublasLtMatmulPreference_t *> { typedef MpLtPref *type; };
template <> struct Abi<cublasLtMatmulHeuristicResult_t *> { typedef MpLtHeuristic *type; };
template <> struct Abi<const cublasLtMatmulAlgo_t *> { typedef const MpLtAlgo *type; };
#define LT_FN(fn, ours) SAME_FN(decltype(&fn), ours); static const decltype(&fn) real_##fn = fn
LT_FN(cublasLtCreate, MpLtCreateFn);
LT_FN(cublasLtMatmulDescCreate, MpLtDescCreateFn);
LT_FN(cublasLtMatmulDescDestroy, MpLtDescDestroyFn);
LT_FN(cublasLtMatmulDescSetAttribute, MpLtDescSetFn);
LT_FN(cublasLtMatrixLayoutCreate, MpLtLayoutCreateFn);
LT_FN(cublasLtMatrixLayoutDestroy, MpLtLayoutDestroyFn);
LT_FN(cublasLtMatmulPreferenceCreate, MpLtPrefCreateFn);
LT_FN(cublasLtMatmulPreferenceDestroy, MpLtPrefDestroyFn);
LT_FN(cublasLtMatmulPreferenceSetAttribute, MpLtPrefSetFn);
LT_FN(cublasLtMatmulAlgoGetHeuristic, MpLtHeuristicFn);
LT_FN(cublasLtMatmul, MpLtMatmulFn);

int mp_blas_abi_used(void)
{
    return real_gemm != 0 && real_batched != 0 && real_ws != 0 && real_math != 0 && real_stream != 0
        && real_create != 0 && real_string != 0 && real_cublasLtCreate != 0
        && real_cublasLtMatmulDescCreate != 0 && real_cublasLtMatmulDescDestroy != 0
        && real_cublasLtMatmulDescSetAttribute != 0 && real_cublasLtMatrixLayoutCreate != 0
        && real_cublasLtMatrixLayoutDestroy != 0 && real_cublasLtMatmulPreferenceCreate != 0
        && real_cublasLtMatmulPreferenceDestroy != 0 && real_cublasLtMatmulPreferenceSetAttribute != 0
        && real_cublasLtMatmulAlgoGetHeuristic != 0 && real_cublasLtMatmul != 0;
}
