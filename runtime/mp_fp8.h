/* mp_fp8.h - FP8 (e4m3 and e5m2) <-> f32, bit-exact, and the power-of-two
 * per-tensor scales of the mixed_float8 policy (PRECISION.md "Additions:
 * TF32 and FP8"), shared by the C and CUDA programs.
 *
 * The two formats are those of "FP8 Formats for Deep Learning"
 * (Micikevicius et al. 2022), as ml_dtypes names them:
 *   e4m3 (float8_e4m3fn)  bias 7, 3 mantissa bits, max 448, no infinities,
 *                         S.1111.111 is NaN; smallest subnormal 2^-9
 *   e5m2 (float8_e5m2)    bias 15, 2 mantissa bits, max 57344, IEEE-like
 *                         infinities and NaNs; smallest subnormal 2^-16
 * Values are stored as uint8_t and converted in integer arithmetic on the
 * bit patterns, as mp_half.h does, so both targets round identically:
 *   f32 -> fp8   round to nearest, ties to even; |x| >= max (infinities
 *                included) saturates to +-max; NaN becomes the format's
 *                quiet NaN with the sign kept (e4m3 S.1111.111, e5m2
 *                S.11111.10). This is ml_dtypes' cast of the value clamped
 *                to [-max, max] (ml_dtypes itself, unclamped, overflows to
 *                NaN in e4m3 and to inf in e5m2).
 *   fp8 -> f32   exact; NaN comes back as the quiet f32 NaN with its sign.
 * tests/t_fp8.sh checks both directions against ml_dtypes on every pattern
 * and on 10^7 random values.
 *
 * Scales: a tensor whose recorded amax is A is quantised as
 * q = fp8(v * 2^e) with e = floor(log2(max / A)) - margin, computed exactly
 * (the largest e with A * 2^e <= max, from the exponents of A and max, with
 * no division that could round), and clamped to [-MP_FP8_EMAX, MP_FP8_EMAX]
 * so that 2^e, 2^-e and a product's 2^-(ea + eb) are normal f32 numbers
 * (2^63 is 9.2e18: only a tensor whose amax is below 4.9e-17 would want
 * more). An amax that is zero or not
 * finite leaves the exponent as it was (a tensor of zeros has no scale of
 * its own; a non-finite step is skipped anyway). Multiplying by 2^e is exact
 * unless the product leaves the f32 range, so the scale changes no value
 * apart from the fp8 rounding itself. */
#ifndef MP_FP8_H
#define MP_FP8_H

#include <math.h>
#include <stdint.h>
#include "mp_model.h"
#include "mp_half.h"

typedef enum { MP_E4M3 = 0, MP_E5M2 = 1 } MpFp8Fmt;

#define MP_FP8_E4M3_MAX 448.0f
#define MP_FP8_E5M2_MAX 57344.0f
#define MP_FP8_EMAX 63      /* |scale exponent|: 2^-(ea + eb) stays a normal f32 */

/* bias, mantissa bits, |max|'s f32 bits, |max|'s fp8 bits, quiet NaN */
static inline MP_HD int mp_fp8_bias(MpFp8Fmt f) { return f == MP_E4M3 ? 7 : 15; }
static inline MP_HD int mp_fp8_mbits(MpFp8Fmt f) { return f == MP_E4M3 ? 3 : 2; }
static inline MP_HD float mp_fp8_max(MpFp8Fmt f)
{
    return f == MP_E4M3 ? MP_FP8_E4M3_MAX : MP_FP8_E5M2_MAX;
}

static inline MP_HD uint8_t mp_f32_to_fp8(float v, MpFp8Fmt f)
{
    const int bias = mp_fp8_bias(f), mb = mp_fp8_mbits(f);
    uint32_t x = mp_f32_bits(v);
    uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u)                            /* NaN */
        return (uint8_t)(sign | (f == MP_E4M3 ? 0x7fu : 0x7eu));
    if (a >= mp_f32_bits(mp_fp8_max(f)))            /* saturate, inf too */
        return (uint8_t)(sign | (f == MP_E4M3 ? 0x7eu : 0x7bu));
    if (a >= (uint32_t)(127 + 1 - bias) << 23)      /* normal result */
        return (uint8_t)(sign | mp_shift_rne(a - ((uint32_t)(127 - bias) << 23), 23 - mb));
    if (a <= (uint32_t)(127 - bias - mb) << 23)     /* <= half the smallest: 0 */
        return sign;
    /* subnormal result: the value in units of 2^(1 - bias - mb), rounded
     * (a carry gives the smallest normal's pattern, as it should) */
    int e32 = (int)(a >> 23);
    uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    return (uint8_t)(sign | mp_shift_rne(mant, 151 - bias - mb - e32));
}

