/* mp_kernels.h - the arithmetic of every operation, forward and backward.
 *
 * The generated trainer makes one call per IR node, to exactly one of the
 * functions listed here. Files: mp_kernels.h (storage types, elementwise,
 * reductions, softmax, losses), mp_kernels_gemm.h (mp_gemm, matmul,
 * linear), mp_kernels_nn.h (conv, pools, embedding, norms, attention).
 *
 * Rules every kernel keeps (docs/DESIGN.md, PRECISION.md):
 * - Each tensor argument is a pointer and its storage type (`int` MP_F32,
 *   MP_F16, MP_BF16, MP_I32, MP_U8 of mp_model.h; f16/bf16 are uint16_t).
 *   Inputs are loaded in their storage type, all arithmetic is f32 (sums
 *   over many terms accumulate in double on the CPU), and each output
 *   element is rounded once, when it is stored in its storage type.
 * - Outputs come first, then inputs, then sizes, then attributes. Sizes are
 *   int64_t element counts; tensors are dense, row-major (C order).
 * - `beta` (where present): out = result + beta * out, so a gradient can be
 *   added straight into an f32 gradient buffer (beta = 1) or overwrite it
 *   (beta = 0; the old contents are then never read, NaN included).
 * - Outputs never alias inputs, except the elementwise kernels (x -> y with
 *   the same storage type may be in place).
 *
 * Elementwise (n elements)                        [mp_kernels.h]
 *   mp_k_cast(y,ydt, x,xdt, n)                    y = x, converted
 *   mp_k_fill(y,ydt, v, n)                        y = v (constants, zeroing)
 *   mp_k_scale(y,ydt, x,xdt, s, n)                y = s*x (loss_scale)
 *   mp_k_acc(float *y, x,xdt, s, n)               y += s*x (f32 gradients)
 *   mp_k_all_finite(x,xdt, n) -> int              1 if no inf/NaN
 *   mp_k_{neg,relu,gelu,tanh,sigmoid,silu,exp,log,sqrt,rsqrt}(y,ydt, x,xdt, n)
 *   mp_k_{relu,gelu,silu}_grad(dx,dxdt, dy,dydt, x,xdt, n)       from x
 *   mp_k_{tanh,sigmoid,sqrt,rsqrt}_grad(dx,dxdt, dy,dydt, y,ydt, n) from y
 *   mp_k_dropout(y,ydt, x,xdt, n, p, seed, step, micro, node)
 *   mp_k_dropout_grad(dx,dxdt, dy,dydt, n, p, seed, step, micro, node)
 *       keep element i iff mp_dropout_u(key, i) >= p, key from (seed, step,
 *       micro, node id); kept values scaled by 1/(1-p); p <= 0: copy
 *   mp_k_{randn,rand}(y,ydt, n, seed, step, micro, node)   y[i] = standard
 *       normal / uniform [0, 1) value i of the RNG of (seed, step, micro, node)
 *   mp_k_{add,sub,mul,div}(y,ydt,yrank,yshape, a,adt,arank,ashape,
 *                          b,bdt,brank,bshape)  NumPy broadcasting, rank <= 8
 *   mp_k_transpose(y,ydt, x,xdt, rank, xshape, perm)  y = x.permute(perm)
 * Structural copies (the bits when the types agree)
 *   mp_k_slice(y,ydt, x,xdt, outer,xlen,inner, start,ylen)   slice, chunk
 *       y[o,j,i] = x[o,start+j,i]
 *   mp_k_place(y,ydt, x,xdt, outer,ylen,inner, start,xlen, zero)
 *       y[o,start+j,i] = x[o,j,i]; concat (per operand), slice_grad (zero)
 *   mp_k_broadcast(y,ydt,yrank,yshape, x,xdt,xrank,xshape)  expand
 *   mp_k_arange(y,ydt, n)                          y[i] = i
 * Reductions; x viewed as [outer, len, inner], reduced over len
 *   mp_k_sum(y,ydt, x,xdt, outer,len,inner)       y[outer, inner]
 *   mp_k_mean(y,ydt, x,xdt, outer,len,inner)
 *   mp_k_expand(y,ydt, dy,dydt, outer,len,inner, scale)  y[o,l,i] = s*dy[o,i]
 *       (reduce_grad: the gradient of sum and mean)
 *   mp_k_sum_to(y,ydt,yrank,yshape, dy,dydt,dyrank,dyshape, beta)
 *       dy summed down to y's shape (y broadcasts to dy's)
 *   mp_k_channel_sum(y,ydt, x,xdt, N,C,S, beta)   x[N,C,S] -> y[C]
 * Softmax, losses, metrics
 *   mp_k_softmax(y,ydt, x,xdt, outer,len,inner)   over len; also log_softmax
 *   mp_k_softmax_grad(dx,dxdt, dy,dydt, y,ydt, outer,len,inner); log_softmax_grad
 *   mp_k_cross_entropy(loss,ldt, x,xdt, labels,labdt, rows, C, ignore, eps)
 *       mean over rows of logsumexp(x[r]) - x[r, label]; scalar
 *   mp_k_cross_entropy_grad(dx,dxdt, dl,dldt, x,xdt, labels,labdt, rows, C, ignore, eps)
 *       dl * (softmax(x) - onehot) / rows; dl is a scalar tensor
 *   mp_k_mse(loss,ldt, p,pdt, t,tdt, n)            mean (p - t)^2
 *   mp_k_mse_grad(dx,dxdt, dl,dldt, p,pdt, t,tdt, n)   dl * 2 (p - t) / n
 *   mp_k_accuracy(out,odt, x,xdt, labels,labdt, rows, C)  mean(argmax == label)
 *   labels (and embedding ids) are of any integer type (labdt MP_I32,
 *   MP_U8, MP_U16). cross_entropy takes (..., ignore, eps) after C: rows
 *   whose label is `ignore` (MP_NO_IGNORE: none) add nothing and the mean is
 *   over the others; eps = label_smoothing, as torch
 * Additions (at the end of the files)
 *   mp_k_{abs,sin,cos,gelu_tanh}(y,ydt, x,xdt, n); their _grad(dx, dy, x, n)
 *   mp_k_{maximum,minimum,maximum_mask}(...) as add; maximum_mask(a, b) is
 *       1 where a > b, 1/2 where a == b, else 0 (maximum's gradient share)
 *   mp_k_clamp(y,ydt, x,xdt, n, lo, hi); mp_k_clamp_grad(dx, dy, x, n, lo, hi)
 *   mp_k_pow(y,ydt, x,xdt, n, p); mp_k_pow_grad(dx, dy, x, n, p)
 *   mp_k_rms_norm(y,ydt, x,xdt, w,wdt, rows, dim, eps), _dx, _dw as layer_norm
 *   mp_k_{gt,lt,ge,le,eq,ne}(...) as add: 1 or 0, stored as the output's
 *       type (a u8 mask); mp_k_where_{da,db}(dx, dy, cond) as add
 *   mp_k_where(y,ydt,yrank,yshape, c,..., a,..., b,...)  a where c != 0 else b
 *   mp_k_extremum(y,ydt, x,xdt, outer,len,inner, sign, index)   max (sign 1),
 *       min (-1) over len; index: the i32 position (argmax, argmin)
 *   mp_k_extremum_grad(dx,dxdt, dy,dydt, x,xdt, outer,len,inner, sign)
 *   mp_k_topk(y, x,xdt, outer,len,inner, k)   i32 positions of the k largest
 *       over len, largest first (ties: lower position first; NaN largest)
 *   mp_k_one_hot(y,ydt, ids,idt, n, classes)   u8 [n, classes]
 *   mp_k_gather(y,ydt, x,xdt, index,idt, rank, xsh, ish, axis)  torch.gather
 *   mp_k_gather_grad(dx,dxdt, dy,dydt, index,idt, rank, xsh, ish, axis)
 *   mp_k_cumsum(y,ydt, x,xdt, outer,len,inner, reverse)
 *   mp_k_rope(y,ydt, x,xdt, outer, P, inner, D, theta, half, sign)
 *       x viewed as [outer, P, inner] (P the positions, inner ending in the
 *       D features); sign -1 rotates back (the gradient)
 * Products                                        [mp_kernels_gemm.h]
 *   mp_gemm(ta,tb, M,N,K, alpha, A,adt,lda, B,bdt,ldb, beta, C,cdt,ldc)
 *       C = alpha op(A) op(B) + beta C, f32 accumulation, rounded once
 *   mp_k_matmul(y,ydt, a,adt, b,bdt, batch, M,N,K, ta,tb, stride_a, stride_b)
 *       y[i] = op(a[i]) op(b[i]), i < batch; a[i] at a + i*stride_a
 *       elements (0 = shared), same for b; y[i] [M,N] contiguous
 *   mp_k_matmul_tn(y,ydt, a,adt, b,bdt, R,K,N, beta)   y[K,N] = a[R,K]^T b[R,N]
 *   mp_k_linear(y,ydt, x,xdt, w,wdt, bias,bdt, M,N,K)   y[M,N] = x[M,K] w[N,K]^T
 *       + bias[N] (bias may be NULL)
 * Networks                                        [mp_kernels_nn.h]
 *   mp_k_conv2d(y,ydt, x,xdt, w,wdt, bias,bdt, N, conv)   conv = mp_conv_of(C,H,W,
 *       F,kh,kw, sh,sw, ph,pw, dh,dw, G, OH,OW): x[N,C,H,W], w[F,C/G,kh,kw],
 *       y[N,F,OH,OW]; groups, dilation, padding as torch's F.conv2d
 *   mp_k_conv2d_dx(dx,dxdt, dy,dydt, w,wdt, N, conv)
 *   mp_k_conv2d_dw(dw,dwdt, dy,dydt, x,xdt, N, conv, beta)
 *   mp_k_conv_transpose2d(y,ydt, x,xdt, w,wdt, bias,bdt, N, conv)   conv: the
 *       conv2d from y [N,C,H,W] to x [N,F,OH,OW]; w [F,C/G,kh,kw]
 *   mp_k_pad(y,ydt, x,xdt, outer, xs[4], ys[4], before[4], value)   the last
 *       four axes (xs -> ys), before[k] added to axis k's index (< 0 crops)
 *   mp_k_pad_mode(y,ydt, x,xdt, outer, xs, ys, before, mode)   reflect,
 *       replicate, circular (MP_PAD_*); mp_k_pad_grad(dx, dy, the same)
 *   mp_k_upsample(y,ydt, x,xdt, P,H,W, sh,sw, mode); _grad(dx, dy, ...)
 *   mp_k_group_norm(y,ydt, x,xdt, w,wdt, b,bdt, N,C,S, G, eps)   x[N,C,S]
 *   mp_k_group_norm_dx(dx,dxdt, dy,dydt, x,xdt, w,wdt, N,C,S, G, eps)
 *   mp_k_group_norm_dw(dw,dwdt, dy,dydt, x,xdt, N,C,S, G, eps, beta)
 *   mp_k_max_pool2d(y,ydt, x,xdt, N,C,H,W, k,stride,pad)
 *       OH = (H + 2 pad - k)/stride + 1, the padding never the maximum
 *   mp_k_max_pool2d_grad(dx,dxdt, dy,dydt, x,xdt, N,C,H,W, k,stride,pad)
 *   mp_k_avg_pool2d(y,ydt, x,xdt, N,C,H,W, k,stride,pad, incl)
 *       incl: torch's count_include_pad (divide by k k, else by the window's
 *       elements inside the image)
 *   mp_k_avg_pool2d_grad(dx,dxdt, dy,dydt, N,C,H,W, k,stride,pad, incl)
 *   mp_k_global_avg_pool(y,ydt, x,xdt, N,C,S)          S = H*W
 *   mp_k_global_avg_pool_grad(dx,dxdt, dy,dydt, N,C,S)
 *   mp_k_embedding(y,ydt, ids, w,wdt, n, vocab, dim)   y[n,dim] = w[ids[i]]
 *   mp_k_embedding_dw(dw,dwdt, dy,dydt, ids, n, vocab, dim)
 *   mp_k_embedding_dw_acc(grad, dy,dydt, ids, n, vocab, dim)   grad[ids[i]] += dy[i]
 *   mp_k_layer_norm(y,ydt, x,xdt, w,wdt, b,bdt, rows, dim, eps)
 *   mp_k_layer_norm_dx(dx,dxdt, dy,dydt, x,xdt, w,wdt, rows, dim, eps)
 *   mp_k_layer_norm_dw(dw,dwdt, dy,dydt, x,xdt, rows, dim, eps, beta)
 *   mp_k_batch_norm(y,ydt, x,xdt, w,wdt, b,bdt, float *rmean, float *rvar,
 *                   N,C,S, momentum, eps, training)    x[N,C,S] (S = H*W or 1)
 *   mp_k_batch_norm_dx(dx,dxdt, dy,dydt, x,xdt, w,wdt, N,C,S, eps)
 *   mp_k_batch_norm_dw(dw,dwdt, dy,dydt, x,xdt, N,C,S, eps, beta)
 *   mp_k_attention(y,ydt, q,qdt, k,kdt, v,vdt, BH,T,Tk,D, causal, cdt)
 *   mp_k_attention_grad(g,gdt, dy,dydt, q,qdt, k,kdt, v,vdt,
 *                       BH,T,Tk,D, causal, cdt)
 *       q, y [BH, T, D], k, v [BH, Tk, D]; cdt = the op's compute type
 *       (probabilities are rounded to it before the product with v);
 *       g [BH, T + 2Tk, D] holds dq, dk, dv of each head, from one
 *       recomputation of the probabilities (nothing is kept from forward)
 *
 * IR nodes (compiler/ops.def) to calls, where it is not one-to-one:
 *   const        a one-element f32 array, passed with rank 0 to add/sub/...
 *   reshape, flatten: no call (the same buffer); cast: mp_k_cast
 *   slice, chunk, slice_grad, concat around the axis a: outer = prod(d[:a]),
 *                inner = prod(d[a+1:]); chunk part k of n: start = k len/n
 *   matmul       [..., M, K] @ [K, N]: batch 1, M = product of the leading
 *                dims; batched [B.., M, K] @ [B.., K, N]: batch = prod(B..),
 *                stride_a = M K, stride_b = K N; ta/tb from ia[0]/ia[1]
 *   matmul_tn    R = product of the leading dims of both inputs
 *   linear       backward as autodiff writes it: dx = matmul(dy, w),
 *                dw = matmul_tn(dy, x), dbias = sum_to(dy)
 *   sum, mean, softmax, log_softmax, reduce_grad over axis a of shape d:
 *                outer = prod(d[:a]), len = d[a], inner = prod(d[a+1:]);
 *                over everything: (1, numel, 1)
 *   layer_norm   rows = product of all dims but the last, dim = the last
 *   batch_norm   NCHW: (N, C, H W); [B, C]: (B, C, 1); running_mean/var are
 *                the f32 MpParam values; training = MpRun.training
 *   cross_entropy, accuracy: rows = number of labels, C = last dim of logits
 *   dropout      node = the forward node's id (also in dropout_grad); when
 *                not training, mp_k_cast (or p = 0)
 *   loss_scale   mp_k_scale; --check-numerics: mp_k_all_finite after an op
 *
 * Threads: with -fopenmp the larger loops run in parallel (MP_OMP); the
 * results do not depend on the number of threads, except for mp_gemm
 * under MP_USE_CBLAS. Build flags: -DMP_USE_CBLAS (link -lopenblas) sends
 * products to cblas_sgemm; -DMP_GEMM_PORTABLE leaves out the x86 AVX2
 * micro-kernel. MP_HD functions are the per-element math, shared with the
 * CUDA kernels. */
