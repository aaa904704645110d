/* test_random.c - randn and rand (runtime/mp_kernels.h mp_k_randn,
 * mp_k_rand) and the functions randn is made of (mp_vmath.h mp_logf_p,
 * mp_cos2pi_p):
 * - log on [2^-33, 1] (randn's u1) and cos(2 pi u) on every u of the 2^-24
 *   grid against the C library in double, within the bounds mp_vmath.h
 *   states;
 * - the values' distribution, for fixed keys (so the test is
 *   deterministic): mean, variance, kurtosis, the Kolmogorov-Smirnov
 *   distance to the normal / uniform CDF, the tails, the correlation of
 *   neighbours, each bound several standard errors wide for 2^20 draws;
 * - every part of the key (seed, step, micro-batch, node) changes the
 *   values, the same key gives the same bits, and an element depends only
 *   on its index (a call of n values is a prefix of one of 2n).
 * VMATH_FULL=1 checks every float of log's range (default: every 7th). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <float.h>
#include "mp_kernels.h"

#define NDRAW (1 << 20)

static double ulps(float y, double ref)
{
    int e;
    frexp(fabs(ref), &e);
    return fabs((double)y - ref) / ldexp(1.0, e - 24);
}

static int full(void) { return getenv("VMATH_FULL") && *getenv("VMATH_FULL") == '1'; }

static void test_log(void **state)
{
    (void)state;
    double worst = 0;
    uint32_t step = full() ? 1 : 7;
    for (uint32_t b = mp_f32_bits(0x1p-33f); b < mp_f32_bits(1.0f); b += step) {
        float x = mp_bits_f32(b);
        double u = ulps(mp_logf_p(x), log((double)x));
        worst = u > worst ? u : worst;
    }
    print_message("log on [2^-33, 1): max error %.3f ulp\n", worst);
    assert_true(worst <= 1.0);
    assert_true(mp_logf_p(1.0f) == 0.0f);
    assert_true(mp_logf_p(0.5f) == -0.693147182f);
}

static void test_cos2pi(void **state)
{
    (void)state;
    double worst = 0;
    for (uint32_t k = 0; k < (1u << 24); k++) {
        float u = (float)k * 0x1p-24f;
        double d = fabs((double)mp_cos2pi_p(u) - cos(6.283185307179586 * (double)u));
        worst = d > worst ? d : worst;
    }
    print_message("cos(2 pi u) on the 2^-24 grid: max error %.3g\n", worst);
    assert_true(worst <= 1.2e-7);
    assert_true(mp_cos2pi_p(0.0f) == 1.0f && mp_cos2pi_p(0.5f) == -1.0f);
    assert_true(mp_cos2pi_p(0.25f) == 0.0f && mp_cos2pi_p(0.75f) == 0.0f);
}

static float *draw(int normal, uint64_t seed, int64_t step, int64_t micro, int64_t node, int64_t n)
{
    float *y = malloc((size_t)n * sizeof *y);
    assert_non_null(y);
    if (normal)
        mp_k_randn(y, MP_F32, n, seed, step, micro, node);
    else
        mp_k_rand(y, MP_F32, n, seed, step, micro, node);
    return y;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static double normal_cdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }
static double uniform_cdf(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

/* The largest distance between the empirical CDF of y and cdf. */
static double ks(float *y, int64_t n, double (*cdf)(double))
{
    qsort(y, (size_t)n, sizeof *y, cmp_float);
    double d = 0;
    for (int64_t i = 0; i < n; i++) {
        double f = cdf(y[i]);
        d = fmax(d, fmax(fabs(f - (double)i / n), fabs((double)(i + 1) / n - f)));
    }
    return d;
}

typedef struct Moments { double mean, var, kurt, lag1; } Moments;

static Moments moments(const float *y, int64_t n)
{
    Moments m = {0};
    double s2 = 0, s4 = 0, c = 0;
    for (int64_t i = 0; i < n; i++)
        m.mean += y[i];
    m.mean /= n;
    for (int64_t i = 0; i < n; i++) {
        double d = y[i] - m.mean;
        s2 += d * d;
        s4 += d * d * d * d;
        if (i)
            c += d * (y[i - 1] - m.mean);
    }
    m.var = s2 / n;
    m.kurt = s4 / n / (m.var * m.var);
    m.lag1 = c / s2;
    return m;
}

/* The bounds: standard errors for n = 2^20 are 1/1024 (mean of N(0, 1)),
 * 1.4e-3 (its variance), 4.8e-3 (kurtosis), 1/1024 (lag-1 correlation);
 * each bound is 5 of them or more. KS: P(D > 2.7e-3) < 1e-6. */
