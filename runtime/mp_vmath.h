/* mp_vmath.h - which x86 code the CPU runs (MP_CPU), and exp, erf, tanh as
 * polynomials: one scalar version (MP_HD, so the CUDA program computes the
 * same numbers) and an AVX2 version of the SAME operations, 8 at a time.
 *
 * Why our own: the C library's scalar expf/erff were 22% of a transformer's
 * step (issue 12), and a vector version is only worth having if it gives the
 * numbers the scalar code gives. Invariant: the scalar and the vector code
 * perform the same IEEE operations in the same order, every product that
 * feeds a sum is an explicit fused multiply-add (fmaf / _mm256_fmadd_ps) and
 * there is no bare `a * b + c`, so the compiler's -ffp-contract has nothing
 * to fuse and both paths give bit-identical results on every float (a NaN
 * gives a NaN on both, its sign not guaranteed: compilers may commute x * y)
 * (tests/unit/test_vmath.c checks a strided sweep of all 2^32 bit patterns
 * and every float near the branch points and limits). Coefficients: near-
 * minimax fits printed by tools/fit_vmath.py. Errors against glibc's libm,
 * measured by test_vmath (VMATH_FULL=1), are stated at each function.
 *
 * Dispatch: mp_cpu_level() is the highest of these levels the CPU has:
 *   MP_CPU_PORTABLE     any CPU;
 *   MP_CPU_AVX2         AVX2, FMA and F16C;
 *   MP_CPU_AVX512       and AVX-512 F, BW, DQ and VL (the GEMM's 6x32
 *                       micro-kernel: the same bits as AVX2's 6x16);
 *   MP_CPU_AVX512_BF16  and AVX512_BF16 (products of two bf16 operands
 *                       through vdpbf16ps: mp_kernels_gemm.h says where
 *                       their bits can differ).
 * The environment variable MP_CPU=portable, avx2, avx512 or avx512_bf16
 * forces one (tests cover every path on one CPU; auto, the default, takes
 * the highest). Asking for a level the CPU lacks, or any other value, ends
 * the program with a one-line message and exit code 2 (a usage error). The
 * GEMM micro-kernels (mp_kernels_gemm.h), the f16/bf16 conversions
 * (mp_kernels.h) and the functions here all follow it. */
#ifndef MP_VMATH_H
#define MP_VMATH_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mp_half.h"

/* ---- which code the CPU runs ------------------------------------------ */

enum { MP_CPU_PORTABLE, MP_CPU_AVX2, MP_CPU_AVX512, MP_CPU_AVX512_BF16, MP_CPU_LEVELS };


/* x86 with GCC or Clang: AVX2 code is compiled through target attributes
 * whatever -march says, and used when the CPU has it, so a plain
 * `cc -O2 train.c` runs fast on a modern CPU and still runs on an old one. */
#if !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__)) && \
    (defined(__x86_64__) || defined(__i386__))
#define MP_X86 1
#include <immintrin.h>

/* MP_CPU's name of each level, in order. */
__attribute__((unused)) static const char *const mp_cpu_names[MP_CPU_LEVELS] = {
    "portable", "avx2", "avx512", "avx512_bf16"};

/* The highest level this CPU has. */
static inline int mp_cpu_hw(void)
{
    /* F16C is taken to come with AVX2 (every x86 CPU with AVX2 has it) */
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return MP_CPU_PORTABLE;
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl"))
        return MP_CPU_AVX2;
    return __builtin_cpu_supports("avx512bf16") ? MP_CPU_AVX512_BF16 : MP_CPU_AVX512;
}

/* The level MP_CPU asks for on this CPU, or -1 when it cannot be had. */
static inline int mp_cpu_want(void)
{
    int hw = mp_cpu_hw();
    const char *want = getenv("MP_CPU");
    if (!want || !*want || !strcmp(want, "auto"))
        return hw;
    for (int l = 0; l < MP_CPU_LEVELS; l++)
        if (!strcmp(want, mp_cpu_names[l]))
            return l <= hw ? l : -1;
    return -1;
}

