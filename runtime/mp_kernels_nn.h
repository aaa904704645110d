/* mp_kernels_nn.h - convolution, pooling, embedding, normalisation and
 * attention, forward and backward. API list: mp_kernels.h.
 *
 * Images are NCHW. Convolutions lower to mp_gemm through im2col (one image
 * and group at a time: col [C/G kh kw, OH OW] in f32, exact for any storage
 * type), pointwise ones (1 x 1, stride 1, no padding) read the image as
 * it is; depthwise ones (one input channel per group) run direct kernels.
 * Kernels whose output gathers sums from several places (col2im, pooling
 * gradients, embedding and norm weight gradients) add into an f32 (or
 * double) buffer and round once when storing. Statistics (means,
 * variances) are summed in double. Work is split so that every sum is
 * made in the same order whatever the number of threads. */
#ifndef MP_KERNELS_NN_H
#define MP_KERNELS_NN_H

#include "mp_kernels.h"
#include "mp_kernels_gemm.h"

/* Eight floats in a vector (GCC and Clang: AVX registers under -mavx, two
 * SSE registers otherwise); other compilers take the scalar loops. */
#if !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#define MP_NN_VEC 8
typedef float MpNnV __attribute__((vector_size(32)));
/* v = p[0 .. 8), unaligned (a macro: a function returning an AVX vector
 * has another ABI with and without -mavx, which -Wpsabi flags) */
#define MP_NN_VLD(v, p) memcpy(&(v), (p), sizeof(MpNnV))
#endif

/* mp_ld_n and mp_st_n, f32 runs of up to MP_RUN_SHORT floats copied by a
 * loop: the gathers below (im2col, blocks of images' planes, a batch
 * norm's channel) copy runs of a plane's width or size, one float where
 * planes are 1 x 1, and there a memcpy call costs more than the copy. */
#define MP_RUN_SHORT 16
static inline void mp_ld_run(const void *p, int dt, int64_t off, int64_t stride, int64_t n,
                             float *d)
{
    if (dt != MP_F32 || n > MP_RUN_SHORT) {
        mp_ld_n(p, dt, off, stride, n, d);
        return;
    }
    const float *s = (const float *)p + off;
    for (int64_t i = 0; i < n; i++) d[i] = s[i * stride];
}

static inline void mp_st_run(void *p, int dt, int64_t off, int64_t n, const float *s)
{
    if (dt != MP_F32 || n > MP_RUN_SHORT) {
        mp_st_n(p, dt, off, 1, n, s);
        return;
    }
    float *d = (float *)p + off;
    for (int64_t i = 0; i < n; i++) d[i] = s[i];
}

/* ---- conv2d ------------------------------------------------------------- */

/* First and one-past-last output column ox whose input column
 * ox sw - pw + kx dw lies in [0, W). */
static inline void mp_conv_span(const MpConv *v, int64_t kx, int64_t *lo, int64_t *hi)
{
    int64_t a = v->pw - kx * v->dw;               /* need ox sw >= a */
    *lo = a <= 0 ? 0 : (a + v->sw - 1) / v->sw;
    int64_t b = v->W - 1 + v->pw - kx * v->dw;    /* need ox sw <= b */
    *hi = b < 0 ? 0 : mp_min64(b / v->sw + 1, v->OW);
    if (*hi < *lo)
        *hi = *lo;
}

/* Input row of output row oy at tap ky, or -1 in the padding. */
static inline int64_t mp_conv_row(const MpConv *v, int64_t oy, int64_t ky)
{
    int64_t iy = oy * v->sh - v->ph + ky * v->dh;
    return iy < 0 || iy >= v->H ? -1 : iy;
}

/* col[((c kh + ky) kw + kx) ld + oy OW + ox] = x[c0 + c, iy, ix] for the
 * nc channels from c0 of the image at element xoff, 0 in the padding (ld:
 * OH OW for one image's col, more when several images' share its rows). */
static inline void mp_im2col(float *col, int64_t ld, const void *x, int xdt, int64_t xoff,
                             int64_t c0, int64_t nc, const MpConv *v)
{
    for (int64_t c = 0; c < nc; c++)
        for (int64_t ky = 0; ky < v->kh; ky++)
            for (int64_t kx = 0; kx < v->kw; kx++) {
                float *row = col + ((c * v->kh + ky) * v->kw + kx) * ld;
                int64_t lo, hi;
                mp_conv_span(v, kx, &lo, &hi);
                for (int64_t oy = 0; oy < v->OH; oy++) {
                    float *r = row + oy * v->OW;
                    int64_t iy = mp_conv_row(v, oy, ky);
                    if (iy < 0) {
                        memset(r, 0, (size_t)v->OW * sizeof *r);
                        continue;
                    }
                    for (int64_t ox = 0; ox < lo; ox++) r[ox] = 0.0f;
                    if (hi > lo)
                        mp_ld_run(x, xdt, xoff + ((c0 + c) * v->H + iy) * v->W + lo * v->sw - v->pw +
                                  kx * v->dw, v->sw, hi - lo, r + lo);
                    for (int64_t ox = hi; ox < v->OW; ox++) r[ox] = 0.0f;
                }
            }
}

/* The reverse: dx[c, iy, ix] += col[...] into the f32 planes dx of nc
 * channels. */
static inline void mp_col2im(float *dx, const float *col, int64_t ld, int64_t nc, const MpConv *v)
{
    for (int64_t c = 0; c < nc; c++)
        for (int64_t ky = 0; ky < v->kh; ky++)
            for (int64_t kx = 0; kx < v->kw; kx++) {
                const float *row = col + ((c * v->kh + ky) * v->kw + kx) * ld;
                int64_t lo, hi;
                mp_conv_span(v, kx, &lo, &hi);
                for (int64_t oy = 0; oy < v->OH; oy++) {
                    int64_t iy = mp_conv_row(v, oy, ky);
                    if (iy < 0)
                        continue;
                    float *d = dx + c * v->H * v->W;
                    int64_t at = iy * v->W - v->pw + kx * v->dw;
                    for (int64_t ox = lo; ox < hi; ox++) d[at + ox * v->sw] += row[oy * v->OW + ox];
                }
            }
}

/* A pointwise conv (1 x 1 taps, stride 1, no padding): a group's im2col is
 * its cg input planes as they are, so its products read x (or write the
 * input gradient) in place, with no col buffer. x is read as stored, which
 * gives the same product as its f32 copy unless float32_matmul = "tf32"
 * would round an f32 copy and not a f16 one: then it is copied. */
static inline int mp_conv_pointwise(const MpConv *v, int xdt)
{
    return v->kh == 1 && v->kw == 1 && v->sh == 1 && v->sw == 1 && v->ph == 0 && v->pw == 0 &&
           (xdt == MP_F32 || !mp_gemm_tf32 || mp_gemm_exact);
}

/* The product's operand for group g of image n: x's planes in place (pw,
 * *dt = xdt), else their im2col in col (*dt = f32). */
static inline const void *mp_conv_operand(float *col, const void *x, int xdt, int64_t n,
                                          int64_t g, const MpConv *v, int pw, int *dt)
{
    int64_t cg = v->C / v->G;
    *dt = pw ? xdt : MP_F32;
    if (pw)
        return mp_at(x, xdt, (n * v->C + g * cg) * v->H * v->W);
    mp_im2col(col, v->OH * v->OW, x, xdt, n * v->C * v->H * v->W, g * cg, cg, v);
    return col;
}

/* Elements [off, off + n) of p as f32: p's own when it stores f32 (no
 * copy; the caller writes them only when p is its output), else loaded
 * into buf. */
static inline float *mp_f32_span(const void *p, int dt, int64_t off, int64_t n, float *buf)
{
    if (dt == MP_F32)
        return (float *)p + off;
    mp_ld_n(p, dt, off, 1, n, buf);
    return buf;
}

/* A depthwise conv's taps, pixel by pixel: for each pixel p of the planes
 * whose sums they make (forward: the output's; transposed: the input's),
 * the taps t that reach it, in order, and the pixel q of the other plane
 * each reads: tq[p kk + j], j < cnt[p]. A tap reaches a pixel at most
 * once. Built once a call, so that the planes (N F of them; most of
 * MobileNetV2's are 4 x 4 to 1 x 1) pay no geometry of their own. */
typedef struct MpDwTap {
    int32_t t, q;
} MpDwTap;

static inline MpDwTap *mp_dw_taps(const MpConv *v, int transposed, int32_t **cnt)
{
    int64_t kk = v->kh * v->kw, np = transposed ? v->H * v->W : v->OH * v->OW;
    MpDwTap *tq = (MpDwTap *)mp_kalloc((size_t)(np * kk) * sizeof *tq);
    *cnt = (int32_t *)mp_kzalloc((size_t)np * sizeof **cnt);
    for (int64_t t = 0; t < kk; t++) {
        int64_t ky = t / v->kw, kx = t % v->kw, lo, hi;
        mp_conv_span(v, kx, &lo, &hi);
        for (int64_t oy = 0; oy < v->OH; oy++) {
            int64_t iy = mp_conv_row(v, oy, ky);
            for (int64_t ox = lo; iy >= 0 && ox < hi; ox++) {
                int64_t in = iy * v->W - v->pw + kx * v->dw + ox * v->sw, out = oy * v->OW + ox;
                int64_t p = transposed ? in : out;
                MpDwTap e = {(int32_t)t, (int32_t)(transposed ? out : in)};
                tq[p * kk + (*cnt)[p]++] = e;
            }
        }
    }
    return tq;
}

/* s[p] += sum over p's taps, in order, of wk[t] src[q], p < np (each
 * pixel's sum one chain, in the order mp_dw_taps lists them). */
static inline void mp_dw_gather(float *s, const float *src, const float *wk, const MpDwTap *tq,
                                const int32_t *cnt, int64_t np, int64_t kk)
{
    for (int64_t p = 0; p < np; p++) {
        float a = s[p];
        for (int32_t j = 0; j < cnt[p]; j++) a += wk[tq[p * kk + j].t] * src[tq[p * kk + j].q];
        s[p] = a;
    }
}

/* Depthwise forward: plane (n, f) = bias[f] + sum over the taps, in (ky,
 * kx) order, of w[f, ky, kx] times input plane (n, f / m), m = F / C. */
static inline void mp_conv_depthwise_fwd(void *y, int ydt, const void *x, int xdt, const void *w,
                                         int wdt, const void *bias, int bdt, int64_t N,
                                         const MpConv *v)
{
    int64_t m = v->F / v->C, hw = v->H * v->W, npix = v->OH * v->OW, kk = v->kh * v->kw;
    int32_t *cnt;
    MpDwTap *tq = mp_dw_taps(v, 0, &cnt);
    float *wk = (float *)mp_kalloc((size_t)(v->F * kk + v->F) * sizeof *wk), *bk = wk + v->F * kk;
    mp_ld_n(w, wdt, 0, 1, v->F * kk, wk);
    for (int64_t f = 0; f < v->F; f++) bk[f] = bias ? mp_ld(bias, bdt, f) : 0.0f;
    MP_OMP(parallel if (N * v->F * npix * kk > MP_PAR_MIN))
    {
        float *buf = (float *)mp_kalloc((size_t)(hw + npix) * sizeof *buf);
        MP_OMP(for schedule(static))
        for (int64_t pl = 0; pl < N * v->F; pl++) {
            int64_t n = pl / v->F, f = pl % v->F;
            const float *xp = mp_f32_span(x, xdt, (n * v->C + f / m) * hw, hw, buf);
            float *acc = ydt == MP_F32 ? (float *)y + pl * npix : buf + hw;
            for (int64_t i = 0; i < npix; i++) acc[i] = bk[f];
            mp_dw_gather(acc, xp, wk + f * kk, tq, cnt, npix, kk);
            if (ydt != MP_F32)
                mp_st_n(y, ydt, pl * npix, 1, npix, acc);
        }
        free(buf);
    }
    free(tq);
    free(cnt);
    free(wk);
}

/* Plane c of an adjoint's result (conv_transpose2d) gets bias[c], after its
 * sums (the CUDA program's order). */
static inline void mp_conv_add_bias(float *plane, const void *bias, int bdt, int64_t c, int64_t n)
{
    if (!bias)
        return;
    float b = mp_ld(bias, bdt, c);
    for (int64_t i = 0; i < n; i++) plane[i] += b;
}

/* Depthwise input gradient: plane (n, c) gathers its m output planes in
 * order, each pixel its taps in order, in f32; one thread per plane. */
static inline void mp_conv_depthwise_dx(void *dx, int dxdt, const void *dy, int dydt,
                                        const void *w, int wdt, const void *bias, int bdt,
                                        int64_t N, const MpConv *v)
{
    int64_t m = v->F / v->C, hw = v->H * v->W, npix = v->OH * v->OW, kk = v->kh * v->kw;
    int32_t *cnt;
    MpDwTap *tq = mp_dw_taps(v, 1, &cnt);
    float *wk = (float *)mp_kalloc((size_t)(v->F * kk) * sizeof *wk);
    mp_ld_n(w, wdt, 0, 1, v->F * kk, wk);
    MP_OMP(parallel if (N * v->F * npix * kk > MP_PAR_MIN))
    {
        float *buf = (float *)mp_kalloc((size_t)(hw + npix) * sizeof *buf);
        MP_OMP(for schedule(static))
        for (int64_t pl = 0; pl < N * v->C; pl++) {
            int64_t n = pl / v->C, c = pl % v->C;
            float *g = dxdt == MP_F32 ? (float *)dx + pl * hw : buf;
            memset(g, 0, (size_t)hw * sizeof *g);
            for (int64_t f = c * m; f < (c + 1) * m; f++) {
                const float *dyp = mp_f32_span(dy, dydt, (n * v->F + f) * npix, npix, buf + hw);
                mp_dw_gather(g, dyp, wk + f * kk, tq, cnt, hw, kk);
            }
            mp_conv_add_bias(g, bias, bdt, c, hw);
            if (dxdt != MP_F32)
                mp_st_n(dx, dxdt, pl * hw, 1, hw, g);
        }
        free(buf);
    }
    free(tq);
    free(cnt);
    free(wk);
}

/* Depthwise weight gradient: dw[f, ky, kx] = sum over images (in order) of
 * the tap's products in one plane, each image's sum in f32 (pixels in
 * order), the images' in double. Eight output channels at a time, one per
 * vector lane: their planes interleaved (pixel-major), each lane sums its
 * own channel in that order, so the sums are the one-channel loop's, but
 * eight at once instead of one add waiting on the last. One thread per
 * block of channels. */
