/* mp_cuda_items.h - the work of one GPU thread, for every kernel of the
 * CUDA program (runtime/mp_cuda_ops.h launches them).
 *
 * Each kernel is a thin loop over "items" (an output element, a row, a
 * channel) that calls a function from here. These functions hold all the
 * index arithmetic and per-element math, and are MP_HD plain C, so that
 * tests/unit/test_cuda_host.c runs them on the CPU over every item and
 * compares with the C program's kernels (mp_kernels.h): the GPU's
 * arithmetic is checked without a GPU. Where a kernel's threads cooperate
 * on one item (a block per row), the item function takes the thread's
 * share as (tid, nt) - the elements tid, tid + nt, ... - and returns a
 * partial result that the kernel combines; on the CPU, (0, 1) is the whole.
 *
 * Rules as mp_kernels.h: load the storage type, compute in f32, store once
 * in the storage type. Sums of many terms, which the C program adds in
 * double, are compensated f32 sums here (MpAcc: double runs at 1/64 rate on
 * consumer GPUs); their error stays below the f32 rounding of the result. Loads and stores use
 * the GPU's converters on the device (same results as mp_half.h's for every
 * non-NaN value) and mp_ld / mp_st elsewhere. */
#ifndef MP_CUDA_ITEMS_H
#define MP_CUDA_ITEMS_H

#include <math.h>
#include <stdint.h>
#include "mp_model.h"
#include "mp_half.h"
#include "mp_kernels.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif

/* ---- compensated sums ---------------------------------------------------- */

/* A sum in f32 with its rounding error carried along (Knuth's TwoSum per
 * addition, the errors summed in c: the compensated sum of Neumaier/Ogita-
 * Rump-Oishi's Sum2): s + c is the sum with an error of about one f32
 * rounding of the result plus n * 2^-48 * sum|terms|, where a plain f32 sum
 * has n * 2^-24 * sum|terms|. Branch-free, so every lane of a warp runs it
 * in step; two partial sums join with the same TwoSum (mp_acc_join), which
 * makes the block's tree of mp_cu_block_reduce compensated too. */
typedef struct MpAcc {
    float s, c;
} MpAcc;

/* a + b and a - b rounded once each: on the GPU never fused with a product
 * into an FMA (which would break TwoSum's exact error), as on the CPU. */
#ifdef __CUDA_ARCH__
#define MP_ACC_ADD(a, b) __fadd_rn((a), (b))
#define MP_ACC_SUB(a, b) __fsub_rn((a), (b))
#else
#define MP_ACC_ADD(a, b) ((a) + (b))
#define MP_ACC_SUB(a, b) ((a) - (b))
#endif

static inline MP_HD MpAcc mp_acc_zero(void)
{
    MpAcc a = {0.0f, 0.0f};
    return a;
}

/* a.s + v exactly as a rounded sum t and its error (TwoSum), error into c */
static inline MP_HD void mp_acc_add(MpAcc *a, float v)
{
    float t = MP_ACC_ADD(a->s, v), bv = MP_ACC_SUB(t, a->s);
    float err = MP_ACC_ADD(MP_ACC_SUB(a->s, MP_ACC_SUB(t, bv)), MP_ACC_SUB(v, bv));
    a->s = t;
    a->c = MP_ACC_ADD(a->c, err);
}

/* The sum of two compensated sums (a tree's combine): TwoSum of the two
 * sums, their corrections added. */
static inline MP_HD MpAcc mp_acc_join(MpAcc a, MpAcc b)
{
    mp_acc_add(&a, b.s);
    a.c = MP_ACC_ADD(a.c, b.c);
    return a;
}

/* The sum, rounded once to f32. Once s is inf or NaN it stays so (as a
 * plain sum would) and c, made of inf - inf, means nothing. */
static inline MP_HD float mp_acc_get(MpAcc a) { return isfinite(a.s) ? MP_ACC_ADD(a.s, a.c) : a.s; }

/* ---- storage -------------------------------------------------------------- */

static inline MP_HD float mp_cu_ld(const void *p, int dt, int64_t i)
{
#ifdef __CUDA_ARCH__
    if (dt == MP_F16)
        return __half2float(__ushort_as_half(((const unsigned short *)p)[i]));
    if (dt == MP_BF16)
        return __bfloat162float(__ushort_as_bfloat16(((const unsigned short *)p)[i]));
#endif
    return mp_ld(p, dt, i);
}

static inline MP_HD void mp_cu_st(void *p, int dt, int64_t i, float v)
{
#ifdef __CUDA_ARCH__
    if (dt == MP_F16) {
        ((unsigned short *)p)[i] = __half_as_ushort(__float2half_rn(v));
        return;
    }
    if (dt == MP_BF16) {
        ((unsigned short *)p)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
        return;
    }
#endif
    mp_st(p, dt, i, v);
}

static inline MP_HD int mp_cu_dt_size(int dt)
{
    return dt == MP_F32 || dt == MP_I32 ? 4 : dt == MP_U8 ? 1 : 2;
}

/* p[i] = v + beta * p[i] (beta 0: p is not read) */
static inline MP_HD void mp_cu_st_beta(void *p, int dt, int64_t i, float v, float beta)
{
    mp_cu_st(p, dt, i, beta != 0.0f ? v + beta * mp_cu_ld(p, dt, i) : v);
}

/* ---- strided views: element i of a dense output at an offset of x -------- */

/* Output index i, row-major over n[0..rank), reads x at sum idx[d] * s[d]. */
typedef struct MpCuView {
    int rank;
    int64_t n[MP_MAX_RANK], s[MP_MAX_RANK];
} MpCuView;

static inline MP_HD int64_t mp_cu_view_at(const MpCuView *v, int64_t i)
{
    int64_t off = 0;
    for (int d = v->rank - 1; d >= 0; d--) {
        off += (i % v->n[d]) * v->s[d];
        i /= v->n[d];
    }
    return off;
}

static inline MP_HD int64_t mp_cu_view_numel(const MpCuView *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++)
        n *= v->n[d];
    return n;
}