/* What is wrong with MP_CPU, into msg (the trainer checks it at start-up,
 * with its other usage errors); 0 when nothing is. */
static inline int mp_cpu_env_error(char *msg, size_t cap)
{
    if (mp_cpu_want() >= 0)
        return 0;
    const char *want = getenv("MP_CPU");
    int known = 0;
    for (int l = 0; l < MP_CPU_LEVELS; l++)
        known |= !strcmp(want, mp_cpu_names[l]);
    snprintf(msg, cap, "MP_CPU=%s: %s%s", want,
             known ? "this CPU cannot run it; it runs up to " :
                     "expected auto, portable, avx2, avx512 or avx512_bf16",
             known ? mp_cpu_names[mp_cpu_hw()] : "");
    return 1;
}

static inline int mp_cpu_detect(void)
{
    char msg[160];
    if (mp_cpu_env_error(msg, sizeof msg)) {   /* a kernel's user other than the trainer */
        fprintf(stderr, "error: %s\n", msg);
        exit(2);
    }
    return mp_cpu_want();
}

/* The level, detected on the first call (a race between threads writes the
 * same value). Asked per chunk by the kernels, so the common path is one
 * load, inlined; the detection is out of line (issue 12: the call was 1% of
 * an f16 step). */
static int mp_cpu_level_v = -1;

__attribute__((noinline, cold, unused)) static int mp_cpu_level_slow(void)
{
    int l = mp_cpu_detect();
    __atomic_store_n(&mp_cpu_level_v, l, __ATOMIC_RELAXED);
    return l;
}

static inline int mp_cpu_level(void)
{
    int l = __atomic_load_n(&mp_cpu_level_v, __ATOMIC_RELAXED);
    return __builtin_expect(l >= 0, 1) ? l : mp_cpu_level_slow();
}
#else
static inline int mp_cpu_level(void) { return MP_CPU_PORTABLE; }
#endif

/* The scalar functions are written with fmaf, which the C library makes
 * a call (13 ns here, software on old x86). x86 builds without -mfma
 * therefore also compile each of them for the FMA instruction (MP_SCALAR)
 * and take that version where the CPU has FMA, whatever MP_CPU says: both
 * are the exact fused operation, so the bits are the same. -mfma builds,
 * other CPUs and the GPU inline fmaf themselves. */
#if defined(MP_X86) && !defined(__FMA__)
#define MP_SCALAR(NAME)                                                        \
    __attribute__((always_inline)) static inline float NAME##_body(float x);   \
    __attribute__((target("fma"))) static inline float NAME##_fma(float x)     \
    {                                                                          \
        return NAME##_body(x);                                                 \
    }                                                                          \
    static inline float NAME(float x)                                          \
    {                                                                          \
        return __builtin_cpu_supports("fma") ? NAME##_fma(x) : NAME##_body(x); \
    }                                                                          \
    static inline float NAME##_body(float x)
#else
#define MP_SCALAR(NAME) static inline MP_HD float NAME(float x)
#endif

/* ---- coefficients (tools/fit_vmath.py), highest degree first ----------- */

/* Horner's scheme, p = ((c_n x + c_n-1) x + ...) + c_0, every step one FMA,
 * written out so that both paths nest the same way. */
#define MP_HORNER6(F, x, c6, c5, c4, c3, c2, c1, c0)                           \
    F(F(F(F(F(F(c6, x, c5), x, c4), x, c3), x, c2), x, c1), x, c0)
#define MP_HORNER7(F, x, c7, c6, c5, c4, c3, c2, c1, c0)                       \
    F(MP_HORNER6(F, x, c7, c6, c5, c4, c3, c2, c1), x, c0)
#define MP_HORNER5(F, x, c5, c4, c3, c2, c1, c0)                               \
    F(F(F(F(F(c5, x, c4), x, c3), x, c2), x, c1), x, c0)
