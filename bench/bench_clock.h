/* bench_clock.h - the monotonic clock the C benchmarks in bench/ time with. */
#ifndef BENCH_CLOCK_H
#define BENCH_CLOCK_H
#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
#endif