#ifndef MP_KERNELS_H
#define MP_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mp_model.h"
#include "mp_half.h"
#include "mp_fp8.h"
#include "mp_vmath.h"

#ifdef _OPENMP
#include <omp.h>
#define MP_PRAGMA(...) _Pragma(#__VA_ARGS__)
#define MP_OMP(...) MP_PRAGMA(omp __VA_ARGS__)
static inline int mp_nthreads(void) { return omp_get_max_threads(); }
static inline int mp_thread(void) { return omp_get_thread_num(); }
#else
#define MP_OMP(...)
static inline int mp_nthreads(void) { return 1; }
static inline int mp_thread(void) { return 0; }
#endif

/* x86 (MP_X86, mp_cpu_level and the MP_CPU variable): mp_vmath.h. F16C
 * conversions round to nearest even and quiet NaNs exactly as mp_half.h
 * does, so the results are the same on every path. */
#ifdef MP_X86
enum { MP_CPU_AVX2_FMA, MP_CPU_F16C };
static inline int mp_cpu_has(int what)
{
    (void)what;
    return mp_cpu_level() >= MP_CPU_AVX2;
}

/* n contiguous f16 <-> f32, 8 at a time. */
__attribute__((target("avx,f16c")))
static inline void mp_f16_to_f32_f16c(const uint16_t *s, float *d, int64_t n)
{
    int64_t n8 = n / 8 * 8;
    for (int64_t i = 0; i < n8; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
    for (int64_t i = n8; i < n; i++) d[i] = mp_f16_to_f32(s[i]);
}

__attribute__((target("avx,f16c")))
static inline void mp_f32_to_f16_f16c(const float *s, uint16_t *d, int64_t n)
{
    int64_t n8 = n / 8 * 8;
    for (int64_t i = 0; i < n8; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (int64_t i = n8; i < n; i++) d[i] = mp_f32_to_f16(s[i]);
}

/* n contiguous bf16 <-> f32, 8 at a time, with mp_half.h's rounding (to
 * nearest even) and NaN quieting, in integer AVX2. */
MP_AVX2 static inline void mp_bf16_to_f32_avx2(const uint16_t *s, float *d, int64_t n)
{
    int64_t n8 = n / 8 * 8;
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    for (int64_t i = 0; i < n8; i += 8) {
        __m256i u = _mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i))), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        u = _mm256_or_si256(u, _mm256_and_si256(nan, _mm256_set1_epi32(0x00400000)));
        _mm256_storeu_ps(d + i, _mm256_castsi256_ps(u));
    }
    for (int64_t i = n8; i < n; i++) d[i] = mp_bf16_to_f32(s[i]);
}

MP_AVX2 static inline void mp_f32_to_bf16_avx2(const float *s, uint16_t *d, int64_t n)
{
    int64_t n8 = n / 8 * 8;
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1);
    for (int64_t i = 0; i < n8; i += 8) {
        __m256i x = _mm256_castps_si256(_mm256_loadu_ps(s + i));
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs), inf);
        __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
        __m256i r = _mm256_srli_epi32(
            _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd), 16);
        __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
        r = _mm256_blendv_epi8(r, q, nan);
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)(d + i), _mm256_castsi256_si128(p));
    }
    for (int64_t i = n8; i < n; i++) d[i] = mp_f32_to_bf16(s[i]);
}

/* x[0..n) rounded to f16 / bf16 in place, 8 at a time in registers (no
 * trip through memory), and, when d is not NULL, the 16-bit values stored
 * to d as well: the same bits as mp_f32_to_*_* followed by mp_*_to_f32_*.
 * n is a multiple of 8 (mp_round_st_n does the rest). */
__attribute__((target("avx,f16c")))
static inline void mp_round_f16_f16c(float *x, uint16_t *d, int64_t n)
{
    for (int64_t i = 0; i < n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if (d)
            _mm_storeu_si128((__m128i *)(d + i), h);
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
    }
}

/* bf16: to nearest even as mp_f32_to_bf16; a NaN keeps its top 16 bits and
 * is made quiet, as storing and reloading it does. */
MP_AVX2 static inline void mp_round_bf16_avx2(float *x, uint16_t *d, int64_t n)
{
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1), top = _mm256_set1_epi32((int)0xffff0000u);
    for (int64_t i = 0; i < n; i += 8) {
        __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs), inf);
        __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        __m256i r = _mm256_and_si256(
            _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd), top);
        __m256i q = _mm256_or_si256(_mm256_and_si256(u, top), _mm256_set1_epi32(0x00400000));
        r = _mm256_blendv_epi8(r, q, nan);
        if (d) {
            __m256i h = _mm256_srli_epi32(r, 16);
            __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08);
            _mm_storeu_si128((__m128i *)(d + i), _mm256_castsi256_si128(p));
        }
        _mm256_storeu_ps(x + i, _mm256_castsi256_ps(r));
    }
}
#endif

/* Loops over fewer elements than this run on one thread: a parallel
 * region costs a few microseconds while the team's threads still spin
 * (tens on a busy machine), more than such a loop gains. At 2^18 every
 * activation of examples/char_transformer.mp ([1024, 64], [1024, 256])
 * ran on one thread and 2 threads were no faster than 1 (25 ms a step);
 * at 2^15 its layer norms, GELU and residual adds share the work. Products
 * have their own threshold (mp_gemm). */
#ifndef MP_PAR_MIN
#define MP_PAR_MIN (1 << 15)
#endif

/* Elementwise work is done in chunks of MP_CHUNK f32 values on the stack. */
#define MP_CHUNK 512

/* Scratch memory for kernels. Running out is fatal: a trainer cannot go on
 * without its workspace, and the message says so rather than crashing. */
static inline void *mp_kalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "error: out of memory (kernel workspace of %zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static inline void *mp_kzalloc(size_t bytes)
{
    void *p = mp_kalloc(bytes);
    memset(p, 0, bytes);
    return p;
}

static inline int64_t mp_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t mp_max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* The geometry of one convolution (both programs, host and device): x [N,
 * C, H, W], weight [F, C / G, kh, kw], y [N, F, OH, OW]; output (oy, ox)
 * reads input (oy sh - ph + ky dh, ox sw - pw + kx dw) (ph, pw: the
 * padding before; after it may be larger, as torch's "same", which shows
 * only in OH, OW). Group g joins input channels [g C/G, (g+1) C/G) to
 * output channels [g F/G, (g+1) F/G). */
typedef struct MpConv {
    int64_t C, H, W, F, kh, kw, sh, sw, ph, pw, dh, dw, G, OH, OW;
} MpConv;

static inline MpConv mp_conv_of(int64_t C, int64_t H, int64_t W, int64_t F, int64_t kh,
                                int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                                int64_t dh, int64_t dw, int64_t G, int64_t OH, int64_t OW)
{
    MpConv v = {C, H, W, F, kh, kw, sh, sw, ph, pw, dh, dw, G, OH, OW};
    return v;
}

/* Depthwise: one input channel per group (each output channel f reads
 * channel f / (F / C) alone), run by direct kernels instead of products
 * (an ungrouped convolution of one channel stays a product). */
static inline MP_HD int mp_conv_depthwise(const MpConv *v) { return v->G == v->C && v->G > 1; }

/* ---- storage types ------------------------------------------------------ */

/* Element i of p, stored as dt, as an f32. */
static inline MP_HD float mp_ld(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case MP_F16:  return mp_f16_to_f32(((const uint16_t *)p)[i]);
    case MP_BF16: return mp_bf16_to_f32(((const uint16_t *)p)[i]);
    case MP_I32:  return (float)((const int32_t *)p)[i];
    case MP_U8:   return (float)((const uint8_t *)p)[i];
    case MP_U16:  return (float)((const uint16_t *)p)[i];
    default:      return ((const float *)p)[i];
    }
}

/* Element i of integer data (ids, labels: MP_I32, MP_U8 or MP_U16). */
static inline MP_HD int64_t mp_ld_id(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case MP_U8:  return ((const uint8_t *)p)[i];
    case MP_U16: return ((const uint16_t *)p)[i];
    default:     return ((const int32_t *)p)[i];
    }
}

/* cross_entropy's ignore_index when there is none: no label loads as it. */
#define MP_NO_IGNORE INT64_MIN

/* f32 -> integer storage: truncation toward zero as a C cast, saturated
 * (NaN -> 0) so that it is never undefined behaviour. */
static inline MP_HD int32_t mp_f32_to_i32(float v)
{
    if (!(v == v))
        return 0;
    if (v >= 2147483647.0f)
        return INT32_MAX;
    if (v <= -2147483648.0f)
        return INT32_MIN;
    return (int32_t)v;
}

static inline MP_HD uint8_t mp_f32_to_u8(float v)
{
    return !(v > 0.0f) ? 0 : v >= 255.0f ? 255 : (uint8_t)v;
}

static inline MP_HD uint16_t mp_f32_to_u16(float v)
{
    return !(v > 0.0f) ? 0 : v >= 65535.0f ? 65535 : (uint16_t)v;
}