#define MP_HORNER11(F, x, c11, c10, c9, c8, c7, c6, c5, c4, c3, c2, c1, c0)    \
    MP_HORNER6(F, x, MP_HORNER5(F, x, c11, c10, c9, c8, c7, c6), c5, c4, c3, c2, c1, c0)

/* exp(r) = 1 + r q(r), |r| <= ln2/2 */
#define MP_EXP_Q(F, r, K)                                                      \
    MP_HORNER6(F, r, K(0.000198412512f), K(0.00139410049f), K(0.00833340269f), \
               K(0.041666355f), K(0.166666657f), K(0.5f), K(1.0f))
/* erf(x) = x + x P(x^2), |x| <= 1 */
#define MP_ERF_P(F, t, K)                                                      \
    MP_HORNER7(F, t, K(-9.68014047e-06f), K(0.000112705457f),                  \
               K(-0.000848471187f), K(0.00522107491f), K(-0.0268654451f),      \
               K(0.112837829f), K(-0.376126379f), K(0.128379166f))
/* erfc(x) = exp(-x^2) Q(x - 2.5), 1 <= x <= 4 */
#define MP_ERFC_Q(F, u, K)                                                     \
    MP_HORNER11(F, u, K(-3.97213938e-07f), K(1.66451503e-06f),                 \
                K(-3.92668699e-06f), K(1.43943062e-05f), K(-5.91239914e-05f),  \
                K(0.000212892919f), K(-0.000733540277f), K(0.00246604509f),    \
                K(-0.00800154079f), K(0.0249381866f), K(-0.0743473545f),       \
                K(0.210806355f))
/* tanh(x) = x + x t P(t), t = x^2, |x| < 0.625 */
#define MP_TANH_P(F, t, K)                                                     \
    MP_HORNER5(F, t, K(0.00229296368f), K(-0.00834417343f), K(0.0217690039f),  \
               K(-0.0539592728f), K(0.133333042f), K(-0.333333343f))

#define MP_EXP_HI 89.0f        /* exp(89) overflows: inf */
#define MP_EXP_LO -104.0f      /* exp(-104) rounds to 0 */
#define MP_LOG2E 1.44269504f
#define MP_LN2_HI 0.693145751953125f    /* 16 bits: n ln2_hi is exact */
#define MP_LN2_LO 1.42860677e-06f       /* ln2 - ln2_hi */
#define MP_RND_MAGIC 12582912.0f        /* 1.5 * 2^23: adding it rounds to an integer */
#define MP_RND_BITS 0x4B400000          /* its bit pattern */

/* ---- scalar: the reference, also compiled for the GPU ------------------ */

#define MP_SK(c) (c)

static inline MP_HD float mp_copysign_bits(float r, float x)
{
    return mp_bits_f32((mp_f32_bits(r) & 0x7fffffffu) | (mp_f32_bits(x) & 0x80000000u));
}

/* exp(x). Max error against libm's exp (double), measured by test_vmath
 * (VMATH_FULL=1: every 61st of all 2^32 floats, every float in the
 * overflow and subnormal-result windows): 0.86 ulp, 7.3e-8 relative.
 * Subnormal results are rounded once, from p 2^n. x is
 * clamped to [-104, 89], n = round(x / ln2) by the 1.5 2^23 trick (exact
 * RNE), r = x - n ln2 in two FMA steps, exp(r) = 1 + r q(r), and 2^n is
 * applied as 2^h 2^(n-h), h = floor(n/2), so that neither factor leaves the
 * normal range and only the last product rounds. */