static inline MP_HD float mp_fp8_to_f32(uint8_t q, MpFp8Fmt f)
{
    const int bias = mp_fp8_bias(f), mb = mp_fp8_mbits(f);
    uint32_t sign = (uint32_t)(q & 0x80u) << 24;
    uint32_t e = (q & 0x7fu) >> mb, m = q & ((1u << mb) - 1);
    if (f == MP_E4M3 ? (e == 15 && m == 7) : (e == 31 && m != 0))
        return mp_bits_f32(sign | 0x7fc00000u);
    if (f == MP_E5M2 && e == 31)
        return mp_bits_f32(sign | 0x7f800000u);
    if (e == 0) {                                   /* m * 2^(1 - bias - mb) */
        float v = (float)m * mp_bits_f32((uint32_t)(127 + 1 - bias - mb) << 23);
        return mp_bits_f32(sign | mp_f32_bits(v));
    }
    return mp_bits_f32(sign | ((e + 127 - bias) << 23) | (m << (23 - mb)));
}

/* v rounded to format f, as an f32 (every fp8 value is an f16 and an f32
 * value exactly): what a product of quantised operands reads. */
static inline MP_HD float mp_fp8_round(float v, MpFp8Fmt f)
{
    return mp_fp8_to_f32(mp_f32_to_fp8(v, f), f);
}

/* 2^e as an f32, e in [-126, 127] */
static inline MP_HD float mp_pow2f(int e)
{
    return mp_bits_f32((uint32_t)(e + 127) << 23);
}

/* The scale exponent for amax under format f and margin: the largest e with
 * amax * 2^e <= max, less margin, clamped to +-MP_FP8_EMAX; prev when amax is
 * zero, negative or not finite. */
static inline MP_HD int mp_fp8_scale_exp(float amax, MpFp8Fmt f, int margin, int prev)
{
    uint32_t a = mp_f32_bits(amax);
    if (!(amax > 0.0f) || a >= 0x7f800000u)
        return prev;
    uint32_t mx = mp_f32_bits(mp_fp8_max(f));
    int ea = (int)(a >> 23), em = (int)(mx >> 23);
    uint32_t ma = a & 0x7fffffu;
    if (ea == 0) {                                  /* subnormal amax: normalise */
        ea = 1;
        while (!(ma & 0x800000u)) {
            ma <<= 1;
            ea--;
        }
        ma &= 0x7fffffu;
    }
    int e = em - ea - (ma > (mx & 0x7fffffu)) - margin;
    return e > MP_FP8_EMAX ? MP_FP8_EMAX : e < -MP_FP8_EMAX ? -MP_FP8_EMAX : e;
}

/* ---- mixed_float8 in a product: the GEMM's operand rounding ---------------
 * A quantised operand enters mp_gemm (mp_kernels_gemm.h) through the same
 * door as a cast fused into the product (MpGemm.around / bround): a
 * rounding code, here MP_RND_FP8 | format << 8 | (e + 128), tells the
 * packing to read each value v as fp8(v * 2^e), the quantised value q
 * itself (exact in f32); the product sums q_a q_b in f32 and its alpha,
 * 2^-(ea + eb), divides by the two scales once (PRECISION.md: "the product
 * of quantised a and b is divided by sa·sb in f32"). */
#define MP_RND_FP8 0x1000

static inline MP_HD int mp_rnd_fp8(MpFp8Fmt f, int e) { return MP_RND_FP8 | ((int)f << 8) | (e + 128); }

/* mp_fp8_round(v, f) without branches, for loops the compiler turns into
 * vector code (the GEMM's packing, mp_kernels.h's mp_round): the same f32 for every f32 v, NaN
 * included (tests/fp8_conv.c `same` checks all 2^32 of each format).
 * Normal results round the f32's bits to mb mantissa bits, to nearest
 * even; subnormal ones come from adding and taking away 2^(23 + 1 - bias -
 * mb), whose f32 spacing is the fp8 subnormals' (the addition rounds to
 * nearest even); |v| at or past max saturates; NaN becomes the quiet NaN
 * with v's sign. */
