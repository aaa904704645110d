/* vmath.c - the vector math of runtime/mp_vmath.h on each path this CPU
 * has (portable, avx2, avx512; issue 22): ns per element of exp, tanh,
 * gelu (erf) and gelu's gradient over 64 Ki floats in [-8, 8) (L2-resident),
 * the best of 20 runs each, one thread. Every path gives the same bits
 * (tests/unit/test_vmath.c); this only times them.
 *   cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Iruntime bench/vmath.c \
 *      -o vmath -lm && ./vmath
 * (-O2 without -march: the vector paths are compiled through target
 * attributes and chosen at run time, as in a generated program).
 * Results: bench/RESULTS.md. */
#include "mp_kernels.h"
#include "bench_clock.h"

#define N (64 * 1024)

typedef void Fn(float *, int64_t);
typedef void Fn2(float *, const float *, int64_t);

static float x0[N], x[N], dy[N];

/* ns per element of the best of 20 runs of f (or g, a gradient) */
static double time_fn(Fn *f, Fn2 *g)
{
    double best = 1e9;
    for (int r = 0; r < 20; r++) {
        memcpy(x, x0, sizeof x);
        for (int i = 0; i < N; i++) dy[i] = 1.0f;
        double t0 = now();
        if (f)
            f(x, N);
        else
            g(dy, x, N);
        double t = now() - t0;
        best = t < best ? t : best;
    }
    return best * 1e9 / N;
}

int main(void)
{
    for (int i = 0; i < N; i++) x0[i] = -8.0f + 16.0f * (float)i / N;
#ifdef MP_X86
    struct { const char *name; int level; Fn *f[4]; Fn2 *g; } path[] = {
        {"portable", MP_CPU_PORTABLE, {mp_vexp_portable, mp_vtanh_portable, mp_vgelu_portable},
         mp_vgelu_grad_portable},
        {"avx2", MP_CPU_AVX2, {mp_vexp_avx2, mp_vtanh_avx2, mp_vgelu_avx2}, mp_vgelu_grad_avx2},
        {"avx512", MP_CPU_AVX512, {mp_vexp_avx512, mp_vtanh_avx512, mp_vgelu_avx512},
         mp_vgelu_grad_avx512},
    };
    printf("%-9s %9s %9s %9s %11s   (ns per element, one thread)\n", "path", "exp", "tanh",
           "gelu", "gelu_grad");
    for (size_t p = 0; p < sizeof path / sizeof path[0]; p++) {
        if (mp_cpu_hw() < path[p].level) {
            printf("%-9s not on this CPU\n", path[p].name);
            continue;
        }
        printf("%-9s", path[p].name);
        for (int k = 0; k < 3; k++) printf(" %9.3f", time_fn(path[p].f[k], NULL));
        printf(" %11.3f\n", time_fn(NULL, path[p].g));
    }
#else
    printf("not an x86 CPU: only the portable path, nothing to compare\n");
#endif
    return 0;
}