MP_SCALAR(mp_expf_p)
{
    if (!(x == x))
        return x + x;
    x = x < MP_EXP_HI ? x : MP_EXP_HI;
    x = x > MP_EXP_LO ? x : MP_EXP_LO;
    float k = fmaf(x, MP_LOG2E, MP_RND_MAGIC);
    float n = k - MP_RND_MAGIC;
    float r = fmaf(n, -MP_LN2_HI, x);
    r = fmaf(n, -MP_LN2_LO, r);
    float p = fmaf(r, MP_EXP_Q(fmaf, r, MP_SK), 1.0f);
    int32_t ni = (int32_t)mp_f32_bits(k) - MP_RND_BITS;   /* n in [-150, 129] */
    int32_t h = (ni + 256) / 2 - 128;                       /* floor(n / 2) */
    float s1 = mp_bits_f32((uint32_t)(h + 127) << 23);
    float s2 = mp_bits_f32((uint32_t)(ni - h + 127) << 23);
    return p * s1 * s2;
}

/* erf(x). Max error against libm's erf (double), measured as for exp:
 * 1.10 ulp, 7.8e-8 relative. |x| <= 1: x + x P(x^2); 1 < |x|: 1 - exp(-x^2) Q(|x| - 2.5) with
 * |x| clamped to 4 (erf rounds to 1 beyond 3.92), sign copied from x. */
MP_SCALAR(mp_erff_p)
{
    float a = mp_copysign_bits(x, 0.0f);
    if (a <= 1.0f) {
        float t = x * x;
        return fmaf(x, MP_ERF_P(fmaf, t, MP_SK), x);
    }
    a = a > 4.0f ? 4.0f : a;          /* keeps a NaN */
    float e = mp_expf_p(-(a * a));
    float r = fmaf(-e, MP_ERFC_Q(fmaf, a - 2.5f, MP_SK), 1.0f);
    return mp_copysign_bits(r, x);   /* NaN: a stays NaN, so r is NaN */
}

/* tanh(x). Max error against libm's tanh (double), measured as for exp:
 * 1.37 ulp, 1.5e-7 relative (just past the branch point, where
 * 2 / (e + 1) cancels against 1). |x| < 0.625: x + x t P(t), t = x^2; else 1 - 2 / (exp(2|x|) + 1)
 * with x's sign (exp overflows to inf for large |x|, giving 1). */
MP_SCALAR(mp_tanhf_p)
{
    float a = mp_copysign_bits(x, 0.0f);
    if (a < 0.625f) {   /* the sign copied too: tanh(-0) = -0 */
        float t = x * x;
        return mp_copysign_bits(fmaf(x * t, MP_TANH_P(fmaf, t, MP_SK), x), x);
    }
    float e = mp_expf_p(a + a);
    return mp_copysign_bits(1.0f - 2.0f / (e + 1.0f), x);
}

/* ---- log and cos(2 pi u) for the random normal values (randn) ----------
 * Scalar only (also the GPU's): the C and CUDA programs draw the same bits.
 * Every product that feeds a sum is an FMA, as above; the division and the
 * square root the caller takes are IEEE-rounded on both. */

/* log(x) for positive normal x (randn's uniforms: 2^-33 .. 1). fdlibm's
 * logf: x = 2^k m, m in [sqrt(2)/2, sqrt(2)), f = m - 1 (exact),
 * s = f / (2 + f), log(m) = f - f^2/2 + s (f^2/2 + R(s^2)), k ln2 added in
 * two parts (k ln2_hi exact). Max error against libm's log (double), every
 * float in [2^-33, 1] (tests/unit/test_random.c, VMATH_FULL=1): 0.75 ulp. */
#define MP_LOG_LG(F, z, w, K)                                                  \
    F(z, F(w, K(0.284987867f), K(0.666666627f)),                               \
      w * F(w, K(0.242790788f), K(0.400009722f)))
