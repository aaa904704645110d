/* run_all: fusion-independent (runtime kernels only: make test-nofuse skips it) */
/* test_kernels.c - the runtime's kernels (runtime/mp_kernels*.h).
 *
 * - mp_gemm against a naive double loop: many odd sizes (across the
 *   micro-kernel's MR x NR and the KC block), every transpose, every
 *   storage type; with integer inputs (exact f32 sums) an f16/bf16 result
 *   must be exactly the exact product rounded once.
 * - forward kernels against naive double-precision loops written here.
 * - every backward kernel against central finite differences of its
 *   forward kernel, in f32, on small random shapes.
 * - every path of the CPU dispatch (mp_vmath.h's MP_CPU): run without
 *   MP_CPU, the program runs itself once per path this CPU has.
 * tests/t_kernels_torch.sh compares a representative set with PyTorch and
 * builds this file again with -fopenmp -march=native and with CBLAS. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L   /* setenv, fork: run_paths */
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "mp_kernels.h"
#include "mp_kernels_gemm.h"
#include "mp_kernels_nn.h"

#define F32 MP_F32

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;

static double urand(void)            /* [0, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

static float frand(float lo, float hi) { return lo + (hi - lo) * (float)urand(); }

static float *fvec(int64_t n, float lo, float hi)
{
    float *x = malloc((n > 0 ? (size_t)n : 1) * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = frand(lo, hi);
    return x;
}

static float *zvec(int64_t n) { return calloc(n > 0 ? (size_t)n : 1, sizeof(float)); }

static int32_t *ivec(int64_t n, int32_t hi)
{
    int32_t *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = (int32_t)(urand() * hi);
    return x;
}

static int dt_bytes(int dt) { return dt == F32 || dt == MP_I32 ? 4 : dt == MP_U8 ? 1 : 2; }

/* x stored as dt (x itself is rounded to what dt keeps). */
static void *to_dt(float *x, int64_t n, int dt)
{
    void *p = malloc((size_t)(n ? n : 1) * (size_t)dt_bytes(dt));
    for (int64_t i = 0; i < n; i++) {
        mp_st(p, dt, i, x[i]);
        x[i] = mp_ld(p, dt, i);
    }
    return p;
}

static void close_to(const char *what, int64_t i, double got, double want, double atol,
                     double rtol)
{
    if (fabs(got - want) <= atol + rtol * fabs(want) || (isnan(got) && isnan(want)))
        return;
    fprintf(stderr, "%s[%lld]: got %.9g, want %.9g\n", what, (long long)i, got, want);
    fail();
}

/* ---- finite differences ------------------------------------------------- */

/* A forward computation: reads in[], writes out[nout]. The loss is
 * sum_i w[i] out[i] (in double), so the gradient of the loss wrt `out` is w,
 * and a backward kernel fed dy = w must give d loss / d in. */
typedef struct Fd {
    float *in[5];
    int64_t d[10];
    float *out, *w;
    int64_t nout;
    void (*fwd)(struct Fd *);
} Fd;

static double fd_loss(Fd *c)
{
    c->fwd(c);
    double s = 0;
    for (int64_t i = 0; i < c->nout; i++) s += (double)c->w[i] * c->out[i];
    return s;
}

/* d loss / d in[k] by central differences against grad[]. */
static void fd_check(const char *what, Fd *c, int k, int64_t n, const float *grad,
                     float h, double tol)
{
    float *x = c->in[k];
    for (int64_t i = 0; i < n; i++) {
        float old = x[i];
        x[i] = old + h;
        double hp = x[i], lp = fd_loss(c);
        x[i] = old - h;
        double hm = x[i], lm = fd_loss(c);
        x[i] = old;
        close_to(what, i, grad[i], (lp - lm) / (hp - hm), tol, tol);
    }
}

static void fd_setup(Fd *c, int64_t nout, void (*fwd)(Fd *))
{
    c->nout = nout;
    c->out = zvec(nout);
    c->w = fvec(nout, -1, 1);
    c->fwd = fwd;
}

static void fd_free(Fd *c)
{
    for (int k = 0; k < 5; k++) free(c->in[k]);
    free(c->out);
    free(c->w);
}

/* ---- bulk conversion ----------------------------------------------------- */

/* mp_ld_n / mp_st_n convert runs of f16 with F16C where the CPU has it:
 * they must agree bit for bit with mp_half.h's scalar conversions, on every
 * f16 pattern, every f16 rounding boundary and a sweep of f32 patterns. */
static void test_bulk_conversion(void **state)
{
    (void)state;
    int64_t n = 65536;
    uint16_t *h = malloc(n * 2), *h2 = malloc(n * 2);
    float *f = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) h[i] = (uint16_t)i;
    mp_ld_n(h, MP_F16, 0, 1, n, f);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(mp_f32_bits(f[i]), mp_f32_bits(mp_f16_to_f32(h[i])));
    mp_st_n(h2, MP_F16, 0, 1, n, f);
    for (int64_t i = 0; i < n; i++) assert_int_equal(h2[i], mp_f32_to_f16(f[i]));
    uint32_t u = 99;
    for (int round = 0; round < 16; round++) {
        for (int64_t i = 0; i < n; i++) {
            u = u * 1664525u + 1013904223u;
            float mid = (mp_f16_to_f32((uint16_t)(i & 0x7bff)) +
                         mp_f16_to_f32((uint16_t)((i & 0x7bff) + 1))) / 2;
            uint32_t b = round < 8 ? u : mp_f32_bits(mid) + (uint32_t)(round - 12);
            f[i] = mp_bits_f32(b);
        }
        mp_st_n(h2, MP_F16, 0, 1, n, f);
        for (int64_t i = 0; i < n; i++) assert_int_equal(h2[i], mp_f32_to_f16(f[i]));
        mp_st_n(h2, MP_BF16, 0, 1, n, f);
        for (int64_t i = 0; i < n; i++) assert_int_equal(h2[i], mp_f32_to_bf16(f[i]));
        for (int64_t i = 0; i < n; i++)   /* bf16 ties, either way, and NaNs */
            f[i] = mp_bits_f32(((uint32_t)i << 16) | (uint32_t)(0x7fff + (round & 3)));
        mp_st_n(h2, MP_BF16, 0, 1, n, f);
        for (int64_t i = 0; i < n; i++) assert_int_equal(h2[i], mp_f32_to_bf16(f[i]));
    }
    mp_ld_n(h, MP_BF16, 0, 1, n, f);   /* every bf16 */
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(mp_f32_bits(f[i]), mp_f32_bits(mp_bf16_to_f32(h[i])));
    free(h); free(h2); free(f);
}

/* mp_round_n / mp_st_round_n (the fused chunks' rounding, in registers)
 * against mp_round and mp_st on each value: random bits, f16 ties and
 * their neighbours, bf16 ties, NaNs, infinities, subnormals; lengths that
 * are not a multiple of 8 and offsets into the destination. */
static void test_round_in_place(void **state)
{
    (void)state;
    enum { N = 4099 };
    float *f = malloc(N * 4), *g = malloc(N * 4);
    uint16_t *h = malloc((N + 5) * 2);
    uint32_t u = 7;
    for (int round = 0; round < 64; round++) {
        for (int64_t i = 0; i < N; i++) {
            u = u * 1664525u + 1013904223u;
            uint16_t k = (uint16_t)(u >> 16);
            float mid = (mp_f16_to_f32(k) + mp_f16_to_f32((uint16_t)(k + 1))) / 2;
            uint32_t b = round % 4 == 0 ? u
                         : round % 4 == 1 ? mp_f32_bits(mid) + (uint32_t)(round % 3) - 1
                         : round % 4 == 2 ? (u & 0xffff0000u) | (uint32_t)(0x7fff + (round & 3))
                                          : (u & 0x807fffffu) | (u & 1 ? 0x7f800000u : 0u);
            f[i] = mp_bits_f32(b);
        }
        int dt = round & 1 ? MP_BF16 : MP_F16;
        int64_t n = N - round % 9, off = round % 5;
        memcpy(g, f, N * 4);
        mp_round_n(g, dt, n);
        for (int64_t i = 0; i < n; i++)
            assert_int_equal(mp_f32_bits(g[i]), mp_f32_bits(mp_round(f[i], dt)));
        memcpy(g, f, N * 4);
        mp_st_round_n(h, dt, off, n, g);
        for (int64_t i = 0; i < n; i++) {
            assert_int_equal(mp_f32_bits(g[i]), mp_f32_bits(mp_round(f[i], dt)));
            assert_int_equal(h[off + i], dt == MP_F16 ? mp_f32_to_f16(f[i]) : mp_f32_to_bf16(f[i]));
        }
        for (int64_t i = n; i < N; i++)   /* past n: untouched */
            assert_int_equal(mp_f32_bits(g[i]), mp_f32_bits(f[i]));
    }
    free(f); free(g); free(h);
}

/* ---- gemm --------------------------------------------------------------- */

/* C = alpha op(A) op(B) + beta C with leading dimensions padded by 3, in
 * the given storage types, against a double loop over the same values. */
static void gemm_case(int ta, int tb, int64_t M, int64_t N, int64_t K, int adt, int bdt,
                      int cdt, float alpha, float beta, int integers)
{
    int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 3, ldc = N + 3;
    int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
    float *a = fvec(na, -1, 1), *b = fvec(nb, -1, 1), *c = fvec(nc, -1, 1);
    if (integers) {
        for (int64_t i = 0; i < na; i++) a[i] = (float)(int)(a[i] * 16);
        for (int64_t i = 0; i < nb; i++) b[i] = (float)(int)(b[i] * 16);
    }
    void *A = to_dt(a, na, adt), *B = to_dt(b, nb, bdt), *C = to_dt(c, nc, cdt);
    mp_gemm(ta, tb, M, N, K, alpha, A, adt, lda, B, bdt, ldb, beta, C, cdt, ldc);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                double x = a[ta ? k * lda + i : i * lda + k];
                double y = b[tb ? j * ldb + k : k * ldb + j];
                s += x * y;
                mag += fabs(x * y);
            }
            double want = alpha * s + (beta != 0 ? beta * c[i * ldc + j] : 0);
            double got = mp_ld(C, cdt, i * ldc + j);
            if (integers && cdt != F32)     /* exact sum, one rounding */
                close_to("gemm exact", i * N + j, got, mp_round((float)want, cdt), 0, 0);
            else
                close_to("gemm", i * N + j, got, want, 1e-5 * (mag + 1),
                         cdt == F32 ? 1e-6 : cdt == MP_F16 ? 1e-3 : 8e-3);
        }
    /* the padding between rows of C is never written */
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = N; j < ldc; j++)
            close_to("gemm pad", i, mp_ld(C, cdt, i * ldc + j), c[i * ldc + j], 0, 0);
    free(a); free(b); free(c); free(A); free(B); free(C);
}

static void test_gemm_sizes(void **state)
{
    (void)state;
    static const int64_t sz[][3] = {
        {1, 1, 1}, {1, 7, 3}, {5, 1, 9}, {6, 16, 8}, {7, 17, 5}, {13, 9, 31},
        {12, 33, 64}, {31, 5, 1}, {2, 40, 255}, {19, 23, 256}, {9, 18, 257},
        {70, 45, 300}, {3, 3, 0}, {97, 130, 40}};
    for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
        for (int t = 0; t < 4; t++)
            gemm_case(t & 1, t >> 1, sz[s][0], sz[s][1], sz[s][2], F32, F32, F32,
                      1.0f, 0.0f, 0);
}