/* Store v as element i of p in storage type dt: the one rounding. */
static inline MP_HD void mp_st(void *p, int dt, int64_t i, float v)
{
    switch (dt) {
    case MP_F16:  ((uint16_t *)p)[i] = mp_f32_to_f16(v); break;
    case MP_BF16: ((uint16_t *)p)[i] = mp_f32_to_bf16(v); break;
    case MP_I32:  ((int32_t *)p)[i] = mp_f32_to_i32(v); break;
    case MP_U8:   ((uint8_t *)p)[i] = mp_f32_to_u8(v); break;
    case MP_U16:  ((uint16_t *)p)[i] = mp_f32_to_u16(v); break;
    default:      ((float *)p)[i] = v; break;
    }
}

/* v rounded to TF32 (8 exponent bits, 10 mantissa bits: f32 with its low
 * 13 bits cleared), to nearest, ties to even, kept in an f32: a product's
 * operands under float32_matmul = "tf32" (PRECISION.md). Subnormals round
 * the same way; past TF32's largest value (0x1.ffcp127) a value rounds to
 * infinity; infinities stay; NaN stays NaN (made quiet, its sign kept). */
static inline MP_HD float mp_round_tf32(float v)
{
    uint32_t x = mp_f32_bits(v);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return mp_bits_f32((x | 0x00400000u) & 0xffffe000u);
    return mp_bits_f32((x + 0x0fffu + ((x >> 13) & 1u)) & 0xffffe000u);
}

/* float32_matmul = "tf32" (PRECISION.md): set by the C program's
 * model_setup() (the CUDA stand-in's products: mp_cu_blas_open). A product
 * whose operands are both f32 (stored so and not rounded to f16 / bf16)
 * then has them rounded to TF32 while packing, as cuBLAS's TF32 mode does
 * on the GPU; the sums stay f32. */
MP_STATE int mp_gemm_tf32;
/* --gradcheck (mp_train.h): products stay f32 whatever float32_matmul says,
 * on both programs: a difference quotient over a step smaller than TF32's
 * spacing would see rounded operands stand still. */
MP_STATE int mp_gemm_exact;

/* v rounded to type dt and read back: what storing it would keep (MP_TF32:
 * a rounding only, mp_round_tf32). */
static inline MP_HD float mp_round(float v, int dt)
{
    if (dt & MP_RND_FP8)
        return mp_fp8_round_fast(v * mp_rnd_scale(dt), mp_rnd_fmt(dt));
    switch (dt) {
    case MP_TF32: return mp_round_tf32(v);
    case MP_F16:  return mp_f16_to_f32(mp_f32_to_f16(v));
    case MP_BF16: return mp_bf16_to_f32(mp_f32_to_bf16(v));
    default:      return v;
    }
}

/* v, opaque to the optimiser. A fused chain (compiler/fuse.c) computes
 * several nodes in one function, each rounded to its storage type where the
 * unfused kernel stores it; this keeps the compiler from contracting one
 * node's product into the next node's sum (an FMA the unfused program,
 * whose nodes meet only through memory, never forms), so fused and unfused
 * results are bit-identical. Free: no instruction is emitted. */
static inline MP_HD float mp_fence(float v)
{
#if defined(__CUDA_ARCH__)
    return __fmul_rn(v, 1.0f);      /* never merged into a multiply-add */
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
    __asm__("" : "+x"(v));
    return v;
#elif defined(__GNUC__) || defined(__clang__)
    __asm__("" : "+m"(v));
    return v;
#else
    volatile float w = v;
    return w;
#endif
}

/* upsample along one axis (both programs): output o of an axis scaled by
 * s from n inputs reads inputs i0 and i1 with weights 1 - l and l. Nearest
 * (mode 0): i0 = i1 = o / s (torch's floor(o * (1/s)) for an integer s).
 * Bilinear, align_corners false (mode 1), as torch with a scale factor:
 * src = (o + 0.5) (1/s) - 0.5 in f32, at least 0; align_corners true
 * (mode 2): src = o (n - 1) / (n s - 1) in f32 (0 when n s = 1), as torch
 * (which then ignores the scale factor); i0 = floor(src), i1 = i0 + 1 but
 * at most n - 1. Either way the outputs that read input i lie in
 * [(i - 1) s, (i + 2) s) (mp_upsample_grad_at). */
static inline MP_HD void mp_up_src(int64_t o, int64_t s, int64_t n, int mode, int64_t *i0,
                                   int64_t *i1, float *l)
{
    if (!mode) {
        *i0 = *i1 = o / s;
        *l = 0.0f;
        return;
    }
    float src;
    if (mode == 2)
        src = n * s > 1 ? (float)(n - 1) / (float)(n * s - 1) * (float)o : 0.0f;
    else
        src = (float)(1.0 / (double)s) * ((float)o + 0.5f) - 0.5f;
    if (src < 0.0f)
        src = 0.0f;
    int64_t i = (int64_t)src;
    *i0 = i;
    *i1 = i < n - 1 ? i + 1 : i;
    *l = src - (float)i;
}

/* The weight of input i in output o along one axis (0 if o does not read
 * it). Outputs reading input i lie in [(i - 1) s, (i + 2) s). */
static inline MP_HD float mp_up_weight(int64_t o, int64_t s, int64_t n, int mode, int64_t i)
{
    int64_t i0, i1;
    float l;
    mp_up_src(o, s, n, mode, &i0, &i1, &l);
    return (i0 == i ? 1.0f - l : 0.0f) + (i1 == i ? l : 0.0f);
}

/* Element e of upsample's y [P, H sh, W sw] from x [P, H, W]. */
static inline MP_HD float mp_upsample_at(const void *x, int xdt, int64_t H, int64_t W, int64_t sh,
                                         int64_t sw, int mode, int64_t e)
{
    int64_t OW = W * sw, OH = H * sh, ox = e % OW, oy = e / OW % OH, p = e / (OW * OH);
    int64_t y0, y1, x0, x1;
    float ly, lx;
    mp_up_src(oy, sh, H, mode, &y0, &y1, &ly);
    mp_up_src(ox, sw, W, mode, &x0, &x1, &lx);
    const int64_t o = p * H * W;
    float a = (1.0f - lx) * mp_ld(x, xdt, o + y0 * W + x0) + lx * mp_ld(x, xdt, o + y0 * W + x1);
    float b = (1.0f - lx) * mp_ld(x, xdt, o + y1 * W + x0) + lx * mp_ld(x, xdt, o + y1 * W + x1);
    return (1.0f - ly) * a + ly * b;
}

/* Element e of upsample's input gradient dx [P, H, W]: the outputs that
 * read it, rows then columns in order, each times its two weights. */
static inline MP_HD float mp_upsample_grad_at(const void *dy, int dydt, int64_t H, int64_t W,
                                              int64_t sh, int64_t sw, int mode, int64_t e)
{
    int64_t OW = W * sw, OH = H * sh, ix = e % W, iy = e / W % H, p = e / (W * H);
    int64_t ylo = (iy - 1) * sh, yhi = (iy + 2) * sh, xlo = (ix - 1) * sw, xhi = (ix + 2) * sw;
    float s = 0.0f;
    for (int64_t oy = ylo < 0 ? 0 : ylo; oy < yhi && oy < OH; oy++) {
        float wy = mp_up_weight(oy, sh, H, mode, iy);
        if (wy == 0.0f)
            continue;
        float r = 0.0f;
        for (int64_t ox = xlo < 0 ? 0 : xlo; ox < xhi && ox < OW; ox++) {
            float wx = mp_up_weight(ox, sw, W, mode, ix);
            if (wx != 0.0f)
                r += wx * mp_ld(dy, dydt, (p * OH + oy) * OW + ox);
        }
        s += wy * r;
    }
    return s;
}

/* pad's modes other than constant (both programs), along one axis of n
 * inputs padded by b before: output j reads input mp_pad_src. Reflect (1):
 * mirrored about the edge, the edge not repeated (pads < n); replicate
 * (2): the edge repeated; circular (3): wrapped around (pads <= n). */
enum { MP_PAD_CONSTANT, MP_PAD_REFLECT, MP_PAD_REPLICATE, MP_PAD_CIRCULAR };

static inline MP_HD int64_t mp_pad_src(int mode, int64_t j, int64_t b, int64_t n)
{
    int64_t q = j - b;
    if (mode == MP_PAD_REFLECT) {
        q = q < 0 ? -q : q;
        return q >= n ? 2 * (n - 1) - q : q;
    }
    if (mode == MP_PAD_REPLICATE)
        return q < 0 ? 0 : q >= n ? n - 1 : q;
    return (q % n + n) % n;
}

/* The outputs j in [0, Y) of one axis that read input i, as 3 ranges
 * [lo, hi) in increasing order, unused ones empty (lo = hi): fixed slots,
 * so that a CUDA kernel keeps them in registers (no stack frame). */
static inline MP_HD void mp_pad_readers(int mode, int64_t i, int64_t b, int64_t n, int64_t Y,
                                        int64_t *lo, int64_t *hi)
{
    lo[0] = hi[0] = lo[1] = hi[1] = lo[2] = hi[2] = 0;
    if (mode == MP_PAD_REPLICATE) {
        lo[0] = i == 0 ? 0 : i + b;
        hi[0] = i == n - 1 ? Y : i + b + 1;
        return;
    }
    if (mode == MP_PAD_REFLECT) {
        if (i >= 1 && b - i >= 0)
            lo[0] = b - i, hi[0] = b - i + 1;
        lo[1] = i + b, hi[1] = i + b + 1;
        if (i < n - 1 && b + 2 * (n - 1) - i < Y)
            lo[2] = b + 2 * (n - 1) - i, hi[2] = lo[2] + 1;
        return;
    }
    int64_t j = (i + b) % n;
    for (int r = 0; r < 3; r++, j += n)
        if (j < Y)
            lo[r] = j, hi[r] = j + 1;
}

/* Element e of y [outer, ys[0..3]] padded from x [outer, xs[0..3]] in a
 * mode other than constant. */
static inline MP_HD float mp_pad_mode_at(const void *x, int xdt, const int64_t *xs, const int64_t *ys,
                                         const int64_t *before, int mode, int64_t e)
{
    int64_t rest = e, xi = 0, stride = 1;
    for (int k = 3; k >= 0; k--) {
        xi += mp_pad_src(mode, rest % ys[k], before[k], xs[k]) * stride;
        rest /= ys[k];
        stride *= xs[k];
    }
    return mp_ld(x, xdt, xi + rest * stride);
}

/* The slots' loops unrolled on the GPU: constant indices keep lo and hi in
 * registers (an indexed array would be a stack frame). */
#ifdef __CUDA_ARCH__
#define MP_PAD_UNROLL _Pragma("unroll")
#else
#define MP_PAD_UNROLL
#endif

/* Element e of the gradient dx [outer, xs[0..3]] of such a pad: the sum of
 * the dy elements that read it, in increasing order of index. */
static inline MP_HD float mp_pad_grad_at(const void *dy, int dydt, const int64_t *xs, const int64_t *ys,
                                         const int64_t *before, int mode, int64_t e)
{
    int64_t lo[4][3], hi[4][3], rest = e;
    for (int k = 3; k >= 0; k--) {
        mp_pad_readers(mode, rest % xs[k], before[k], xs[k], ys[k], lo[k], hi[k]);
        rest /= xs[k];
    }
    int64_t base = rest * ys[0] * ys[1] * ys[2] * ys[3];
    float s = 0.0f;
    MP_PAD_UNROLL
    for (int a = 0; a < 3; a++)
        for (int64_t j0 = lo[0][a]; j0 < hi[0][a]; j0++)
            MP_PAD_UNROLL
            for (int b = 0; b < 3; b++)
                for (int64_t j1 = lo[1][b]; j1 < hi[1][b]; j1++)
                    MP_PAD_UNROLL
                    for (int c = 0; c < 3; c++)
                        for (int64_t j2 = lo[2][c]; j2 < hi[2][c]; j2++) {
                            int64_t row = base + ((j0 * ys[1] + j1) * ys[2] + j2) * ys[3];
                            MP_PAD_UNROLL
                            for (int d = 0; d < 3; d++)
                                for (int64_t j3 = lo[3][d]; j3 < hi[3][d]; j3++)
                                    s += mp_ld(dy, dydt, row + j3);
                        }
    return s;
}

/* p[off + i*stride] -> dst[i] as f32, i < n (stride 0 broadcasts one
 * element). The type switch is outside the loops so each loop is tight. */
