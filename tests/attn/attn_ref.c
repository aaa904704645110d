/* attn_ref.c - the CPU attention kernels as they were before issue 12's
 * register blocking (runtime/mp_kernels_nn.h at 6efa58c), renamed ref_*:
 * the reference tests/attn/attn_bits.c holds today's kernels to, bit for
 * bit. Kept verbatim (names aside) on purpose: it is the old order of every
 * sum, not code to maintain. tests/t_attn_bits.sh compiles this file with
 * -ffp-contract=off: the bits the old kernels gave in every build that does
 * not fuse a product into a sum (no FMA in the target: the plain `cc -O2`
 * the tests build with). Where the target had FMA, GCC fused some of the
 * old kernels' products and not others (by loop shape and -mtune), so
 * those builds had no one answer to keep; the new kernels never fuse. */
#include "mp_kernels.h"
#include "mp_kernels_gemm.h"
#include "mp_kernels_nn.h"
#include "attn_ref.h"
/* ---- attention ---------------------------------------------------------- */

/* Per (batch, head), with q, y [T, D] and k, v [T', D]:
 *   S = q k^T / sqrt(D)         f32 accumulation, never rounded
 *   P = softmax(S) per row      f32; causal: S[i, j] = -inf for j > i
 *   Pr = P rounded to cdt       the lowp operand of the second product
 *   y = Pr v                    f32 accumulation, rounded to y's type
 * Backward: one kernel for the three gradients (ATTENTION_GRAD, ops.def),
 * from one recomputation of P per query tile (nothing is kept from the
 * forward pass):
 *   dv = Pr^T dy
 *   dP = dy v^T (f32), dS = P (dP - rowsum(dP P)) / sqrt(D), rounded to cdt
 *   dq = dS k,   dk = dS^T q    f32 accumulation, each rounded once
 * Tiles: a query tile of tq rows (ref_attn_tq: its f32 scores [tq, T'] stay
 * under 64 KB) against key tiles of REF_ATTN_TK; the query tile's scores
 * are the only score buffer (never T x T), so the probabilities are
 * normalised before they are rounded with each score computed once per
 * pass. Causal: key tiles past a query tile's last row are skipped, and
 * the masked corner of the diagonal tile holds zeros. Each sum runs in a
 * fixed order (over d for a score; over keys for y and dq; over the rows
 * of a query tile, then tile after tile, for dk and dv): the same bits
 * whatever the number of threads.
 * Work items: (head, query tile) forward; heads backward (a head's dk and
 * dv accumulate over its query tiles in f32). k and v of the head are
 * loaded once per item as f32, row-major and transposed, so that the inner
 * loops run over REF_ATTN_VW contiguous floats held in registers. */
#define REF_ATTN_TK 64
#define REF_ATTN_VW 16

typedef struct RefAttn {
    const void *q, *k, *v;
    int qdt, kdt, vdt, cdt, causal;
    int64_t T, Tk, D, tq;
    float scale;
} RefAttn;

/* Per-thread work space (f32). */
typedef struct RefAttnWs {
    float *kr, *vr;         /* k, v of the head [T', D] */
    float *kt, *vt;         /* their transposes [D, T'] */
    float *qf, *dyf, *acc;  /* the query tile's q, dy and y or dq [tq, D] */
    float *s, *dp;          /* its P then Pr, and dP then dS [tq, T'] */
    float *dk, *dv;         /* the head's dk, dv accumulators [T', D] (backward) */
} RefAttnWs;

static inline int64_t ref_attn_tq(int64_t Tk)
{
    int64_t t = 16384 / (Tk > 0 ? Tk : 1);
    return t < 4 ? 4 : t > 32 ? 32 : t;
}

static inline RefAttn ref_attn(const void *q, int qdt, const void *k, int kdt, const void *v,
                             int vdt, int64_t T, int64_t Tk, int64_t D, int causal, int cdt)
{
    RefAttn a = {q, k, v, qdt, kdt, vdt, cdt, causal, T, Tk, D, ref_attn_tq(Tk),
                1.0f / sqrtf((float)D)};
    return a;
}