#define MP_DW_LANES 8      /* MP_NN_VEC where vectors are */
static inline void mp_conv_depthwise_dw(void *dw, int dwdt, const void *dy, int dydt,
                                        const void *x, int xdt, int64_t N, const MpConv *v,
                                        float beta)
{
    enum { L = MP_DW_LANES };
    int64_t m = v->F / v->C, hw = v->H * v->W, npix = v->OH * v->OW, kk = v->kh * v->kw;
    int64_t nblk = (v->F + L - 1) / L;
    float *out = (float *)mp_kalloc((size_t)(v->F * kk) * sizeof *out);
    MP_OMP(parallel if (N * v->F * npix * kk > MP_PAR_MIN))
    {
        float *xq = (float *)mp_kalloc((size_t)((hw + npix) * L + hw + npix) * sizeof *xq);
        float *dq = xq + hw * L, *buf = dq + npix * L;
        double *acc = (double *)mp_kalloc((size_t)(kk * L) * sizeof *acc);
        MP_OMP(for schedule(static))
        for (int64_t blk = 0; blk < nblk; blk++) {
            int64_t f0 = blk * L, nl = mp_min64(L, v->F - f0);
            for (int64_t i = 0; i < kk * L; i++) acc[i] = 0;
            if (nl < L) {   /* the last block's idle lanes read zeros */
                memset(xq, 0, (size_t)(hw * L) * sizeof *xq);
                memset(dq, 0, (size_t)(npix * L) * sizeof *dq);
            }
            for (int64_t n = 0; n < N; n++) {
                for (int64_t l = 0; l < nl; l++) {
                    const float *xp = mp_f32_span(x, xdt, (n * v->C + (f0 + l) / m) * hw, hw, buf);
                    const float *dyp = mp_f32_span(dy, dydt, (n * v->F + f0 + l) * npix, npix, buf + hw);
                    for (int64_t i = 0; i < hw; i++) xq[i * L + l] = xp[i];
                    for (int64_t i = 0; i < npix; i++) dq[i * L + l] = dyp[i];
                }
                for (int64_t t = 0; t < kk; t++) {
                    int64_t ky = t / v->kw, kx = t % v->kw, lo, hi;
                    float sum[L] = {0};
                    mp_conv_span(v, kx, &lo, &hi);
                    for (int64_t oy = 0; oy < v->OH; oy++) {
                        int64_t iy = mp_conv_row(v, oy, ky);
                        if (iy < 0)
                            continue;
                        const float *o = dq + oy * v->OW * L;
                        int64_t at = iy * v->W - v->pw + kx * v->dw;
#ifdef MP_NN_VEC
                        /* (whether a * b + s is one FMA is the compiler's
                         * choice, as for the scalar loop: GCC's AMD tunings
                         * keep vector chains unfused) */
                        MpNnV sv, a, b;
                        MP_NN_VLD(sv, sum);
                        for (int64_t ox = lo; ox < hi; ox++) {
                            MP_NN_VLD(a, o + ox * L);
                            MP_NN_VLD(b, xq + (at + ox * v->sw) * L);
                            sv += a * b;
                        }
                        memcpy(sum, &sv, sizeof sv);
#else
                        for (int64_t ox = lo; ox < hi; ox++)
                            for (int l = 0; l < L; l++) sum[l] += o[ox * L + l] * xq[(at + ox * v->sw) * L + l];
#endif
                    }
                    for (int l = 0; l < L; l++) acc[t * L + l] += sum[l];
                }
            }
            for (int64_t l = 0; l < nl; l++)
                for (int64_t t = 0; t < kk; t++) out[(f0 + l) * kk + t] = (float)acc[t * L + l];
        }
        free(xq);
        free(acc);
    }
    mp_st_beta(dw, dwdt, 0, v->F * kk, out, beta);
    free(out);
}

/* ---- several images in one product -------------------------------------
 * Where a conv's output planes are small (MobileNetV2's deep layers: 8 x 8
 * down to 1 x 1) a product per image is a few columns wide: the weights are
 * read once per image, each output row is a store of its own, and the
 * weight gradient is N thin products. Such convs multiply nb images at
 * once: a block's col holds image b's im2col rows at columns [b OH OW,
 * (b + 1) OH OW), so the product has nb OH OW columns. Blocks run in turn,
 * each product on all threads (its own split, mp_gemm_blocked) and each
 * copy around it split over the images. Each output element of the
 * forward and of the input gradient is the same sum, in the same order, as
 * with one image a product (the same bits; through a BLAS, MP_USE_CBLAS,
 * whatever its kernels for the shape give); the weight gradient sums a
 * block's nb OH OW terms as one chain, then adds it to the blocks before,
 * in an order no thread count changes. */
#define MP_CONV_SMALL 256      /* planes of fewer pixels run as blocks of images */
#define MP_CONV_COLS 2048      /* columns of a block's product (at most) */
#define MP_CONV_DW_ALONE 64    /* the weight gradient: planes of this many pixels one a block, */
#define MP_CONV_DW_TERMS 256   /* smaller ones up to this many pixels a block (below) */
#define MP_CONV_DW_PART (1 << 22)   /* floats of its blocks' partial sums */

/* Images per product: 1 where planes are large, else as many as fill cols
 * columns, at most N. */
static inline int64_t mp_conv_images(const MpConv *v, int64_t N, int64_t cols)
{
    int64_t npix = v->OH * v->OW, nb = cols / npix;
    return npix >= MP_CONV_SMALL || nb < 1 ? 1 : nb > N ? N : nb;
}

/* Operand rounding of an f32 copy of a tensor stored as dt: bf16 values
 * keep the bf16 micro-kernel (mp_uk) their tensor would have taken. */
static inline int mp_conv_copy_rnd(int dt) { return dt == MP_BF16 ? MP_BF16 : 0; }

/* The col [C/G kh kw, nb OH OW] of images [n0, n0 + nb), group g. */
static inline void mp_im2col_images(float *col, const void *x, int xdt, int64_t n0, int64_t nb,
                                    int64_t g, const MpConv *v)
{
    int64_t npix = v->OH * v->OW, cg = v->C / v->G;
    MP_OMP(parallel for if (nb * cg * v->kh * v->kw * npix > MP_PAR_MIN))
    for (int64_t b = 0; b < nb; b++)
        mp_im2col(col + b * npix, nb * npix, x, xdt, (n0 + b) * v->C * v->H * v->W, g * cg, cg, v);
}

/* d[f, b npix + p] = y[n0 + b, f0 + f, p] of a [N, F, npix] tensor, f < nf,
 * b < nb, as f32; put = 1: the other way, rounding to dt. */
static inline void mp_planes_move(float *d, void *y, int dt, int64_t n0, int64_t nb, int64_t F,
                                  int64_t f0, int64_t nf, int64_t npix, int put)
{
    MP_OMP(parallel for if (nf * nb * npix > MP_PAR_MIN))
    for (int64_t f = 0; f < nf; f++)
        for (int64_t b = 0; b < nb; b++) {
            int64_t at = ((n0 + b) * F + f0 + f) * npix;
            float *r = d + (f * nb + b) * npix;
            if (put)
                mp_st_run(y, dt, at, npix, r);
            else
                mp_ld_run(y, dt, at, 1, npix, r);
        }
}

/* mp_k_conv2d, nb images a product. */
static inline void mp_conv_fwd_images(void *y, int ydt, const void *x, int xdt, const void *w,
                                      int wdt, const void *bias, int bdt, int64_t N,
                                      const MpConv *v, int64_t nb)
{
    int64_t cg = v->C / v->G, fg = v->F / v->G, npix = v->OH * v->OW, ckk = cg * v->kh * v->kw;
    float *col = (float *)mp_kalloc((size_t)((ckk + fg) * nb * npix) * sizeof *col);
    float *out = col + ckk * nb * npix;
    for (int64_t n0 = 0; n0 < N; n0 += nb)
        for (int64_t g = 0; g < v->G; g++) {
            int64_t m = mp_min64(nb, N - n0), ld = m * npix;
            mp_im2col_images(col, x, xdt, n0, m, g, v);
            MpGemm p = {0, 0, fg, ld, ckk, 1.0f, 0.0f, mp_at(w, wdt, g * fg * ckk), wdt, ckk,
                        col, MP_F32, ld, out, MP_F32, ld,
                        bias ? mp_at(bias, bdt, g * fg) : NULL, bdt, 1, 0,
                        mp_conv_copy_rnd(xdt), NULL, NULL};
            mp_gemm_ex(&p);
            mp_planes_move(out, y, ydt, n0, m, v->F, g * fg, fg, npix, 1);
        }
    free(col);
}

/* mp_conv_adjoint, nb images a product: col = w_g^T dy_g of the block, then
 * each image's col2im into its own planes. */
static inline void mp_conv_adjoint_images(void *dx, int dxdt, const void *dy, int dydt,
                                          const void *w, int wdt, const void *bias, int bdt,
                                          int64_t N, const MpConv *v, int64_t nb)
{
    int64_t cg = v->C / v->G, fg = v->F / v->G, npix = v->OH * v->OW, ckk = cg * v->kh * v->kw;
    int64_t nx = v->C * v->H * v->W, hw = v->H * v->W;
    float *col = (float *)mp_kalloc((size_t)((ckk + fg) * nb * npix + nb * nx) * sizeof *col);
    float *dyb = col + ckk * nb * npix, *img = dyb + fg * nb * npix;
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
        int64_t m = mp_min64(nb, N - n0), ld = m * npix;
        for (int64_t g = 0; g < v->G; g++) {
            mp_planes_move(dyb, (void *)dy, dydt, n0, m, v->F, g * fg, fg, npix, 0);
            MpGemm p = {1, 0, ckk, ld, fg, 1.0f, 0.0f, mp_at(w, wdt, g * fg * ckk), wdt, ckk,
                        dyb, MP_F32, ld, col, MP_F32, ld, NULL, MP_F32, 0, 0,
                        mp_conv_copy_rnd(dydt), NULL, NULL};
            mp_gemm_ex(&p);
            MP_OMP(parallel for if (m * cg * hw > MP_PAR_MIN))
            for (int64_t b = 0; b < m; b++) {
                float *d = img + b * nx + g * cg * hw;
                if (g == 0)
                    memset(img + b * nx, 0, (size_t)nx * sizeof *img);
                mp_col2im(d, col + b * npix, ld, cg, v);
                if (g < v->G - 1)
                    continue;
                for (int64_t c = 0; bias && c < v->C; c++)
                    mp_conv_add_bias(img + b * nx + c * hw, bias, bdt, c, hw);
                mp_st_n(dx, dxdt, (n0 + b) * nx, 1, nx, img + b * nx);
            }
        }
    }
    free(col);
}

/* y[N, F, OH, OW] = conv(x[N, C, H, W], w[F, C / G, kh, kw]) + bias[F]:
 * per image and group, w_g [F/G, C/G kh kw] @ im2col of the group's
 * channels; depthwise directly. */
static inline void mp_k_conv2d(void *y, int ydt, const void *x, int xdt, const void *w,
                               int wdt, const void *bias, int bdt, int64_t N, MpConv v)
{
    if (mp_conv_depthwise(&v)) {
        mp_conv_depthwise_fwd(y, ydt, x, xdt, w, wdt, bias, bdt, N, &v);
        return;
    }
    int64_t nb = mp_conv_images(&v, N, MP_CONV_COLS);
    if (nb > 1 || N == 1) {   /* one image: its product on all threads */
        mp_conv_fwd_images(y, ydt, x, xdt, w, wdt, bias, bdt, N, &v, nb);
        return;
    }
    int64_t cg = v.C / v.G, fg = v.F / v.G, npix = v.OH * v.OW, ckk = cg * v.kh * v.kw;
    int pw = mp_conv_pointwise(&v, xdt);
    MP_OMP(parallel)   /* N > 1 here */
    {
        float *col = pw ? NULL : (float *)mp_kalloc((size_t)(ckk * npix) * sizeof *col);
        MP_OMP(for schedule(dynamic))
        for (int64_t n = 0; n < N; n++)
            for (int64_t g = 0; g < v.G; g++) {
                int bt;
                const void *b = mp_conv_operand(col, x, xdt, n, g, &v, pw, &bt);
                MpGemm p = {0, 0, fg, npix, ckk, 1.0f, 0.0f, mp_at(w, wdt, g * fg * ckk), wdt, ckk,
                            b, bt, npix,
                            (char *)y + (n * v.F + g * fg) * npix * mp_dt_size(ydt), ydt, npix,
                            bias ? mp_at(bias, bdt, g * fg) : NULL, bdt, 1, 0, 0, NULL, NULL};
                mp_gemm_ex(&p);
            }
        free(col);
    }
}

/* dx[N, C, H, W] from dy[N, F, OH, OW] (+ bias[C] when not NULL): per group
 * col = w_g^T dy_g, then col2im; depthwise directly. The input gradient of
 * conv2d, and conv_transpose2d's forward (one product per group). */
static inline void mp_conv_adjoint(void *dx, int dxdt, const void *dy, int dydt, const void *w,
                                   int wdt, const void *bias, int bdt, int64_t N, MpConv v)
{
    if (mp_conv_depthwise(&v)) {
        mp_conv_depthwise_dx(dx, dxdt, dy, dydt, w, wdt, bias, bdt, N, &v);
        return;
    }
    int64_t nb = mp_conv_images(&v, N, MP_CONV_COLS);
    if (nb > 1 || N == 1) {   /* one image: its product on all threads */
        mp_conv_adjoint_images(dx, dxdt, dy, dydt, w, wdt, bias, bdt, N, &v, nb);
        return;
    }
    int64_t cg = v.C / v.G, fg = v.F / v.G, npix = v.OH * v.OW, ckk = cg * v.kh * v.kw;
    int64_t nx = v.C * v.H * v.W;
    int pw = mp_conv_pointwise(&v, MP_F32);     /* col is img's planes */
    MP_OMP(parallel)   /* N > 1 here */
    {
        float *col = pw ? NULL : (float *)mp_kalloc((size_t)(ckk * npix) * sizeof *col);
        float *img = (float *)mp_kalloc((size_t)nx * sizeof *img);
        MP_OMP(for schedule(dynamic))
        for (int64_t n = 0; n < N; n++) {
            memset(img, 0, (size_t)nx * sizeof *img);
            for (int64_t g = 0; g < v.G; g++) {
                /* pointwise: added to img's zeros (beta 1), as col2im adds
                 * (a -0 sum stored +0) */
                float *c = pw ? img + g * cg * npix : col;
                mp_gemm(1, 0, ckk, npix, fg, 1.0f, mp_at(w, wdt, g * fg * ckk), wdt, ckk,
                        mp_at(dy, dydt, (n * v.F + g * fg) * npix), dydt, npix, pw ? 1.0f : 0.0f,
                        c, MP_F32, npix);
                if (!pw)
                    mp_col2im(img + g * cg * v.H * v.W, col, npix, cg, &v);
            }
            for (int64_t c = 0; bias && c < v.C; c++)
                mp_conv_add_bias(img + c * v.H * v.W, bias, bdt, c, v.H * v.W);
            mp_st_n(dx, dxdt, n * nx, 1, nx, img);
        }
        free(col);
        free(img);
    }
}

static inline void mp_k_conv2d_dx(void *dx, int dxdt, const void *dy, int dydt,
                                  const void *w, int wdt, int64_t N, MpConv v)
{
    mp_conv_adjoint(dx, dxdt, dy, dydt, w, wdt, NULL, MP_F32, N, v);
}

/* conv_transpose2d: y[N, c, H, W] from x[N, Cin, OH, OW] and w[Cin, c / G,
 * kh, kw], v the conv2d from y's image to x's (C = c, F = Cin): the adjoint
 * of that conv, + bias[c]. Its input gradient is that conv2d of dy
 * (mp_k_conv2d, no bias), its weight gradient mp_k_conv2d_dw(dw, x, dy). */
static inline void mp_k_conv_transpose2d(void *y, int ydt, const void *x, int xdt, const void *w,
                                         int wdt, const void *bias, int bdt, int64_t N, MpConv v)
{
    mp_conv_adjoint(y, ydt, x, xdt, w, wdt, bias, bdt, N, v);
}

/* P [F, C/G kh kw] = the weight gradient of images [n, n + m) (col: room
 * for their col and dy). */