static void test_gemm_types(void **state)
{
    (void)state;
    static const int types[][3] = {
        {MP_F16, MP_F16, MP_F16}, {MP_BF16, MP_BF16, MP_BF16}, {MP_F16, F32, F32},
        {F32, MP_BF16, MP_F16}, {MP_F16, MP_F16, F32}};
    for (size_t s = 0; s < sizeof types / sizeof types[0]; s++)
        for (int t = 0; t < 4; t++) {
            gemm_case(t & 1, t >> 1, 23, 37, 50, types[s][0], types[s][1], types[s][2],
                      1.0f, 0.0f, 0);
            gemm_case(t & 1, t >> 1, 17, 29, 90, types[s][0], types[s][1], types[s][2],
                      1.0f, 0.0f, 1);
        }
}

static void test_gemm_alpha_beta(void **state)
{
    (void)state;
    for (int t = 0; t < 4; t++) {
        gemm_case(t & 1, t >> 1, 11, 21, 13, F32, F32, F32, 0.5f, 1.0f, 0);
        gemm_case(t & 1, t >> 1, 11, 21, 13, F32, F32, F32, -2.0f, 0.25f, 0);
        gemm_case(t & 1, t >> 1, 8, 9, 70, MP_F16, MP_F16, MP_F16, 1.0f, 1.0f, 0);
        gemm_case(t & 1, t >> 1, 4, 5, 0, F32, F32, F32, 1.0f, 0.5f, 0);
    }
}

/* The sizes of the micro-kernels' edges (1, 7, 17, 129) in every
 * combination, both transposes and low-precision operands: the test that
 * MP_CPU=portable and avx2 both run. */
static void test_gemm_paths(void **state)
{
    (void)state;
    static const int64_t sz[] = {1, 7, 17, 129};
    static const int types[][3] = {
        {F32, F32, F32}, {MP_F16, MP_F16, F32}, {MP_BF16, MP_BF16, F32},
        {MP_F16, F32, MP_F16}, {F32, MP_BF16, MP_BF16}};
    uint64_t rng = rng_state;   /* the later tests keep their data */
    int n = 0;
    for (int m = 0; m < 4; m++)
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 4; j++, n++)
                gemm_case(n & 1, (n >> 1) & 1, sz[m], sz[j], sz[k], types[n % 5][0],
                          types[n % 5][1], types[n % 5][2], 1.0f, n % 3 ? 0.0f : 1.0f, 0);
    rng_state = rng;
}

/* A product large enough for several tiles and passes. */
static void test_gemm_large(void **state)
{
    (void)state;
    gemm_case(0, 1, 130, 520, 300, F32, F32, F32, 1.0f, 0.0f, 0);
    gemm_case(1, 0, 200, 100, 130, MP_F16, MP_F16, MP_F16, 1.0f, 0.0f, 1);
    uint64_t rng = rng_state;   /* the later tests keep their data */
    gemm_case(0, 0, 7, 2100, 33, MP_BF16, MP_BF16, F32, 1.0f, 0.0f, 0);   /* tiles along N */
    /* B in two passes (more than MP_BPACK_MAX floats), the rows in pieces */
    gemm_case(0, 1, 13, 3000, 2900, F32, F32, F32, 1.0f, 0.0f, 0);
    gemm_case(1, 1, 13, 3000, 2900, MP_BF16, MP_BF16, F32, 1.0f, 0.0f, 0);
    /* A packed once a piece (MpApre), pieces of several row tiles and
     * column blocks: f16 and bf16 A (packed), K across blocks */
    gemm_case(0, 0, 500, 1100, 300, MP_BF16, MP_BF16, F32, 1.0f, 0.0f, 0);
    gemm_case(1, 1, 500, 1100, 300, MP_F16, F32, F32, 1.0f, 0.0f, 0);
    /* K long, C small: by blocks of K (mp_gemm_kblocks; B 30000 x 300 is
     * more than MP_BPACK_MAX floats), f32 (A read in place) and bf16 */
    gemm_case(0, 0, 13, 300, 30000, F32, F32, F32, 1.0f, 0.0f, 0);
    gemm_case(0, 0, 13, 300, 30000, MP_BF16, MP_BF16, MP_F16, 1.0f, 0.0f, 0);
    rng_state = rng;
}

/* Products whose B is more than MP_BPACK_MAX floats give the bits of the
 * same product 32 columns at a time (B within one pass), with a bias and
 * beta, f32 and bf16 operands: by blocks of K (mp_gemm_kblocks) for a long
 * K (13 x 300 x 30000, one chunk of columns) and a wide N (13 x 30000 x
 * 300, several chunks), in passes over N where the pieces have too many
 * rows for that (520 x 2800 x 3000). */
static void kblocks_case(int64_t M, int64_t N, int64_t K)
{
    enum { W = 32 };
    int64_t floats = K * N;
    assert_true(floats > MP_BPACK_MAX);   /* else this is not the case */
    float *a = fvec(M * K, -1, 1), *b = fvec(floats, -1, 1), *bias = fvec(N, -1, 1);
    float *c0 = fvec(M * N, -1, 1), *c1 = malloc(M * N * sizeof *c1), *c2 = malloc(M * N * sizeof *c2);
    for (int t = 0; t < 2; t++) {
        int dt = t ? MP_BF16 : F32;
        void *A = to_dt(a, M * K, dt), *B = to_dt(b, floats, dt);
        memcpy(c1, c0, M * N * sizeof *c1);
        memcpy(c2, c0, M * N * sizeof *c2);
        MpGemm g = {.M = M, .N = N, .K = K, .alpha = 0.5f, .beta = 1.0f, .A = A, .adt = dt,
                    .lda = K, .B = B, .bdt = dt, .ldb = N, .C = c1, .cdt = F32, .ldc = N,
                    .bias = bias, .biasdt = F32};
        mp_gemm_ex(&g);
        for (int64_t j = 0; j < N; j += W) {
            MpGemm p = g;
            p.N = j + W <= N ? W : N - j;
            p.B = (const char *)B + (size_t)j * (t ? 2 : 4);
            p.C = c2 + j;
            p.bias = bias + j;
            mp_gemm_ex(&p);
        }
        assert_memory_equal(c1, c2, M * N * sizeof *c1);
        free(A);
        free(B);
    }
    free(a); free(b); free(bias); free(c0); free(c1); free(c2);
}

static void test_gemm_kblocks(void **state)
{
    (void)state;
    kblocks_case(13, 300, 30000);
    kblocks_case(13, 30000, 300);
    kblocks_case(520, 2800, 3000);
}

/* ---- the CPU levels' micro-kernels --------------------------------------- */

#if defined(MP_AVX2_GEMM) && defined(MP_GEMM_VEXT)
/* vdpbf16ps on one lane */
__attribute__((target("avx512f,avx512bf16,avx512vl"))) static float mp_test_dpbf16(float acc, float a,
                                                                                    float b)
{
    __m128 r = _mm_dpbf16_ps(_mm_set1_ps(acc), (__m128bh)_mm_set1_ps(a), (__m128bh)_mm_set1_ps(b));
    return _mm_cvtss_f32(r);
}
#endif


/* Every x86 level from AVX2 up gives the same bits: the AVX-512 kernel
 * and the bf16 pairs' kernel sum each element in the AVX2 kernel's order,
 * with the same fused multiply-adds (the pairs' kernel differs only where
 * a bf16 value or a partial sum is subnormal, which these data are not).
 * Products of f32, of bf16, of f32 rounded to bf16 or to FP8 while
 * packing, both transposes, K across blocks and odd, edges of every
 * tile. Levels the CPU lacks are said and skipped. */
static void test_gemm_levels(void **state)
{
    (void)state;
#if defined(MP_AVX2_GEMM) && !defined(MP_GEMM_MODEL16)
    int hw = mp_cpu_level();
    if (hw < MP_CPU_AVX2) {
        printf("   (below AVX2: the levels' comparison needs it)\n");
        return;
    }
    static const int64_t sz[][3] = {{13, 70, 515}, {6, 32, 256}, {97, 33, 1}, {1, 100, 7}};
    /* adt, around, bdt, bround */
    const int ops[][4] = {{F32, 0, F32, 0},
                          {MP_BF16, 0, MP_BF16, 0},
                          {F32, MP_BF16, MP_BF16, 0},
                          {MP_BF16, 0, F32, MP_BF16},
                          {F32, mp_rnd_fp8(MP_E4M3, 3), F32, mp_rnd_fp8(MP_E5M2, -2)},
                          {MP_F16, 0, MP_BF16, 0}};
    int ran[MP_CPU_LEVELS] = {0};
    uint64_t rng = rng_state;   /* the later tests keep their data */
    for (size_t z = 0; z < sizeof sz / sizeof sz[0]; z++)
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
            for (int t = 0; t < 4; t++) {
                int ta = t & 1, tb = t >> 1;
                int64_t M = sz[z][0], N = sz[z][1], K = sz[z][2];
                int64_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 1, na = (ta ? K : M) * lda,
                        nb = (tb ? N : K) * ldb;
                float *a = fvec(na, -2, 2), *b = fvec(nb, -2, 2);
                void *A = to_dt(a, na, ops[o][0]), *B = to_dt(b, nb, ops[o][2]);
                float *want = zvec(M * N), *got = zvec(M * N);
                for (int l = MP_CPU_AVX2; l <= hw; l++) {
                    mp_cpu_level_v = l;
                    MpGemm g = mp_gemm_matmul(l == MP_CPU_AVX2 ? want : got, F32, A, ops[o][0], B,
                                              ops[o][2], M, N, K, ta, tb);
                    g.lda = lda;
                    g.ldb = ldb;
                    g.around = ops[o][1];
                    g.bround = ops[o][3];
                    mp_gemm_ex(&g);
                    if (l > MP_CPU_AVX2 && memcmp(want, got, (size_t)(M * N) * sizeof *got)) {
                        mp_cpu_level_v = hw;
                        fail_msg("MP_CPU=%s: %lldx%lldx%lld ta %d tb %d operands %zu differ from avx2",
                                 mp_cpu_names[l], (long long)M, (long long)N, (long long)K, ta, tb, o);
                    }
                    ran[l] = 1;
                }
                mp_cpu_level_v = hw;
                free(a); free(b); free(A); free(B); free(want); free(got);
            }
    rng_state = rng;
    for (int l = MP_CPU_AVX2 + 1; l < MP_CPU_LEVELS; l++)
        printf("   MP_CPU=%s against avx2: %s\n", mp_cpu_names[l], ran[l] ? "same bits" : "not at this level");
#else
    printf("   (no x86 kernels chosen by level in this build)\n");
#endif
}

/* The AVX-512 instructions against their models (mp_kernels_gemm.h), on
 * panels of random bit patterns with subnormals among them, where the CPU
 * has them: the 16-wide fused multiply-add, and vdpbf16ps lane by lane
 * and in the micro-kernel. The models are what the MP_GEMM_MODEL16 build
 * of this file tests on every CPU. */
#if defined(MP_AVX2_GEMM) && defined(MP_GEMM_VEXT)
static uint32_t rbits(void) { return (uint32_t)(urand() * 4294967296.0); }

/* a finite f32 of random bits, its exponent from the bottom of the range
 * (subnormals and near them) one time in three */
static float rfinite(void)
{
    uint32_t u = rbits();
    if (u % 3 == 0)
        u = (u & 0x807fffffu) | (rbits() % 8) << 23;
    else
        u = (u & 0x807fffffu) | (100 + rbits() % 56) << 23;
    return mp_bits_f32(u);
}

/* two bf16 values of that kind in one float's bits */
static float rpair(void)
{
    return mp_bits_f32((mp_f32_bits(rfinite()) & 0xffff0000u) | mp_f32_bits(rfinite()) >> 16);
}
#endif

