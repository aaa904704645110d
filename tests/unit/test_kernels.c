/* test_kernels.c - the runtime's kernels (runtime/mp_kernels*.h).
 *
 * - mp_gemm against a naive double loop: many odd sizes (across the
 *   micro-kernel's MR x NR and the KC block), every transpose, every
 *   storage type; with integer inputs (exact f32 sums) an f16/bf16 result
 *   must be exactly the exact product rounded once.
 * - forward kernels against naive double-precision loops written here.
 * - every backward kernel against central finite differences of its
 *   forward kernel, in f32, on small random shapes.
 * tests/t_kernels_torch.sh compares a representative set with PyTorch and
 * builds this file again with -fopenmp -march=native and with CBLAS. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mp_kernels.h"
#include "mp_kernels_gemm.h"

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
    float *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = frand(lo, hi);
    return x;
}

static float *zvec(int64_t n) { return calloc((size_t)(n ? n : 1), sizeof(float)); }

static inline int32_t *ivec(int64_t n, int32_t hi)
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
    float fa[4];
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

/* A product large enough for several tiles and passes. */
static void test_gemm_large(void **state)
{
    (void)state;
    gemm_case(0, 1, 130, 520, 300, F32, F32, F32, 1.0f, 0.0f, 0);
    gemm_case(1, 0, 200, 100, 130, MP_F16, MP_F16, MP_F16, 1.0f, 0.0f, 1);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_sizes),
        cmocka_unit_test(test_gemm_types),
        cmocka_unit_test(test_gemm_alpha_beta),
        cmocka_unit_test(test_gemm_large),
        cmocka_unit_test(test_linear_matmul),
        cmocka_unit_test(test_matmul_tn_fd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