static inline void mp_conv_dw_block(float *P, float *col, const void *dy, int dydt, const void *x,
                                    int xdt, int64_t n, int64_t m, const MpConv *v)
{
    int64_t cg = v->C / v->G, fg = v->F / v->G, npix = v->OH * v->OW, ckk = cg * v->kh * v->kw;
    int64_t ld = m * npix;
    float *dyb = col + ckk * ld;
    for (int64_t g = 0; g < v->G; g++) {
        mp_planes_move(dyb, (void *)dy, dydt, n, m, v->F, g * fg, fg, npix, 0);
        mp_im2col_images(col, x, xdt, n, m, g, v);
        MpGemm p = {0, 1, fg, ckk, ld, 1.0f, 0.0f, dyb, MP_F32, ld, col, MP_F32, ld,
                    P + g * fg * ckk, MP_F32, ckk, NULL, MP_F32, 0, mp_conv_copy_rnd(dydt),
                    mp_conv_copy_rnd(xdt), NULL, NULL};
        mp_gemm_ex(&p);
    }
}

/* The weight gradient of small planes, into acc [F, C/G kh kw]: blocks of
 * nb images (nb OH OW <= MP_CONV_DW_TERMS terms; planes of MP_CONV_DW_ALONE
 * pixels or more one image a block, their sums as with large planes), each
 * block's product a partial sum of its own, the blocks' products side by
 * side (one thread each), then acc + P_0 + P_1 + ... in block order: what
 * the products would give one after the other with beta 1, on any number
 * of threads. A round of one block runs outside any parallel region, so
 * that its product's own region takes the pooled threads (a region inside
 * an inactive one, parallel if (0), starts new threads each time). */
static inline void mp_conv_dw_images(float *acc, const void *dy, int dydt, const void *x,
                                     int xdt, int64_t N, const MpConv *v)
{
    int64_t cg = v->C / v->G, fg = v->F / v->G, npix = v->OH * v->OW, ckk = cg * v->kh * v->kw;
    int64_t nb = npix >= MP_CONV_DW_ALONE ? 1 : MP_CONV_DW_TERMS / npix, nw = v->F * ckk;
    nb = mp_min64(nb, N);
    int64_t nblk = (N + nb - 1) / nb, per = mp_max64(1, mp_min64(nblk, MP_CONV_DW_PART / nw));
    size_t colsz = (size_t)((ckk + fg) * nb * npix) * sizeof(float);
    float *P = (float *)mp_kalloc((size_t)(per * nw) * sizeof *P);
    for (int64_t b0 = 0; b0 < nblk; b0 += per) {
        int64_t nr = mp_min64(per, nblk - b0);
        if (nr == 1) {
            float *col = (float *)mp_kalloc(colsz);
            mp_conv_dw_block(P, col, dy, dydt, x, xdt, b0 * nb, mp_min64(nb, N - b0 * nb), v);
            free(col);
        } else {
            MP_OMP(parallel)
            {
                float *col = (float *)mp_kalloc(colsz);
                MP_OMP(for schedule(dynamic))
                for (int64_t r = 0; r < nr; r++) {
                    int64_t n = (b0 + r) * nb;
                    mp_conv_dw_block(P + r * nw, col, dy, dydt, x, xdt, n, mp_min64(nb, N - n), v);
                }
                free(col);
            }
        }
        MP_OMP(parallel for if (nr * nw > MP_PAR_MIN))
        for (int64_t i = 0; i < nw; i++) {
            float a = acc[i];
            for (int64_t r = 0; r < nr; r++) a += P[r * nw + i];
            acc[i] = a;
        }
    }
    free(P);
}

/* dw[F, C / G, kh, kw] = sum over images of dy_g [F/G, OH OW] col_g^T per
 * group (+ beta dw). Images are summed in order, each product itself
 * parallel (small planes: mp_conv_dw_images); depthwise directly. */
static inline void mp_k_conv2d_dw(void *dw, int dwdt, const void *dy, int dydt,
                                  const void *x, int xdt, int64_t N, MpConv v, float beta)
{
    if (mp_conv_depthwise(&v)) {
        mp_conv_depthwise_dw(dw, dwdt, dy, dydt, x, xdt, N, &v, beta);
        return;
    }
    int64_t cg = v.C / v.G, fg = v.F / v.G, npix = v.OH * v.OW, ckk = cg * v.kh * v.kw;
    float *acc = (float *)mp_kzalloc((size_t)(v.F * ckk) * sizeof *acc);
    if (npix < MP_CONV_SMALL) {
        mp_conv_dw_images(acc, dy, dydt, x, xdt, N, &v);
    } else {
        int pw = mp_conv_pointwise(&v, xdt);
        float *col = pw ? NULL : (float *)mp_kalloc((size_t)(ckk * npix) * sizeof *col);
        for (int64_t n = 0; n < N; n++)
            for (int64_t g = 0; g < v.G; g++) {
                int bt;
                const void *b = mp_conv_operand(col, x, xdt, n, g, &v, pw, &bt);
                mp_gemm(0, 1, fg, ckk, npix, 1.0f, mp_at(dy, dydt, (n * v.F + g * fg) * npix),
                        dydt, npix, b, bt, npix, 1.0f, acc + g * fg * ckk, MP_F32, ckk);
            }
        free(col);
    }
    mp_st_beta(dw, dwdt, 0, v.F * ckk, acc, beta);
    free(acc);
}

/* ---- pooling ------------------------------------------------------------ */

/* Each (n, c) plane on its own: x plane [H, W] -> y plane [OH, OW] with
 * OH = (H + 2 pad - k) / s + 1 (floor, as torch). */
#define MP_PLANES_LOOP(N, C, H, W, NBUF, ...)                                 \
    MP_OMP(parallel if ((N) * (C) * (H) * (W) > MP_PAR_MIN))                   \
    {                                                                          \
        float *buf = (float *)mp_kalloc((size_t)(NBUF) * (size_t)((H) * (W)) * sizeof(float)); \
        MP_OMP(for schedule(static))                                           \
        for (int64_t pl = 0; pl < (N) * (C); pl++) {                           \
            __VA_ARGS__;                                                       \
        }                                                                      \
        free(buf);                                                             \
    }

/* The window of output (oy, ox) inside the plane (padding 0 <= pad <= k / 2
 * left out): rows [w.y0, w.y1), columns [w.x0, w.x1); never empty. */
typedef struct MpWin {
    int64_t y0, y1, x0, x1;
} MpWin;

static inline MpWin mp_pool_win(int64_t oy, int64_t ox, int64_t H, int64_t W, int64_t k, int64_t s,
                                int64_t pad)
{
    MpWin w = {oy * s - pad, oy * s - pad + k, ox * s - pad, ox * s - pad + k};
    w.y0 = w.y0 < 0 ? 0 : w.y0, w.x0 = w.x0 < 0 ? 0 : w.x0;
    w.y1 = mp_min64(w.y1, H), w.x1 = mp_min64(w.x1, W);
    return w;
}

/* Index in the plane of the window's first maximum (NaN wins, as torch). */
static inline int64_t mp_window_argmax(const float *p, int64_t W, MpWin w)
{
    int64_t best = w.y0 * W + w.x0;
    for (int64_t y = w.y0; y < w.y1; y++)
        for (int64_t x = w.x0; x < w.x1; x++) {
            int64_t i = y * W + x;
            if (p[i] > p[best] || (isnan(p[i]) && !isnan(p[best])))
                best = i;
        }
    return best;
}

/* avg_pool2d's divisor: k k, or (count_include_pad false) the window's
 * elements inside the plane. */
static inline int64_t mp_pool_count(MpWin w, int64_t k, int incl)
{
    return incl ? k * k : (w.y1 - w.y0) * (w.x1 - w.x0);
}

static inline void mp_k_max_pool2d(void *y, int ydt, const void *x, int xdt, int64_t N,
                                   int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                                   int64_t pad)
{
    int64_t OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
    MP_PLANES_LOOP(N, C, H, W, 1,
        mp_ld_n(x, xdt, pl * H * W, 1, H * W, buf);
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++)
                mp_st(y, ydt, (pl * OH + oy) * OW + ox,
                      buf[mp_window_argmax(buf, W, mp_pool_win(oy, ox, H, W, k, s, pad))]))
}

/* dx = dy routed to each window's first maximum; overlaps add up. */
static inline void mp_k_max_pool2d_grad(void *dx, int dxdt, const void *dy, int dydt,
                                        const void *x, int xdt, int64_t N, int64_t C,
                                        int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad)
{
    int64_t OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
    MP_PLANES_LOOP(N, C, H, W, 2,
        float *g = buf + H * W;
        mp_ld_n(x, xdt, pl * H * W, 1, H * W, buf);
        memset(g, 0, (size_t)(H * W) * sizeof *g);
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++)
                g[mp_window_argmax(buf, W, mp_pool_win(oy, ox, H, W, k, s, pad))] +=
                    mp_ld(dy, dydt, (pl * OH + oy) * OW + ox);
        mp_st_n(dx, dxdt, pl * H * W, 1, H * W, g))
}

static inline void mp_k_avg_pool2d(void *y, int ydt, const void *x, int xdt, int64_t N,
                                   int64_t C, int64_t H, int64_t W, int64_t k, int64_t s,
                                   int64_t pad, int incl)
{
    int64_t OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
    MP_PLANES_LOOP(N, C, H, W, 1,
        mp_ld_n(x, xdt, pl * H * W, 1, H * W, buf);
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                MpWin w = mp_pool_win(oy, ox, H, W, k, s, pad);
                double sum = 0;
                for (int64_t a = w.y0; a < w.y1; a++)
                    for (int64_t b = w.x0; b < w.x1; b++) sum += buf[a * W + b];
                mp_st(y, ydt, (pl * OH + oy) * OW + ox,
                      (float)(sum * (1.0 / (double)mp_pool_count(w, k, incl))));
            })
}

static inline void mp_k_avg_pool2d_grad(void *dx, int dxdt, const void *dy, int dydt,
                                        int64_t N, int64_t C, int64_t H, int64_t W,
                                        int64_t k, int64_t s, int64_t pad, int incl)
{
    int64_t OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
    MP_PLANES_LOOP(N, C, H, W, 1,
        memset(buf, 0, (size_t)(H * W) * sizeof *buf);
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                MpWin w = mp_pool_win(oy, ox, H, W, k, s, pad);
                float g = mp_ld(dy, dydt, (pl * OH + oy) * OW + ox) *
                          (1.0f / (float)mp_pool_count(w, k, incl));
                for (int64_t a = w.y0; a < w.y1; a++)
                    for (int64_t b = w.x0; b < w.x1; b++) buf[a * W + b] += g;
            }
        mp_st_n(dx, dxdt, pl * H * W, 1, H * W, buf))
}

/* [N, C, S] -> [N, C]: mean over S = H W. */
static inline void mp_k_global_avg_pool(void *y, int ydt, const void *x, int xdt,
                                        int64_t N, int64_t C, int64_t S)
{
    mp_k_mean(y, ydt, x, xdt, N * C, S, 1);
}

static inline void mp_k_global_avg_pool_grad(void *dx, int dxdt, const void *dy, int dydt,
                                             int64_t N, int64_t C, int64_t S)
{
    mp_k_expand(dx, dxdt, dy, dydt, N * C, S, 1, 1.0f / (float)S);
}

/* ---- embedding ---------------------------------------------------------- */

/* y[i, :] = w[ids[i], :]; an id outside [0, vocab) gives a row of NaN, so
 * that it is caught (--check-numerics, the loss) instead of read out of
 * bounds. The runtime checks ids of inputs declared as class labels. */
static inline void mp_k_embedding(void *y, int ydt, const void *ids, int idt, const void *w,
                                  int wdt, int64_t n, int64_t vocab, int64_t dim)
{
    MP_OMP(parallel for if (n * dim > MP_PAR_MIN))
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < dim; c += MP_CHUNK) {
            float t[MP_CHUNK];
            int64_t m = mp_min64(dim - c, MP_CHUNK), id = mp_ld_id(ids, idt, i);
            if (id >= 0 && id < vocab)
                mp_ld_n(w, wdt, id * dim + c, 1, m, t);
            else
                for (int64_t j = 0; j < m; j++) t[j] = NAN;
            mp_st_n(y, ydt, i * dim + c, 1, m, t);
        }
}

/* acc[ids[i]] += dy[i] for i = 0, 1, ... n - 1 in that order (f32 sums);
 * ids outside [0, vocab) add nothing. The threads split the columns, so
 * every element's sum has the same order (the same bits) at any thread
 * count, and no two threads write one element. Called with a parameter's
 * f32 gradient as acc, it adds straight into it: no buffer of its own,
 * nothing allocated (compiler/emit_c.c, a gradient's parts). */
static inline void mp_k_embedding_dw_acc(float *acc, const void *dy, int dydt, const void *ids,
                                         int idt, int64_t n, int64_t vocab, int64_t dim)
{
    MP_OMP(parallel for if (n * dim > MP_PAR_MIN))
    for (int64_t c = 0; c < dim; c += MP_CHUNK) {
        float t[MP_CHUNK];
        int64_t m = mp_min64(dim - c, MP_CHUNK);
        for (int64_t i = 0; i < n; i++) {
            int64_t id = mp_ld_id(ids, idt, i);
            if (id < 0 || id >= vocab)
                continue;
            float *a = acc + id * dim + c;
            mp_ld_n(dy, dydt, i * dim + c, 1, m, t);
            for (int64_t j = 0; j < m; j++) a[j] += t[j];
        }
    }
}

static int mp_i64_cmp(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

/* dw[vocab, dim] (f16 / bf16) = zeros, then each row an id names: the f32
 * sum of its dy rows in the order of i (mp_embedding_dw_sum), rounded
 * once: the bits of a dense f32 scatter-add rounded whole, without its
 * [vocab, dim] f32 buffer (GPT-2's tied table: 154 MB allocated, zeroed
 * and converted each step for at most B T rows). The ids in range are
 * sorted once (keys id n + i: by id, then by i), the rows shared among the
 * threads, each summed by one: the same bits on any number. */
static inline void mp_embedding_dw_rows(void *dw, int dwdt, const void *dy, int dydt,
                                        const void *ids, int idt, int64_t n, int64_t vocab,
                                        int64_t dim)
{
    mp_k_fill(dw, dwdt, 0.0f, vocab * dim);
    int64_t *key = (int64_t *)mp_kalloc((size_t)(n > 0 ? n : 1) * 2 * sizeof *key), m = 0;
    int32_t *order = (int32_t *)(key + n), *sorted = order + n;
    for (int64_t i = 0; i < n; i++) {
        int64_t id = mp_ld_id(ids, idt, i);
        if (id >= 0 && id < vocab)
            key[m++] = id * n + i;
    }
    qsort(key, (size_t)m, sizeof *key, mp_i64_cmp);
    for (int64_t k = 0; k < m; k++) {
        order[k] = (int32_t)(key[k] % n);
        sorted[k] = (int32_t)(key[k] / n);
    }
    MP_OMP(parallel for schedule(dynamic, 4) if (m * dim > MP_PAR_MIN))
    for (int64_t k = 0; k < m; k++) {
        if (k > 0 && sorted[k - 1] == sorted[k])
            continue;   /* summed with its row's first occurrence */
        for (int64_t d = 0; d < dim; d++)
            mp_st(dw, dwdt, sorted[k] * dim + d,
                  mp_embedding_dw_sum(dy, dydt, order, sorted, m, dim, k, sorted[k], d));
    }
    free(key);
}

/* dw[vocab, dim] = scatter-add of dy[n, dim] by ids, summed in f32 in the
 * order of i; ids outside [0, vocab) add nothing. An f32 dw is its own
 * accumulator (zeroed, then scattered into); an f16 / bf16 one, its rows
 * summed one at a time (mp_embedding_dw_rows). */
static inline void mp_k_embedding_dw(void *dw, int dwdt, const void *dy, int dydt,
                                     const void *ids, int idt, int64_t n, int64_t vocab,
                                     int64_t dim)
{
    if (dwdt != MP_F32) {
        mp_embedding_dw_rows(dw, dwdt, dy, dydt, ids, idt, n, vocab, dim);
        return;
    }
    mp_k_fill(dw, MP_F32, 0.0f, vocab * dim);
    mp_k_embedding_dw_acc((float *)dw, dy, dydt, ids, idt, n, vocab, dim);
}

/* ---- layer_norm --------------------------------------------------------- */

/* Mean, 1/sqrt(biased variance + eps) and the biased variance of v[0..n),
 * summed in double. */
static inline double mp_moments(const float *v, int64_t n, float eps, float *mean,
                                float *rstd)
{
    double s = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) s += v[i];
    double m = s / (double)n;
    for (int64_t i = 0; i < n; i++) ss += ((double)v[i] - m) * ((double)v[i] - m);
    *mean = (float)m;
    *rstd = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    return ss / (double)n;
}

