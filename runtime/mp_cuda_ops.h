/* mp_cuda_ops.h - the kernels of the CUDA program and their launchers: one
 * launcher mp_cu_<op> per kernel call the generated code makes (one per IR
 * node, as mp_k_<op> in the C program, same argument order), with the
 * storage types of its tensors as template arguments so that each kernel
 * is compiled for exactly the types it is used with.
 *
 *   mp_cu_<unary><Y, X>(y, x, n)            cast neg relu gelu tanh sigmoid
 *                                           silu exp log sqrt rsqrt
 *   mp_cu_<unary>_grad<DX, DY, V>(dx, dy, v, n)
 *   mp_cu_dropout<Y, X>(y, x, n, p, seed, hdr, micro, node)  (+ _grad)
 *   mp_cu_{add,sub,mul,div}<Y, A, B>(y, ysh, a, ash, b, bsh)  broadcasting
 *   mp_cu_transpose<Y, X>(y, x, xsh, perm)
 *   mp_cu_{sum,mean}<Y, X>(y, x, outer, len, inner); expand; sum_to;
 *   channel_sum; softmax, log_softmax and their gradients
 *   mp_cu_cross_entropy, _grad, mse, _grad, accuracy
 *   mp_cu_matmul, matmul_tn, linear                  (cuBLAS)
 *   mp_cu_conv2d, _dx, _dw                           (im2col + cuBLAS)
 *   pools, global_avg_pool, embedding, layer_norm, batch_norm, attention
 * Shapes that the C program passes as arrays come as MpCuDims values.
 *
 * Each kernel loops over items (mp_cuda_items.h holds the per-item work):
 * elementwise kernels over elements (grid-stride), row kernels a block per
 * row (softmax, norms, losses), reductions a thread or a block per output.
 * Nothing uses atomics: every sum is made in a fixed order, so a step is
 * deterministic. A scalar result (a loss) is made by a second one-block
 * kernel from per-row parts kept in the workspace. */
#ifndef MP_CUDA_OPS_H
#define MP_CUDA_OPS_H

#include "mp_cuda.h"

typedef struct MpCuDims {
    int rank;
    int64_t d[MP_MAX_RANK];
} MpCuDims;

/* ---- elementwise ------------------------------------------------------------ */

template <int YT, int XT, class F>
static __global__ void mp_cu_k_map1(void *y, const void *x, int64_t n, F f)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        mp_cu_st(y, YT, i, f(mp_cu_ld(x, XT, i)));
}

template <int YT, int AT, int BT, class F>
static __global__ void mp_cu_k_map2(void *y, const void *a, const void *b, int64_t n, F f)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        mp_cu_st(y, YT, i, f(mp_cu_ld(a, AT, i), mp_cu_ld(b, BT, i)));
}

#define MP_CU_UNARY(NAME, EXPR)                                                \
    struct MpCuF_##NAME {                                                      \
        __device__ float operator()(float a) const { return (EXPR); }          \
    };                                                                         \
    template <int YT, int XT>                                                  \
    static inline void mp_cu_##NAME(void *y, const void *x, int64_t n)         \
    {                                                                          \
        mp_cu_go(#NAME, mp_cu_k_map1<YT, XT, MpCuF_##NAME>, mp_cu_blocks(n, 256), 256, \
                 y, x, n, MpCuF_##NAME());                                     \
    }

#define MP_CU_GRAD(NAME, FN)                                                   \
    struct MpCuF_##NAME {                                                      \
        __device__ float operator()(float g, float v) const { return FN(g, v); } \
    };                                                                         \
    template <int DXT, int DYT, int VT>                                        \
    static inline void mp_cu_##NAME(void *dx, const void *dy, const void *v, int64_t n) \
    {                                                                          \
        mp_cu_go(#NAME, mp_cu_k_map2<DXT, DYT, VT, MpCuF_##NAME>, mp_cu_blocks(n, 256), 256, \
                 dx, dy, v, n, MpCuF_##NAME());                                \
    }

MP_CU_UNARY(cast, a)
MP_CU_UNARY(neg, -a)
MP_CU_UNARY(relu, mp_relu(a))
MP_CU_UNARY(gelu, mp_gelu(a))
MP_CU_UNARY(tanh, tanhf(a))
MP_CU_UNARY(sigmoid, mp_sigmoid(a))
MP_CU_UNARY(silu, mp_silu(a))
MP_CU_UNARY(exp, expf(a))
MP_CU_UNARY(log, logf(a))
MP_CU_UNARY(sqrt, sqrtf(a))
MP_CU_UNARY(rsqrt, mp_rsqrt(a))

MP_CU_GRAD(relu_grad, mp_relu_grad)
MP_CU_GRAD(gelu_grad, mp_gelu_grad)
MP_CU_GRAD(silu_grad, mp_silu_grad)
MP_CU_GRAD(tanh_grad, mp_tanh_grad)
MP_CU_GRAD(sigmoid_grad, mp_sigmoid_grad)
MP_CU_GRAD(sqrt_grad, mp_sqrt_grad)
MP_CU_GRAD(rsqrt_grad, mp_rsqrt_grad)

/* dst += src: a parameter's f32 gradient into the flat buffer */
static __global__ void mp_cu_k_acc(float *dst, const float *src, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] += src[i];
}

static inline void mp_cu_acc_grad(float *dst, const float *src, int64_t n)
{
    mp_cu_go("accumulate_grad", mp_cu_k_acc, mp_cu_blocks(n, 256), 256, dst, src, n);
}

/* Dropout: the mask of (seed, step, micro, node) as mp_k_dropout; the step
 * is read on the device, so one captured step serves every step. */
template <int YT, int XT>
static __global__ void mp_cu_k_dropout(void *y, const void *x, int64_t n, float p, uint64_t seed,
                                       const MpCuHdr *hdr, int64_t micro, int64_t node)
{
    uint64_t key = mp_dropout_key(seed, hdr->step, micro, node);
    float s = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        mp_cu_st(y, YT, i, mp_dropout_u(key, i) >= p ? mp_cu_ld(x, XT, i) * s : 0.0f);
}

template <int YT, int XT>
static inline void mp_cu_dropout(void *y, const void *x, int64_t n, float p, uint64_t seed,
                                 const MpCuHdr *hdr, int64_t micro, int64_t node)
{
    if (p <= 0.0f)
        mp_cu_cast<YT, XT>(y, x, n);
    else
        mp_cu_go("dropout", mp_cu_k_dropout<YT, XT>, mp_cu_blocks(n, 256), 256, y, x, n, p, seed,
                 hdr, micro, node);
}

