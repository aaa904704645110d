/* mp_kernels_gemm.h - mp_gemm, the one matrix product, and the kernels made
 * of it (matmul, matmul_tn, linear). API list: mp_kernels.h.
 *
 * mp_gemm: C = alpha op(A) op(B) + beta C (+ bias), where A, B, C and bias
 * may each be stored as f32, f16 or bf16. The product accumulates in f32
 * (f16/bf16 values are exact in f32) and each element of C is rounded once,
 * when stored. So a product of f16 inputs stored as f16 is the f32 product
 * rounded once, which is what cuBLAS's f16 GEMM with f32 compute returns.
 *
 * How it is fast (the Goto/BLIS scheme): C is cut into rectangles that
 * threads take as they come free (a grid chosen by mp_split, along N when
 * M is small, along M when N is, so that no B panel is packed twice and
 * threads never wait for each other's packing); a thread packs the B
 * columns of its rectangle into panels NR wide, then cuts the rectangle
 * into tiles of about MC x NC, and for each K block packs its A block into
 * row panels MR high (or, for an f32 A, reads the panels where they lie)
 * and runs the register-blocked micro-kernel (MR x NR accumulators in
 * registers) over every panel pair, adding into an f32 tile that stays in
 * cache. When K is long and C small (weight gradients), the threads share
 * K instead (mp_gemm_ksplit). Packing converts f16/bf16 to f32 with the
 * vector conversions (F16C, AVX2) one source run at a time and spreads the
 * runs over the panels with register transposes; it also rounds f32
 * operands to f16/bf16 when asked (around / bround: a cast fused into the
 * product), or to TF32 (float32_matmul = "tf32": mp_gemm_tf32). A tile
 * is rounded and stored only when all of K is summed, so storage types
 * cost nothing in the inner loop. Panels are zero-padded to MR and NR, so
 * the micro-kernel has no edge cases. The micro-kernel (one body,
 * MP_UK_LOOP, instantiated per level; chosen at run time by mp_uk(), so a
 * plain `cc -O2` build gets them too; MP_CPU forces a level, mp_vmath.h)
 * is 6x16 in AVX2+FMA intrinsics, 6x32 in AVX-512, 6x32 on bf16 pairs
 * with AVX512_BF16's vdpbf16ps where both operands are exact in bf16,
 * else 6x8 in GCC/Clang vector extensions or plain C. -DMP_GEMM_PORTABLE
 * leaves the x86 kernels out, -DMP_GEMM_MODEL16 puts the AVX-512 kernels'
 * models in their place on any CPU (tests use both).
 * Order of the sum, the same on every path: each element of C is one
 * chain over k ascending within a KC block, and the blocks' partial sums
 * are added to the f32 tile in order of k. Paths differ only in rounding:
 * the AVX2 and AVX-512 kernels fuse each multiply-add (the bf16 pairs'
 * too, reading subnormals as zero: mp_dpbf16), the portable one fuses where
 * the compiler contracts `c + a * b` (-march with FMA), else rounds twice;
 * test_kernels checks both against a double reference. With
 * -fopenmp, products of more than 4M multiply-adds run on all threads
 * (one parallel region each); each element's sum has the same order on any
 * number (test_threads_same_bits, t_threads_bits.sh). tests/bench_gemm.c measures
 * GFLOP/s against OpenBLAS on the examples' shapes.
 *
 * -DMP_USE_CBLAS: products go to cblas_sgemm (link -lopenblas); f16/bf16
 * operands are converted to f32 first (exactly) and the result rounded
 * once, so the numbers keep f16 semantics. */
#ifndef MP_KERNELS_GEMM_H
#define MP_KERNELS_GEMM_H

#include "mp_kernels.h"

#ifdef MP_USE_CBLAS
#include <cblas.h>
/* OpenBLAS's cblas.h includes <complex.h>: its macros `I` and `complex`
 * would break model code that uses those names. */
#undef I
#undef complex
#endif

#define MP_MR 6                 /* rows of the micro-kernel's tile */
#define MP_MC_MAX 96            /* rows of C per tile (a multiple of MP_MR) */
#define MP_NC_MAX 1024          /* columns of C per tile (a multiple of 32): A panels packed once serve them all */
#define MP_KC 256               /* depth of one packed block */
#define MP_BPACK_MAX (8 << 20)  /* floats of packed B per pass: bounds memory */

typedef struct MpGemm {
    int ta, tb;                 /* op(X) = X^T when set */
    int64_t M, N, K;            /* op(A) [M, K], op(B) [K, N], C [M, N] */
    float alpha, beta;
    const void *A; int adt; int64_t lda;
    const void *B; int bdt; int64_t ldb;
    void *C; int cdt; int64_t ldc;
    const void *bias; int biasdt;   /* NULL, or added before rounding: */
    int bias_per_row;               /* 0: bias[N] to each row; 1: bias[M] to each column */
    int around, bround;   /* 0, or MP_F16 / MP_BF16 / MP_TF32 / mp_rnd_fp8(): operand A (B) is
                             rounded to that type (scaled and quantised) while packing, so the product equals the
                             product of the operand cast first (a cast fused into the GEMM) */
    void (*epi)(const void *ctx, float *v, int64_t i, int64_t j0, int64_t n);
    const void *epi_ctx;  /* epi: NULL, or called once for each row segment C[i, j0 .. j0+n) of the
                             finished f32 result (alpha op(A)op(B) + beta C + bias, NOT yet rounded to
                             cdt), before it is rounded to cdt and stored; it may rewrite v (its values
                             are then stored, rounded to cdt) and may store elsewhere (other buffers of a
                             fused group); called from the GEMM's threads, each (i, j) exactly once */
} MpGemm;

/* ---- micro-kernels: C[MR x nr] (+)= A panel . B panel ------------------- */

/* C[i ldc + j] = (first ? 0 : C[i ldc + j]) + sum_k A[i rs + k cs] B[k nr + j]:
 * A is a packed panel (rs 1, cs MR) or, for f32 operands, the operand
 * itself, unpacked (rs lda, cs 1; or rs 1, cs lda when transposed). */
typedef void MpUkernel(int64_t kc, const float *A, int64_t rs, int64_t cs, const float *B,
                       float *C, int64_t ldc, int first);

/* The body for vectors V of VW floats: 12 accumulators (6 rows x 2
 * vectors, nr = 2 VW) stay in registers over the whole of kc. */