/* mp_moments of the four rows v, v + n, v + 2n, v + 3n into st (mean,
 * rstd pairs): each row's operations as in mp_moments (the same bits), the
 * four rows' double sums as independent chains (one row's are 2n
 * dependent additions, the whole cost of a short row). */
static inline void mp_moments4(const float *v, int64_t n, float eps, float *st, double *var)
{
    const float *v0 = v, *v1 = v + n, *v2 = v + 2 * n, *v3 = v + 3 * n;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i = 0; i < n; i++) {
        s0 += v0[i];
        s1 += v1[i];
        s2 += v2[i];
        s3 += v3[i];
    }
    double m0 = s0 / (double)n, m1 = s1 / (double)n, m2 = s2 / (double)n, m3 = s3 / (double)n;
    s0 = s1 = s2 = s3 = 0;
    for (int64_t i = 0; i < n; i++) {
        s0 += ((double)v0[i] - m0) * ((double)v0[i] - m0);
        s1 += ((double)v1[i] - m1) * ((double)v1[i] - m1);
        s2 += ((double)v2[i] - m2) * ((double)v2[i] - m2);
        s3 += ((double)v3[i] - m3) * ((double)v3[i] - m3);
    }
    const double m[4] = {m0, m1, m2, m3}, ss[4] = {s0, s1, s2, s3};
    for (int r = 0; r < 4; r++) {
        st[2 * r] = (float)m[r];
        st[2 * r + 1] = 1.0f / sqrtf((float)(ss[r] / (double)n) + eps);
        if (var)
            var[r] = ss[r] / (double)n;
    }
}

/* mp_moments of the k <= 4 rows of n at v into st (mean, rstd pairs) and
 * var (the biased variances): four rows as mp_moments4, fewer one by one;
 * the same bits either way. */
static inline void mp_moments_k(const float *v, int64_t n, int k, float eps, float *st, double *var)
{
    if (k == 4) {
        mp_moments4(v, n, eps, st, var);
        return;
    }
    for (int r = 0; r < k; r++)
        var[r] = mp_moments(v + r * n, n, eps, &st[2 * r], &st[2 * r + 1]);
}

/* The mean and rstd of every row of x [rows, dim] into st (pairs), four
 * rows at a time; v: 4 dim floats of scratch. Work-shared when called by
 * a team (an orphaned omp for), one thread's loop otherwise. */
static inline void mp_ln_stats(const void *x, int xdt, int64_t rows, int64_t dim, float eps,
                               float *st, float *v)
{
    MP_OMP(for schedule(static))
    for (int64_t r = 0; r < rows; r += 4) {
        if (r + 4 <= rows) {
            mp_ld_n(x, xdt, r * dim, 1, 4 * dim, v);
            mp_moments4(v, dim, eps, &st[2 * r], NULL);
        } else
            for (int64_t q = r; q < rows; q++) {
                mp_ld_n(x, xdt, q * dim, 1, dim, v);
                mp_moments(v, dim, eps, &st[2 * q], &st[2 * q + 1]);
            }
    }
}

/* The row loop of layer_norm and its gradient: every row's statistics
 * first (mp_ln_stats), w and b (either may be NULL) loaded once into wv and
 * bv, then BODY once per row r with xh[0 .. dim) the row normalised,
 * (x - mean) rstd, and g dim floats of scratch. */
#define MP_LN_ROWS(x, xdt, w, wdt, b, bdt, rows, dim, eps, ...)               \
    do {                                                                       \
        float *st_ = (float *)mp_kalloc((size_t)(2 * (rows)) * sizeof(float));  \
        MP_OMP(parallel if ((rows) * (dim) > MP_PAR_MIN))                      \
        {                                                                      \
            float *xh = (float *)mp_kalloc((size_t)(7 * (dim)) * sizeof(float)); \
            float *g = xh + 4 * (dim), *wv = g + (dim), *bv = wv + (dim);      \
            mp_ln_stats(x, xdt, rows, dim, eps, st_, xh);                      \
            if (w) mp_ld_n(w, wdt, 0, 1, dim, wv);                             \
            if (b) mp_ld_n(b, bdt, 0, 1, dim, bv);                             \
            MP_OMP(for schedule(static))                                       \
            for (int64_t r = 0; r < (rows); r++) {                             \
                float mean = st_[2 * r], rstd = st_[2 * r + 1];                \
                mp_ld_n(x, xdt, r * (dim), 1, dim, xh);                        \
                for (int64_t j = 0; j < (dim); j++) xh[j] = (xh[j] - mean) * rstd; \
                __VA_ARGS__;                                                   \
            }                                                                  \
            free(xh);                                                          \
        }                                                                      \
        free(st_);                                                             \
    } while (0)

/* y = (x - mean) rstd w + b over the last axis (w, b may be NULL). */
static inline void mp_k_layer_norm(void *y, int ydt, const void *x, int xdt, const void *w,
                                   int wdt, const void *b, int bdt, int64_t rows,
                                   int64_t dim, float eps)
{
    MP_LN_ROWS(x, xdt, w, wdt, b, bdt, rows, dim, eps,
        for (int64_t j = 0; j < dim; j++)
            xh[j] = xh[j] * (w ? wv[j] : 1.0f) + (b ? bv[j] : 0.0f);
        mp_st_n(y, ydt, r * dim, 1, dim, xh));
}

/* g = rstd (g - mean(g) - xhat mean(g xhat)), from the sums sg of g and
 * sgx of g xhat over the row's n elements */