static void test_uk_models(void **state)
{
    (void)state;
#if defined(MP_AVX2_GEMM) && defined(MP_GEMM_VEXT)
    int hw = mp_cpu_level();
    uint64_t rng = rng_state;   /* the later tests keep their data */
    enum { KC = 37, LDC = 40 };
    float A[KC * MP_MR], B[KC * 32], C0[MP_MR * LDC], C1[MP_MR * LDC];
    for (int kind = 0; kind < 2; kind++) {
        int lvl = kind ? MP_CPU_AVX512_BF16 : MP_CPU_AVX512;
        if (hw < lvl) {
            printf("   %s against its model: not at this level\n", mp_cpu_names[lvl]);
            continue;
        }
        for (int rep = 0; rep < 200; rep++) {
            for (int i = 0; i < KC * MP_MR; i++) A[i] = kind ? rpair() : rfinite();
            for (int i = 0; i < KC * 32; i++) B[i] = kind ? rpair() : rfinite();
            for (int i = 0; i < MP_MR * LDC; i++) C0[i] = C1[i] = rfinite();
            int first = rep % 2;
            if (kind) {
                mp_uk_bf16(KC, A, 1, MP_MR, B, C0, LDC, first);
                mp_uk_bf16_model(KC, A, 1, MP_MR, B, C1, LDC, first);
            } else {
                mp_uk_avx512(KC, A, 1, MP_MR, B, C0, LDC, first);
                mp_uk_model16(KC, A, 1, MP_MR, B, C1, LDC, first);
            }
            for (int i = 0; i < MP_MR * LDC; i++)
                if (mp_f32_bits(C0[i]) != mp_f32_bits(C1[i]) && !(isnan(C0[i]) && isnan(C1[i])))
                    fail_msg("%s: element %d: %a, its model %a", mp_cpu_names[lvl], i, (double)C0[i],
                             (double)C1[i]);
        }
        printf("   %s against its model: same bits\n", mp_cpu_names[lvl]);
    }
    if (hw >= MP_CPU_AVX512_BF16) {   /* one lane, 10^6 times */
        for (int rep = 0; rep < 1000000; rep++) {
            float acc = rfinite(), a = rpair(), b = rpair();
            float got = mp_test_dpbf16(acc, a, b), want = mp_dpbf16(acc, a, b);
            if (mp_f32_bits(got) != mp_f32_bits(want) && !(isnan(got) && isnan(want)))
                fail_msg("vdpbf16ps(%a, %08x, %08x) = %a, its model %a", (double)acc,
                         mp_f32_bits(a), mp_f32_bits(b), (double)got, (double)want);
        }
        printf("   vdpbf16ps against mp_dpbf16: 10^6 lanes, same bits\n");
    }
    rng_state = rng;
#else
    printf("   (no x86 vector kernels in this build)\n");
#endif
}

/* around / bround: f32 operands rounded to f16 or bf16 while packing give,
 * bit for bit, the product of the operands cast first, for either operand
 * or both, transposed or not, across K blocks and panel edges; and the
 * rounding is not a no-op (the unrounded product differs). */
static void gemm_round_case(int ta, int tb, int64_t M, int64_t N, int64_t K, int ra, int rb)
{
    int64_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2;
    int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb;
    float *a = fvec(na, -2, 2), *b = fvec(nb, -2, 2);
    float *ac = malloc((size_t)na * 4), *bc = malloc((size_t)nb * 4);
    memcpy(ac, a, (size_t)na * 4);
    memcpy(bc, b, (size_t)nb * 4);
    void *A = ra ? to_dt(ac, na, ra) : ac, *B = rb ? to_dt(bc, nb, rb) : bc;
    float *got = zvec(M * N), *want = zvec(M * N), *plain = zvec(M * N);
    MpGemm g = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .alpha = 1.0f, .A = a,
                .adt = F32, .lda = lda, .B = b, .bdt = F32, .ldb = ldb, .C = got,
                .cdt = F32, .ldc = N, .biasdt = F32, .around = ra, .bround = rb};
    mp_gemm_ex(&g);
    mp_gemm(ta, tb, M, N, K, 1.0f, A, ra ? ra : F32, lda, B, rb ? rb : F32, ldb, 0.0f, want,
            F32, N);
    mp_gemm(ta, tb, M, N, K, 1.0f, a, F32, lda, b, F32, ldb, 0.0f, plain, F32, N);
    int differs = 0;
    for (int64_t i = 0; i < M * N; i++) {
        if (mp_f32_bits(got[i]) != mp_f32_bits(want[i])) {
            fprintf(stderr, "gemm round %d %d ta %d tb %d [%lld]: got %.9g, want %.9g\n", ra,
                    rb, ta, tb, (long long)i, got[i], want[i]);
            fail();
        }
        differs |= got[i] != plain[i];
    }
    assert_true(differs);
    if (A != ac)
        free(A);
    if (B != bc)
        free(B);
    free(a); free(b); free(ac); free(bc); free(got); free(want); free(plain);
}

static void test_gemm_round_operands(void **state)
{
    (void)state;
    static const int64_t sz[][3] = {{23, 37, 300}, {130, 20, 50}, {7, 129, 17}};
    static const int r[][2] = {{MP_F16, MP_F16}, {MP_BF16, MP_BF16}, {MP_F16, 0},
                               {0, MP_BF16}, {MP_BF16, MP_F16}};
    for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
        for (size_t k = 0; k < sizeof r / sizeof r[0]; k++)
            for (int t = 0; t < 4; t++)
                gemm_round_case(t & 1, t >> 1, sz[s][0], sz[s][1], sz[s][2], r[k][0], r[k][1]);
}

/* linear: bias added in f32 before the one rounding; matmul batches. */
static void test_linear_matmul(void **state)
{
    (void)state;
    int64_t M = 9, N = 13, K = 21, Bt = 3;
    float *x = fvec(M * K, -1, 1), *w = fvec(N * K, -1, 1), *b = fvec(N, -1, 1);
    for (int dt = F32; dt <= MP_BF16; dt++) {
        float *xs = malloc(M * K * 4), *ws = malloc(N * K * 4), *bs = malloc(N * 4);
        memcpy(xs, x, M * K * 4); memcpy(ws, w, N * K * 4); memcpy(bs, b, N * 4);
        void *X = to_dt(xs, M * K, dt), *W = to_dt(ws, N * K, dt), *B = to_dt(bs, N, dt);
        void *Y = malloc(M * N * 4);
        mp_k_linear(Y, dt, X, dt, W, dt, B, dt, M, N, K);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = bs[j];
                for (int64_t k = 0; k < K; k++) s += (double)xs[i * K + k] * ws[j * K + k];
                close_to("linear", i * N + j, mp_ld(Y, dt, i * N + j),
                         mp_round((float)s, dt), 1e-5, dt == F32 ? 1e-5 : 4e-3);
            }
        free(xs); free(ws); free(bs); free(X); free(W); free(B); free(Y);
    }
    /* batched [Bt, M, K] @ shared [K, N], and per-batch b^T */
    float *a = fvec(Bt * M * K, -1, 1), *bb = fvec(Bt * K * N, -1, 1), *y = zvec(Bt * M * N);
    for (int shared = 0; shared < 2; shared++) {
        mp_k_matmul(y, F32, a, F32, bb, F32, Bt, M, N, K, 0, !shared, M * K,
                    shared ? 0 : K * N);
        for (int64_t t = 0; t < Bt; t++)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double s = 0;
                    for (int64_t k = 0; k < K; k++)
                        s += (double)a[(t * M + i) * K + k] *
                             (shared ? bb[k * N + j] : bb[t * K * N + j * K + k]);
                    close_to("matmul", j, y[(t * M + i) * N + j], s, 1e-5, 1e-5);
                }
    }
    free(x); free(w); free(b); free(a); free(bb); free(y);
}

static void fwd_matmul(Fd *c)
{
    mp_k_matmul(c->out, F32, c->in[0], F32, c->in[1], F32, 1, c->d[0], c->d[2], c->d[1],
                0, 0, 0, 0);
}

/* matmul_tn is the weight gradient of a @ w: d w = a^T dy. */
static void test_matmul_tn_fd(void **state)
{
    (void)state;
    int64_t R = 7, K = 5, N = 6;
    Fd c = {{fvec(R * K, -1, 1), fvec(K * N, -1, 1)}, {R, K, N}};
    fd_setup(&c, R * N, fwd_matmul);
    float *dw = fvec(K * N, -1, 1), *old = malloc(K * N * 4);
    memcpy(old, dw, K * N * 4);
    mp_k_matmul_tn(dw, F32, c.in[0], F32, c.w, F32, R, K, N, 1.0f);  /* beta = 1 */
    for (int64_t i = 0; i < K * N; i++) dw[i] -= old[i];
    fd_check("matmul_tn", &c, 1, K * N, dw, 1e-2f, 2e-3);
    free(dw); free(old); fd_free(&c);
}

/* ---- elementwise -------------------------------------------------------- */

typedef void Unary(void *, int, const void *, int, int64_t);
typedef void Grad(void *, int, const void *, int, const void *, int, int64_t);

static double gelu_d(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }
static double sigmoid_d(double x) { return 1 / (1 + exp(-x)); }
static double silu_d(double x) { return x * sigmoid_d(x); }
static double neg_d(double x) { return -x; }
static double relu_d(double x) { return x > 0 ? x : 0; }
static double rsqrt_d(double x) { return 1 / sqrt(x); }
static double id_d(double x) { return x; }

static const struct {
    const char *name;
    Unary *k;
    double (*ref)(double);
    float lo, hi;
    Grad *grad;
    int grad_from_y;
} unary[] = {
    {"neg", mp_k_neg, neg_d, -3, 3, NULL, 0},
    {"relu", mp_k_relu, relu_d, -3, 3, mp_k_relu_grad, 0},
    {"gelu", mp_k_gelu, gelu_d, -4, 4, mp_k_gelu_grad, 0},
    {"tanh", mp_k_tanh, tanh, -3, 3, mp_k_tanh_grad, 1},
    {"sigmoid", mp_k_sigmoid, sigmoid_d, -6, 6, mp_k_sigmoid_grad, 1},
    {"silu", mp_k_silu, silu_d, -6, 6, mp_k_silu_grad, 0},
    {"exp", mp_k_exp, exp, -5, 5, NULL, 0},
    {"log", mp_k_log, log, 0.1f, 5, NULL, 0},
    {"sqrt", mp_k_sqrt, sqrt, 0.1f, 5, mp_k_sqrt_grad, 1},
    {"rsqrt", mp_k_rsqrt, rsqrt_d, 0.1f, 5, mp_k_rsqrt_grad, 1},
    {"cast", mp_k_cast, id_d, -5, 5, NULL, 0},
};
#define NUNARY (sizeof unary / sizeof unary[0])

/* Forward: f32 against double libm; f16/bf16 storage: the f32 result
 * rounded once (so within half an ulp of the type, plus f32's error). */
static void test_unary_forward(void **state)
{
    (void)state;
    int64_t n = 1500;                 /* several chunks and a partial one */
    for (size_t f = 0; f < NUNARY; f++)
        for (int dt = F32; dt <= MP_BF16; dt++) {
            float *x = fvec(n, unary[f].lo, unary[f].hi);
            void *X = to_dt(x, n, dt), *Y = malloc(n * 4);
            unary[f].k(Y, dt, X, dt, n);
            for (int64_t i = 0; i < n; i++) {
                double want = unary[f].ref(x[i]);
                double ulp = dt == F32 ? 4e-7 : dt == MP_F16 ? 4.9e-4 : 3.9e-3;
                close_to(unary[f].name, i, mp_ld(Y, dt, i), want, 1e-6, ulp);
            }
            free(x); free(X); free(Y);
        }
}

static Unary *fd_unary_k;
static void fwd_unary(Fd *c) { fd_unary_k(c->out, F32, c->in[0], F32, c->d[0]); }

