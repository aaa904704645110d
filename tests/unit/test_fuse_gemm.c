/* test_fuse_gemm.c - the GEMM side of fusion (runtime/mp_kernels_gemm.h):
 *
 * - MpGemm.epi: called once for every element of C, with the f32 result
 *   (alpha AB + bias + beta C) before rounding; what it leaves in v is
 *   stored, rounded to cdt, and it may store elsewhere. Sizes across the
 *   tiles (several row segments per row) and K = 0. mp_k_matmul_tn_acc's
 *   epilogue adds the product to the old gradient, as the two calls would.
 * - MpGemm.around / bround: an f32 operand rounded to f16 / bf16 while
 *   packing gives exactly the product of the operand cast first, both
 *   transposes; without them the f32 operand is used as it is.
 * make test runs it on the built-in GEMM; it passes as well built with
 * -DMP_USE_CBLAS -lopenblas (the CBLAS path: operands rounded in their f32
 * copies, rows stored through the same mp_gemm_store). */
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

static float frand(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f * 2.0f - 1.0f;
}

static float *rand_buf(int64_t n, uint32_t seed)
{
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = frand(&seed);
    return p;
}

/* The epilogue under test: counts its calls per element, keeps the value
 * it was given, stores 2 v + 1 into `side` and hands back relu(v). */
typedef struct EpiCtx {
    int64_t N;
    int *calls;
    float *seen, *side;
} EpiCtx;

static void epi_probe(const void *ctx, float *v, int64_t i, int64_t j0, int64_t n)
{
    const EpiCtx *c = ctx;
    for (int64_t j = 0; j < n; j++) {
        int64_t e = i * c->N + j0 + j;
        c->calls[e]++;
        c->seen[e] = v[j];
        c->side[e] = 2.0f * v[j] + 1.0f;
        v[j] = v[j] < 0.0f ? 0.0f : v[j];
    }
}

static void check_epi(int64_t M, int64_t N, int64_t K, int cdt)
{
    float *A = rand_buf(M * K, 1), *B = rand_buf(N * K, 2), *bias = rand_buf(N, 3);
    uint16_t *C = calloc((size_t)(M * N), 4);
    float *plain = calloc((size_t)(M * N), sizeof *plain);
    int *calls = calloc((size_t)(M * N), sizeof *calls);
    float *seen = calloc((size_t)(M * N), sizeof *seen), *side = calloc((size_t)(M * N), sizeof *side);
    /* the reference: the same product unfused, stored as f32 */
    mp_k_linear(plain, MP_F32, A, MP_F32, B, MP_F32, bias, MP_F32, M, N, K);
    EpiCtx ctx = {N, calls, seen, side};
    MpGemm g = mp_gemm_linear(C, cdt, A, MP_F32, B, MP_F32, bias, MP_F32, M, N, K);
    g.epi = epi_probe;
    g.epi_ctx = &ctx;
    mp_gemm_ex(&g);
    for (int64_t e = 0; e < M * N; e++) {
        assert_int_equal(calls[e], 1);
        assert_true(seen[e] == plain[e]);             /* f32, before rounding */
        assert_true(side[e] == 2.0f * plain[e] + 1.0f);
        float want = mp_round(plain[e] < 0.0f ? 0.0f : plain[e], cdt);
        assert_true(mp_ld(C, cdt, e) == want);        /* v stored, rounded to cdt */
    }
    free(A); free(B); free(bias); free(C); free(plain); free(calls); free(seen); free(side);
}

static void test_epi_every_element_once(void **state)
{
    (void)state;
    check_epi(7, 5, 3, MP_F32);
    check_epi(100, 300, 37, MP_F16);      /* several tiles across N */
    check_epi(13, 600, 270, MP_BF16);     /* two K blocks, row segments */
    check_epi(4, 9, 0, MP_F32);           /* K = 0: bias only */
}

/* grad[K, N] += a[R, K]^T b[R, N] (mp_k_matmul_tn_acc, a weight gradient
 * accumulated in the product's store) has the bits of grad + the product
 * stored alone: R one block of K and two, edges both ways. */
static void test_tn_acc_bits(void **state)
{
    (void)state;
    int64_t K = 97, N = 131;
    for (int64_t R = 200; R <= 300; R += 100) {
        float *a = rand_buf(R * K, 10), *b = rand_buf(R * N, 11), *grad = rand_buf(K * N, 12);
        float *prod = calloc((size_t)(K * N), sizeof *prod), *want = calloc((size_t)(K * N), 4);
        mp_k_matmul_tn(prod, MP_F32, a, MP_F32, b, MP_F32, R, K, N, 0.0f);
        for (int64_t e = 0; e < K * N; e++) want[e] = grad[e] + prod[e];
        mp_k_matmul_tn_acc(grad, MP_F32, a, MP_F32, b, MP_F32, R, K, N);
        assert_memory_equal(grad, want, (size_t)(K * N) * sizeof *grad);
        free(a); free(b); free(grad); free(prod); free(want);
    }
}

/* around / bround: the same as casting the operand first. */
static void check_round(int adt, int ta, int tb)
{
    int64_t M = 31, N = 45, K = 300;
    float *A = rand_buf(M * K, 5), *B = rand_buf(K * N, 6);
    for (int64_t i = 0; i < M * K; i++) A[i] *= 3.14159f;   /* not exact in f16 */
    float *Ac = malloc((size_t)(M * K) * sizeof *Ac), *Bc = malloc((size_t)(K * N) * sizeof *Bc);
    for (int64_t i = 0; i < M * K; i++) Ac[i] = mp_round(A[i], adt);
    for (int64_t i = 0; i < K * N; i++) Bc[i] = mp_round(B[i], adt);
    float *want = calloc((size_t)(M * N), sizeof *want), *got = calloc((size_t)(M * N), sizeof *got);
    float *raw = calloc((size_t)(M * N), sizeof *raw);
    MpGemm w = mp_gemm_matmul(want, MP_F32, Ac, MP_F32, Bc, MP_F32, M, N, K, ta, tb);
    mp_gemm_ex(&w);
    MpGemm g = mp_gemm_matmul(got, MP_F32, A, MP_F32, B, MP_F32, M, N, K, ta, tb);
    g.around = g.bround = adt;
    mp_gemm_ex(&g);
    MpGemm r = mp_gemm_matmul(raw, MP_F32, A, MP_F32, B, MP_F32, M, N, K, ta, tb);
    mp_gemm_ex(&r);
    int differs = 0;
    for (int64_t e = 0; e < M * N; e++) {
        assert_true(got[e] == want[e]);
        differs += raw[e] != want[e];
    }
    assert_true(differs > 0);                 /* the rounding did something */
    free(A); free(B); free(Ac); free(Bc); free(want); free(got); free(raw);
}

static void test_operand_rounding(void **state)
{
    (void)state;
    for (int t = 0; t < 4; t++) {
        check_round(MP_F16, t & 1, t >> 1);
        check_round(MP_BF16, t & 1, t >> 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epi_every_element_once),
        cmocka_unit_test(test_tn_acc_bits),
        cmocka_unit_test(test_operand_rounding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
