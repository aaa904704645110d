/* test_cublas.c - runtime/mp_cublas.h on the CPU: how the CUDA program
 * loads cuBLAS (the messages when it cannot; every function found when it
 * can) and how it maps the runtime's row-major products onto cuBLAS's
 * column-major GEMM, checked against a plain column-major GEMM written
 * here from cuBLAS's documented semantics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mp_model.h"
#include "mp_cublas.h"

/* ---- loading -------------------------------------------------------------- */

static void test_load_missing_file(void **st)
{
    (void)st;
    MpBlas b;
    char msg[512];
    setenv("MP_CUBLAS", "/nonexistent/libcublas.so.13", 1);
    assert_int_equal(mp_blas_load(&b, msg, sizeof msg), -1);
    unsetenv("MP_CUBLAS");
    assert_non_null(strstr(msg, "cannot load cuBLAS from MP_CUBLAS=/nonexistent/libcublas.so.13: "));
    assert_null(strchr(msg, '\n'));
}

static void test_load_not_cublas(void **st)
{
    (void)st;
    MpBlas b;
    char msg[512];
    setenv("MP_CUBLAS", "libm.so.6", 1);          /* loads, but is not cuBLAS */
    int rc = mp_blas_load(&b, msg, sizeof msg);
    unsetenv("MP_CUBLAS");
    assert_int_equal(rc, -1);
    assert_string_equal(msg, "the loaded cuBLAS has no function cublasCreate_v2 (cuBLAS 12 or "
                             "later is needed)");
}

/* With no MP_CUBLAS: the real library where the machine has one (every
 * function the program calls must resolve), else the advice. */
static void test_load_default(void **st)
{
    (void)st;
    MpBlas b;
    char msg[512];
    unsetenv("MP_CUBLAS");
    if (mp_blas_load(&b, msg, sizeof msg) == 0) {
        assert_non_null(b.create);
        assert_non_null(b.set_stream);
        assert_non_null(b.set_math_mode);
        assert_non_null(b.set_workspace);
        assert_non_null(b.status_string);
        assert_non_null(b.gemm);
        assert_non_null(b.gemm_batched);
        assert_string_equal(b.status_string(MP_BLAS_STATUS_SUCCESS), "success");
    } else {
        assert_non_null(strstr(msg, "cannot load cuBLAS (libcublas.so.13"));
        assert_non_null(strstr(msg, "MP_CUBLAS="));
    }
}

/* ---- the mapping onto a column-major GEMM ------------------------------------ */

/* cuBLAS's GEMM as documented, f32 only: C = alpha opA(A) opB(B) + beta C,
 * every matrix column-major, element (i, j) at i + j * ld. */
static void colmajor_gemm(const MpBlasArgs *a, float alpha, float beta)
{
    for (int b = 0; b < a->batch; b++) {
        const float *A = (const float *)a->A + b * a->sa, *B = (const float *)a->B + b * a->sb;
        float *C = (float *)a->C + b * a->sc;
        for (int i = 0; i < a->m; i++)
            for (int j = 0; j < a->n; j++) {
                double s = 0;
                for (int l = 0; l < a->k; l++) {
                    float x = a->opa == MP_BLAS_OP_N ? A[i + l * a->lda] : A[l + i * a->lda];
                    float y = a->opb == MP_BLAS_OP_N ? B[l + j * a->ldb] : B[j + l * a->ldb];
                    s += (double)x * y;
                }
                C[i + j * a->ldc] = (float)(alpha * s + beta * C[i + j * a->ldc]);
            }
    }
}

/* The same product in the runtime's row-major convention, directly. */
static float rowmajor_at(const MpCuGemm *g, int64_t b, int64_t i, int64_t j, const float *C0)
{
    const float *A = (const float *)g->A + b * g->sa, *B = (const float *)g->B + b * g->sb;
    double s = 0;
    for (int64_t l = 0; l < g->K; l++) {
        float x = g->ta ? A[l * g->lda + i] : A[i * g->lda + l];
        float y = g->tb ? B[j * g->ldb + l] : B[l * g->ldb + j];
        s += (double)x * y;
    }
    return (float)(g->alpha * s + g->beta * C0[b * g->sc + i * g->ldc + j]);
}

static float *random_floats(int64_t n, unsigned *seed)
{
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)(rand_r(seed) % 17) / 8.0f - 1.0f;
    return p;
}

/* Every transpose combination, with padded leading dimensions, batched
 * with a shared A (stride 0) and beta = 0.5. */
static void test_mapping(void **st)
{
    (void)st;
    unsigned seed = 1;
    const int64_t M = 5, N = 7, K = 3, batch = 3, pad = 2;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
            int64_t sa = 0, sb = (tb ? N : K) * ldb, sc = M * ldc;
            float *A = random_floats((ta ? K : M) * lda, &seed);
            float *B = random_floats(batch * sb, &seed);
            float *C = random_floats(batch * sc, &seed), *C0 = malloc((size_t)(batch * sc) * sizeof *C0);
            memcpy(C0, C, (size_t)(batch * sc) * sizeof *C0);
            MpCuGemm g = {ta, tb, M, N, K, 1.5f, 0.5f, A, MP_F32, lda, B, MP_F32, ldb, C, MP_F32, ldc,
                          batch, sa, sb, sc};
            assert_true(mp_blas_can(&g));
            MpBlasArgs a = mp_blas_args(&g);
            colmajor_gemm(&a, g.alpha, g.beta);
            for (int64_t b = 0; b < batch; b++)
                for (int64_t i = 0; i < M; i++) {
                    for (int64_t j = 0; j < N; j++)
                        assert_float_equal(C[b * sc + i * ldc + j], rowmajor_at(&g, b, i, j, C0), 1e-5);
                    for (int64_t j = N; j < ldc; j++)      /* the padding is not touched */
                        assert_float_equal(C[b * sc + i * ldc + j], C0[b * sc + i * ldc + j], 0);
                }
            free(A);
            free(B);
            free(C);
            free(C0);
        }
}

static void test_can(void **st)
{
    (void)st;
    MpCuGemm g = {0, 0, 4, 4, 4, 1, 0, NULL, MP_F16, 4, NULL, MP_F16, 4, NULL, MP_F16, 4, 1, 0, 0, 0};
    assert_true(mp_blas_can(&g));
    g.cdt = MP_F32;                     /* f16 inputs, f32 result */
    assert_true(mp_blas_can(&g));
    g.adt = g.bdt = MP_BF16;
    assert_true(mp_blas_can(&g));
    g.bdt = MP_F16;                     /* mixed inputs: the plain kernel */
    assert_false(mp_blas_can(&g));
    g.adt = g.bdt = MP_F32;
    g.cdt = MP_F16;                     /* f32 inputs must give f32 */
    assert_false(mp_blas_can(&g));
    g.cdt = MP_F32;
    g.K = 0;
    assert_false(mp_blas_can(&g));
    g.K = 4;
    g.adt = g.bdt = MP_I32;
    assert_false(mp_blas_can(&g));
    MpBlasArgs a = mp_blas_args(&g);
    assert_int_equal(a.atype, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_missing_file),
        cmocka_unit_test(test_load_not_cublas),
        cmocka_unit_test(test_load_default),
        cmocka_unit_test(test_mapping),
        cmocka_unit_test(test_can),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