static inline void mp_norm_dx_apply(float *g, const float *xhat, int64_t n, float rstd, double sg,
                                    double sgx)
{
    float mg = (float)(sg / (double)n), mgx = (float)(sgx / (double)n);
    for (int64_t j = 0; j < n; j++)
        g[j] = rstd * (g[j] - mg - xhat[j] * mgx);
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w, xhat normalised x. */
static inline void mp_norm_dx_row(float *g, const float *xhat, int64_t n, float rstd)
{
    double sg = 0, sgx = 0;
    for (int64_t j = 0; j < n; j++) {
        sg += g[j];
        sgx += (double)g[j] * xhat[j];
    }
    mp_norm_dx_apply(g, xhat, n, rstd, sg, sgx);
}

static inline void mp_k_layer_norm_dx(void *dx, int dxdt, const void *dy, int dydt,
                                      const void *x, int xdt, const void *w, int wdt,
                                      int64_t rows, int64_t dim, float eps)
{
    MP_LN_ROWS(x, xdt, w, wdt, (const void *)NULL, MP_F32, rows, dim, eps,
        mp_ld_n(dy, dydt, r * dim, 1, dim, g);
        if (w)
            for (int64_t j = 0; j < dim; j++) g[j] *= wv[j];
        mp_norm_dx_row(g, xh, dim, rstd);
        mp_st_n(dx, dxdt, r * dim, 1, dim, g));
}

/* dw[dim] = sum over rows of dy xhat (+ beta dw), rows summed in order.
 * Threads share the rows' moments, then blocks of MP_LN_DW_COLS columns
 * (each column's sum is one thread's, in row order: the same bits on any
 * number of threads). */
#define MP_LN_DW_COLS 16

static inline void mp_k_layer_norm_dw(void *dw, int dwdt, const void *dy, int dydt,
                                      const void *x, int xdt, int64_t rows, int64_t dim,
                                      float eps, float beta)
{
    double *acc = (double *)mp_kzalloc((size_t)dim * sizeof *acc);
    float *st = (float *)mp_kalloc((size_t)(2 * rows + dim) * sizeof *st), *out = st + 2 * rows;
    int64_t nb = (dim + MP_LN_DW_COLS - 1) / MP_LN_DW_COLS;
    MP_OMP(parallel if (rows * dim > MP_PAR_MIN))
    {
        float *v = (float *)mp_kalloc((size_t)(4 * dim) * sizeof *v), *g = v + dim;
        mp_ln_stats(x, xdt, rows, dim, eps, st, v);
        MP_OMP(for schedule(static))
        for (int64_t b = 0; b < nb; b++) {
            int64_t j0 = b * MP_LN_DW_COLS, n = mp_min64(dim - j0, MP_LN_DW_COLS);
            double *a = acc + j0;
            for (int64_t r = 0; r < rows; r++) {
                float mean = st[2 * r], rstd = st[2 * r + 1];
                mp_ld_n(x, xdt, r * dim + j0, 1, n, v);
                mp_ld_n(dy, dydt, r * dim + j0, 1, n, g);
                for (int64_t j = 0; j < n; j++) a[j] += g[j] * ((v[j] - mean) * rstd);
            }
            for (int64_t j = 0; j < n; j++) out[j0 + j] = (float)a[j];
        }
        free(v);
    }
    mp_st_beta(dw, dwdt, 0, dim, out, beta);
    free(acc);
    free(st);
}

/* ---- batch_norm --------------------------------------------------------- */

/* Channel ch of x[N, C, S] gathered into v[N S]. */
static inline void mp_ld_channel(float *v, const void *x, int xdt, int64_t N, int64_t C,
                                 int64_t S, int64_t ch)
{
    for (int64_t n = 0; n < N; n++)
        mp_ld_run(x, xdt, (n * C + ch) * S, 1, S, v + n * S);
}

static inline void mp_st_channel(void *x, int xdt, const float *v, int64_t N, int64_t C,
                                 int64_t S, int64_t ch)
{
    for (int64_t n = 0; n < N; n++)
        mp_st_run(x, xdt, (n * C + ch) * S, S, v + n * S);
}

/* The channels of x[N, C, S] in groups of up to four: BODY runs once per
 * group, channels ch0 .. ch0 + k - 1, with buf holding NBUF x 4 rows of N S
 * floats for it. A channel's statistics are sums that each wait on the
 * last; four channels' sums side by side (mp_moments4, and the loops below
 * written four rows at a time) run four times as many at once, each
 * channel's sums in its own order (the same bits as one channel at a
 * time). */
#define MP_CHANNEL_GROUPS(N, C, S, NBUF, ...)                                 \
    MP_OMP(parallel if ((N) * (C) * (S) > MP_PAR_MIN))                         \
    {                                                                          \
        float *buf = (float *)mp_kalloc((size_t)(4 * (NBUF)) * (size_t)((N) * (S)) * sizeof(float)); \
        MP_OMP(for schedule(static))                                           \
        for (int64_t ch0 = 0; ch0 < (C); ch0 += 4) {                           \
            const int k = (int)mp_min64((C) - ch0, 4);                         \
            __VA_ARGS__;                                                       \
        }                                                                      \
        free(buf);                                                             \
    }

/* Channels ch0 .. ch0 + k - 1 of x[N, C, S] gathered into k rows of v. */
static inline void mp_ld_channels(float *v, const void *x, int xdt, int64_t N, int64_t C,
                                  int64_t S, int64_t ch0, int k)
{
    for (int r = 0; r < k; r++)
        mp_ld_channel(v + r * N * S, x, xdt, N, C, S, ch0 + r);
}

/* x[N, C, S] (S = H W, or 1 for [B, C]). training: normalise with the
 * batch's mean and biased variance and update the running statistics with
 * the unbiased variance, r = (1 - momentum) r + momentum stat, exactly as
 * torch.nn.BatchNorm2d/1d; else normalise with the running statistics. */
static inline void mp_k_batch_norm(void *y, int ydt, const void *x, int xdt, const void *w,
                                   int wdt, const void *b, int bdt, float *rmean,
                                   float *rvar, int64_t N, int64_t C, int64_t S,
                                   float momentum, float eps, int training)
{
    int64_t cnt = N * S;
    MP_CHANNEL_GROUPS(N, C, S, 1,
        float st[8] = {0};
        double var[4] = {0};
        mp_ld_channels(buf, x, xdt, N, C, S, ch0, k);
        if (training)
            mp_moments_k(buf, cnt, k, eps, st, var);
        for (int r = 0; r < k; r++) {
            int64_t ch = ch0 + r;
            float mean = st[2 * r], rstd = st[2 * r + 1], *v = buf + r * cnt;
            if (training) {
                double unbiased = cnt > 1 ? var[r] * (double)cnt / (double)(cnt - 1) : var[r];
                rmean[ch] = (1.0f - momentum) * rmean[ch] + momentum * mean;
                rvar[ch] = (1.0f - momentum) * rvar[ch] + momentum * (float)unbiased;
            } else {
                mean = rmean[ch];
                rstd = 1.0f / sqrtf(rvar[ch] + eps);
            }
            float sc = rstd * (w ? mp_ld(w, wdt, ch) : 1.0f), sh = b ? mp_ld(b, bdt, ch) : 0.0f;
            for (int64_t i = 0; i < cnt; i++) v[i] = (v[i] - mean) * sc + sh;
            mp_st_channel(y, ydt, v, N, C, S, ch);
        })
}

/* Rows x[r] normalised in place, r < k: (x - mean) rstd, st's pairs. */
static inline void mp_bn_xhat(float *x, int64_t n, int k, const float *st)
{
    for (int r = 0; r < k; r++) {
        float mean = st[2 * r], rstd = st[2 * r + 1], *v = x + r * n;
        for (int64_t i = 0; i < n; i++) v[i] = (v[i] - mean) * rstd;
    }
}

/* mp_norm_dx_row of the k <= 4 rows g[r] (xhat[r], rstd st[2r + 1]): four
 * rows' sums side by side, each in mp_norm_dx_row's order. */
static inline void mp_norm_dx_rows(float *g, const float *xhat, int64_t n, int k, const float *st)
{
    if (k < 4) {
        for (int r = 0; r < k; r++)
            mp_norm_dx_row(g + r * n, xhat + r * n, n, st[2 * r + 1]);
        return;
    }
    double sg[4] = {0, 0, 0, 0}, sgx[4] = {0, 0, 0, 0};
    for (int64_t j = 0; j < n; j++)
        for (int r = 0; r < 4; r++) {
            sg[r] += g[r * n + j];
            sgx[r] += (double)g[r * n + j] * xhat[r * n + j];
        }
    for (int r = 0; r < 4; r++)
        mp_norm_dx_apply(g + r * n, xhat + r * n, n, st[2 * r + 1], sg[r], sgx[r]);
}

static inline void mp_k_batch_norm_dx(void *dx, int dxdt, const void *dy, int dydt,
                                      const void *x, int xdt, const void *w, int wdt,
                                      int64_t N, int64_t C, int64_t S, float eps)
{
    int64_t cnt = N * S;
    MP_CHANNEL_GROUPS(N, C, S, 2,
        float st[8], *g = buf + 4 * cnt;
        double var[4];
        mp_ld_channels(buf, x, xdt, N, C, S, ch0, k);
        mp_moments_k(buf, cnt, k, eps, st, var);
        mp_bn_xhat(buf, cnt, k, st);
        mp_ld_channels(g, dy, dydt, N, C, S, ch0, k);
        for (int r = 0; r < k; r++) {
            float wc = w ? mp_ld(w, wdt, ch0 + r) : 1.0f, *gr = g + r * cnt;
            for (int64_t i = 0; i < cnt; i++) gr[i] *= wc;
        }
        mp_norm_dx_rows(g, buf, cnt, k, st);
        for (int r = 0; r < k; r++)
            mp_st_channel(dx, dxdt, g + r * cnt, N, C, S, ch0 + r);)
}

/* dw[C] = sum over N, S of dy xhat (+ beta dw). */
static inline void mp_k_batch_norm_dw(void *dw, int dwdt, const void *dy, int dydt,
                                      const void *x, int xdt, int64_t N, int64_t C,
                                      int64_t S, float eps, float beta)
{
    int64_t cnt = N * S;
    float *out = (float *)mp_kalloc((size_t)C * sizeof *out);
    MP_CHANNEL_GROUPS(N, C, S, 2,
        float st[8], *g = buf + 4 * cnt;
        double var[4], s[4] = {0, 0, 0, 0};
        mp_ld_channels(buf, x, xdt, N, C, S, ch0, k);
        mp_moments_k(buf, cnt, k, eps, st, var);
        mp_bn_xhat(buf, cnt, k, st);
        mp_ld_channels(g, dy, dydt, N, C, S, ch0, k);
        if (k == 4) {
            for (int64_t i = 0; i < cnt; i++)
                for (int r = 0; r < 4; r++)
                    s[r] += g[r * cnt + i] * buf[r * cnt + i];
        } else {
            for (int r = 0; r < k; r++)
                for (int64_t i = 0; i < cnt; i++)
                    s[r] += g[r * cnt + i] * buf[r * cnt + i];
        }
        for (int r = 0; r < k; r++)
            out[ch0 + r] = (float)s[r];)
    mp_st_beta(dw, dwdt, 0, C, out, beta);
    free(out);
}

/* ---- attention ---------------------------------------------------------- */

/* Per (batch, head), with q, y [T, D] and k, v [T', D]:
 *   S = q k^T / sqrt(D)         f32 accumulation, never rounded (the
 *                               options' scale for 1/sqrt(D), their mask
 *                               applied: MpAttnOpt below)
 *   P = softmax(S) per row      f32; causal: S[i, j] = -inf for j > i
 *   Pr = P rounded to cdt       the lowp operand of the second product
 *   y = Pr v                    f32 accumulation, rounded to y's type
 * Backward: one kernel for the three gradients (ATTENTION_GRAD, ops.def),
 * from one recomputation of P per query tile (nothing is kept from the
 * forward pass):
 *   dv = Pr^T dy
 *   dP = dy v^T (f32), dS = P (dP - rowsum(dP P)) / sqrt(D), rounded to cdt
 *   dq = dS k,   dk = dS^T q    f32 accumulation, each rounded once
 * Tiles: a query tile of tq rows (mp_attn_tq: its f32 scores [tq, T'] stay
 * under 64 KB) against key tiles of MP_ATTN_TK; the query tile's scores
 * are the only score buffer (never T x T), so the probabilities are
 * normalised before they are rounded with each score computed once per
 * pass. Causal: key tiles past a query tile's last row are skipped, and
 * the masked corner of the diagonal tile holds zeros. Each sum runs in a
 * fixed order (over d for a score; over keys for y and dq; over the rows
 * of a query tile, then tile after tile, for dk and dv): the same bits
 * whatever the number of threads, and whatever the blocking below.
 * Register blocks: every product is made MP_ATTN_R outputs (rows of
 * scores, y, dq; keys of dk, dv) by up to MP_ATTN_VW columns at a time:
 * 5 x 16 = 10 vectors of independent sums in registers (a head of 16 had
 * 2 chains, bound by the add's latency; with the two loaded vectors, the
 * broadcast and the product that makes 14 of AVX's 16 registers: 6 rows
 * spill, and measured slower, as did 4 and 8, for head sizes 16 and 64 in
 * tests/attn/attn_bench.c). Blocking outputs
 * together changes no output's order of additions, and no product is
 * fused into a sum (fp-contract off below: where GCC may fuse, it did so
 * for some loop shapes and not others, by -march and -mtune), so these
 * kernels give the bits of the unblocked ones built without fusing, in
 * every build (tests/t_attn_bits.sh holds them to the old code).
 * Work items: (head, query tile) forward; heads backward (a head's dk and
 * dv accumulate over its query tiles in f32). k and v of the head are
 * loaded once per item as f32, row-major and transposed, so that the inner
 * loops run over contiguous floats. */
#define MP_ATTN_TK 64
#define MP_ATTN_VW 16
#define MP_ATTN_R 5

/* (not under nvcc, whose front end warns on them: the CUDA program runs
 * its own attention kernels, mp_cuda_ops.h) */
#if defined(__CUDACC__)
#elif defined(__clang__)
#pragma float_control(push)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

/* Attention's options (LANGUAGE.md "Attention options"; NULL: none):
 *   scaled     scale replaces 1/sqrt(D)
 *   mask, mdt  NULL, or u8 (0: the query does not see the key) or a float
 *              tensor added to the scores; its element (b, head, i, j) is
 *              at b ms[0] + head ms[1] + i ms[2] + j ms[3] (0 on an axis it
 *              broadcasts over), the work items' head h = b H + head. A row
 *              that sees no key (every score -inf) gives P = 0: zeros, and
 *              zero gradients, not NaN (as the CUDA program's tiles).
 * The mask is read a row of a query tile at a time (never [T, T']).
 *   drop       dropout p of the probabilities (0: none; evaluation passes
 *              0): P[i, j] of work item h is kept, times 1/(1 - p), iff
 *              mp_dropout_u(key, (h T + i) T' + j) >= p, key =
 *              mp_dropout_key(seed, step, micro, node) as the dropout op's,
 *              so the backward pass draws the same bits again (none are
 *              stored). The CUDA program reads the step on the device from
 *              hdr (its MpCuHdr) and leaves step 0.
 * With dropout, y = (P o M / (1 - p)) v with P's softmax of the un-dropped
 * scores; backward dv = (P o M / (1 - p))^T dy, dP' = (dy v^T) o M / (1 - p)
 * and dS = P (dP' - rowsum(P dP')), the rowsum being rowsum(dy o y). */

/* Where attention's tensors lie: row t of work item h (= b H + head) of
 * tensor x (q, k, v, y and dy, dq, dk, dv) starts at element
 * off + (h / H) sb + (h % H) sh + t st, its D elements contiguous. The
 * compiler reads q, k, v and writes y and the gradients in the model's own
 * layouts through them ([B, T, H, D] after a reshape: ops.def ATTENTION's
 * ia[3], ia[4]), so that no copy moves them around the op. */
typedef struct MpAttnLay {
    int64_t off, sb, sh, st;
} MpAttnLay;
enum { MP_ATT_Q, MP_ATT_K, MP_ATT_V, MP_ATT_Y, MP_ATT_DQ, MP_ATT_DK, MP_ATT_DV, MP_ATT_NLAY };
typedef struct MpAttnLays {
    int64_t H;                /* 0: the dense layouts (mp_attn_lays) */
    MpAttnLay l[MP_ATT_NLAY]; /* dy lies as y */
} MpAttnLays;

typedef struct MpAttnOpt {
    int scaled;
    float scale;
    const void *mask;
    int mdt;
    int64_t H, ms[4];
    float drop;
    uint64_t seed;
    int64_t step, micro, node;
    const void *hdr;
    MpAttnLays lay;
} MpAttnOpt;

/* o's layouts where it gives them, else the dense ones: q, y [BH, T, D],
 * k, v [BH, T', D], the gradients g [BH, T + 2T', D] (per head dq, dk, dv) */
static inline MpAttnLays mp_attn_lays(const MpAttnOpt *o, int64_t T, int64_t Tk, int64_t D)
{
    if (o && o->lay.H > 0)
        return o->lay;
    int64_t g = (T + 2 * Tk) * D;
    MpAttnLays L = {1,
                    {{0, T * D, 0, D},
                     {0, Tk * D, 0, D},
                     {0, Tk * D, 0, D},
                     {0, T * D, 0, D},
                     {0, g, 0, D},
                     {T * D, g, 0, D},
                     {(T + Tk) * D, g, 0, D}}};
    return L;
}

/* The element where work item h's rows of tensor x begin (the items and
 * heads counted in 32 bits: a 64-bit division is a called subroutine on
 * the GPU, whose registers the Tensor Core kernels cannot spare) */
static inline MP_HD int64_t mp_attn_head(const MpAttnLays *L, int x, int64_t h)
{
    const MpAttnLay *l = &L->l[x];
    int32_t i = (int32_t)h, n = (int32_t)L->H;
    return l->off + (int64_t)(i / n) * l->sb + (int64_t)(i % n) * l->sh;
}

typedef struct MpAttn {
    const void *q, *k, *v;
    int qdt, kdt, vdt, cdt, causal;
    int64_t T, Tk, D, tq;
    float scale;
    const MpAttnOpt *opt;
    float drop, dscale;       /* dropout p and 1/(1 - p); p 0: none */
    uint64_t key;             /* its mask's generator (MpAttnOpt) */
    MpAttnLays lay;
} MpAttn;

/* Per-thread work space (f32). */
typedef struct MpAttnWs {
    float *kr, *vr;         /* k, v of the head [T', D] */
    float *kt, *vt;         /* their transposes [D, T'] (vt: backward) */
    float *qf, *dyf, *acc;  /* the query tile's q, dy and y or dq [tq, D] */
    float *s, *dp;          /* its P then Pr, and dP then dS [tq, T'] */
    float *dk, *dv;         /* the head's dk, dv accumulators [T', D] (backward) */
    float *mrow;            /* a row of the mask as f32 [T'] */
} MpAttnWs;

static inline int64_t mp_attn_tq(int64_t Tk)
{
    int64_t t = 16384 / (Tk > 0 ? Tk : 1);
    return t < 4 ? 4 : t > 32 ? 32 : t;
}

static inline MpAttn mp_attn(const void *q, int qdt, const void *k, int kdt, const void *v,
                             int vdt, int64_t T, int64_t Tk, int64_t D, int causal, int cdt,
                             const MpAttnOpt *o)
{
    MpAttn a = {q, k, v, qdt, kdt, vdt, cdt, causal, T, Tk, D, mp_attn_tq(Tk),
                o && o->scaled ? o->scale : 1.0f / sqrtf((float)D), o && o->mask ? o : NULL,
                0.0f, 1.0f, 0, mp_attn_lays(o, T, Tk, D)};
    if (o && o->drop > 0.0f) {
        a.drop = o->drop;
        a.dscale = mp_dropout_scale(o->drop);
        a.key = mp_dropout_key(o->seed, o->step, o->micro, o->node);
    }
    return a;
}

static inline MpAttnWs mp_attn_ws(const MpAttn *a, int bwd)
{
    int64_t kd = a->Tk * a->D, qd = a->tq * a->D, qk = a->tq * a->Tk;
    float *f = (float *)mp_kalloc((size_t)((4 + 2 * bwd) * kd + 3 * qd + 2 * qk + a->Tk) *
                                  sizeof *f);
    MpAttnWs w;
    w.kr = f, w.vr = f + kd, w.kt = f + 2 * kd, w.vt = f + 3 * kd;
    w.qf = f + 4 * kd, w.dyf = w.qf + qd, w.acc = w.dyf + qd;
    w.s = w.acc + qd, w.dp = w.s + qk;
    w.dk = w.dp + qk, w.dv = w.dk + bwd * kd;
    w.mrow = w.dv + bwd * kd;
    return w;
}

/* x [rows, cols] -> t [cols, rows], eight rows at a time (eight
 * contiguous stores per column). */
static inline void mp_attn_transpose(float *t, const float *x, int64_t rows, int64_t cols)
{
    for (int64_t i0 = 0; i0 < rows; i0 += 8) {
        int64_t i1 = i0 + 8 < rows ? i0 + 8 : rows;
        for (int64_t c = 0; c < cols; c++)
            for (int64_t i = i0; i < i1; i++) t[c * rows + i] = x[i * cols + c];
    }
}

/* Rows [t0, t0 + n) of work item h of tensor x (its layout a->lay.l[which])
 * as f32 into f [n, D]: one run where the rows are contiguous. */
static inline void mp_attn_ld(const MpAttn *a, const void *x, int xdt, int which, int64_t h,
                              int64_t t0, int64_t n, float *f)
{
    int64_t at = mp_attn_head(&a->lay, which, h), st = a->lay.l[which].st, D = a->D;
    if (st == D) {
        mp_ld_n(x, xdt, at + t0 * D, 1, n * D, f);
        return;
    }
    for (int64_t r = 0; r < n; r++)
        mp_ld_n(x, xdt, at + (t0 + r) * st, 1, D, f + r * D);
}

/* f [n, D] to rows [t0, t0 + n) of work item h of tensor x (mp_attn_ld) */
static inline void mp_attn_st(const MpAttn *a, void *x, int xdt, int which, int64_t h, int64_t t0,
                              int64_t n, const float *f)
{
    int64_t at = mp_attn_head(&a->lay, which, h), st = a->lay.l[which].st, D = a->D;
    if (st == D) {
        mp_st_n(x, xdt, at + t0 * D, 1, n * D, f);
        return;
    }
    for (int64_t r = 0; r < n; r++)
        mp_st_n(x, xdt, at + (t0 + r) * st, 1, D, f + r * D);
}

/* k and v of head h as f32, row-major; k transposed, and v too for the
 * backward pass (dP = dy v^T). */
static inline void mp_attn_load_kv(const MpAttn *a, int64_t h, MpAttnWs *w, int bwd)
{
    int64_t Tk = a->Tk, D = a->D;
    mp_attn_ld(a, a->k, a->kdt, MP_ATT_K, h, 0, Tk, w->kr);
    mp_attn_ld(a, a->v, a->vdt, MP_ATT_V, h, 0, Tk, w->vr);
    mp_attn_transpose(w->kt, w->kr, Tk, D);
    if (bwd)
        mp_attn_transpose(w->vt, w->vr, Tk, D);
}

/* Keys a query row i sees: i + 1 (causal) or all T'. */
static inline int64_t mp_attn_len(const MpAttn *a, int64_t i) { return a->causal ? i + 1 : a->Tk; }

/* o[r ldo + j + u] = alpha x[r] . y[j + u] for R rows of x (row stride D)
 * and w keys, yt = y^T of row stride ld; R and w are constants after
 * inlining: R w sums in registers, each over d in order. */
static inline void mp_attn_dots_rw(float *o, int64_t ldo, const float *x, const float *yt,
                                   int64_t ld, int64_t D, int64_t j, float alpha, const int R,
                                   const int w)
{
    float acc[MP_ATTN_R][MP_ATTN_VW] = {{0}};
    for (int64_t d = 0; d < D; d++) {
        const float *y = yt + d * ld + j;
        for (int r = 0; r < R; r++) {
            const float xd = x[r * D + d];
            for (int u = 0; u < w; u++) acc[r][u] += xd * y[u];
        }
    }
    for (int r = 0; r < R; r++)
        for (int u = 0; u < w; u++) o[r * ldo + j + u] = acc[r][u] * alpha;
}

#ifdef MP_NN_VEC
/* mp_attn_dots_rw for nv vectors of keys (w = 8 nv) */
static inline void mp_attn_dots_rv(float *o, int64_t ldo, const float *x, const float *yt,
                                   int64_t ld, int64_t D, int64_t j, float alpha, const int R,
                                   const int nv)
{
    MpNnV acc[MP_ATTN_R][MP_ATTN_VW / MP_NN_VEC] = {{{0}}};
    for (int64_t d = 0; d < D; d++) {
        const float *y = yt + d * ld + j;
        MpNnV y0, y1;
        MP_NN_VLD(y0, y);
        MP_NN_VLD(y1, y + (nv > 1 ? MP_NN_VEC : 0));
        for (int r = 0; r < R; r++) {
            const float xd = x[r * D + d];
            acc[r][0] += xd * y0;
            if (nv > 1)
                acc[r][1] += xd * y1;
        }
    }
    for (int r = 0; r < R; r++)
        for (int u = 0; u < nv; u++) {
            MpNnV t = acc[r][u] * alpha;
            memcpy(o + r * ldo + j + u * MP_NN_VEC, &t, sizeof t);
        }
}
#define MP_ATTN_DOTS(o, ldo, x, yt, ld, D, j, alpha, R, w) \
    mp_attn_dots_rv(o, ldo, x, yt, ld, D, j, alpha, R, (w) / MP_NN_VEC)
#else
#define MP_ATTN_DOTS mp_attn_dots_rw
#endif

/* The keys [j0, j1) of R rows: vectors of MP_ATTN_VW keys, of 8, then
 * single keys. A last vector of 8 may run past j1 (not past ld): its
 * extra scores land in slots of keys the rows do not see (zeroed by the
 * caller, or never read) or of the next key tile (written again there). */
static inline void mp_attn_dots_rows(float *o, int64_t ldo, const float *x, const float *yt,
                                     int64_t ld, int64_t D, int64_t j0, int64_t j1, float alpha,
                                     const int R)
{
    int64_t j = j0;
    for (; j + MP_ATTN_VW <= j1; j += MP_ATTN_VW)
        MP_ATTN_DOTS(o, ldo, x, yt, ld, D, j, alpha, R, MP_ATTN_VW);
    for (; j < j1 && j + 8 <= ld; j += 8)
        MP_ATTN_DOTS(o, ldo, x, yt, ld, D, j, alpha, R, 8);
    for (; j < j1; j++)
        mp_attn_dots_rw(o, ldo, x, yt, ld, D, j, alpha, R, 1);
}

/* out[r, j] = alpha x[r] . y[j] for the rows r < nq of the query tile at
 * row i0 and the keys j each row sees (out of row stride T'; a block of
 * rows runs to its last row's keys). Key tiles outer, row blocks inner: a
 * key tile of yt stays in the L1 cache. */
static inline void mp_attn_dots(const MpAttn *a, float *out, const float *x, const float *yt,
                                int64_t i0, int64_t nq, float alpha)
{
    int64_t Tk = a->Tk, D = a->D, nk = mp_attn_len(a, i0 + nq - 1);
    for (int64_t j0 = 0; j0 < nk; j0 += MP_ATTN_TK)
        for (int64_t r = 0, m; r < nq; r += m) {
            m = nq - r >= MP_ATTN_R ? MP_ATTN_R : 1;
            int64_t j1 = mp_attn_len(a, i0 + r + m - 1);
            j1 = j1 < j0 + MP_ATTN_TK ? j1 : j0 + MP_ATTN_TK;
            if (j1 <= j0)
                continue;
            if (m == MP_ATTN_R)
                mp_attn_dots_rows(out + r * Tk, Tk, x + r * D, yt, Tk, D, j0, j1, alpha,
                                  MP_ATTN_R);
            else
                mp_attn_dots_rows(out + r * Tk, Tk, x + r * D, yt, Tk, D, j0, j1, alpha, 1);
        }
}

/* o[r D + d + u] (+)= sum over t < n of wt[r ldw + t sw] Y[t D + d + u]
 * for R rows of o and w columns (constants after inlining): R w sums in
 * registers, each over t in order. */
static inline void mp_attn_wsum_rw(float *o, const float *wt, int64_t ldw, int64_t sw,
                                   int64_t n, const float *Y, int64_t D, int64_t d, int add,
                                   const int R, const int w)
{
    float acc[MP_ATTN_R][MP_ATTN_VW] = {{0}};
    for (int64_t t = 0; t < n; t++) {
        const float *y = Y + t * D + d;
        for (int r = 0; r < R; r++) {
            const float c = wt[r * ldw + t * sw];
            for (int u = 0; u < w; u++) acc[r][u] += c * y[u];
        }
    }
    for (int r = 0; r < R; r++)
        for (int u = 0; u < w; u++)
            o[r * D + d + u] = add ? o[r * D + d + u] + acc[r][u] : acc[r][u];
}

#ifdef MP_NN_VEC
/* mp_attn_wsum_rw for nv vectors of columns (w = 8 nv) */
static inline void mp_attn_wsum_rv(float *o, const float *wt, int64_t ldw, int64_t sw,
                                   int64_t n, const float *Y, int64_t D, int64_t d, int add,
                                   const int R, const int nv)
{
    MpNnV acc[MP_ATTN_R][MP_ATTN_VW / MP_NN_VEC] = {{{0}}};
    for (int64_t t = 0; t < n; t++) {
        const float *y = Y + t * D + d;
        MpNnV y0, y1;
        MP_NN_VLD(y0, y);
        MP_NN_VLD(y1, y + (nv > 1 ? MP_NN_VEC : 0));
        for (int r = 0; r < R; r++) {
            const float c = wt[r * ldw + t * sw];
            acc[r][0] += c * y0;
            if (nv > 1)
                acc[r][1] += c * y1;
        }
    }
    for (int r = 0; r < R; r++)
        for (int u = 0; u < nv; u++) {
            float *p = o + r * D + d + u * MP_NN_VEC;
            MpNnV t = acc[r][u];
            if (add) {
                MpNnV prev;
                MP_NN_VLD(prev, p);
                t = prev + acc[r][u];
            }
            memcpy(p, &t, sizeof t);
        }
}
#define MP_ATTN_WSUM(o, wt, ldw, sw, n, Y, D, d, add, R, w) \
    mp_attn_wsum_rv(o, wt, ldw, sw, n, Y, D, d, add, R, (w) / MP_NN_VEC)
#else
#define MP_ATTN_WSUM mp_attn_wsum_rw
#endif

/* R rows of o, all D columns: vectors of MP_ATTN_VW, of 8, then single
 * columns. */
static inline void mp_attn_wsum_rows(float *o, const float *wt, int64_t ldw, int64_t sw,
                                     int64_t n, const float *Y, int64_t D, int add, const int R)
{
    int64_t d = 0;
    for (; d + MP_ATTN_VW <= D; d += MP_ATTN_VW)
        MP_ATTN_WSUM(o, wt, ldw, sw, n, Y, D, d, add, R, MP_ATTN_VW);
    for (; d + 8 <= D; d += 8)
        MP_ATTN_WSUM(o, wt, ldw, sw, n, Y, D, d, add, R, 8);
    for (; d < D; d++)
        mp_attn_wsum_rw(o, wt, ldw, sw, n, Y, D, d, add, R, 1);
}

/* o[r] (+)= sum over t < n of wt[r ldw + t sw] Y[t] for the rows r < m of
 * o [m, D] (Y [n, D]): y and dq (rows of Pr, dS: ldw T', sw 1), dv and dk
 * (columns of them: ldw 1, sw T'). MP_ATTN_R rows at a time, then single
 * rows. */
static inline void mp_attn_wsum(float *o, const float *wt, int64_t ldw, int64_t sw, int64_t m,
                                int64_t n, const float *Y, int64_t D, int add)
{
    for (int64_t r = 0, b; r < m; r += b) {
        b = m - r >= MP_ATTN_R ? MP_ATTN_R : 1;
        if (b == MP_ATTN_R)
            mp_attn_wsum_rows(o + r * D, wt + r * ldw, ldw, sw, n, Y, D, add, MP_ATTN_R);
        else
            mp_attn_wsum_rows(o + r * D, wt + r * ldw, ldw, sw, n, Y, D, add, 1);
    }
}

/* mp_row_max of 4 rows of p (row stride ld, lengths n[r]): the same
 * comparisons in the same order per row, the 4 chains interleaved. */
static inline void mp_attn_max4(const float *p, int64_t ld, const int64_t *n, float *m)
{
    const float *p0 = p, *p1 = p + ld, *p2 = p + 2 * ld, *p3 = p + 3 * ld;
    float m0 = -INFINITY, m1 = m0, m2 = m0, m3 = m0;
    int64_t c = mp_min64(mp_min64(n[0], n[1]), mp_min64(n[2], n[3])), i;
    for (i = 0; i < c; i++) {
        m0 = p0[i] > m0 ? p0[i] : m0;
        m1 = p1[i] > m1 ? p1[i] : m1;
        m2 = p2[i] > m2 ? p2[i] : m2;
        m3 = p3[i] > m3 ? p3[i] : m3;
    }
    m[0] = m0, m[1] = m1, m[2] = m2, m[3] = m3;
    for (int r = 0; r < 4; r++)
        for (i = c; i < n[r]; i++) m[r] = p[r * ld + i] > m[r] ? p[r * ld + i] : m[r];
}

/* s[r] = sum over i < n[r] of a[r ld + i] (times b[r ld + i] when b) in
 * double, in order, for 4 rows: mp_row_softmax's and
 * mp_row_softmax_grad's sums, the 4 chains interleaved (a float product
 * is exact in double, so fusing it changes nothing). */
static inline void mp_attn_sum4(const float *a, const float *b, int64_t ld, const int64_t *n,
                                double *s)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t c = mp_min64(mp_min64(n[0], n[1]), mp_min64(n[2], n[3])), i;
    if (b)
        for (i = 0; i < c; i++) {
            s0 += (double)a[i] * b[i];
            s1 += (double)a[ld + i] * b[ld + i];
            s2 += (double)a[2 * ld + i] * b[2 * ld + i];
            s3 += (double)a[3 * ld + i] * b[3 * ld + i];
        }
    else
        for (i = 0; i < c; i++) {
            s0 += a[i];
            s1 += a[ld + i];
            s2 += a[2 * ld + i];
            s3 += a[3 * ld + i];
        }
    s[0] = s0, s[1] = s1, s[2] = s2, s[3] = s3;
    for (int r = 0; r < 4; r++)
        for (i = c; i < n[r]; i++)
            s[r] += b ? (double)a[r * ld + i] * b[r * ld + i] : (double)a[r * ld + i];
}