/* Backward: each gradient kernel against finite differences of its forward. */
static void test_unary_grads(void **state)
{
    (void)state;
    int64_t n = 40;
    for (size_t f = 0; f < NUNARY; f++) {
        if (!unary[f].grad)
            continue;
        Fd c = {{fvec(n, unary[f].lo, unary[f].hi)}, {n}};
        for (int64_t i = 0; i < n; i++)       /* keep clear of relu's kink */
            if (fabsf(c.in[0][i]) < 0.05f)
                c.in[0][i] = 0.5f;
        fd_unary_k = unary[f].k;
        fd_setup(&c, n, fwd_unary);
        float *y = zvec(n), *dx = zvec(n);
        unary[f].k(y, F32, c.in[0], F32, n);
        unary[f].grad(dx, F32, c.w, F32, unary[f].grad_from_y ? y : c.in[0], F32, n);
        fd_check(unary[f].name, &c, 0, n, dx, 1e-3f, 2e-3);
        free(y); free(dx); fd_free(&c);
    }
    /* relu's gradient at 0 is 0, as torch's threshold_backward */
    float zero = 0.0f, one = 1.0f, g;
    mp_k_relu_grad(&g, F32, &one, F32, &zero, F32, 1);
    assert_true(g == 0.0f);
}

static void test_cast_fill_scale(void **state)
{
    (void)state;
    int64_t n = 700;
    float *x = fvec(n, -300, 300), *y = zvec(n);
    uint8_t u8[700];
    int32_t i32[700];
    uint16_t h[700];
    mp_k_cast(u8, MP_U8, x, F32, n);
    mp_k_cast(i32, MP_I32, x, F32, n);
    mp_k_cast(h, MP_F16, x, F32, n);
    for (int64_t i = 0; i < n; i++) {
        assert_int_equal(u8[i], x[i] <= 0 ? 0 : x[i] >= 255 ? 255 : (int)x[i]);
        assert_int_equal(i32[i], (int32_t)x[i]);
        assert_int_equal(h[i], mp_f32_to_f16(x[i]));
    }
    mp_k_cast(y, F32, u8, MP_U8, n);
    for (int64_t i = 0; i < n; i++) assert_true(y[i] == u8[i]);
    mp_k_scale(y, F32, h, MP_F16, 0.5f, n);
    for (int64_t i = 0; i < n; i++) assert_true(y[i] == 0.5f * mp_f16_to_f32(h[i]));
    mp_k_fill(h, MP_F16, 3.0f, n);
    for (int64_t i = 0; i < n; i++) assert_int_equal(h[i], 0x4200);
    mp_k_fill(y, F32, 1.0f, n);
    mp_k_acc(y, h, MP_F16, 2.0f, n);
    for (int64_t i = 0; i < n; i++) assert_true(y[i] == 7.0f);
    assert_true(mp_k_all_finite(h, MP_F16, n));
    h[n - 1] = 0x7c00;                    /* inf */
    assert_false(mp_k_all_finite(h, MP_F16, n));
    y[3] = NAN;
    assert_false(mp_k_all_finite(y, F32, n));
    free(x); free(y);
}

static void test_dropout(void **state)
{
    (void)state;
    int64_t n = 20000;
    float *x = fvec(n, 0.5f, 1.5f), *y = zvec(n), *y2 = zvec(n), *dx = zvec(n);
    mp_k_dropout(y, F32, x, F32, n, 0.25f, 7, 3, 0, 12);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        if (y[i] != 0) {
            kept++;
            assert_true(y[i] == x[i] * (1.0f / 0.75f));
        }
    }
    assert_true(fabs((double)kept / n - 0.75) < 0.015);
    /* the same call draws the same mask; backward applies it to dy */
    mp_k_dropout_grad(dx, F32, x, F32, n, 0.25f, 7, 3, 0, 12);
    assert_memory_equal(dx, y, n * 4);
    /* another step, micro-batch or node draws another mask */
    int64_t keys[3][4] = {{7, 4, 0, 12}, {7, 3, 1, 12}, {7, 3, 0, 13}};
    for (int k = 0; k < 3; k++) {
        mp_k_dropout(y2, F32, x, F32, n, 0.25f, (uint64_t)keys[k][0], keys[k][1],
                     keys[k][2], keys[k][3]);
        int64_t same = 0;
        for (int64_t i = 0; i < n; i++) same += (y[i] != 0) == (y2[i] != 0);
        assert_true(same < n * 0.7);      /* independent masks agree ~62.5% */
    }
    mp_k_dropout(y2, F32, x, F32, n, 0.0f, 1, 1, 1, 1);   /* p = 0: identity */
    assert_memory_equal(y2, x, n * 4);
    mp_k_dropout(y2, F32, x, F32, n, 1.0f, 1, 1, 1, 1);   /* p = 1: zeros */
    for (int64_t i = 0; i < n; i++) assert_true(y2[i] == 0);
    free(x); free(y); free(y2); free(dx);
}

/* ---- broadcasting ------------------------------------------------------- */

/* Offset in x (rank xr) of the element broadcast to y's multi-index idx. */
static int64_t bcast_off(const int64_t *idx, int yr, const int64_t *xsh, int xr)
{
    int64_t off = 0;
    for (int d = 0; d < xr; d++) {
        int64_t i = xsh[d] == 1 ? 0 : idx[d + yr - xr];
        off = off * xsh[d] + i;
    }
    return off;
}

typedef struct Shapes {
    int yr, ar, br;
    int64_t y[4], a[4], b[4];
} Shapes;

static const Shapes bshapes[] = {
    {4, 3, 4, {2, 3, 4, 5}, {3, 1, 5}, {2, 1, 4, 1}},
    {2, 2, 0, {4, 700}, {4, 700}, {0}},
    {1, 1, 1, {6}, {1}, {6}},
    {3, 1, 3, {3, 2, 600}, {600}, {3, 2, 600}},
    {3, 3, 3, {5, 1, 7}, {5, 1, 1}, {1, 1, 7}},
    {0, 0, 0, {0}, {0}, {0}},
};

static int64_t numel(const int64_t *sh, int r)
{
    int64_t n = 1;
    for (int d = 0; d < r; d++) n *= sh[d];
    return n;
}

typedef void Binary(void *, int, int, const int64_t *, const void *, int, int,
                    const int64_t *, const void *, int, int, const int64_t *);

static void test_binary_broadcast(void **state)
{
    (void)state;
    Binary *k[4] = {mp_k_add, mp_k_sub, mp_k_mul, mp_k_div};
    for (size_t s = 0; s < sizeof bshapes / sizeof bshapes[0]; s++) {
        const Shapes *S = &bshapes[s];
        int64_t ny = numel(S->y, S->yr), na = numel(S->a, S->ar), nb = numel(S->b, S->br);
        float *a = fvec(na, -2, 2), *b = fvec(nb, 0.5f, 2), *y = zvec(ny);
        uint16_t *ah = to_dt(a, na, MP_F16), *yh = malloc(ny * 2);
        for (int op = 0; op < 4; op++) {
            k[op](y, F32, S->yr, S->y, a, F32, S->ar, S->a, b, F32, S->br, S->b);
            k[op](yh, MP_F16, S->yr, S->y, ah, MP_F16, S->ar, S->a, b, F32, S->br, S->b);
            for (int64_t i = 0; i < ny; i++) {
                int64_t idx[4], q = i;
                for (int d = S->yr - 1; d >= 0; d--) {
                    idx[d] = q % S->y[d];
                    q /= S->y[d];
                }
                float u = a[bcast_off(idx, S->yr, S->a, S->ar)];
                float v = b[bcast_off(idx, S->yr, S->b, S->br)];
                float want = op == 0 ? u + v : op == 1 ? u - v : op == 2 ? u * v : u / v;
                assert_true(y[i] == want);                      /* exact */
                assert_int_equal(yh[i], mp_f32_to_f16(want));   /* rounded once */
            }
        }
        free(a); free(b); free(y); free(ah); free(yh);
    }
}

static const Shapes *fd_shapes;
static void fwd_add(Fd *c)
{
    const Shapes *S = fd_shapes;
    mp_k_add(c->out, F32, S->yr, S->y, c->in[0], F32, S->ar, S->a, c->in[1], F32, S->br,
             S->b);
}

/* sum_to is the gradient of a broadcast: d(a + b)/d b = sum_to(dy, b). */
static void test_sum_to_fd(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof bshapes / sizeof bshapes[0]; s++) {
        const Shapes *S = &bshapes[s];
        int64_t ny = numel(S->y, S->yr), na = numel(S->a, S->ar), nb = numel(S->b, S->br);
        if (ny > 1000)
            continue;
        Fd c = {{fvec(na, -1, 1), fvec(nb, -1, 1)}};
        fd_shapes = S;
        fd_setup(&c, ny, fwd_add);
        float *da = fvec(na, -1, 1), *db = zvec(nb);
        mp_k_sum_to(da, F32, S->ar, S->a, c.w, F32, S->yr, S->y, 0.0f);
        mp_k_sum_to(db, F32, S->br, S->b, c.w, F32, S->yr, S->y, 0.0f);
        fd_check("sum_to a", &c, 0, na, da, 1e-2f, 1e-3);
        fd_check("sum_to b", &c, 1, nb, db, 1e-2f, 1e-3);
        /* beta = 1 adds */
        float *db2 = fvec(nb, -1, 1), *old = malloc(nb * 4);
        memcpy(old, db2, nb * 4);
        mp_k_sum_to(db2, F32, S->br, S->b, c.w, F32, S->yr, S->y, 1.0f);
        for (int64_t i = 0; i < nb; i++) close_to("sum_to beta", i, db2[i], old[i] + db[i], 1e-6, 1e-6);
        free(da); free(db); free(db2); free(old); fd_free(&c);
    }
}

static void test_transpose(void **state)
{
    (void)state;
    int64_t sh[3] = {3, 4, 600}, perm[3] = {2, 0, 1}, n = 3 * 4 * 600;
    float *x = fvec(n, -1, 1), *y = zvec(n), *back = zvec(n);
    mp_k_transpose(y, F32, x, F32, 3, sh, perm);
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < 4; j++)
            for (int64_t l = 0; l < 600; l++)
                assert_true(y[(l * 3 + i) * 4 + j] == x[(i * 4 + j) * 600 + l]);
    int64_t ysh[3] = {600, 3, 4}, inv[3] = {1, 2, 0};
    mp_k_transpose(back, F32, y, F32, 3, ysh, inv);
    assert_memory_equal(back, x, n * 4);
    free(x); free(y); free(back);
}

/* chunk/slice, concat/slice_grad, expand, arange: integer ids pass
 * exactly (bits copied), floats convert when the types differ. */