#define MP_UK_ROW(i)                                                           \
    a = VBCAST(a##i + off);                                                    \
    c##i##0 = VFMA(a, b0, c##i##0);                                            \
    c##i##1 = VFMA(a, b1, c##i##1);
#define MP_UK_OUT(i)                                                           \
    if (!first) {                                                              \
        c##i##0 = VADD(c##i##0, VLOAD(C + (i) * ldc));                         \
        c##i##1 = VADD(c##i##1, VLOAD(C + (i) * ldc + VW));                    \
    }                                                                          \
    VSTORE(C + (i) * ldc, c##i##0);                                            \
    VSTORE(C + (i) * ldc + VW, c##i##1);
#define MP_UK_LOOP(V, RS, CS)                                              \
    V c00 = VZERO(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,    \
      c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;        \
    const float *a0 = A, *a1 = a0 + (RS), *a2 = a1 + (RS), *a3 = a2 + (RS),   \
                *a4 = a3 + (RS), *a5 = a4 + (RS);                              \
    for (int64_t k = 0, off = 0; k < kc; k++, off += (CS), B += 2 * VW) {      \
        V a, b0 = VLOAD(B), b1 = VLOAD(B + VW);                                \
        MP_UK_ROW(0) MP_UK_ROW(1) MP_UK_ROW(2) MP_UK_ROW(3) MP_UK_ROW(4)       \
        MP_UK_ROW(5)                                                           \
    }                                                                          \
    MP_UK_OUT(0) MP_UK_OUT(1) MP_UK_OUT(2) MP_UK_OUT(3) MP_UK_OUT(4) MP_UK_OUT(5)
/* Packed panels get a loop of their own, with constant strides. */
#define MP_UK_BODY(V)                                                          \
    if (rs == 1 && cs == MP_MR) {                                              \
        MP_UK_LOOP(V, 1, MP_MR)                                                \
    } else {                                                                   \
        MP_UK_LOOP(V, rs, cs)                                                  \
    }

/* x86 with GCC or Clang: the AVX2+FMA and AVX-512 kernels are compiled
 * through target attributes whatever -march says, and used where the CPU
 * has them (mp_uk). The vector macros are defined for each instantiation
 * of the one body above and undefined after it. */
#if defined(MP_X86) && !defined(MP_GEMM_PORTABLE)
#define MP_AVX2_GEMM 1
#define VW 8
#define VZERO() _mm256_setzero_ps()
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VBCAST(p) _mm256_broadcast_ss(p)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
/* 6x16 */
__attribute__((target("avx2,fma")))
static inline void mp_uk_avx2(int64_t kc, const float *A, int64_t rs, int64_t cs,
                              const float *B, float *C, int64_t ldc, int first)
{
    MP_UK_BODY(__m256)
}
#undef VW
#undef VZERO
#undef VLOAD
#undef VSTORE
#undef VBCAST
#undef VFMA
#undef VADD

#define VW 16
#define VZERO() _mm512_setzero_ps()
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VBCAST(p) _mm512_set1_ps(*(p))
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
/* 6x32: each element the same chain of fused multiply-adds as mp_uk_avx2's,
 * so the same bits; half the instructions a multiply-add */
__attribute__((target("avx512f")))
static inline void mp_uk_avx512(int64_t kc, const float *A, int64_t rs, int64_t cs,
                                const float *B, float *C, int64_t ldc, int first)
{
    MP_UK_BODY(__m512)
}
/* 6x32 on bf16 pairs (packed panels only; kc counts pairs): vdpbf16ps
 * adds two products a lane, the pair's high half first (mp_dpbf16), and
 * the packing puts the earlier k there (mp_bf16_pair) */
#undef VFMA
#define VFMA(a, b, c) _mm512_dpbf16_ps(c, (__m512bh)(a), (__m512bh)(b))
__attribute__((target("avx512f,avx512bf16")))
static inline void mp_uk_bf16(int64_t kc, const float *A, int64_t rs, int64_t cs,
                              const float *B, float *C, int64_t ldc, int first)
{
    (void)rs;
    (void)cs;
    MP_UK_LOOP(__m512, 1, MP_MR)
}
#undef VW
#undef VZERO
#undef VLOAD
#undef VSTORE
#undef VBCAST
#undef VFMA
#undef VADD
#endif

/* Otherwise 6x8: vector extensions (SSE2 on any x86-64, NEON on ARM), or
 * plain C for other compilers and nvcc's host pass. */
#if !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#define MP_GEMM_VEXT 1
typedef float MpVec4 __attribute__((vector_size(16)));
static inline MpVec4 mp_v4load(const float *p)
{
    MpVec4 v;
    memcpy(&v, p, sizeof v);
    return v;
}
#define VW 4
#define VZERO() ((MpVec4){0.0f, 0.0f, 0.0f, 0.0f})
#define VLOAD(p) mp_v4load(p)
#define VSTORE(p, v) memcpy(p, &(v), sizeof(MpVec4))
#define VBCAST(p) ((MpVec4){*(p), *(p), *(p), *(p)})
#define VFMA(a, b, c) ((c) + (a) * (b))
#define VADD(a, b) ((a) + (b))
static inline void mp_uk_generic(int64_t kc, const float *A, int64_t rs, int64_t cs,
                                 const float *B, float *C, int64_t ldc, int first)
{
    MP_UK_BODY(MpVec4)
}
#undef VW
#undef VZERO
#undef VLOAD
#undef VSTORE
#undef VBCAST
#undef VFMA
#undef VADD
#else
static inline void mp_uk_generic(int64_t kc, const float *A, int64_t rs, int64_t cs,
                                 const float *B, float *C, int64_t ldc, int first)
{
    float acc[MP_MR][8] = {{0}};
    for (int64_t k = 0; k < kc; k++, A += cs, B += 8)
        for (int i = 0; i < MP_MR; i++)
            for (int j = 0; j < 8; j++)
                acc[i][j] += A[i * rs] * B[j];
    for (int i = 0; i < MP_MR; i++)
        for (int j = 0; j < 8; j++)
            C[i * ldc + j] = first ? acc[i][j] : C[i * ldc + j] + acc[i][j];
}
#endif

/* ---- the AVX-512 kernels' models: the same body on 16-float vectors ------
 * Any GCC or Clang compiles these, so the 32-wide panels and the bf16
 * pairs' packing are tested on every machine (a build with
 * -DMP_GEMM_MODEL16 takes them in place of the instructions, on any CPU),
 * and where the CPU has the instructions test_kernels checks them against
 * these models bit for bit. */

/* One lane of vdpbf16ps (Intel's SDM, and measured: test_kernels): acc
 * plus the product of a's and b's high bf16 halves, then plus that of the
 * low halves, each a fused multiply-add in f32 with subnormal inputs read
 * as zero and a subnormal result flushed to zero. A product of two bf16
 * values is exact in f32, so where nothing is subnormal this is the f32
 * kernels' fmaf(a1, b1, fmaf(a0, b0, acc)) with a0, b0 in the high halves. */
static inline float mp_ftz(float x) { return fabsf(x) < 0x1p-126f ? copysignf(0.0f, x) : x; }
static inline float mp_bf16_hi(float p) { return mp_ftz(mp_bits_f32(mp_f32_bits(p) & 0xffff0000u)); }
static inline float mp_bf16_lo(float p) { return mp_ftz(mp_bits_f32(mp_f32_bits(p) << 16)); }
static inline float mp_dpbf16(float acc, float a, float b)
{
    acc = mp_ftz(fmaf(mp_bf16_hi(a), mp_bf16_hi(b), mp_ftz(acc)));
    return mp_ftz(fmaf(mp_bf16_lo(a), mp_bf16_lo(b), acc));
}

/* The pair of bf16 values x0 (high half: added first) and x1, as the bits
 * of a float; x0 and x1 are f32 values exact in bf16. */
static inline float mp_bf16_pair(float x0, float x1)
{
    return mp_bits_f32((mp_f32_bits(x0) & 0xffff0000u) | mp_f32_bits(x1) >> 16);
}

#ifdef MP_GEMM_VEXT
/* Lane-wise through pointers, not vectors passed or returned by value
 * (that would change the ABI where AVX-512 is not enabled): c = VFMA(a, b,
 * c) is (f(&c, &a, &b), c). */
typedef float MpVec16 __attribute__((vector_size(64)));
typedef float MpVec16u __attribute__((vector_size(64), aligned(4), may_alias));
static inline void mp_v16fma(MpVec16 *c, const MpVec16 *a, const MpVec16 *b)
{
    for (int l = 0; l < 16; l++) (*c)[l] = fmaf((*a)[l], (*b)[l], (*c)[l]);
}
static inline void mp_v16dp(MpVec16 *c, const MpVec16 *a, const MpVec16 *b)
{
    for (int l = 0; l < 16; l++) (*c)[l] = mp_dpbf16((*c)[l], (*a)[l], (*b)[l]);
}
#define VW 16
#define VZERO() ((MpVec16){0})
#define VLOAD(p) (*(const MpVec16u *)(const void *)(p))
#define VSTORE(p, v) memcpy(p, &(v), sizeof(MpVec16))
#define VBCAST(p) (VZERO() + *(p))
#define VFMA(a, b, c) (mp_v16fma(&(c), &(a), &(b)), (c))
#define VADD(a, b) ((a) + (b))
static inline void mp_uk_model16(int64_t kc, const float *A, int64_t rs, int64_t cs,
                                 const float *B, float *C, int64_t ldc, int first)
{
    MP_UK_BODY(MpVec16)
}
#undef VFMA
#define VFMA(a, b, c) (mp_v16dp(&(c), &(a), &(b)), (c))
static inline void mp_uk_bf16_model(int64_t kc, const float *A, int64_t rs, int64_t cs,
                                    const float *B, float *C, int64_t ldc, int first)
{
    (void)rs;
    (void)cs;
    MP_UK_LOOP(MpVec16, 1, MP_MR)
}
#undef VW
#undef VZERO
#undef VLOAD
#undef VSTORE
#undef VBCAST
#undef VFMA
#undef VADD
#endif

/* The micro-kernel a product runs, its tile width, and whether it takes
 * bf16 pairs (its panels then hold a pair of k a float, mp_pack2). */
typedef struct MpUk {
    MpUkernel *fn;
    int nr;
    int pairs;
} MpUk;

/* Whether operand X (type dt, rounded to rnd) is exact in bf16: a bf16
 * tensor, or one rounded to bf16 or to an FP8 format (whose values bf16
 * holds) while packing. */
static inline int mp_gemm_bf16_operand(int dt, int rnd)
{
    if (rnd == MP_BF16 || (rnd & MP_RND_FP8))
        return 1;
    return dt == MP_BF16 && (rnd == 0 || rnd == MP_F32);
}

static inline MpUk mp_uk(const MpGemm *g)
{
    MpUk uk = {mp_uk_generic, 8, 0};
    int bf16 = mp_gemm_bf16_operand(g->adt, g->around) && mp_gemm_bf16_operand(g->bdt, g->bround);
#if defined(MP_GEMM_MODEL16) && defined(MP_GEMM_VEXT)
    uk.fn = bf16 ? mp_uk_bf16_model : mp_uk_model16;   /* on any CPU: the tests */
    uk.nr = 32;
    uk.pairs = bf16;
#elif defined(MP_AVX2_GEMM)
    int l = mp_cpu_level();
    if (bf16 && l >= MP_CPU_AVX512_BF16) {
        uk.fn = mp_uk_bf16;
        uk.nr = 32;
        uk.pairs = 1;
    } else if (l >= MP_CPU_AVX512) {
        uk.fn = mp_uk_avx512;
        uk.nr = 32;
    } else if (l >= MP_CPU_AVX2) {
        uk.fn = mp_uk_avx2;
        uk.nr = 16;
    }
#else
    (void)bf16;
#endif
    return uk;
}

/* ---- packing ------------------------------------------------------------ */

/* The n values src[off ..] of type dt as f32, rounded to rnd (0: not
 * rounded): src itself when that is already so, else buf, filled. */
static inline const float *mp_pack_src(const void *src, int dt, int64_t off, int64_t n,
                                       int rnd, float *buf)
{
    int round = rnd != 0 && rnd != MP_F32 && rnd != dt;
    if (dt == MP_F32 && !round)
        return (const float *)src + off;
    mp_ld_n(src, dt, off, 1, n, buf);
    if (round)
        mp_round_n(buf, rnd, n);
    return buf;
}

/* The widths a panel has (MR, and the kernels' NR): the loops below are
 * instantiated for each, so the compiler sees constant trip counts. */
#define MP_PACK_WIDTHS(X, R)                                                   \
    switch (R) {                                                               \
    case MP_MR: X(MP_MR); break;                                               \
    case 8: X(8); break;                                                       \
    case 16: X(16); break;                                                     \
    case 32: X(32); break;                                                     \
    default: X(R); break;                                                      \
    }

/* d[k R + i] = row[i][k], i < R, k < kc: R rows interleaved into a panel. */
#define MP_INTERLEAVE(RW)                                                      \
    for (; k < kc; k++)                                                        \
        for (int i = 0; i < (RW); i++) d[k * (RW) + i] = row[i][k];

#ifdef MP_X86
/* 8 rows of 8 as 8 columns: v[i] = rows i, out: v[j] = column j. */
#define MP_TRANSPOSE8(v)                                                                   \
    do {                                                                                   \
        __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);   \
        __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);   \
        __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);   \
        __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);   \
        __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee); \
        __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee); \
        __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee); \
        __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee); \
        v[0] = _mm256_permute2f128_ps(u0, u4, 0x20);                                       \
        v[1] = _mm256_permute2f128_ps(u1, u5, 0x20);                                       \
        v[2] = _mm256_permute2f128_ps(u2, u6, 0x20);                                       \
        v[3] = _mm256_permute2f128_ps(u3, u7, 0x20);                                       \
        v[4] = _mm256_permute2f128_ps(u0, u4, 0x31);                                       \
        v[5] = _mm256_permute2f128_ps(u1, u5, 0x31);                                       \
        v[6] = _mm256_permute2f128_ps(u2, u6, 0x31);                                       \
        v[7] = _mm256_permute2f128_ps(u3, u7, 0x31);                                       \
    } while (0)