static inline MP_HD float mp_fp8_round_fast(float v, MpFp8Fmt f)
{
    const int bias = mp_fp8_bias(f), mb = mp_fp8_mbits(f);
    const uint32_t maxbits = mp_f32_bits(mp_fp8_max(f));
    uint32_t x = mp_f32_bits(v), sign = x & 0x80000000u, a = x & 0x7fffffffu;
    uint32_t sh = 23 - (uint32_t)mb;
    uint32_t nrm = (a + ((1u << (sh - 1)) - 1) + ((a >> sh) & 1u)) & ~((1u << sh) - 1);
    float big = mp_bits_f32((uint32_t)(127 + 23 + 1 - bias - mb) << 23);
    uint32_t sub = mp_f32_bits((mp_bits_f32(a) + big) - big);
    /* the choices as masks, not branches: the addition above is then used
     * on every path, so the compiler need not keep it behind a branch */
    uint32_t is_sub = 0u - (uint32_t)(a < (uint32_t)(127 + 1 - bias) << 23);
    uint32_t is_max = 0u - (uint32_t)(a >= maxbits), is_nan = 0u - (uint32_t)(a > 0x7f800000u);
    uint32_t r = (sub & is_sub) | (nrm & ~is_sub);
    r = (maxbits & is_max) | (r & ~is_max);
    r = (0x7fc00000u & is_nan) | (r & ~is_nan);
    return mp_bits_f32(sign | r);
}

/* The format and scale 2^e of rounding code rnd (mp_rnd_fp8) */
static inline MP_HD MpFp8Fmt mp_rnd_fmt(int rnd) { return (MpFp8Fmt)((rnd >> 8) & 1); }
static inline MP_HD float mp_rnd_scale(int rnd) { return mp_pow2f((rnd & 255) - 128); }

/* x[0..n) under rounding code rnd, in place: fp8(x * 2^e), one loop per
 * format so that the format's constants fold and the loop is vector code */
static inline void mp_round_fp8_n(float *x, int rnd, int64_t n)
{
    float s = mp_rnd_scale(rnd);
    if (mp_rnd_fmt(rnd) == MP_E5M2)
        for (int64_t i = 0; i < n; i++)
            x[i] = mp_fp8_round_fast(x[i] * s, MP_E5M2);
    else
        for (int64_t i = 0; i < n; i++)
            x[i] = mp_fp8_round_fast(x[i] * s, MP_E4M3);
}

/* ---- mixed_float8's scales: the C program's state -------------------------
 * One slot per quantised tensor (the plan's s#N; compiler/prec.c makes
 * them): its format, the exponent e of its scale 2^e in this step, the
 * largest |value| it has had in this step, and, under delayed scaling, the
 * amaxes of the last `history` steps. The model's code calls
 * mp_fp8_observe where a slot's first product reads it (the forward's x and
 * w, the backward's dy) and brackets each quantised product with
 * mp_fp8_use; the trainer calls mp_fp8_step_end once a step. The state is
 * in the checkpoint (mp_ckpt.h), so a resumed run quantises as the
 * uninterrupted one. */
struct MpFp8 {
    int nslots, history, margin;
    int current;                /* 1: current(margin), 0: delayed(history, margin) */
    const unsigned char *fmt;   /* [nslots] MpFp8Fmt */
    int *exp;                   /* [nslots] the scale exponent of this step */
    float *amax;                /* [nslots] this step's amax so far (0: none yet; +inf: a NaN
                                   was seen, the largest, so a reduce over ranks keeps it) */
    float *hist;                /* [history][nslots] the amaxes of past steps */
    int64_t steps;              /* steps recorded (the newest in row (steps-1) % history) */
    int lo, hi;                 /* the range of the exponents the last step used (logs) */
};
typedef struct MpFp8 MpFp8;

/* The product being run: the rounding codes of its two operands and its
 * alpha (mp_fp8_use); zero when it is not quantised. */
typedef struct MpFp8Use {
    int around, bround;
    float alpha;
} MpFp8Use;
MP_STATE MpFp8Use mp_gemm_fp8;

/* max |x[i]|, i < n, of a tensor of type dt (f32, f16, bf16); NaN when one is */
static inline float mp_fp8_absmax(const void *x, int dt, int64_t n)
{
    float a = 0.0f;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        float v = dt == MP_F16 ? mp_f16_to_f32(((const uint16_t *)x)[i])
                : dt == MP_BF16 ? mp_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
        v = fabsf(v);
        nan |= v != v;
        a = v > a ? v : a;
    }
    return nan ? NAN : a;
}