/* Appends dim (n, stride) to v, merging it into the previous dim when the
 * two are contiguous; dims of size 1 are dropped. */
static inline void mp_cu_view_push(MpCuView *v, int64_t n, int64_t s)
{
    if (n == 1)
        return;
    if (v->rank > 0 && v->s[v->rank - 1] == n * s) {
        v->n[v->rank - 1] *= n;
        v->s[v->rank - 1] = s;
        return;
    }
    v->n[v->rank] = n;
    v->s[v->rank] = s;
    v->rank++;
}

/* y = x.permute(perm): y's dim d is x's dim perm[d]. */
static inline MpCuView mp_cu_view_permute(int rank, const int64_t *xsh, const int64_t *perm)
{
    int64_t xs[MP_MAX_RANK], st = 1;
    MpCuView v;
    v.rank = 0;
    for (int d = rank - 1; d >= 0; d--) {
        xs[d] = st;
        st *= xsh[d];
    }
    for (int d = 0; d < rank; d++)
        mp_cu_view_push(&v, xsh[perm[d]], xs[perm[d]]);
    return v;
}

/* Broadcasting a and b to y (mp_kernels.h's MpBcast): offsets of element i. */
static inline MP_HD void mp_cu_bcast_at(const MpBcast *p, int64_t i, int64_t *ao, int64_t *bo)
{
    int64_t a = 0, b = 0;
    for (int d = p->rank - 1; d >= 0; d--) {
        int64_t q = i % p->n[d];
        i /= p->n[d];
        a += q * p->sa[d];
        b += q * p->sb[d];
    }
    *ao = a;
    *bo = b;
}

/* ---- structural ops: chunk, slice, concat, expand, arange ------------------ */

/* y[yi] = x[xi]: the stored bits when the types agree, else converted */
static inline MP_HD void mp_cu_mv(void *y, int ydt, int64_t yi, const void *x, int xdt, int64_t xi)
{
    if (ydt != xdt)
        mp_cu_st(y, ydt, yi, mp_cu_ld(x, xdt, xi));
    else if (mp_cu_dt_size(ydt) == 4)
        ((uint32_t *)y)[yi] = ((const uint32_t *)x)[xi];
    else if (mp_cu_dt_size(ydt) == 2)
        ((uint16_t *)y)[yi] = ((const uint16_t *)x)[xi];
    else
        ((uint8_t *)y)[yi] = ((const uint8_t *)x)[xi];
}

/* Element i of a window [outer, wlen, inner] -> its index in the big
 * tensor [outer, blen, inner], the window starting at `start` (slice reads
 * there, concat writes there) */
static inline MP_HD int64_t mp_cu_window_at(int64_t i, int64_t blen, int64_t inner, int64_t start,
                                            int64_t wlen)
{
    int64_t k = i % inner, q = i / inner;
    return ((q / wlen) * blen + start + q % wlen) * inner + k;
}

/* slice_grad: element i of y [outer, blen, inner] from the window x, 0 outside */
static inline MP_HD void mp_cu_pad_at(void *y, int ydt, const void *x, int xdt, int64_t i, int64_t blen,
                                      int64_t inner, int64_t start, int64_t wlen)
{
    int64_t k = i % inner, q = i / inner, j = q % blen - start;
    if (j >= 0 && j < wlen)
        mp_cu_mv(y, ydt, i, x, xdt, ((q / blen) * wlen + j) * inner + k);
    else
        mp_cu_st(y, ydt, i, 0.0f);
}

/* expand: x's strides over y's dims (0 where x repeats) */
static inline MpCuView mp_cu_view_broadcast(int yr, const int64_t *ysh, int xr, const int64_t *xsh)
{
    int64_t s[MP_MAX_RANK];
    MpCuView v;
    v.rank = 0;
    mp_bcast_strides(yr, xr, xsh, s);
    for (int d = 0; d < yr; d++)
        mp_cu_view_push(&v, ysh[d], s[d]);
    return v;
}

/* ---- reductions: y[j] = scale * sum_r x[out(j) + red(r)] (+ beta y[j]) ---- */

typedef struct MpCuRed {
    MpCuView out, red;
    int64_t nout, nred;
    float scale;
} MpCuRed;

static inline MpCuRed mp_cu_red_make(float scale)
{
    MpCuRed r;
    memset(&r, 0, sizeof r);
    r.scale = scale;
    return r;
}

static inline void mp_cu_red_done(MpCuRed *r)
{
    r->nout = mp_cu_view_numel(&r->out);
    r->nred = mp_cu_view_numel(&r->red);
}

/* x [outer, len, inner] reduced over len: sum, mean, global_avg_pool. */
static inline MpCuRed mp_cu_red_axis(int64_t outer, int64_t len, int64_t inner, float scale)
{
    MpCuRed r = mp_cu_red_make(scale);
    mp_cu_view_push(&r.out, outer, len * inner);
    mp_cu_view_push(&r.out, inner, 1);
    mp_cu_view_push(&r.red, len, inner);
    mp_cu_red_done(&r);
    return r;
}

/* x [N, C, S] -> y [C]: conv and batch-norm bias gradients. */
static inline MpCuRed mp_cu_red_channels(int64_t N, int64_t C, int64_t S)
{
    MpCuRed r = mp_cu_red_make(1.0f);
    mp_cu_view_push(&r.out, C, S);
    mp_cu_view_push(&r.red, N, C * S);
    mp_cu_view_push(&r.red, S, 1);
    mp_cu_red_done(&r);
    return r;
}

/* dy summed down to y's shape (y broadcasts to dy's): sum_to. */
static inline MpCuRed mp_cu_red_sum_to(int yr, const int64_t *ysh, int dyr, const int64_t *dysh)
{
    MpCuRed r = mp_cu_red_make(1.0f);
    int64_t st[MP_MAX_RANK], s = 1;
    for (int d = dyr - 1; d >= 0; d--) {
        st[d] = s;
        s *= dysh[d];
    }
    for (int d = 0; d < dyr; d++) {
        int yd = d - (dyr - yr);
        int64_t yn = yd >= 0 ? ysh[yd] : 1;
        if (yn == dysh[d])
            mp_cu_view_push(&r.out, dysh[d], st[d]);
        else
            mp_cu_view_push(&r.red, dysh[d], st[d]);
    }
    mp_cu_red_done(&r);
    return r;
}

