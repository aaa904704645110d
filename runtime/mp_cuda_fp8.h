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
 * mp_cu_fp8_quant only notes its operand (MpCuFp8Src); the product's own
 * call (mp_cu_gemm -> mp_cu_fp8_product) makes the quantised copies, so
 * that one place chooses how. On sm_89 and later GPUs (cuBLASLt loaded;
 * MP_CUDA_FP8=bf16 says no) the products are cuBLASLt's FP8 ones instead
 * of the above, as PRECISION.md asks: mp_cu_fp8_product quantises both
 * operands to e4m3 / e5m2 bytes, each in the layout cuBLASLt's FP8 kernels take (A
 * transposed, B not: "TN"; an operand stored the other way is transposed
 * while it is quantised), with 2^-e as the operand's scale by device
 * pointer, and runs cublasLtMatmul with f32 accumulation. A product of
 * sizes it cannot take (not multiples of 16, batched, two e5m2 operands)
 * runs as a bf16 product of the quantised values, as above; so does every
 * product after cuBLASLt refuses one, with a note. Either way a product
 * sums q_a q_b times 2^-(ea + eb): the C program's numbers, in another
 * order of summation. The program says at start-up which way it runs. */
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

/* Operand k (0, 1) of the next product, x[0..n) quantised with slot s:
 * the address of its bf16 copy in the fp8 workspace, which stands for the
 * operand in the product's call. The product quantises it
 * (mp_cu_fp8_product): as e4m3 / e5m2 bytes for cuBLASLt, or into that
 * bf16 copy. In measure mode only the bytes are noted. */
template <int XT>
static inline const uint16_t *mp_cu_fp8_quant(int k, int s, const void *x, int64_t n)
{
    int64_t bytes = mp_cu_round_up(n * 2);
    MpCuFp8Src src = {x, XT, s, n};
    if (bytes > mp_cu.fp8_need)
        mp_cu.fp8_need = bytes;
    if (!mp_cu.measure && n > 0)
        mp_cu.fp8_src[k] = src;
    return mp_cu.fp8_q[k];
}

/* The kernel F<XT> (aggregate-initialised with args) over n items, for
 * the run-time type xt of a pending operand */
template <template <int> class F, class... A>
static inline void mp_cu_fp8_each(const char *name, int xt, int64_t n, A... args)
{
    if (xt == MP_F32) {
        F<MP_F32> f = {args...};
        mp_cu_each(name, n, f);
    } else if (xt == MP_F16) {
        F<MP_F16> f = {args...};
        mp_cu_each(name, n, f);
    } else {
        F<MP_BF16> f = {args...};
        mp_cu_each(name, n, f);
    }
}

/* ---- cuBLASLt's FP8 products -------------------------------------------------- */

/* q[r C + c] = fp8(x[r C + c] 2^e), or of x[c R + r] for the transposed
 * copy (x is [C, R], q [R, C]); the first element also stores 2^-e, the
 * dequantising scale cuBLASLt multiplies by. The transposed copy goes by
 * tiles of 16 x 16 (R and C are multiples of 16 there): 16 neighbouring
 * threads read 16 neighbouring elements of x, and the threads after them
 * write the bytes next to theirs. */
template <int XT>
struct MpCuFp8Bytes {
    unsigned char *q;
    const void *x;
    const MpFp8 *f;
    float *scale;
    int64_t R, C;
    int s, trans;
    MP_HD void operator()(int64_t i) const
    {
        int e = f->exp[s - 1];
        int64_t at = i, o = i;
        if (trans) {
            int64_t t = i / 256, w = i % 256, r = t % (R / 16) * 16 + w % 16, c = t / (R / 16) * 16 + w / 16;
            at = c * R + r;
            o = r * C + c;
        }
        q[o] = mp_f32_to_fp8(mp_cu_ld(x, XT, at) * mp_pow2f(e), (MpFp8Fmt)f->fmt[s - 1]);
        if (o == 0)
            *scale = mp_pow2f(-e);
    }
};

/* The operand of pending src as e4m3 / e5m2 bytes [R, C] in fp8_b[k] (x
 * is [C, R] when trans), its scale in fp8_scale[k] */