static inline void mp_ld_n(const void *p, int dt, int64_t off, int64_t stride,
                           int64_t n, float *dst)
{
    int64_t i;
    if (stride == 0) {
        float v = mp_ld(p, dt, off);
        for (i = 0; i < n; i++) dst[i] = v;
        return;
    }
    switch (dt) {
    case MP_F32: {
        const float *s = (const float *)p + off;
        if (stride == 1)
            memcpy(dst, s, (size_t)n * sizeof *dst);
        else
            for (i = 0; i < n; i++) dst[i] = s[i * stride];
        break;
    }
    case MP_F16: {
        const uint16_t *s = (const uint16_t *)p + off;
#ifdef MP_X86
        if (stride == 1 && n >= 8 && mp_cpu_has(MP_CPU_F16C)) {
            mp_f16_to_f32_f16c(s, dst, n);
            break;
        }
#endif
        for (i = 0; i < n; i++) dst[i] = mp_f16_to_f32(s[i * stride]);
        break;
    }
    case MP_BF16: {
        const uint16_t *s = (const uint16_t *)p + off;
#ifdef MP_X86
        if (stride == 1 && n >= 8 && mp_cpu_has(MP_CPU_AVX2_FMA)) {
            mp_bf16_to_f32_avx2(s, dst, n);
            break;
        }
#endif
        for (i = 0; i < n; i++) dst[i] = mp_bf16_to_f32(s[i * stride]);
        break;
    }
    default:
        for (i = 0; i < n; i++) dst[i] = mp_ld(p, dt, off + i * stride);
        break;
    }
}

/* src[i] -> p[off + i*stride] rounded to dt, i < n. */
static inline void mp_st_n(void *p, int dt, int64_t off, int64_t stride,
                           int64_t n, const float *src)
{
    int64_t i;
    switch (dt) {
    case MP_F32: {
        float *d = (float *)p + off;
        if (stride == 1)
            memcpy(d, src, (size_t)n * sizeof *src);
        else
            for (i = 0; i < n; i++) d[i * stride] = src[i];
        break;
    }
    case MP_F16: {
        uint16_t *d = (uint16_t *)p + off;
#ifdef MP_X86
        if (stride == 1 && n >= 8 && mp_cpu_has(MP_CPU_F16C)) {
            mp_f32_to_f16_f16c(src, d, n);
            break;
        }
#endif
        for (i = 0; i < n; i++) d[i * stride] = mp_f32_to_f16(src[i]);
        break;
    }
    case MP_BF16: {
        uint16_t *d = (uint16_t *)p + off;
#ifdef MP_X86
        if (stride == 1 && n >= 8 && mp_cpu_has(MP_CPU_AVX2_FMA)) {
            mp_f32_to_bf16_avx2(src, d, n);
            break;
        }
#endif
        for (i = 0; i < n; i++) d[i * stride] = mp_f32_to_bf16(src[i]);
        break;
    }
    default:
        for (i = 0; i < n; i++) mp_st(p, dt, off + i * stride, src[i]);
        break;
    }
}

/* src[0..n) += beta * p[off..] (nothing when beta is 0). */
static inline void mp_add_beta(const void *p, int dt, int64_t off, int64_t n,
                               float *src, float beta)
{
    if (beta != 0.0f) {
        for (int64_t c = 0; c < n; c += MP_CHUNK) {
            float t[MP_CHUNK];
            int64_t m = mp_min64(n - c, MP_CHUNK);
            mp_ld_n(p, dt, off + c, 1, m, t);
            for (int64_t i = 0; i < m; i++) src[c + i] += beta * t[i];
        }
    }
}

/* x[0..n) rounded to type dt in place, as storing and reloading them
 * would, and, when d is not NULL, the dt values (f16 / bf16) stored to
 * d[0..n) too: one conversion serves both. Bit-identical to mp_st and
 * mp_round on each value; 8 at a time in registers where the CPU has the
 * instructions. The fused groups' chunks. MP_TF32 and mixed_float8's
 * codes (mp_rnd_fp8): each value rounded (mp_round), nothing stored. Other types: nothing to do. */
static inline void mp_round_st_n(float *x, int dt, void *d, int64_t n)
{
    int64_t i = 0;
    if (dt & MP_RND_FP8) {      /* never stored: d is NULL */
        mp_round_fp8_n(x, dt, n);
        return;
    }
    if (dt == MP_TF32) {        /* never stored: d is NULL */
        for (; i < n; i++)
            x[i] = mp_round_tf32(x[i]);
        return;
    }
    if (dt != MP_F16 && dt != MP_BF16)
        return;
#ifdef MP_X86
    if (mp_cpu_has(MP_CPU_AVX2_FMA)) {
        i = n / 8 * 8;
        if (dt == MP_F16)
            mp_round_f16_f16c(x, (uint16_t *)d, i);
        else
            mp_round_bf16_avx2(x, (uint16_t *)d, i);
    }
#endif
    for (; i < n; i++) {
        if (d)
            mp_st(d, dt, i, x[i]);
        x[i] = mp_round(x[i], dt);
    }
}

/* x[0..n) rounded to type dt in place (mp_round_st_n, nothing stored). */
static inline void mp_round_n(float *x, int dt, int64_t n)
{
    mp_round_st_n(x, dt, NULL, n);
}

/* x[0..n) rounded to dt and stored to p[off..] (stride 1) as dt: a fused
 * member that is both read on in the chunk and stored. */
static inline void mp_st_round_n(void *p, int dt, int64_t off, int64_t n, float *x)
{
    if (dt == MP_F16 || dt == MP_BF16)
        mp_round_st_n(x, dt, (uint16_t *)p + off, n);
    else
        mp_st_n(p, dt, off, 1, n, x);
}

/* Store src[0..n) to p[off..] applying beta: p = src + beta * p. */
static inline void mp_st_beta(void *p, int dt, int64_t off, int64_t n,
                              float *src, float beta)
{
    mp_add_beta(p, dt, off, n, src, beta);
    mp_st_n(p, dt, off, 1, n, src);
}

/* ---- per-element math (shared with CUDA) --------------------------------- */

static inline MP_HD float mp_relu(float x) { return x < 0.0f ? 0.0f : x; }
static inline MP_HD float mp_rsqrt(float x) { return 1.0f / sqrtf(x); }
/* gelu, sigmoid, silu and their gradients: mp_vmath.h */

/* Element d of an embedding gradient's row v: the f32 sum, from 0.0f, of
 * dy[order[k], d] over v's occurrences k >= k0 in sorted (the ids ordered
 * by id, then by position: order[k] the position, sorted[k] the id), which
 * is the order of i. Both programs' embedding_dw sum through it: the C
 * program per row an id names (mp_embedding_dw_rows), the CUDA program per
 * element of dw (mp_cu_embedding_dw_at). */
static inline MP_HD float mp_embedding_dw_sum(const void *dy, int dydt, const int32_t *order,
                                              const int32_t *sorted, int64_t n, int64_t dim,
                                              int64_t k0, int64_t v, int64_t d)
{
    float s = 0.0f;
    for (int64_t k = k0; k < n && sorted[k] == v; k++)
        s += mp_ld(dy, dydt, (int64_t)order[k] * dim + d);
    return s;
}

/* d relu / dx: 0 at x = 0, as torch's threshold_backward. */
static inline MP_HD float mp_relu_grad(float dy, float x) { return x > 0.0f ? dy : 0.0f; }

static inline MP_HD float mp_tanh_grad(float dy, float y) { return dy * (1.0f - y * y); }
static inline MP_HD float mp_sigmoid_grad(float dy, float y) { return dy * y * (1.0f - y); }
static inline MP_HD float mp_sqrt_grad(float dy, float y) { return dy * 0.5f / y; }
static inline MP_HD float mp_rsqrt_grad(float dy, float y) { return dy * -0.5f * y * y * y; }

/* Dropout's counter-based RNG: splitmix64's finaliser over a Weyl
 * sequence. The key names one dropout call (seed, step, micro-batch, node),
 * the element index picks the number, so backward regenerates the mask
 * without storing it and any thread (or GPU block) can draw any element. */
static inline MP_HD uint64_t mp_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

#define MP_GOLDEN64 0x9e3779b97f4a7c15ULL

static inline MP_HD uint64_t mp_dropout_key(uint64_t seed, int64_t step,
                                            int64_t micro, int64_t node)
{
    uint64_t k = mp_mix64(seed + MP_GOLDEN64);
    k = mp_mix64(k ^ ((uint64_t)step + MP_GOLDEN64));
    k = mp_mix64(k ^ ((uint64_t)micro + 2 * MP_GOLDEN64));
    return mp_mix64(k ^ ((uint64_t)node + 3 * MP_GOLDEN64));
}

/* Uniform in [0, 1) with 24 random bits, for element i of a call. */
static inline MP_HD float mp_dropout_u(uint64_t key, int64_t i)
{
    uint64_t z = mp_mix64(key + ((uint64_t)i + 1) * MP_GOLDEN64);
    return (float)(z >> 40) * 5.9604644775390625e-8f;   /* 2^-24 */
}

/* x after dropout at element i of the mask of key: x scale (scale = 1 / (1
 * - p)) where it is kept, else 0 */
static inline MP_HD float mp_dropout_at(uint64_t key, int64_t i, float p, float scale, float x)
{
    return mp_dropout_u(key, i) >= p ? x * scale : 0.0f;
}

/* ---- elementwise kernels ----------------------------------------------- */

/* The loops every elementwise kernel shares: chunks of MP_CHUNK loaded to
 * f32 (t from X, and u from U in the two-input form: TWO 1, a constant, so
 * that the compiler sees u loaded wherever the body reads it), BODY run
 * once per chunk of m_ values, t stored to Y. MP_EW_LOOP's body computes
 * t[i]. */
#define MP_EW_CHUNKS(n, X, XDT, TWO, U, UDT, Y, YDT, BODY)                     \
    MP_OMP(parallel for if ((n) > MP_PAR_MIN))                                 \
    for (int64_t c_ = 0; c_ < (n); c_ += MP_CHUNK) {                           \
        float t[MP_CHUNK], u[MP_CHUNK];                                        \
        int64_t m_ = mp_min64((n) - c_, MP_CHUNK);                             \
        mp_ld_n(X, XDT, c_, 1, m_, t);                                         \
        if (TWO)                                                               \
            mp_ld_n(U, UDT, c_, 1, m_, u);                                     \
        BODY;                                                                  \
        mp_st_n(Y, YDT, c_, 1, m_, t);                                         \
    }
#define MP_EW_LOOP(n, X, XDT, Y, YDT, ...)                                     \
    MP_EW_CHUNKS(n, X, XDT, 0, (const void *)NULL, MP_F32, Y, YDT,             \
                 for (int64_t i = 0; i < m_; i++) { __VA_ARGS__; })
#define MP_EW_LOOP2(n, X, XDT, U, UDT, Y, YDT, ...)                            \
    MP_EW_CHUNKS(n, X, XDT, 1, U, UDT, Y, YDT,                                 \
                 for (int64_t i = 0; i < m_; i++) { __VA_ARGS__; })

/* y = f(x) */
#define MP_UNARY(NAME, EXPR)                                                   \
    static inline void mp_k_##NAME(void *y, int ydt, const void *x, int xdt,   \
                                   int64_t n)                                  \
    {                                                                          \
        MP_EW_LOOP(n, x, xdt, y, ydt,                                          \
                   float a = t[i]; t[i] = (EXPR))                              \
    }

/* y = f(x) by an array function of mp_vmath.h (AVX2 where the CPU has it) */
#define MP_UNARY_V(NAME, VFN)                                                  \
    static inline void mp_k_##NAME(void *y, int ydt, const void *x, int xdt,   \
                                   int64_t n)                                  \
    {                                                                          \
        MP_EW_CHUNKS(n, x, xdt, 0, (const void *)NULL, MP_F32, y, ydt,         \
                     VFN(t, m_))                                               \
    }

/* dx = f(dy, x), likewise */
#define MP_GRAD_V(NAME, VFN)                                                   \
    static inline void mp_k_##NAME(void *dx, int dxdt, const void *dy,         \
                                   int dydt, const void *v, int vdt, int64_t n)\
    {                                                                          \
        MP_EW_CHUNKS(n, dy, dydt, 1, v, vdt, dx, dxdt, VFN(t, u, m_))          \
    }