/* Items of a reduction: single elements, or (a contiguous run, as the C
 * program's mp_sum_n) chunks of MP_CHUNK summed in f32. */
static inline MP_HD int64_t mp_cu_red_items(const MpCuRed *r)
{
    int runs = r->red.rank == 1 && r->red.s[0] == 1;
    return runs ? (r->nred + MP_CHUNK - 1) / MP_CHUNK : r->nred;
}

/* The part (items i0, i0 + step, ... < i1) of output j's sum, compensated. */
static inline MP_HD MpAcc mp_cu_red_range(const MpCuRed *r, const void *x, int xdt, int64_t j,
                                          int64_t i0, int64_t i1, int64_t step)
{
    int64_t base = mp_cu_view_at(&r->out, j), n = mp_cu_red_items(r);
    MpAcc s = mp_acc_zero();
    if (i1 > n)
        i1 = n;
    if (n == r->nred) {
        for (int64_t k = i0; k < i1; k += step)
            mp_acc_add(&s, mp_cu_ld(x, xdt, base + mp_cu_view_at(&r->red, k)));
        return s;
    }
    for (int64_t c = i0; c < i1; c += step) {
        int64_t end = (c + 1) * MP_CHUNK < r->nred ? (c + 1) * MP_CHUNK : r->nred;
        float part = 0.0f;
        for (int64_t k = c * MP_CHUNK; k < end; k++)
            part += mp_cu_ld(x, xdt, base + k);
        mp_acc_add(&s, part);
    }
    return s;
}

static inline MP_HD MpAcc mp_cu_red_part(const MpCuRed *r, const void *x, int xdt, int64_t j,
                                          int64_t i0, int64_t step)
{
    return mp_cu_red_range(r, x, xdt, j, i0, r->nred, step);
}

static inline MP_HD void mp_cu_red_store(const MpCuRed *r, void *y, int ydt, int64_t j,
                                         MpAcc sum, float beta)
{
    mp_cu_st_beta(y, ydt, j, mp_acc_get(sum) * r->scale, beta);
}

/* Gradient of sum / mean: y[o, l, i] = scale * dy[o, i]; element e of y. */
static inline MP_HD float mp_cu_expand_at(const void *dy, int dydt, int64_t e, int64_t len,
                                          int64_t inner, float scale)
{
    int64_t o = e / (len * inner), i = e % inner;
    return scale * mp_cu_ld(dy, dydt, o * inner + i);
}

/* ---- rows: softmax and friends over x [outer, len, inner] ------------------ */

/* Row `row` (of outer * inner) starts at off; its elements are inner apart. */
static inline MP_HD int64_t mp_cu_row_off(int64_t row, int64_t len, int64_t inner)
{
    return (row / inner) * len * inner + row % inner;
}

static inline MP_HD float mp_cu_row_max(const void *x, int xdt, int64_t off, int64_t len,
                                        int64_t stride, int tid, int nt)
{
    float m = -INFINITY;
    for (int64_t l = tid; l < len; l += nt) {
        float v = mp_cu_ld(x, xdt, off + l * stride);
        m = v > m ? v : m;
    }
    return m;
}

/* This thread's share of the row's sum of exp(x - m), compensated; exp is
 * the C program's (mp_expf_p, as mp_vexp), the one the values it normalises
 * are taken with, so that they sum to 1 as there (not CUDA's expf). */
static inline MP_HD MpAcc mp_cu_sumexp_part(const void *x, int xdt, int64_t off, int64_t len,
                                            int64_t stride, float m, int tid, int nt)
{
    MpAcc s = mp_acc_zero();
    for (int64_t l = tid; l < len; l += nt)
        mp_acc_add(&s, mp_expf_p(mp_cu_ld(x, xdt, off + l * stride) - m));
    return s;
}

/* y = softmax (or log_softmax) of the row, given its max m and sum of exp s */
static inline MP_HD void mp_cu_softmax_put(void *y, int ydt, const void *x, int xdt, int64_t off,
                                           int64_t len, int64_t stride, float m, float s,
                                           int log_, int tid, int nt)
{
    float inv = 1.0f / s, lse = m + logf(s);
    for (int64_t l = tid; l < len; l += nt) {
        float v = mp_cu_ld(x, xdt, off + l * stride);
        mp_cu_st(y, ydt, off + l * stride, log_ ? v - lse : mp_expf_p(v - m) * inv);
    }
}

/* The row's sum for the softmax gradients: sum(dy * y), or sum(dy) (log). */
static inline MP_HD MpAcc mp_cu_softmax_grad_sum(const void *dy, int dydt, const void *y,
                                                 int ydt, int64_t off, int64_t len,
                                                 int64_t stride, int log_, int tid, int nt)
{
    MpAcc s = mp_acc_zero();
    for (int64_t l = tid; l < len; l += nt) {
        float g = mp_cu_ld(dy, dydt, off + l * stride);
        mp_acc_add(&s, log_ ? g : g * mp_cu_ld(y, ydt, off + l * stride));
    }
    return s;
}

/* dx = y (dy - s), or dy - exp(y) s (log) */
static inline MP_HD void mp_cu_softmax_grad_put(void *dx, int dxdt, const void *dy, int dydt,
                                                const void *y, int ydt, int64_t off, int64_t len,
                                                int64_t stride, float fs, int log_, int tid,
                                                int nt)
{
    for (int64_t l = tid; l < len; l += nt) {
        float g = mp_cu_ld(dy, dydt, off + l * stride), v = mp_cu_ld(y, ydt, off + l * stride);
        mp_cu_st(dx, dxdt, off + l * stride, log_ ? g - mp_expf_p(v) * fs : v * (g - fs));
    }
}

/* Cross-entropy of one row given its max, sum of exp and (eps != 0) sum
 * of x, with label smoothing eps; NaN for a label outside [0, C), as
 * mp_ce_row. */
