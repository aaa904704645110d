/* test_vmath.c - runtime/mp_vmath.h: the AVX-512, AVX2 and scalar
 * (portable, CUDA) versions of exp, erf, tanh and the activations built on
 * them give the same bits (each vector path this CPU has; the test prints
 * which ran), and their error against the C library's double functions
 * stays within the bounds stated in mp_vmath.h (NaN in, NaN out; which
 * NaN's sign and payload may differ).
 *
 * By default (seconds) a strided sweep over all 2^32 bit patterns (every
 * 4099th) plus every float of narrow windows where the formulas change
 * (branch points, overflow, subnormal results). VMATH_FULL=1 takes every
 * 61st bit pattern and every float of wide windows (minutes; how the
 * numbers stated in mp_vmath.h were measured). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <float.h>
#include "mp_kernels.h"

#define N 4096

typedef struct Err {
    double ulp, rel;      /* max error in ulps of the float result, relative */
    float at_ulp;         /* where the ulp maximum is */
    int64_t mismatches;   /* a vector path's bits and the scalar's differ */
    int normal_only;      /* no ulp count where |result| < 1e-30 */
} Err;

/* ulps of |y - ref|, in units of the spacing of floats at ref */
static double ulps(float y, double ref)
{
    double a = fabs(ref);
    int e;
    double u = a < FLT_MIN ? ldexp(1.0, -149) : (frexp(a, &e), ldexp(1.0, e - 24));
    return fabs((double)y - ref) / u;
}

static void check_one(Err *err, float x, float y, double ref)
{
    float rf = (float)ref;
    if (isnan(ref) || isnan(y)) {
        if (!(isnan(ref) && isnan(y)))
            fail_msg("f(%a) = %a, reference %a", x, y, ref);
        return;
    }
    if (isinf(rf) || isinf(y)) {
        if (rf != y && !(fabs(ref) > FLT_MAX * 0.99999 && isinf(y)))
            fail_msg("f(%a) = %a, reference %a", x, y, ref);
        return;
    }
    if (err->normal_only && fabs(ref) < 1e-30)
        return;
    double u = ulps(y, ref);
    if (u > err->ulp) {
        err->ulp = u;
        err->at_ulp = x;
    }
    if (fabs(ref) >= FLT_MIN && fabs((double)y - ref) / fabs(ref) > err->rel)
        err->rel = fabs((double)y - ref) / fabs(ref);
}

typedef float ScalarFn(float);
typedef void ArrayFn(float *, int64_t);
typedef double RefFn(double);

/* The vector versions of one function, where the CPU has them: AVX2's and
 * AVX-512's (the path MP_CPU asks for and those below it). */
enum { NVEC = 2 };
static const char *const vec_name[NVEC] = {"avx2", "avx512"};
typedef struct Vec { ArrayFn *f[NVEC]; } Vec;
static int vec_has(int v) { return mp_cpu_level() >= (v ? MP_CPU_AVX512 : MP_CPU_AVX2); }
#ifdef MP_X86
#define VFN(f) ((Vec){{f##_avx2, f##_avx512}})
#define VFN2(f) {f##_avx2, f##_avx512}
#else
#define VFN(f) ((Vec){{NULL, NULL}})
#define VFN2(f) {NULL, NULL}
#endif

/* x[0..n) through the scalar and each vector version the CPU has */
static void run_block(Err *err, const float *x, int n, ScalarFn *sf, Vec vf, RefFn *rf)
{
    float v[NVEC][N];
    for (int p = 0; p < NVEC; p++)
        if (vf.f[p] && vec_has(p)) {
            memcpy(v[p], x, (size_t)n * sizeof *v[p]);
            vf.f[p](v[p], n);
        }
    for (int i = 0; i < n; i++) {
        float s = sf(x[i]);
        for (int p = 0; p < NVEC; p++) {
            if (!vf.f[p] || !vec_has(p))
                continue;
            /* NaNs: any NaN (C lets the compiler commute x * y, and which
             * NaN operand x86 passes on depends on the order) */
            int same = mp_f32_bits(s) == mp_f32_bits(v[p][i]) || (isnan(s) && isnan(v[p][i]));
            if (!same && err->mismatches++ < 5)
                print_error("x = %a: scalar %a, %s %a\n", x[i], s, vec_name[p], v[p][i]);
        }
        if (rf)
            check_one(err, x[i], s, rf((double)x[i]));
    }
}

