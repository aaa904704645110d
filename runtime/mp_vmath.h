/* mp_vmath.h - which x86 code the CPU runs (MP_CPU), and exp, erf, tanh as
 * polynomials: one scalar version (MP_HD, so the CUDA program computes the
 * same numbers) and vector versions of the SAME operations, 8 at a time
 * (AVX2) and 16 (AVX-512).
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
 *                       micro-kernel: the same bits as AVX2's 6x16; the
 *                       functions here 16 floats at a time);
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

/* ---- activations made of them (scalar; the vector twins below) --------- */

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

/* ---- vector: the same operations on 8 (AVX2) or 16 (AVX-512) floats ---
 *
 * Written once, as MP_VMATH_FNS(prefix, target), on generic vector
 * operations: V (the vector type), VK(c) (c in every lane), VFMA, VMUL,
 * VADD, VSUB, VDIV, VMIN, VMAX, VNEG, VABS, VCOPYSIGN, VSEL(a, b, m) (b
 * where m is set, else a), VLT and VLE (a < b, a <= b: masks), VNAN(x)
 * and VPOW2 (mp_expf_p's 2^h and 2^(n - h)). Each is the width's
 * intrinsic, chosen by MP_VW (8 or 16) through the table below:
 * mp_v8_exp, ... (AVX2 and FMA) and mp_v16_exp, ... (AVX-512 F and DQ).
 * Every operation is the scalar code's IEEE one, in its order, so the
 * three give the same bits (test_vmath checks each path the CPU has). */
