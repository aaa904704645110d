/* attn_bench.c - times the CPU attention kernels against the old ones
 * (attn_ref.c) on one shape, back to back in one process, one thread by
 * default: the fastest of several rounds of each, in microseconds per call.
 *     cc -O3 -march=native -ffp-contract=off -Iruntime -c tests/attn/attn_ref.c
 *     cc -O3 -march=native -Iruntime tests/attn/attn_bench.c attn_ref.o -lm
 *     ./a.out [BH T D causal dt]     (default: 64 64 16 1 f32, the char
 *                                     transformer's layer: B 16 x H 4)
 * dt: f32, f16 or bf16 (storage and compute). */
#include <time.h>
#include "mp_kernels.h"
#include "mp_kernels_gemm.h"
#include "mp_kernels_nn.h"
#include "attn_ref.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int64_t BH = argc > 1 ? atoll(argv[1]) : 64, T = argc > 2 ? atoll(argv[2]) : 64;
    int64_t D = argc > 3 ? atoll(argv[3]) : 16;
    int causal = argc > 4 ? atoi(argv[4]) : 1;
    const char *dn = argc > 5 ? argv[5] : "f32";
    int dt = !strcmp(dn, "f16") ? MP_F16 : !strcmp(dn, "bf16") ? MP_BF16 : MP_F32;
    int64_t n = BH * T * D, ng = BH * 3 * T * D;
    float *src = malloc((size_t)n * 4 * sizeof *src);
    for (int64_t i = 0; i < 4 * n; i++) src[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    void *in = malloc((size_t)n * 16), *y = malloc((size_t)n * 4), *g = malloc((size_t)ng * 4);
    mp_st_n(in, dt, 0, 1, 4 * n, src);
    size_t es = dt == MP_F32 ? 4 : 2;
    char *q = in, *k = q + n * es, *v = k + n * es, *dy = v + n * es;
    double best[4] = {1e9, 1e9, 1e9, 1e9};
    for (int round = 0; round < 7; round++)
        for (int which = 0; which < 4; which++) {
            int reps = 20;
            double t0 = now();
            for (int r = 0; r < reps; r++) {
                if (which == 0) mp_k_attention(y, dt, q, dt, k, dt, v, dt, BH, T, T, D, causal, dt);
                if (which == 1) ref_attention(y, dt, q, dt, k, dt, v, dt, BH, T, T, D, causal, dt);
                if (which == 2)
                    mp_k_attention_grad(g, dt, dy, dt, q, dt, k, dt, v, dt, BH, T, T, D, causal, dt);
                if (which == 3)
                    ref_attention_grad(g, dt, dy, dt, q, dt, k, dt, v, dt, BH, T, T, D, causal, dt);
            }
            double us = (now() - t0) / reps * 1e6;
            best[which] = us < best[which] ? us : best[which];
        }
    printf("attention %s BH=%lld T=%lld D=%lld causal=%d: forward %.0f us (old %.0f), "
           "backward %.0f us (old %.0f)\n", dn, (long long)BH, (long long)T, (long long)D,
           causal, best[0], best[1], best[2], best[3]);
    free(src), free(in), free(y), free(g);
    return 0;
}