#define MP_LOG_LN2_HI 0.693138123f      /* 0x3f317180: k ln2_hi is exact */
#define MP_LOG_LN2_LO 9.05800061e-06f   /* ln2 - ln2_hi */
MP_SCALAR(mp_logf_p)
{
    uint32_t ix = mp_f32_bits(x) + (0x3f800000u - 0x3f3504f3u);
    float k = (float)((int32_t)(ix >> 23) - 0x7f);
    float f = mp_bits_f32((ix & 0x007fffffu) + 0x3f3504f3u) - 1.0f;
    float s = f / (2.0f + f), z = s * s, w = z * z;
    float hf = 0.5f * f;                                  /* exact */
    float q = fmaf(k, MP_LOG_LN2_LO, s * fmaf(hf, f, MP_LOG_LG(fmaf, z, w, MP_SK)));
    q = fmaf(-hf, f, q) + f;
    return fmaf(k, MP_LOG_LN2_HI, q);
}

/* cos(2 pi u) for u in [0, 1) (a multiple of 2^-24: every reduction step
 * below is exact). Folded to a in [0, 1/8]: cos(2 pi a) or sin(2 pi (1/4 -
 * a)), each its Taylor polynomial in a (2 pi folded into the coefficients),
 * truncation below 2e-10. Max error against libm's cos (double) on every
 * u (test_random): 8.5e-8. */
#define MP_COS2PI_P(F, t, K)                                                   \
    MP_HORNER5(F, t, K(-2.642625618e+01f), K(6.024464035e+01f),                \
               K(-8.545681763e+01f), K(6.493939209e+01f), K(-1.973920822e+01f), \
               K(1.0f))
#define MP_SIN2PI_P(F, t, K)                                                   \
    MP_HORNER5(F, t, K(-1.509464264e+01f), K(4.205869293e+01f),                \
               K(-7.670585632e+01f), K(8.160524750e+01f), K(-4.134170151e+01f), \
               K(6.283185482e+00f))
MP_SCALAR(mp_cos2pi_p)
{
    float a = x >= 0.5f ? 1.0f - x : x;          /* cos(2 pi (1 - u)) = cos(2 pi u) */
    float sign = a > 0.25f ? -1.0f : 1.0f;       /* cos(2 pi a) = -cos(2 pi (1/2 - a)) */
    a = a > 0.25f ? 0.5f - a : a;
    float b = 0.25f - a;                         /* cos(2 pi a) = sin(2 pi b) */
    float c = a <= 0.125f ? MP_COS2PI_P(fmaf, a * a, MP_SK) : b * MP_SIN2PI_P(fmaf, b * b, MP_SK);
    return sign * c;
}

/* ---- activations made of them (scalar; the AVX2 twins below) ----------- */

#define MP_SQRT1_2 0.70710678118654752f      /* 1/sqrt(2) */
#define MP_INV_SQRT_2PI 0.39894228040143268f /* 1/sqrt(2 pi) */
#define MP_GELU_K 0.79788456080286536f       /* sqrt(2/pi) */
#define MP_GELU_C 0.044715f                  /* the tanh form's cubic term */

/* Max errors (test_vmath, results >= 1e-30): sigmoid 2.3 ulp, silu 2.5 ulp;
 * gelu within 1e-6 max(|gelu|, 1). FMA only where a product feeds a sum. */
static inline MP_HD float mp_sigmoid(float x) { return 1.0f / (1.0f + mp_expf_p(-x)); }
static inline MP_HD float mp_silu(float x) { return x * mp_sigmoid(x); }
static inline MP_HD float mp_gelu(float x)
{
    return 0.5f * x * (1.0f + mp_erff_p(x * MP_SQRT1_2));
}

static inline MP_HD float mp_gelu_grad(float dy, float x)
{
    float cdf = 0.5f * (1.0f + mp_erff_p(x * MP_SQRT1_2));
    float pdf = MP_INV_SQRT_2PI * mp_expf_p(-0.5f * x * x);
    return dy * fmaf(x, pdf, cdf);
}

static inline MP_HD float mp_silu_grad(float dy, float x)
{
    float s = mp_sigmoid(x);
    return dy * s * fmaf(x, 1.0f - s, 1.0f);
}