template <int DXT, int DYT>
static inline void mp_cu_dropout_grad(void *dx, const void *dy, int64_t n, float p, uint64_t seed,
                                      const MpCuHdr *hdr, int64_t micro, int64_t node)
{
    mp_cu_dropout<DXT, DYT>(dx, dy, n, p, seed, hdr, micro, node);
}

/* ---- broadcasting and views ---------------------------------------------------- */

template <int YT, int AT, int BT, class F>
static __global__ void mp_cu_k_bcast(void *y, const void *a, const void *b, MpBcast p, int64_t n, F f)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ao, bo;
        mp_cu_bcast_at(&p, i, &ao, &bo);
        mp_cu_st(y, YT, i, f(mp_cu_ld(a, AT, ao), mp_cu_ld(b, BT, bo)));
    }
}

#define MP_CU_BINARY(NAME, EXPR)                                               \
    struct MpCuF_##NAME {                                                      \
        __device__ float operator()(float a, float b) const { return (EXPR); } \
    };                                                                         \
    template <int YT, int AT, int BT>                                          \
    static inline void mp_cu_##NAME(void *y, MpCuDims ysh, const void *a, MpCuDims ash, \
                                    const void *b, MpCuDims bsh)               \
    {                                                                          \
        MpBcast p = mp_bcast(ysh.rank, ysh.d, ash.rank, ash.d, bsh.rank, bsh.d);\
        int64_t n = mp_numel(ysh.rank, ysh.d);                                 \
        mp_cu_go(#NAME, mp_cu_k_bcast<YT, AT, BT, MpCuF_##NAME>, mp_cu_blocks(n, 256), 256, \
                 y, a, b, p, n, MpCuF_##NAME());                               \
    }

MP_CU_BINARY(add, a + b)
MP_CU_BINARY(sub, a - b)
MP_CU_BINARY(mul, a * b)
MP_CU_BINARY(div, a / b)

/* y[i] = x[view(i)]: transposes and layout changes */
template <int YT, int XT>
static __global__ void mp_cu_k_gather(void *y, const void *x, MpCuView v, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        mp_cu_st(y, YT, i, mp_cu_ld(x, XT, mp_cu_view_at(&v, i)));
}

template <int YT, int XT>
static inline void mp_cu_gather(void *y, const void *x, MpCuView v)
{
    int64_t n = mp_cu_view_numel(&v);
    mp_cu_go("gather", mp_cu_k_gather<YT, XT>, mp_cu_blocks(n, 256), 256, y, x, v, n);
}

template <int YT, int XT>
static inline void mp_cu_transpose(void *y, const void *x, MpCuDims xsh, MpCuDims perm)
{
    mp_cu_gather<YT, XT>(y, x, mp_cu_view_permute(xsh.rank, xsh.d, perm.d));
}

/* ---- reductions ------------------------------------------------------------------ */

/* A thread per output: for many outputs with short sums. */
template <int YT, int XT>
static __global__ void mp_cu_k_reduce_thread(void *y, const void *x, MpCuRed r, float beta)
{
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < r.nout;
         j += (int64_t)gridDim.x * blockDim.x)
        mp_cu_red_store(&r, y, YT, j, mp_cu_red_part(&r, x, XT, j, 0, 1), beta);
}

/* A block per output: for long sums. */
template <int YT, int XT>
static __global__ void mp_cu_k_reduce_block(void *y, const void *x, MpCuRed r, float beta)
{
    for (int64_t j = blockIdx.x; j < r.nout; j += gridDim.x) {
        double s = mp_cu_block_sum(mp_cu_red_part(&r, x, XT, j, threadIdx.x, blockDim.x));
        if (threadIdx.x == 0)
            mp_cu_red_store(&r, y, YT, j, s, beta);
    }
}

template <int YT, int XT>
static inline void mp_cu_reduce(void *y, const void *x, MpCuRed r, float beta)
{
    if (r.nred >= 64 && r.nout < 16 * (int64_t)(mp_cu.sms > 0 ? mp_cu.sms : 80))
        mp_cu_go("reduce", mp_cu_k_reduce_block<YT, XT>, mp_cu_blocks(r.nout * 256, 256), 256,
                 y, x, r, beta);
    else
        mp_cu_go("reduce", mp_cu_k_reduce_thread<YT, XT>, mp_cu_blocks(r.nout, 128), 128, y, x,
                 r, beta);
}

template <int YT, int XT>
static inline void mp_cu_sum(void *y, const void *x, int64_t outer, int64_t len, int64_t inner)
{
    mp_cu_reduce<YT, XT>(y, x, mp_cu_red_axis(outer, len, inner, 1.0), 0.0f);
}

template <int YT, int XT>
static inline void mp_cu_mean(void *y, const void *x, int64_t outer, int64_t len, int64_t inner)
{
    mp_cu_reduce<YT, XT>(y, x, mp_cu_red_axis(outer, len, inner, 1.0 / (double)len), 0.0f);
}

template <int YT, int XT>
static inline void mp_cu_global_avg_pool(void *y, const void *x, int64_t N, int64_t C, int64_t S)
{
    mp_cu_reduce<YT, XT>(y, x, mp_cu_red_axis(N * C, S, 1, 1.0 / (double)S), 0.0f);
}

template <int YT, int XT>
static inline void mp_cu_channel_sum(void *y, const void *x, int64_t N, int64_t C, int64_t S,
                                     float beta)
{
    mp_cu_reduce<YT, XT>(y, x, mp_cu_red_channels(N, C, S), beta);
}

template <int YT, int DYT>
static inline void mp_cu_sum_to(void *y, MpCuDims ysh, const void *dy, MpCuDims dysh, float beta)
{
    mp_cu_reduce<YT, DYT>(y, dy, mp_cu_red_sum_to(ysh.rank, ysh.d, dysh.rank, dysh.d), beta);
}

template <int YT, int DYT>
static __global__ void mp_cu_k_expand(void *y, const void *dy, int64_t n, int64_t len,
                                      int64_t inner, float scale)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        mp_cu_st(y, YT, i, mp_cu_expand_at(dy, DYT, i, len, inner, scale));
}