/* dx = f(dy, v) where v is the forward's input or output */
#define MP_GRAD(NAME, FN)                                                      \
    static inline void mp_k_##NAME(void *dx, int dxdt, const void *dy,         \
                                   int dydt, const void *v, int vdt, int64_t n)\
    {                                                                          \
        MP_EW_LOOP2(n, dy, dydt, v, vdt, dx, dxdt, t[i] = FN(t[i], u[i]))      \
    }

MP_UNARY(neg, -a)
MP_UNARY(relu, mp_relu(a))
MP_UNARY_V(gelu, mp_vgelu)
MP_UNARY_V(tanh, mp_vtanh)
MP_UNARY_V(sigmoid, mp_vsigmoid)
MP_UNARY_V(silu, mp_vsilu)
MP_UNARY_V(exp, mp_vexp)
MP_UNARY(log, logf(a))
MP_UNARY(sqrt, sqrtf(a))
MP_UNARY(rsqrt, mp_rsqrt(a))
MP_UNARY(cast, a)

MP_GRAD(relu_grad, mp_relu_grad)
MP_GRAD_V(gelu_grad, mp_vgelu_grad)
MP_GRAD_V(silu_grad, mp_vsilu_grad)
MP_GRAD(tanh_grad, mp_tanh_grad)
MP_GRAD(sigmoid_grad, mp_sigmoid_grad)
MP_GRAD(sqrt_grad, mp_sqrt_grad)
MP_GRAD(rsqrt_grad, mp_rsqrt_grad)

static inline void mp_k_scale(void *y, int ydt, const void *x, int xdt, float s, int64_t n)
{
    MP_EW_LOOP(n, x, xdt, y, ydt, t[i] *= s)
}

static inline void mp_k_acc(float *y, const void *x, int xdt, float s, int64_t n)
{
    MP_EW_LOOP2(n, x, xdt, y, MP_F32, y, MP_F32, t[i] = u[i] + s * t[i])
}

static inline void mp_k_fill(void *y, int ydt, float v, int64_t n)
{
    MP_OMP(parallel for if (n > MP_PAR_MIN))
    for (int64_t c = 0; c < n; c += MP_CHUNK) {
        float t[MP_CHUNK];
        int64_t m = mp_min64(n - c, MP_CHUNK);
        for (int64_t i = 0; i < m; i++) t[i] = v;
        mp_st_n(y, ydt, c, 1, m, t);
    }
}

static inline int mp_k_all_finite(const void *x, int xdt, int64_t n)
{
    int ok = 1;
    for (int64_t c = 0; c < n && ok; c += MP_CHUNK) {
        float t[MP_CHUNK];
        int64_t m = mp_min64(n - c, MP_CHUNK);
        mp_ld_n(x, xdt, c, 1, m, t);
        for (int64_t i = 0; i < m; i++)
            ok &= isfinite(t[i]) != 0;
    }
    return ok;
}

/* Dropout: scale = 1/(1-p) as torch; p >= 1 drops everything. */
static inline float mp_dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

static inline void mp_k_dropout(void *y, int ydt, const void *x, int xdt, int64_t n,
                                float p, uint64_t seed, int64_t step, int64_t micro,
                                int64_t node)
{
    uint64_t key = mp_dropout_key(seed, step, micro, node);
    float s = mp_dropout_scale(p);
    if (p <= 0.0f) {
        mp_k_cast(y, ydt, x, xdt, n);
        return;
    }
    MP_EW_LOOP(n, x, xdt, y, ydt,
               t[i] = mp_dropout_at(key, c_ + i, p, s, t[i]))
}

static inline void mp_k_dropout_grad(void *dx, int dxdt, const void *dy, int dydt,
                                     int64_t n, float p, uint64_t seed, int64_t step,
                                     int64_t micro, int64_t node)
{
    mp_k_dropout(dx, dxdt, dy, dydt, n, p, seed, step, micro, node);
}

/* ---- randomness: randn, rand ----------------------------------------------
 * Element i of a call is a function of (seed, step, micro-batch, node) and
 * i only, by dropout's counter-based RNG (mp_dropout_key): any thread
 * draws any element, so the values are the same at every thread count, on
 * the GPU and after --resume. rand: 24 random bits, k 2^-24 (torch.rand's
 * grid). randn: Box-Muller from one 64-bit draw, u1 = (hi32 + 1/2) 2^-32 in
 * (0, 1] (|z| up to 6.66, as curand's), u2 = low 24 bits 2^-24:
 * sqrt(-2 log u1) cos(2 pi u2), with mp_vmath.h's log and cos (every
 * operation IEEE-rounded or an FMA: the same bits on both targets). */
static inline MP_HD float mp_randn_at(uint64_t key, int64_t i)
{
    uint64_t z = mp_mix64(key + ((uint64_t)i + 1) * MP_GOLDEN64);
    float u1 = fmaf((float)(uint32_t)(z >> 32), 2.3283064365386963e-10f, 1.1641532182693481e-10f);
    float u2 = (float)(uint32_t)(z & 0xffffffu) * 5.9604644775390625e-8f;
    return sqrtf(-2.0f * mp_logf_p(u1)) * mp_cos2pi_p(u2);
}

#define MP_RANDOM_KERNEL(NAME, DRAW)                                           \
    static inline void mp_k_##NAME(void *y, int ydt, int64_t n, uint64_t seed, \
                                   int64_t step, int64_t micro, int64_t node)  \
    {                                                                          \
        uint64_t key = mp_dropout_key(seed, step, micro, node);                \
        MP_OMP(parallel for if (n > MP_PAR_MIN))                               \
        for (int64_t c = 0; c < n; c += MP_CHUNK) {                            \
            float t[MP_CHUNK];                                                 \
            int64_t m = mp_min64(n - c, MP_CHUNK);                             \
            for (int64_t i = 0; i < m; i++)                                    \
                t[i] = DRAW(key, c + i);                                       \
            mp_st_n(y, ydt, c, 1, m, t);                                       \
        }                                                                      \
    }
MP_RANDOM_KERNEL(randn, mp_randn_at)
MP_RANDOM_KERNEL(rand, mp_dropout_u)

/* ---- broadcasting ------------------------------------------------------- */

/* How two operands a, b map onto an output y of NumPy-broadcast shape:
 * dims of size 1 dropped and neighbours merged where both operands are
 * contiguous across them, so most calls become one or two loops. The
 * innermost dim's strides are 0 (broadcast) or 1. */
typedef struct MpBcast {
    int rank;
    int64_t n[MP_MAX_RANK];                  /* y's dims, merged */
    int64_t sa[MP_MAX_RANK], sb[MP_MAX_RANK];/* element strides, 0 = broadcast */
    int64_t rows;                            /* product of all but the last */
} MpBcast;

/* Contiguous strides of x (rank xr) aligned to the last dims of a rank-yr
 * output: stride 0 where x has size 1 or no dim at all. */
static inline void mp_bcast_strides(int yr, int xr, const int64_t *xsh, int64_t *s)
{
    int64_t st = 1;
    for (int d = yr - 1; d >= 0; d--) {
        int xd = d - (yr - xr);
        int64_t len = xd >= 0 ? xsh[xd] : 1;
        s[d] = len == 1 ? 0 : st;
        st *= len;
    }
}

static inline MpBcast mp_bcast(int yr, const int64_t *ysh, int ar, const int64_t *ash,
                               int br, const int64_t *bsh)
{
    int64_t sa[MP_MAX_RANK], sb[MP_MAX_RANK];
    MpBcast p;
    mp_bcast_strides(yr, ar, ash, sa);
    mp_bcast_strides(yr, br, bsh, sb);
    p.rank = 0;
    for (int d = 0; d < yr; d++) {
        if (ysh[d] == 1)
            continue;
        int k = p.rank - 1;
        if (k >= 0 && p.sa[k] == sa[d] * ysh[d] && p.sb[k] == sb[d] * ysh[d]) {
            p.n[k] *= ysh[d];                /* merge into the outer dim */
            p.sa[k] = sa[d];
            p.sb[k] = sb[d];
            continue;
        }
        p.n[p.rank] = ysh[d];
        p.sa[p.rank] = sa[d];
        p.sb[p.rank] = sb[d];
        p.rank++;
    }
    if (p.rank == 0) {                       /* a scalar */
        p.rank = 1;
        p.n[0] = 1;
        p.sa[0] = p.sb[0] = 0;
    }
    p.rows = 1;
    for (int d = 0; d < p.rank - 1; d++)
        p.rows *= p.n[d];
    return p;
}

/* Offsets in a and b of the first element of row r (all dims but the last). */
static inline void mp_bcast_row(const MpBcast *p, int64_t r, int64_t *ao, int64_t *bo)
{
    *ao = *bo = 0;
    for (int d = p->rank - 2; d >= 0; d--) {
        int64_t i = r % p->n[d];
        r /= p->n[d];
        *ao += i * p->sa[d];
        *bo += i * p->sb[d];
    }
}

#define MP_BINARY(NAME, EXPR)                                                  \
    static inline void mp_k_##NAME(void *y, int ydt, int yr, const int64_t *ysh,\
                                   const void *a, int adt, int ar,             \
                                   const int64_t *ash, const void *b, int bdt, \
                                   int br, const int64_t *bsh)                 \
    {                                                                          \
        MpBcast p = mp_bcast(yr, ysh, ar, ash, br, bsh);                       \
        int64_t len = p.n[p.rank - 1], nc = (len + MP_CHUNK - 1) / MP_CHUNK;   \
        int64_t sa = p.sa[p.rank - 1], sb = p.sb[p.rank - 1];                  \
        MP_OMP(parallel for if (p.rows * len > MP_PAR_MIN))                    \
        for (int64_t w = 0; w < p.rows * nc; w++) {                            \
            float t[MP_CHUNK], u[MP_CHUNK];                                    \
            int64_t ao, bo, c = (w % nc) * MP_CHUNK;                           \
            int64_t m = mp_min64(len - c, MP_CHUNK);                           \
            mp_bcast_row(&p, w / nc, &ao, &bo);                                \
            mp_ld_n(a, adt, ao + c * sa, sa, m, t);                            \
            mp_ld_n(b, bdt, bo + c * sb, sb, m, u);                            \
            for (int64_t i = 0; i < m; i++)                                    \
                t[i] = EXPR;                                                   \
            mp_st_n(y, ydt, (w / nc) * len + c, 1, m, t);                      \
        }                                                                      \
    }

MP_BINARY(add, t[i] + u[i])
MP_BINARY(sub, t[i] - u[i])
MP_BINARY(mul, t[i] * u[i])
MP_BINARY(div, t[i] / u[i])

/* y = x.permute(perm): y's dim d is x's dim perm[d]. */
static inline void mp_k_transpose(void *y, int ydt, const void *x, int xdt, int rank,
                                  const int64_t *xsh, const int64_t *perm)
{
    int64_t xs[MP_MAX_RANK], ysh[MP_MAX_RANK], st = 1, rows = 1;
    for (int d = rank - 1; d >= 0; d--) {
        xs[d] = st;
        st *= xsh[d];
    }
    for (int d = 0; d < rank; d++)
        ysh[d] = xsh[perm[d]];
    for (int d = 0; d < rank - 1; d++)
        rows *= ysh[d];
    int64_t len = rank ? ysh[rank - 1] : 1, sin = rank ? xs[perm[rank - 1]] : 1;
    MP_OMP(parallel for if (rows * len > MP_PAR_MIN))
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0, q = r;
        for (int d = rank - 2; d >= 0; d--) {
            off += (q % ysh[d]) * xs[perm[d]];
            q /= ysh[d];
        }
        for (int64_t c = 0; c < len; c += MP_CHUNK) {
            float t[MP_CHUNK];
            int64_t m = mp_min64(len - c, MP_CHUNK);
            mp_ld_n(x, xdt, off + c * sin, sin, m, t);
            mp_st_n(y, ydt, r * len + c, 1, m, t);
        }
    }
}

/* ---- structural ops: chunk, slice, concat, expand, arange --------------------
 * Copies. Where the storage types agree (always, as the compiler plans
 * these ops) the stored bits are copied, so integer ids of any size pass
 * exactly; otherwise values are converted through f32. */

static inline MP_HD int mp_dt_bytes(int dt)
{
    return dt == MP_F32 || dt == MP_I32 ? 4 : dt == MP_U8 ? 1 : 2;
}