/* torch's gelu(approximate='tanh'): 0.5 x (1 + tanh(k (x + c x^3))) */
static inline MP_HD float mp_gelu_tanh(float x)
{
    float t = mp_tanhf_p(MP_GELU_K * fmaf(MP_GELU_C * x * x, x, x));
    return 0.5f * x * (1.0f + t);
}

static inline MP_HD float mp_gelu_tanh_grad(float dy, float x)
{
    float t = mp_tanhf_p(MP_GELU_K * fmaf(MP_GELU_C * x * x, x, x));
    float dt = fmaf(-t, t, 1.0f) * MP_GELU_K * fmaf(3.0f * MP_GELU_C * x, x, 1.0f);
    return dy * fmaf(0.5f * x, dt, 0.5f * (1.0f + t));
}

/* ---- AVX2: the same operations on 8 floats ------------------------------ */

#ifdef MP_X86
#define MP_AVX2 __attribute__((target("avx2,fma")))
#define MP_VK(c) _mm256_set1_ps(c)

MP_AVX2 static inline __m256 mp_v8_abs(__m256 x)
{
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
}

MP_AVX2 static inline __m256 mp_v8_copysign(__m256 r, __m256 x)
{
    __m256 s = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(s, r), _mm256_and_ps(s, x));
}

MP_AVX2 static inline __m256 mp_v8_exp(__m256 x0)
{
    __m256 x = _mm256_min_ps(x0, MP_VK(MP_EXP_HI));
    x = _mm256_max_ps(x, MP_VK(MP_EXP_LO));
    __m256 k = _mm256_fmadd_ps(x, MP_VK(MP_LOG2E), MP_VK(MP_RND_MAGIC));
    __m256 n = _mm256_sub_ps(k, MP_VK(MP_RND_MAGIC));
    __m256 r = _mm256_fmadd_ps(n, MP_VK(-MP_LN2_HI), x);
    r = _mm256_fmadd_ps(n, MP_VK(-MP_LN2_LO), r);
    __m256 p = _mm256_fmadd_ps(r, MP_EXP_Q(_mm256_fmadd_ps, r, MP_VK), MP_VK(1.0f));
    __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(k), _mm256_set1_epi32(MP_RND_BITS));
    __m256i h = _mm256_srai_epi32(ni, 1);
    __m256i b = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, b), 23));
    __m256 s2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), b), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    __m256 nan = _mm256_cmp_ps(x0, x0, _CMP_UNORD_Q);
    return _mm256_blendv_ps(y, _mm256_add_ps(x0, x0), nan);
}

MP_AVX2 static inline __m256 mp_v8_erf(__m256 x)
{
    __m256 a = mp_v8_abs(x), t = _mm256_mul_ps(x, x);
    __m256 small = _mm256_fmadd_ps(x, MP_ERF_P(_mm256_fmadd_ps, t, MP_VK), x);
    __m256 ac = _mm256_min_ps(MP_VK(4.0f), a);   /* 4 < a ? 4 : a, as the scalar */
    __m256 e = mp_v8_exp(_mm256_xor_ps(_mm256_mul_ps(ac, ac), _mm256_set1_ps(-0.0f)));
    __m256 q = MP_ERFC_Q(_mm256_fmadd_ps, _mm256_sub_ps(ac, MP_VK(2.5f)), MP_VK);
    __m256 big = mp_v8_copysign(
        _mm256_fmadd_ps(_mm256_xor_ps(e, _mm256_set1_ps(-0.0f)), q, MP_VK(1.0f)), x);
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, MP_VK(1.0f), _CMP_LE_OQ));
}

