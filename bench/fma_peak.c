/* fma_peak.c - the CPU's f32 multiply-add ceiling: GFLOP/s of 12
 * independent chains of vector FMAs (no loads), on 1 thread and on all of
 * OMP_NUM_THREADS, AVX-512 where the CPU has it, else AVX2 + FMA. What the
 * products' GFLOP/s (tests/bench_gemm.c) and a step's time are measured
 * against: on the Zen 4 VM of bench/RESULTS.md (AVX-512 units 256 bits
 * wide) it gives ~117 GFLOP/s a core. Not a test; x86 with GCC or clang:
 *   cc -O2 -fopenmp bench/fma_peak.c -o fma_peak && OMP_NUM_THREADS=2 ./fma_peak */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdio.h>
#include "bench_clock.h"

#define ITERS 25000000L   /* of 12 FMAs: ~1 s at 3 GHz for 512-bit vectors */

/* 12 chains of FMA on vectors of type T, in registers; the asm keeps
 * the compiler from folding or spilling them. */
#define CHAINS(T, ATTR)                                                       \
    ATTR static void chains_##T(long n)                                             \
    {                                                                               \
        T a = {0}, b = a, c0 = a, c1 = a, c2 = a, c3 = a, c4 = a, c5 = a, c6 = a,   \
          c7 = a, c8 = a, c9 = a, c10 = a, c11 = a;                                 \
        for (long k = 0; k < n; k++)                                                \
            __asm__ volatile(                                                       \
                "vfmadd231ps %[b], %[a], %[c0]\n\tvfmadd231ps %[b], %[a], %[c1]\n\t"  \
                "vfmadd231ps %[b], %[a], %[c2]\n\tvfmadd231ps %[b], %[a], %[c3]\n\t"  \
                "vfmadd231ps %[b], %[a], %[c4]\n\tvfmadd231ps %[b], %[a], %[c5]\n\t"  \
                "vfmadd231ps %[b], %[a], %[c6]\n\tvfmadd231ps %[b], %[a], %[c7]\n\t"  \
                "vfmadd231ps %[b], %[a], %[c8]\n\tvfmadd231ps %[b], %[a], %[c9]\n\t"  \
                "vfmadd231ps %[b], %[a], %[c10]\n\tvfmadd231ps %[b], %[a], %[c11]"   \
                : [c0] "+v"(c0), [c1] "+v"(c1), [c2] "+v"(c2), [c3] "+v"(c3),       \
                  [c4] "+v"(c4), [c5] "+v"(c5), [c6] "+v"(c6), [c7] "+v"(c7),       \
                  [c8] "+v"(c8), [c9] "+v"(c9), [c10] "+v"(c10), [c11] "+v"(c11)    \
                : [a] "v"(a), [b] "v"(b));                                          \
    }

typedef float V16 __attribute__((vector_size(64)));
typedef float V8 __attribute__((vector_size(32)));
CHAINS(V16, __attribute__((target("avx512f"))))
CHAINS(V8, __attribute__((target("avx2,fma"))))

/* The best of 3 runs on `threads` threads, GFLOP/s. */
static double peak(int threads, int wide)
{
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now();
#pragma omp parallel num_threads(threads)
        {
            if (wide)
                chains_V16(ITERS);
            else
                chains_V8(ITERS);
        }
        double gf = 2.0 * 12 * (wide ? 16 : 8) * ITERS * threads / (now() - t0) / 1e9;
        best = gf > best ? gf : best;
    }
    return best;
}

int main(void)
{
    __builtin_cpu_init();
    int wide = __builtin_cpu_supports("avx512f");
    if (!wide && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
        printf("fma_peak: this CPU has neither AVX-512 nor AVX2 + FMA\n");
        return 0;
    }
    int nt = omp_get_max_threads();
    printf("%s FMA peak: %.1f GFLOP/s on 1 thread, %.1f on %d\n", wide ? "AVX-512" : "AVX2",
           peak(1, wide), peak(nt, wide), nt);
    return 0;
}