/* R = 8, 16 or 32 (the vector kernels' B panels): 8x8 blocks transposed
 * in registers (AVX; the caller checks the CPU). */
__attribute__((target("avx")))
static inline void mp_interleave_avx(float *d, const float *const *row, int R, int64_t kc)
{
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8)
        for (int h = 0; h < R; h += 8) {
            __m256 v[8];
            for (int i = 0; i < 8; i++) v[i] = _mm256_loadu_ps(row[h + i] + k);
            MP_TRANSPOSE8(v);
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(d + (k + j) * R + h, v[j]);
        }
    if (R == 32) {
        MP_INTERLEAVE(32)
    } else if (R == 16) {
        MP_INTERLEAVE(16)
    } else {
        MP_INTERLEAVE(8)
    }
}

/* R = 6 (A panels): 4 values of rows 0-3 transposed in SSE registers,
 * rows 4-5 paired; SSE is in every x86-64. */
static inline void mp_interleave6_sse(float *d, const float *const *row, int64_t kc)
{
    int64_t k = 0;
    for (; k + 4 <= kc; k += 4, d += 24) {
        __m128 r0 = _mm_loadu_ps(row[0] + k), r1 = _mm_loadu_ps(row[1] + k);
        __m128 r2 = _mm_loadu_ps(row[2] + k), r3 = _mm_loadu_ps(row[3] + k);
        __m128 r4 = _mm_loadu_ps(row[4] + k), r5 = _mm_loadu_ps(row[5] + k);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        __m128 lo = _mm_unpacklo_ps(r4, r5), hi = _mm_unpackhi_ps(r4, r5);
        _mm_storeu_ps(d, r0);
        _mm_storel_pi((__m64 *)(void *)(d + 4), lo);
        _mm_storeu_ps(d + 6, r1);
        _mm_storeh_pi((__m64 *)(void *)(d + 10), lo);
        _mm_storeu_ps(d + 12, r2);
        _mm_storel_pi((__m64 *)(void *)(d + 16), hi);
        _mm_storeu_ps(d + 18, r3);
        _mm_storeh_pi((__m64 *)(void *)(d + 22), hi);
    }
    d -= k * 6;
    MP_INTERLEAVE(6)
}
#endif

static inline void mp_interleave(float *d, const float *const *row, int R, int64_t kc)
{
    int64_t k = 0;
#ifdef MP_X86
    if (R == 6 && MP_MR == 6) {
        mp_interleave6_sse(d, row, kc);
        return;
    }
    if ((R == 8 || R == 16 || R == 32) && mp_cpu_has(MP_CPU_AVX2_FMA)) {
        mp_interleave_avx(d, row, R, kc);
        return;
    }
#endif
    MP_PACK_WIDTHS(MP_INTERLEAVE, R)
}

/* One run spread over the panels: R values to each full panel, the rest
 * (rem < R) to the last, zero-padded; no library calls, the runs are short. */
#define MP_COPY_RUN(RW)                                                               \
    for (int64_t p = 0; p < full; p++)                                                \
        memcpy(dst + p * pstride + k * (RW), s + p * (RW), (size_t)(RW) * sizeof *s); \
    if (rem) {                                                                        \
        float *d = dst + full * pstride + k * (RW);                                   \
        for (int i = 0; i < (RW); i++) d[i] = i < rem ? s[full * (RW) + i] : 0.0f;    \
    }

/* Rows [r0, r0 + nv) of X as panels of R rows (nv <= MP_PACK_ROWS, R <=
 * MP_PACK_R): panel p at dst + p pstride holds dst[k R + i] = X(r0 + p R +
 * i, k0 + k) for k < kc, zero past row nv, converted to f32 and rounded to
 * rnd (0: not rounded) on the way. X(r, k) = src[r ld + k], or src[k ld +
 * r] when trans. Each run of the source is converted once, with the
 * vector conversions of mp_ld_n, then spread over the panels. */
#define MP_PACK_ROWS 256
#define MP_PACK_R 32

static inline void mp_pack(float *dst, int64_t pstride, const void *src, int dt, int64_t ld,
                           int trans, int rnd, int64_t r0, int64_t nv, int R, int64_t k0,
                           int64_t kc)
{
    int64_t np = (nv + R - 1) / R;
    if (trans) {   /* a run along r for each k */
        float buf[MP_PACK_ROWS];
        int64_t full = nv / R, rem = nv - full * R;
        for (int64_t k = 0; k < kc; k++) {
            const float *s = mp_pack_src(src, dt, (k0 + k) * ld + r0, nv, rnd, buf);
            MP_PACK_WIDTHS(MP_COPY_RUN, R)
        }
        return;
    }
    static const float zero[MP_KC] = {0};   /* a run along k for each r */
    float buf[MP_PACK_R * MP_KC];
    for (int64_t p = 0; p < np; p++) {
        const float *row[MP_PACK_R];
        for (int i = 0; i < R; i++) {
            int64_t r = p * R + i;
            row[i] = r < nv ? mp_pack_src(src, dt, (r0 + r) * ld + k0, kc, rnd, buf + i * MP_KC)
                            : zero;
        }
        mp_interleave(dst + p * pstride, row, R, kc);
    }
}

