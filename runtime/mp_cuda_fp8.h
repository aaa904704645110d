/* mp_cuda_fp8.h - mixed_float8 on the GPU (PRECISION.md "Additions: TF32
 * and FP8"): the scales' state on the device, a tensor's amax, and a
 * product's operands quantised.
 *
 * The state is mp_fp8.h's MpFp8 with its arrays in device memory
 * (mp_cu.fp8, cut by mp_cu_layout): the step's graph reads the exponents
 * and writes the amaxes where they are, and the device's step decision
 * (MpCuDecide) runs mp_fp8_step_end there, so a captured step needs no
 * host value that changes from step to step. The host's MpFp8 (the
 * program's mp_fp8, which checkpoints and logs read) is brought level by
 * mp_cu_fp8_pull, and the device's from it by mp_cu_fp8_push.
 *
 * A quantised product, as the model's code makes it (compiler/emit_cuda.c
 * emit_cuda_product):
 *     mp_cu_fp8_observe<MP_BF16>(3, v7_h, 8192, r->training);  // first reader of slot 3
 *     if (mp_cu_fp8_on()) {
 *         const uint16_t *mp_q0 = mp_cu_fp8_quant<MP_BF16>(0, 3, v7_h, 8192);
 *         const uint16_t *mp_q1 = mp_cu_fp8_quant<MP_F32>(1, 4, v2_w, 4096);
 *         mp_cu_linear<MP_BF16, MP_BF16, MP_BF16, MP_BF16>(v8_y, mp_q0, mp_q1, ...);
 *     } else                                                     // --gradcheck: exact
 *         mp_cu_linear<MP_BF16, MP_BF16, MP_F32, MP_BF16>(v8_y, v7_h, v2_w, ...);
 * Each operand v becomes fp8(v 2^e) 2^-e: the quantised value q divided by
 * its scale, stored as bf16. That is exact: q has at most 4 significant
 * bits, and q 2^-e (|e| <= MP_FP8_EMAX) stays inside bf16's normal range,
 * which is f32's. The product then runs as any bf16 product (cuBLAS, f32
 * accumulation, bias and epilogues unchanged), and each of its terms is
 * 2^-(ea + eb) q_a q_b exactly, so its sum is 2^-(ea + eb) times the sum
 * of q_a q_b that the C program forms in its packing and scales once by
 * alpha (mp_kernels_gemm.h): the same value, barring sums below f32's
 * normal range, in either program's order of summation.
 *
 * What this is not yet: cuBLASLt's FP8 products (e4m3 / e5m2 bytes with
 * scale pointers, twice bf16's rate on sm_89 and later). The program says
 * so when it starts. */
#ifndef MP_CUDA_FP8_H
#define MP_CUDA_FP8_H

#include "mp_cuda.h"
#include "mp_fp8.h"

#define MP_CU_FP8_PARTS 256        /* blocks of a tensor's amax, at most */

/* Whether the products quantise: not under --gradcheck, whose products
 * are exact (mp_gemm_exact); in measure mode both ways are walked, so
 * that the quantised operands' bytes are noted. */
static inline int mp_cu_fp8_on(void) { return mp_cu.measure || !mp_gemm_exact; }

/* max |x[i]| over part b of x, a NaN counted as +inf (mp_fp8_merge treats
 * the two alike), into part[b] */
template <int XT>
struct MpCuFp8Amax {
    const void *x;
    int64_t n, per;
    float *part;
    MP_HD void operator()(int64_t b, const MpCuTeam &t) const
    {
        int64_t end = (b + 1) * per < n ? (b + 1) * per : n;
        float a = 0.0f;
        for (int64_t i = b * per + t.tid; i < end; i += t.nt) {
            float v = fabsf(mp_cu_ld(x, XT, i));
            a = v != v ? INFINITY : v > a ? v : a;
        }
        a = t.max(a);
        if (t.tid == 0)
            part[b] = a;
    }
};

/* The parts' largest into slot s (mp_fp8_merge) */
struct MpCuFp8Merge {
    MpFp8 *f;
    const float *part;
    int nparts, s, training;
    MP_HD void operator()() const
    {
        float a = 0.0f;
        for (int b = 0; b < nparts; b++)
            a = part[b] > a ? part[b] : a;
        mp_fp8_merge(f, s, a, training);
    }
};

/* Slot s (1-based) is read by its first product: mp_fp8_observe, on the
 * device. */
template <int XT>
static inline void mp_cu_fp8_observe(int s, const void *x, int64_t n, int training)
{
    if (mp_cu.measure || !mp_cu.fp8)
        return;
    int64_t parts = (n + 65535) / 65536;
    parts = parts < 1 ? 1 : parts > MP_CU_FP8_PARTS ? MP_CU_FP8_PARTS : parts;
    MpCuFp8Amax<XT> a = {x, n, (n + parts - 1) / parts, mp_cu.fp8_part};
    MpCuFp8Merge m = {mp_cu.fp8, mp_cu.fp8_part, (int)parts, s, training};
    mp_cu_rows("fp8_amax", parts, 256, a);
    mp_cu_one("fp8_merge", m);
}

/* q[i] = fp8(x[i] 2^e) 2^-e as bf16, with slot s's format and exponent e */
template <int XT>
struct MpCuFp8Quant {
    uint16_t *q;
    const void *x;
    const MpFp8 *f;
    int s;
    MP_HD void operator()(int64_t i) const
    {
        int e = f->exp[s - 1];
        MpFp8Fmt fmt = (MpFp8Fmt)f->fmt[s - 1];
        float v = mp_fp8_round(mp_cu_ld(x, XT, i) * mp_pow2f(e), fmt) * mp_pow2f(-e);
        q[i] = mp_f32_to_bf16(v);
    }
};

