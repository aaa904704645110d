/* bench_gemm.c - GFLOP/s of mp_gemm against OpenBLAS's cblas_sgemm on the
 * products of the examples, at 1 and 2 threads, in one run. Not a test;
 * run by hand:
 *   cc -O3 -march=native -fopenmp -Iruntime tests/bench_gemm.c -o b -lopenblas -lm && ./b
 * Shapes: every product of a training step of bench/mnist_mlp2.mp (batch
 * 128: forward NT x w^T, backward NN dy w and TN dy^T x), of the linear
 * layers of examples/char_transformer.mp and examples/gpt2.mp (B*T = 1024
 * rows). Columns: mpcc with f32 operands, OpenBLAS (f32), their ratio,
 * and mpcc with f16 and bf16 operands (converted while packing; OpenBLAS
 * has no such product). Each figure is the best of the repeats within
 * SECS seconds (argument 1, default 0.3): on a shared machine the best is
 * the one to compare. Argument 2: the thread counts to run (default 12:
 * 1 then 2); argument 3: only the products whose name contains it
 * (e.g. "char"). mpcc and OpenBLAS take turns shape by shape, each
 * figure measured in a child process of its own: in one process the
 * threads one library leaves spinning after a call (OpenBLAS's pthreads,
 * libgomp's team) take the cores from the other's next call, and the
 * 2-thread figures of both collapse. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <omp.h>
#include "mp_kernels.h"
#include "mp_kernels_gemm.h"
#include <cblas.h>
#undef I
#undef complex

void openblas_set_num_threads(int num_threads);

typedef struct Shape {
    const char *name;
    int ta, tb;
    int64_t M, N, K;
} Shape;

static const Shape shapes[] = {
    {"mlp fc1 fwd", 0, 1, 128, 512, 784},   {"mlp fc1 dW", 1, 0, 512, 784, 128},
    {"mlp fc2 fwd", 0, 1, 128, 512, 512},   {"mlp fc2 dx", 0, 0, 128, 512, 512},
    {"mlp fc2 dW", 1, 0, 512, 512, 128},    {"mlp out fwd", 0, 1, 128, 10, 512},
    {"mlp out dx", 0, 0, 128, 512, 10},     {"mlp out dW", 1, 0, 10, 512, 128},
    {"char qkv fwd", 0, 1, 1024, 64, 64},   {"char qkv dx", 0, 0, 1024, 64, 64},
    {"char qkv dW", 1, 0, 64, 64, 1024},    {"char fc fwd", 0, 1, 1024, 256, 64},
    {"char fc dx", 0, 0, 1024, 64, 256},    {"char fc dW", 1, 0, 256, 64, 1024},
    {"char proj fwd", 0, 1, 1024, 64, 256}, {"char proj dx", 0, 0, 1024, 256, 64},
    {"char proj dW", 1, 0, 64, 256, 1024},  {"char head fwd", 0, 1, 1024, 65, 64},
    {"char head dx", 0, 0, 1024, 64, 65},   {"char head dW", 1, 0, 65, 64, 1024},
    {"gpt2 attn fwd", 0, 1, 1024, 384, 128}, {"gpt2 attn dx", 0, 0, 1024, 128, 384},
    {"gpt2 attn dW", 1, 0, 384, 128, 1024}, {"gpt2 fc fwd", 0, 1, 1024, 512, 128},
    {"gpt2 fc dx", 0, 0, 1024, 128, 512},   {"gpt2 fc dW", 1, 0, 512, 128, 1024},
    {"gpt2 proj fwd", 0, 1, 1024, 128, 512}, {"gpt2 proj dx", 0, 0, 1024, 512, 128},
    {"gpt2 proj dW", 1, 0, 128, 512, 1024},
    /* GPT-2 small at B 4 x T 64 (256 rows, width 768; issue 22) */
    {"gpt2s qkv fwd", 0, 1, 256, 2304, 768}, {"gpt2s qkv dx", 0, 0, 256, 768, 2304},
    {"gpt2s qkv dW", 1, 0, 2304, 768, 256},  {"gpt2s fc fwd", 0, 1, 256, 3072, 768},
    {"gpt2s fc dx", 0, 0, 256, 768, 3072},   {"gpt2s fc dW", 1, 0, 3072, 768, 256},
    {"gpt2s head fwd", 0, 1, 256, 50257, 768}, {"gpt2s head dx", 0, 0, 256, 768, 50257},
    {"gpt2s head dW", 1, 0, 50257, 768, 256},
};

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
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