/* d[i] = mp_bf16_pair(s0[i], s1[i]), i < n. */
static inline void mp_pairs(float *d, const float *s0, const float *s1, int64_t n)
{
    for (int64_t i = 0; i < n; i++) d[i] = mp_bf16_pair(s0[i], s1[i]);
}

/* The same pairs from bf16 bits as they are stored (no conversion):
 * d[i] = (a[i], b[i]), i < n, b NULL for zeros; and d[q] = (x[2q],
 * x[2q + 1]) from one run of n, the partner of an odd n's last value 0. */
static inline void mp_pairs16(float *d, const uint16_t *a, const uint16_t *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)a[i] << 16 | (b ? b[i] : 0u);
        memcpy(d + i, &u, sizeof u);
    }
}

static inline void mp_pairs16_run(float *d, const uint16_t *x, int64_t n)
{
    for (int64_t q = 0; q < n / 2; q++) {
        uint32_t u = (uint32_t)x[2 * q] << 16 | x[2 * q + 1];
        memcpy(d + q, &u, sizeof u);
    }
    if (n % 2) {
        uint32_t u = (uint32_t)x[n - 1] << 16;
        memcpy(d + n / 2, &u, sizeof u);
    }
}

/* mp_pack for the bf16 pairs' kernel: panel p holds dst[q R + i] =
 * mp_bf16_pair(X(r, k0 + 2q), X(r, k0 + 2q + 1)) for r = r0 + p R + i and
 * q < (kc + 1) / 2, the second value of an odd kc's last pair 0 (adding
 * 0 x 0 leaves a sum as it is). A bf16 operand's runs are paired from
 * their bits (mp_pairs16); others are read with mp_pack_src, as in
 * mp_pack, and must be exact in bf16 (mp_gemm_bf16_operand). */
static inline void mp_pack2(float *dst, int64_t pstride, const void *src, int dt, int64_t ld,
                            int trans, int rnd, int64_t r0, int64_t nv, int R, int64_t k0,
                            int64_t kc)
{
    static const float zero[MP_KC] = {0};
    int64_t np = (nv + R - 1) / R, kp = (kc + 1) / 2;
    /* bf16 as it is stored: its bits paired directly */
    const uint16_t *x16 = dt == MP_BF16 && (rnd == 0 || rnd == MP_F32 || rnd == MP_BF16)
                              ? (const uint16_t *)src : NULL;
    if (trans) {   /* runs along r for k and k + 1 */
        float b0[MP_PACK_ROWS], b1[MP_PACK_ROWS], pr[MP_PACK_ROWS];
        const float *s = pr;
        int64_t full = nv / R, rem = nv - full * R;
        for (int64_t k = 0; k < kp; k++) {
            int64_t o0 = (k0 + 2 * k) * ld + r0, o1 = o0 + ld;
            if (x16) {
                mp_pairs16(pr, x16 + o0, 2 * k + 1 < kc ? x16 + o1 : NULL, nv);
            } else {
                const float *s0 = mp_pack_src(src, dt, o0, nv, rnd, b0);
                const float *s1 = 2 * k + 1 < kc ? mp_pack_src(src, dt, o1, nv, rnd, b1) : zero;
                mp_pairs(pr, s0, s1, nv);
            }
            MP_PACK_WIDTHS(MP_COPY_RUN, R)
        }
        return;
    }
    float buf[MP_KC + 1], pr[MP_PACK_R * MP_KC / 2];
    for (int64_t p = 0; p < np; p++) {
        const float *row[MP_PACK_R];
        for (int i = 0; i < R; i++) {
            int64_t r = p * R + i;
            row[i] = zero;
            if (r >= nv)
                continue;
            row[i] = pr + i * MP_KC / 2;
            if (x16) {
                mp_pairs16_run(pr + i * MP_KC / 2, x16 + (r0 + r) * ld + k0, kc);
                continue;
            }
            const float *x = mp_pack_src(src, dt, (r0 + r) * ld + k0, kc, rnd, buf);
            if (kc % 2) {   /* the odd last value's partner */
                if (x != buf)
                    memcpy(buf, x, (size_t)kc * sizeof *buf);
                buf[kc] = 0.0f;
                x = buf;
            }
            for (int64_t q = 0; q < kp; q++) pr[i * MP_KC / 2 + q] = mp_bf16_pair(x[2 * q], x[2 * q + 1]);
        }
        mp_interleave(dst + p * pstride, row, R, kp);
    }
}

/* Floats from one B panel of kn rows to the next: a cache line more than
 * the panel, so that the panels' rows for one k do not all fall in the
 * same cache set (kn nr is a power of two). */
static inline int64_t mp_bstride(int64_t kn, MpUk uk)
{
    return (uk.pairs ? (kn + 1) / 2 : kn) * uk.nr + 16;
}

/* Where depth k0 (a multiple of MP_KC) starts in a panel: k0 rows of nr,
 * or k0 / 2 rows of pairs. */
static inline int64_t mp_koff(int64_t k0, MpUk uk) { return (uk.pairs ? k0 / 2 : k0) * uk.nr; }

/* op(B)'s columns [j0, j0 + n) and rows [k0, k0 + kn) as panels of nr
 * columns: panel p holds columns j0 + p nr ..., row k0 + k at
 * Bp + p mp_bstride(kn, uk) + k nr (or pairs of rows, mp_pack2). (Unlike A, B is always packed: read in
 * place, its rows at a power-of-two stride fall in few cache sets;
 * measured 15-20% slower on the TN shapes.) */
static inline void mp_pack_b(float *Bp, const MpGemm *g, MpUk uk, int64_t j0, int64_t n,
                             int64_t k0, int64_t kn)
{
    /* up to MP_PACK_ROWS columns at a time: when B is not transposed,
     * each of its rows is then read (and converted) in one run, not one
     * panel's width at a time (it was 17% of a 64x64x1024 product) */
    int64_t bs = mp_bstride(kn, uk);
    for (int64_t j = 0; j < n; j += MP_PACK_ROWS)
        for (int64_t k = 0; k < kn; k += MP_KC)
            /* op(B)(k, j) = B[k ldb + j], so as X(j, k) it is the trans case */
            (uk.pairs ? mp_pack2 : mp_pack)(Bp + j / uk.nr * bs + mp_koff(k, uk), bs, g->B,
                                            g->bdt, g->ldb, !g->tb, g->bround, j0 + j,
                                            mp_min64(n - j, MP_PACK_ROWS), uk.nr, k0 + k,
                                            mp_min64(kn - k, MP_KC));
}

/* ---- storing a tile: alpha, bias, beta, one rounding ----------------- */

/* T[i * ldt + j], i < mv, j < nv, is the f32 sum for C[i0 + i, j0 + j]. */
static inline void mp_gemm_store(const MpGemm *g, float *T, int64_t ldt, int64_t i0,
                                 int64_t j0, int64_t mv, int64_t nv, float alpha)
{
    float bias[MP_CHUNK];
    for (int64_t i = 0; i < mv; i++) {
        float *r = T + i * ldt;
        if (alpha != 1.0f)   /* x * 1 is x: the pass is skipped, not the rounding */
            for (int64_t j = 0; j < nv; j++) r[j] *= alpha;
        for (int64_t c = 0; g->bias && c < nv; c += MP_CHUNK) {
            int64_t m = mp_min64(nv - c, MP_CHUNK);
            if (g->bias_per_row)
                mp_ld_n(g->bias, g->biasdt, i0 + i, 0, m, bias);
            else
                mp_ld_n(g->bias, g->biasdt, j0 + c, 1, m, bias);
            for (int64_t j = 0; j < m; j++) r[c + j] += bias[j];
        }
        mp_add_beta(g->C, g->cdt, (i0 + i) * g->ldc + j0, nv, r, g->beta);
        if (g->epi)          /* a fused group's elementwise ops (compiler/fuse.c) */
            g->epi(g->epi_ctx, r, i0 + i, j0, nv);
        mp_st_n(g->C, g->cdt, (i0 + i) * g->ldc + j0, 1, nv, r);
    }
}

/* ---- the blocked product ------------------------------------------------ */

/* How the threads share C: a grid of pr x pc rectangles, one per thread,
 * each packing the B panels of its own columns, so the threads never wait
 * for each other inside a product. A rectangle is a whole number of MR
 * rows and NR columns, the grid evened out so that no thread has more
 * than one panel more than another. The grid minimises the largest
 * thread's work: its multiply-adds, plus MP_PACK_COST for each element it
 * packs (its B columns over all of K once, its A rows once per NC_MAX
 * columns). A product too small for threads runs on one (mp_gemm_blocked). */