/* Bit patterns lo, lo + step, ... <= hi (unsigned, so negatives follow). */
static void sweep(Err *err, uint32_t lo, uint32_t hi, uint32_t step, ScalarFn *sf,
                  Vec vf, RefFn *rf)
{
    float x[N];
    int n = 0;
    for (uint64_t u = lo; u <= hi; u += step) {
        x[n++] = mp_bits_f32((uint32_t)u);
        if (n == N) {
            run_block(err, x, n, sf, vf, rf);
            n = 0;
        }
    }
    run_block(err, x, n, sf, vf, rf);
}

static int full(void) { return getenv("VMATH_FULL") && *getenv("VMATH_FULL") == '1'; }

/* Every float in [a, b] and [-b, -a] (0 <= a <= b): the wide window with
 * VMATH_FULL, else [m - (m - a) / 64, m + (b - m) / 64] around m. */
static void dense(Err *err, float a, float m, float b, ScalarFn *sf, Vec vf, RefFn *rf)
{
    if (!full()) {
        a = m - (m - a) / 64;
        b = m + (b - m) / 64;
    }
    uint32_t lo = mp_f32_bits(a), hi = mp_f32_bits(b);
    sweep(err, lo, hi, 1, sf, vf, rf);
    sweep(err, lo | 0x80000000u, hi | 0x80000000u, 1, sf, vf, rf);
}

static void whole(Err *err, ScalarFn *sf, Vec vf, RefFn *rf)
{
    sweep(err, 0, 0xffffffffu, full() ? 61 : 4099, sf, vf, rf);
}

static void report(const char *name, const Err *e, double max_ulp)
{
    print_message("%-5s max error %.3f ulp (at %a), %.3g relative; %lld vector/scalar mismatches\n",
                  name, e->ulp, e->at_ulp, e->rel, (long long)e->mismatches);
    assert_int_equal(e->mismatches, 0);
    assert_true(e->ulp <= max_ulp);
}


static void test_exp(void **state)
{
    (void)state;
    Err e = {0};
    whole(&e, mp_expf_p, VFN(mp_vexp), exp);
    dense(&e, 87.0f, 88.72f, 89.0f, mp_expf_p, VFN(mp_vexp), exp);  /* overflow */
    dense(&e, 85.0f, 87.33f, 105.0f, mp_expf_p, VFN(mp_vexp), exp); /* subnormals */
    dense(&e, 0.0f, 0.0f, 0x1p-130f, mp_expf_p, VFN(mp_vexp), exp);
    dense(&e, 0.25f, 0.3466f, 1.0f, mp_expf_p, VFN(mp_vexp), exp); /* |r| <= ln2/2 */
    report("exp", &e, 1.0);
    assert_true(mp_expf_p(INFINITY) == INFINITY && mp_expf_p(-INFINITY) == 0.0f);
    assert_true(isnan(mp_expf_p(NAN)));
}

static void test_erf(void **state)
{
    (void)state;
    Err e = {0};
    whole(&e, mp_erff_p, VFN(mp_verf), erf);
    dense(&e, 0.5f, 1.0f, 2.0f, mp_erff_p, VFN(mp_verf), erf);   /* branch point */
    dense(&e, 2.0f, 3.92f, 4.5f, mp_erff_p, VFN(mp_verf), erf);  /* rounds to 1 */
    dense(&e, 0.0f, 0.0f, 0x1p-130f, mp_erff_p, VFN(mp_verf), erf);
    report("erf", &e, 1.5);
    assert_true(mp_erff_p(INFINITY) == 1.0f && mp_erff_p(-INFINITY) == -1.0f);
    assert_true(signbit(mp_erff_p(-0.0f)) && isnan(mp_erff_p(NAN)));
}

static void test_tanh(void **state)
{
    (void)state;
    Err e = {0};
    whole(&e, mp_tanhf_p, VFN(mp_vtanh), tanh);
    dense(&e, 0.25f, 0.625f, 2.0f, mp_tanhf_p, VFN(mp_vtanh), tanh); /* branch */
    dense(&e, 2.0f, 9.0f, 10.0f, mp_tanhf_p, VFN(mp_vtanh), tanh);   /* rounds to 1 */
    dense(&e, 0.0f, 0.0f, 0x1p-130f, mp_tanhf_p, VFN(mp_vtanh), tanh);
    report("tanh", &e, 2.5);
    assert_true(mp_tanhf_p(INFINITY) == 1.0f && mp_tanhf_p(-INFINITY) == -1.0f);
    assert_true(signbit(mp_tanhf_p(-0.0f)) && isnan(mp_tanhf_p(NAN)));
}