template <int YT, int DYT>
static inline void mp_cu_expand(void *y, const void *dy, int64_t outer, int64_t len, int64_t inner,
                                float scale)
{
    int64_t n = outer * len * inner;
    mp_cu_go("expand", mp_cu_k_expand<YT, DYT>, mp_cu_blocks(n, 256), 256, y, dy, n, len, inner,
             scale);
}

template <int DXT, int DYT>
static inline void mp_cu_global_avg_pool_grad(void *dx, const void *dy, int64_t N, int64_t C,
                                              int64_t S)
{
    mp_cu_expand<DXT, DYT>(dx, dy, N * C, S, 1, 1.0f / (float)S);
}

/* ---- softmax ---------------------------------------------------------------------- */

template <int YT, int XT>
static __global__ void mp_cu_k_softmax(void *y, const void *x, int64_t rows, int64_t len,
                                       int64_t inner, int log_)
{
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t off = mp_cu_row_off(row, len, inner);
        float m = mp_cu_block_max(mp_cu_row_max(x, XT, off, len, inner, threadIdx.x, blockDim.x));
        double s = mp_cu_block_sum(mp_cu_row_sumexp(x, XT, off, len, inner, m, threadIdx.x,
                                                    blockDim.x));
        mp_cu_softmax_put(y, YT, x, XT, off, len, inner, m, s, log_, threadIdx.x, blockDim.x);
    }
}

template <int YT, int XT>
static inline void mp_cu_softmax(void *y, const void *x, int64_t outer, int64_t len, int64_t inner)
{
    mp_cu_go("softmax", mp_cu_k_softmax<YT, XT>, mp_cu_blocks(outer * inner, 1),
             mp_cu_row_threads(len), y, x, outer * inner, len, inner, 0);
}

template <int YT, int XT>
static inline void mp_cu_log_softmax(void *y, const void *x, int64_t outer, int64_t len,
                                     int64_t inner)
{
    mp_cu_go("log_softmax", mp_cu_k_softmax<YT, XT>, mp_cu_blocks(outer * inner, 1),
             mp_cu_row_threads(len), y, x, outer * inner, len, inner, 1);
}

template <int DXT, int DYT, int YT>
static __global__ void mp_cu_k_softmax_grad(void *dx, const void *dy, const void *y, int64_t rows,
                                            int64_t len, int64_t inner, int log_)
{
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t off = mp_cu_row_off(row, len, inner);
        double s = mp_cu_block_sum(mp_cu_softmax_grad_sum(dy, DYT, y, YT, off, len, inner, log_,
                                                          threadIdx.x, blockDim.x));
        mp_cu_softmax_grad_put(dx, DXT, dy, DYT, y, YT, off, len, inner, s, log_, threadIdx.x,
                               blockDim.x);
    }
}

template <int DXT, int DYT, int YT>
static inline void mp_cu_softmax_grad(void *dx, const void *dy, const void *y, int64_t outer,
                                      int64_t len, int64_t inner)
{
    mp_cu_go("softmax_grad", mp_cu_k_softmax_grad<DXT, DYT, YT>, mp_cu_blocks(outer * inner, 1),
             mp_cu_row_threads(len), dx, dy, y, outer * inner, len, inner, 0);
}

template <int DXT, int DYT, int YT>
static inline void mp_cu_log_softmax_grad(void *dx, const void *dy, const void *y, int64_t outer,
                                          int64_t len, int64_t inner)
{
    mp_cu_go("log_softmax_grad", mp_cu_k_softmax_grad<DXT, DYT, YT>,
             mp_cu_blocks(outer * inner, 1), mp_cu_row_threads(len), dx, dy, y, outer * inner,
             len, inner, 1);
}

/* ---- losses and metrics ------------------------------------------------------------ */

/* y = sum of part[0..n) / div, summed by one block in a fixed order. */
template <int YT>
static __global__ void mp_cu_k_finish(void *y, const double *part, int64_t n, double div)
{
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        s += part[i];
    s = mp_cu_block_sum(s);
    if (threadIdx.x == 0)
        mp_cu_st(y, YT, 0, (float)(s / div));
}

template <int XT>
static __global__ void mp_cu_k_ce_rows(double *part, const void *x, const int32_t *labels,
                                       int64_t rows, int64_t C)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float m = mp_cu_block_max(mp_cu_row_max(x, XT, r * C, C, 1, threadIdx.x, blockDim.x));
        double s = mp_cu_block_sum(mp_cu_row_sumexp(x, XT, r * C, C, 1, m, threadIdx.x,
                                                    blockDim.x));
        if (threadIdx.x == 0)
            part[r] = mp_cu_ce_row(x, XT, r * C, C, labels[r], m, s);
    }
}

template <int LT, int XT>
static inline void mp_cu_cross_entropy(void *loss, const void *x, const int32_t *labels,
                                       int64_t rows, int64_t C)
{
    double *part = (double *)mp_cu_ws(rows * (int64_t)sizeof(double));
    mp_cu_go("cross_entropy", mp_cu_k_ce_rows<XT>, mp_cu_blocks(rows, 1), mp_cu_row_threads(C),
             part, x, labels, rows, C);
    mp_cu_go("cross_entropy", mp_cu_k_finish<LT>, 1, 256, loss, (const double *)part, rows,
             (double)rows);
}

template <int DXT, int DLT, int XT>
static __global__ void mp_cu_k_ce_grad(void *dx, const void *dl, const void *x,
                                       const int32_t *labels, int64_t rows, int64_t C)
{
    float g = mp_cu_ld(dl, DLT, 0) / (float)rows;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float m = mp_cu_block_max(mp_cu_row_max(x, XT, r * C, C, 1, threadIdx.x, blockDim.x));
        double s = mp_cu_block_sum(mp_cu_row_sumexp(x, XT, r * C, C, 1, m, threadIdx.x,
                                                    blockDim.x));
        mp_cu_ce_grad_put(dx, DXT, x, XT, r * C, C, labels[r], m, s, g, threadIdx.x, blockDim.x);
    }
}

template <int DXT, int DLT, int XT>
static inline void mp_cu_cross_entropy_grad(void *dx, const void *dl, const void *x,
                                            const int32_t *labels, int64_t rows, int64_t C)
{
    mp_cu_go("cross_entropy_grad", mp_cu_k_ce_grad<DXT, DLT, XT>, mp_cu_blocks(rows, 1),
             mp_cu_row_threads(C), dx, dl, x, labels, rows, C);
}