#define MP_PACK_COST 12.0

typedef struct MpSplit {
    int pr, pc;
    double cost;   /* the largest thread's work, in multiply-adds */
} MpSplit;

static inline MpSplit mp_split(int64_t M, int64_t N, int64_t K, int nr, int nt)
{
    int64_t mpn = (M + MP_MR - 1) / MP_MR, npn = (N + nr - 1) / nr;
    MpSplit best = {nt, 1, -1};
    for (int pc = 1; pc <= nt; pc++) {
        if (nt % pc)
            continue;
        int pr = nt / pc;
        double rows = (double)((mpn + pr - 1) / pr * MP_MR);
        double cols = (double)((npn + pc - 1) / pc * nr);
        double c = rows * cols * (double)K +
                   MP_PACK_COST * (double)K * (cols + rows * ((cols + MP_NC_MAX - 1) / MP_NC_MAX));
        if (best.cost < 0 || c < best.cost) {
            best.cost = c;
            best.pr = pr;
            best.pc = pc;
        }
    }
    return best;
}

/* Part g of n parts of npan panels of width w, clipped to len: [*lo, *hi). */
static inline void mp_share(int64_t npan, int w, int64_t len, int g, int n, int64_t *lo,
                            int64_t *hi)
{
    *lo = mp_min64(npan * g / n * w, len);
    *hi = mp_min64(npan * (g + 1) / n * w, len);
}

/* Tiles of at most MAX (a multiple of w) over len, evened out: the size. */
static inline int64_t mp_tile_size(int64_t len, int64_t max, int w)
{
    int64_t nb = (len + max - 1) / max;
    if (nb < 1)
        nb = 1;
    return ((len + nb - 1) / nb + w - 1) / w * w;
}

/* Whether op(A) goes to the micro-kernel unpacked: f32 and not rounded,
 * so a panel of MR rows is read where it lies (packing would only move
 * it; for K = 64 products it cost as much as the product). Transposed, a
 * panel takes MR values from each of kc rows of A: at a stride past
 * MP_A_DIRECT_LD floats those rows fall in too few cache sets (512x784x128
 * TN: 87 -> 77 GFLOP/s), so such an A is packed. */
#define MP_A_DIRECT_LD 256

static inline int mp_a_direct(const MpGemm *g)
{
    return g->adt == MP_F32 && (g->around == 0 || g->around == MP_F32) &&
           (!g->ta || g->lda <= MP_A_DIRECT_LD);
}

/* The A panels of rows [i0, i0 + mv), depth [k0, k0 + kc), for the micro-
 * kernel: full panels unpacked when mp_a_direct (*rs, *cs: their strides;
 * panel p at *a + p *pstep), else packed into Ap. A last panel of fewer
 * than MR rows is always packed (zero-padded, no reading past op(A)): at
 * *last, or NULL when the panels are all alike. */
typedef struct MpApan {
    const float *a, *last;
    int64_t rs, cs, pstep;
} MpApan;

static inline MpApan mp_a_panels(const MpGemm *g, MpUk uk, int64_t i0, int64_t mv, int64_t k0,
                                  int64_t kc, float *Ap)
{
    MpApan r = {Ap, NULL, 1, MP_MR, kc * MP_MR};
    if (uk.pairs) {
        r.pstep = (kc + 1) / 2 * MP_MR;
        mp_pack2(Ap, r.pstep, g->A, g->adt, g->lda, g->ta, g->around, i0, mv, MP_MR, k0, kc);
        return r;
    }
    if (!mp_a_direct(g)) {
        mp_pack(Ap, kc * MP_MR, g->A, g->adt, g->lda, g->ta, g->around, i0, mv, MP_MR, k0, kc);
        return r;
    }
    const float *A = (const float *)g->A;
    r.a = g->ta ? A + k0 * g->lda + i0 : A + i0 * g->lda + k0;
    r.rs = g->ta ? 1 : g->lda;
    r.cs = g->ta ? g->lda : 1;
    r.pstep = MP_MR * r.rs;
    int64_t full = mv / MP_MR;
    if (full * MP_MR < mv) {
        mp_pack(Ap, 0, g->A, g->adt, g->lda, g->ta, 0, i0 + full * MP_MR, mv - full * MP_MR,
                MP_MR, k0, kc);
        r.last = Ap;
    }
    return r;
}

/* A's panels packed ahead, once, for rows [r0, r1) and all of K (where A
 * is not read in place, mp_gemm_grid's pieces): block k0 / MP_KC's panels
 * from a + (k0 / MP_KC) kstep, MR rows each, as mp_a_panels packs them.
 * Without it (a NULL), every tile packs its own, once for each of its
 * column blocks and passes over N. */
typedef struct MpApre {
    float *a;
    int64_t r0, r1, kstep;
} MpApre;

/* Floats of one block of k's packed panels of MR rows (kc values, or
 * (kc + 1) / 2 pairs of them). */
static inline int64_t mp_apanel(int64_t kc, MpUk uk)
{
    return (uk.pairs ? (kc + 1) / 2 : kc) * MP_MR;
}

/* Packs rows [r0, r1) for all of K into pre->a (kstep: the rows' panels
 * for a whole MP_KC), mp_a_panels' panels of MP_MC_MAX rows at a time. */
static inline void mp_apre_pack(const MpGemm *g, MpUk uk, MpApre *pre, int64_t r0, int64_t r1)
{
    pre->r0 = r0;
    pre->r1 = r1;
    pre->kstep = (r1 - r0 + MP_MR - 1) / MP_MR * mp_apanel(MP_KC, uk);
    for (int64_t k0 = 0; k0 < g->K; k0 += MP_KC) {
        int64_t kc = mp_min64(g->K - k0, MP_KC);
        for (int64_t i = r0; i < r1; i += MP_MC_MAX)
            mp_a_panels(g, uk, i, mp_min64(r1 - i, MP_MC_MAX), k0, kc,
                        pre->a + k0 / MP_KC * pre->kstep + (i - r0) / MP_MR * mp_apanel(kc, uk));
    }
}

/* T[i ldt + j] (=, first; else +=) the sum over k in [k0, k0 + kc) for
 * rows [i0, i0 + mv) of C and npan B panels, panel q at Bq + q bstep; A's
 * panels from pre where it holds them, else packed into Ap. */
static inline void mp_gemm_kblock(const MpGemm *g, MpUk uk, const float *Bq, int64_t bstep,
                                  int64_t npan, int64_t i0, int64_t mv, int64_t k0,
                                  int64_t kc, int first, float *Ap, const MpApre *pre,
                                  float *T, int64_t ldt)
{
    int64_t mp = (mv + MP_MR - 1) / MP_MR;
    MpApan ap;
    if (pre && pre->a) {
        int64_t ps = mp_apanel(kc, uk);
        ap = (MpApan){pre->a + k0 / MP_KC * pre->kstep + (i0 - pre->r0) / MP_MR * ps, NULL, 1,
                      MP_MR, ps};
    } else {
        ap = mp_a_panels(g, uk, i0, mv, k0, kc, Ap);
    }
    if (uk.pairs)
        kc = (kc + 1) / 2;   /* the kernel's steps */
    for (int64_t q = 0; q < npan; q++)
        for (int64_t p = 0; p < mp; p++) {
            float *t = T + p * MP_MR * ldt + q * uk.nr;
            if (ap.last && p == mp - 1)
                uk.fn(kc, ap.last, 1, MP_MR, Bq + q * bstep, t, ldt, first);
            else
                uk.fn(kc, ap.a + p * ap.pstep, ap.rs, ap.cs, Bq + q * bstep, t, ldt, first);
        }
}

/* One tile: rows [i0, i0 + mv) and columns [j0, j0 + nv) of C, where
 * column j0 is column jb of the packed panels Bp. */
static inline void mp_gemm_tile(const MpGemm *g, MpUk uk, const float *Bp, int64_t jb,
                                int64_t i0, int64_t mv, int64_t j0, int64_t nv, int64_t nc,
                                float *Ap, const MpApre *pre, float *T)
{
    int64_t mp = (mv + MP_MR - 1) / MP_MR, npan = (nv + uk.nr - 1) / uk.nr;
    if (g->K == 0)
        memset(T, 0, (size_t)(mp * MP_MR * nc) * sizeof *T);
    for (int64_t k0 = 0; k0 < g->K; k0 += MP_KC)
        mp_gemm_kblock(g, uk, Bp + jb / uk.nr * mp_bstride(g->K, uk) + mp_koff(k0, uk),
                       mp_bstride(g->K, uk), npan, i0, mv, k0,
                       mp_min64(g->K - k0, MP_KC), k0 == 0, Ap, pre, T, nc);
    mp_gemm_store(g, T, nc, i0, j0, mv, nv, g->alpha);
}