static inline RefAttnWs ref_attn_ws(const RefAttn *a, int bwd)
{
    int64_t kd = a->Tk * a->D, qd = a->tq * a->D, qk = a->tq * a->Tk;
    float *f = (float *)mp_kalloc((size_t)((4 + 2 * bwd) * kd + 3 * qd + 2 * qk) * sizeof *f);
    RefAttnWs w;
    w.kr = f, w.vr = f + kd, w.kt = f + 2 * kd, w.vt = f + 3 * kd;
    w.qf = f + 4 * kd, w.dyf = w.qf + qd, w.acc = w.dyf + qd;
    w.s = w.acc + qd, w.dp = w.s + qk;
    w.dk = w.dp + qk, w.dv = w.dk + bwd * kd;
    return w;
}

/* k and v of head h as f32, row-major and transposed. */
static inline void ref_attn_load_kv(const RefAttn *a, int64_t h, RefAttnWs *w)
{
    int64_t Tk = a->Tk, D = a->D, n = Tk * D;
    mp_ld_n(a->k, a->kdt, h * n, 1, n, w->kr);
    mp_ld_n(a->v, a->vdt, h * n, 1, n, w->vr);
    for (int64_t j = 0; j < Tk; j++)
        for (int64_t d = 0; d < D; d++) {
            w->kt[d * Tk + j] = w->kr[j * D + d];
            w->vt[d * Tk + j] = w->vr[j * D + d];
        }
}

/* Keys a query row i sees: i + 1 (causal) or all T'. */
static inline int64_t ref_attn_len(const RefAttn *a, int64_t i) { return a->causal ? i + 1 : a->Tk; }

/* o[j .. j + w) = alpha x . y[j + u], yt = y^T of row stride ld: w keys
 * (a constant after inlining) in registers, each sum over d in order. */
static inline void ref_attn_dots_w(float *o, const float *x, const float *yt, int64_t ld,
                                  int64_t D, int64_t j, float alpha, const int w)
{
    float acc[4 * REF_ATTN_VW] = {0};
    for (int64_t d = 0; d < D; d++) {
        const float xd = x[d], *y = yt + d * ld + j;
        for (int u = 0; u < w; u++) acc[u] += xd * y[u];
    }
    for (int u = 0; u < w; u++) o[j + u] = acc[u] * alpha;
}

/* o[j] = alpha x . y[j] for j0 <= j < j1: four vectors of keys at a time
 * (independent chains of products), then one, then one key. */
static inline void ref_attn_dots_row(float *o, const float *x, const float *yt, int64_t ld,
                                    int64_t D, int64_t j0, int64_t j1, float alpha)
{
    int64_t j = j0;
    for (; j + 4 * REF_ATTN_VW <= j1; j += 4 * REF_ATTN_VW)
        ref_attn_dots_w(o, x, yt, ld, D, j, alpha, 4 * REF_ATTN_VW);
    for (; j + REF_ATTN_VW <= j1; j += REF_ATTN_VW)
        ref_attn_dots_w(o, x, yt, ld, D, j, alpha, REF_ATTN_VW);
    for (; j < j1; j++)
        ref_attn_dots_w(o, x, yt, ld, D, j, alpha, 1);
}

/* out[r, j] = alpha x[r] . y[j] for the rows r < nq of the query tile at
 * row i0 and the keys j each row sees (out of row stride T'). Key tiles
 * outer, rows inner: a key tile of yt stays in the L1 cache. */
static inline void ref_attn_dots(const RefAttn *a, float *out, const float *x, const float *yt,
                                int64_t i0, int64_t nq, float alpha)
{
    int64_t nk = ref_attn_len(a, i0 + nq - 1);
    for (int64_t j0 = 0; j0 < nk; j0 += REF_ATTN_TK)
        for (int64_t r = 0; r < nq; r++) {
            int64_t j1 = ref_attn_len(a, i0 + r);
            j1 = j1 < j0 + REF_ATTN_TK ? j1 : j0 + REF_ATTN_TK;
            if (j1 > j0)
                ref_attn_dots_row(out + r * a->Tk, x + r * a->D, yt, a->Tk, a->D, j0, j1, alpha);
        }
}