/* Operand k (0, 1) of the next product, x[0..n) quantised with slot s: its
 * bf16 copy in the fp8 workspace (NULL in measure mode, which notes the
 * bytes). */
template <int XT>
static inline const uint16_t *mp_cu_fp8_quant(int k, int s, const void *x, int64_t n)
{
    int64_t bytes = mp_cu_round_up(n * 2);
    if (bytes > mp_cu.fp8_need)
        mp_cu.fp8_need = bytes;
    if (mp_cu.measure || n <= 0)
        return mp_cu.fp8_q[k];
    MpCuFp8Quant<XT> f = {mp_cu.fp8_q[k], x, mp_cu.fp8, s};
    mp_cu_each("fp8_quantise", n, f);
    return mp_cu.fp8_q[k];
}

/* ---- the state between host and device ------------------------------------- */

/* The device's state cut from mem at *at (mp_cu_layout; mem NULL: only
 * counted), for the host's h (NULL: no mixed_float8, nothing). */
static inline void mp_cu_fp8_layout(unsigned char *mem, int64_t *at, const MpFp8 *h)
{
    if (!h) {
        mp_cu.fp8 = NULL;
        return;
    }
    int64_t n = h->nslots, hist = (int64_t)h->history * n;
    mp_cu.fp8_at = *h;             /* its sizes; the arrays' addresses follow */
#define MP_CU_FP8_CUT(ptr, type, bytes) (ptr = (type)(mem ? mem + *at : NULL), *at += mp_cu_round_up(bytes))
    MP_CU_FP8_CUT(mp_cu.fp8, MpFp8 *, (int64_t)sizeof(MpFp8));
    MP_CU_FP8_CUT(mp_cu.fp8_at.fmt, const unsigned char *, n);
    MP_CU_FP8_CUT(mp_cu.fp8_at.exp, int *, n * (int64_t)sizeof(int));
    MP_CU_FP8_CUT(mp_cu.fp8_at.amax, float *, n * (int64_t)sizeof(float));
    MP_CU_FP8_CUT(mp_cu.fp8_at.hist, float *, hist * (int64_t)sizeof(float));
    MP_CU_FP8_CUT(mp_cu.fp8_part, float *, MP_CU_FP8_PARTS * (int64_t)sizeof(float));
    MP_CU_FP8_CUT(mp_cu.fp8_q[0], uint16_t *, mp_cu.fp8_need);
    MP_CU_FP8_CUT(mp_cu.fp8_q[1], uint16_t *, mp_cu.fp8_need);
#undef MP_CU_FP8_CUT
}

/* The host's state h to the device (at the start; before each eager pass
 * in host mode, where the host's trainer ends the steps). */
static inline void mp_cu_fp8_push(const MpFp8 *h)
{
    if (!mp_cu.fp8 || !h)
        return;
    MpFp8 d = *h;
    int64_t n = h->nslots;
    d.fmt = mp_cu.fp8_at.fmt;
    d.exp = mp_cu.fp8_at.exp;
    d.amax = mp_cu.fp8_at.amax;
    d.hist = mp_cu.fp8_at.hist;
    mp_cu_ok(cudaMemcpyAsync(mp_cu.fp8, &d, sizeof d, cudaMemcpyHostToDevice, mp_cu.st), "fp8 state");
    mp_cu_ok(cudaMemcpyAsync((void *)d.fmt, h->fmt, (size_t)n, cudaMemcpyHostToDevice, mp_cu.st), "fp8 state");
    mp_cu_ok(cudaMemcpyAsync(d.exp, h->exp, (size_t)n * sizeof(int), cudaMemcpyHostToDevice, mp_cu.st),
             "fp8 state");
    mp_cu_ok(cudaMemcpyAsync(d.amax, h->amax, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, mp_cu.st),
             "fp8 state");
    mp_cu_ok(cudaMemcpyAsync(d.hist, h->hist, (size_t)(h->history * n) * sizeof(float),
                             cudaMemcpyHostToDevice, mp_cu.st), "fp8 state");
    mp_cu_ok(cudaStreamSynchronize(mp_cu.st), "fp8 state");   /* d and h are read until then */
}

/* The device's state into the host's h: exponents, amaxes, histories,
 * the steps recorded and the last step's range (checkpoints, logs). */
static inline void mp_cu_fp8_pull(MpFp8 *h)
{
    if (!mp_cu.fp8 || !h)
        return;
    MpFp8 d;
    int64_t n = h->nslots;
    mp_cu_ok(cudaMemcpyAsync(&d, mp_cu.fp8, sizeof d, cudaMemcpyDeviceToHost, mp_cu.st), "fp8 state");
    mp_cu_ok(cudaMemcpyAsync(h->exp, mp_cu.fp8_at.exp, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost,
                             mp_cu.st), "fp8 state");
    mp_cu_ok(cudaMemcpyAsync(h->amax, mp_cu.fp8_at.amax, (size_t)n * sizeof(float),
                             cudaMemcpyDeviceToHost, mp_cu.st), "fp8 state");
    mp_cu_ok(cudaMemcpyAsync(h->hist, mp_cu.fp8_at.hist, (size_t)(h->history * n) * sizeof(float),
                             cudaMemcpyDeviceToHost, mp_cu.st), "fp8 state");
    mp_cu_ok(cudaStreamSynchronize(mp_cu.st), "fp8 state");
    h->steps = d.steps;
    h->lo = d.lo;
    h->hi = d.hi;
}

#endif