/* The largest finite amax slot s has recorded (0: none) */
static inline MP_HD float mp_fp8_hist_max(const MpFp8 *f, int s)
{
    int64_t rows = f->steps < f->history ? f->steps : f->history;
    float a = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
        float v = f->hist[r * f->nslots + s];
        a = v > a ? v : a;
    }
    return a;
}

/* Slot s (1-based) is read by its first product: its amax a (NaN or
 * +inf alike: one that is not finite) enters this step's (training only);
 * its scale is the tensor's own under current scaling and before any
 * history (delayed scaling's first step), else the one mp_fp8_step_end set
 * from the history. mp_fp8_observe here, the CUDA program's
 * mp_cu_fp8_observe (runtime/mp_cuda_fp8.h) on the device. */
static inline MP_HD void mp_fp8_merge(MpFp8 *f, int s, float a, int training)
{
    s--;
    if (training && !(a <= f->amax[s]))         /* a NaN is kept as +inf: it sticks */
        f->amax[s] = a != a ? INFINITY : a;
    if (f->current || f->steps == 0)
        f->exp[s] = mp_fp8_scale_exp(a, (MpFp8Fmt)f->fmt[s], f->margin, f->exp[s]);
}

static inline void mp_fp8_observe(MpFp8 *f, int s, const void *x, int dt, int64_t n, int training)
{
    mp_fp8_merge(f, s, mp_fp8_absmax(x, dt, n), training);
}

/* The next products are quantised with slots sa and sb (1-based; 0, 0:
 * not quantised); mp_gemm_ex applies it unless --gradcheck keeps products
 * exact (mp_gemm_exact). */
static inline void mp_fp8_use(const MpFp8 *f, int sa, int sb)
{
    MpFp8Use u = {0, 0, 1.0f};
    if (sa && sb) {
        int ea = f->exp[sa - 1], eb = f->exp[sb - 1];
        u.around = mp_rnd_fp8((MpFp8Fmt)f->fmt[sa - 1], ea);
        u.bround = mp_rnd_fp8((MpFp8Fmt)f->fmt[sb - 1], eb);
        u.alpha = mp_pow2f(-(ea + eb));
    }
    mp_gemm_fp8 = u;
}

/* After a step (taken or skipped): the range of the exponents it used is
 * kept for the log; delayed scaling records each slot's amax (a
 * non-finite one, or none, as 0) and sets the next step's exponent from
 * the largest of the last `history`, or keeps it when they are all 0. */
static inline MP_HD void mp_fp8_step_end(MpFp8 *f)
{
    f->lo = f->hi = f->nslots ? f->exp[0] : 0;
    for (int s = 1; s < f->nslots; s++) {
        f->lo = f->exp[s] < f->lo ? f->exp[s] : f->lo;
        f->hi = f->exp[s] > f->hi ? f->exp[s] : f->hi;
    }
    if (!f->current) {
        float *row = f->hist + (f->steps % f->history) * f->nslots;
        for (int s = 0; s < f->nslots; s++)
            row[s] = isfinite(f->amax[s]) ? f->amax[s] : 0.0f;
        f->steps++;
        for (int s = 0; s < f->nslots; s++)
            f->exp[s] = mp_fp8_scale_exp(mp_fp8_hist_max(f, s), (MpFp8Fmt)f->fmt[s], f->margin,
                                         f->exp[s]);
    } else {
        f->steps++;
    }
    for (int s = 0; s < f->nslots; s++)
        f->amax[s] = 0.0f;
}

/* The end of a step under mixed_float8, for both trainers (mp_train.h's
 * mp_step, the CUDA program's MpCuDecide), after the loss scaler's verdict
 * `taken` on gradients that are `finite` or not: the scales move on either
 * way (mp_fp8_step_end), and a non-finite step is skipped and counted in
 * *skipped, as loss scaling does, though there is no scale to lower.
 * Returns whether the step is taken. */
static inline MP_HD int mp_fp8_step_taken(MpFp8 *f, int taken, int finite, int64_t *skipped)
{
    mp_fp8_step_end(f);
    if (taken && !finite) {
        ++*skipped;
        return 0;
    }
    return taken;
}

#endif