static inline void mp_cu_fp8_bytes(int k, const MpCuFp8Src *src, int64_t R, int64_t C, int trans)
{
    mp_cu_fp8_each<MpCuFp8Bytes>("fp8_bytes", src->xt, R * C, mp_cu.fp8_b[k], src->x,
                                 (const MpFp8 *)mp_cu.fp8, mp_cu.fp8_scale + k, R, C, src->slot, trans);
}

/* The pending operands' bf16 copies (a product cuBLASLt does not take) */
static inline void mp_cu_fp8_settle(void)
{
    for (int k = 0; k < 2; k++) {
        const MpCuFp8Src *src = &mp_cu.fp8_src[k];
        if (src->x)
            mp_cu_fp8_each<MpCuFp8Quant>("fp8_quantise", src->xt, src->n, mp_cu.fp8_q[k], src->x,
                                         (const MpFp8 *)mp_cu.fp8, src->slot);
        mp_cu.fp8_src[k].x = NULL;
    }
}

static inline MpFp8Fmt mp_cu_fp8_fmt(int slot) { return (MpFp8Fmt)mp_cu.t->m->fp8->fmt[slot - 1]; }

/* cuBLASLt's D = alpha sa sb op(A) op(B) + beta C (C and D the same),
 * column-major with A transposed and B not: A [k, m] (ld k) and B [k, n]
 * (ld k) of e4m3 / e5m2 bytes, their scales sa, sb by device pointer. */
typedef struct MpCuLt {
    int m, n, k;
    float alpha, beta;
    const unsigned char *A; int atype; const float *sa;
    const unsigned char *B; int btype; const float *sb;
    void *C; int ctype, ldc;
} MpCuLt;

#ifdef MP_CU_EMU
/* What cuBLASLt's FP8 product does, and what it refuses (NOT_SUPPORTED):
 * sizes not multiples of 16, two e5m2 operands, an output that is not
 * f32 / f16 / bf16 (its "TN" rule holds by construction here). */
static inline MpBlasStatus mp_cu_emu_lt(const MpCuLt *l)
{
    int ok_c = l->ctype == MP_BLAS_R_32F || l->ctype == MP_BLAS_R_16F || l->ctype == MP_BLAS_R_16BF;
    if (l->m % 16 || l->n % 16 || l->k % 16 || l->ldc % 16 || !ok_c
        || (l->atype == MP_BLAS_R_8F_E5M2 && l->btype == MP_BLAS_R_8F_E5M2) || mp_emu_fail("lt"))
        return MP_BLAS_STATUS_NOT_SUPPORTED;
    MpCuLt c = *l;
    mp_cu_emu_run(mp_cu.st, "cublasLtMatmul", [=]() {
        std::vector<float> a((size_t)c.k * c.m), b((size_t)c.k * c.n);
        MpFp8Fmt fa = c.atype == MP_BLAS_R_8F_E5M2 ? MP_E5M2 : MP_E4M3;
        MpFp8Fmt fb = c.btype == MP_BLAS_R_8F_E5M2 ? MP_E5M2 : MP_E4M3;
        for (size_t i = 0; i < a.size(); i++)
            a[i] = mp_fp8_to_f32(c.A[i], fa);
        for (size_t i = 0; i < b.size(); i++)
            b[i] = mp_fp8_to_f32(c.B[i], fb);
        MpBlasArgs g = {MP_BLAS_OP_T, MP_BLAS_OP_N, c.m, c.n, c.k, a.data(), MP_BLAS_R_32F, c.k, 0,
                        b.data(), MP_BLAS_R_32F, c.k, 0, c.C, c.ctype, c.ldc, 0, 1};
        mp_cu_emu_gemm(&g, c.alpha * *c.sa * *c.sb, c.beta);
    });
    return MP_BLAS_STATUS_SUCCESS;
}
#endif

/* One FP8 product through cuBLASLt: its status (NOT_SUPPORTED when no
 * algorithm takes it). */