/* The rows r < nq of the query tile at i0 (stride T'), each over the keys
 * it sees, then zeros up to nk: y NULL: p = softmax(p) (mp_row_softmax);
 * else p = y (p - rowsum(p y)) (mp_row_softmax_grad, p = dP, y = P). Four
 * rows at a time make the same operations as those, in the same order. */
static inline void mp_attn_softmax(const MpAttn *a, float *p, const float *y, int64_t i0,
                                   int64_t nq, int64_t nk)
{
    int64_t ld = a->Tk, r = 0;
    for (; r + 4 <= nq; r += 4) {
        float *v = p + r * ld, m[4];
        const float *yr = y ? y + r * ld : NULL;
        int64_t n[4];
        double s[4];
        for (int u = 0; u < 4; u++) n[u] = mp_attn_len(a, i0 + r + u);
        if (!y) {
            mp_attn_max4(v, ld, n, m);
            for (int u = 0; u < 4; u++) {
                for (int64_t j = 0; j < n[u]; j++) v[u * ld + j] -= m[u];
                mp_vexp(v + u * ld, n[u]);
            }
        }
        mp_attn_sum4(v, yr, ld, n, s);
        for (int u = 0; u < 4; u++) {
            float *o = v + u * ld, inv = (float)(1.0 / s[u]), t = (float)s[u];
            if (y)
                for (int64_t j = 0; j < n[u]; j++) o[j] = yr[u * ld + j] * (o[j] - t);
            else
                for (int64_t j = 0; j < n[u]; j++) o[j] *= inv;
        }
    }
    for (; r < nq; r++) {
        if (y)
            mp_row_softmax_grad(p + r * ld, y + r * ld, mp_attn_len(a, i0 + r));
        else
            mp_row_softmax(p + r * ld, mp_attn_len(a, i0 + r));
    }
    for (r = 0; r < nq; r++)
        for (int64_t j = mp_attn_len(a, i0 + r); j < nk; j++) p[r * ld + j] = 0.0f;
}

/* The mask on the scores s of the query tile [i0, i0 + nq) of head h,
 * row by row: a u8 mask's 0 makes a score -inf, a float mask is added.
 * dead[r]: row r sees no key (all its scores -inf); its scores become 0
 * so that its softmax is finite (the caller zeros it). */
static inline void mp_attn_mask(const MpAttn *a, MpAttnWs *w, float *s, int64_t h, int64_t i0,
                                int64_t nq, unsigned char *dead)
{
    const MpAttnOpt *o = a->opt;
    int64_t base = h / o->H * o->ms[0] + h % o->H * o->ms[1];
    for (int64_t r = 0; r < nq; r++) {
        int64_t n = mp_attn_len(a, i0 + r), live = 0;
        float *p = s + r * a->Tk, *m = w->mrow;
        mp_ld_n(o->mask, o->mdt, base + (i0 + r) * o->ms[2], o->ms[3], n, m);
        for (int64_t j = 0; j < n; j++) {
            p[j] = o->mdt == MP_U8 ? (m[j] != 0.0f ? p[j] : -INFINITY) : p[j] + m[j];
            live += p[j] != -INFINITY;
        }
        dead[r] = live == 0;
        if (dead[r])
            memset(p, 0, (size_t)n * sizeof *p);
    }
}

/* P of the query tile [i0, i0 + nq) of the loaded head into w->s (f32):
 * q rows loaded as f32, scores (masked), each row's softmax over its keys,
 * zeros past them up to the tile's nk keys (returned). */
static inline int64_t mp_attn_probs(const MpAttn *a, MpAttnWs *w, int64_t h, int64_t i0,
                                    int64_t nq)
{
    int64_t nk = mp_attn_len(a, i0 + nq - 1);
    unsigned char dead[32];                    /* nq <= mp_attn_tq's 32 */
    mp_attn_ld(a, a->q, a->qdt, MP_ATT_Q, h, i0, nq, w->qf);
    mp_attn_dots(a, w->s, w->qf, w->kt, i0, nq, a->scale);
    if (a->opt)
        mp_attn_mask(a, w, w->s, h, i0, nq, dead);
    mp_attn_softmax(a, w->s, NULL, i0, nq, nk);
    for (int64_t r = 0; a->opt && r < nq; r++)
        if (dead[r])
            memset(w->s + r * a->Tk, 0, (size_t)nk * sizeof *w->s);
    return nk;
}

/* Dropout on the rows r < nq of the query tile at i0 of head h (p: P or
 * dP, stride T'), over the keys each row sees: kept times 1/(1 - p), else
 * 0 (MpAttnOpt). */
static inline void mp_attn_drop(const MpAttn *a, float *p, int64_t h, int64_t i0, int64_t nq)
{
    for (int64_t r = 0; r < nq; r++) {
        int64_t n = mp_attn_len(a, i0 + r), base = (h * a->T + i0 + r) * a->Tk;
        float *v = p + r * a->Tk;
        for (int64_t j = 0; j < n; j++)
            v[j] = mp_dropout_at(a->key, base + j, a->drop, a->dscale, v[j]);
    }
}