static inline MP_HD float mp_cu_ce_row(const void *x, int xdt, int64_t off, int64_t C,
                                       int64_t label, float m, float s, float eps, float sx)
{
    if (label < 0 || label >= C)
        return NAN;
    float lse = m + logf(s);
    if (eps == 0.0f)
        return lse - mp_cu_ld(x, xdt, off + label);
    return (1.0f - eps) * (lse - mp_cu_ld(x, xdt, off + label)) + eps * (lse - sx / (float)C);
}

/* dx = g (softmax(x) - (1 - eps) onehot(label) - eps / C), g = dl / count */
static inline MP_HD void mp_cu_ce_grad_put(void *dx, int dxdt, const void *x, int xdt, int64_t off,
                                           int64_t C, int64_t label, float m, float s, float g,
                                           float eps, int tid, int nt)
{
    float inv = 1.0f / s;
    for (int64_t j = tid; j < C; j += nt) {
        float p = mp_expf_p(mp_cu_ld(x, xdt, off + j) - m) * inv;
        mp_cu_st(dx, dxdt, off + j, g * (p - (j == label ? 1.0f - eps : 0.0f) - eps / (float)C));
    }
}

/* The first maximum of the row at or after position tid (step nt):
 * (value, index); combine two with mp_cu_argmax_pick. */
static inline MP_HD int64_t mp_cu_argmax_part(const void *x, int xdt, int64_t off, int64_t C,
                                              int tid, int nt, float *best)
{
    int64_t at = -1;
    float b = -INFINITY;
    for (int64_t j = tid; j < C; j += nt) {
        float v = mp_cu_ld(x, xdt, off + j);
        if (at < 0 || v > b) {
            b = v;
            at = j;
        }
    }
    *best = b;
    return at;
}

/* Of two (value, index) candidates, the larger, the lower index on a tie. */
static inline MP_HD int64_t mp_cu_argmax_pick(float va, int64_t ia, float vb, int64_t ib, float *v)
{
    int b_wins = ia < 0 || (ib >= 0 && (vb > va || (vb == va && ib < ia)));
    *v = b_wins ? vb : va;
    return b_wins ? ib : ia;
}

/* Chunk w (MP_CHUNK elements) of the squared error, compensated (mp_k_mse
 * sums in double). */
static inline MP_HD MpAcc mp_cu_mse_chunk(const void *p, int pdt, const void *t, int tdt,
                                          int64_t n, int64_t w)
{
    MpAcc s = mp_acc_zero();
    int64_t end = (w + 1) * MP_CHUNK < n ? (w + 1) * MP_CHUNK : n;
    for (int64_t i = w * MP_CHUNK; i < end; i++) {
        float a = mp_cu_ld(p, pdt, i), b = mp_cu_ld(t, tdt, i);
        mp_acc_add(&s, (a - b) * (a - b));
    }
    return s;
}

/* ---- normalisation: mean and 1/std of a set of values ------------------- */

/* Layer norm's row r of x [rows, dim] or batch norm's channel c of x [N, C,
 * S]: the elements e = tid, tid + nt, ... < count sit at mp_cu_norm_at. */
typedef struct MpCuNorm {
    int64_t count;          /* values in the set */
    int64_t inner, outer;   /* layer norm: count, 1; batch norm: S, C*S */
} MpCuNorm;

static inline MP_HD int64_t mp_cu_norm_at(const MpCuNorm *g, int64_t base, int64_t e)
{
    return base + (e / g->inner) * g->outer + e % g->inner;
}

/* The weight (and bias) index of a set's element e: one per set (per = 0:
 * wi, batch norm), or one per `per` consecutive elements from wi (layer
 * norm: per 1, wi 0; group norm: per S, wi the group's first channel). */
static inline MP_HD int64_t mp_cu_norm_wi(int64_t per, int64_t wi, int64_t e)
{
    return per ? wi + e / per : wi;
}

/* This thread's share of the sum of x - shift (or of its squares). */
static inline MP_HD MpAcc mp_cu_norm_sum(const MpCuNorm *g, const void *x, int xdt, int64_t base,
                                         float shift, int tid, int nt, int squares)
{
    MpAcc s = mp_acc_zero();
    for (int64_t e = tid; e < g->count; e += nt) {
        float v = mp_cu_ld(x, xdt, mp_cu_norm_at(g, base, e)) - shift;
        mp_acc_add(&s, squares ? v * v : v);
    }
    return s;
}

/* Sums of dy*w and of dy*w*xhat (w: 1 when NULL) for the input gradient;
 * the weight's index as mp_cu_norm_wi says. */
static inline MP_HD void mp_cu_norm_grad_sums(const MpCuNorm *g, const void *dy, int dydt,
                                              const void *x, int xdt, const void *w, int wdt,
                                              int64_t w_per_elem, int64_t wi, int64_t base,
                                              float mean, float rstd, int tid, int nt,
                                              MpAcc *s1, MpAcc *s2)
{
    MpAcc a = mp_acc_zero(), b = mp_acc_zero();
    for (int64_t e = tid; e < g->count; e += nt) {
        int64_t at = mp_cu_norm_at(g, base, e);
        float wv = w ? mp_cu_ld(w, wdt, mp_cu_norm_wi(w_per_elem, wi, e)) : 1.0f;
        float gy = mp_cu_ld(dy, dydt, at) * wv;
        float xh = (mp_cu_ld(x, xdt, at) - mean) * rstd;
        mp_acc_add(&a, gy);
        mp_acc_add(&b, gy * xh);
    }
    *s1 = a;
    *s2 = b;
}

/* dx at element `at` = rstd (gy - m1 - xhat m2), gy = dy wv, given the
 * means m1 of gy and m2 of gy xhat */
static inline MP_HD void mp_cu_norm_dx_at(void *dx, int dxdt, const void *dy, int dydt, const void *x,
                                          int xdt, int64_t at, float wv, float mean, float rstd,
                                          float m1, float m2)
{
    float gy = mp_cu_ld(dy, dydt, at) * wv;
    float xh = (mp_cu_ld(x, xdt, at) - mean) * rstd;
    mp_cu_st(dx, dxdt, at, rstd * (gy - m1 - xh * m2));
}