static void test_randn_distribution(void **state)
{
    (void)state;
    static const uint64_t keys[][4] = {{0, 1, 0, 7}, {1234, 17, 3, 42}, {~0ull, 1000000, -5, 3}};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        float *y = draw(1, keys[k][0], (int64_t)keys[k][1], (int64_t)keys[k][2], (int64_t)keys[k][3], NDRAW);
        Moments m = moments(y, NDRAW);
        int64_t beyond3 = 0, beyond4 = 0;
        float lo = 0, hi = 0;
        for (int64_t i = 0; i < NDRAW; i++) {
            beyond3 += fabsf(y[i]) > 3.0f;
            beyond4 += fabsf(y[i]) > 4.0f;
            lo = fminf(lo, y[i]);
            hi = fmaxf(hi, y[i]);
        }
        double d = ks(y, NDRAW, normal_cdf);
        print_message("randn key %zu: mean %.5f var %.5f kurtosis %.4f lag1 %.5f KS %.5f "
                      "|z|>3 %lld |z|>4 %lld range [%.3f, %.3f]\n", k, m.mean, m.var, m.kurt,
                      m.lag1, d, (long long)beyond3, (long long)beyond4, lo, hi);
        assert_true(fabs(m.mean) < 0.005);
        assert_true(fabs(m.var - 1) < 0.008);
        assert_true(fabs(m.kurt - 3) < 0.03);
        assert_true(fabs(m.lag1) < 0.005);
        assert_true(d < 2.7e-3);
        /* expected 2831 +- 53 beyond 3, 66 +- 8 beyond 4 */
        assert_true(beyond3 > 2831 - 300 && beyond3 < 2831 + 300);
        assert_true(beyond4 > 66 - 40 && beyond4 < 66 + 40);
        assert_true(lo > -6.67f && hi < 6.67f);
        free(y);
    }
}

static void test_rand_distribution(void **state)
{
    (void)state;
    float *y = draw(0, 99, 5, 1, 11, NDRAW);
    Moments m = moments(y, NDRAW);
    for (int64_t i = 0; i < NDRAW; i++) {
        assert_true(y[i] >= 0.0f && y[i] < 1.0f);
        assert_true(y[i] * 0x1p24f == floorf(y[i] * 0x1p24f));   /* on the 2^-24 grid */
    }
    double d = ks(y, NDRAW, uniform_cdf);
    print_message("rand: mean %.5f var %.5f lag1 %.5f KS %.5f\n", m.mean, m.var, m.lag1, d);
    assert_true(fabs(m.mean - 0.5) < 0.0015);     /* se 2.8e-4 */
    assert_true(fabs(m.var - 1.0 / 12) < 0.0008); /* se 7.3e-5 */
    assert_true(fabs(m.lag1) < 0.005);
    assert_true(d < 2.7e-3);
    free(y);
}

static int same(const float *a, const float *b, int64_t n) { return !memcmp(a, b, (size_t)n * sizeof *a); }

/* Every part of the key matters; the same key gives the same bits; value i
 * depends on i alone (a prefix of a longer call; chunks and threads cannot
 * change it). */
static void test_keys(void **state)
{
    (void)state;
    enum { n = 1000 };
    for (int normal = 0; normal < 2; normal++) {
        float *base = draw(normal, 5, 10, 2, 30, 2 * n);
        float *again = draw(normal, 5, 10, 2, 30, n);
        float *other[] = {draw(normal, 6, 10, 2, 30, n), draw(normal, 5, 11, 2, 30, n),
                          draw(normal, 5, 10, 3, 30, n), draw(normal, 5, 10, 2, 31, n),
                          draw(normal, 5, 10, -1, 30, n)};
        assert_true(same(base, again, n));
        for (int k = 0; k < 5; k++) {
            int equal = 0;
            for (int i = 0; i < n; i++)
                equal += base[i] == other[k][i];
            assert_true(equal < 5);
            free(other[k]);
        }
        free(base);
        free(again);
    }
    /* f16 storage: the f32 draw rounded once */
    uint16_t h[64];
    float f[64];
    mp_k_randn(h, MP_F16, 64, 1, 2, 0, 4);
    mp_k_randn(f, MP_F32, 64, 1, 2, 0, 4);
    for (int i = 0; i < 64; i++)
        assert_int_equal(h[i], mp_f32_to_f16(f[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log),
        cmocka_unit_test(test_cos2pi),
        cmocka_unit_test(test_randn_distribution),
        cmocka_unit_test(test_rand_distribution),
        cmocka_unit_test(test_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
