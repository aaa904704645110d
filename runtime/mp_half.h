/* mp_half.h - IEEE binary16 (f16) and bfloat16 (bf16) <-> f32, bit-exact.
 *
 * f16 and bf16 values are stored as uint16_t. Every conversion is done in
 * integer arithmetic on the bit patterns, so the result does not depend on
 * the compiler's _Float16 support or the FPU's rounding mode, and the C and
 * CUDA programs round identically:
 *   f32 -> f16   round to nearest, ties to even; results below 2^-14 become
 *                subnormals (or signed zero); |x| >= 65520 becomes inf;
 *                NaN stays NaN (sign and top payload bits kept, quiet bit set)
 *   f16 -> f32   exact (every f16 is an f32); NaN comes back quiet
 *   f32 -> bf16  round to nearest, ties to even; overflow to inf; NaN quiet
 *   bf16 -> f32  exact (the bf16 bits are the top half of the f32's)
 * NaN handling is that of the hardware converters (F16C, CUDA's
 * __float2half): signalling NaNs are quieted, so an f16 bit pattern survives
 * f16 -> f32 -> f16 unchanged unless it is a signalling NaN.
 *
 * MP_HD marks functions that are also compiled as CUDA device code. */
#ifndef MP_HALF_H
#define MP_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MP_HD __host__ __device__
#else
#define MP_HD
#endif

static inline MP_HD uint32_t mp_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

static inline MP_HD float mp_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

static inline MP_HD float mp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f)                              /* inf, NaN (made quiet) */
        return mp_bits_f32(sign | 0x7f800000u | (mant << 13) |
                           (mant ? 0x00400000u : 0u));
    if (exp == 0) {
        if (mant == 0)
            return mp_bits_f32(sign);
        /* subnormal: mant * 2^-24; shift the leading 1 up to bit 10 */
        exp = 113;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            exp--;
        }
        return mp_bits_f32(sign | (exp << 23) | ((mant & 0x3ffu) << 13));
    }
    return mp_bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* Round the integer m right by s bits (1 <= s <= 31), ties to even. */
static inline MP_HD uint32_t mp_shift_rne(uint32_t m, int s)
{
    uint32_t q = m >> s, rem = m & ((1u << s) - 1), half = 1u << (s - 1);
    return q + (rem > half || (rem == half && (q & 1u)));
}

static inline MP_HD uint16_t mp_f32_to_f16(float f)
{
    uint32_t x = mp_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u)                          /* NaN: keep it quiet */
        return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    if (x >= 0x477ff000u)                         /* >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (x >= 0x38800000u)                         /* normal: >= 2^-14 */
        return (uint16_t)(sign | mp_shift_rne(x - (112u << 23), 13));
    if (x < 0x33000000u)                          /* < 2^-25: zero */
        return sign;
    /* subnormal result: the value in units of 2^-24, rounded; a carry into
     * bit 10 gives the smallest normal's pattern, as it should */
    uint32_t exp = x >> 23, mant = (x & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | mp_shift_rne(mant, (int)(126 - exp)));
}

static inline MP_HD float mp_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007f0000u))
        u |= 0x00400000u;                         /* NaN: quiet */
    return mp_bits_f32(u);
}

static inline MP_HD uint16_t mp_f32_to_bf16(float f)
{
    uint32_t x = mp_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)          /* NaN: keep it quiet */
        return (uint16_t)((x >> 16) | 0x0040u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

#endif