/* dx = rstd (dy*w - mean(dy*w) - xhat mean(dy*w*xhat)) */
static inline MP_HD void mp_cu_norm_grad_put(const MpCuNorm *g, void *dx, int dxdt, const void *dy,
                                             int dydt, const void *x, int xdt, const void *w,
                                             int wdt, int64_t w_per_elem, int64_t wi, int64_t base,
                                             float mean, float rstd, float s1, float s2, int tid,
                                             int nt)
{
    float m1 = s1 / (float)g->count, m2 = s2 / (float)g->count;
    for (int64_t e = tid; e < g->count; e += nt) {
        int64_t at = mp_cu_norm_at(g, base, e);
        float wv = w ? mp_cu_ld(w, wdt, mp_cu_norm_wi(w_per_elem, wi, e)) : 1.0f;
        mp_cu_norm_dx_at(dx, dxdt, dy, dydt, x, xdt, at, wv, mean, rstd, m1, m2);
    }
}

/* y = (x - mean) rstd w + b, w and b per element or per `w_per_elem`
 * elements (layer norm, group norm) or one per set (batch norm: (x - mean)
 * (rstd w) + b); NULL: 1, 0. As mp_kernels_nn.h. */
static inline MP_HD void mp_cu_norm_put(const MpCuNorm *g, void *y, int ydt, const void *x, int xdt,
                                        const void *w, int wdt, const void *b, int bdt,
                                        int64_t w_per_elem, int64_t wi, int64_t base, float mean,
                                        float rstd, int tid, int nt)
{
    float sc = rstd * (w && !w_per_elem ? mp_cu_ld(w, wdt, wi) : 1.0f);
    float sh = b && !w_per_elem ? mp_cu_ld(b, bdt, wi) : 0.0f;
    for (int64_t e = tid; e < g->count; e += nt) {
        int64_t at = mp_cu_norm_at(g, base, e);
        float v = mp_cu_ld(x, xdt, at) - mean;
        if (w_per_elem) {
            int64_t k = mp_cu_norm_wi(w_per_elem, wi, e);
            v = v * rstd * (w ? mp_cu_ld(w, wdt, k) : 1.0f) + (b ? mp_cu_ld(b, bdt, k) : 0.0f);
        }
        else
            v = v * sc + sh;
        mp_cu_st(y, ydt, at, v);
    }
}

/* mean and 1/sqrt(var + eps) from the sums (var biased, as torch), rounded
 * as mp_moments does */
static inline MP_HD void mp_cu_norm_stats(float sum, float sq_dev, int64_t count, float eps,
                                          float *mean, float *rstd)
{
    *mean = sum / (float)count;
    *rstd = 1.0f / sqrtf(sq_dev / (float)count + eps);
}

/* sum of dy * xhat over the set's elements (tid, tid + nt, ...): batch
 * norm's weight gradient, products in f32 as mp_k_batch_norm_dw */
static inline MP_HD MpAcc mp_cu_norm_dw_part(const MpCuNorm *g, const void *dy, int dydt,
                                             const void *x, int xdt, int64_t base, float mean,
                                             float rstd, int tid, int nt)
{
    MpAcc s = mp_acc_zero();
    for (int64_t e = tid; e < g->count; e += nt) {
        int64_t at = mp_cu_norm_at(g, base, e);
        mp_acc_add(&s, mp_cu_ld(dy, dydt, at) * ((mp_cu_ld(x, xdt, at) - mean) * rstd));
    }
    return s;
}

/* dw[k] = sum over the set's elements of dy * xhat: layer norm's column k
 * (over rows, with per-row stats st[2r], st[2r+1]); rows r0, r0 + step... */
static inline MP_HD MpAcc mp_cu_ln_dw_part(const void *dy, int dydt, const void *x, int xdt,
                                           const float *st, int64_t rows, int64_t dim, int64_t k,
                                           int64_t r0, int64_t step)
{
    MpAcc s = mp_acc_zero();
    for (int64_t r = r0; r < rows; r += step) {
        int64_t at = r * dim + k;
        float xh = (mp_cu_ld(x, xdt, at) - st[2 * r]) * st[2 * r + 1];
        mp_acc_add(&s, mp_cu_ld(dy, dydt, at) * xh);
    }
    return s;
}

/* Column k of x [rows, W] down rows r0, r0 + step, ... < r1, compensated:
 * the sum of x - mean (MP_COL_SUM), of (x - mean)^2 (MP_COL_SQ), of dy wv
 * (MP_COL_GY) or of dy wv (x - mean) rstd (MP_COL_GX; wv = 1: batch norm's
 * weight gradient), as mp_cu_norm_grad_sums and mp_cu_norm_dw_part. */
enum { MP_COL_SUM, MP_COL_SQ, MP_COL_GY, MP_COL_GX };

static inline MP_HD MpAcc mp_cu_col_part(int kind, const void *dy, int dydt, const void *x, int xdt,
                                         int64_t W, int64_t k, int64_t r0, int64_t r1, int64_t step,
                                         float mean, float rstd, float wv)
{
    MpAcc s = mp_acc_zero();
    for (int64_t r = r0; r < r1; r += step) {
        float v = mp_cu_ld(x, xdt, r * W + k) - mean;
        float gy = kind >= MP_COL_GY ? mp_cu_ld(dy, dydt, r * W + k) * wv : 0.0f;
        mp_acc_add(&s, kind == MP_COL_SUM ? v : kind == MP_COL_SQ ? v * v
                       : kind == MP_COL_GY ? gy : gy * (v * rstd));
    }
    return s;
}

/* ---- images: NCHW ----------------------------------------------------------- */

typedef struct MpCuImg {
    int64_t N, C, H, W, k, stride, pad, OH, OW;
    int incl;                  /* avg_pool2d: count_include_pad */
} MpCuImg;

static inline MpCuImg mp_cu_img(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k,
                                int64_t stride, int64_t pad)
{
    MpCuImg g = {N, C, H, W, k, stride, pad, 0, 0, 1};
    g.OH = (H + 2 * pad - k) / stride + 1;
    g.OW = (W + 2 * pad - k) / stride + 1;
    return g;
}