static void test_structural(void **state)
{
    (void)state;
    enum { O = 3, XL = 7, IN = 5, ST = 2, YL = 4 };
    int32_t x[O * XL * IN], y[O * YL * IN], back[O * XL * IN];
    for (int i = 0; i < O * XL * IN; i++)
        x[i] = 16777217 + i * 101;                /* not exact as f32 */
    mp_k_slice(y, MP_I32, x, MP_I32, O, XL, IN, ST, YL);
    for (int o = 0; o < O; o++)
        for (int j = 0; j < YL; j++)
            for (int k = 0; k < IN; k++)
                assert_int_equal(y[(o * YL + j) * IN + k], x[(o * XL + ST + j) * IN + k]);
    memset(back, 0x7f, sizeof back);
    mp_k_place(back, MP_I32, y, MP_I32, O, XL, IN, ST, YL, 1);   /* slice_grad: zeros around */
    for (int o = 0; o < O; o++)
        for (int j = 0; j < XL; j++)
            for (int k = 0; k < IN; k++) {
                int i = (o * XL + j) * IN + k;
                assert_int_equal(back[i], j >= ST && j < ST + YL ? x[i] : 0);
            }
    int32_t head[O * ST * IN];
    mp_k_slice(head, MP_I32, x, MP_I32, O, XL, IN, 0, ST);
    mp_k_place(back, MP_I32, head, MP_I32, O, XL, IN, 0, ST, 0);  /* concat: the rest kept */
    for (int i = 0; i < O * XL * IN; i++)
        assert_int_equal(back[i], (i / IN) % XL >= ST + YL ? 0 : x[i]);

    uint16_t ids[6] = {1, 65535, 7, 40000, 3, 2}, out[4 * 3 * 6];
    int64_t ysh[3] = {4, 3, 6}, xsh[2] = {1, 6};
    mp_k_broadcast(out, MP_U16, 3, ysh, ids, MP_U16, 2, xsh);
    for (int i = 0; i < 4 * 3 * 6; i++)
        assert_int_equal(out[i], ids[i % 6]);
    float col[3] = {0.5f, -1.25f, 3.0f};
    uint16_t h[3 * 4];
    int64_t hsh[2] = {3, 4}, csh[2] = {3, 1};
    mp_k_broadcast(h, MP_F16, 2, hsh, col, F32, 2, csh);           /* converted */
    for (int i = 0; i < 12; i++)
        assert_true(mp_f16_to_f32(h[i]) == col[i / 4]);
    int32_t r[9];
    mp_k_arange(r, MP_I32, 9);
    for (int i = 0; i < 9; i++)
        assert_int_equal(r[i], i);
}

/* ---- reductions --------------------------------------------------------- */

static void test_reduce(void **state)
{
    (void)state;
    static const int64_t cases[][3] = {{3, 5, 7}, {4, 1000, 1}, {1, 9, 600}, {1, 200000, 1}};
    for (size_t s = 0; s < 4; s++) {
        int64_t o = cases[s][0], l = cases[s][1], in = cases[s][2];
        float *x = fvec(o * l * in, -1, 1), *y = zvec(o * in), *m = zvec(o * in);
        mp_k_sum(y, F32, x, F32, o, l, in);
        mp_k_mean(m, F32, x, F32, o, l, in);
        for (int64_t a = 0; a < o; a++)
            for (int64_t c = 0; c < in; c++) {
                double sum = 0;
                for (int64_t b = 0; b < l; b++) sum += x[(a * l + b) * in + c];
                close_to("sum", a * in + c, y[a * in + c], sum, 1e-5, 1e-6);
                close_to("mean", a * in + c, m[a * in + c], sum / l, 1e-7, 1e-6);
            }
        free(x); free(y); free(m);
    }
}

static void fwd_mean(Fd *c)
{
    mp_k_mean(c->out, F32, c->in[0], F32, c->d[0], c->d[1], c->d[2]);
}

static void fwd_bias_nchw(Fd *c)   /* y[N, C, S] = x + b[C] */
{
    int64_t ysh[3] = {c->d[0], c->d[1], c->d[2]}, bsh[2] = {c->d[1], 1};
    mp_k_add(c->out, F32, 3, ysh, c->in[0], F32, 3, ysh, c->in[1], F32, 2, bsh);
}

/* expand is the gradient of mean (scale 1/len); channel_sum of a bias. */
static void test_expand_channel_sum_fd(void **state)
{
    (void)state;
    int64_t o = 3, l = 4, in = 5;
    Fd c = {{fvec(o * l * in, -1, 1)}, {o, l, in}};
    fd_setup(&c, o * in, fwd_mean);
    float *dx = zvec(o * l * in);
    mp_k_expand(dx, F32, c.w, F32, o, l, in, 1.0f / (float)l);
    fd_check("expand", &c, 0, o * l * in, dx, 1e-2f, 1e-3);
    free(dx); fd_free(&c);

    int64_t N = 2, C = 3, S = 4;
    Fd b = {{fvec(N * C * S, -1, 1), fvec(C, -1, 1)}, {N, C, S}};
    fd_setup(&b, N * C * S, fwd_bias_nchw);
    float *db = zvec(C);
    mp_k_channel_sum(db, F32, b.w, F32, N, C, S, 0.0f);
    fd_check("channel_sum", &b, 1, C, db, 1e-2f, 1e-3);
    free(db); fd_free(&b);
}

/* ---- softmax, losses ---------------------------------------------------- */

static void test_softmax_forward(void **state)
{
    (void)state;
    int64_t o = 3, l = 6, in = 4;
    float *x = fvec(o * l * in, -5, 5), *y = zvec(o * l * in), *ly = zvec(o * l * in);
    x[0] = 80;                            /* would overflow exp without the max */
    mp_k_softmax(y, F32, x, F32, o, l, in);
    mp_k_log_softmax(ly, F32, x, F32, o, l, in);
    for (int64_t a = 0; a < o; a++)
        for (int64_t c = 0; c < in; c++) {
            double m = -INFINITY, s = 0;
            for (int64_t b = 0; b < l; b++) m = fmax(m, x[(a * l + b) * in + c]);
            for (int64_t b = 0; b < l; b++) s += exp(x[(a * l + b) * in + c] - m);
            for (int64_t b = 0; b < l; b++) {
                int64_t i = (a * l + b) * in + c;
                close_to("softmax", i, y[i], exp(x[i] - m) / s, 1e-7, 1e-6);
                close_to("log_softmax", i, ly[i], x[i] - m - log(s), 1e-6, 1e-6);
            }
        }
    free(x); free(y); free(ly);
}

static void fwd_softmax(Fd *c)
{
    mp_k_softmax(c->out, F32, c->in[0], F32, c->d[0], c->d[1], c->d[2]);
}

static void fwd_log_softmax(Fd *c)
{
    mp_k_log_softmax(c->out, F32, c->in[0], F32, c->d[0], c->d[1], c->d[2]);
}

static void test_softmax_grads_fd(void **state)
{
    (void)state;
    int64_t o = 2, l = 5, in = 3, n = o * l * in;
    for (int lg = 0; lg < 2; lg++) {
        Fd c = {{fvec(n, -2, 2)}, {o, l, in}};
        fd_setup(&c, n, lg ? fwd_log_softmax : fwd_softmax);
        float *y = zvec(n), *dx = zvec(n);
        c.fwd(&c);
        memcpy(y, c.out, n * 4);
        if (lg)
            mp_k_log_softmax_grad(dx, F32, c.w, F32, y, F32, o, l, in);
        else
            mp_k_softmax_grad(dx, F32, c.w, F32, y, F32, o, l, in);
        fd_check(lg ? "log_softmax_grad" : "softmax_grad", &c, 0, n, dx, 1e-2f, 2e-3);
        free(y); free(dx); fd_free(&c);
    }
}

static int32_t *fd_labels;
static void fwd_ce(Fd *c)
{
    mp_k_cross_entropy(c->out, F32, c->in[0], F32, fd_labels, MP_I32, c->d[0], c->d[1], MP_NO_IGNORE, 0.0f);
}

static void fwd_mse(Fd *c) { mp_k_mse(c->out, F32, c->in[0], F32, c->in[1], F32, c->d[0]); }

static void test_losses(void **state)
{
    (void)state;
    int64_t R = 6, C = 5;
    Fd c = {{fvec(R * C, -3, 3)}, {R, C}};
    fd_labels = ivec(R, (int32_t)C);
    fd_setup(&c, 1, fwd_ce);
    c.fwd(&c);
    double want = 0;
    for (int64_t r = 0; r < R; r++) {
        double s = 0;
        for (int64_t j = 0; j < C; j++) s += exp(c.in[0][r * C + j]);
        want += log(s) - c.in[0][r * C + fd_labels[r]];
    }
    close_to("cross_entropy", 0, c.out[0], want / R, 1e-6, 1e-6);
    float *dx = zvec(R * C);
    mp_k_cross_entropy_grad(dx, F32, c.w, F32, c.in[0], F32, fd_labels, MP_I32, R, C, MP_NO_IGNORE, 0.0f);
    fd_check("cross_entropy_grad", &c, 0, R * C, dx, 1e-2f, 1e-3);

    /* accuracy: first maximum wins */
    float acc;
    float xs[6] = {1, 3, 3, 0, 0, 0};
    int32_t lab[2] = {1, 0};
    mp_k_accuracy(&acc, F32, xs, F32, lab, MP_I32, 2, 3);
    assert_true(acc == 1.0f);
    lab[0] = 2;
    mp_k_accuracy(&acc, F32, xs, F32, lab, MP_I32, 2, 3);
    assert_true(acc == 0.5f);
    fd_labels[0] = (int32_t)C;            /* a bad label cannot go unnoticed */
    c.fwd(&c);
    assert_true(isnan(c.out[0]));
    free(dx); free(fd_labels); fd_free(&c);

    int64_t n = 700;
    Fd m = {{fvec(n, -1, 1), fvec(n, -1, 1)}, {n}};
    fd_setup(&m, 1, fwd_mse);
    m.fwd(&m);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(m.in[0][i] - m.in[1][i]) * (m.in[0][i] - m.in[1][i]);
    close_to("mse", 0, m.out[0], s / n, 1e-7, 1e-6);
    float *dp = zvec(n);
    mp_k_mse_grad(dp, F32, m.w, F32, m.in[0], F32, m.in[1], F32, n);
    fd_check("mse_grad", &m, 0, 40, dp, 1e-2f, 1e-3);
    free(dp); fd_free(&m);
}

/* ---- convolution -------------------------------------------------------- */

/* d = {N, C, H, W, F, k, stride, pad, dilation, groups}; in = x, w, bias */
static int64_t conv_out(int64_t h, const int64_t *d)
{
    return (h + 2 * d[7] - d[8] * (d[5] - 1) - 1) / d[6] + 1;
}

static MpConv conv_of(const int64_t *d)
{
    return mp_conv_of(d[1], d[2], d[3], d[4], d[5], d[5], d[6], d[6], d[7], d[7], d[8], d[8], d[9],
                      conv_out(d[2], d), conv_out(d[3], d));
}

static void conv_ref(double *y, const float *x, const float *w, const float *b,
                     const int64_t *d)
{
    int64_t N = d[0], C = d[1], H = d[2], W = d[3], F = d[4], k = d[5], s = d[6], p = d[7];
    int64_t dl = d[8], cg = C / d[9], fg = F / d[9];
    int64_t OH = conv_out(H, d), OW = conv_out(W, d);
    for (int64_t n = 0; n < N; n++)
        for (int64_t f = 0; f < F; f++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double acc = b ? b[f] : 0;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t ky = 0; ky < k; ky++)
                            for (int64_t kx = 0; kx < k; kx++) {
                                int64_t iy = oy * s - p + ky * dl, ix = ox * s - p + kx * dl;
                                int64_t ci = f / fg * cg + c;
                                if (iy >= 0 && iy < H && ix >= 0 && ix < W)
                                    acc += (double)x[((n * C + ci) * H + iy) * W + ix] *
                                           w[((f * cg + c) * k + ky) * k + kx];
                            }
                    y[((n * F + f) * OH + oy) * OW + ox] = acc;
                }
}

static void fwd_conv(Fd *c)
{
    mp_k_conv2d(c->out, F32, c->in[0], F32, c->in[1], F32, c->in[2], F32, c->d[0], conv_of(c->d));
}