/* 64-byte aligned scratch: returns the block to free, *p the aligned start. */
static inline void *mp_kalloc64(size_t bytes, float **p)
{
    char *raw = (char *)mp_kalloc(bytes + 64);
    *p = (float *)(void *)(raw + (64 - (uintptr_t)raw % 64) % 64);
    return raw;
}

#ifdef _OPENMP
static inline int mp_team(void) { return omp_get_num_threads(); }
#else
static inline int mp_team(void) { return 1; }
#endif

/* Rows [r0, r1) and columns [c0, c1) of C, one block of K at a time: the
 * block's rows of B (those columns) are packed, then used by all the rows
 * while they are in cache, and the sums stay in T (ldt: the columns
 * rounded up to nr) from one block to the next, stored after the last.
 * Each element gets the same sums in the same order as in mp_gemm_tile
 * (block 0's sum, then block 1's plus it, ...): the same bits. */
static inline void mp_gemm_kblocks(const MpGemm *g, MpUk uk, int64_t r0, int64_t r1,
                                   int64_t c0, int64_t c1, float *Ap, const MpApre *pre,
                                   float *T, float *Bp)
{
    int64_t n = c1 - c0, ldt = (n + uk.nr - 1) / uk.nr * uk.nr;
    int64_t mc = mp_tile_size(r1 - r0, MP_MC_MAX, MP_MR), nc = mp_tile_size(n, MP_NC_MAX, uk.nr);
    for (int64_t k0 = 0; k0 < g->K; k0 += MP_KC) {
        int64_t kc = mp_min64(g->K - k0, MP_KC), bs = mp_bstride(kc, uk);
        mp_pack_b(Bp, g, uk, c0, n, k0, kc);
        for (int64_t i0 = r0; i0 < r1; i0 += mc)
            for (int64_t jb = 0; jb < n; jb += nc)
                mp_gemm_kblock(g, uk, Bp + jb / uk.nr * bs, bs,
                               (mp_min64(n - jb, nc) + uk.nr - 1) / uk.nr, i0,
                               mp_min64(r1 - i0, mc), k0, kc, k0 == 0, Ap, pre,
                               T + (i0 - r0) * ldt + jb, ldt);
    }
    mp_gemm_store(g, T, ldt, r0, c0, r1 - r0, n, g->alpha);
}

/* The grid of mp_split, its pieces shared out. The grid is cut finer
 * along the way it splits (MP_SPLIT_FINE pieces a share) and threads take
 * the pieces as they come free, so a thread the machine holds back does
 * less: split along N, each piece is all the rows of some columns and
 * packs its own B panels (each packed once in all); split along M (or one
 * thread), each piece is some rows of all the columns, and a thread packs
 * B once, for its first piece. B goes in passes of at most MP_BPACK_MAX /
 * team floats over N. Where a piece's B would take more than one such
 * pass (each reading, or packing, all of A again) and the piece is at
 * most MP_KBLOCK_T / MP_KBLOCK_W rows, it goes by blocks of K instead, in
 * chunks of columns whose sums take at most MP_KBLOCK_T floats
 * (mp_gemm_kblocks), and such pieces are not cut finer (each reads all of
 * A). GPT-2's output layer (256 x 50257 x 768 forward, 256 x 768 x 50257
 * dx) went from 113-128 to 100-102 ms (forward) and 114 to 96 ms (dx) in
 * f32, 63-67 to 53-54 and 83-85 to 55 ms in bf16 (2 threads,
 * bench/gemm_shapes.c). Where A is packed (not f32 read in place), a
 * piece packs it once for all its tiles (MpApre, up to MP_APRE_MAX
 * floats): GPT-2 small's mixed_bfloat16 step 772-779 -> 756-765 ms. Every
 * tile is computed the same way whichever thread has it, so C does not
 * depend on the thread count. Called by every thread of the team (no
 * barrier inside). */
#define MP_SPLIT_FINE 4
#define MP_KBLOCK_T (1 << 17)
#define MP_KBLOCK_W 256   /* columns a chunk has at least: A is read again for each */
#define MP_APRE_MAX (1 << 20)

static inline void mp_gemm_grid(const MpGemm *g, MpUk uk, MpSplit sp, int nt)
{
    int64_t mpn = (g->M + MP_MR - 1) / MP_MR, npn = (g->N + uk.nr - 1) / uk.nr;
    int64_t Kp = g->K > 0 ? g->K : 1, bmax = MP_BPACK_MAX / nt;
    /* the widest and tallest piece of the grid before it is cut finer */
    int64_t pw = (npn + sp.pc - 1) / sp.pc * uk.nr, ph = (mpn + sp.pr - 1) / sp.pr * MP_MR;
    int kblocks = Kp * pw > bmax && ph * MP_KBLOCK_W <= MP_KBLOCK_T;
    int64_t kw = mp_min64(pw, MP_KBLOCK_T / ph / uk.nr * uk.nr);   /* its chunks' columns */
    int gr = sp.pr, gc = sp.pc;
    if (!kblocks && gc == 1)
        gr *= MP_SPLIT_FINE;
    else if (!kblocks && gr == 1)
        gc *= MP_SPLIT_FINE;
    int64_t ncols = mp_min64((npn + gc - 1) / gc * uk.nr, (bmax / Kp) / uk.nr * uk.nr);
    if (ncols < uk.nr)
        ncols = uk.nr;
    /* one block per thread (A panels, the tile, B panels), allocated
     * when it takes its first piece: glibc's malloc then keeps it on
     * the heap from one product to the next instead of mapping fresh
     * pages for each */
    size_t na = MP_MC_MAX * MP_KC, nT = kblocks ? (size_t)(ph * kw) : MP_MC_MAX * MP_NC_MAX;
    size_t nb = kblocks ? (size_t)(kw / uk.nr * mp_bstride(MP_KC, uk))
                      : (size_t)(ncols / uk.nr * mp_bstride(Kp, uk));
    /* A packed once a piece (MpApre) where it is packed at all and the
     * piece's panels for all of K take at most MP_APRE_MAX floats */
    int64_t phf = (mpn + gr - 1) / gr * MP_MR;
    size_t npre = (Kp + MP_KC - 1) / MP_KC * (phf / MP_MR) * mp_apanel(MP_KC, uk);
    if (mp_a_direct(g) || npre > MP_APRE_MAX)
        npre = 0;
    MpApre pre = {NULL, -1, -1, 0};
    float *Ap = NULL, *T = NULL, *Bp = NULL;
    void *raw = NULL;
    int64_t pj0 = -1, pn = 0;   /* the columns Bp holds */
    /* Split along M with B in several passes, the pieces go pass by pass
     * (all pieces of pass 0, then of pass 1, ...): a thread then packs
     * each pass once, not once for each of its pieces (GPT-2's output
     * layer, 50257 columns in 5 passes: B was packed 4 times) */
    int64_t npass = gc == 1 && !kblocks ? (g->N + ncols - 1) / ncols : 1;
    MP_OMP(for schedule(dynamic) nowait)
    for (int64_t it = 0; it < npass * gr * gc; it++) {
        int w = (int)(it % (gr * gc));
        int64_t r0, r1, c0, c1;
        mp_share(mpn, MP_MR, g->M, w / gc, gr, &r0, &r1);
        mp_share(npn, uk.nr, g->N, w % gc, gc, &c0, &c1);
        if (npass > 1) {   /* this item's pass */
            c0 = it / (gr * gc) * ncols;
            c1 = mp_min64(c0 + ncols, g->N);
        }
        if (r0 >= r1 || c0 >= c1)
            continue;
        if (!raw) {
            raw = mp_kalloc64((na + nT + nb + npre) * sizeof(float), &Ap);
            T = Ap + na;
            Bp = T + nT;
            pre.a = npre ? Bp + nb : NULL;
        }
        if (pre.a && (pre.r0 != r0 || pre.r1 != r1))
            mp_apre_pack(g, uk, &pre, r0, r1);
        if (kblocks) {
            for (int64_t j = c0; j < c1; j += kw)
                mp_gemm_kblocks(g, uk, r0, r1, j, mp_min64(j + kw, c1), Ap, &pre, T, Bp);
            continue;
        }
        int64_t mc = mp_tile_size(r1 - r0, MP_MC_MAX, MP_MR);
        for (int64_t j0 = c0; j0 < c1; j0 += ncols) {   /* passes over N */
            int64_t n = mp_min64(c1 - j0, ncols), nc = mp_tile_size(n, MP_NC_MAX, uk.nr);
            if (j0 != pj0 || n != pn)
                mp_pack_b(Bp, g, uk, j0, n, 0, g->K);
            pj0 = j0;
            pn = n;
            for (int64_t i0 = r0; i0 < r1; i0 += mc)
                for (int64_t jb = 0; jb < n; jb += nc)
                    mp_gemm_tile(g, uk, Bp, jb, i0, mp_min64(r1 - i0, mc), j0 + jb,
                                 mp_min64(n - jb, nc), nc, Ap, &pre, T);
        }
    }
    free(raw);
}