MP_AVX2 static inline __m256 mp_v8_tanh(__m256 x)
{
    __m256 a = mp_v8_abs(x), t = _mm256_mul_ps(x, x);
    __m256 small = mp_v8_copysign(
        _mm256_fmadd_ps(_mm256_mul_ps(x, t), MP_TANH_P(_mm256_fmadd_ps, t, MP_VK), x), x);
    __m256 e = mp_v8_exp(_mm256_add_ps(a, a));
    __m256 big = mp_v8_copysign(
        _mm256_sub_ps(MP_VK(1.0f), _mm256_div_ps(MP_VK(2.0f), _mm256_add_ps(e, MP_VK(1.0f)))),
        x);
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, MP_VK(0.625f), _CMP_LT_OQ));
}
#define VMUL _mm256_mul_ps
#define VADD _mm256_add_ps
#define VFMA _mm256_fmadd_ps
#define VNEG(v) _mm256_xor_ps(v, _mm256_set1_ps(-0.0f))
MP_AVX2 static inline __m256 mp_v8_sigmoid(__m256 x)
{
    return _mm256_div_ps(MP_VK(1.0f), VADD(MP_VK(1.0f), mp_v8_exp(VNEG(x))));
}

MP_AVX2 static inline __m256 mp_v8_silu(__m256 x) { return VMUL(x, mp_v8_sigmoid(x)); }

MP_AVX2 static inline __m256 mp_v8_gelu(__m256 x)
{
    __m256 e = mp_v8_erf(VMUL(x, MP_VK(MP_SQRT1_2)));
    return VMUL(VMUL(MP_VK(0.5f), x), VADD(MP_VK(1.0f), e));
}

MP_AVX2 static inline __m256 mp_v8_gelu_grad(__m256 dy, __m256 x)
{
    __m256 cdf = VMUL(MP_VK(0.5f), VADD(MP_VK(1.0f), mp_v8_erf(VMUL(x, MP_VK(MP_SQRT1_2)))));
    __m256 pdf = VMUL(MP_VK(MP_INV_SQRT_2PI), mp_v8_exp(VMUL(VMUL(MP_VK(-0.5f), x), x)));
    return VMUL(dy, VFMA(x, pdf, cdf));
}

MP_AVX2 static inline __m256 mp_v8_silu_grad(__m256 dy, __m256 x)
{
    __m256 s = mp_v8_sigmoid(x);
    return VMUL(VMUL(dy, s), VFMA(x, _mm256_sub_ps(MP_VK(1.0f), s), MP_VK(1.0f)));
}

MP_AVX2 static inline __m256 mp_v8_gelu_tanh_t(__m256 x)
{
    __m256 u = VFMA(VMUL(VMUL(MP_VK(MP_GELU_C), x), x), x, x);
    return mp_v8_tanh(VMUL(MP_VK(MP_GELU_K), u));
}

MP_AVX2 static inline __m256 mp_v8_gelu_tanh(__m256 x)
{
    return VMUL(VMUL(MP_VK(0.5f), x), VADD(MP_VK(1.0f), mp_v8_gelu_tanh_t(x)));
}

MP_AVX2 static inline __m256 mp_v8_gelu_tanh_grad(__m256 dy, __m256 x)
{
    __m256 t = mp_v8_gelu_tanh_t(x), one = MP_VK(1.0f);
    __m256 dt = VMUL(VMUL(VFMA(VNEG(t), t, one), MP_VK(MP_GELU_K)),
                     VFMA(VMUL(MP_VK(3.0f * MP_GELU_C), x), x, one));
    return VMUL(dy, VFMA(VMUL(MP_VK(0.5f), x), dt, VMUL(MP_VK(0.5f), VADD(one, t))));
}
#undef VMUL
#undef VADD
#undef VFMA
#undef VNEG
#endif

/* ---- in-place arrays: the API kernels use ------------------------------- */

/* MP_VMAP(name, scalar, v8): void name(float *x, int64_t n), x[i] = f(x[i]),
 * 8 at a time on AVX2, the rest (and everything on the portable path) by
 * the scalar function, which gives the same bits. The vector part ends at
 * n8 = n - n % 8, a bound the compiler sees: ended by `i + 8 <= n`, GCC
 * (12, -O2) could not tell where the tail loop starts once a fused chunk
 * inlined a constant n, took it for a loop of up to 2^62 iterations and
 * warned (-Waggressive-loop-optimizations: tests/models/gate.mp). */