template <int XT>
static __global__ void mp_cu_k_accuracy_rows(double *part, const void *x, const int32_t *labels,
                                             int64_t rows, int64_t C)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float v;
        int64_t at = mp_cu_argmax_part(x, XT, r * C, C, threadIdx.x, blockDim.x, &v);
        at = mp_cu_block_argmax(v, at);
        if (threadIdx.x == 0)
            part[r] = at == labels[r] ? 1.0 : 0.0;
    }
}

template <int OT, int XT>
static inline void mp_cu_accuracy(void *out, const void *x, const int32_t *labels, int64_t rows,
                                  int64_t C)
{
    double *part = (double *)mp_cu_ws(rows * (int64_t)sizeof(double));
    mp_cu_go("accuracy", mp_cu_k_accuracy_rows<XT>, mp_cu_blocks(rows, 1), mp_cu_row_threads(C),
             part, x, labels, rows, C);
    mp_cu_go("accuracy", mp_cu_k_finish<OT>, 1, 256, out, (const double *)part, rows,
             (double)rows);
}

template <int PT, int TT>
static __global__ void mp_cu_k_mse_chunks(double *part, const void *p, const void *t, int64_t n,
                                          int64_t nc)
{
    for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w < nc;
         w += (int64_t)gridDim.x * blockDim.x)
        part[w] = mp_cu_mse_chunk(p, PT, t, TT, n, w);
}

template <int LT, int PT, int TT>
static inline void mp_cu_mse(void *loss, const void *pred, const void *target, int64_t n)
{
    int64_t nc = (n + MP_CHUNK - 1) / MP_CHUNK;
    double *part = (double *)mp_cu_ws(nc * (int64_t)sizeof(double));
    mp_cu_go("mse", mp_cu_k_mse_chunks<PT, TT>, mp_cu_blocks(nc, 128), 128, part, pred, target, n,
             nc);
    mp_cu_go("mse", mp_cu_k_finish<LT>, 1, 256, loss, (const double *)part, nc, (double)n);
}

template <int DXT, int DLT, int PT, int TT>
static __global__ void mp_cu_k_mse_grad(void *dx, const void *dl, const void *p, const void *t,
                                        int64_t n)
{
    float g = 2.0f * mp_cu_ld(dl, DLT, 0) / (float)n;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        mp_cu_st(dx, DXT, i, g * (mp_cu_ld(p, PT, i) - mp_cu_ld(t, TT, i)));
}

template <int DXT, int DLT, int PT, int TT>
static inline void mp_cu_mse_grad(void *dx, const void *dl, const void *pred, const void *target,
                                  int64_t n)
{
    mp_cu_go("mse_grad", mp_cu_k_mse_grad<DXT, DLT, PT, TT>, mp_cu_blocks(n, 256), 256, dx, dl,
             pred, target, n);
}

/* ---- products ------------------------------------------------------------------------ */

template <int YT, int AT, int BT>
static inline void mp_cu_matmul(void *y, const void *a, const void *b, int64_t batch, int64_t M,
                                int64_t N, int64_t K, int ta, int tb, int64_t stride_a,
                                int64_t stride_b)
{
    MpCuGemm g = mp_cu_gemm_of(ta, tb, M, N, K, 1.0f, a, AT, ta ? M : K, b, BT, tb ? K : N, 0.0f,
                               y, YT, N);
    g.batch = batch;
    g.sa = stride_a;
    g.sb = stride_b;
    g.sc = M * N;
    mp_cu_gemm(&g);
}

template <int YT, int AT, int BT>
static inline void mp_cu_matmul_tn(void *y, const void *a, const void *b, int64_t R, int64_t K,
                                   int64_t N, float beta)
{
    MpCuGemm g = mp_cu_gemm_of(1, 0, K, N, R, 1.0f, a, AT, K, b, BT, N, beta, y, YT, N);
    mp_cu_gemm(&g);
}

/* y[r, c] = b[c] (per row) or y[n, c, s] = b[c]: a bias in place before a
 * product adds into it, so the result is rounded once. */
template <int YT, int BT>
static __global__ void mp_cu_k_fill_bias(void *y, const void *b, int64_t n, int64_t C, int64_t S)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        mp_cu_st(y, YT, i, mp_cu_ld(b, BT, i / S % C));
}

template <int YT, int XT, int WT, int BT>
static inline void mp_cu_linear(void *y, const void *x, const void *w, const void *bias,
                                int64_t M, int64_t N, int64_t K)
{
    if (bias)
        mp_cu_go("linear", mp_cu_k_fill_bias<YT, BT>, mp_cu_blocks(M * N, 256), 256, y, bias,
                 M * N, N, (int64_t)1);
    MpCuGemm g = mp_cu_gemm_of(0, 1, M, N, K, 1.0f, x, XT, K, w, WT, K, bias ? 1.0f : 0.0f, y, YT,
                               N);
    mp_cu_gemm(&g);
}

/* ---- convolution: im2col, then products ------------------------------------------------ */

template <int CT, int XT>
static __global__ void mp_cu_k_im2col(void *col, const void *x, MpCuImg g, int64_t n, int by_image)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        mp_cu_st(col, CT, i, mp_cu_im2col_at(&g, x, XT, i, by_image));
}

template <int DXT>
static __global__ void mp_cu_k_col2im(void *dx, const float *dcol, MpCuImg g, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        mp_cu_st(dx, DXT, i, mp_cu_col2im_at(&g, dcol, MP_F32, i));
}

/* y[n] = w [F, Ckk] @ col[n] [Ckk, OH OW] (+ bias), one batched product */
template <int YT, int XT, int WT, int BT>
static inline void mp_cu_conv2d(void *y, const void *x, const void *w, const void *bias, int64_t N,
                                int64_t C, int64_t H, int64_t W, int64_t F, int64_t k,
                                int64_t stride, int64_t pad)
{
    MpCuImg g = mp_cu_img(N, C, H, W, k, stride, pad);
    int64_t ckk = C * k * k, ohw = g.OH * g.OW, n = N * ckk * ohw;
    void *col = mp_cu_ws(n * mp_cu_dt_size(XT));
    mp_cu_go("conv2d", mp_cu_k_im2col<XT, XT>, mp_cu_blocks(n, 256), 256, col, x, g, n, 1);
    if (bias)
        mp_cu_go("conv2d", mp_cu_k_fill_bias<YT, BT>, mp_cu_blocks(N * F * ohw, 256), 256, y, bias,
                 N * F * ohw, F, ohw);
    MpCuGemm m = mp_cu_gemm_of(0, 0, F, ohw, ckk, 1.0f, w, WT, ckk, col, XT, ohw,
                               bias ? 1.0f : 0.0f, y, YT, ohw);
    m.batch = N;
    m.sb = ckk * ohw;
    m.sc = F * ohw;
    mp_cu_gemm(&m);
}