#ifdef MP_X86
#define MP_VMATH_FNS(P, ATTR)                                                  \
    ATTR static inline V P##_exp(V x0)                                         \
    {                                                                          \
        V x = VMAX(VMIN(x0, VK(MP_EXP_HI)), VK(MP_EXP_LO));                    \
        V k = VFMA(x, VK(MP_LOG2E), VK(MP_RND_MAGIC));                         \
        V n = VSUB(k, VK(MP_RND_MAGIC));                                       \
        V r = VFMA(n, VK(-MP_LN2_HI), x);                                      \
        r = VFMA(n, VK(-MP_LN2_LO), r);                                        \
        V p = VFMA(r, MP_EXP_Q(VFMA, r, VK), VK(1.0f));                        \
        V s1, s2;                                                              \
        VPOW2(k, s1, s2);                                                      \
        return VSEL(VMUL(VMUL(p, s1), s2), VADD(x0, x0), VNAN(x0));            \
    }                                                                          \
    ATTR static inline V P##_erf(V x)                                          \
    {                                                                          \
        V a = VABS(x), t = VMUL(x, x);                                         \
        V small = VFMA(x, MP_ERF_P(VFMA, t, VK), x);                           \
        V ac = VMIN(VK(4.0f), a);   /* 4 < a ? 4 : a, as the scalar */         \
        V e = P##_exp(VNEG(VMUL(ac, ac)));                                     \
        V q = MP_ERFC_Q(VFMA, VSUB(ac, VK(2.5f)), VK);                         \
        V big = VCOPYSIGN(VFMA(VNEG(e), q, VK(1.0f)), x);                      \
        return VSEL(big, small, VLE(a, VK(1.0f)));                             \
    }                                                                          \
    ATTR static inline V P##_tanh(V x)                                         \
    {                                                                          \
        V a = VABS(x), t = VMUL(x, x);                                         \
        V small = VCOPYSIGN(VFMA(VMUL(x, t), MP_TANH_P(VFMA, t, VK), x), x);   \
        V e = P##_exp(VADD(a, a));                                             \
        V big = VCOPYSIGN(VSUB(VK(1.0f), VDIV(VK(2.0f), VADD(e, VK(1.0f)))), x); \
        return VSEL(big, small, VLT(a, VK(0.625f)));                           \
    }                                                                          \
    ATTR static inline V P##_sigmoid(V x)                                      \
    {                                                                          \
        return VDIV(VK(1.0f), VADD(VK(1.0f), P##_exp(VNEG(x))));               \
    }                                                                          \
    ATTR static inline V P##_silu(V x) { return VMUL(x, P##_sigmoid(x)); }     \
    ATTR static inline V P##_gelu(V x)                                         \
    {                                                                          \
        V e = P##_erf(VMUL(x, VK(MP_SQRT1_2)));                                \
        return VMUL(VMUL(VK(0.5f), x), VADD(VK(1.0f), e));                     \
    }                                                                          \
    ATTR static inline V P##_gelu_grad(V dy, V x)                              \
    {                                                                          \
        V cdf = VMUL(VK(0.5f), VADD(VK(1.0f), P##_erf(VMUL(x, VK(MP_SQRT1_2))))); \
        V pdf = VMUL(VK(MP_INV_SQRT_2PI), P##_exp(VMUL(VMUL(VK(-0.5f), x), x))); \
        return VMUL(dy, VFMA(x, pdf, cdf));                                    \
    }                                                                          \
    ATTR static inline V P##_silu_grad(V dy, V x)                              \
    {                                                                          \
        V s = P##_sigmoid(x);                                                  \
        return VMUL(VMUL(dy, s), VFMA(x, VSUB(VK(1.0f), s), VK(1.0f)));        \
    }                                                                          \
    ATTR static inline V P##_gelu_tanh_t(V x)                                  \
    {                                                                          \
        V u = VFMA(VMUL(VMUL(VK(MP_GELU_C), x), x), x, x);                     \
        return P##_tanh(VMUL(VK(MP_GELU_K), u));                               \
    }                                                                          \
    ATTR static inline V P##_gelu_tanh(V x)                                    \
    {                                                                          \
        return VMUL(VMUL(VK(0.5f), x), VADD(VK(1.0f), P##_gelu_tanh_t(x)));    \
    }                                                                          \
    ATTR static inline V P##_gelu_tanh_grad(V dy, V x)                         \
    {                                                                          \
        V t = P##_gelu_tanh_t(x), one = VK(1.0f);                              \
        V dt = VMUL(VMUL(VFMA(VNEG(t), t, one), VK(MP_GELU_K)),                \
                    VFMA(VMUL(VK(3.0f * MP_GELU_C), x), x, one));              \
        return VMUL(dy, VFMA(VMUL(VK(0.5f), x), dt, VMUL(VK(0.5f), VADD(one, t)))); \
    }

/* The table: MP_<op>_8 is AVX2's intrinsic, MP_<op>_16 AVX-512's. */
#define MP_VCAT_(a, b) a##b
#define MP_VCAT(a, b) MP_VCAT_(a, b)
#define MP_VOP(OP) MP_VCAT(MP_##OP##_, MP_VW)
#define MP_V_8 __m256
#define MP_V_16 __m512
#define MP_VI_8 __m256i
#define MP_VI_16 __m512i
#define MP_VK_8 _mm256_set1_ps
#define MP_VK_16 _mm512_set1_ps
#define MP_VKI_8 _mm256_set1_epi32
#define MP_VKI_16 _mm512_set1_epi32
#define MP_FMA_8 _mm256_fmadd_ps
#define MP_FMA_16 _mm512_fmadd_ps
#define MP_MUL_8 _mm256_mul_ps
#define MP_MUL_16 _mm512_mul_ps
#define MP_ADD_8 _mm256_add_ps
#define MP_ADD_16 _mm512_add_ps
#define MP_SUB_8 _mm256_sub_ps
#define MP_SUB_16 _mm512_sub_ps
#define MP_DIV_8 _mm256_div_ps
#define MP_DIV_16 _mm512_div_ps
#define MP_MIN_8 _mm256_min_ps
#define MP_MIN_16 _mm512_min_ps
#define MP_MAX_8 _mm256_max_ps
#define MP_MAX_16 _mm512_max_ps
#define MP_XOR_8 _mm256_xor_ps
#define MP_XOR_16 _mm512_xor_ps
#define MP_AND_8 _mm256_and_ps
#define MP_AND_16 _mm512_and_ps
#define MP_OR_8 _mm256_or_ps
#define MP_OR_16 _mm512_or_ps
#define MP_ANDN_8 _mm256_andnot_ps
#define MP_ANDN_16 _mm512_andnot_ps
#define MP_SEL_8(a, b, m) _mm256_blendv_ps(a, b, m)
#define MP_SEL_16(a, b, m) _mm512_mask_blend_ps(m, a, b)
#define MP_CMP_8 _mm256_cmp_ps
#define MP_CMP_16 _mm512_cmp_ps_mask
#define MP_CASTI_8 _mm256_castps_si256
#define MP_CASTI_16 _mm512_castps_si512
#define MP_CASTF_8 _mm256_castsi256_ps
#define MP_CASTF_16 _mm512_castsi512_ps
#define MP_SUBI_8 _mm256_sub_epi32
#define MP_SUBI_16 _mm512_sub_epi32
#define MP_ADDI_8 _mm256_add_epi32
#define MP_ADDI_16 _mm512_add_epi32
#define MP_SRAI_8 _mm256_srai_epi32
#define MP_SRAI_16 _mm512_srai_epi32
#define MP_SLLI_8 _mm256_slli_epi32
#define MP_SLLI_16 _mm512_slli_epi32

/* The generic names the functions are written with (undefined below). */
#define V MP_VOP(V)
#define VK(c) MP_VOP(VK)(c)
#define VFMA MP_VOP(FMA)
#define VMUL MP_VOP(MUL)
#define VADD MP_VOP(ADD)
#define VSUB MP_VOP(SUB)
#define VDIV MP_VOP(DIV)
#define VMIN MP_VOP(MIN)
#define VMAX MP_VOP(MAX)
#define VSEL MP_VOP(SEL)
#define VLT(a, b) MP_VOP(CMP)(a, b, _CMP_LT_OQ)
#define VLE(a, b) MP_VOP(CMP)(a, b, _CMP_LE_OQ)
#define VNAN(x) MP_VOP(CMP)(x, x, _CMP_UNORD_Q)
#define VNEG(v) MP_VOP(XOR)(v, VK(-0.0f))
#define VABS(v) MP_VOP(ANDN)(VK(-0.0f), v)
#define VCOPYSIGN(r, x) MP_VOP(OR)(MP_VOP(ANDN)(VK(-0.0f), r), MP_VOP(AND)(VK(-0.0f), x))
/* From k = x log2e + 1.5 2^23 (n, the integer, in its low bits): h = n >> 1
 * (floor(n / 2)), s1 = 2^h, s2 = 2^(n - h), as mp_expf_p. */
#define VPOW2(k, s1, s2)                                                       \
    do {                                                                       \
        MP_VOP(VI) ni_ = MP_VOP(SUBI)(MP_VOP(CASTI)(k), MP_VOP(VKI)(MP_RND_BITS)); \
        MP_VOP(VI) h_ = MP_VOP(SRAI)(ni_, 1), b_ = MP_VOP(VKI)(127);           \
        s1 = MP_VOP(CASTF)(MP_VOP(SLLI)(MP_VOP(ADDI)(h_, b_), 23));            \
        s2 = MP_VOP(CASTF)(MP_VOP(SLLI)(MP_VOP(ADDI)(MP_VOP(SUBI)(ni_, h_), b_), 23)); \
    } while (0)

#define MP_AVX2 __attribute__((target("avx2,fma")))
#define MP_AVX512 __attribute__((target("avx512f,avx512dq")))
#define MP_VW 8
MP_VMATH_FNS(mp_v8, MP_AVX2)
#undef MP_VW
#define MP_VW 16
MP_VMATH_FNS(mp_v16, MP_AVX512)
#undef MP_VW
#undef V
#undef VK
#undef VFMA
#undef VMUL
#undef VADD
#undef VSUB
#undef VDIV
#undef VMIN
#undef VMAX
#undef VSEL
#undef VLT
#undef VLE
#undef VNAN
#undef VNEG
#undef VABS
#undef VCOPYSIGN
#undef VPOW2
#endif

/* ---- in-place arrays: the API kernels use ------------------------------- */

/* MP_VMAP(name, scalar, f): void name(float *x, int64_t n), x[i] = f(x[i]),
 * 16 at a time by mp_v16_f (AVX-512) or 8 by mp_v8_f (AVX2), the rest (and
 * everything on the portable path) by the scalar function, which gives the
 * same bits. The vector part ends at nv = n - n % W, a bound the compiler
 * sees: ended by `i + W <= n`, GCC (12, -O2) could not tell where the tail
 * loop starts once a fused chunk inlined a constant n, took it for a loop
 * of up to 2^62 iterations and warned (-Waggressive-loop-optimizations:
 * tests/models/gate.mp). MP_VMAP2(name, scalar, f): void name(float *dy,
 * const float *x, int64_t n), dy[i] = f(dy[i], x[i]) (the gradients). */
#ifdef MP_X86
#define MP_VMAP_ISA(NAME, SCALAR, VF, ATTR, W, LD, ST)                         \
    ATTR static inline void NAME(float *x, int64_t n)                          \
    {                                                                          \
        int64_t i = 0, nv = n - n % (W);                                       \
        for (; i < nv; i += (W)) ST(x + i, VF(LD(x + i)));                     \
        for (; i < n; i++) x[i] = SCALAR(x[i]);                                \
    }
#define MP_VMAP2_ISA(NAME, SCALAR, VF, ATTR, W, LD, ST)                        \
    ATTR static inline void NAME(float *dy, const float *x, int64_t n)         \
    {                                                                          \
        int64_t i = 0, nv = n - n % (W);                                       \
        for (; i < nv; i += (W)) ST(dy + i, VF(LD(dy + i), LD(x + i)));        \
        for (; i < n; i++) dy[i] = SCALAR(dy[i], x[i]);                        \
    }
/* NAME##_avx512, NAME##_avx2 and NAME, which takes the one MP_CPU says. */
#define MP_VMAP_ALL(ISA, NAME, SCALAR, F, PARAMS, ARGS)                        \
    ISA(NAME##_avx2, SCALAR, mp_v8_##F, MP_AVX2, 8, _mm256_loadu_ps, _mm256_storeu_ps) \
    ISA(NAME##_avx512, SCALAR, mp_v16_##F, MP_AVX512, 16, _mm512_loadu_ps,     \
        _mm512_storeu_ps)                                                      \
    static inline void NAME PARAMS                                             \
    {                                                                          \
        int l = mp_cpu_level();                                                \
        if (l >= MP_CPU_AVX512)                                                \
            NAME##_avx512 ARGS;                                                \
        else if (l >= MP_CPU_AVX2)                                             \
            NAME##_avx2 ARGS;                                                  \
        else                                                                   \
            NAME##_portable ARGS;                                              \
    }
#else
#define MP_VMAP_ALL(ISA, NAME, SCALAR, F, PARAMS, ARGS)                        \
    static inline void NAME PARAMS { NAME##_portable ARGS; }
#endif
#define MP_VMAP(NAME, SCALAR, F)                                               \
    static inline void NAME##_portable(float *x, int64_t n)                    \
    {                                                                          \
        for (int64_t i = 0; i < n; i++) x[i] = SCALAR(x[i]);                   \
    }                                                                          \
    MP_VMAP_ALL(MP_VMAP_ISA, NAME, SCALAR, F, (float *x, int64_t n), (x, n))
#define MP_VMAP2(NAME, SCALAR, F)                                              \
    static inline void NAME##_portable(float *dy, const float *x, int64_t n)   \
    {                                                                          \
        for (int64_t i = 0; i < n; i++) dy[i] = SCALAR(dy[i], x[i]);           \
    }                                                                          \
    MP_VMAP_ALL(MP_VMAP2_ISA, NAME, SCALAR, F, (float *dy, const float *x, int64_t n), (dy, x, n))

MP_VMAP(mp_vexp, mp_expf_p, exp)
MP_VMAP(mp_verf, mp_erff_p, erf)
MP_VMAP(mp_vtanh, mp_tanhf_p, tanh)
MP_VMAP(mp_vsigmoid, mp_sigmoid, sigmoid)
MP_VMAP(mp_vsilu, mp_silu, silu)
MP_VMAP(mp_vgelu, mp_gelu, gelu)
MP_VMAP(mp_vgelu_tanh, mp_gelu_tanh, gelu_tanh)
MP_VMAP2(mp_vgelu_grad, mp_gelu_grad, gelu_grad)
MP_VMAP2(mp_vsilu_grad, mp_silu_grad, silu_grad)
MP_VMAP2(mp_vgelu_tanh_grad, mp_gelu_tanh_grad, gelu_tanh_grad)

#endif