static inline MpBlasStatus mp_cu_lt(const MpCuLt *l)
{
#ifdef MP_CU_EMU
    return mp_cu_emu_lt(l);
#else
    MpBlasLt *lt = &mp_cu.lt;
    MpLtDesc d = NULL;
    MpLtLayout la = NULL, lb = NULL, lc = NULL;
    MpLtPref pref = NULL;
    MpLtHeuristic h;
    int ta = MP_BLAS_OP_T, tb = MP_BLAS_OP_N, found = 0;
    size_t ws = MP_CU_BLAS_WS;
    MpBlasStatus s = lt->desc_create(&d, MP_BLAS_COMPUTE_32F, MP_BLAS_R_32F);
    if (!s) s = lt->desc_set(d, MP_LT_DESC_TRANSA, &ta, sizeof ta);
    if (!s) s = lt->desc_set(d, MP_LT_DESC_TRANSB, &tb, sizeof tb);
    if (!s) s = lt->desc_set(d, MP_LT_DESC_A_SCALE_POINTER, &l->sa, sizeof l->sa);
    if (!s) s = lt->desc_set(d, MP_LT_DESC_B_SCALE_POINTER, &l->sb, sizeof l->sb);
    if (!s) s = lt->layout_create(&la, l->atype, (uint64_t)l->k, (uint64_t)l->m, l->k);
    if (!s) s = lt->layout_create(&lb, l->btype, (uint64_t)l->k, (uint64_t)l->n, l->k);
    if (!s) s = lt->layout_create(&lc, l->ctype, (uint64_t)l->m, (uint64_t)l->n, l->ldc);
    if (!s) s = lt->pref_create(&pref);
    if (!s) s = lt->pref_set(pref, MP_LT_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (!s) s = lt->heuristic(mp_cu.lt_handle, d, la, lb, lc, lc, pref, 1, &h, &found);
    if (!s && found < 1)
        s = MP_BLAS_STATUS_NOT_SUPPORTED;
    if (!s)
        s = lt->matmul(mp_cu.lt_handle, d, &l->alpha, l->A, la, l->B, lb, &l->beta, l->C, lc, l->C, lc,
                       &h.algo, mp_cu.blas_ws, ws, mp_cu.st);
    if (pref) lt->pref_destroy(pref);
    if (lc) lt->layout_destroy(lc);
    if (lb) lt->layout_destroy(lb);
    if (la) lt->layout_destroy(la);
    if (d) lt->desc_destroy(d);
    return s;
#endif
}

/* mp_cu_gemm's product g of the pending operands: 1 when cuBLASLt ran it
 * in FP8; 0 when it is left to the bf16 product, with the operands' bf16
 * copies made. Our row-major C = op(A) op(B) is cuBLAS's column-major
 * C^T = op(B)^T op(A)^T (mp_blas_args): cuBLASLt's A is our B, which its
 * "TN" rule wants as [N, K] (our tb = 1), and its B our A as [M, K] (our
 * ta = 0); an operand stored the other way is quantised transposed. */
static inline int mp_cu_fp8_product(const MpCuGemm *g)
{
    int ka = g->A == mp_cu.fp8_q[0] ? 0 : g->A == mp_cu.fp8_q[1] ? 1 : -1;
    int kb = g->B == mp_cu.fp8_q[0] ? 0 : g->B == mp_cu.fp8_q[1] ? 1 : -1;
    const MpCuFp8Src *a = ka >= 0 ? &mp_cu.fp8_src[ka] : NULL, *b = kb >= 0 ? &mp_cu.fp8_src[kb] : NULL;
    int ctype = mp_blas_type(g->cdt);
    int ok = mp_cu.fp8_lt && a && b && a->x && b->x && g->batch == 1 && ctype >= 0
          && g->M % 16 == 0 && g->N % 16 == 0 && g->K % 16 == 0 && g->ldc % 16 == 0
          && g->lda == (g->ta ? g->M : g->K) && g->ldb == (g->tb ? g->K : g->N)
          && g->M < INT_MAX && g->N < INT_MAX && g->K < INT_MAX;
    if (ok) {
        MpFp8Fmt fa = mp_cu_fp8_fmt(a->slot), fb = mp_cu_fp8_fmt(b->slot);
        MpCuFp8Src sa = *a, sb = *b;
        mp_cu_fp8_bytes(0, &sa, g->M, g->K, g->ta);      /* our A as [M, K] */
        mp_cu_fp8_bytes(1, &sb, g->N, g->K, !g->tb);     /* our B as [N, K] */
        MpCuLt l = {(int)g->N, (int)g->M, (int)g->K, g->alpha, g->beta,
                    mp_cu.fp8_b[1], fb == MP_E5M2 ? MP_BLAS_R_8F_E5M2 : MP_BLAS_R_8F_E4M3, mp_cu.fp8_scale + 1,
                    mp_cu.fp8_b[0], fa == MP_E5M2 ? MP_BLAS_R_8F_E5M2 : MP_BLAS_R_8F_E4M3, mp_cu.fp8_scale,
                    g->C, ctype, (int)g->ldc};
        MpBlasStatus s = mp_cu_lt(&l);
        if (s == MP_BLAS_STATUS_SUCCESS) {
            mp_cu.fp8_src[0].x = mp_cu.fp8_src[1].x = NULL;
            if (mp_cu.sync)          /* its kernels' fault named here */
                mp_cu_queued("product", "cublasLtMatmul", cudaSuccess);
            return 1;
        }
        fprintf(stderr, "note: mixed_float8: cuBLASLt refused an FP8 product (%lld x %lld x %lld, status "
                "%d); the FP8 products run as bf16 products of the quantised values from here on\n",
                (long long)g->M, (long long)g->N, (long long)g->K, (int)s);
        mp_cu.fp8_lt = 0;
    }
    mp_cu_fp8_settle();
    return 0;
}

/* After the GPU is open: cuBLASLt's FP8 products when the model has
 * quantised ones, the GPU is sm_89 or later and MP_CUDA_FP8 is "auto" (or
 * unset), not "bf16"; any other value is a usage error (exit 2, as MP_CPU's).
 * The start-up note says which way they run. */
static inline void mp_cu_fp8_open(const MpModel *m)
{
    const char *env = getenv("MP_CUDA_FP8");
    const char *why = NULL;
#ifndef MP_CU_EMU
    static char msg[512];
#endif
    mp_cu.fp8_lt = 0;
    if (env && *env && strcmp(env, "auto") && strcmp(env, "bf16")) {
        fprintf(stderr, "error: MP_CUDA_FP8=%s: expected auto (cuBLASLt's FP8 products where the GPU "
                "has them) or bf16 (bf16 products of the quantised values)\n", env);
        exit(2);
    }
    if (!m->fp8)
        return;
    if (env && !strcmp(env, "bf16"))
        why = "MP_CUDA_FP8=bf16";
    else if (mp_cu.cc < 89)
        why = "a GPU before sm_89 has no FP8 Tensor Cores";
#ifndef MP_CU_EMU
    else if (mp_blaslt_load(&mp_cu.lt, msg, sizeof msg))
        why = msg;
    else if (mp_cu.lt.create(&mp_cu.lt_handle) != MP_BLAS_STATUS_SUCCESS)
        why = "cublasLtCreate failed";
#endif
    mp_cu.fp8_lt = !why;
    mp_cu.fp8_product = mp_cu_fp8_product;
    if (!mp_dist_writer())
        return;
    if (why)
        fprintf(stderr, "note: mixed_float8: the products run on Tensor Cores as bf16 products of the "
                "e4m3 / e5m2 quantised values (the C program's numbers), not cuBLASLt's FP8 ones: %s\n", why);
    else
        fprintf(stderr, "note: mixed_float8: the products run on FP8 Tensor Cores (cuBLASLt, e4m3 / e5m2, "
                "per-tensor scales); one whose sizes are not multiples of 16 as a bf16 product of the "
                "quantised values\n");
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
    MP_CU_FP8_CUT(mp_cu.fp8_b[0], unsigned char *, mp_cu.fp8_need / 2);   /* n bytes each */
    MP_CU_FP8_CUT(mp_cu.fp8_b[1], unsigned char *, mp_cu.fp8_need / 2);
    MP_CU_FP8_CUT(mp_cu.fp8_scale, float *, 2 * (int64_t)sizeof(float));
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
