/* gemm_shapes.c - where GPT-2 small's float32 step on the CPU goes (issue
 * 22): the micro-kernel's own rate on one core (its ceiling: a packed 6 x
 * nr tile over k = 256, in cache), then each of the step's 15 product
 * shapes (B 4 x T 64 = 256 rows; forward, dx, dw of the 4 linears a layer
 * and of the tied output layer) through mp_gemm on all threads, the best
 * of 6 runs (3 for the output layer's), and their sum weighted by how
 * often a step runs each (12 layers): the products' share of a step, and
 * their rate against THREADS x the micro-kernel's. f32 operands, or bf16
 * ones with BF16=1 (mixed_bfloat16's products: C in f32; the ceiling is
 * then the bf16 pairs' kernel where the CPU has AVX512_BF16); MP_CPU
 * chooses the kernel (as in a trainer). COLD=1 writes 256 MB before each
 * run, so that the operands come from memory, as in a trainer's step
 * (where a layer's weights were last read a whole pass earlier).
 *   cc -O3 -march=native -fopenmp -std=c11 -D_POSIX_C_SOURCE=200809L \
 *      -Iruntime bench/gemm_shapes.c -o gemm_shapes -lm
 *   OMP_NUM_THREADS=2 ./gemm_shapes
 * Results: bench/RESULTS.md. */
#include "mp_kernels_nn.h"
#include "bench_clock.h"

typedef struct Shape {
    const char *name;
    int64_t M, N, K;
    int ta, tb, count;
} Shape;

/* GFLOP/s of the micro-kernel alone: packed A and B panels of depth 256,
 * C a 6 x nr tile, all in L1/L2, best of 20 runs of 2000 calls. */
static double uk_rate(int dt)
{
    float *A = calloc(MP_MR * MP_KC, sizeof *A), *B = calloc(32 * MP_KC, sizeof *B);
    float C[MP_MR * 32];
    MpGemm g = {.adt = dt, .bdt = dt};
    MpUk uk = mp_uk(&g);
    for (int i = 0; i < MP_MR * MP_KC; i++) A[i] = 0.001f * (float)(i % 13);
    for (int i = 0; i < 32 * MP_KC; i++) B[i] = 0.001f * (float)(i % 11);
    double best = 1e9;
    for (int r = 0; r < 20; r++) {
        double t0 = now();
        /* the pairs' kernel takes kc / 2 steps of two k: the same k = 256 */
        for (int c = 0; c < 2000; c++)
            uk.fn(uk.pairs ? MP_KC / 2 : MP_KC, A, 1, MP_MR, B, C, uk.nr, c == 0);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    free(A);
    free(B);
    return 2.0 * MP_MR * uk.nr * MP_KC * 2000 / best * 1e-9;
}

int main(void)
{
    const Shape s[] = {
        {"fwd c_attn", 256, 2304, 768, 0, 1, 12},   {"fwd attn.c_proj", 256, 768, 768, 0, 1, 12},
        {"fwd c_fc", 256, 3072, 768, 0, 1, 12},     {"fwd mlp.c_proj", 256, 768, 3072, 0, 1, 12},
        {"fwd lm_head", 256, 50257, 768, 0, 1, 1},  {"dx c_attn", 256, 768, 2304, 0, 0, 12},
        {"dx attn.c_proj", 256, 768, 768, 0, 0, 12}, {"dx c_fc", 256, 768, 3072, 0, 0, 12},
        {"dx mlp.c_proj", 256, 3072, 768, 0, 0, 12}, {"dx lm_head", 256, 768, 50257, 0, 0, 1},
        {"dw c_attn", 2304, 768, 256, 1, 0, 12},    {"dw attn.c_proj", 768, 768, 256, 1, 0, 12},
        {"dw c_fc", 3072, 768, 256, 1, 0, 12},      {"dw mlp.c_proj", 768, 3072, 256, 1, 0, 12},
        {"dw lm_head", 50257, 768, 256, 1, 0, 1},
    };
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    int dt = getenv("BF16") && !strcmp(getenv("BF16"), "1") ? MP_BF16 : MP_F32;
    size_t es = dt == MP_BF16 ? 2 : 4;
    int cold = getenv("COLD") && !strcmp(getenv("COLD"), "1");
    size_t nflush = (size_t)64 << 20;
    float *flush = cold ? malloc(nflush * sizeof *flush) : NULL;
    double uk = uk_rate(dt), total = 0, flops = 0;
    printf("%s operands; micro-kernel (MP_CPU %s), one core: %.1f GFLOP/s; %d threads\n",
           dt == MP_BF16 ? "bf16" : "f32", mp_cpu_names[mp_cpu_level()], uk, threads);
    printf("%-16s %6s %6s %6s %9s %8s %7s %6s\n", "product", "M", "N", "K", "ms", "GFLOP/s",
           "of peak", "x step");
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        Shape x = s[i];
        char *A = malloc((size_t)(x.M * x.K) * es), *B = malloc((size_t)(x.K * x.N) * es);
        float *C = calloc((size_t)(x.M * x.N), sizeof *C);
        for (int64_t j = 0; j < x.M * x.K; j++) mp_st(A, dt, j, 0.01f * (float)(j % 7));
        for (int64_t j = 0; j < x.K * x.N; j++) mp_st(B, dt, j, 0.01f * (float)(j % 5));
        double best = 1e9;
        int runs = x.M * x.N * x.K > (int64_t)1 << 30 ? 3 : 6;
        for (int r = 0; r < runs; r++) {
            for (size_t j = 0; cold && j < nflush; j += 16) flush[j] = (float)r;
            double t0 = now();
            mp_gemm(x.ta, x.tb, x.M, x.N, x.K, 1.0f, A, dt, x.ta ? x.M : x.K, B, dt,
                    x.tb ? x.K : x.N, 0.0f, C, MP_F32, x.N);
            double t = now() - t0;
            best = t < best ? t : best;
        }
        double f = 2.0 * (double)x.M * (double)x.N * (double)x.K;
        printf("%-16s %6lld %6lld %6lld %9.2f %8.1f %6.0f%% %6d\n", x.name, (long long)x.M,
               (long long)x.N, (long long)x.K, best * 1e3, f / best * 1e-9,
               100.0 * f / best * 1e-9 / (uk * threads), x.count);
        total += best * x.count;
        flops += f * x.count;
        free(A);
        free(B);
        free(C);
    }
    printf("a step's products: %.1f GFLOP in %.1f ms, %.1f GFLOP/s, %.0f%% of %d x the "
           "micro-kernel's; at its rate: %.1f ms\n",
           flops * 1e-9, total * 1e3, flops / total * 1e-9,
           100.0 * flops / total * 1e-9 / (uk * threads), threads, flops / (uk * threads) * 1e-6);
    free(flush);
    return 0;
}