/* y[yo .. yo+n) = x[xo .. xo+n) */
static inline void mp_copy_run(void *y, int ydt, int64_t yo, const void *x, int xdt, int64_t xo,
                               int64_t n)
{
    if (ydt == xdt) {
        size_t es = (size_t)mp_dt_bytes(ydt);
        memcpy((char *)y + (size_t)yo * es, (const char *)x + (size_t)xo * es, (size_t)n * es);
        return;
    }
    for (int64_t c = 0; c < n; c += MP_CHUNK) {
        float t[MP_CHUNK];
        int64_t m = mp_min64(n - c, MP_CHUNK);
        mp_ld_n(x, xdt, xo + c, 1, m, t);
        mp_st_n(y, ydt, yo + c, 1, m, t);
    }
}

/* slice, chunk: y[o, j, i] = x[o, start + j, i], x [outer, xlen, inner],
 * y [outer, ylen, inner] */
static inline void mp_k_slice(void *y, int ydt, const void *x, int xdt, int64_t outer, int64_t xlen,
                              int64_t inner, int64_t start, int64_t ylen)
{
    MP_OMP(parallel for if (outer * ylen * inner > MP_PAR_MIN))
    for (int64_t o = 0; o < outer; o++)
        mp_copy_run(y, ydt, o * ylen * inner, x, xdt, (o * xlen + start) * inner, ylen * inner);
}

/* concat (one call per operand), slice_grad (zero = 1: the rest of y is
 * zeroed): y[o, start + j, i] = x[o, j, i], x [outer, xlen, inner] */
static inline void mp_k_place(void *y, int ydt, const void *x, int xdt, int64_t outer, int64_t ylen,
                              int64_t inner, int64_t start, int64_t xlen, int zero)
{
    if (zero)
        memset(y, 0, (size_t)(outer * ylen * inner) * (size_t)mp_dt_bytes(ydt));
    MP_OMP(parallel for if (outer * xlen * inner > MP_PAR_MIN))
    for (int64_t o = 0; o < outer; o++)
        mp_copy_run(y, ydt, (o * ylen + start) * inner, x, xdt, o * xlen * inner, xlen * inner);
}

/* expand: y = x broadcast to y's shape (NumPy rules, rank <= 8) */
static inline void mp_k_broadcast(void *y, int ydt, int yr, const int64_t *ysh, const void *x, int xdt,
                                  int xr, const int64_t *xsh)
{
    MpBcast p = mp_bcast(yr, ysh, xr, xsh, xr, xsh);
    int64_t len = p.n[p.rank - 1], sx = p.sa[p.rank - 1];
    MP_OMP(parallel for if (p.rows * len > MP_PAR_MIN))
    for (int64_t r = 0; r < p.rows; r++) {
        int64_t xo, unused;
        mp_bcast_row(&p, r, &xo, &unused);
        if (sx == 1) {
            mp_copy_run(y, ydt, r * len, x, xdt, xo, len);
            continue;
        }
        for (int64_t i = 0; i < len; i++)
            mp_copy_run(y, ydt, r * len + i, x, xdt, xo, 1);
    }
}

/* arange: y[i] = i (i32) */
static inline void mp_k_arange(void *y, int ydt, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (ydt == MP_I32)
            ((int32_t *)y)[i] = (int32_t)i;
        else
            mp_st(y, ydt, i, (float)i);
    }
}

/* ---- reductions --------------------------------------------------------- */

/* y[o, i] = scale * sum_l x[o, l, i], accumulated in double. */
static inline void mp_reduce_mid(void *y, int ydt, const void *x, int xdt, int64_t outer,
                                 int64_t len, int64_t inner, double scale)
{
    int64_t nc = (inner + MP_CHUNK - 1) / MP_CHUNK;
    MP_OMP(parallel for if (outer * len * inner > MP_PAR_MIN))
    for (int64_t w = 0; w < outer * nc; w++) {
        int64_t o = w / nc, c = (w % nc) * MP_CHUNK, m = mp_min64(inner - c, MP_CHUNK);
        double acc[MP_CHUNK] = {0};
        float t[MP_CHUNK];
        for (int64_t l = 0; l < len; l++) {
            mp_ld_n(x, xdt, (o * len + l) * inner + c, 1, m, t);
            for (int64_t i = 0; i < m; i++) acc[i] += t[i];
        }
        for (int64_t i = 0; i < m; i++) t[i] = (float)(acc[i] * scale);
        mp_st_n(y, ydt, o * inner + c, 1, m, t);
    }
}

/* Sum of n contiguous elements at x + off, in double. */
static inline double mp_sum_n(const void *x, int xdt, int64_t off, int64_t n)
{
    double s = 0;
    for (int64_t c = 0; c < n; c += MP_CHUNK) {
        float t[MP_CHUNK];
        int64_t m = mp_min64(n - c, MP_CHUNK);
        mp_ld_n(x, xdt, off + c, 1, m, t);
        float part = 0.0f;
        for (int64_t i = 0; i < m; i++) part += t[i];
        s += part;
    }
    return s;
}

/* Sum of doubles in order: partial sums made in parallel are added in a
 * fixed order, so results do not depend on the number of threads. */
static inline double mp_sum_d(const double *v, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += v[i];
    return s;
}

/* y[o] = scale * sum of row o (inner == 1). */
static inline void mp_reduce_rows(void *y, int ydt, const void *x, int xdt, int64_t outer,
                                  int64_t len, double scale)
{
    if (outer == 1) {                         /* everything: split it up */
        int64_t nb = (len + 65535) / 65536;
        double *part = (double *)mp_kalloc((size_t)nb * sizeof *part);
        MP_OMP(parallel for if (nb > 1))
        for (int64_t bi = 0; bi < nb; bi++)
            part[bi] = mp_sum_n(x, xdt, bi * 65536, mp_min64(len - bi * 65536, 65536));
        mp_st(y, ydt, 0, (float)(mp_sum_d(part, nb) * scale));
        free(part);
        return;
    }
    MP_OMP(parallel for if (outer * len > MP_PAR_MIN))
    for (int64_t o = 0; o < outer; o++)
        mp_st(y, ydt, o, (float)(mp_sum_n(x, xdt, o * len, len) * scale));
}

static inline void mp_reduce(void *y, int ydt, const void *x, int xdt, int64_t outer,
                             int64_t len, int64_t inner, double scale)
{
    if (inner == 1)
        mp_reduce_rows(y, ydt, x, xdt, outer, len, scale);
    else
        mp_reduce_mid(y, ydt, x, xdt, outer, len, inner, scale);
}

static inline void mp_k_sum(void *y, int ydt, const void *x, int xdt, int64_t outer,
                            int64_t len, int64_t inner)
{
    mp_reduce(y, ydt, x, xdt, outer, len, inner, 1.0);
}

static inline void mp_k_mean(void *y, int ydt, const void *x, int xdt, int64_t outer,
                             int64_t len, int64_t inner)
{
    mp_reduce(y, ydt, x, xdt, outer, len, inner, 1.0 / (double)len);
}

/* Gradient of sum (scale 1) and mean (scale 1/len): dy[o, i] copied along l. */
static inline void mp_k_expand(void *y, int ydt, const void *dy, int dydt, int64_t outer,
                               int64_t len, int64_t inner, float scale)
{
    int64_t nc = (inner + MP_CHUNK - 1) / MP_CHUNK;
    MP_OMP(parallel for if (outer * len * inner > MP_PAR_MIN))
    for (int64_t w = 0; w < outer * nc; w++) {
        int64_t o = w / nc, c = (w % nc) * MP_CHUNK, m = mp_min64(inner - c, MP_CHUNK);
        float t[MP_CHUNK];
        mp_ld_n(dy, dydt, o * inner + c, 1, m, t);
        for (int64_t i = 0; i < m; i++) t[i] *= scale;
        for (int64_t l = 0; l < len; l++)
            mp_st_n(y, ydt, (o * len + l) * inner + c, 1, m, t);
    }
}

/* Undo a broadcast: y[j] = sum of dy over the elements y[j] was broadcast
 * to (+ beta * y). Accumulates in double, in a buffer of y's size. */
static inline void mp_k_sum_to(void *y, int ydt, int yr, const int64_t *ysh,
                               const void *dy, int dydt, int dyr, const int64_t *dysh,
                               float beta)
{
    MpBcast p = mp_bcast(dyr, dysh, dyr, dysh, yr, ysh);
    int64_t ny = 1, len = p.n[p.rank - 1], sy = p.sb[p.rank - 1];
    for (int d = 0; d < yr; d++)
        ny *= ysh[d];
    double *acc = (double *)mp_kzalloc((size_t)ny * sizeof *acc);
    float *out = (float *)mp_kalloc((size_t)ny * sizeof *out);
    for (int64_t r = 0; r < p.rows; r++) {
        int64_t xo, yo;
        mp_bcast_row(&p, r, &xo, &yo);
        if (sy == 0) {
            acc[yo] += mp_sum_n(dy, dydt, xo, len);
            continue;
        }
        for (int64_t c = 0; c < len; c += MP_CHUNK) {
            float t[MP_CHUNK];
            int64_t m = mp_min64(len - c, MP_CHUNK);
            mp_ld_n(dy, dydt, xo + c, 1, m, t);
            for (int64_t i = 0; i < m; i++) acc[yo + c + i] += t[i];
        }
    }
    for (int64_t j = 0; j < ny; j++)
        out[j] = (float)acc[j];
    mp_st_beta(y, ydt, 0, ny, out, beta);
    free(acc);
    free(out);
}

/* Sum over every axis but 1 of x[N, C, S]: the bias gradient of conv2d and
 * batch_norm. */
static inline void mp_k_channel_sum(void *y, int ydt, const void *x, int xdt, int64_t N,
                                    int64_t C, int64_t S, float beta)
{
    float *out = (float *)mp_kalloc((size_t)C * sizeof *out);
    MP_OMP(parallel for if (N * C * S > MP_PAR_MIN))
    for (int64_t ch = 0; ch < C; ch++) {
        double s = 0;
        for (int64_t n = 0; n < N; n++)
            s += mp_sum_n(x, xdt, (n * C + ch) * S, S);
        out[ch] = (float)s;
    }
    mp_st_beta(y, ydt, 0, C, out, beta);
    free(out);
}

/* ---- softmax ------------------------------------------------------------ */

/* Rows of length len with stride inner: x viewed as [outer, len, inner].
 * Each thread works on a row at a time in its own f32 buffer. */
#define MP_ROWS_LOOP(outer, len, inner, NBUF, ...)                            \
    MP_OMP(parallel if ((outer) * (len) * (inner) > MP_PAR_MIN))               \
    {                                                                          \
        float *buf = (float *)mp_kalloc((size_t)(NBUF) * (size_t)(len) * sizeof(float)); \
        MP_OMP(for)                                                            \
        for (int64_t row = 0; row < (outer) * (inner); row++) {                \
            int64_t off = (row / (inner)) * (len) * (inner) + row % (inner);   \
            __VA_ARGS__;                                                       \
        }                                                                      \
        free(buf);                                                             \
    }

/* max and sum of exp(v - max) of v[0..n), in f32 / double. */
static inline float mp_row_max(const float *v, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static inline double mp_row_sumexp(const float *v, int64_t n, float m)
{
    double s = 0;
    for (int64_t c = 0; c < n; c += MP_CHUNK) {
        float e[MP_CHUNK];
        int64_t k = mp_min64(n - c, MP_CHUNK);
        for (int64_t i = 0; i < k; i++) e[i] = v[c + i] - m;
        mp_vexp(e, k);
        for (int64_t i = 0; i < k; i++) s += e[i];
    }
    return s;
}

/* softmax of v in place (f32); a row of all -inf gives NaN, as torch */
static inline void mp_row_softmax(float *v, int64_t n)
{
    float m = mp_row_max(v, n);
    double s = 0;
    for (int64_t i = 0; i < n; i++) v[i] -= m;
    mp_vexp(v, n);
    for (int64_t i = 0; i < n; i++) s += v[i];
    float inv = (float)(1.0 / s);
    for (int64_t i = 0; i < n; i++) v[i] *= inv;
}

static inline void mp_row_log_softmax(float *v, int64_t n)
{
    float m = mp_row_max(v, n);
    float lse = m + (float)log(mp_row_sumexp(v, n, m));
    for (int64_t i = 0; i < n; i++)
        v[i] -= lse;
}

static inline void mp_k_softmax(void *y, int ydt, const void *x, int xdt, int64_t outer,
                                int64_t len, int64_t inner)
{
    MP_ROWS_LOOP(outer, len, inner, 1,
                 mp_ld_n(x, xdt, off, inner, len, buf);
                 mp_row_softmax(buf, len);
                 mp_st_n(y, ydt, off, inner, len, buf))
}

static inline void mp_k_log_softmax(void *y, int ydt, const void *x, int xdt,
                                    int64_t outer, int64_t len, int64_t inner)
{
    MP_ROWS_LOOP(outer, len, inner, 1,
                 mp_ld_n(x, xdt, off, inner, len, buf);
                 mp_row_log_softmax(buf, len);
                 mp_st_n(y, ydt, off, inner, len, buf))
}

/* dx = y * (dy - sum(dy * y)) */
static inline void mp_row_softmax_grad(float *dy, const float *y, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)dy[i] * y[i];
    for (int64_t i = 0; i < n; i++)
        dy[i] = y[i] * (dy[i] - (float)s);
}