/* dcol[n] = w^T [Ckk, F] @ dy[n] [F, OH OW] in f32, then col2im sums it into dx */
template <int DXT, int DYT, int WT>
static inline void mp_cu_conv2d_dx(void *dx, const void *dy, const void *w, int64_t N, int64_t C,
                                   int64_t H, int64_t W, int64_t F, int64_t k, int64_t stride,
                                   int64_t pad)
{
    MpCuImg g = mp_cu_img(N, C, H, W, k, stride, pad);
    int64_t ckk = C * k * k, ohw = g.OH * g.OW;
    float *dcol = (float *)mp_cu_ws(N * ckk * ohw * 4);
    MpCuGemm m = mp_cu_gemm_of(1, 0, ckk, ohw, F, 1.0f, w, WT, ckk, dy, DYT, ohw, 0.0f, dcol,
                               MP_F32, ohw);
    m.batch = N;
    m.sb = F * ohw;
    m.sc = ckk * ohw;
    mp_cu_gemm(&m);
    mp_cu_go("conv2d_dx", mp_cu_k_col2im<DXT>, mp_cu_blocks(N * C * H * W, 256), 256, dx,
             (const float *)dcol, g, N * C * H * W);
}

/* dw [F, Ckk] = dy as [F, N OH OW] @ (x's im2col as [Ckk, N OH OW])^T + beta dw */
template <int DWT, int DYT, int XT>
static inline void mp_cu_conv2d_dw(void *dw, const void *dy, const void *x, int64_t N, int64_t C,
                                   int64_t H, int64_t W, int64_t F, int64_t k, int64_t stride,
                                   int64_t pad, float beta)
{
    MpCuImg g = mp_cu_img(N, C, H, W, k, stride, pad);
    int64_t ckk = C * k * k, ohw = g.OH * g.OW, ncol = ckk * N * ohw, ndy = F * N * ohw;
    int64_t cbytes = mp_cu_round_up(ncol * mp_cu_dt_size(XT));
    unsigned char *ws = mp_cu_ws(cbytes + ndy * mp_cu_dt_size(DYT));
    void *col = ws, *dyp = ws ? ws + cbytes : NULL;
    MpCuView v;                                       /* dy [N][F][ohw] as [F][N][ohw] */
    v.rank = 0;
    mp_cu_view_push(&v, F, ohw);
    mp_cu_view_push(&v, N, F * ohw);
    mp_cu_view_push(&v, ohw, 1);
    mp_cu_go("conv2d_dw", mp_cu_k_im2col<XT, XT>, mp_cu_blocks(ncol, 256), 256, col, x, g, ncol, 0);
    mp_cu_gather<DYT, DYT>(dyp, dy, v);
    MpCuGemm m = mp_cu_gemm_of(0, 1, F, ckk, N * ohw, 1.0f, dyp, DYT, N * ohw, col, XT, N * ohw,
                               beta, dw, DWT, ckk);
    mp_cu_gemm(&m);
}

/* ---- pooling ------------------------------------------------------------------------------ */

template <int YT, int XT>
static __global__ void mp_cu_k_pool(void *y, const void *x, MpCuImg g, int64_t n, int is_max)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t at;
        mp_cu_st(y, YT, i, is_max ? mp_cu_pool_max(&g, x, XT, i, &at) : mp_cu_pool_avg(&g, x, XT, i));
    }
}

template <int DXT, int DYT, int XT>
static __global__ void mp_cu_k_pool_grad(void *dx, const void *dy, const void *x, MpCuImg g,
                                         int64_t n, int is_max)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        mp_cu_st(dx, DXT, i, mp_cu_pool_grad_at(&g, dy, DYT, x, XT, i, is_max));
}

template <int YT, int XT>
static inline void mp_cu_max_pool2d(void *y, const void *x, int64_t N, int64_t C, int64_t H,
                                    int64_t W, int64_t k, int64_t stride)
{
    MpCuImg g = mp_cu_img(N, C, H, W, k, stride, 0);
    int64_t n = N * C * g.OH * g.OW;
    mp_cu_go("max_pool2d", mp_cu_k_pool<YT, XT>, mp_cu_blocks(n, 256), 256, y, x, g, n, 1);
}

template <int YT, int XT>
static inline void mp_cu_avg_pool2d(void *y, const void *x, int64_t N, int64_t C, int64_t H,
                                    int64_t W, int64_t k, int64_t stride)
{
    MpCuImg g = mp_cu_img(N, C, H, W, k, stride, 0);
    int64_t n = N * C * g.OH * g.OW;
    mp_cu_go("avg_pool2d", mp_cu_k_pool<YT, XT>, mp_cu_blocks(n, 256), 256, y, x, g, n, 0);
}

template <int DXT, int DYT, int XT>
static inline void mp_cu_max_pool2d_grad(void *dx, const void *dy, const void *x, int64_t N,
                                         int64_t C, int64_t H, int64_t W, int64_t k, int64_t stride)
{
    MpCuImg g = mp_cu_img(N, C, H, W, k, stride, 0);
    mp_cu_go("max_pool2d_grad", mp_cu_k_pool_grad<DXT, DYT, XT>, mp_cu_blocks(N * C * H * W, 256),
             256, dx, dy, x, g, N * C * H * W, 1);
}

template <int DXT, int DYT>
static inline void mp_cu_avg_pool2d_grad(void *dx, const void *dy, int64_t N, int64_t C, int64_t H,
                                         int64_t W, int64_t k, int64_t stride)
{
    MpCuImg g = mp_cu_img(N, C, H, W, k, stride, 0);
    mp_cu_go("avg_pool2d_grad", mp_cu_k_pool_grad<DXT, DYT, MP_F32>,
             mp_cu_blocks(N * C * H * W, 256), 256, dx, dy, (const void *)NULL, g, N * C * H * W, 0);
}