/* o[d .. d + w) (+)= sum over t < n of wt[t sw] Y[t, d + u] (rows of D
 * floats): w columns (a constant after inlining) in registers, each sum
 * over t in order. */
static inline void ref_attn_wsum_w(float *o, const float *wt, int64_t sw, int64_t n,
                                  const float *Y, int64_t D, int64_t d, int add, const int w)
{
    float acc[4 * REF_ATTN_VW] = {0};
    for (int64_t t = 0; t < n; t++) {
        const float c = wt[t * sw], *y = Y + t * D + d;
        for (int u = 0; u < w; u++) acc[u] += c * y[u];
    }
    for (int u = 0; u < w; u++) o[d + u] = add ? o[d + u] + acc[u] : acc[u];
}

/* o[0..D) (+)= sum over t < n of wt[t sw] Y[t]: four vectors of columns
 * at a time, then one, then one column. */
static inline void ref_attn_wsum(float *o, const float *wt, int64_t sw, int64_t n, const float *Y,
                                int64_t D, int add)
{
    int64_t d = 0;
    for (; d + 4 * REF_ATTN_VW <= D; d += 4 * REF_ATTN_VW)
        ref_attn_wsum_w(o, wt, sw, n, Y, D, d, add, 4 * REF_ATTN_VW);
    for (; d + REF_ATTN_VW <= D; d += REF_ATTN_VW)
        ref_attn_wsum_w(o, wt, sw, n, Y, D, d, add, REF_ATTN_VW);
    for (; d < D; d++)
        ref_attn_wsum_w(o, wt, sw, n, Y, D, d, add, 1);
}

/* P of the query tile [i0, i0 + nq) of the loaded head into w->s (f32):
 * q rows loaded as f32, scores, each row's softmax over its keys, zeros
 * past them up to the tile's nk keys (returned). */
static inline int64_t ref_attn_probs(const RefAttn *a, RefAttnWs *w, int64_t h, int64_t i0,
                                    int64_t nq)
{
    int64_t D = a->D, nk = ref_attn_len(a, i0 + nq - 1);
    mp_ld_n(a->q, a->qdt, (h * a->T + i0) * D, 1, nq * D, w->qf);
    ref_attn_dots(a, w->s, w->qf, w->kt, i0, nq, a->scale);
    for (int64_t r = 0; r < nq; r++) {
        float *p = w->s + r * a->Tk;
        int64_t n = ref_attn_len(a, i0 + r);
        mp_row_softmax(p, n);
        for (int64_t j = n; j < nk; j++) p[j] = 0.0f;
    }
    return nk;
}

/* v rounded to cdt, in place, for the first n of each of nq rows */
static inline void ref_attn_round(float *v, int64_t nq, int64_t ld, int64_t n, float mul, int cdt)
{
    for (int64_t r = 0; r < nq; r++)
        for (int64_t j = 0; j < n; j++) v[r * ld + j] = mp_round(v[r * ld + j] * mul, cdt);
}

static inline void ref_k_attention(void *y, int ydt, const void *q, int qdt, const void *k,
                                  int kdt, const void *v, int vdt, int64_t BH, int64_t T,
                                  int64_t Tk, int64_t D, int causal, int cdt)
{
    RefAttn a = ref_attn(q, qdt, k, kdt, v, vdt, T, Tk, D, causal, cdt);
    int64_t ntiles = (T + a.tq - 1) / a.tq;
    MP_OMP(parallel if (BH * ntiles > 1))
    {
        RefAttnWs w = ref_attn_ws(&a, 0);
        int64_t loaded = -1;
        MP_OMP(for schedule(dynamic))
        for (int64_t it = 0; it < BH * ntiles; it++) {
            int64_t h = it / ntiles, i0 = it % ntiles * a.tq, nq = T - i0 < a.tq ? T - i0 : a.tq;
            if (h != loaded)
                ref_attn_load_kv(&a, h, &w), loaded = h;
            int64_t nk = ref_attn_probs(&a, &w, h, i0, nq);
            ref_attn_round(w.s, nq, Tk, nk, 1.0f, cdt);
            for (int64_t r = 0; r < nq; r++)
                ref_attn_wsum(w.acc + r * D, w.s + r * Tk, 1, nk, w.vr, D, 0);
            mp_st_n(y, ydt, (h * T + i0) * D, 1, nq * D, w.acc);
        }
        free(w.kr);
    }
}