/* Pooling output element e of y [N, C, OH, OW]: its window inside the
 * plane, rows [*y0, *y1) and columns [*x0, *x1) (the C program's
 * mp_pool_win); returns the plane's first element. */
static inline MP_HD int64_t mp_cu_pool_win(const MpCuImg *g, int64_t e, int64_t *y0, int64_t *y1,
                                           int64_t *x0, int64_t *x1)
{
    int64_t ow = e % g->OW, oh = e / g->OW % g->OH, nc = e / (g->OW * g->OH);
    *y0 = oh * g->stride - g->pad, *x0 = ow * g->stride - g->pad;
    *y1 = *y0 + g->k < g->H ? *y0 + g->k : g->H;
    *x1 = *x0 + g->k < g->W ? *x0 + g->k : g->W;
    *y0 = *y0 < 0 ? 0 : *y0, *x0 = *x0 < 0 ? 0 : *x0;
    return nc * g->H * g->W;
}

/* The max, with the position of the window's first maximum (NaN wins, as
 * torch) in *at; the padding is never the maximum. */
static inline MP_HD float mp_cu_pool_max(const MpCuImg *g, const void *x, int xdt, int64_t e,
                                         int64_t *at)
{
    int64_t y0, y1, x0, x1, base = mp_cu_pool_win(g, e, &y0, &y1, &x0, &x1);
    float best = -INFINITY;
    *at = base + y0 * g->W + x0;
    for (int64_t i = y0; i < y1; i++)
        for (int64_t j = x0; j < x1; j++) {
            float v = mp_cu_ld(x, xdt, base + i * g->W + j);
            if ((i == y0 && j == x0) || v > best || (isnan(v) && !isnan(best))) {
                best = v;
                *at = base + i * g->W + j;
            }
        }
    return best;
}

/* avg_pool2d's divisor for output e: k k, or the window's elements inside
 * the plane. */
static inline MP_HD float mp_cu_pool_inv(const MpCuImg *g, int64_t e)
{
    int64_t y0, y1, x0, x1;
    mp_cu_pool_win(g, e, &y0, &y1, &x0, &x1);
    return 1.0f / (float)(g->incl ? g->k * g->k : (y1 - y0) * (x1 - x0));
}

static inline MP_HD float mp_cu_pool_avg(const MpCuImg *g, const void *x, int xdt, int64_t e)
{
    int64_t y0, y1, x0, x1, base = mp_cu_pool_win(g, e, &y0, &y1, &x0, &x1);
    MpAcc s = mp_acc_zero();
    for (int64_t i = y0; i < y1; i++)
        for (int64_t j = x0; j < x1; j++)
            mp_acc_add(&s, mp_cu_ld(x, xdt, base + i * g->W + j));
    return mp_acc_get(s) * mp_cu_pool_inv(g, e);
}

/* The outputs whose windows cover input (ih, iw), along one axis: [lo, hi]. */
static inline MP_HD void mp_cu_cover(int64_t i, int64_t k, int64_t stride, int64_t pad,
                                     int64_t out, int64_t *lo, int64_t *hi)
{
    int64_t p = i + pad;
    *lo = p - k + 1 <= 0 ? 0 : (p - k + stride) / stride;
    *hi = p / stride;
    if (*hi > out - 1)
        *hi = out - 1;
}

/* dx at input element e of [N, C, H, W]: gathered from every output window
 * holding it (max: only where it is the window's first maximum), in output
 * order, so no two threads write one element. */
static inline MP_HD float mp_cu_pool_grad_at(const MpCuImg *g, const void *dy, int dydt,
                                             const void *x, int xdt, int64_t e, int is_max)
{
    int64_t iw = e % g->W, ih = e / g->W % g->H, nc = e / (g->W * g->H);
    int64_t oh0, oh1, ow0, ow1;
    float s = 0.0f;
    mp_cu_cover(ih, g->k, g->stride, g->pad, g->OH, &oh0, &oh1);
    mp_cu_cover(iw, g->k, g->stride, g->pad, g->OW, &ow0, &ow1);
    for (int64_t oh = oh0; oh <= oh1; oh++)
        for (int64_t ow = ow0; ow <= ow1; ow++) {
            int64_t o = (nc * g->OH + oh) * g->OW + ow, at;
            if (is_max) {
                mp_cu_pool_max(g, x, xdt, o, &at);
                if (at != e)
                    continue;
                s += mp_cu_ld(dy, dydt, o);
            } else
                s += mp_cu_ld(dy, dydt, o) * mp_cu_pool_inv(g, o);
        }
    return s;
}

/* ---- convolution (MpConv: mp_kernels.h) ------------------------------------- */

/* The input row / column that output o reads at tap t of one axis (stride
 * s, padding p, dilation d, n inputs), or -1 in the padding. */
static inline MP_HD int64_t mp_cu_conv_to(int64_t o, int64_t t, int64_t s, int64_t p, int64_t d,
                                          int64_t n)
{
    int64_t i = o * s - p + t * d;
    return i < 0 || i >= n ? -1 : i;
}

/* The output position (*o) that reads input row / column i at tap t of one
 * axis (stride s, padding p, dilation d, out outputs), or 0 if none does. */
static inline MP_HD int mp_cu_conv_from(int64_t i, int64_t t, int64_t s, int64_t p, int64_t d,
                                        int64_t out, int64_t *o)
{
    int64_t q = i + p - t * d;
    if (q < 0 || q % s || q / s >= out)
        return 0;
    *o = q / s;
    return 1;
}

/* im2col: element e of col, laid out [N][C kh kw][OH OW] (by_image) or
 * [C kh kw][N][OH OW]; 0 in the padding. A group's rows are consecutive. */