/* ---- embedding -------------------------------------------------------------------------------- */

template <int YT, int WT>
static __global__ void mp_cu_k_embedding(void *y, const int32_t *ids, const void *w, int64_t n,
                                         int64_t vocab, int64_t dim)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * dim;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t id = ids[i / dim];
        float v = id >= 0 && id < vocab ? mp_cu_ld(w, WT, id * dim + i % dim) : NAN;
        mp_cu_st(y, YT, i, v);
    }
}

template <int YT, int WT>
static inline void mp_cu_embedding(void *y, const int32_t *ids, const void *w, int64_t n,
                                   int64_t vocab, int64_t dim)
{
    mp_cu_go("embedding", mp_cu_k_embedding<YT, WT>, mp_cu_blocks(n * dim, 256), 256, y, ids, w, n,
             vocab, dim);
}

template <int DWT, int DYT>
static __global__ void mp_cu_k_embedding_dw(void *dw, const void *dy, const int32_t *ids, int64_t n,
                                            int64_t nw, int64_t dim, float beta)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nw;
         i += (int64_t)gridDim.x * blockDim.x)
        mp_cu_st_beta(dw, DWT, i, mp_cu_embedding_dw_at(dy, DYT, ids, n, dim, i), beta);
}

template <int DWT, int DYT>
static inline void mp_cu_embedding_dw(void *dw, const void *dy, const int32_t *ids, int64_t n,
                                      int64_t vocab, int64_t dim, float beta)
{
    mp_cu_go("embedding_dw", mp_cu_k_embedding_dw<DWT, DYT>, mp_cu_blocks(vocab * dim, 128), 128,
             dw, dy, ids, n, vocab * dim, dim, beta);
}

/* ---- normalisation: a block per row (layer norm) or channel (batch norm) -------------------- */

/* Mean and 1/std of set `i` (two passes: the mean, then squared deviations). */
template <int XT>
static __device__ void mp_cu_norm_stats_of(const MpCuNorm *g, const void *x, int64_t base,
                                           float eps, float *mean, float *rstd)
{
    double s = mp_cu_block_sum(mp_cu_norm_sum(g, x, XT, base, 0.0, threadIdx.x, blockDim.x, 0));
    double mu = s / (double)g->count;
    double q = mp_cu_block_sum(mp_cu_norm_sum(g, x, XT, base, mu, threadIdx.x, blockDim.x, 1));
    mp_cu_norm_stats(s, q, g->count, eps, mean, rstd);
}

template <int YT, int XT, int WT, int BT>
static __global__ void mp_cu_k_layer_norm(void *y, const void *x, const void *w, const void *b,
                                          int64_t rows, int64_t dim, float eps)
{
    MpCuNorm g = {dim, dim, 0};
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float mean, rstd;
        mp_cu_norm_stats_of<XT>(&g, x, r * dim, eps, &mean, &rstd);
        mp_cu_norm_put(&g, y, YT, x, XT, w, WT, b, BT, 1, 0, r * dim, mean, rstd, threadIdx.x,
                       blockDim.x);
    }
}

template <int YT, int XT, int WT, int BT>
static inline void mp_cu_layer_norm(void *y, const void *x, const void *w, const void *b,
                                    int64_t rows, int64_t dim, float eps)
{
    mp_cu_go("layer_norm", mp_cu_k_layer_norm<YT, XT, WT, BT>, mp_cu_blocks(rows, 1),
             mp_cu_row_threads(dim), y, x, w, b, rows, dim, eps);
}

template <int DXT, int DYT, int XT, int WT>
static __global__ void mp_cu_k_layer_norm_dx(void *dx, const void *dy, const void *x, const void *w,
                                             int64_t rows, int64_t dim, float eps)
{
    MpCuNorm g = {dim, dim, 0};
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float mean, rstd;
        double s1, s2;
        mp_cu_norm_stats_of<XT>(&g, x, r * dim, eps, &mean, &rstd);
        mp_cu_norm_grad_sums(&g, dy, DYT, x, XT, w, WT, 1, 0, r * dim, mean, rstd, threadIdx.x,
                             blockDim.x, &s1, &s2);
        s1 = mp_cu_block_sum(s1);
        s2 = mp_cu_block_sum(s2);
        mp_cu_norm_grad_put(&g, dx, DXT, dy, DYT, x, XT, w, WT, 1, 0, r * dim, mean, rstd, s1, s2,
                            threadIdx.x, blockDim.x);
    }
}

template <int DXT, int DYT, int XT, int WT>
static inline void mp_cu_layer_norm_dx(void *dx, const void *dy, const void *x, const void *w,
                                       int64_t rows, int64_t dim, float eps)
{
    mp_cu_go("layer_norm_dx", mp_cu_k_layer_norm_dx<DXT, DYT, XT, WT>, mp_cu_blocks(rows, 1),
             mp_cu_row_threads(dim), dx, dy, x, w, rows, dim, eps);
}

/* Per-row (mean, rstd) into st, then a block per column sums dy * xhat. */
template <int XT>
static __global__ void mp_cu_k_row_stats(float *st, const void *x, int64_t rows, int64_t dim,
                                         float eps)
{
    MpCuNorm g = {dim, dim, 0};
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        float mean, rstd;
        mp_cu_norm_stats_of<XT>(&g, x, r * dim, eps, &mean, &rstd);
        if (threadIdx.x == 0) {
            st[2 * r] = mean;
            st[2 * r + 1] = rstd;
        }
    }
}

template <int DWT, int DYT, int XT>
static __global__ void mp_cu_k_layer_norm_dw(void *dw, const void *dy, const void *x,
                                             const float *st, int64_t rows, int64_t dim, float beta)
{
    for (int64_t k = blockIdx.x; k < dim; k += gridDim.x) {
        double s = mp_cu_block_sum(mp_cu_ln_dw_part(dy, DYT, x, XT, st, rows, dim, k, threadIdx.x,
                                                    blockDim.x));
        if (threadIdx.x == 0)
            mp_cu_st_beta(dw, DWT, k, (float)s, beta);
    }
}

