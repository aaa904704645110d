/* norm_bits.c - runtime/mp_kernels_nn.h's layer_norm, layer_norm_dx and
 * layer_norm_dw against the one-row-at-a-time kernels of norm_ref.h, bit
 * for bit: f32 / f16 / bf16, with and without weight and bias (beta for
 * dw), row counts that are and are not multiples of 4, short and long
 * rows, sizes on both sides of MP_PAR_MIN (threads). Exit 1 on any
 * difference. MUTANT=1 perturbs the new kernels' eps: the run must then
 * fail (tests/t_norm_bits.sh checks that it does). */
#include "mp_kernels.h"
#include "mp_kernels_nn.h"
#include "../norm/norm_ref.h"

static uint32_t seed = 7;

static float rnd(void)
{
    seed = seed * 1664525u + 1013904223u;
    return (float)((int32_t)(seed >> 8) - (1 << 23)) * 1e-6f;
}

int main(void)
{
    const int64_t rows_list[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 37, 1024, 1027};
    const int dts[] = {MP_F32, MP_F16, MP_BF16};
    const float eps = 1e-5f, neps = getenv("MUTANT") ? 1.0001e-5f : eps;
    int bad = 0, cases = 0;
    for (size_t ri = 0; ri < sizeof rows_list / sizeof *rows_list; ri++)
        for (int64_t dim = 1; dim <= 130; dim += dim < 20 ? 1 : 17)
            for (int di = 0; di < 3; di++)
                for (int wb = 0; wb < 2; wb++) {
                    int64_t rows = rows_list[ri], n = rows * dim;
                    int dt = dts[di];
                    float *f = (float *)malloc((size_t)(2 * n + 2 * dim) * sizeof *f);
                    char *mem = (char *)calloc((size_t)(4 * n + 2 * dim), 4);
                    char *x = mem, *dy = x + 4 * n, *y1 = dy + 4 * n, *y2 = y1 + 4 * n;
                    char *w = y2 + 4 * n, *b = w + 4 * dim;
                    for (int64_t i = 0; i < n; i++) {
                        f[i] = rnd() + (float)(i % 7) * 3.0f;   /* rows with a mean */
                        f[n + i] = rnd();
                    }
                    for (int64_t i = 0; i < dim; i++) {
                        f[2 * n + i] = 1.0f + rnd();
                        f[2 * n + dim + i] = rnd();
                    }
                    mp_st_n(x, dt, 0, 1, n, f);
                    mp_st_n(dy, dt, 0, 1, n, f + n);
                    mp_st_n(w, dt, 0, 1, dim, f + 2 * n);
                    mp_st_n(b, dt, 0, 1, dim, f + 2 * n + dim);
                    const void *wp = wb ? w : NULL, *bp = wb ? b : NULL;
                    size_t bytes = (size_t)n * (dt == MP_F32 ? 4 : 2);

                    ref_layer_norm(y1, dt, x, dt, wp, dt, bp, dt, rows, dim, eps);
                    mp_k_layer_norm(y2, dt, x, dt, wp, dt, bp, dt, rows, dim, neps);
                    bad += memcmp(y1, y2, bytes) != 0;
                    ref_layer_norm_dx(y1, dt, dy, dt, x, dt, wp, dt, rows, dim, eps);
                    mp_k_layer_norm_dx(y2, dt, dy, dt, x, dt, wp, dt, rows, dim, neps);
                    bad += memcmp(y1, y2, bytes) != 0;
                    memcpy(y1, f + n, (size_t)dim * 4);   /* beta 0.5 adds to these */
                    memcpy(y2, f + n, (size_t)dim * 4);
                    ref_layer_norm_dw(y1, MP_F32, dy, dt, x, dt, rows, dim, eps, wb ? 0.5f : 0.0f);
                    mp_k_layer_norm_dw(y2, MP_F32, dy, dt, x, dt, rows, dim, neps,
                                       wb ? 0.5f : 0.0f);
                    bad += memcmp(y1, y2, (size_t)dim * 4) != 0;
                    cases += 3;
                    free(f);
                    free(mem);
                }
    printf("layer norm kernels: %d cases, %d differ from the one-row kernels\n", cases, bad);
    return bad != 0;
}