/* One query tile's share of head h's gradients: dv and dk accumulate in
 * w, dq of the tile is stored to g at gq. */
static inline void ref_attn_grad_tile(const RefAttn *a, RefAttnWs *w, void *g, int gdt, int64_t gq,
                                     const void *dy, int dydt, int64_t h, int64_t i0, int64_t nq)
{
    int64_t Tk = a->Tk, D = a->D, nk = ref_attn_probs(a, w, h, i0, nq);
    mp_ld_n(dy, dydt, (h * a->T + i0) * D, 1, nq * D, w->dyf);
    ref_attn_dots(a, w->dp, w->dyf, w->vt, i0, nq, 1.0f);
    for (int64_t r = 0; r < nq; r++) {
        int64_t n = ref_attn_len(a, i0 + r);
        float *ds = w->dp + r * Tk;
        mp_row_softmax_grad(ds, w->s + r * Tk, n);
        for (int64_t j = n; j < nk; j++) ds[j] = 0.0f;
    }
    ref_attn_round(w->dp, nq, Tk, nk, a->scale, a->cdt);     /* dS */
    ref_attn_round(w->s, nq, Tk, nk, 1.0f, a->cdt);          /* Pr */
    for (int64_t r = 0; r < nq; r++)
        ref_attn_wsum(w->acc + r * D, w->dp + r * Tk, 1, nk, w->kr, D, 0);
    for (int64_t j = 0; j < nk; j++) {
        ref_attn_wsum(w->dv + j * D, w->s + j, Tk, nq, w->dyf, D, 1);
        ref_attn_wsum(w->dk + j * D, w->dp + j, Tk, nq, w->qf, D, 1);
    }
    mp_st_n(g, gdt, gq + i0 * D, 1, nq * D, w->acc);
}

/* g [BH, T + 2T', D]: per head dq [T, D], dk [T', D], dv [T', D]. */
static inline void ref_k_attention_grad(void *g, int gdt, const void *dy, int dydt, const void *q,
                                       int qdt, const void *k, int kdt, const void *v, int vdt,
                                       int64_t BH, int64_t T, int64_t Tk, int64_t D, int causal,
                                       int cdt)
{
    RefAttn a = ref_attn(q, qdt, k, kdt, v, vdt, T, Tk, D, causal, cdt);
    MP_OMP(parallel if (BH > 1))
    {
        RefAttnWs w = ref_attn_ws(&a, 1);
        MP_OMP(for schedule(dynamic))
        for (int64_t h = 0; h < BH; h++) {
            int64_t gq = h * (T + 2 * Tk) * D, kd = Tk * D;
            ref_attn_load_kv(&a, h, &w);
            memset(w.dk, 0, (size_t)(2 * kd) * sizeof *w.dk);
            for (int64_t i0 = 0; i0 < T; i0 += a.tq)
                ref_attn_grad_tile(&a, &w, g, gdt, gq, dy, dydt, h, i0,
                                  T - i0 < a.tq ? T - i0 : a.tq);
            mp_st_n(g, gdt, gq + T * D, 1, kd, w.dk);
            mp_st_n(g, gdt, gq + T * D + kd, 1, kd, w.dv);
        }
        free(w.kr);
    }
}

void ref_attention(void *y, int ydt, const void *q, int qdt, const void *k, int kdt,
                   const void *v, int vdt, int64_t BH, int64_t T, int64_t Tk, int64_t D,
                   int causal, int cdt)
{
    ref_k_attention(y, ydt, q, qdt, k, kdt, v, vdt, BH, T, Tk, D, causal, cdt);
}

void ref_attention_grad(void *g, int gdt, const void *dy, int dydt, const void *q, int qdt,
                        const void *k, int kdt, const void *v, int vdt, int64_t BH, int64_t T,
                        int64_t Tk, int64_t D, int causal, int cdt)
{
    ref_k_attention_grad(g, gdt, dy, dydt, q, qdt, k, kdt, v, vdt, BH, T, Tk, D, causal, cdt);
}