/* Dense, grouped (2), depthwise (groups = C, and F = 2 C), dilated. */
static void test_conv2d(void **state)
{
    (void)state;
    static const int64_t cases[][10] = {
        {2, 3, 7, 6, 4, 3, 1, 0, 1, 1}, {2, 2, 7, 8, 3, 3, 2, 1, 1, 1}, {1, 3, 5, 5, 2, 1, 1, 0, 1, 1},
        {3, 2, 6, 5, 5, 4, 3, 2, 1, 1}, {2, 4, 7, 6, 6, 3, 1, 1, 1, 2}, {2, 3, 7, 8, 3, 3, 1, 1, 1, 3},
        {2, 3, 8, 7, 6, 3, 2, 1, 1, 3}, {2, 4, 9, 8, 4, 3, 1, 2, 2, 4}, {1, 2, 9, 9, 4, 3, 1, 0, 2, 1}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t *d = cases[t];
        int64_t N = d[0], C = d[1], F = d[4], k = d[5];
        int64_t nx = N * C * d[2] * d[3], nw = F * C / d[9] * k * k;
        int64_t ny = N * F * conv_out(d[2], d) * conv_out(d[3], d);
        Fd c = {{fvec(nx, -1, 1), fvec(nw, -1, 1), fvec(F, -1, 1)}};
        memcpy(c.d, d, sizeof cases[0]);
        fd_setup(&c, ny, fwd_conv);
        c.fwd(&c);
        double *ref = malloc(ny * sizeof *ref);
        conv_ref(ref, c.in[0], c.in[1], c.in[2], d);
        for (int64_t i = 0; i < ny; i++) close_to("conv2d", i, c.out[i], ref[i], 1e-5, 1e-5);
        /* f16 storage: the f32 result rounded once */
        uint16_t *yh = malloc((size_t)ny * 2), *xh = to_dt(c.in[0], nx, MP_F16),
                 *wh = to_dt(c.in[1], nw, MP_F16), *bh = to_dt(c.in[2], F, MP_F16);
        mp_k_conv2d(yh, MP_F16, xh, MP_F16, wh, MP_F16, bh, MP_F16, N, conv_of(d));
        conv_ref(ref, c.in[0], c.in[1], c.in[2], d);
        for (int64_t i = 0; i < ny; i++)
            close_to("conv2d f16", i, mp_f16_to_f32(yh[i]), mp_round((float)ref[i], MP_F16),
                     1e-5, 1e-3);
        float *dx = zvec(nx), *dw = fvec(nw, -1, 1), *db = zvec(F), *old = malloc(nw * 4);
        memcpy(old, dw, nw * 4);
        mp_k_conv2d_dx(dx, F32, c.w, F32, c.in[1], F32, N, conv_of(d));
        mp_k_conv2d_dw(dw, F32, c.w, F32, c.in[0], F32, N, conv_of(d), 1.0f);
        for (int64_t i = 0; i < nw; i++) dw[i] -= old[i];
        mp_k_channel_sum(db, F32, c.w, F32, N, F, ny / (N * F), 0.0f);
        fd_check("conv2d_dx", &c, 0, nx, dx, 1e-2f, 2e-3);
        fd_check("conv2d_dw", &c, 1, nw, dw, 1e-2f, 2e-3);
        fd_check("conv2d bias", &c, 2, F, db, 1e-2f, 2e-3);
        free(ref); free(yh); free(xh); free(wh); free(bh);
        free(dx); free(dw); free(db); free(old); fd_free(&c);
    }
}

/* Small planes run a block of images as one product (mp_conv_fwd_images,
 * mp_conv_adjoint_images): the same bits as one image a call, f32 and
 * bf16 (its micro-kernel) -- with the runtime's products; through a BLAS
 * (MP_USE_CBLAS), whose kernels vary with the shape, within rounding --
 * and the block's weight gradient within rounding of the images' one at
 * a time. d = {N, C, H, F, k, stride, pad,
 * groups}: MobileNetV2's 1 x 1 to 4 x 4 pointwise convs, a 3 x 3 and a
 * grouped, strided one. */
static void test_conv_images(void **state)
{
    (void)state;
    static const int64_t cases[][8] = {{64, 160, 1, 96, 1, 1, 0, 1}, {64, 64, 2, 38, 1, 1, 0, 1},
                                       {16, 32, 4, 19, 1, 1, 0, 1}, {8, 24, 8, 14, 3, 1, 1, 1},
                                       {5, 12, 6, 10, 3, 2, 1, 1}, {7, 8, 5, 6, 3, 1, 1, 2}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t *d = cases[t];
        int64_t N = d[0], C = d[1], H = d[2], F = d[3], k = d[4], O = (H + 2 * d[6] - k) / d[5] + 1;
        MpConv v = mp_conv_of(C, H, H, F, k, k, d[5], d[5], d[6], d[6], 1, 1, d[7], O, O);
        int64_t img = C * H * H, out = F * O * O, nw = F * C / d[7] * k * k;
        assert_true(mp_conv_images(&v, N, MP_CONV_COLS) > 1);
        for (int dt = 0; dt < 2; dt++) {
            int xdt = dt ? MP_BF16 : F32, es = dt ? 2 : 4;
            float *xf = fvec(N * img, -1, 1), *w = fvec(nw, -1, 1), *b = fvec(F, -1, 1);
            void *x = dt ? (void *)to_dt(xf, N * img, MP_BF16) : (void *)xf;
            float *y = zvec(N * out), *y1 = zvec(N * out), *dx = zvec(N * img), *dx1 = zvec(N * img);
            mp_k_conv2d(y, F32, x, xdt, w, F32, b, F32, N, v);
            mp_k_conv2d_dx(dx, F32, y, F32, w, F32, N, v);
            for (int64_t n = 0; n < N; n++) {
                mp_k_conv2d(y1 + n * out, F32, (char *)x + n * img * es, xdt, w, F32, b, F32, 1, v);
                mp_k_conv2d_dx(dx1 + n * img, F32, y + n * out, F32, w, F32, 1, v);
            }
#ifdef MP_USE_CBLAS
            for (int64_t i = 0; i < N * out; i++) close_to("conv blocks y", i, y[i], y1[i], 1e-5, 1e-5);
            for (int64_t i = 0; i < N * img; i++) close_to("conv blocks dx", i, dx[i], dx1[i], 1e-4, 1e-5);
#else
            assert_memory_equal(y, y1, (size_t)(N * out) * sizeof *y);
            assert_memory_equal(dx, dx1, (size_t)(N * img) * sizeof *dx);
#endif
            if (!dt) {   /* the weight gradient: dy = y, one image at a time summed in double */
                float *dw = zvec(nw), *one = zvec(nw);
                double *ref = calloc((size_t)nw, sizeof *ref);
                mp_k_conv2d_dw(dw, F32, y, F32, x, F32, N, v, 0.0f);
                for (int64_t n = 0; n < N; n++) {
                    mp_k_conv2d_dw(one, F32, y + n * out, F32, xf + n * img, F32, 1, v, 0.0f);
                    for (int64_t i = 0; i < nw; i++) ref[i] += one[i];
                }
                for (int64_t i = 0; i < nw; i++) close_to("conv2d_dw blocks", i, dw[i], ref[i], 1e-4, 1e-4);
                free(dw); free(one); free(ref);
            }
            if (dt)
                free(x);
            free(xf); free(w); free(b); free(y); free(y1); free(dx); free(dx1);
        }
    }
}

/* ---- pooling ------------------------------------------------------------ */

/* d = {N, C, H, W, k, stride, pad, count_include_pad} */
static void fwd_maxpool(Fd *c)
{
    const int64_t *d = c->d;
    mp_k_max_pool2d(c->out, F32, c->in[0], F32, d[0], d[1], d[2], d[3], d[4], d[5], d[6]);
}

static void fwd_avgpool(Fd *c)
{
    const int64_t *d = c->d;
    mp_k_avg_pool2d(c->out, F32, c->in[0], F32, d[0], d[1], d[2], d[3], d[4], d[5], d[6], (int)d[7]);
}

static void fwd_gap(Fd *c)
{
    mp_k_global_avg_pool(c->out, F32, c->in[0], F32, c->d[0], c->d[1], c->d[2] * c->d[3]);
}

static void test_pools(void **state)
{
    (void)state;
    static const int64_t cases[][8] = {{2, 3, 6, 7, 2, 2, 0, 1}, {1, 2, 7, 7, 3, 2, 0, 1},
                                       {2, 1, 5, 6, 2, 1, 0, 1}, {2, 2, 7, 6, 3, 2, 1, 1},
                                       {1, 2, 7, 8, 3, 2, 1, 0}, {1, 2, 8, 7, 5, 1, 2, 0}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t *d = cases[t];
        int64_t N = d[0], C = d[1], H = d[2], W = d[3], k = d[4], s = d[5], p = d[6];
        int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1, nx = N * C * H * W;
        int64_t ny = N * C * OH * OW;
        /* distinct values 0.01 apart: no ties, so small steps keep the argmax */
        Fd c = {{zvec(nx)}};
        for (int64_t i = 0; i < nx; i++) c.in[0][i] = 0.01f * (float)((i * 37) % nx);
        memcpy(c.d, d, sizeof cases[0]);
        fd_setup(&c, ny, fwd_maxpool);
        c.fwd(&c);
        float *avg = zvec(ny), *dx = zvec(nx);
        fwd_avgpool(&(Fd){{c.in[0]}, {N, C, H, W, k, s, p, d[7]}, avg});
        for (int64_t pl = 0; pl < N * C; pl++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double m = -INFINITY, sum = 0, in = 0;   /* the padding: -inf, 0 */
                    for (int64_t a = 0; a < k; a++)
                        for (int64_t b = 0; b < k; b++) {
                            int64_t iy = oy * s - p + a, ix = ox * s - p + b;
                            if (iy < 0 || iy >= H || ix < 0 || ix >= W)
                                continue;
                            double v = c.in[0][(pl * H + iy) * W + ix];
                            m = fmax(m, v);
                            sum += v;
                            in++;
                        }
                    int64_t i = (pl * OH + oy) * OW + ox;
                    close_to("max_pool2d", i, c.out[i], m, 0, 0);
                    close_to("avg_pool2d", i, avg[i], sum / (d[7] ? k * k : in), 1e-6, 1e-6);
                }
        mp_k_max_pool2d_grad(dx, F32, c.w, F32, c.in[0], F32, N, C, H, W, k, s, p);
        fd_check("max_pool2d_grad", &c, 0, nx, dx, 2e-3f, 2e-3);
        c.fwd = fwd_avgpool;
        mp_k_avg_pool2d_grad(dx, F32, c.w, F32, N, C, H, W, k, s, p, (int)d[7]);
        fd_check("avg_pool2d_grad", &c, 0, nx, dx, 1e-2f, 2e-3);
        free(avg); free(dx); fd_free(&c);
    }
    /* ties go to the first maximum, as torch */
    float x[4] = {1, 3, 3, 2}, dy = 5, dx[4];
    mp_k_max_pool2d_grad(dx, F32, &dy, F32, x, F32, 1, 1, 2, 2, 2, 2, 0);
    assert_true(dx[0] == 0 && dx[1] == 5 && dx[2] == 0 && dx[3] == 0);

    int64_t N = 2, C = 3, H = 4, W = 5;
    Fd g = {{fvec(N * C * H * W, -1, 1)}, {N, C, H, W}};
    fd_setup(&g, N * C, fwd_gap);
    g.fwd(&g);
    for (int64_t i = 0; i < N * C; i++) {
        double s = 0;
        for (int64_t j = 0; j < H * W; j++) s += g.in[0][i * H * W + j];
        close_to("global_avg_pool", i, g.out[i], s / (H * W), 1e-6, 1e-6);
    }
    float *gdx = zvec(N * C * H * W);
    mp_k_global_avg_pool_grad(gdx, F32, g.w, F32, N, C, H * W);
    fd_check("global_avg_pool_grad", &g, 0, N * C * H * W, gdx, 1e-2f, 1e-3);
    free(gdx); fd_free(&g);
}

/* ---- embedding ---------------------------------------------------------- */

static int32_t *fd_ids;
static void fwd_embedding(Fd *c)
{
    mp_k_embedding(c->out, F32, fd_ids, MP_I32, c->in[0], F32, c->d[0], c->d[1], c->d[2]);
}