static inline MP_HD float mp_cu_im2col_at(const MpConv *v, int64_t N, const void *x, int xdt,
                                          int64_t e, int by_image)
{
    int64_t ohw = v->OH * v->OW, kk = v->kh * v->kw, ckk = v->C * kk, n, r, p = e % ohw;
    if (by_image) {
        r = e / ohw % ckk;
        n = e / (ohw * ckk);
    } else {
        n = e / ohw % N;
        r = e / (ohw * N);
    }
    int64_t c = r / kk, ky = r / v->kw % v->kh, kx = r % v->kw;
    int64_t ih = mp_cu_conv_to(p / v->OW, ky, v->sh, v->ph, v->dh, v->H);
    int64_t iw = mp_cu_conv_to(p % v->OW, kx, v->sw, v->pw, v->dw, v->W);
    if (ih < 0 || iw < 0)
        return 0.0f;
    return mp_cu_ld(x, xdt, ((n * v->C + c) * v->H + ih) * v->W + iw);
}

/* col2im: dx at input element e from dcol [N][C kh kw][OH OW], summed in
 * f32 over the taps (ky, kx) that read it, in order. */
static inline MP_HD float mp_cu_col2im_at(const MpConv *v, const void *dcol, int ddt, int64_t e)
{
    int64_t iw = e % v->W, ih = e / v->W % v->H, c = e / (v->W * v->H) % v->C;
    int64_t n = e / (v->W * v->H * v->C), ohw = v->OH * v->OW, kk = v->kh * v->kw;
    float s = 0.0f;
    for (int64_t ky = 0; ky < v->kh; ky++) {
        int64_t oy, ox;
        if (!mp_cu_conv_from(ih, ky, v->sh, v->ph, v->dh, v->OH, &oy))
            continue;
        for (int64_t kx = 0; kx < v->kw; kx++)
            if (mp_cu_conv_from(iw, kx, v->sw, v->pw, v->dw, v->OW, &ox))
                s += mp_cu_ld(dcol, ddt, ((n * v->C + c) * kk + ky * v->kw + kx) * ohw + oy * v->OW + ox);
    }
    return s;
}

/* Depthwise output element e of y [N, F, OH, OW]: bias, then the taps in
 * (ky, kx) order (the C program's order). */
static inline MP_HD float mp_cu_depthwise_at(const MpConv *v, const void *x, int xdt, const void *w,
                                             int wdt, const void *bias, int bdt, int64_t e)
{
    int64_t ox = e % v->OW, oy = e / v->OW % v->OH, f = e / (v->OW * v->OH) % v->F;
    int64_t n = e / (v->OW * v->OH * v->F), kk = v->kh * v->kw, m = v->F / v->C;
    const int64_t xo = (n * v->C + f / m) * v->H * v->W;
    float s = bias ? mp_cu_ld(bias, bdt, f) : 0.0f;
    for (int64_t ky = 0; ky < v->kh; ky++) {
        int64_t ih = mp_cu_conv_to(oy, ky, v->sh, v->ph, v->dh, v->H), iw;
        for (int64_t kx = 0; ih >= 0 && kx < v->kw; kx++)
            if ((iw = mp_cu_conv_to(ox, kx, v->sw, v->pw, v->dw, v->W)) >= 0)
                s += mp_cu_ld(w, wdt, f * kk + ky * v->kw + kx) * mp_cu_ld(x, xdt, xo + ih * v->W + iw);
    }
    return s;
}

/* Depthwise input gradient at element e of dx [N, C, H, W]: its m output
 * channels, each over the taps in order (the C program's order). */
static inline MP_HD float mp_cu_depthwise_dx_at(const MpConv *v, const void *dy, int dydt,
                                                const void *w, int wdt, int64_t e)
{
    int64_t iw = e % v->W, ih = e / v->W % v->H, c = e / (v->W * v->H) % v->C;
    int64_t n = e / (v->W * v->H * v->C), kk = v->kh * v->kw, m = v->F / v->C;
    float s = 0.0f;
    for (int64_t f = c * m; f < (c + 1) * m; f++)
        for (int64_t ky = 0; ky < v->kh; ky++) {
            int64_t oy, ox;
            if (!mp_cu_conv_from(ih, ky, v->sh, v->ph, v->dh, v->OH, &oy))
                continue;
            for (int64_t kx = 0; kx < v->kw; kx++)
                if (mp_cu_conv_from(iw, kx, v->sw, v->pw, v->dw, v->OW, &ox))
                    s += mp_cu_ld(w, wdt, f * kk + ky * v->kw + kx) *
                         mp_cu_ld(dy, dydt, ((n * v->F + f) * v->OH + oy) * v->OW + ox);
        }
    return s;
}

/* Depthwise weight gradient, one image's part: item e = (f, tap, n) of
 * [F][kh kw][N]: the tap's products over plane (n, f), in f32, rows in order. */
static inline MP_HD float mp_cu_depthwise_dw_part(const MpConv *v, int64_t N, const void *dy,
                                                  int dydt, const void *x, int xdt, int64_t e)
{
    int64_t kk = v->kh * v->kw, n = e % N, t = e / N % kk, f = e / (N * kk), m = v->F / v->C;
    int64_t ky = t / v->kw, kx = t % v->kw;
    const int64_t xo = (n * v->C + f / m) * v->H * v->W, yo = (n * v->F + f) * v->OH * v->OW;
    float s = 0.0f;
    for (int64_t oy = 0; oy < v->OH; oy++) {
        int64_t ih = mp_cu_conv_to(oy, ky, v->sh, v->ph, v->dh, v->H), iw;
        for (int64_t ox = 0; ih >= 0 && ox < v->OW; ox++)
            if ((iw = mp_cu_conv_to(ox, kx, v->sw, v->pw, v->dw, v->W)) >= 0)
                s += mp_cu_ld(dy, dydt, yo + oy * v->OW + ox) * mp_cu_ld(x, xdt, xo + ih * v->W + iw);
    }
    return s;
}

/* ---- embedding ---------------------------------------------------------- */

/* The ids sorted once (stable: equal ids keep their order of i), as
 * order[k] (the position) and sorted[k] (its id): dw[v, d] is then the sum
 * of dy[order[k], d] over v's segment of sorted, in order of k, which is
 * the order of i: the C program's sum, without scanning every id per output
 * and without atomics (mp_embedding_dw_sum, the C program's sum too).
 * Part of the rank of id i: the ids before it. Ids of any integer type
 * (idt), loaded with mp_ld_id. */