template <int DWT, int DYT, int XT>
static inline void mp_cu_layer_norm_dw(void *dw, const void *dy, const void *x, int64_t rows,
                                       int64_t dim, float eps, float beta)
{
    float *st = (float *)mp_cu_ws(rows * 2 * (int64_t)sizeof(float));
    mp_cu_go("layer_norm_dw", mp_cu_k_row_stats<XT>, mp_cu_blocks(rows, 1), mp_cu_row_threads(dim),
             st, x, rows, dim, eps);
    mp_cu_go("layer_norm_dw", mp_cu_k_layer_norm_dw<DWT, DYT, XT>, mp_cu_blocks(dim, 1),
             mp_cu_row_threads(rows), dw, dy, x, (const float *)st, rows, dim, beta);
}

/* Batch norm over x [N, C, S]: channel c is the set; running statistics
 * are updated (torch: unbiased variance) when training, used otherwise. */
template <int YT, int XT, int WT, int BT>
static __global__ void mp_cu_k_batch_norm(void *y, const void *x, const void *w, const void *b,
                                          float *rmean, float *rvar, int64_t N, int64_t C, int64_t S,
                                          float momentum, float eps, int training)
{
    MpCuNorm g = {N * S, S, C * S};
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        float mean, rstd;
        if (training) {
            double s = mp_cu_block_sum(mp_cu_norm_sum(&g, x, XT, c * S, 0.0, threadIdx.x,
                                                      blockDim.x, 0));
            double mu = s / (double)g.count;
            double q = mp_cu_block_sum(mp_cu_norm_sum(&g, x, XT, c * S, mu, threadIdx.x,
                                                      blockDim.x, 1));
            mp_cu_norm_stats(s, q, g.count, eps, &mean, &rstd);
            if (threadIdx.x == 0) {
                double unbiased = g.count > 1 ? q / (double)(g.count - 1) : q;
                rmean[c] = (1.0f - momentum) * rmean[c] + momentum * mean;
                rvar[c] = (1.0f - momentum) * rvar[c] + momentum * (float)unbiased;
            }
        } else {
            mean = rmean[c];
            rstd = (float)(1.0 / sqrt((double)rvar[c] + (double)eps));
        }
        mp_cu_norm_put(&g, y, YT, x, XT, w, WT, b, BT, 0, c, c * S, mean, rstd, threadIdx.x,
                       blockDim.x);
    }
}

template <int YT, int XT, int WT, int BT>
static inline void mp_cu_batch_norm(void *y, const void *x, const void *w, const void *b,
                                    float *rmean, float *rvar, int64_t N, int64_t C, int64_t S,
                                    float momentum, float eps, int training)
{
    mp_cu_go("batch_norm", mp_cu_k_batch_norm<YT, XT, WT, BT>, mp_cu_blocks(C, 1), 256, y, x, w, b,
             rmean, rvar, N, C, S, momentum, eps, training);
}

template <int DXT, int DYT, int XT, int WT>
static __global__ void mp_cu_k_batch_norm_dx(void *dx, const void *dy, const void *x, const void *w,
                                             int64_t N, int64_t C, int64_t S, float eps)
{
    MpCuNorm g = {N * S, S, C * S};
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        float mean, rstd;
        double s1, s2;
        mp_cu_norm_stats_of<XT>(&g, x, c * S, eps, &mean, &rstd);
        mp_cu_norm_grad_sums(&g, dy, DYT, x, XT, w, WT, 0, c, c * S, mean, rstd, threadIdx.x,
                             blockDim.x, &s1, &s2);
        s1 = mp_cu_block_sum(s1);
        s2 = mp_cu_block_sum(s2);
        mp_cu_norm_grad_put(&g, dx, DXT, dy, DYT, x, XT, w, WT, 0, c, c * S, mean, rstd, s1, s2,
                            threadIdx.x, blockDim.x);
    }
}

template <int DXT, int DYT, int XT, int WT>
static inline void mp_cu_batch_norm_dx(void *dx, const void *dy, const void *x, const void *w,
                                       int64_t N, int64_t C, int64_t S, float eps)
{
    mp_cu_go("batch_norm_dx", mp_cu_k_batch_norm_dx<DXT, DYT, XT, WT>, mp_cu_blocks(C, 1), 256, dx,
             dy, x, w, N, C, S, eps);
}

template <int DWT, int DYT, int XT>
static __global__ void mp_cu_k_batch_norm_dw(void *dw, const void *dy, const void *x, int64_t N,
                                             int64_t C, int64_t S, float eps, float beta)
{
    MpCuNorm g = {N * S, S, C * S};
    for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
        float mean, rstd;
        double s1, s2;
        mp_cu_norm_stats_of<XT>(&g, x, c * S, eps, &mean, &rstd);
        mp_cu_norm_grad_sums(&g, dy, DYT, x, XT, NULL, MP_F32, 0, c, c * S, mean, rstd,
                             threadIdx.x, blockDim.x, &s1, &s2);
        s2 = mp_cu_block_sum(s2);
        if (threadIdx.x == 0)
            mp_cu_st_beta(dw, DWT, c, (float)s2, beta);
    }
}

template <int DWT, int DYT, int XT>
static inline void mp_cu_batch_norm_dw(void *dw, const void *dy, const void *x, int64_t N,
                                       int64_t C, int64_t S, float eps, float beta)
{
    mp_cu_go("batch_norm_dw", mp_cu_k_batch_norm_dw<DWT, DYT, XT>, mp_cu_blocks(C, 1), 256, dw, dy,
             x, N, C, S, eps, beta);
}

/* ---- attention: q, k, v [BH, T, D]; scores recomputed by each op ------------------------------ */

/* Row i of head h: s = scores [T] (f32), p/ds = [T] in the product type. */
static __global__ void mp_cu_k_attn_probs(void *p, int pdt, const float *s, int64_t rows, int64_t T,
                                          int causal)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t i = r % T, len = causal ? i + 1 : T;
        const float *row = s + r * T;
        float m = mp_cu_block_max(mp_cu_row_max(row, MP_F32, 0, len, 1, threadIdx.x, blockDim.x));
        double sum = mp_cu_block_sum(mp_cu_row_sumexp(row, MP_F32, 0, len, 1, m, threadIdx.x,
                                                      blockDim.x));
        mp_cu_attn_row((char *)p + r * T * mp_cu_dt_size(pdt), pdt, row, T, i, causal, m, sum,
                       threadIdx.x, blockDim.x);
    }
}