#ifdef MP_X86
#define MP_VMAP(NAME, SCALAR, V8)                                              \
    MP_AVX2 static inline void NAME##_avx2(float *x, int64_t n)                \
    {                                                                          \
        int64_t i = 0, n8 = n - n % 8;                                         \
        for (; i < n8; i += 8)                                                 \
            _mm256_storeu_ps(x + i, V8(_mm256_loadu_ps(x + i)));               \
        for (; i < n; i++) x[i] = SCALAR(x[i]);                                \
    }                                                                          \
    static inline void NAME(float *x, int64_t n)                               \
    {                                                                          \
        if (mp_cpu_level() >= MP_CPU_AVX2) {                                   \
            NAME##_avx2(x, n);                                                 \
            return;                                                            \
        }                                                                      \
        for (int64_t i = 0; i < n; i++) x[i] = SCALAR(x[i]);                   \
    }
#else
#define MP_VMAP(NAME, SCALAR, V8)                                              \
    static inline void NAME(float *x, int64_t n)                               \
    {                                                                          \
        for (int64_t i = 0; i < n; i++) x[i] = SCALAR(x[i]);                   \
    }
#endif

/* MP_VMAP2(name, scalar, v8): void name(float *dy, const float *x, int64_t n),
 * dy[i] = f(dy[i], x[i]) (the gradients). */
#ifdef MP_X86
#define MP_VMAP2(NAME, SCALAR, V8)                                             \
    MP_AVX2 static inline void NAME##_avx2(float *dy, const float *x, int64_t n) \
    {                                                                          \
        int64_t i = 0, n8 = n - n % 8;                                         \
        for (; i < n8; i += 8)                                                 \
            _mm256_storeu_ps(dy + i, V8(_mm256_loadu_ps(dy + i), _mm256_loadu_ps(x + i))); \
        for (; i < n; i++) dy[i] = SCALAR(dy[i], x[i]);                        \
    }                                                                          \
    static inline void NAME(float *dy, const float *x, int64_t n)              \
    {                                                                          \
        if (mp_cpu_level() >= MP_CPU_AVX2) {                                   \
            NAME##_avx2(dy, x, n);                                             \
            return;                                                            \
        }                                                                      \
        for (int64_t i = 0; i < n; i++) dy[i] = SCALAR(dy[i], x[i]);           \
    }
#else
#define MP_VMAP2(NAME, SCALAR, V8)                                             \
    static inline void NAME(float *dy, const float *x, int64_t n)              \
    {                                                                          \
        for (int64_t i = 0; i < n; i++) dy[i] = SCALAR(dy[i], x[i]);           \
    }
#endif

MP_VMAP(mp_vexp, mp_expf_p, mp_v8_exp)
MP_VMAP(mp_verf, mp_erff_p, mp_v8_erf)
MP_VMAP(mp_vtanh, mp_tanhf_p, mp_v8_tanh)
MP_VMAP(mp_vsigmoid, mp_sigmoid, mp_v8_sigmoid)
MP_VMAP(mp_vsilu, mp_silu, mp_v8_silu)
MP_VMAP(mp_vgelu, mp_gelu, mp_v8_gelu)
MP_VMAP(mp_vgelu_tanh, mp_gelu_tanh, mp_v8_gelu_tanh)
MP_VMAP2(mp_vgelu_grad, mp_gelu_grad, mp_v8_gelu_grad)
MP_VMAP2(mp_vsilu_grad, mp_silu_grad, mp_v8_silu_grad)
MP_VMAP2(mp_vgelu_tanh_grad, mp_gelu_tanh_grad, mp_v8_gelu_tanh_grad)

#endif
