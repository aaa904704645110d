/* mp_exec.h - what the generated model code calls besides the kernels:
 * the arena, scalar loads, gradient accumulation into the runtime's flat
 * f32 buffer, and the numerics check after each op (MP_CHECK), which names
 * the op and its source line when run->check is on (--check-numerics, and
 * the replay that explains a loss-scale collapse). */
#ifndef MP_EXEC_H
#define MP_EXEC_H

#include "mp_half.h"
#include "mp_model.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* One zeroed allocation, 256-byte aligned (memplan's alignment). */
static inline void *mp_alloc_aligned(int64_t bytes)
{
    size_t n = (size_t)(bytes > 0 ? bytes : 1);
    n = (n + 255) / 256 * 256;
    void *p = NULL;
    if (posix_memalign(&p, 256, n) != 0)
        return NULL;
    memset(p, 0, n);
    return p;
}

static inline float mp_load_scalar(const void *p, int dt)
{
    switch (dt) {
    case MP_F16: return mp_f16_to_f32(*(const uint16_t *)p);
    case MP_BF16: return mp_bf16_to_f32(*(const uint16_t *)p);
    case MP_I32: return (float)*(const int32_t *)p;
    case MP_U8: return (float)*(const uint8_t *)p;
    case MP_U16: return (float)*(const uint16_t *)p;
    default: return *(const float *)p;
    }
}

/* 1 if any of the n values is inf or NaN. */
static inline int mp_nonfinite(const void *p, int64_t n, int dt)
{
    if (dt == MP_F32) {
        const float *f = (const float *)p;
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(f[i]))
                return 1;
        return 0;
    }
    if (dt == MP_F16 || dt == MP_BF16) {
        const uint16_t *h = (const uint16_t *)p;
        uint16_t e = dt == MP_F16 ? 0x7C00 : 0x7F80;   /* all-ones exponent */
        for (int64_t i = 0; i < n; i++)
            if ((h[i] & e) == e)
                return 1;
    }
    return 0;
}

#define MP_CHECK(buf, n, dt, op, where)                                      \
    do {                                                                     \
        if (run->check && mp_nonfinite((buf), (n), (dt))) {                  \
            run->bad_op = (op);                                              \
            run->bad_where = (where);                                        \
            return 1;                                                        \
        }                                                                    \
    } while (0)

/* The rows (or elements) a loss or metric averages over: all n of them, or,
 * in a padded evaluation batch (run->rows real samples of `batch`), those
 * of the real samples. The batch axis is the value's first, so they are
 * the first n / batch * rows. NULL run (a captured CUDA step): all. */
static inline int64_t mp_real_rows(const MpRun *run, int64_t n, int64_t batch)
{
    if (!run || run->rows <= 0 || run->rows >= batch || n % batch)
        return n;
    return n / batch * run->rows;
}

/* --predict: the chosen value, copied out as the forward pass makes it
 * (memplan may reuse its memory later in the pass). */
#define MP_KEEP(i, buf, bytes)                                               \
    do {                                                                     \
        if (run->keep == (i) + 1) {                                          \
            memcpy(run->kept, (buf), (size_t)(bytes));                       \
            run->kept_done = 1;                                              \
        }                                                                    \
    } while (0)

/* An attention's y stored [B, T, H, D] whose value is [B, H, T, D] (the
 * compiler read the transpose after it in place: ops.def ATTENTION ia[5]):
 * --predict's copy, axes 1 and 2 swapped back, rows of D elements. */
static inline void mp_swap12(void *dst, const void *src, int64_t esize, int64_t B, int64_t T,
                             int64_t H, int64_t D)
{
    size_t row = (size_t)(D * esize);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                memcpy((char *)dst + (size_t)((b * H + h) * T + t) * row,
                       (const char *)src + (size_t)((b * T + t) * H + h) * row, row);
}

#define MP_KEEP_BTHD(i, buf, esize, B, T, H, D)                              \
    do {                                                                     \
        if (run->keep == (i) + 1) {                                          \
            mp_swap12(run->kept, (buf), esize, B, T, H, D);                  \
            run->kept_done = 1;                                              \
        }                                                                    \
    } while (0)

/* A chunk attention reads in place (the compiler's ir_chunk_view): its
 * value is rows of `len` bytes, `stride` bytes apart in its input. */
static inline void mp_gather_rows(void *dst, const void *src, int64_t rows, int64_t len,
                                  int64_t stride)
{
    for (int64_t i = 0; i < rows; i++)
        memcpy((char *)dst + (size_t)(i * len), (const char *)src + (size_t)(i * stride), (size_t)len);
}

#define MP_KEEP_ROWS(i, buf, rows, len, stride)                              \
    do {                                                                     \
        if (run->keep == (i) + 1) {                                          \
            mp_gather_rows(run->kept, (buf), rows, len, stride);             \
            run->kept_done = 1;                                              \
        }                                                                    \
    } while (0)

/* grad += g: a parameter's gradient, over micro-batches and uses. */
static inline void mp_accumulate_grad(float *grad, const float *g, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        grad[i] += g[i];
}

#endif