static __global__ void mp_cu_k_attn_ds(void *ds, int dsdt, const float *s, const float *dp,
                                       int64_t rows, int64_t T, int causal)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t i = r % T, len = causal ? i + 1 : T;
        const float *row = s + r * T, *drow = dp + r * T;
        float m = mp_cu_block_max(mp_cu_row_max(row, MP_F32, 0, len, 1, threadIdx.x, blockDim.x));
        double sum = mp_cu_block_sum(mp_cu_row_sumexp(row, MP_F32, 0, len, 1, m, threadIdx.x,
                                                      blockDim.x));
        double dot = mp_cu_block_sum(mp_cu_attn_dot(row, drow, T, i, causal, m, sum, threadIdx.x,
                                                    blockDim.x));
        mp_cu_attn_ds_row((char *)ds + r * T * mp_cu_dt_size(dsdt), dsdt, row, drow, T, i, causal,
                          m, sum, dot, threadIdx.x, blockDim.x);
    }
}

/* Workspace of the attention ops: scores and dP in f32, P or dS in cdt. */
typedef struct MpCuAttn {
    float *s, *dp;
    void *p;
    int64_t BH, T, D;
    float scale;
} MpCuAttn;

static inline MpCuAttn mp_cu_attn_ws(int64_t BH, int64_t T, int64_t D, int cdt)
{
    MpCuAttn a;
    int64_t n = BH * T * T, f = mp_cu_round_up(n * 4);
    unsigned char *ws = mp_cu_ws(2 * f + n * mp_cu_dt_size(cdt));
    a.s = (float *)ws;
    a.dp = ws ? (float *)(ws + f) : NULL;
    a.p = ws ? ws + 2 * f : NULL;
    a.BH = BH;
    a.T = T;
    a.D = D;
    a.scale = (float)(1.0 / sqrt((double)D));
    return a;
}

/* C[b] = alpha op(A[b]) op(B[b]) over the heads, [T or D] matrices */
static inline void mp_cu_attn_gemm(const MpCuAttn *a, int ta, int tb, int64_t M, int64_t N,
                                   int64_t K, float alpha, const void *A, int adt, const void *B,
                                   int bdt, void *C, int cdt)
{
    MpCuGemm g = mp_cu_gemm_of(ta, tb, M, N, K, alpha, A, adt, ta ? M : K, B, bdt, tb ? K : N, 0.0f,
                               C, cdt, N);
    g.batch = a->BH;
    g.sa = M * K;
    g.sb = K * N;
    g.sc = M * N;
    mp_cu_gemm(&g);
}

/* scores = scale q k^T, then P = softmax (masked), rounded to cdt */
template <int QT, int KT>
static inline void mp_cu_attn_probs(const MpCuAttn *a, const void *q, const void *k, int causal,
                                    int cdt)
{
    mp_cu_attn_gemm(a, 0, 1, a->T, a->T, a->D, a->scale, q, QT, k, KT, a->s, MP_F32);
    mp_cu_go("attention", mp_cu_k_attn_probs, mp_cu_blocks(a->BH * a->T, 1),
             mp_cu_row_threads(a->T), a->p, cdt, (const float *)a->s, a->BH * a->T, a->T, causal);
}

template <int YT, int QT, int KT, int VT>
static inline void mp_cu_attention(void *y, const void *q, const void *k, const void *v,
                                   int64_t BH, int64_t T, int64_t D, int causal, int cdt)
{
    MpCuAttn a = mp_cu_attn_ws(BH, T, D, cdt);
    mp_cu_attn_probs<QT, KT>(&a, q, k, causal, cdt);
    mp_cu_attn_gemm(&a, 0, 0, T, D, T, 1.0f, a.p, cdt, v, VT, y, YT);
}

template <int DT, int DYT, int QT, int KT, int VT>
static inline void mp_cu_attention_dv(void *dv, const void *dy, const void *q, const void *k,
                                      const void *v, int64_t BH, int64_t T, int64_t D, int causal,
                                      int cdt)
{
    MpCuAttn a = mp_cu_attn_ws(BH, T, D, cdt);
    (void)v;
    mp_cu_attn_probs<QT, KT>(&a, q, k, causal, cdt);
    mp_cu_attn_gemm(&a, 1, 0, T, D, T, 1.0f, a.p, cdt, dy, DYT, dv, DT);   /* P^T dy */
}

/* dS = P (dP - rowsum(dP P)), dP = dy v^T; rounded to cdt into a.p */
template <int DYT, int QT, int KT, int VT>
static inline void mp_cu_attn_ds(const MpCuAttn *a, const void *dy, const void *q, const void *k,
                                 const void *v, int causal, int cdt)
{
    mp_cu_attn_gemm(a, 0, 1, a->T, a->T, a->D, a->scale, q, QT, k, KT, a->s, MP_F32);
    mp_cu_attn_gemm(a, 0, 1, a->T, a->T, a->D, 1.0f, dy, DYT, v, VT, a->dp, MP_F32);
    mp_cu_go("attention_grad", mp_cu_k_attn_ds, mp_cu_blocks(a->BH * a->T, 1),
             mp_cu_row_threads(a->T), a->p, cdt, (const float *)a->s, (const float *)a->dp,
             a->BH * a->T, a->T, causal);
}

template <int DT, int DYT, int QT, int KT, int VT>
static inline void mp_cu_attention_dq(void *dq, const void *dy, const void *q, const void *k,
                                      const void *v, int64_t BH, int64_t T, int64_t D, int causal,
                                      int cdt)
{
    MpCuAttn a = mp_cu_attn_ws(BH, T, D, cdt);
    mp_cu_attn_ds<DYT, QT, KT, VT>(&a, dy, q, k, v, causal, cdt);
    mp_cu_attn_gemm(&a, 0, 0, T, D, T, a.scale, a.p, cdt, k, KT, dq, DT);     /* scale dS k */
}

template <int DT, int DYT, int QT, int KT, int VT>
static inline void mp_cu_attention_dk(void *dk, const void *dy, const void *q, const void *k,
                                      const void *v, int64_t BH, int64_t T, int64_t D, int causal,
                                      int cdt)
{
    MpCuAttn a = mp_cu_attn_ws(BH, T, D, cdt);
    mp_cu_attn_ds<DYT, QT, KT, VT>(&a, dy, q, k, v, causal, cdt);
    mp_cu_attn_gemm(&a, 1, 0, T, D, T, a.scale, a.p, cdt, q, QT, dk, DT);     /* scale dS^T q */
}

#endif