/* dx = dy - exp(y) * sum(dy) */
static inline void mp_row_log_softmax_grad(float *dy, const float *y, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += dy[i];
    for (int64_t c = 0; c < n; c += MP_CHUNK) {
        float e[MP_CHUNK];
        int64_t k = mp_min64(n - c, MP_CHUNK);
        memcpy(e, y + c, (size_t)k * sizeof *e);
        mp_vexp(e, k);
        for (int64_t i = 0; i < k; i++) dy[c + i] -= e[i] * (float)s;
    }
}

static inline void mp_k_softmax_grad(void *dx, int dxdt, const void *dy, int dydt,
                                     const void *y, int ydt, int64_t outer, int64_t len,
                                     int64_t inner)
{
    MP_ROWS_LOOP(outer, len, inner, 2,
                 mp_ld_n(dy, dydt, off, inner, len, buf);
                 mp_ld_n(y, ydt, off, inner, len, buf + len);
                 mp_row_softmax_grad(buf, buf + len, len);
                 mp_st_n(dx, dxdt, off, inner, len, buf))
}

static inline void mp_k_log_softmax_grad(void *dx, int dxdt, const void *dy, int dydt,
                                         const void *y, int ydt, int64_t outer,
                                         int64_t len, int64_t inner)
{
    MP_ROWS_LOOP(outer, len, inner, 2,
                 mp_ld_n(dy, dydt, off, inner, len, buf);
                 mp_ld_n(y, ydt, off, inner, len, buf + len);
                 mp_row_log_softmax_grad(buf, buf + len, len);
                 mp_st_n(dx, dxdt, off, inner, len, buf))
}

/* ---- losses and metrics ------------------------------------------------- */

/* (1 - eps)(logsumexp(x[r]) - x[r, label]) + eps (logsumexp(x[r]) - mean(x[r])),
 * torch's label smoothing (eps = 0: the plain loss); NaN for a label outside
 * [0, C) so that a bad label can never pass unnoticed (the runtime checks
 * labels first). */
static inline double mp_ce_row(const float *v, int64_t C, int64_t label, float eps)
{
    if (label < 0 || label >= C)
        return NAN;
    float m = mp_row_max(v, C);
    double lse = (double)m + log(mp_row_sumexp(v, C, m));
    if (eps == 0.0f)
        return lse - v[label];
    double sx = 0;
    for (int64_t j = 0; j < C; j++)
        sx += v[j];
    return (1.0 - (double)eps) * (lse - v[label]) + (double)eps * (lse - sx / (double)C);
}

/* Rows whose label is not `ignore`: the divisor of the mean. */
static inline int64_t mp_ce_count(const void *labels, int labdt, int64_t rows, int64_t ignore)
{
    int64_t n = 0;
    for (int64_t r = 0; r < rows; r++)
        n += mp_ld_id(labels, labdt, r) != ignore;
    return n;
}

static inline void mp_k_cross_entropy(void *loss, int ldt, const void *x, int xdt,
                                      const void *labels, int labdt, int64_t rows, int64_t C,
                                      int64_t ignore, float eps)
{
    double *part = (double *)mp_kalloc((size_t)rows * sizeof *part);
    MP_ROWS_LOOP(rows, C, 1, 1,
                 int64_t lab = mp_ld_id(labels, labdt, row);
                 mp_ld_n(x, xdt, off, 1, C, buf);
                 part[row] = lab == ignore ? 0.0 : mp_ce_row(buf, C, lab, eps))
    double n = (double)mp_ce_count(labels, labdt, rows, ignore);
    mp_st(loss, ldt, 0, (float)(mp_sum_d(part, rows) / n));
    free(part);
}

/* dl (softmax(x) - (1 - eps) onehot - eps / C) / count; ignored rows 0 */
static inline void mp_k_cross_entropy_grad(void *dx, int dxdt, const void *dl, int dldt,
                                           const void *x, int xdt, const void *labels,
                                           int labdt, int64_t rows, int64_t C, int64_t ignore,
                                           float eps)
{
    float g = mp_ld(dl, dldt, 0) / (float)mp_ce_count(labels, labdt, rows, ignore);
    MP_ROWS_LOOP(rows, C, 1, 1,
                 int64_t lab = mp_ld_id(labels, labdt, row);
                 mp_ld_n(x, xdt, off, 1, C, buf);
                 mp_row_softmax(buf, C);
                 for (int64_t j = 0; j < C; j++)
                     buf[j] = lab == ignore ? 0.0f
                            : g * (buf[j] - (j == lab ? 1.0f - eps : 0.0f) - eps / (float)C);
                 mp_st_n(dx, dxdt, off, 1, C, buf))
}

static inline void mp_k_mse(void *loss, int ldt, const void *pred, int pdt,
                            const void *target, int tdt, int64_t n)
{
    int64_t nc = (n + MP_CHUNK - 1) / MP_CHUNK;
    double *part = (double *)mp_kalloc((size_t)nc * sizeof *part);
    MP_OMP(parallel for if (n > MP_PAR_MIN))
    for (int64_t w = 0; w < nc; w++) {
        float a[MP_CHUNK], b[MP_CHUNK];
        int64_t m = mp_min64(n - w * MP_CHUNK, MP_CHUNK);
        mp_ld_n(pred, pdt, w * MP_CHUNK, 1, m, a);
        mp_ld_n(target, tdt, w * MP_CHUNK, 1, m, b);
        double s = 0;
        for (int64_t i = 0; i < m; i++)
            s += (double)(a[i] - b[i]) * (a[i] - b[i]);
        part[w] = s;
    }
    mp_st(loss, ldt, 0, (float)(mp_sum_d(part, nc) / (double)n));
    free(part);
}

static inline void mp_k_mse_grad(void *dx, int dxdt, const void *dl, int dldt,
                                 const void *pred, int pdt, const void *target, int tdt,
                                 int64_t n)
{
    float g = 2.0f * mp_ld(dl, dldt, 0) / (float)n;
    MP_EW_LOOP2(n, pred, pdt, target, tdt, dx, dxdt, t[i] = g * (t[i] - u[i]))
}

/* Fraction of rows whose first maximum is at the label. */
static inline void mp_k_accuracy(void *out, int odt, const void *x, int xdt,
                                 const void *labels, int labdt, int64_t rows, int64_t C)
{
    int64_t hits = 0;
    MP_OMP(parallel reduction(+:hits) if (rows * C > MP_PAR_MIN))
    {
        float *buf = (float *)mp_kalloc((size_t)C * sizeof *buf);
        MP_OMP(for)
        for (int64_t r = 0; r < rows; r++) {
            mp_ld_n(x, xdt, r * C, 1, C, buf);
            int64_t best = 0;
            for (int64_t j = 1; j < C; j++)
                if (buf[j] > buf[best])
                    best = j;
            hits += best == mp_ld_id(labels, labdt, r);
        }
        free(buf);
    }
    mp_st(out, odt, 0, (float)((double)hits / (double)rows));
}

/* ---- elementwise additions: abs sin cos maximum minimum clamp pow, gelu's
 * tanh form ------------------------------------------------------------- */

/* d|x|/dx = sign(x), 0 at 0 (torch's sgn) */
static inline MP_HD float mp_abs_grad(float dy, float x)
{
    return x > 0.0f ? dy : x < 0.0f ? -dy : 0.0f;
}
static inline MP_HD float mp_sin_grad(float dy, float x) { return dy * cosf(x); }
static inline MP_HD float mp_cos_grad(float dy, float x) { return -dy * sinf(x); }

/* NaN in either operand gives NaN, as torch.maximum / minimum */
static inline MP_HD float mp_maximum(float a, float b) { return a > b ? a : b >= a ? b : a + b; }
static inline MP_HD float mp_minimum(float a, float b) { return a < b ? a : b <= a ? b : a + b; }

/* The share of dy that goes to a in maximum(a, b): ties split evenly. */
static inline MP_HD float mp_maximum_mask(float a, float b)
{
    return a > b ? 1.0f : a == b ? 0.5f : 0.0f;
}

static inline MP_HD float mp_clamp(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }

/* torch: the gradient passes where lo <= x <= hi */
static inline MP_HD float mp_clamp_grad(float dy, float x, float lo, float hi)
{
    return x >= lo && x <= hi ? dy : 0.0f;
}

/* torch: p x^(p-1) dy, and 0 for p = 0 */
static inline MP_HD float mp_pow_grad(float dy, float x, float p)
{
    return p == 0.0f ? 0.0f : dy * p * powf(x, p - 1.0f);
}

MP_UNARY_V(gelu_tanh, mp_vgelu_tanh)
MP_UNARY(abs, fabsf(a))
MP_UNARY(sin, sinf(a))
MP_UNARY(cos, cosf(a))
MP_GRAD_V(gelu_tanh_grad, mp_vgelu_tanh_grad)
MP_GRAD(abs_grad, mp_abs_grad)
MP_GRAD(sin_grad, mp_sin_grad)
MP_GRAD(cos_grad, mp_cos_grad)
MP_BINARY(maximum, mp_maximum(t[i], u[i]))
MP_BINARY(minimum, mp_minimum(t[i], u[i]))
MP_BINARY(maximum_mask, mp_maximum_mask(t[i], u[i]))

static inline void mp_k_clamp(void *y, int ydt, const void *x, int xdt, int64_t n, float lo, float hi)
{
    MP_EW_LOOP(n, x, xdt, y, ydt, t[i] = mp_clamp(t[i], lo, hi))
}

static inline void mp_k_clamp_grad(void *dx, int dxdt, const void *dy, int dydt, const void *x,
                                   int xdt, int64_t n, float lo, float hi)
{
    MP_EW_LOOP2(n, dy, dydt, x, xdt, dx, dxdt, t[i] = mp_clamp_grad(t[i], u[i], lo, hi))
}

static inline void mp_k_pow(void *y, int ydt, const void *x, int xdt, int64_t n, float p)
{
    MP_EW_LOOP(n, x, xdt, y, ydt, t[i] = powf(t[i], p))
}

static inline void mp_k_pow_grad(void *dx, int dxdt, const void *dy, int dydt, const void *x,
                                 int xdt, int64_t n, float p)
{
    MP_EW_LOOP2(n, dy, dydt, x, xdt, dx, dxdt, t[i] = mp_pow_grad(t[i], u[i], p))
}

/* ---- selection, comparison, masks ---------------------------------------
 * Comparisons store 1 or 0 (a u8 mask); NaN compares false except with !=,
 * as torch. where(cond, a, b) is a where cond != 0, else b; its gradients
 * hand dy to the side each element came from. */
static inline MP_HD float mp_gt(float a, float b) { return a > b ? 1.0f : 0.0f; }
static inline MP_HD float mp_lt(float a, float b) { return a < b ? 1.0f : 0.0f; }
static inline MP_HD float mp_ge(float a, float b) { return a >= b ? 1.0f : 0.0f; }
static inline MP_HD float mp_le(float a, float b) { return a <= b ? 1.0f : 0.0f; }
static inline MP_HD float mp_eq(float a, float b) { return a == b ? 1.0f : 0.0f; }
static inline MP_HD float mp_ne(float a, float b) { return a != b ? 1.0f : 0.0f; }
static inline MP_HD float mp_where(float c, float a, float b) { return c != 0.0f ? a : b; }
static inline MP_HD float mp_where_da(float dy, float c) { return c != 0.0f ? dy : 0.0f; }
static inline MP_HD float mp_where_db(float dy, float c) { return c != 0.0f ? 0.0f : dy; }