/* ---- the K split: K long, C small (the weight gradients) ---------------- */

/* A product like 64x64x1024 (the weight gradient of a 64-wide layer over
 * 1024 rows) has too little C to share: each thread of a grid would pack
 * all of K for its piece. So the threads share K: each MP_KC block's
 * partial sum over all of C goes to a buffer of its own (the block's B
 * packed once, its A panels once), and after a barrier the rows' partial
 * sums are added in order of k and stored. These are the one-thread
 * path's sums in its order (a tile is block 0's sum, then block 1's sum
 * plus it, ...), so C has the same bits on any number of threads.
 * Chosen when its largest thread's work is less than the grid's, the
 * partial sums costing MP_RED_COST multiply-adds an element, within
 * MP_KSPLIT_MAX floats of partial sums. */
#define MP_RED_COST 2.0
#define MP_KSPLIT_MAX (1 << 20)

/* The K split's largest thread's work (multiply-adds), or -1 where it
 * does not apply; *floats: the size of its partial sums. */
static inline double mp_ksplit_cost(const MpGemm *g, int nr, int nt, int64_t *floats)
{
    int64_t nkb = (g->K + MP_KC - 1) / MP_KC;
    int64_t mr = (g->M + MP_MR - 1) / MP_MR * MP_MR, ldp = (g->N + nr - 1) / nr * nr;
    *floats = nkb * mr * ldp;
    if (nt < 2 || nkb < 2 || *floats > MP_KSPLIT_MAX)
        return -1;
    double per = (double)((nkb + nt - 1) / nt), kc = MP_KC;
    double pack = MP_PACK_COST * kc * (double)(ldp + (mp_a_direct(g) ? 0 : mr));
    return per * ((double)(mr * ldp) * kc + pack) +
           MP_RED_COST * (double)*floats / nt;
}

/* Called by every thread of the team; P: the partial sums, shared. */
static inline void mp_gemm_ksplit(const MpGemm *g, MpUk uk, float *P)
{
    int64_t nkb = (g->K + MP_KC - 1) / MP_KC, npn = (g->N + uk.nr - 1) / uk.nr;
    int64_t mr = (g->M + MP_MR - 1) / MP_MR * MP_MR, ldp = npn * uk.nr;
    int64_t mc = mp_tile_size(g->M, MP_MC_MAX, MP_MR);
    float *Ap = NULL;
    void *raw = NULL;
    MP_OMP(for schedule(dynamic))
    for (int64_t kb = 0; kb < nkb; kb++) {
        int64_t k0 = kb * MP_KC, kc = mp_min64(g->K - k0, MP_KC);
        if (!raw)
            raw = mp_kalloc64((size_t)(MP_MC_MAX * MP_KC + npn * mp_bstride(MP_KC, uk)) *
                                  sizeof(float), &Ap);
        float *Bp = Ap + MP_MC_MAX * MP_KC, *Pk = P + kb * mr * ldp;
        mp_pack_b(Bp, g, uk, 0, g->N, k0, kc);
        for (int64_t i0 = 0; i0 < g->M; i0 += mc)
            mp_gemm_kblock(g, uk, Bp, mp_bstride(kc, uk), npn, i0, mp_min64(g->M - i0, mc),
                           k0, kc, 1, Ap, NULL, Pk + i0 * ldp, ldp);
    }
    free(raw);
    MP_OMP(for schedule(dynamic, 8) nowait)
    for (int64_t i = 0; i < g->M; i++) {
        float *r = P + i * ldp;
        for (int64_t kb = 1; kb < nkb; kb++) {
            const float *s = P + kb * mr * ldp + i * ldp;
            for (int64_t j = 0; j < g->N; j++) r[j] += s[j];
        }
        mp_gemm_store(g, r, ldp, i, 0, 1, g->N, g->alpha);
    }
}

/* Products of more than MP_GEMM_PAR_MIN multiply-adds run on all threads:
 * one parallel region per product (a region costs more than it seems on a
 * busy machine), the work shared by a grid of C (mp_gemm_grid) or along K
 * (mp_gemm_ksplit), whichever mp_split's cost model finds cheaper for the
 * team it expects. Both give the same bits for any team. The bound stays
 * above the char transformer's 4M products (1024x64x64, 64x64x1024): alone
 * they run twice as fast on 2 threads (tests/bench_gemm.c), but in the
 * trainer a region after other work must wake its threads, and with any
 * other load on the machine a wake-up can cost a scheduler slice: the step
 * went from 24-28 to 48-52 ms on 2 threads. */
#define MP_GEMM_PAR_MIN (1 << 22)

#ifdef _OPENMP
/* The team a region would get: 1 inside another (mp_k_matmul's batch
 * loop), where nested regions run on one thread; the product then opens
 * none. Inside an inactive region (parallel if (0)) too: a region there
 * would start new threads each time instead of taking the pooled ones. */
static inline int mp_max_team(void) { return omp_get_level() > 0 ? 1 : omp_get_max_threads(); }
#else
static inline int mp_max_team(void) { return 1; }
#endif

static inline void mp_gemm_blocked(const MpGemm *g)
{
    MpUk uk = mp_uk(g);
    int nt = mp_max_team(), par = nt > 1 && g->M * g->N * g->K > MP_GEMM_PAR_MIN;
    nt = par ? nt : 1;
    int64_t floats;
    double kcost = mp_ksplit_cost(g, uk.nr, nt, &floats);
    float *P = NULL;   /* the K split's partial sums, shared by the team */
    void *praw = NULL;
    if (kcost >= 0 && kcost < mp_split(g->M, g->N, g->K, uk.nr, nt).cost)
        praw = mp_kalloc64((size_t)floats * sizeof(float), &P);
    MP_OMP(parallel if (par))
    {
        if (P)
            mp_gemm_ksplit(g, uk, P);
        else
            mp_gemm_grid(g, uk, mp_split(g->M, g->N, g->K, uk.nr, mp_team()), mp_team());
    }
    free(praw);
}

#ifdef MP_USE_CBLAS
/* The conversions around cblas_sgemm stay on one thread: OpenMP threads
 * left spinning after a parallel region would compete with OpenBLAS's own
 * threads for the cores. */

/* op(X) as a dense f32 copy in X's own layout (rows x cols, ld = cols),
 * rounded to rnd (around / bround). */
static inline float *mp_gemm_f32_copy(const void *x, int dt, int rnd, int64_t ld,
                                      int64_t rows, int64_t cols)
{
    float *d = (float *)mp_kalloc((size_t)(rows * cols) * sizeof *d);
    for (int64_t r = 0; r < rows; r++)
        if (mp_pack_src(x, dt, r * ld, cols, rnd, d + r * cols) != d + r * cols)
            memcpy(d + r * cols, (const float *)x + r * ld, (size_t)cols * sizeof *d);
    return d;
}

/* Whether operand X (type dt, rounded to rnd) must be copied for cblas. */
static inline int mp_cblas_copy(int dt, int rnd)
{
    return dt != MP_F32 || (rnd != 0 && rnd != MP_F32);
}

