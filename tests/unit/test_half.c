/* test_half.c - runtime/mp_half.h against independent references.
 *
 * The references here use double arithmetic (ldexp, nearbyint: ties to
 * even), not the bit manipulation under test. tests/t_kernels_torch.sh also
 * compares millions of conversions with numpy and torch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include "mp_half.h"

static float bits_f(uint32_t u) { return mp_bits_f32(u); }

/* The value of an f16 bit pattern, from its fields. */
static double f16_value(uint16_t h)
{
    int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
    double v;
    if (exp == 31)
        v = mant ? NAN : INFINITY;
    else if (exp == 0)
        v = ldexp(mant, -24);
    else
        v = ldexp(1024 + mant, exp - 25);
    return sign ? -v : v;
}

/* f32 -> f16 -> value, by scaling to the f16 quantum and rounding in double. */
static double f16_round_ref(float x)
{
    double a = fabs((double)x);
    if (isnan(x))
        return NAN;
    if (a >= 65520.0)
        return copysign(INFINITY, x);
    int e;
    frexp(a, &e);                   /* a = f * 2^e, f in [0.5, 1) */
    int q = (e - 1 < -14 ? -14 : e - 1) - 10;
    double r = ldexp(nearbyint(ldexp(a, -q)), q);
    return copysign(r, x);
}

static double bf16_round_ref(float x)
{
    double a = fabs((double)x);
    if (isnan(x))
        return NAN;
    if (a == 0 || isinf(x))
        return x;
    int e;
    frexp(a, &e);
    int q = (e - 1 < -126 ? -126 : e - 1) - 7;
    double r = ldexp(nearbyint(ldexp(a, -q)), q);
    if (r >= ldexp(1.0, 128))
        r = INFINITY;
    return copysign(r, x);
}

static void check_f16(float x)
{
    uint16_t h = mp_f32_to_f16(x);
    double want = f16_round_ref(x), got = f16_value(h);
    if (isnan(want)) {
        if (!isnan(got) || !(h & 0x200)) {
            fprintf(stderr, "f16(%a) = %04x: want quiet NaN\n", (double)x, h);
            fail();
        }
        return;
    }
    if (got != want || !signbit(got) != !signbit(want)) {
        fprintf(stderr, "f16(%a) = %04x = %a, want %a\n", (double)x, h, got, want);
        fail();
    }
}

static void check_bf16(float x)
{
    uint16_t h = mp_f32_to_bf16(x);
    double want = bf16_round_ref(x), got = mp_bf16_to_f32(h);
    if (isnan(want) ? !isnan(got) : got != want || !signbit(got) != !signbit(want)) {
        fprintf(stderr, "bf16(%a) = %04x = %a, want %a\n", (double)x, h, got, want);
        fail();
    }
}

/* Every f16 pattern decodes to its value and encodes back to itself. */
static void test_f16_all_patterns(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = mp_f16_to_f32(h);
        double v = f16_value(h);
        uint16_t back = mp_f32_to_f16(f);
        if (isnan(v)) {
            assert_true(isnan(f));
            assert_int_equal(back, h | 0x200);    /* quieted, payload kept */
            continue;
        }
        assert_true((double)f == v && !signbit(f) == !signbit(v));
        assert_int_equal(back, h);
    }
}

/* Around every f16 value: the midpoints to its neighbours and one f32 ulp
 * either side of them (the rounding boundaries), and the value itself. */
static void test_f16_boundaries(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 0x7c00; i++) {
        double lo = f16_value((uint16_t)i);
        double hi = i + 1 < 0x7c00 ? f16_value((uint16_t)(i + 1)) : 65536.0;
        float mid = (float)((lo + hi) / 2);     /* exact in f32 */
        float pts[5] = {(float)lo, mid, nextafterf(mid, 0), nextafterf(mid, INFINITY),
                        (float)hi};
        for (int k = 0; k < 5; k++) {
            check_f16(pts[k]);
            check_f16(-pts[k]);
        }
    }
    float edge[] = {65504.0f, 65519.996f, 65520.0f, 65536.0f, 1e30f, INFINITY,
                    NAN, 0.0f, -0.0f, 5.96046448e-8f, 2.98023224e-8f,
                    2.98023259e-8f, 6.10351562e-5f, 6.09755516e-5f,
                    bits_f(0x7f800001u), bits_f(0xffc00000u), bits_f(0x33000001u),
                    bits_f(0x387fe000u), bits_f(0x387ff000u), bits_f(1)};
    for (size_t k = 0; k < sizeof edge / sizeof edge[0]; k++) {
        check_f16(edge[k]);
        check_f16(-edge[k]);
    }
    assert_int_equal(mp_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(mp_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(mp_f32_to_f16(-65520.0f), 0xfc00);
    assert_int_equal(mp_f32_to_f16(bits_f(0x33000000u)), 0x0000); /* 2^-25: tie to 0 */
    assert_int_equal(mp_f32_to_f16(bits_f(0x33000001u)), 0x0001);
}

/* A stride through every f32 exponent and many mantissas. */
static void test_f16_bf16_sweep(void **state)
{
    (void)state;
    uint32_t u = 12345;
    for (int i = 0; i < 2000000; i++) {
        u = u * 1664525u + 1013904223u;
        float x = bits_f(u);
        check_f16(x);
        check_bf16(x);
    }
}

static void test_bf16(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {          /* decode, round trip */
        uint16_t h = (uint16_t)i;
        float f = mp_bf16_to_f32(h);
        assert_int_equal(mp_f32_bits(f) >> 16, isnan(f) ? (h | 0x40u) : h);
        assert_int_equal(mp_f32_to_bf16(f), isnan(f) ? (h | 0x40u) : h);
        if (isnan(f))
            continue;
        uint32_t b = (uint32_t)h << 16;            /* the ties above it */
        check_bf16(bits_f(b | 0x8000u));
        check_bf16(bits_f(b | 0x7fffu));
        check_bf16(bits_f(b | 0x8001u));
    }
    assert_int_equal(mp_f32_to_bf16(bits_f(0x7f7fffffu)), 0x7f80);   /* FLT_MAX -> inf */
    assert_int_equal(mp_f32_to_bf16(bits_f(0x3f808000u)), 0x3f80);   /* tie to even */
    assert_int_equal(mp_f32_to_bf16(bits_f(0x3f818000u)), 0x3f82);
    assert_true(isnan(mp_bf16_to_f32(mp_f32_to_bf16(NAN))));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_all_patterns),
        cmocka_unit_test(test_f16_boundaries),
        cmocka_unit_test(test_f16_bf16_sweep),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