/* The activations: same bits on both paths, and close to a double reference. */
static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu_d(double x) { return x / (1.0 + exp(-x)); }
static double gelu_d(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double gelu_tanh_d(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

static void test_activations(void **state)
{
    (void)state;
    struct { const char *name; ScalarFn *sf; Vec vf; RefFn *rf; double ulp; } f[] = {
        {"sigmoid", mp_sigmoid, VFN(mp_vsigmoid), sigmoid_d, 3},
        {"silu", mp_silu, VFN(mp_vsilu), silu_d, 4},
        {"gelu", mp_gelu, VFN(mp_vgelu), gelu_d, 0},
        {"gelu_tanh", mp_gelu_tanh, VFN(mp_vgelu_tanh), gelu_tanh_d, 0},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        Err e = {0, 0, 0, 0, 1};
        /* sigmoid and silu: ulps where |result| >= 1e-30 (below, x < -69,
         * 1 / (1 + exp(-x)) loses bits as exp(-x) nears overflow, as torch).
         * gelu's error near its zero at x = 0 is absolute, not in ulps:
         * checked on [-8, 8] instead, relative to max(|ref|, 1): for x < 0 both
         * are 0.5 x (1 + erf), whose cancellation costs |x| 2^-25 (as torch) */
        sweep(&e, 0, 0xffffffffu, full() ? 251 : 65537, f[i].sf, f[i].vf, f[i].ulp ? f[i].rf : NULL);
        report(f[i].name, &e, f[i].ulp ? f[i].ulp : 1e300);
        for (float x = -8.0f; !f[i].ulp && x <= 8.0f; x += 0.00390625f) {
            double r = f[i].rf(x);
            assert_true(fabs(f[i].sf(x) - r) <= 1e-6 * fmax(fabs(r), 1.0));
        }
    }
}

typedef float GradFn(float, float);
typedef void Array2Fn(float *, const float *, int64_t);

static void test_grads(void **state)
{
    (void)state;
    struct { GradFn *sf; Array2Fn *vf[NVEC]; double (*d)(double); } g[] = {
        {mp_gelu_grad, VFN2(mp_vgelu_grad), gelu_d},
        {mp_silu_grad, VFN2(mp_vsilu_grad), silu_d},
        {mp_gelu_tanh_grad, VFN2(mp_vgelu_tanh_grad), gelu_tanh_d},
    };
    static float dy[N], x[N], v[NVEC][N];
    for (size_t k = 0; k < sizeof g / sizeof g[0]; k++) {
        for (int i = 0; i < N; i++) {
            x[i] = -12.0f + 24.0f * (float)i / N;
            dy[i] = 0.5f + (float)(i % 7);
            for (int p = 0; p < NVEC; p++) v[p][i] = dy[i];
        }
        for (int p = 0; p < NVEC; p++)
            if (g[k].vf[p] && vec_has(p))
                g[k].vf[p](v[p], x, N);
        for (int i = 0; i < N; i++) {
            float s = g[k].sf(dy[i], x[i]);
            for (int p = 0; p < NVEC; p++)
                if (g[k].vf[p] && vec_has(p))
                    assert_int_equal(mp_f32_bits(s), mp_f32_bits(v[p][i]));
            double h = 1e-4, fd = (g[k].d(x[i] + h) - g[k].d(x[i] - h)) / (2 * h);
            assert_true(fabs(s - dy[i] * fd) <= 1e-5 * (fabs(dy[i] * fd) + dy[i]));
        }
    }
}

int main(void)
{
    print_message("vector paths compared with the scalar on this CPU (MP_CPU=%s):%s%s\n",
                  getenv("MP_CPU") ? getenv("MP_CPU") : "auto", vec_has(0) ? " avx2" : " none",
                  vec_has(1) ? " avx512" : "");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp),
        cmocka_unit_test(test_erf),
        cmocka_unit_test(test_tanh),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_grads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