static inline MP_HD int64_t mp_cu_id_rank_part(const void *ids, int idt, int64_t n, int64_t i, int tid,
                                               int nt)
{
    int64_t v = mp_ld_id(ids, idt, i);
    int64_t c = 0;
    for (int64_t j = tid; j < n; j += nt) {
        int64_t u = mp_ld_id(ids, idt, j);
        c += u < v || (u == v && j < i);
    }
    return c;
}

static inline MP_HD float mp_cu_embedding_dw_at(const void *dy, int dydt, const int32_t *order,
                                                const int32_t *sorted, int64_t n, int64_t dim,
                                                int64_t e)
{
    int64_t v = e / dim, d = e % dim, lo = 0, hi = n;
    while (lo < hi) {                             /* v's segment starts at lo */
        int64_t mid = (lo + hi) / 2;
        if (sorted[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return mp_embedding_dw_sum(dy, dydt, order, sorted, n, dim, lo, v, d);
}

/* ---- attention: the arithmetic of one score (mp_cuda_ops.h's tiles) -------- */

/* sum over d of a[d] b[d], in order of d, in f32 (a score q.k, or dP = dy.v) */
static inline MP_HD float mp_cu_att_dot(const float *a, const float *b, int64_t D)
{
    float s = 0.0f;
    for (int64_t d = 0; d < D; d++)
        s += a[d] * b[d];
    return s;
}

/* Query i sees key j: j < T' and, causal, j <= i. */
static inline MP_HD int mp_cu_att_sees(int64_t i, int64_t j, int64_t Tk, int causal)
{
    return j < Tk && (!causal || j <= i);
}

/* A score s after the mask's element i (type mdt): a u8 mask's 0 makes it
 * -INFINITY (the key unseen), a float mask is added (MpAttnOpt). */
static inline MP_HD float mp_cu_att_mask(float s, const void *mask, int mdt, int64_t i)
{
    float m = mp_cu_ld(mask, mdt, i);
    return mdt == MP_U8 ? (m != 0.0f ? s : -INFINITY) : s + m;
}

/* A row's running max m and compensated sum l of exp(s - m) (online
 * softmax) taken over n more scores s (f32; -INFINITY: a masked key). */
static inline MP_HD void mp_cu_att_online(float *m, MpAcc *l, const float *s, int64_t n)
{
    float tm = *m;
    for (int64_t j = 0; j < n; j++)
        tm = s[j] > tm ? s[j] : tm;
    if (tm > *m) {                 /* the sum so far in units of the new max */
        float f = mp_expf_p(*m - tm);
        l->s *= f;
        l->c *= f;
        *m = tm;
    }
    for (int64_t j = 0; j < n; j++)
        if (s[j] != -INFINITY)  /* NaN included: it spreads, as in the C program */
            mp_acc_add(l, mp_expf_p(s[j] - tm));
}

/* P = exp(s - m) / l in f32 (inv = 1 / l), 0 for a masked key: the
 * normalised probability, before any rounding (as mp_row_softmax). */
static inline MP_HD float mp_cu_att_p(float s, float m, float inv)
{
    return s != -INFINITY ? mp_expf_p(s - m) * inv : 0.0f;
}

/* dS = P (dP - rowsum(dP P)) scale rounded to the product type (as
 * mp_row_softmax_grad, then mp_attn_round's scale). */
static inline MP_HD float mp_cu_att_ds(float p, float dp, float dot, float scale, int cdt)
{
    return mp_round(p * (dp - dot) * scale, cdt);
}

/* ---- rms_norm and rope ------------------------------------------------------ */

/* This thread's share of the sum of x^2 over a row of dim at off. */
static inline MP_HD MpAcc mp_cu_sumsq_part(const void *x, int xdt, int64_t off, int64_t dim,
                                           int tid, int nt)
{
    MpAcc s = mp_acc_zero();
    for (int64_t j = tid; j < dim; j += nt) {
        float v = mp_cu_ld(x, xdt, off + j);
        mp_acc_add(&s, v * v);
    }
    return s;
}

/* 1/sqrt(mean of squares + eps) from their sum (mp_rms_rstd, in f32) */
static inline MP_HD float mp_cu_rms_rstd(MpAcc sumsq, int64_t n, float eps)
{
    return 1.0f / sqrtf(mp_acc_get(sumsq) / (float)n + eps);
}

/* This thread's share of the sum of a row (cross_entropy's smoothing). */
static inline MP_HD MpAcc mp_cu_row_sum_part(const void *x, int xdt, int64_t off, int64_t len,
                                             int tid, int nt)
{
    MpAcc s = mp_acc_zero();
    for (int64_t j = tid; j < len; j += nt)
        mp_acc_add(&s, mp_cu_ld(x, xdt, off + j));
    return s;
}

/* This thread's share of sum(dy w x) over a row (rms_norm's dx). */
static inline MP_HD MpAcc mp_cu_rms_gx_part(const void *dy, int dydt, const void *x, int xdt,
                                            const void *w, int wdt, int64_t off, int64_t dim,
                                            int tid, int nt)
{
    MpAcc s = mp_acc_zero();
    for (int64_t j = tid; j < dim; j += nt)
        mp_acc_add(&s, (mp_cu_ld(dy, dydt, off + j) * mp_cu_ld(w, wdt, j)) * mp_cu_ld(x, xdt, off + j));
    return s;
}

/* Element e of rope over x [outer, P, inner] (inner ending in D features). */
static inline MP_HD float mp_cu_rope_at(const void *x, int xdt, int64_t e, int64_t P, int64_t inner,
                                        int64_t D, float theta, int half, float sign)
{
    int64_t j = e % D, partner;
    float angle;
    int first = mp_rope_pair(j, D, half, (e / inner) % P, theta, &partner, &angle);
    return mp_rope_value(mp_cu_ld(x, xdt, e), mp_cu_ld(x, xdt, e - j + partner), first, angle, sign);
}

#endif