static void test_embedding(void **state)
{
    (void)state;
    int64_t n = 9, V = 5, D = 7;
    Fd c = {{fvec(V * D, -1, 1)}, {n, V, D}};
    fd_ids = ivec(n, (int32_t)V);
    fd_ids[1] = fd_ids[4];                /* a repeated id adds up */
    fd_setup(&c, n * D, fwd_embedding);
    c.fwd(&c);
    for (int64_t i = 0; i < n; i++)
        assert_memory_equal(c.out + i * D, c.in[0] + fd_ids[i] * D, D * 4);
    float *dw = zvec(V * D);
    mp_k_embedding_dw(dw, F32, c.w, F32, fd_ids, MP_I32, n, V, D);
    fd_check("embedding_dw", &c, 0, V * D, dw, 1e-2f, 1e-3);
    fd_ids[0] = -1;                       /* out of range: NaN row, no gradient */
    c.fwd(&c);
    assert_true(isnan(c.out[0]) && isnan(c.out[D - 1]));
    free(dw); free(fd_ids); fd_free(&c);
}

/* An f16 / bf16 embedding gradient (mixed precision's) is summed row by
 * row (mp_embedding_dw_rows): the bits of the dense f32 scatter-add in the
 * order of i, rounded once, on 1 and 2 threads (a sum that the order
 * changes included); ids out of range add nothing, untouched rows are +0,
 * a row of -0 sums to +0 (from 0.0f). */
static void test_embedding_dw_lowp(void **state)
{
    (void)state;
    int64_t n = 300, V = 97, D = 200;
    float *dy = fvec(n * D, -1, 1);
    int32_t *ids = ivec(n, 40);            /* about 7 occurrences a row */
    ids[5] = -3, ids[17] = (int32_t)V, ids[250] = 96;
    for (int64_t j = 0; j < D; j++) dy[3 * D + j] = -0.0f;
    ids[3] = 60;                           /* its one occurrence: -0 */
    const int dts[] = {MP_F16, MP_BF16};
    for (int d = 0; d < 2; d++) {
        int dt = dts[d];
        /* row 70's first element sums big + small - big: 0 in the order
         * of i (the tie rounds to even), small the other way round */
        float big = dt == MP_F16 ? 32768.0f : 16777216.0f, small = dt == MP_F16 ? 0x1p-9f : 1.0f;
        ids[10] = ids[11] = ids[12] = 70;
        dy[10 * D] = big, dy[11 * D] = small, dy[12 * D] = -big;
        assert_true(big + small - big == 0.0f && -big + small + big == small);
        void *y = to_dt(dy, n * D, dt);    /* dy as the backward has it */
        float *acc = zvec(V * D);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; ids[i] >= 0 && ids[i] < V && j < D; j++)
                acc[ids[i] * D + j] += mp_ld(y, dt, i * D + j);
        void *want = malloc((size_t)(V * D) * 2), *got = malloc((size_t)(V * D) * 2);
        for (int64_t k = 0; k < V * D; k++) mp_st(want, dt, k, acc[k]);
        for (int t = 1; t <= 2; t++) {
#ifdef _OPENMP
            omp_set_num_threads(t);
#endif
            memset(got, 0xff, (size_t)(V * D) * 2);
            mp_k_embedding_dw(got, dt, y, dt, ids, MP_I32, n, V, D);
            assert_memory_equal(got, want, (size_t)(V * D) * 2);
        }
        assert_true(mp_ld(got, dt, 60 * D) == 0.0f && !signbit(mp_ld(got, dt, 60 * D)));
        free(y); free(acc); free(want); free(got);
    }
    free(dy); free(ids);
}

/* ---- normalisation ------------------------------------------------------ */

static void fwd_layer_norm(Fd *c)
{
    mp_k_layer_norm(c->out, F32, c->in[0], F32, c->in[1], F32, c->in[2], F32, c->d[0],
                    c->d[1], 1e-5f);
}

static void test_layer_norm(void **state)
{
    (void)state;
    int64_t R = 4, D = 9;
    Fd c = {{fvec(R * D, -2, 2), fvec(D, 0.5f, 1.5f), fvec(D, -1, 1)}, {R, D}};
    fd_setup(&c, R * D, fwd_layer_norm);
    c.fwd(&c);
    for (int64_t r = 0; r < R; r++) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < D; j++) m += c.in[0][r * D + j] / (double)D;
        for (int64_t j = 0; j < D; j++) v += pow(c.in[0][r * D + j] - m, 2) / (double)D;
        for (int64_t j = 0; j < D; j++)
            close_to("layer_norm", r * D + j, c.out[r * D + j],
                     (c.in[0][r * D + j] - m) / sqrt(v + 1e-5) * c.in[1][j] + c.in[2][j],
                     1e-5, 1e-5);
    }
    float *dx = zvec(R * D), *dw = zvec(D), *db = zvec(D);
    int64_t ysh[2] = {R, D}, bsh[1] = {D};
    mp_k_layer_norm_dx(dx, F32, c.w, F32, c.in[0], F32, c.in[1], F32, R, D, 1e-5f);
    mp_k_layer_norm_dw(dw, F32, c.w, F32, c.in[0], F32, R, D, 1e-5f, 0.0f);
    mp_k_sum_to(db, F32, 1, bsh, c.w, F32, 2, ysh, 0.0f);
    fd_check("layer_norm_dx", &c, 0, R * D, dx, 1e-2f, 3e-3);
    fd_check("layer_norm_dw", &c, 1, D, dw, 1e-2f, 3e-3);
    fd_check("layer_norm bias", &c, 2, D, db, 1e-2f, 3e-3);
    free(dx); free(dw); free(db); fd_free(&c);
}

static float fd_rm[8], fd_rv[8];
static void fwd_batch_norm(Fd *c)
{
    mp_k_batch_norm(c->out, F32, c->in[0], F32, c->in[1], F32, c->in[2], F32, fd_rm, fd_rv,
                    c->d[0], c->d[1], c->d[2], 0.1f, 1e-5f, 1);
}

static void test_batch_norm(void **state)
{
    (void)state;
    static const int64_t cases[][3] = {{3, 4, 5}, {6, 3, 1}};     /* NCHW, [B, C] */
    for (size_t t = 0; t < 2; t++) {
        int64_t N = cases[t][0], C = cases[t][1], S = cases[t][2], n = N * C * S;
        Fd c = {{fvec(n, -2, 3), fvec(C, 0.5f, 1.5f), fvec(C, -1, 1)}, {N, C, S}};
        fd_setup(&c, n, fwd_batch_norm);
        for (int64_t ch = 0; ch < C; ch++) {
            fd_rm[ch] = 0.5f;
            fd_rv[ch] = 2.0f;
        }
        c.fwd(&c);
        for (int64_t ch = 0; ch < C; ch++) {
            double m = 0, v = 0;
            for (int64_t i = 0; i < N; i++)
                for (int64_t j = 0; j < S; j++) m += c.in[0][(i * C + ch) * S + j] / (N * S);
            for (int64_t i = 0; i < N; i++)
                for (int64_t j = 0; j < S; j++) v += pow(c.in[0][(i * C + ch) * S + j] - m, 2);
            close_to("running_mean", ch, fd_rm[ch], 0.9 * 0.5 + 0.1 * m, 1e-6, 1e-6);
            close_to("running_var", ch, fd_rv[ch], 0.9 * 2.0 + 0.1 * v / (N * S - 1), 1e-6, 1e-6);
            for (int64_t i = 0; i < N; i++)
                for (int64_t j = 0; j < S; j++) {
                    int64_t e = (i * C + ch) * S + j;
                    close_to("batch_norm", e, c.out[e],
                             (c.in[0][e] - m) / sqrt(v / (N * S) + 1e-5) * c.in[1][ch] +
                                 c.in[2][ch], 1e-5, 1e-5);
                }
        }
        /* inference: the running statistics */
        float *y = zvec(n);
        mp_k_batch_norm(y, F32, c.in[0], F32, c.in[1], F32, c.in[2], F32, fd_rm, fd_rv, N, C,
                        S, 0.1f, 1e-5f, 0);
        for (int64_t e = 0; e < n; e++) {
            int64_t ch = (e / S) % C;
            close_to("batch_norm eval", e, y[e],
                     (c.in[0][e] - fd_rm[ch]) / sqrt(fd_rv[ch] + 1e-5) * c.in[1][ch] + c.in[2][ch],
                     1e-5, 1e-5);
        }
        float *dx = zvec(n), *dw = zvec(C), *db = zvec(C);
        mp_k_batch_norm_dx(dx, F32, c.w, F32, c.in[0], F32, c.in[1], F32, N, C, S, 1e-5f);
        mp_k_batch_norm_dw(dw, F32, c.w, F32, c.in[0], F32, N, C, S, 1e-5f, 0.0f);
        mp_k_channel_sum(db, F32, c.w, F32, N, C, S, 0.0f);
        fd_check("batch_norm_dx", &c, 0, n, dx, 1e-2f, 3e-3);
        fd_check("batch_norm_dw", &c, 1, C, dw, 1e-2f, 3e-3);
        fd_check("batch_norm bias", &c, 2, C, db, 1e-2f, 3e-3);
        free(y); free(dx); free(dw); free(db); fd_free(&c);
    }
}

/* ---- attention ---------------------------------------------------------- */

/* d = {BH, T, Tk, D, causal}; in = q [BH, T, D], k, v [BH, Tk, D] */
static void fwd_attention(Fd *c)
{
    mp_k_attention(c->out, F32, c->in[0], F32, c->in[1], F32, c->in[2], F32, c->d[0],
                   c->d[1], c->d[2], c->d[3], (int)c->d[4], F32);
}

/* softmax(q k^T / sqrt(D)) v in double, probabilities rounded to cdt. */
static void attention_ref(double *y, const float *q, const float *k, const float *v,
                          const int64_t *d, int cdt)
{
    int64_t BH = d[0], T = d[1], Tk = d[2], D = d[3], causal = d[4];
    double *p = malloc(Tk * sizeof *p);
    for (int64_t h = 0; h < BH; h++)
        for (int64_t i = 0; i < T; i++) {
            const float *qi = q + (h * T + i) * D;
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < Tk; j++) {
                double dot = 0;
                for (int64_t e = 0; e < D; e++) dot += (double)qi[e] * k[(h * Tk + j) * D + e];
                p[j] = causal && j > i ? -INFINITY : dot / sqrt((double)D);
                m = fmax(m, p[j]);
            }
            for (int64_t j = 0; j < Tk; j++) s += p[j] = exp(p[j] - m);
            for (int64_t e = 0; e < D; e++) {
                double acc = 0;
                for (int64_t j = 0; j < Tk; j++)
                    acc += mp_round((float)(p[j] / s), cdt) * (double)v[(h * Tk + j) * D + e];
                y[(h * T + i) * D + e] = acc;
            }
        }
    free(p);
}

/* The f16 and bf16 variants of the forward against the reference. */
static void attention_lowp(Fd *c, double *ref, int64_t nq, int64_t nk)
{
    const int64_t *d = c->d;
    uint16_t *qh = to_dt(c->in[0], nq, MP_F16), *kh = to_dt(c->in[1], nk, MP_F16),
             *vh = to_dt(c->in[2], nk, MP_F16), *yh = malloc(nq * 2);
    /* f16: inputs and probabilities rounded to f16, output rounded once */
    mp_k_attention(yh, MP_F16, qh, MP_F16, kh, MP_F16, vh, MP_F16, d[0], d[1], d[2], d[3],
                   (int)d[4], MP_F16);
    attention_ref(ref, c->in[0], c->in[1], c->in[2], d, MP_F16);
    for (int64_t i = 0; i < nq; i++)
        close_to("attention f16", i, mp_f16_to_f32(yh[i]), mp_round((float)ref[i], MP_F16),
                 2e-4, 1e-3);
    /* probabilities rounded to the compute type (bf16), output kept f32 */
    float *yb = zvec(nq);
    mp_k_attention(yb, F32, c->in[0], F32, c->in[1], F32, c->in[2], F32, d[0], d[1], d[2], d[3],
                   (int)d[4], MP_BF16);
    attention_ref(ref, c->in[0], c->in[1], c->in[2], d, MP_BF16);
    for (int64_t i = 0; i < nq; i++) close_to("attention bf16 P", i, yb[i], ref[i], 1e-6, 1e-5);
    free(yb); free(qh); free(kh); free(vh); free(yh);
}

