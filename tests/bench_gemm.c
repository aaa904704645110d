/* bench_gemm.c - GFLOP/s of the products of one MNIST-MLP training step
 * (batch 128: 784 -> 512 -> 10), as the C trainer makes them. Not a test;
 * run by hand, e.g.
 *   cc -O3 -march=native -fopenmp -Iruntime tests/bench_gemm.c -o b -lm && ./b
 *   cc -O2 -fopenmp -DMP_USE_CBLAS -Iruntime tests/bench_gemm.c -o b -lopenblas -lm
 * Prints the median and the best of up to 300 steps for f32, f16 and bf16
 * storage: on a shared machine the best is the one to compare. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "mp_kernels.h"
#include "mp_kernels_gemm.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *tensor(int64_t n, int dt)
{
    float *f = (float *)malloc((size_t)n * 4);
    void *p = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) f[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    mp_k_cast(p, dt, f, MP_F32, n);
    free(f);
    return p;
}

int main(void)
{
    const int64_t B = 128, I = 784, H = 512, O = 10;
    double flops = 2.0 * B * I * H * 2 + 2.0 * B * H * O * 3;
    for (int dt = MP_F32; dt <= MP_BF16; dt++) {
        void *x = tensor(B * I, dt), *w1 = tensor(H * I, dt), *b1 = tensor(H, dt);
        void *h = tensor(B * H, dt), *w2 = tensor(O * H, dt), *b2 = tensor(O, dt);
        void *y = tensor(B * O, dt), *dy = tensor(B * O, dt), *dh = tensor(B * H, dt);
        float *dw1 = (float *)calloc((size_t)(H * I), 4), *dw2 = (float *)calloc((size_t)(O * H), 4);
        double t[300];
        int n = 0;
        for (double t0 = now(); n < 300 && now() - t0 < 5;) {
            double s = now();
            mp_k_linear(h, dt, x, dt, w1, dt, b1, dt, B, H, I);      /* forward */
            mp_k_linear(y, dt, h, dt, w2, dt, b2, dt, B, O, H);
            mp_k_matmul_tn(dw2, MP_F32, dy, dt, h, dt, B, O, H, 1.0f);  /* backward */
            mp_k_matmul(dh, dt, dy, dt, w2, dt, 1, B, H, O, 0, 0, 0, 0);
            mp_k_matmul_tn(dw1, MP_F32, dh, dt, x, dt, B, H, I, 1.0f);
            t[n++] = now() - s;
        }
        qsort(t, (size_t)n, sizeof t[0], cmp);
        printf("%-4s storage: median %5.1f GFLOP/s, best %5.1f GFLOP/s (%d steps)\n",
               dt == MP_F32 ? "f32" : dt == MP_F16 ? "f16" : "bf16", flops / t[n / 2] * 1e-9,
               flops / t[0] * 1e-9, n);
        free(x); free(w1); free(b1); free(h); free(w2); free(b2); free(y); free(dy);
        free(dh); free(dw1); free(dw2);
    }
    return 0;
}