/* The first n of each of nq rows (stride ld) times mul, rounded to cdt in
 * place (mp_round_n: the vector conversions, the bits of mp_round). */
static inline void mp_attn_round(float *v, int64_t nq, int64_t ld, int64_t n, float mul, int cdt)
{
    for (int64_t r = 0; r < nq; r++) {
        float *p = v + r * ld;
        if (mul != 1.0f)
            for (int64_t j = 0; j < n; j++) p[j] *= mul;
        mp_round_n(p, cdt, n);
    }
}

/* mp_k_attention with options (MpAttnOpt; NULL: none) */
static inline void mp_k_attention_opt(void *y, int ydt, const void *q, int qdt, const void *k,
                                      int kdt, const void *v, int vdt, int64_t BH, int64_t T,
                                      int64_t Tk, int64_t D, int causal, int cdt,
                                      const MpAttnOpt *o)
{
    MpAttn a = mp_attn(q, qdt, k, kdt, v, vdt, T, Tk, D, causal, cdt, o);
    int64_t ntiles = (T + a.tq - 1) / a.tq;
    MP_OMP(parallel if (BH * ntiles > 1))
    {
        MpAttnWs w = mp_attn_ws(&a, 0);
        int64_t loaded = -1;
        MP_OMP(for schedule(dynamic))
        for (int64_t it = 0; it < BH * ntiles; it++) {
            int64_t h = it / ntiles, i0 = it % ntiles * a.tq, nq = T - i0 < a.tq ? T - i0 : a.tq;
            if (h != loaded)
                mp_attn_load_kv(&a, h, &w, 0), loaded = h;
            int64_t nk = mp_attn_probs(&a, &w, h, i0, nq);
            if (a.drop > 0.0f)
                mp_attn_drop(&a, w.s, h, i0, nq);
            mp_attn_round(w.s, nq, Tk, nk, 1.0f, cdt);
            mp_attn_wsum(w.acc, w.s, Tk, 1, nq, nk, w.vr, D, 0);
            mp_attn_st(&a, y, ydt, MP_ATT_Y, h, i0, nq, w.acc);
        }
        free(w.kr);
    }
}

static inline void mp_k_attention(void *y, int ydt, const void *q, int qdt, const void *k,
                                  int kdt, const void *v, int vdt, int64_t BH, int64_t T,
                                  int64_t Tk, int64_t D, int causal, int cdt)
{
    mp_k_attention_opt(y, ydt, q, qdt, k, kdt, v, vdt, BH, T, Tk, D, causal, cdt, NULL);
}

/* One query tile's share of head h's gradients: dv and dk accumulate in
 * w, dq of the tile is stored to g. */
static inline void mp_attn_grad_tile(const MpAttn *a, MpAttnWs *w, void *g, int gdt,
                                     const void *dy, int dydt, int64_t h, int64_t i0, int64_t nq)
{
    int64_t Tk = a->Tk, D = a->D, nk = mp_attn_probs(a, w, h, i0, nq);
    mp_attn_ld(a, dy, dydt, MP_ATT_Y, h, i0, nq, w->dyf);
    mp_attn_dots(a, w->dp, w->dyf, w->vt, i0, nq, 1.0f);
    if (a->drop > 0.0f)
        mp_attn_drop(a, w->dp, h, i0, nq);                  /* dP' */
    mp_attn_softmax(a, w->dp, w->s, i0, nq, nk);
    mp_attn_round(w->dp, nq, Tk, nk, a->scale, a->cdt);     /* dS */
    if (a->drop > 0.0f)
        mp_attn_drop(a, w->s, h, i0, nq);                   /* P o M / (1 - p) */
    mp_attn_round(w->s, nq, Tk, nk, 1.0f, a->cdt);          /* Pr */
    mp_attn_wsum(w->acc, w->dp, Tk, 1, nq, nk, w->kr, D, 0);        /* dq */
    mp_attn_wsum(w->dv, w->s, 1, Tk, nk, nq, w->dyf, D, 1);         /* dv */
    mp_attn_wsum(w->dk, w->dp, 1, Tk, nk, nq, w->qf, D, 1);         /* dk */
    mp_attn_st(a, g, gdt, MP_ATT_DQ, h, i0, nq, w->acc);
}

/* g: dq, dk and dv where the layouts put them (dense: [BH, T + 2T', D],
 * per head dq [T, D], dk [T', D], dv [T', D]). */
static inline void mp_k_attention_grad_opt(void *g, int gdt, const void *dy, int dydt,
                                           const void *q, int qdt, const void *k, int kdt,
                                           const void *v, int vdt, int64_t BH, int64_t T,
                                           int64_t Tk, int64_t D, int causal, int cdt,
                                           const MpAttnOpt *o)
{
    MpAttn a = mp_attn(q, qdt, k, kdt, v, vdt, T, Tk, D, causal, cdt, o);
    MP_OMP(parallel if (BH > 1))
    {
        MpAttnWs w = mp_attn_ws(&a, 1);
        MP_OMP(for schedule(dynamic))
        for (int64_t h = 0; h < BH; h++) {
            mp_attn_load_kv(&a, h, &w, 1);
            memset(w.dk, 0, (size_t)(2 * Tk * D) * sizeof *w.dk);
            for (int64_t i0 = 0; i0 < T; i0 += a.tq)
                mp_attn_grad_tile(&a, &w, g, gdt, dy, dydt, h, i0, T - i0 < a.tq ? T - i0 : a.tq);
            mp_attn_st(&a, g, gdt, MP_ATT_DK, h, 0, Tk, w.dk);
            mp_attn_st(&a, g, gdt, MP_ATT_DV, h, 0, Tk, w.dv);
        }
        free(w.kr);
    }
}

static inline void mp_k_attention_grad(void *g, int gdt, const void *dy, int dydt, const void *q,
                                       int qdt, const void *k, int kdt, const void *v, int vdt,
                                       int64_t BH, int64_t T, int64_t Tk, int64_t D, int causal,
                                       int cdt)
{
    mp_k_attention_grad_opt(g, gdt, dy, dydt, q, qdt, k, kdt, v, vdt, BH, T, Tk, D, causal, cdt,
                            NULL);
}

#if defined(__CUDACC__)
#elif defined(__clang__)
#pragma float_control(pop)
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

/* ---- rms_norm and rope ---------------------------------------------------- */

static inline float mp_rms_row(const float *v, int64_t n, float eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)v[i] * v[i];
    return mp_rms_rstd(ss, n, eps);
}

/* y = x rstd w over the last axis (torch.nn.RMSNorm) */
static inline void mp_k_rms_norm(void *y, int ydt, const void *x, int xdt, const void *w,
                                 int wdt, int64_t rows, int64_t dim, float eps)
{
    MP_ROWS_LOOP(rows, dim, 1, 2,
        float *wv = buf + dim, r;
        mp_ld_n(x, xdt, off, 1, dim, buf);
        mp_ld_n(w, wdt, 0, 1, dim, wv);
        r = mp_rms_row(buf, dim, eps);
        for (int64_t j = 0; j < dim; j++) buf[j] = buf[j] * r * wv[j];
        mp_st_n(y, ydt, off, 1, dim, buf))
}

/* dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd */
static inline void mp_k_rms_norm_dx(void *dx, int dxdt, const void *dy, int dydt,
                                    const void *x, int xdt, const void *w, int wdt,
                                    int64_t rows, int64_t dim, float eps)
{
    MP_ROWS_LOOP(rows, dim, 1, 3,
        float *g = buf + dim, *wv = buf + 2 * dim, r, mgx;
        double sgx = 0;
        mp_ld_n(x, xdt, off, 1, dim, buf);
        r = mp_rms_row(buf, dim, eps);
        mp_ld_n(dy, dydt, off, 1, dim, g);
        mp_ld_n(w, wdt, 0, 1, dim, wv);
        for (int64_t j = 0; j < dim; j++) {
            buf[j] *= r;
            g[j] *= wv[j];
            sgx += (double)g[j] * buf[j];
        }
        mgx = (float)(sgx / (double)dim);
        for (int64_t j = 0; j < dim; j++) g[j] = r * (g[j] - buf[j] * mgx);
        mp_st_n(dx, dxdt, off, 1, dim, g))
}

/* dw[dim] = sum over rows of dy xhat (+ beta dw), rows summed in order */
static inline void mp_k_rms_norm_dw(void *dw, int dwdt, const void *dy, int dydt,
                                    const void *x, int xdt, int64_t rows, int64_t dim,
                                    float eps, float beta)
{
    double *acc = (double *)mp_kzalloc((size_t)dim * sizeof *acc);
    float *v = (float *)mp_kalloc((size_t)(2 * dim) * sizeof *v), *g = v + dim;
    for (int64_t r = 0; r < rows; r++) {
        mp_ld_n(x, xdt, r * dim, 1, dim, v);
        float rs = mp_rms_row(v, dim, eps);
        mp_ld_n(dy, dydt, r * dim, 1, dim, g);
        for (int64_t j = 0; j < dim; j++) acc[j] += g[j] * (v[j] * rs);
    }
    for (int64_t j = 0; j < dim; j++) v[j] = (float)acc[j];
    mp_st_beta(dw, dwdt, 0, dim, v, beta);
    free(acc);
    free(v);
}

static inline void mp_k_rope(void *y, int ydt, const void *x, int xdt, int64_t outer, int64_t P,
                             int64_t inner, int64_t D, float theta, int half, float sign)
{
    int64_t rows = outer * P * inner / D;
    MP_OMP(parallel for if (outer * P * inner > MP_PAR_MIN))
    for (int64_t r = 0; r < rows; r++) {
        float in[2 * MP_CHUNK], out[2 * MP_CHUNK], *v = D <= 2 * MP_CHUNK ? in : NULL;
        float *o = D <= 2 * MP_CHUNK ? out : NULL;
        if (!v) {
            v = (float *)mp_kalloc((size_t)(2 * D) * sizeof *v);
            o = v + D;
        }
        int64_t pos = (r * D / inner) % P, partner;
        mp_ld_n(x, xdt, r * D, 1, D, v);
        for (int64_t j = 0; j < D; j++) {
            float angle;
            int first = mp_rope_pair(j, D, half, pos, theta, &partner, &angle);
            o[j] = mp_rope_value(v[j], v[partner], first, angle, sign);
        }
        mp_st_n(y, ydt, r * D, 1, D, o);
        if (v != in)
            free(v);
    }
}


/* ---- recurrent layers: GRU and LSTM (torch's cells, batch_first) ----------------------
 * The state s [B, T, W] keeps per step h, then what the backward pass reads:
 * GRU (W = 5H) h r z n and hn = W_hn h_{t-1} + b_hn; LSTM (W = 6H) h c i f
 * g o. The input projection gi [B, T, G] (x W_ih^T + b_ih, G = 3H or 4H)
 * is one product made before (a linear); per step ONE product gives
 * h_{t-1} W_hh^T + b_hh for all gates, stored in the state's type (a
 * product of the compute type), then the cells run in f32 (torch's
 * formulas: h = (h_{t-1} - n) z + n; c = f c_{t-1} + i g, h = o tanh(c)).
 * The LSTM's c goes from step to step in f32. The per-element math is
 * shared with the CUDA program (mp_cuda_ops.h). */

/* One GRU element: gates in f32 -> v[0..4] = h, r, z, n, hn. */
static inline MP_HD void mp_gru_cell(float gir, float giz, float gin, float ghr, float ghz,
                                     float ghn, float hp, float v[5])
{
    float r = mp_sigmoid(gir + ghr), z = mp_sigmoid(giz + ghz);
    float n = mp_tanhf_p(gin + r * ghn);
    v[0] = (hp - n) * z + n;
    v[1] = r, v[2] = z, v[3] = n, v[4] = ghn;
}

/* Its gradient: dh (of h_t), h_{t-1} and the kept r z n hn -> d[0..2] the
 * gates' pre-activations from gi (r, z, n), d[3] n's from W_hn h + b_hn, d[4]
 * the part of d h_{t-1} that does not pass through W_hh. */
static inline MP_HD void mp_gru_cell_grad(float dh, float hp, float r, float z, float n, float hn,
                                          float d[5])
{
    float dn = dh * (1.0f - z) * (1.0f - n * n);
    d[0] = dn * hn * r * (1.0f - r);
    d[1] = dh * (hp - n) * z * (1.0f - z);
    d[2] = dn;
    d[3] = dn * r;
    d[4] = dh * z;
}

/* One LSTM element: pre-activations i f g o and c_{t-1} (f32) -> v[0..5] =
 * h, c, i, f, g, o. */
static inline MP_HD void mp_lstm_cell(float pi, float pf, float pg, float po, float cp, float v[6])
{
    float i = mp_sigmoid(pi), f = mp_sigmoid(pf), g = mp_tanhf_p(pg), o = mp_sigmoid(po);
    float c = f * cp + i * g;
    v[0] = o * mp_tanhf_p(c);
    v[1] = c, v[2] = i, v[3] = f, v[4] = g, v[5] = o;
}

/* Its gradient: dh, dc (from later steps and the state's c), c_{t-1}, the
 * kept c i f g o -> d[0..3] the pre-activations' (i f g o), *dcp d c_{t-1}. */
static inline MP_HD void mp_lstm_cell_grad(float dh, float dc, float cp, float c, float i, float f,
                                           float g, float o, float d[4], float *dcp)
{
    float tc = mp_tanhf_p(c);
    dc += dh * o * (1.0f - tc * tc);
    d[0] = dc * g * i * (1.0f - i);
    d[1] = dc * cp * f * (1.0f - f);
    d[2] = dc * i * (1.0f - g * g);
    d[3] = dh * tc * o * (1.0f - o);
    *dcp = dc * f;
}

/* gh [B, G] = h_{t-1} W_hh^T + b_hh, stored as sdt; h_{t-1} = 0 at t = 0. */
static inline void mp_rnn_hidden(void *gh, int sdt, const void *s, int64_t t, const void *w, int wdt,
                                 const void *bias, int bdt, int64_t B, int64_t T, int64_t H,
                                 int64_t G, int64_t W)
{
    if (t == 0) {
        for (int64_t i = 0; i < B * G; i++)
            mp_st(gh, sdt, i, bias ? mp_ld(bias, bdt, i % G) : 0.0f);
        return;
    }
    MpGemm g = mp_gemm_linear(gh, sdt, mp_at(s, sdt, (t - 1) * W), sdt, w, wdt, bias, bdt, B, G, H);
    g.lda = T * W;
    mp_gemm_ex(&g);
}

/* dW_hh [G, H] = sum over b and t >= 1 of dg[b, t]^T h[b, t - 1] (dg [B, T, G]
 * of type gdt), in f32 then stored as odt at dw; db_hh [G] = sum of dg. */
static inline void mp_rnn_weight_grads(void *dw, void *db, int odt, const void *dg, int gdt,
                                       const void *s, int sdt, int64_t B, int64_t T, int64_t H,
                                       int64_t G, int64_t W)
{
    float *acc = (float *)mp_kalloc((size_t)(G * H) * sizeof *acc);
    memset(acc, 0, (size_t)(G * H) * sizeof *acc);
    for (int64_t b = 0; T > 1 && b < B; b++)
        mp_gemm(1, 0, G, H, T - 1, 1.0f, mp_at(dg, gdt, (b * T + 1) * G), gdt, G,
                mp_at(s, sdt, b * T * W), sdt, W, b > 0 ? 1.0f : 0.0f, acc, MP_F32, H);
    mp_st_n(dw, odt, 0, 1, G * H, acc);
    free(acc);
    for (int64_t j = 0; j < G; j++) {
        double sum = 0;
        for (int64_t r = 0; r < B * T; r++)
            sum += mp_ld(dg, gdt, r * G + j);
        mp_st(db, odt, j, (float)sum);
    }
}