/* Best GFLOP/s of the product over repeats within secs on th threads
 * (dt < 0: OpenBLAS), measured in a child process. */
static double gflops_here(const Shape *s, int dt, double secs)
{
    int64_t lda = s->ta ? s->M : s->K, ldb = s->tb ? s->K : s->N;
    int adt = dt < 0 ? MP_F32 : dt;
    void *a = tensor(s->M * s->K, adt), *b = tensor(s->K * s->N, adt);
    float *c = (float *)calloc((size_t)(s->M * s->N), 4);
    double best = 1e30;
    for (double t0 = now(); now() - t0 < secs;) {
        double t = now();
        if (dt < 0)
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                        s->tb ? CblasTrans : CblasNoTrans, (int)s->M, (int)s->N, (int)s->K,
                        1.0f, (const float *)a, (int)lda, (const float *)b, (int)ldb, 0.0f, c,
                        (int)s->N);
        else
            mp_gemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, a, adt, lda, b, adt, ldb, 0.0f, c,
                    MP_F32, s->N);
        t = now() - t;
        if (t < best)
            best = t;
    }
    free(a); free(b); free(c);
    return 2.0 * (double)(s->M * s->N * s->K) / best * 1e-9;
}

static double gflops(const Shape *s, int dt, int th, double secs)
{
    int fd[2];
    double r = 0;
    if (pipe(fd) != 0) {
        perror("pipe");
        exit(1);
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        omp_set_num_threads(th);
        openblas_set_num_threads(th);
        r = gflops_here(s, dt, secs);
        _exit(write(fd[1], &r, sizeof r) == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    int st;
    if (read(fd[0], &r, sizeof r) != (ssize_t)sizeof r || waitpid(pid, &st, 0) != pid ||
        !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "bench_gemm: the measuring child failed\n");
        exit(1);
    }
    close(fd[0]);
    return r;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 0.3;
    const char *threads = argc > 2 ? argv[2] : "12", *only = argc > 3 ? argv[3] : "";
    printf("%-14s %2s %5s %5s %5s %3s %8s %8s %6s %8s %8s\n", "product", "op", "M", "N", "K",
           "thr", "mpcc", "OpenBLAS", "ratio", "mpcc f16", "mpcc bf16");
    for (const char *tc = threads; *tc >= '1' && *tc <= '9'; tc++) {
        int th = *tc - '0';
        double lsum = 0, bsum = 0;   /* time of all shapes at the best rates */
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            const Shape *s = &shapes[i];
            if (!strstr(s->name, only))
                continue;
            double f = 2.0 * (double)(s->M * s->N * s->K) * 1e-9;
            double m = gflops(s, MP_F32, th, secs), o = gflops(s, -1, th, secs);
            double h = gflops(s, MP_F16, th, secs / 2), bf = gflops(s, MP_BF16, th, secs / 2);
            lsum += f / m;
            bsum += f / o;
            printf("%-14s %c%c %5lld %5lld %5lld %3d %8.1f %8.1f %6.2f %8.1f %8.1f\n", s->name,
                   s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', (long long)s->M, (long long)s->N,
                   (long long)s->K, th, m, o, m / o, h, bf);
            fflush(stdout);
        }
        printf("all products, %d thread%s: mpcc %.3f ms, OpenBLAS %.3f ms (ratio %.2f)\n", th,
               th > 1 ? "s" : "", lsum * 1e3, bsum * 1e3, bsum / lsum);
    }
    return 0;
}
