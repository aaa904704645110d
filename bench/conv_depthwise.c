/* conv_depthwise.c - the depthwise kernels (groups = C: mp_conv_depthwise_*)
 * against what a depthwise convolution would cost as a dense one (groups 1,
 * the weight zero off the diagonal): forward, dx and dw of a 3x3 convolution
 * over x [16, 96, 28, 28], stride 1, padding 1, the best of 3 runs each.
 *   cc -O2 -march=native -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime \
 *      bench/conv_depthwise.c -o conv_depthwise -lm && ./conv_depthwise
 * (add -fopenmp and OMP_NUM_THREADS for threads). Results: bench/RESULTS.md. */
#include "mp_kernels_nn.h"
#include "bench_clock.h"

int main(void)
{
    int64_t N = 16, C = 96, H = 28, W = 28, k = 3, nx = N * C * H * W;
    float *x = malloc(nx * 4), *y = malloc(nx * 4), *dx = malloc(nx * 4);
    float *w = calloc(C * C * k * k, 4), *dw = malloc(C * C * k * k * 4);
    for (int64_t i = 0; i < nx; i++) x[i] = (float)(i % 7) * 0.1f;
    for (int64_t i = 0; i < C * k * k; i++) w[i] = 0.01f * (float)(i % 5);
    int64_t groups[2] = {C, 1};
    for (int t = 0; t < 2; t++) {
        MpConv v = mp_conv_of(C, H, W, C, k, k, 1, 1, 1, 1, 1, 1, groups[t], H, W);
        double best[3] = {1e9, 1e9, 1e9};
        for (int r = 0; r < 3; r++) {
            double t0 = now();
            mp_k_conv2d(y, MP_F32, x, MP_F32, w, MP_F32, NULL, MP_F32, N, v);
            double t1 = now();
            mp_k_conv2d_dx(dx, MP_F32, y, MP_F32, w, MP_F32, N, v);
            double t2 = now();
            mp_k_conv2d_dw(dw, MP_F32, y, MP_F32, x, MP_F32, N, v, 0.0f);
            double t3 = now(), d[3] = {t1 - t0, t2 - t1, t3 - t2};
            for (int j = 0; j < 3; j++)
                best[j] = d[j] < best[j] ? d[j] : best[j];
        }
        printf("%-18s forward %8.2f ms   dx %8.2f ms   dw %8.2f ms\n",
               t ? "dense (groups 1)" : "depthwise (groups C)", best[0] * 1e3, best[1] * 1e3,
               best[2] * 1e3);
    }
    free(x), free(y), free(dx), free(w), free(dw);
    return 0;
}