static inline void mp_gemm_cblas(const MpGemm *g)
{
    enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = g->tb ? CblasTrans : CblasNoTrans;
    int ca = mp_cblas_copy(g->adt, g->around), cb = mp_cblas_copy(g->bdt, g->bround);
    if (!ca && !cb && g->cdt == MP_F32 && !g->bias && !g->epi) {
        cblas_sgemm(CblasRowMajor, ta, tb, (int)g->M, (int)g->N, (int)g->K, g->alpha,
                    (const float *)g->A, (int)g->lda, (const float *)g->B, (int)g->ldb,
                    g->beta, (float *)g->C, (int)g->ldc);
        return;
    }
    int64_t ar = g->ta ? g->K : g->M, ac = g->ta ? g->M : g->K;
    int64_t br = g->tb ? g->N : g->K, bc = g->tb ? g->K : g->N;
    float *a = ca ? mp_gemm_f32_copy(g->A, g->adt, g->around, g->lda, ar, ac) : NULL;
    float *b = cb ? mp_gemm_f32_copy(g->B, g->bdt, g->bround, g->ldb, br, bc) : NULL;
    float *t = (float *)mp_kalloc((size_t)(g->M * g->N) * sizeof *t);
    cblas_sgemm(CblasRowMajor, ta, tb, (int)g->M, (int)g->N, (int)g->K, g->alpha,
                a ? a : (const float *)g->A, a ? (int)ac : (int)g->lda,
                b ? b : (const float *)g->B, b ? (int)bc : (int)g->ldb, 0.0f, t, (int)g->N);
    for (int64_t i = 0; i < g->M; i++)
        mp_gemm_store(g, t + i * g->N, g->N, i, 0, 1, g->N, 1.0f);
    free(a);
    free(b);
    free(t);
}
#endif

/* mp_gemm_tf32, mp_gemm_exact: float32_matmul = "tf32" (mp_kernels.h) */

/* Whether operand X (type dt, rounded to rnd) enters the product as f32. */
static inline int mp_gemm_f32_operand(int dt, int rnd) { return dt == MP_F32 && (rnd == 0 || rnd == MP_F32); }

/* C = alpha op(A) op(B) + beta C (+ bias): the one entry point. */
#ifdef MP_PART_MODEL
void mp_gemm_ex(const MpGemm *g);    /* in the runtime part (mp_model.h) */
#else
MP_PART_FN void mp_gemm_ex(const MpGemm *g)
{
    if (g->M <= 0 || g->N <= 0)
        return;
    MpGemm t;
    if (mp_gemm_tf32 && !mp_gemm_exact && mp_gemm_f32_operand(g->adt, g->around) &&
        mp_gemm_f32_operand(g->bdt, g->bround)) {
        t = *g;
        t.around = t.bround = MP_TF32;
        g = &t;
    }
    if (mp_gemm_fp8.around && !mp_gemm_exact) {     /* a quantised product: mp_fp8_use */
        t = *g;
        t.around = mp_gemm_fp8.around;
        t.bround = mp_gemm_fp8.bround;
        t.alpha *= mp_gemm_fp8.alpha;
        g = &t;
    }
#ifdef MP_USE_CBLAS
    if (g->K > 0) {
        mp_gemm_cblas(g);
        return;
    }
#endif
    mp_gemm_blocked(g);
}
#endif

static inline void mp_gemm(int ta, int tb, int64_t M, int64_t N, int64_t K, float alpha,
                           const void *A, int adt, int64_t lda, const void *B, int bdt,
                           int64_t ldb, float beta, void *C, int cdt, int64_t ldc)
{
    MpGemm g = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta,
                .A = A, .adt = adt, .lda = lda, .B = B, .bdt = bdt, .ldb = ldb,
                .C = C, .cdt = cdt, .ldc = ldc, .biasdt = MP_F32};
    mp_gemm_ex(&g);
}

/* ---- kernels made of products ------------------------------------------- */

static inline int mp_dt_size(int dt) { return dt == MP_F32 || dt == MP_I32 ? 4 : dt == MP_U8 ? 1 : 2; }

/* Element offset e of a tensor of type dt, as a pointer. */
static inline const void *mp_at(const void *p, int dt, int64_t e)
{
    return (const char *)p + e * mp_dt_size(dt);
}

/* y[i] = op(a[i]) op(b[i]) for i < batch; a[i] starts stride_a elements
 * after a[i-1] (0: one a for every i), likewise b; y[i] is [M, N]. */
static inline void mp_k_matmul(void *y, int ydt, const void *a, int adt, const void *b,
                               int bdt, int64_t batch, int64_t M, int64_t N, int64_t K,
                               int ta, int tb, int64_t stride_a, int64_t stride_b)
{
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
#define MP_MATMUL_ONE(i)                                                              \
    mp_gemm(ta, tb, M, N, K, 1.0f, mp_at(a, adt, (i) * stride_a), adt, lda,           \
            mp_at(b, bdt, (i) * stride_b), bdt, ldb, 0.0f, (void *)mp_at(y, ydt, (i) * M * N), \
            ydt, N)
    /* many small products: one per thread; else each product is parallel
     * (outside any region: mp_max_team) */
    if (batch > 1 && M * N * K < (1 << 22)) {
        MP_OMP(parallel for)
        for (int64_t i = 0; i < batch; i++) MP_MATMUL_ONE(i);
    } else {
        for (int64_t i = 0; i < batch; i++) MP_MATMUL_ONE(i);
    }
#undef MP_MATMUL_ONE
}

/* y[K, N] = a[R, K]^T b[R, N] + beta y: the weight gradient of x @ w. */
static inline void mp_k_matmul_tn(void *y, int ydt, const void *a, int adt, const void *b,
                                  int bdt, int64_t R, int64_t K, int64_t N, float beta)
{
    mp_gemm(1, 0, K, N, R, 1.0f, a, adt, K, b, bdt, N, beta, y, ydt, N);
}

/* The product of mp_k_linear, as an MpGemm: a fused group (compiler/fuse.c)
 * sets its epilogue and operand roundings, then runs it with mp_gemm_ex. */
static inline MpGemm mp_gemm_linear(void *y, int ydt, const void *x, int xdt, const void *w,
                                    int wdt, const void *bias, int bdt, int64_t M, int64_t N,
                                    int64_t K)
{
    MpGemm g = {0, 1, M, N, K, 1.0f, 0.0f, x, xdt, K, w, wdt, K, y, ydt, N, bias, bdt, 0,
                0, 0, NULL, NULL};
    return g;
}

/* One product of mp_k_matmul (batch 1), as an MpGemm. */
static inline MpGemm mp_gemm_matmul(void *y, int ydt, const void *a, int adt, const void *b,
                                    int bdt, int64_t M, int64_t N, int64_t K, int ta, int tb)
{
    MpGemm g = {ta, tb, M, N, K, 1.0f, 0.0f, a, adt, ta ? M : K, b, bdt, tb ? K : N, y, ydt, N,
                NULL, MP_F32, 0, 0, 0, NULL, NULL};
    return g;
}

/* The context of mp_epi_acc: the parameter's f32 gradient [M, ldc] and
 * the type the product is stored in when it is not fused. */
typedef struct MpAccEpi {
    const float *grad;
    int64_t ldc;
    int rnd;
} MpAccEpi;

/* Each finished row segment rounded to the product's type (what storing it
 * would keep) and added to the gradient as mp_k_acc / mp_accumulate_grad
 * add it (grad + v); the GEMM then stores the sums into the gradient. */
static inline void mp_epi_acc(const void *ctx, float *v, int64_t i, int64_t j0, int64_t n)
{
    const MpAccEpi *c = (const MpAccEpi *)ctx;
    const float *g = c->grad + i * c->ldc + j0;
    mp_round_n(v, c->rnd, n);
    for (int64_t j = 0; j < n; j++)
        v[j] = g[j] + v[j];
}

/* grad[K, N] += ydt(a[R, K]^T b[R, N]): mp_k_matmul_tn into a ydt buffer,
 * then mp_k_acc (f16 / bf16) or mp_accumulate_grad (f32), done in the
 * product's store: the gradient read and written once, no ydt buffer
 * written and read back. The same bits as the two calls (a weight's
 * gradient when fusion is on: compiler/emit_c.c). */
static inline void mp_k_matmul_tn_acc(float *grad, int ydt, const void *a, int adt,
                                      const void *b, int bdt, int64_t R, int64_t K, int64_t N)
{
    MpAccEpi c = {grad, N, ydt};
    MpGemm g = mp_gemm_matmul(grad, MP_F32, a, adt, b, bdt, K, N, R, 1, 0);
    g.epi = mp_epi_acc;
    g.epi_ctx = &c;
    mp_gemm_ex(&g);
}

/* y[M, N] = x[M, K] w[N, K]^T + bias[N], as torch.nn.functional.linear. */
static inline void mp_k_linear(void *y, int ydt, const void *x, int xdt, const void *w,
                               int wdt, const void *bias, int bdt, int64_t M, int64_t N,
                               int64_t K)
{
    MpGemm g = mp_gemm_linear(y, ydt, x, xdt, w, wdt, bias, bdt, M, N, K);
    mp_gemm_ex(&g);
}

#endif