/* One attention_grad call, its [BH, T + 2Tk, D] parts against finite
 * differences of the forward. */
static void attention_grads(Fd *c, int64_t nq, int64_t nk)
{
    int64_t BH = c->d[0], T = c->d[1], Tk = c->d[2], D = c->d[3];
    float *all = zvec(BH * (T + 2 * Tk) * D), *g[3] = {zvec(nq), zvec(nk), zvec(nk)};
    mp_k_attention_grad(all, F32, c->w, F32, c->in[0], F32, c->in[1], F32, c->in[2], F32, BH,
                        T, Tk, D, (int)c->d[4], F32);
    for (int64_t h = 0; h < BH; h++) {
        const float *at = all + h * (T + 2 * Tk) * D;
        memcpy(g[0] + h * T * D, at, T * D * sizeof(float));
        memcpy(g[1] + h * Tk * D, at + T * D, Tk * D * sizeof(float));
        memcpy(g[2] + h * Tk * D, at + (T + Tk) * D, Tk * D * sizeof(float));
    }
    fd_check("attention dq", c, 0, nq, g[0], 1e-2f, 2e-3);
    fd_check("attention dk", c, 1, nk, g[1], 1e-2f, 2e-3);
    fd_check("attention dv", c, 2, nk, g[2], 1e-2f, 2e-3);
    for (int i = 0; i < 3; i++) free(g[i]);
    free(all);
}

/* Small heads; T past a query tile (32) and a key tile (64), a multiple of
 * neither; cross attention (Tk != T) at D = 64. */
static void test_attention(void **state)
{
    (void)state;
    static const int64_t cases[][5] = {{3, 5, 5, 4, 0},    {3, 5, 5, 4, 1},
                                       {1, 70, 70, 16, 0}, {1, 70, 70, 16, 1},
                                       {2, 9, 70, 64, 0}};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t *d = cases[t];
        int64_t nq = d[0] * d[1] * d[3], nk = d[0] * d[2] * d[3];
        Fd c = {{fvec(nq, -1, 1), fvec(nk, -1, 1), fvec(nk, -1, 1)}, {d[0], d[1], d[2], d[3], d[4]}};
        fd_setup(&c, nq, fwd_attention);
        c.fwd(&c);
        double *ref = malloc(nq * sizeof *ref);
        attention_ref(ref, c.in[0], c.in[1], c.in[2], d, F32);
        for (int64_t i = 0; i < nq; i++) close_to("attention", i, c.out[i], ref[i], 1e-6, 1e-5);
        attention_lowp(&c, ref, nq, nk);
        attention_grads(&c, nq, nk);
        free(ref); fd_free(&c);
    }
}

/* ---- threads ------------------------------------------------------------ */

/* The same bits whatever the number of threads (with -fopenmp; trivially
 * without): every parallel loop splits work so that each sum keeps its
 * order. Sizes are above the thresholds for going parallel. */
static void run_threaded_kernels(float *out, const float *x, int64_t n, const int32_t *lab)
{
    int64_t M = 200, N = 300, K = 100;     /* x holds n >= M K + K N values */
    mp_gemm(0, 0, M, N, K, 1.0f, x, F32, K, x + M * K, F32, N, 0.0f, out, F32, N);
    out += M * N;
    mp_k_sum(out, F32, x, F32, 1, n, 1);
    mp_k_softmax(out + 1, F32, x, F32, n / 1000, 1000, 1);
    mp_k_cross_entropy(out + 1 + n, F32, x, F32, lab, MP_I32, n / 1000, 1000, MP_NO_IGNORE, 0.0f);
    float rm[10] = {0}, rv[10] = {0};
    mp_k_batch_norm(out + 2 + n, F32, x, F32, NULL, F32, NULL, F32, rm, rv, n / 5000, 10, 500,
                    0.1f, 1e-5f, 1);
    memcpy(out + 2 + 2 * n, rv, sizeof rv);
    /* C shared along N (small M) and along M (small N), both transposed */
    mp_gemm(1, 1, 20, 1000, 300, 1.0f, x, F32, 20, x + 6000, F32, 300, 0.0f, out + 12 + 2 * n,
            F32, 1000);
    mp_gemm(1, 0, 1000, 20, 300, 1.0f, x, F32, 1000, x + 300000, F32, 20, 0.0f,
            out + 20012 + 2 * n, F32, 20);
    /* K shared (mp_gemm_ksplit, on 2 threads or more): the weight
     * gradients' TN shape, f32 (A read in place) and f16 (A packed), K
     * not a multiple of the block, M and N not of the tile */
    float *o = out + 40012 + 2 * n;
    mp_gemm(1, 0, 64, 96, 1024, 1.0f, x, F32, 64, x + 65536, F32, 96, 0.0f, o, F32, 96);
    uint16_t *h = malloc(2 * 70000 * sizeof *h);
    mp_k_cast(h, MP_F16, x, F32, 2 * 70000);
    mp_gemm(1, 0, 65, 70, 1000, 0.5f, h, MP_F16, 65, h + 70000, MP_F16, 70, 0.0f, o + 6144,
            F32, 70);
    free(h);
}

static void test_threads_same_bits(void **state)
{
    (void)state;
    /* the weight-gradient shapes below go to the K split on 2 threads
     * (else this test would not cover it) */
    int64_t floats;
    MpGemm kg = {.ta = 1, .M = 64, .N = 96, .K = 1024, .adt = F32, .lda = 64, .bdt = F32};
    assert_true(mp_ksplit_cost(&kg, 16, 2, &floats) < mp_split(64, 96, 1024, 16, 2).cost);
    kg.M = 65, kg.N = 70, kg.K = 1000, kg.adt = kg.bdt = MP_F16;
    assert_true(mp_ksplit_cost(&kg, 16, 2, &floats) < mp_split(65, 70, 1000, 16, 2).cost);
    int64_t n = 1000000, nout = 200 * 300 + 2 * n + 12 + 2 * 20000 + 6144 + 65 * 70;
    float *x = fvec(n, -2, 2), *a = zvec(nout), *b = zvec(nout);
    int32_t *lab = ivec(n / 1000, 1000);
    for (int t = 1; t <= 3; t++) {
#ifdef _OPENMP
        omp_set_num_threads(t);
#endif
        run_threaded_kernels(t > 1 ? b : a, x, n, lab);
        if (t > 1)
            assert_memory_equal(a, b, nout * sizeof *a);
    }
#ifdef _OPENMP
    omp_set_num_threads(omp_get_num_procs());
#endif
    free(x); free(a); free(b); free(lab);
}

/* ---- elementwise, norm, rope and loss additions -------------------------------- */

/* rope's backward is the rotation by -angle: it undoes the forward; f16
 * storage is loaded, rotated in f32 and rounded once. */
static void test_rope_inverse(void **state)
{
    (void)state;
    enum { B_ = 2, T_ = 5, H_ = 3, D_ = 8, N_ = B_ * T_ * H_ * D_ };
    float x[N_], y[N_], back[N_];
    uint16_t h[N_], hy[N_];
    for (int i = 0; i < N_; i++)
        x[i] = (float)((i * 37) % 19) / 7.0f - 1.3f;
    for (int half = 0; half < 2; half++) {
        mp_k_rope(y, F32, x, F32, B_, T_, H_ * D_, D_, 10000.0f, half, 1.0f);
        mp_k_rope(back, F32, y, F32, B_, T_, H_ * D_, D_, 10000.0f, half, -1.0f);
        for (int i = 0; i < N_; i++)
            assert_true(fabsf(back[i] - x[i]) < 1e-5f);
        for (int i = 0; i < H_ * D_; i++)          /* position 0: no rotation */
            assert_true(y[i] == x[i]);
        mp_k_cast(h, MP_F16, x, F32, N_);
        mp_k_rope(hy, MP_F16, h, MP_F16, B_, T_, H_ * D_, D_, 10000.0f, half, 1.0f);
        for (int i = 0; i < N_; i++)
            assert_true(fabsf(mp_f16_to_f32(hy[i]) - y[i]) < 4e-3f);
    }
}

/* Every label ignored: 0 / 0, NaN as torch; the gradient is all zeros. */
static void test_cross_entropy_all_ignored(void **state)
{
    (void)state;
    float x[6] = {1, 2, 3, 4, 5, 6}, loss, dx[6], dl = 1.0f;
    uint16_t lab[2] = {7, 7};
    mp_k_cross_entropy(&loss, F32, x, F32, lab, MP_U16, 2, 3, 7, 0.1f);
    assert_true(isnan(loss));
    mp_k_cross_entropy_grad(dx, F32, &dl, F32, x, F32, lab, MP_U16, 2, 3, 7, 0.1f);
    for (int i = 0; i < 6; i++)
        assert_true(dx[i] == 0.0f);
}

/* This program again with MP_CPU set to each path the CPU has. */
static int run_paths(char **argv)
{
    const char *paths[] = {"portable", "avx2", "avx512", "avx512_bf16"};
    int fail = 0;
    for (int p = 0; p <= mp_cpu_level() && p < 4; p++) {
        printf("== MP_CPU=%s\n", paths[p]);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("MP_CPU", paths[p], 1);
            execv("/proc/self/exe", argv);
            perror(argv[0]);
            _exit(127);
        }
        int st;
        if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
            fail = 1;
    }
    return fail;
}

int main(int argc, char **argv)
{
    (void)argc;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bulk_conversion),
        cmocka_unit_test(test_round_in_place),
        cmocka_unit_test(test_gemm_sizes),
        cmocka_unit_test(test_gemm_types),
        cmocka_unit_test(test_gemm_alpha_beta),
        cmocka_unit_test(test_gemm_paths),
        cmocka_unit_test(test_gemm_large),
        cmocka_unit_test(test_gemm_kblocks),
        cmocka_unit_test(test_gemm_levels),
        cmocka_unit_test(test_uk_models),
        cmocka_unit_test(test_gemm_round_operands),
        cmocka_unit_test(test_linear_matmul),
        cmocka_unit_test(test_matmul_tn_fd),
        cmocka_unit_test(test_unary_forward),
        cmocka_unit_test(test_unary_grads),
        cmocka_unit_test(test_cast_fill_scale),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_binary_broadcast),
        cmocka_unit_test(test_sum_to_fd),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_structural),
        cmocka_unit_test(test_reduce),
        cmocka_unit_test(test_expand_channel_sum_fd),
        cmocka_unit_test(test_softmax_forward),
        cmocka_unit_test(test_softmax_grads_fd),
        cmocka_unit_test(test_losses),
        cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_conv_images),
        cmocka_unit_test(test_pools),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_embedding_dw_lowp),
        cmocka_unit_test(test_layer_norm),
        cmocka_unit_test(test_batch_norm),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_threads_same_bits),
        cmocka_unit_test(test_rope_inverse),
        cmocka_unit_test(test_cross_entropy_all_ignored),
    };
    if (getenv("MP_CPU"))
        return cmocka_run_group_tests(tests, NULL, NULL);
    return run_paths(argv);
}