static inline void mp_k_gru(void *s, int sdt, const void *gi, int gdt, const void *w, int wdt,
                            const void *bias, int bdt, int64_t B, int64_t T, int64_t H)
{
    int64_t G = 3 * H, W = 5 * H;
    void *gh = mp_kalloc((size_t)(B * G * mp_dt_size(sdt)));
    for (int64_t t = 0; t < T; t++) {
        mp_rnn_hidden(gh, sdt, s, t, w, wdt, bias, bdt, B, T, H, G, W);
        MP_OMP(parallel for if (B * H > MP_PAR_MIN / 4))
        for (int64_t e = 0; e < B * H; e++) {
            int64_t b = e / H, j = e % H, gb = (b * T + t) * G + j, sb = (b * T + t) * W + j;
            float v[5];
            mp_gru_cell(mp_ld(gi, gdt, gb), mp_ld(gi, gdt, gb + H), mp_ld(gi, gdt, gb + 2 * H),
                        mp_ld(gh, sdt, b * G + j), mp_ld(gh, sdt, b * G + H + j),
                        mp_ld(gh, sdt, b * G + 2 * H + j), t ? mp_ld(s, sdt, sb - W) : 0.0f, v);
            for (int k = 0; k < 5; k++)
                mp_st(s, sdt, sb + k * H, v[k]);
        }
    }
    free(gh);
}

/* o: d gi [B, T, G], dW_hh [G, H], db_hh [G] (ops.def GRU_GRAD). */
static inline void mp_k_gru_grad(void *o, int odt, const void *ds, int dsdt, const void *s, int sdt,
                                 const void *w, int wdt, int64_t B, int64_t T, int64_t H)
{
    int64_t G = 3 * H, W = 5 * H;
    void *dgh = mp_kalloc((size_t)(B * T * G * mp_dt_size(odt)));
    float *dhr = (float *)mp_kalloc((size_t)(B * H) * sizeof *dhr);
    memset(dhr, 0, (size_t)(B * H) * sizeof *dhr);
    for (int64_t t = T - 1; t >= 0; t--) {
        MP_OMP(parallel for if (B * H > MP_PAR_MIN / 4))
        for (int64_t e = 0; e < B * H; e++) {
            int64_t b = e / H, j = e % H, gb = (b * T + t) * G + j, sb = (b * T + t) * W + j;
            float d[5];
            mp_gru_cell_grad(mp_ld(ds, dsdt, sb) + dhr[e], t ? mp_ld(s, sdt, sb - W) : 0.0f,
                             mp_ld(s, sdt, sb + H), mp_ld(s, sdt, sb + 2 * H),
                             mp_ld(s, sdt, sb + 3 * H), mp_ld(s, sdt, sb + 4 * H), d);
            for (int k = 0; k < 3; k++)
                mp_st(o, odt, gb + k * H, d[k]);
            mp_st(dgh, odt, gb, d[0]);
            mp_st(dgh, odt, gb + H, d[1]);
            mp_st(dgh, odt, gb + 2 * H, d[3]);
            dhr[e] = d[4];
        }
        if (t > 0)   /* d h_{t-1} += dgh_t W_hh */
            mp_gemm(0, 0, B, H, G, 1.0f, mp_at(dgh, odt, t * G), odt, T * G, w, wdt, H, 1.0f, dhr,
                    MP_F32, H);
    }
    mp_rnn_weight_grads((void *)mp_at(o, odt, B * T * G), (void *)mp_at(o, odt, B * T * G + G * H),
                        odt, dgh, odt, s, sdt, B, T, H, G, W);
    free(dhr);
    free(dgh);
}

static inline void mp_k_lstm(void *s, int sdt, const void *gi, int gdt, const void *w, int wdt,
                             const void *bias, int bdt, int64_t B, int64_t T, int64_t H)
{
    int64_t G = 4 * H, W = 6 * H;
    void *gh = mp_kalloc((size_t)(B * G * mp_dt_size(sdt)));
    float *c = (float *)mp_kalloc((size_t)(B * H) * sizeof *c);
    memset(c, 0, (size_t)(B * H) * sizeof *c);
    for (int64_t t = 0; t < T; t++) {
        mp_rnn_hidden(gh, sdt, s, t, w, wdt, bias, bdt, B, T, H, G, W);
        MP_OMP(parallel for if (B * H > MP_PAR_MIN / 4))
        for (int64_t e = 0; e < B * H; e++) {
            int64_t b = e / H, j = e % H, gb = (b * T + t) * G + j, sb = (b * T + t) * W + j;
            float p[4], v[6];
            for (int k = 0; k < 4; k++)
                p[k] = mp_ld(gi, gdt, gb + k * H) + mp_ld(gh, sdt, b * G + k * H + j);
            mp_lstm_cell(p[0], p[1], p[2], p[3], c[e], v);
            c[e] = v[1];
            for (int k = 0; k < 6; k++)
                mp_st(s, sdt, sb + k * H, v[k]);
        }
    }
    free(c);
    free(gh);
}

/* o: d gi [B, T, G] (which is also d of the hidden product), dW_hh, db_hh. */
static inline void mp_k_lstm_grad(void *o, int odt, const void *ds, int dsdt, const void *s, int sdt,
                                  const void *w, int wdt, int64_t B, int64_t T, int64_t H)
{
    int64_t G = 4 * H, W = 6 * H;
    float *dhr = (float *)mp_kalloc((size_t)(2 * B * H) * sizeof *dhr), *dcr = dhr + B * H;
    memset(dhr, 0, (size_t)(2 * B * H) * sizeof *dhr);
    for (int64_t t = T - 1; t >= 0; t--) {
        MP_OMP(parallel for if (B * H > MP_PAR_MIN / 4))
        for (int64_t e = 0; e < B * H; e++) {
            int64_t b = e / H, j = e % H, gb = (b * T + t) * G + j, sb = (b * T + t) * W + j;
            float d[4];
            mp_lstm_cell_grad(mp_ld(ds, dsdt, sb) + dhr[e], mp_ld(ds, dsdt, sb + H) + dcr[e],
                              t ? mp_ld(s, sdt, sb - W + H) : 0.0f, mp_ld(s, sdt, sb + H),
                              mp_ld(s, sdt, sb + 2 * H), mp_ld(s, sdt, sb + 3 * H),
                              mp_ld(s, sdt, sb + 4 * H), mp_ld(s, sdt, sb + 5 * H), d, &dcr[e]);
            for (int k = 0; k < 4; k++)
                mp_st(o, odt, gb + k * H, d[k]);
        }
        if (t > 0)   /* d h_{t-1} = dg_t W_hh */
            mp_gemm(0, 0, B, H, G, 1.0f, mp_at(o, odt, t * G), odt, T * G, w, wdt, H, 0.0f, dhr,
                    MP_F32, H);
    }
    mp_rnn_weight_grads((void *)mp_at(o, odt, B * T * G), (void *)mp_at(o, odt, B * T * G + G * H),
                        odt, o, odt, s, sdt, B, T, H, G, W);
    free(dhr);
}

/* ---- pad, upsample -------------------------------------------------------- */

/* pad: x viewed as [outer, xs[0..3]], y as [outer, ys[0..3]]; y's element
 * at index j of axis k is x's at j - before[k], or value where that is
 * outside x. Each row of the last axis: the part inside copied (the bits
 * when the types agree), the rest filled. */
static inline void mp_k_pad(void *y, int ydt, const void *x, int xdt, int64_t outer,
                            const int64_t *xs, const int64_t *ys, const int64_t *before, float value)
{
    int64_t rows = outer * ys[0] * ys[1] * ys[2], Y = ys[3], X = xs[3];
    int64_t lo = before[3] > 0 ? before[3] : 0, hi = mp_min64(Y, before[3] + X);
    MP_OMP(parallel for if (rows * Y > MP_PAR_MIN))
    for (int64_t r = 0; r < rows; r++) {
        int64_t rest = r, xr = 0, stride = 1, inside = 1;
        for (int k = 2; k >= 0; k--) {
            int64_t j = rest % ys[k] - before[k];
            rest /= ys[k];
            inside &= j >= 0 && j < xs[k];
            xr += j * stride;
            stride *= xs[k];
        }
        xr += rest * stride;
        int64_t yo = r * Y;
        if (!inside || hi <= lo) {
            for (int64_t i = 0; i < Y; i++) mp_st(y, ydt, yo + i, value);
            continue;
        }
        for (int64_t i = 0; i < lo; i++) mp_st(y, ydt, yo + i, value);
        mp_copy_run(y, ydt, yo + lo, x, xdt, xr * X + lo - before[3], hi - lo);
        for (int64_t i = hi; i < Y; i++) mp_st(y, ydt, yo + i, value);
    }
}

/* pad in mode reflect, replicate or circular (mp_pad_mode_at), and its
 * gradient (mp_pad_grad_at): xs, ys, before as mp_k_pad's */
static inline void mp_k_pad_each(void *out, int odt, const void *in, int idt, int64_t outer,
                                 const int64_t *xs, const int64_t *ys, const int64_t *before, int mode,
                                 int grad)
{
    const int64_t *os = grad ? xs : ys;   /* the output's inner shape */
    int64_t n = outer * os[0] * os[1] * os[2] * os[3];
    MP_OMP(parallel for if (n > MP_PAR_MIN))
    for (int64_t e = 0; e < n; e++)
        mp_st(out, odt, e, grad ? mp_pad_grad_at(in, idt, xs, ys, before, mode, e)
                                : mp_pad_mode_at(in, idt, xs, ys, before, mode, e));
}

static inline void mp_k_pad_mode(void *y, int ydt, const void *x, int xdt, int64_t outer,
                                 const int64_t *xs, const int64_t *ys, const int64_t *before, int mode)
{
    mp_k_pad_each(y, ydt, x, xdt, outer, xs, ys, before, mode, 0);
}

static inline void mp_k_pad_grad(void *dx, int dxdt, const void *dy, int dydt, int64_t outer,
                                 const int64_t *xs, const int64_t *ys, const int64_t *before, int mode)
{
    mp_k_pad_each(dx, dxdt, dy, dydt, outer, xs, ys, before, mode, 1);
}

/* upsample: y [P, H sh, W sw] from x [P, H, W] (mp_upsample_at) */
static inline void mp_k_upsample(void *y, int ydt, const void *x, int xdt, int64_t P, int64_t H,
                                 int64_t W, int64_t sh, int64_t sw, int mode)
{
    int64_t ny = P * H * sh * W * sw;
    MP_OMP(parallel for if (ny > MP_PAR_MIN))
    for (int64_t e = 0; e < ny; e++)
        mp_st(y, ydt, e, mp_upsample_at(x, xdt, H, W, sh, sw, mode, e));
}

/* dx [P, H, W]: each input gathers the outputs that read it, in order */
static inline void mp_k_upsample_grad(void *dx, int dxdt, const void *dy, int dydt, int64_t P,
                                      int64_t H, int64_t W, int64_t sh, int64_t sw, int mode)
{
    int64_t nx = P * H * W;
    MP_OMP(parallel for if (nx * sh * sw > MP_PAR_MIN))
    for (int64_t e = 0; e < nx; e++)
        mp_st(dx, dxdt, e, mp_upsample_grad_at(dy, dydt, H, W, sh, sw, mode, e));
}

/* ---- group_norm ------------------------------------------------------------ */

/* x [N, C, S] in N G rows of C/G channels' S values each (contiguous): each
 * row normalised with its mean and biased variance (mp_moments), then the
 * channel's affine, ((x - mean) rstd) w[c] + b[c], as nn.GroupNorm. */
#define MP_GN_ROWS(N, C, S, G, NBUF, ...)                                       \
    int64_t cg = (C) / (G), len = cg * (S);                                    \
    MP_OMP(parallel if ((N) * (C) * (S) > MP_PAR_MIN))                          \
    {                                                                          \
        float *buf = (float *)mp_kalloc((size_t)(NBUF) * (size_t)len * sizeof(float)); \
        MP_OMP(for schedule(static))                                           \
        for (int64_t r = 0; r < (N) * (G); r++) {                              \
            int64_t c0 = r % (G) * cg;                                         \
            float mean, rstd;                                                  \
            mp_ld_n(x, xdt, r * len, 1, len, buf);                             \
            mp_moments(buf, len, eps, &mean, &rstd);                           \
            __VA_ARGS__;                                                       \
        }                                                                      \
        free(buf);                                                             \
    }

static inline void mp_k_group_norm(void *y, int ydt, const void *x, int xdt, const void *w, int wdt,
                                   const void *b, int bdt, int64_t N, int64_t C, int64_t S, int64_t G,
                                   float eps)
{
    MP_GN_ROWS(N, C, S, G, 1,
        for (int64_t j = 0; j < len; j++) {
            int64_t c = c0 + j / S;
            buf[j] = (buf[j] - mean) * rstd * (w ? mp_ld(w, wdt, c) : 1.0f) + (b ? mp_ld(b, bdt, c) : 0.0f);
        }
        mp_st_n(y, ydt, r * len, 1, len, buf))
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)) over the row, g = dy w[c] */
static inline void mp_k_group_norm_dx(void *dx, int dxdt, const void *dy, int dydt, const void *x,
                                      int xdt, const void *w, int wdt, int64_t N, int64_t C, int64_t S,
                                      int64_t G, float eps)
{
    MP_GN_ROWS(N, C, S, G, 2,
        float *g = buf + len;
        mp_ld_n(dy, dydt, r * len, 1, len, g);
        for (int64_t j = 0; j < len; j++) {
            buf[j] = (buf[j] - mean) * rstd;
            g[j] *= w ? mp_ld(w, wdt, c0 + j / S) : 1.0f;
        }
        mp_norm_dx_row(g, buf, len, rstd);
        mp_st_n(dx, dxdt, r * len, 1, len, g))
}

/* dw[C] = sum over N and S of dy xhat (+ beta dw): every row's statistics
 * first, then each channel's sum in double, images in order. */
static inline void mp_k_group_norm_dw(void *dw, int dwdt, const void *dy, int dydt, const void *x,
                                      int xdt, int64_t N, int64_t C, int64_t S, int64_t G, float eps,
                                      float beta)
{
    float *st = (float *)mp_kalloc((size_t)(2 * N * G + C) * sizeof *st), *out = st + 2 * N * G;
    {
        MP_GN_ROWS(N, C, S, G, 1, (void)c0; st[2 * r] = mean; st[2 * r + 1] = rstd)
    }
    MP_OMP(parallel if (N * C * S > MP_PAR_MIN))
    {
        float *v = (float *)mp_kalloc((size_t)(2 * S) * sizeof *v), *g = v + S;
        MP_OMP(for schedule(static))
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t n = 0; n < N; n++) {
                const float *m = st + 2 * (n * G + c / (C / G));
                mp_ld_n(x, xdt, (n * C + c) * S, 1, S, v);
                mp_ld_n(dy, dydt, (n * C + c) * S, 1, S, g);
                for (int64_t i = 0; i < S; i++) s += g[i] * ((v[i] - m[0]) * m[1]);
            }
            out[c] = (float)s;
        }
        free(v);
    }
    mp_st_beta(dw, dwdt, 0, C, out, beta);
    free(st);
}

#endif