MP_BINARY(gt, mp_gt(t[i], u[i]))
MP_BINARY(lt, mp_lt(t[i], u[i]))
MP_BINARY(ge, mp_ge(t[i], u[i]))
MP_BINARY(le, mp_le(t[i], u[i]))
MP_BINARY(eq, mp_eq(t[i], u[i]))
MP_BINARY(ne, mp_ne(t[i], u[i]))
MP_BINARY(where_da, mp_where_da(t[i], u[i]))
MP_BINARY(where_db, mp_where_db(t[i], u[i]))

/* max / min along an axis: the position of the first maximum (sign 1) or
 * minimum (sign -1) of x[o, 0..len, i], x viewed as [outer, len, inner];
 * a NaN wins (the first one), as torch.max(dim). */
static inline MP_HD int64_t mp_extremum_at(const void *x, int xdt, int64_t o, int64_t len,
                                           int64_t inner, int64_t i, float sign)
{
    int64_t at = 0, base = o * len * inner + i;
    float best = mp_ld(x, xdt, base);
    for (int64_t l = 1; l < len && best == best; l++) {
        float v = mp_ld(x, xdt, base + l * inner);
        if (v != v || sign * v > sign * best)
            at = l, best = v;
    }
    return at;
}

/* y[o, i] = x[o, at, i] (max, min), or at itself (index: argmax, argmin) */
static inline void mp_k_extremum(void *y, int ydt, const void *x, int xdt, int64_t outer, int64_t len,
                                 int64_t inner, int sign, int index)
{
    MP_OMP(parallel for if (outer * len * inner > MP_PAR_MIN))
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t at = mp_extremum_at(x, xdt, o, len, inner, i, (float)sign);
            if (index)
                ((int32_t *)y)[o * inner + i] = (int32_t)at;
            else
                mp_st(y, ydt, o * inner + i, mp_ld(x, xdt, (o * len + at) * inner + i));
        }
}

/* dx[o, l, i] = dy[o, i] where l is the element max / min chose, else 0 */
static inline void mp_k_extremum_grad(void *dx, int dxdt, const void *dy, int dydt, const void *x,
                                      int xdt, int64_t outer, int64_t len, int64_t inner, int sign)
{
    MP_OMP(parallel for if (outer * len * inner > MP_PAR_MIN))
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t at = mp_extremum_at(x, xdt, o, len, inner, i, (float)sign);
            for (int64_t l = 0; l < len; l++)
                mp_st(dx, dxdt, (o * len + l) * inner + i, l == at ? mp_ld(dy, dydt, o * inner + i) : 0.0f);
        }
}

/* ---- routing and indexing: topk, one_hot, gather, cumsum ------------------ */

/* topk's order: a comes before b when larger, a NaN before any number;
 * equal values keep the order of their positions (lower first) */
static inline MP_HD int mp_topk_before(float a, float b) { return (a != a && b == b) || a > b; }

/* Column (o, i) of x viewed as [outer, len, inner]: the positions of its k
 * largest, largest first, into y[o, 0..k, i], in one pass over x (each
 * element inserted into the sorted positions kept so far). */
static inline MP_HD void mp_topk_col(int32_t *y, const void *x, int xdt, int64_t o, int64_t len,
                                     int64_t inner, int64_t i, int64_t k)
{
    const int64_t xb = o * len * inner + i, yb = o * k * inner + i;
    int64_t n = 0;
    for (int64_t l = 0; l < len; l++) {
        float v = mp_ld(x, xdt, xb + l * inner);
        if (n == k && !mp_topk_before(v, mp_ld(x, xdt, xb + (int64_t)y[yb + (k - 1) * inner] * inner)))
            continue;
        int64_t j = n < k ? n++ : k - 1;
        for (; j > 0 && mp_topk_before(v, mp_ld(x, xdt, xb + (int64_t)y[yb + (j - 1) * inner] * inner)); j--)
            y[yb + j * inner] = y[yb + (j - 1) * inner];
        y[yb + j * inner] = (int32_t)l;
    }
}

static inline void mp_k_topk(void *y, const void *x, int xdt, int64_t outer, int64_t len,
                             int64_t inner, int64_t k)
{
    MP_OMP(parallel for if (outer * len * inner * k > MP_PAR_MIN))
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            mp_topk_col((int32_t *)y, x, xdt, o, len, inner, i, k);
}

/* y[i, c] = ids[i] == c: a u8 0/1 mask [n, classes]; an id out of range
 * gives a row of zeros */
static inline void mp_k_one_hot(void *y, int ydt, const void *ids, int idt, int64_t n, int64_t classes)
{
    MP_OMP(parallel for if (n * classes > MP_PAR_MIN))
    for (int64_t i = 0; i < n; i++) {
        int64_t id = mp_ld_id(ids, idt, i);
        for (int64_t c = 0; c < classes; c++)
            mp_st(y, ydt, i * classes + c, id == c ? 1.0f : 0.0f);
    }
}

/* gather: the offset in x [rank, xsh] of element j of index [rank, ish]:
 * j's coordinates, with id in place of the one along axis */
static inline MP_HD int64_t mp_gather_at(int64_t j, int rank, const int64_t *xsh, const int64_t *ish,
                                         int axis, int64_t id)
{
    int64_t off = 0, stride = 1;
    for (int d = rank - 1; d >= 0; d--) {
        int64_t c = j % ish[d];
        j /= ish[d];
        off += (d == axis ? id : c) * stride;
        stride *= xsh[d];
    }
    return off;
}

/* y[j] = x at index[j] along axis (torch.gather); an index outside [0,
 * xsh[axis]) gives NaN, never a read out of bounds */
static inline void mp_k_gather(void *y, int ydt, const void *x, int xdt, const void *index, int idt,
                               int rank, const int64_t *xsh, const int64_t *ish, int axis)
{
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= ish[d];
    MP_OMP(parallel for if (n > MP_PAR_MIN))
    for (int64_t j = 0; j < n; j++) {
        int64_t id = mp_ld_id(index, idt, j);
        mp_st(y, ydt, j, id >= 0 && id < xsh[axis] ? mp_ld(x, xdt, mp_gather_at(j, rank, xsh, ish, axis, id)) : NAN);
    }
}

/* Index column c (its coordinates off the axis, viewed as [outer, L,
 * inner] around it) of gather's gradient: dy added into dx at each index
 * of the column, in order. Different columns touch different elements. */
static inline MP_HD void mp_gather_grad_col(void *dx, int dxdt, const void *dy, int dydt,
                                            const void *index, int idt, int rank, const int64_t *xsh,
                                            const int64_t *ish, int axis, int64_t c)
{
    int64_t inner = 1;
    for (int d = axis + 1; d < rank; d++)
        inner *= ish[d];
    int64_t L = ish[axis], j0 = c / inner * L * inner + c % inner;
    for (int64_t l = 0; l < L; l++) {
        int64_t j = j0 + l * inner, id = mp_ld_id(index, idt, j);
        if (id < 0 || id >= xsh[axis])
            continue;
        int64_t at = mp_gather_at(j, rank, xsh, ish, axis, id);
        mp_st(dx, dxdt, at, mp_ld(dx, dxdt, at) + mp_ld(dy, dydt, j));
    }
}

static inline void mp_k_gather_grad(void *dx, int dxdt, const void *dy, int dydt, const void *index,
                                    int idt, int rank, const int64_t *xsh, const int64_t *ish, int axis)
{
    int64_t nx = 1, cols = 1;
    for (int d = 0; d < rank; d++)
        nx *= xsh[d], cols *= d == axis ? 1 : ish[d];
    MP_OMP(parallel for if (nx > MP_PAR_MIN))
    for (int64_t j = 0; j < nx; j++)
        mp_st(dx, dxdt, j, 0.0f);
    MP_OMP(parallel for if (cols * ish[axis] > MP_PAR_MIN))
    for (int64_t c = 0; c < cols; c++)
        mp_gather_grad_col(dx, dxdt, dy, dydt, index, idt, rank, xsh, ish, axis, c);
}

/* Column (o, i) of the cumulative sum along len, summed in double (as
 * torch's CPU kernel); reverse: from the end (cumsum's gradient) */
static inline MP_HD void mp_cumsum_col(void *y, int ydt, const void *x, int xdt, int64_t o, int64_t len,
                                       int64_t inner, int64_t i, int reverse)
{
    double s = 0;
    for (int64_t l = 0; l < len; l++) {
        int64_t at = (o * len + (reverse ? len - 1 - l : l)) * inner + i;
        s += (double)mp_ld(x, xdt, at);
        mp_st(y, ydt, at, (float)s);
    }
}

static inline void mp_k_cumsum(void *y, int ydt, const void *x, int xdt, int64_t outer, int64_t len,
                               int64_t inner, int reverse)
{
    MP_OMP(parallel for if (outer * len * inner > MP_PAR_MIN))
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            mp_cumsum_col(y, ydt, x, xdt, o, len, inner, i, reverse);
}

/* y = where(c, a, b), the three broadcast to y (NumPy rules): rows of y's
 * last axis, each operand's row found from its own strides. */
static inline void mp_k_where(void *y, int ydt, int yr, const int64_t *ysh, const void *c, int cdt,
                              int cr, const int64_t *csh, const void *a, int adt, int ar,
                              const int64_t *ash, const void *b, int bdt, int br, const int64_t *bsh)
{
    int64_t st[3][MP_MAX_RANK];
    mp_bcast_strides(yr, cr, csh, st[0]);
    mp_bcast_strides(yr, ar, ash, st[1]);
    mp_bcast_strides(yr, br, bsh, st[2]);
    int64_t len = yr ? ysh[yr - 1] : 1, rows = 1;
    for (int d = 0; d < yr - 1; d++)
        rows *= ysh[d];
    int64_t lc = yr ? st[0][yr - 1] : 0, la = yr ? st[1][yr - 1] : 0, lb = yr ? st[2][yr - 1] : 0;
    MP_OMP(parallel for if (rows * len > MP_PAR_MIN))
    for (int64_t r = 0; r < rows; r++) {
        int64_t co = 0, ao = 0, bo = 0, q = r;
        for (int d = yr - 2; d >= 0; d--) {
            int64_t i = q % ysh[d];
            q /= ysh[d];
            co += i * st[0][d];
            ao += i * st[1][d];
            bo += i * st[2][d];
        }
        for (int64_t k = 0; k < len; k += MP_CHUNK) {
            float t[MP_CHUNK], u[MP_CHUNK], w[MP_CHUNK];
            int64_t m = mp_min64(len - k, MP_CHUNK);
            mp_ld_n(c, cdt, co + k * lc, lc, m, w);
            mp_ld_n(a, adt, ao + k * la, la, m, t);
            mp_ld_n(b, bdt, bo + k * lb, lb, m, u);
            for (int64_t i = 0; i < m; i++)
                t[i] = mp_where(w[i], t[i], u[i]);
            mp_st_n(y, ydt, r * len + k, 1, m, t);
        }
    }
}

/* rms_norm and rope, per element (shared with CUDA) */

/* 1/sqrt(mean(v^2) + eps) of v[0..n), the squares summed in double. */
static inline MP_HD float mp_rms_rstd(double sumsq, int64_t n, float eps)
{
    return 1.0f / sqrtf((float)(sumsq / (double)n) + eps);
}

/* Feature j of D at position pos: its partner in the rotated pair and the
 * angle pos theta^(-2i/D) of pair i, computed in f32 as llama2.c does.
 * Interleaved pairs are (2i, 2i+1); half pairs (i, i + D/2). Returns
 * whether j is the first of its pair. */
static inline MP_HD int mp_rope_pair(int64_t j, int64_t D, int half, int64_t pos, float theta,
                                     int64_t *partner, float *angle)
{
    int64_t i = half ? j % (D / 2) : j / 2;
    int first = half ? j < D / 2 : j % 2 == 0;
    *partner = half ? (first ? j + D / 2 : j - D / 2) : j ^ 1;
    *angle = (float)pos * (1.0f / powf(theta, (float)(2 * i) / (float)D));
    return first;
}

/* The rotated value of feature j (v) whose partner is u; sign -1 rotates
 * back by the angle (the gradient). */
static inline MP_HD float mp_rope_value(float v, float u, int first, float angle, float sign)
{
    float c = cosf(angle), s = sign * sinf(angle);
    return first ? v * c - u * s : u * s + v * c;
}

#endif
