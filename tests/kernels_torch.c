/* kernels_torch.c - runs one runtime kernel on inputs written by
 * tests/kernels_torch.py and writes its outputs back, for comparison with
 * PyTorch. Built and driven by tests/t_kernels_torch.sh.
 *
 *   kernels_torch DIR OP INT...
 * reads DIR/in0.bin, DIR/in1.bin, ... (raw little-endian f32; labels and
 * ids as i32) and writes DIR/out0.bin, ... (f32, or u16 for the f16/bf16
 * conversions). The integers are the op's sizes; each op below lists them.
 * Exit status 2 on bad usage or a missing or wrong-sized file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mp_kernels.h"
#include "mp_kernels_gemm.h"
#include "mp_kernels_nn.h"

#define F32 MP_F32

static const char *dir;
static int64_t arg[16];

static void die(const char *what)
{
    fprintf(stderr, "kernels_torch: %s\n", what);
    exit(2);
}

/* in<i>.bin, which must hold exactly n elements of `size` bytes. */
static void *rd(int i, int64_t n, size_t size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/in%d.bin", dir, i);
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path);
    void *p = malloc((size_t)n * size + 1);
    if ((int64_t)fread(p, size, (size_t)n, f) != n || fgetc(f) != EOF)
        die("input of the wrong size");
    fclose(f);
    return p;
}

static float *rdf(int i, int64_t n) { return (float *)rd(i, n, 4); }
static int32_t *rdi(int i, int64_t n) { return (int32_t *)rd(i, n, 4); }

static void wr(int i, const void *p, int64_t n, size_t size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/out%d.bin", dir, i);
    FILE *f = fopen(path, "wb");
    if (!f || (int64_t)fwrite(p, size, (size_t)n, f) != n || fclose(f) != 0)
        die(path);
}

static void wrf(int i, const float *p, int64_t n) { wr(i, p, n, 4); }
static float *buf(int64_t n) { return (float *)calloc((size_t)(n > 0 ? n : 1), 4); }

/* f16 / bf16: N values -> out0 u16 bits, out1 the f32 they decode to */
static void op_half(int bf)
{
    int64_t n = arg[0];
    float *x = rdf(0, n), *back = buf(n);
    uint16_t *h = (uint16_t *)malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) {
        h[i] = bf ? mp_f32_to_bf16(x[i]) : mp_f32_to_f16(x[i]);
        back[i] = bf ? mp_bf16_to_f32(h[i]) : mp_f16_to_f32(h[i]);
    }
    wr(0, h, n, 2);
    wrf(1, back, n);
}

static void op_f16(void) { op_half(0); }
static void op_bf16(void) { op_half(1); }

/* tf32: N values -> out0 mp_round(x, MP_TF32) one at a time, out1 the
 * same in place by mp_round_n, out2 through the GEMM under float32_matmul
 * "tf32" (x as an [N, 1] by [1, 1] product with 1: the packed, rounded
 * operand itself) */
static void op_tf32(void)
{
    int64_t n = arg[0];
    float *x = rdf(0, n), *one = buf(1), *a = buf(n), *b = buf(n), *c = buf(n);
    for (int64_t i = 0; i < n; i++)
        a[i] = mp_round(x[i], MP_TF32);
    memcpy(b, x, (size_t)n * sizeof *x);
    mp_round_n(b, MP_TF32, n);
    one[0] = 1.0f;
    mp_gemm_tf32 = 1;
    mp_gemm(0, 0, n, 1, 1, 1.0f, x, F32, 1, one, F32, 1, 0.0f, c, F32, 1);
    mp_gemm_tf32 = 0;
    wrf(0, a, n); wrf(1, b, n); wrf(2, c, n);
}

/* linear_tf32 M N K: x [M, K], w [N, K], b [N] -> y = x w^T + b with
 * mp_gemm_tf32 set (operands rounded to TF32 while packing), then y
 * without it */
static void op_linear_tf32(void)
{
    int64_t M = arg[0], N = arg[1], K = arg[2];
    float *x = rdf(0, M * K), *w = rdf(1, N * K), *b = rdf(2, N), *y = buf(M * N), *y32 = buf(M * N);
    mp_gemm_tf32 = 1;
    mp_k_linear(y, F32, x, F32, w, F32, b, F32, M, N, K);
    mp_gemm_tf32 = 0;
    mp_k_linear(y32, F32, x, F32, w, F32, b, F32, M, N, K);
    wrf(0, y, M * N); wrf(1, y32, M * N);
}

/* f32 values as a new array of storage type dt (4 bytes per element is
 * enough for any type) */
static void *as_dt(const float *x, int64_t n, int dt)
{
    void *p = buf(n);
    mp_k_cast(p, dt, x, F32, n);
    return p;
}

/* Write n elements of type dt as f32. */
static void wr_dt(int i, const void *p, int dt, int64_t n)
{
    float *f = buf(n);
    mp_k_cast(f, F32, p, dt, n);
    wrf(i, f, n);
}

/* linear M N K DT: x, w, b, dy -> y, dx, dw, db, every tensor stored as DT
 * (1 f32, 2 f16, 3 bf16): forward and the three gradients autodiff makes. */
static void op_linear(void)
{
    int64_t M = arg[0], N = arg[1], K = arg[2];
    int dt = (int)arg[3];
    void *x = as_dt(rdf(0, M * K), M * K, dt), *w = as_dt(rdf(1, N * K), N * K, dt);
    void *b = as_dt(rdf(2, N), N, dt), *dy = as_dt(rdf(3, M * N), M * N, dt);
    float *y = buf(M * N), *dx = buf(M * K), *dw = buf(N * K), *db = buf(N);
    int64_t ysh[2] = {M, N}, bsh[1] = {N};
    mp_k_linear(y, dt, x, dt, w, dt, b, dt, M, N, K);
    mp_k_matmul(dx, dt, dy, dt, w, dt, 1, M, K, N, 0, 0, 0, 0);
    mp_k_matmul_tn(dw, dt, dy, dt, x, dt, M, N, K, 0.0f);
    mp_k_sum_to(db, dt, 1, bsh, dy, dt, 2, ysh, 0.0f);
    wr_dt(0, y, dt, M * N); wr_dt(1, dx, dt, M * K); wr_dt(2, dw, dt, N * K);
    wr_dt(3, db, dt, N);
}

/* conv2d N C H W F kh kw sh sw ph pw dh dw G OH OW: x, w, b, dy -> y, dx,
 * dw, db (ph, pw the padding before; OH, OW from torch, so "same" pads
 * after as it does) */
static void op_conv2d(void)
{
    int64_t N = arg[0], C = arg[1], H = arg[2], W = arg[3], F = arg[4], kh = arg[5], kw = arg[6];
    MpConv v = mp_conv_of(C, H, W, F, kh, kw, arg[7], arg[8], arg[9], arg[10], arg[11], arg[12],
                          arg[13], arg[14], arg[15]);
    int64_t nx = N * C * H * W, nw = F * C / v.G * kh * kw, ny = N * F * v.OH * v.OW;
    float *x = rdf(0, nx), *w = rdf(1, nw), *b = rdf(2, F), *dy = rdf(3, ny);
    float *y = buf(ny), *dx = buf(nx), *dw = buf(nw), *db = buf(F);
    mp_k_conv2d(y, F32, x, F32, w, F32, b, F32, N, v);
    mp_k_conv2d_dx(dx, F32, dy, F32, w, F32, N, v);
    mp_k_conv2d_dw(dw, F32, dy, F32, x, F32, N, v, 0.0f);
    mp_k_channel_sum(db, F32, dy, F32, N, F, v.OH * v.OW, 0.0f);
    wrf(0, y, ny); wrf(1, dx, nx); wrf(2, dw, nw); wrf(3, db, F);
}

/* pool N C H W k stride MAX pad INCL: x, dy -> y, dx */
static void op_pool(void)
{
    int64_t N = arg[0], C = arg[1], H = arg[2], W = arg[3], k = arg[4], s = arg[5], p = arg[7];
    int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
    int64_t nx = N * C * H * W, ny = N * C * OH * OW;
    float *x = rdf(0, nx), *dy = rdf(1, ny), *y = buf(ny), *dx = buf(nx);
    if (arg[6]) {
        mp_k_max_pool2d(y, F32, x, F32, N, C, H, W, k, s, p);
        mp_k_max_pool2d_grad(dx, F32, dy, F32, x, F32, N, C, H, W, k, s, p);
    } else {
        mp_k_avg_pool2d(y, F32, x, F32, N, C, H, W, k, s, p, (int)arg[8]);
        mp_k_avg_pool2d_grad(dx, F32, dy, F32, N, C, H, W, k, s, p, (int)arg[8]);
    }
    wrf(0, y, ny); wrf(1, dx, nx);
}

/* global_avg_pool N C S: x, dy -> y, dx */
static void op_gap(void)
{
    int64_t N = arg[0], C = arg[1], S = arg[2];
    float *x = rdf(0, N * C * S), *dy = rdf(1, N * C), *y = buf(N * C), *dx = buf(N * C * S);
    mp_k_global_avg_pool(y, F32, x, F32, N, C, S);
    mp_k_global_avg_pool_grad(dx, F32, dy, F32, N, C, S);
    wrf(0, y, N * C); wrf(1, dx, N * C * S);
}

/* layer_norm R D: x, w, b, dy -> y, dx, dw, db */
static void op_layer_norm(void)
{
    int64_t R = arg[0], D = arg[1];
    float *x = rdf(0, R * D), *w = rdf(1, D), *b = rdf(2, D), *dy = rdf(3, R * D);
    float *y = buf(R * D), *dx = buf(R * D), *dw = buf(D), *db = buf(D);
    int64_t ysh[2] = {R, D}, bsh[1] = {D};
    mp_k_layer_norm(y, F32, x, F32, w, F32, b, F32, R, D, 1e-5f);
    mp_k_layer_norm_dx(dx, F32, dy, F32, x, F32, w, F32, R, D, 1e-5f);
    mp_k_layer_norm_dw(dw, F32, dy, F32, x, F32, R, D, 1e-5f, 0.0f);
    mp_k_sum_to(db, F32, 1, bsh, dy, F32, 2, ysh, 0.0f);
    wrf(0, y, R * D); wrf(1, dx, R * D); wrf(2, dw, D); wrf(3, db, D);
}

/* batch_norm N C S: x, w, b, dy, rmean, rvar -> y, dx, dw, db, rmean,
 * rvar (after one training step), y_eval (with the updated statistics) */
static void op_batch_norm(void)
{
    int64_t N = arg[0], C = arg[1], S = arg[2], n = N * C * S;
    float *x = rdf(0, n), *w = rdf(1, C), *b = rdf(2, C), *dy = rdf(3, n);
    float *rm = rdf(4, C), *rv = rdf(5, C);
    float *y = buf(n), *dx = buf(n), *dw = buf(C), *db = buf(C), *ye = buf(n);
    mp_k_batch_norm(y, F32, x, F32, w, F32, b, F32, rm, rv, N, C, S, 0.1f, 1e-5f, 1);
    mp_k_batch_norm_dx(dx, F32, dy, F32, x, F32, w, F32, N, C, S, 1e-5f);
    mp_k_batch_norm_dw(dw, F32, dy, F32, x, F32, N, C, S, 1e-5f, 0.0f);
    mp_k_channel_sum(db, F32, dy, F32, N, C, S, 0.0f);
    mp_k_batch_norm(ye, F32, x, F32, w, F32, b, F32, rm, rv, N, C, S, 0.1f, 1e-5f, 0);
    wrf(0, y, n); wrf(1, dx, n); wrf(2, dw, C); wrf(3, db, C);
    wrf(4, rm, C); wrf(5, rv, C); wrf(6, ye, n);
}

/* softmax OUTER LEN INNER LOG: x, dy -> y, dx */
static void op_softmax(void)
{
    int64_t o = arg[0], l = arg[1], in = arg[2], n = o * l * in;
    float *x = rdf(0, n), *dy = rdf(1, n), *y = buf(n), *dx = buf(n);
    if (arg[3]) {
        mp_k_log_softmax(y, F32, x, F32, o, l, in);
        mp_k_log_softmax_grad(dx, F32, dy, F32, y, F32, o, l, in);
    } else {
        mp_k_softmax(y, F32, x, F32, o, l, in);
        mp_k_softmax_grad(dx, F32, dy, F32, y, F32, o, l, in);
    }
    wrf(0, y, n); wrf(1, dx, n);
}

/* cross_entropy R C: logits, labels (i32), dl [1] -> loss, dx, accuracy */
static void op_cross_entropy(void)
{
    int64_t R = arg[0], C = arg[1];
    float *x = rdf(0, R * C), *dl = rdf(2, 1), loss, acc, *dx = buf(R * C);
    int32_t *lab = rdi(1, R);
    mp_k_cross_entropy(&loss, F32, x, F32, lab, MP_I32, R, C, MP_NO_IGNORE, 0.0f);
    mp_k_cross_entropy_grad(dx, F32, dl, F32, x, F32, lab, MP_I32, R, C, MP_NO_IGNORE, 0.0f);
    mp_k_accuracy(&acc, F32, x, F32, lab, MP_I32, R, C);
    wrf(0, &loss, 1); wrf(1, dx, R * C); wrf(2, &acc, 1);
}

/* mse N: pred, target, dl [1] -> loss, dpred */
static void op_mse(void)
{
    int64_t n = arg[0];
    float *p = rdf(0, n), *t = rdf(1, n), *dl = rdf(2, 1), loss, *dx = buf(n);
    mp_k_mse(&loss, F32, p, F32, t, F32, n);
    mp_k_mse_grad(dx, F32, dl, F32, p, F32, t, F32, n);
    wrf(0, &loss, 1); wrf(1, dx, n);
}

/* activations N: x, dy -> for gelu, silu, sigmoid, tanh: y, dx (8 files) */
static void op_activations(void)
{
    int64_t n = arg[0];
    float *x = rdf(0, n), *dy = rdf(1, n), *y = buf(n), *dx = buf(n);
    mp_k_gelu(y, F32, x, F32, n);
    mp_k_gelu_grad(dx, F32, dy, F32, x, F32, n);
    wrf(0, y, n); wrf(1, dx, n);
    mp_k_silu(y, F32, x, F32, n);
    mp_k_silu_grad(dx, F32, dy, F32, x, F32, n);
    wrf(2, y, n); wrf(3, dx, n);
    mp_k_sigmoid(y, F32, x, F32, n);
    mp_k_sigmoid_grad(dx, F32, dy, F32, y, F32, n);
    wrf(4, y, n); wrf(5, dx, n);
    mp_k_tanh(y, F32, x, F32, n);
    mp_k_tanh_grad(dx, F32, dy, F32, y, F32, n);
    wrf(6, y, n); wrf(7, dx, n);
}

/* attention with options o (NULL: none): y, then dq, dk, dv out of the
 * one gradient kernel's [BH, T + 2TK, D] taken apart per head */
static void attention(int64_t BH, int64_t T, int64_t Tk, int64_t D, int c, const MpAttnOpt *o)
{
    int64_t n = BH * T * D, nk = BH * Tk * D;
    float *q = rdf(0, n), *k = rdf(1, nk), *v = rdf(2, nk), *dy = rdf(3, n);
    float *y = buf(n), *g = buf(n + 2 * nk), *d[3] = {buf(n), buf(nk), buf(nk)};
    if (o) {
        mp_k_attention_opt(y, F32, q, F32, k, F32, v, F32, BH, T, Tk, D, c, F32, o);
        mp_k_attention_grad_opt(g, F32, dy, F32, q, F32, k, F32, v, F32, BH, T, Tk, D, c, F32, o);
    } else {
        mp_k_attention(y, F32, q, F32, k, F32, v, F32, BH, T, Tk, D, c, F32);
        mp_k_attention_grad(g, F32, dy, F32, q, F32, k, F32, v, F32, BH, T, Tk, D, c, F32);
    }
    const int64_t len[3] = {T * D, Tk * D, Tk * D};
    for (int64_t h = 0, at = 0; h < BH; h++)
        for (int i = 0; i < 3; at += len[i++])
            memcpy(d[i] + h * len[i], g + at, (size_t)len[i] * sizeof *g);
    wrf(0, y, n); wrf(1, d[0], n); wrf(2, d[1], nk); wrf(3, d[2], nk);
}

/* attention BH T TK D CAUSAL: q [BH,T,D], k, v [BH,TK,D], dy -> y, dq, dk, dv */
static void op_attention(void) { attention(arg[0], arg[1], arg[2], arg[3], (int)arg[4], NULL); }

/* attention_opt B H T TK D CAUSAL U8 MB MH MT MK: attention with the mask
 * in4 [MB, MH, MT, MK] (each 1 or the full size; f32 0/1 values stored as
 * u8 when U8, else added to the scores) and the scale in5 [1] */
static void op_attention_opt(void)
{
    int64_t B = arg[0], H = arg[1], T = arg[2], Tk = arg[3], D = arg[4], m = 1, st[4], step = 1;
    for (int i = 3; i >= 0; i--) {
        st[i] = arg[7 + i] == 1 ? 0 : step;
        step *= arg[7 + i];
    }
    m = step;
    float *mf = rdf(4, m), *scale = rdf(5, 1);
    uint8_t *mu = (uint8_t *)malloc((size_t)m);
    for (int64_t i = 0; i < m; i++) mu[i] = mf[i] != 0.0f;
    MpAttnOpt o = {1, scale[0], arg[6] ? (const void *)mu : mf, arg[6] ? MP_U8 : MP_F32, H,
                   {st[0], st[1], st[2], st[3]}};
    attention(B * H, T, Tk, D, (int)arg[5], &o);
}

/* attention_drop B H T TK D CAUSAL P1E6 SEED STEP MICRO NODE: attention
 * with dropout p = P1E6 / 1e6 (the mask bits of (SEED, STEP, MICRO, NODE),
 * which tests/kernels_torch.py draws with tests/py/rng.py) */
static void op_attention_drop(void)
{
    MpAttnOpt o = {0};
    o.H = arg[1];
    o.drop = (float)arg[6] / 1e6f;
    o.seed = (uint64_t)arg[7];
    o.step = arg[8], o.micro = arg[9], o.node = arg[10];
    attention(arg[0] * arg[1], arg[2], arg[3], arg[4], (int)arg[5], &o);
}

/* embedding N V D: ids (i32), w, dy -> y, dw */
static void op_embedding(void)
{
    int64_t n = arg[0], V = arg[1], D = arg[2];
    int32_t *ids = rdi(0, n);
    float *w = rdf(1, V * D), *dy = rdf(2, n * D), *y = buf(n * D), *dw = buf(V * D);
    mp_k_embedding(y, F32, ids, MP_I32, w, F32, n, V, D);
    mp_k_embedding_dw(dw, F32, dy, F32, ids, MP_I32, n, V, D);
    wrf(0, y, n * D); wrf(1, dw, V * D);
}

/* ---- elementwise, norm, rope and loss additions ------------------------------ */

/* y, dx of a unary kernel pair into out[k], out[k+1] */
#define UNARY_PAIR(k, NAME, x, dy, n)                                          \
    do {                                                                       \
        float *y_ = buf(n), *dx_ = buf(n);                                     \
        mp_k_##NAME(y_, F32, x, F32, n);                                       \
        mp_k_##NAME##_grad(dx_, F32, dy, F32, x, F32, n);                      \
        wrf(k, y_, n); wrf(k + 1, dx_, n);                                     \
    } while (0)

/* maximum (max != 0) or minimum of a, b [N] -> out[k] y, out[k+1] da, out[k+2] db */
static void extremum(int k, int max, const float *a, const float *b, const float *dy, int64_t n)
{
    float *y = buf(n), *ma = buf(n), *mb = buf(n), *da = buf(n), *db = buf(n);
    int64_t sh[1] = {n};
    (max ? mp_k_maximum : mp_k_minimum)(y, F32, 1, sh, a, F32, 1, sh, b, F32, 1, sh);
    mp_k_maximum_mask(ma, F32, 1, sh, max ? a : b, F32, 1, sh, max ? b : a, F32, 1, sh);
    mp_k_maximum_mask(mb, F32, 1, sh, max ? b : a, F32, 1, sh, max ? a : b, F32, 1, sh);
    mp_k_mul(da, F32, 1, sh, dy, F32, 1, sh, ma, F32, 1, sh);
    mp_k_mul(db, F32, 1, sh, dy, F32, 1, sh, mb, F32, 1, sh);
    wrf(k, y, n); wrf(k + 1, da, n); wrf(k + 2, db, n);
}

/* elementwise2 N: x, b, dy, xp (> 0) -> abs, sin, cos, gelu_tanh (y, dx),
 * maximum, minimum (y, dx, db), clamp(-0.5, 0.75), pow(xp, 2.5), pow(x, 3)
 * (y, dx): 20 files */
static void op_elementwise2(void)
{
    int64_t n = arg[0];
    float *x = rdf(0, n), *b = rdf(1, n), *dy = rdf(2, n), *xp = rdf(3, n);
    float *y = buf(n), *dx = buf(n);
    UNARY_PAIR(0, abs, x, dy, n);
    UNARY_PAIR(2, sin, x, dy, n);
    UNARY_PAIR(4, cos, x, dy, n);
    UNARY_PAIR(6, gelu_tanh, x, dy, n);
    extremum(8, 1, x, b, dy, n);
    extremum(11, 0, x, b, dy, n);
    mp_k_clamp(y, F32, x, F32, n, -0.5f, 0.75f);
    mp_k_clamp_grad(dx, F32, dy, F32, x, F32, n, -0.5f, 0.75f);
    wrf(14, y, n); wrf(15, dx, n);
    mp_k_pow(y, F32, xp, F32, n, 2.5f);
    mp_k_pow_grad(dx, F32, dy, F32, xp, F32, n, 2.5f);
    wrf(16, y, n); wrf(17, dx, n);
    mp_k_pow(y, F32, x, F32, n, 3.0f);
    mp_k_pow_grad(dx, F32, dy, F32, x, F32, n, 3.0f);
    wrf(18, y, n); wrf(19, dx, n);
}

/* rms_norm R D: x, w, dy -> y, dx, dw; then layer_norm without a bias:
 * y, dx (eps 1e-5) */
static void op_rms_norm(void)
{
    int64_t R = arg[0], D = arg[1];
    float *x = rdf(0, R * D), *w = rdf(1, D), *dy = rdf(2, R * D);
    float *y = buf(R * D), *dx = buf(R * D), *dw = buf(D);
    mp_k_rms_norm(y, F32, x, F32, w, F32, R, D, 1e-5f);
    mp_k_rms_norm_dx(dx, F32, dy, F32, x, F32, w, F32, R, D, 1e-5f);
    mp_k_rms_norm_dw(dw, F32, dy, F32, x, F32, R, D, 1e-5f, 0.0f);
    wrf(0, y, R * D); wrf(1, dx, R * D); wrf(2, dw, D);
    mp_k_layer_norm(y, F32, x, F32, w, F32, NULL, F32, R, D, 1e-5f);
    mp_k_layer_norm_dx(dx, F32, dy, F32, x, F32, w, F32, R, D, 1e-5f);
    wrf(3, y, R * D); wrf(4, dx, R * D);
}

/* rope B T H D HALF THETA: x [B, T, H, D] (positions along T), dy -> y, dx */
static void op_rope(void)
{
    int64_t B = arg[0], T = arg[1], H = arg[2], D = arg[3], n = B * T * H * D;
    float *x = rdf(0, n), *dy = rdf(1, n), *y = buf(n), *dx = buf(n);
    mp_k_rope(y, F32, x, F32, B, T, H * D, D, (float)arg[5], (int)arg[4], 1.0f);
    mp_k_rope(dx, F32, dy, F32, B, T, H * D, D, (float)arg[5], (int)arg[4], -1.0f);
    wrf(0, y, n); wrf(1, dx, n);
}

/* cross_entropy2 R C HAS_IGNORE IGNORE U8: logits, labels (i32; stored as u8
 * when U8), dl [1], eps [1] -> loss, dx, accuracy */
static void op_cross_entropy2(void)
{
    int64_t R = arg[0], C = arg[1], ignore = arg[2] ? arg[3] : MP_NO_IGNORE;
    float *x = rdf(0, R * C), *dl = rdf(2, 1), *eps = rdf(3, 1), loss, acc, *dx = buf(R * C);
    int32_t *lab = rdi(1, R);
    uint8_t *lab8 = (uint8_t *)malloc((size_t)R);
    for (int64_t r = 0; r < R; r++)
        lab8[r] = (uint8_t)lab[r];
    const void *l = arg[4] ? (const void *)lab8 : (const void *)lab;
    int ldt = arg[4] ? MP_U8 : MP_I32;
    mp_k_cross_entropy(&loss, F32, x, F32, l, ldt, R, C, ignore, eps[0]);
    mp_k_cross_entropy_grad(dx, F32, dl, F32, x, F32, l, ldt, R, C, ignore, eps[0]);
    mp_k_accuracy(&acc, F32, x, F32, l, ldt, R, C);
    wrf(0, &loss, 1); wrf(1, dx, R * C); wrf(2, &acc, 1);
}

/* select R C: a [R, C], b [C], dy [R, C], c [R, 1] -> the six comparisons
 * of a with b (u8 masks, as floats), y = where(c > 0, a, b), da, db (the
 * b side summed back to [C]): 9 files */
static void op_select(void)
{
    int64_t R = arg[0], C = arg[1], n = R * C;
    float *a = rdf(0, n), *b = rdf(1, C), *dy = rdf(2, n), *c = rdf(3, R), zero = 0.0f;
    int64_t ysh[2] = {R, C}, bsh[1] = {C}, csh[2] = {R, 1};
    uint8_t *m = malloc((size_t)n), *mc = malloc((size_t)R);
    float *y = buf(n), *da = buf(n), *db = buf(n), *dbs = buf(C);
    void (*const cmp[6])(void *, int, int, const int64_t *, const void *, int, int, const int64_t *,
                         const void *, int, int, const int64_t *) = {
        mp_k_gt, mp_k_lt, mp_k_ge, mp_k_le, mp_k_eq, mp_k_ne};
    for (int k = 0; k < 6; k++) {
        cmp[k](m, MP_U8, 2, ysh, a, F32, 2, ysh, b, F32, 1, bsh);
        for (int64_t i = 0; i < n; i++)
            y[i] = m[i];
        wrf(k, y, n);
    }
    mp_k_gt(mc, MP_U8, 2, csh, c, F32, 2, csh, &zero, F32, 0, bsh);
    mp_k_where(y, F32, 2, ysh, mc, MP_U8, 2, csh, a, F32, 2, ysh, b, F32, 1, bsh);
    mp_k_where_da(da, F32, 2, ysh, dy, F32, 2, ysh, mc, MP_U8, 2, csh);
    mp_k_where_db(db, F32, 2, ysh, dy, F32, 2, ysh, mc, MP_U8, 2, csh);
    mp_k_sum_to(dbs, F32, 1, bsh, db, F32, 2, ysh, 0.0f);
    wrf(6, y, n); wrf(7, da, n); wrf(8, dbs, C);
    free(m);
    free(mc);
}

/* extremum O L I: x [O, L, I], dy [O, I] -> max, argmax, dx of max, min,
 * argmin, dx of min over L (positions as floats): 6 files */
static void op_extremum(void)
{
    int64_t O = arg[0], L = arg[1], I = arg[2], n = O * L * I, m = O * I;
    float *x = rdf(0, n), *dy = rdf(1, m), *y = buf(m), *at = buf(m), *dx = buf(n);
    int32_t *idx = malloc((size_t)m * sizeof *idx);
    for (int s = 1, k = 0; s >= -1; s -= 2, k += 3) {
        mp_k_extremum(y, F32, x, F32, O, L, I, s, 0);
        mp_k_extremum(idx, MP_I32, x, F32, O, L, I, s, 1);
        mp_k_extremum_grad(dx, F32, dy, F32, x, F32, O, L, I, s);
        for (int64_t j = 0; j < m; j++)
            at[j] = (float)idx[j];
        wrf(k, y, m); wrf(k + 1, at, m); wrf(k + 2, dx, n);
    }
    free(idx);
}

/* route O L I K G J: x [O, L, I], dy [O, K, I], ids i32 [O, I], index i32
 * [O, G, J] (J <= I), dz [O, G, J] -> topk positions over L (as floats), its
 * values (gather of x at them), their dx (gather_grad), cumsum over L,
 * reverse cumsum, one_hot(ids, L), gather(x, 1, index) and its dx: 8 files */
static void op_route(void)
{
    int64_t O = arg[0], L = arg[1], I = arg[2], K = arg[3], G = arg[4], J = arg[5];
    int64_t n = O * L * I, nk = O * K * I, ng = O * G * J;
    float *x = rdf(0, n), *dy = rdf(1, nk), *dz = rdf(4, ng);
    int32_t *ids = rdi(2, O * I), *gi = rdi(3, ng), *at = malloc((size_t)nk * sizeof *at);
    float *pos = buf(nk), *v = buf(nk), *dx = buf(n), *cs = buf(n), *oh = buf(O * I * L), *g = buf(ng);
    int64_t xsh[3] = {O, L, I}, ksh[3] = {O, K, I}, gsh[3] = {O, G, J};
    mp_k_topk(at, x, F32, O, L, I, K);
    for (int64_t j = 0; j < nk; j++)
        pos[j] = (float)at[j];
    mp_k_gather(v, F32, x, F32, at, MP_I32, 3, xsh, ksh, 1);
    mp_k_gather_grad(dx, F32, dy, F32, at, MP_I32, 3, xsh, ksh, 1);
    wrf(0, pos, nk); wrf(1, v, nk); wrf(2, dx, n);
    mp_k_cumsum(cs, F32, x, F32, O, L, I, 0);
    wrf(3, cs, n);
    mp_k_cumsum(cs, F32, x, F32, O, L, I, 1);
    wrf(4, cs, n);
    mp_k_one_hot(oh, F32, ids, MP_I32, O * I, L);
    wrf(5, oh, O * I * L);
    mp_k_gather(g, F32, x, F32, gi, MP_I32, 3, xsh, gsh, 1);
    mp_k_gather_grad(dx, F32, dz, F32, gi, MP_I32, 3, xsh, gsh, 1);
    wrf(6, g, ng); wrf(7, dx, n);
    free(at);
}

/* rnn B T I H LSTM BIAS: x [B, T, I], w_ih [G, I], w_hh [G, H], b_ih, b_hh [G] (G =
 * 3H or 4H), dout [B, T, H], dh [B, H], dc [B, H] -> out, h_n, c_n, dx, dw_ih, dw_hh,
 * db_ih, db_hh: the linear of all steps, the recurrence, its gradient from d out and
 * d of the final states (put into the state's gradient at the last step), then
 * the linear's gradients, as the compiled program chains them */
static void op_rnn(void)
{
    int64_t B = arg[0], T = arg[1], I = arg[2], H = arg[3], lstm = arg[4], bias = arg[5];
    int64_t G = (lstm ? 4 : 3) * H, W = (lstm ? 6 : 5) * H, R = B * T;
    float *x = rdf(0, R * I), *wih = rdf(1, G * I), *whh = rdf(2, G * H), *bih = rdf(3, G);
    float *bhh = rdf(4, G), *dout = rdf(5, R * H), *dh = rdf(6, B * H), *dc = rdf(7, B * H);
    float *gi = buf(R * G), *st = buf(R * W), *ds = buf(R * W), *g = buf(R * G + G * H + G);
    float *out = buf(R * H), *hn = buf(B * H), *cn = buf(B * H), *dx = buf(R * I), *dwih = buf(G * I);
    float *dbih = buf(G);
    mp_k_linear(gi, F32, x, F32, wih, F32, bias ? bih : NULL, F32, R, G, I);
    (lstm ? mp_k_lstm : mp_k_gru)(st, F32, gi, F32, whh, F32, bias ? bhh : NULL, F32, B, T, H);
    memset(ds, 0, (size_t)(R * W) * sizeof *ds);
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < H; j++) {
            out[r * H + j] = st[r * W + j];
            ds[r * W + j] = dout[r * H + j];
        }
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < H; j++) {
            int64_t last = (b * T + T - 1) * W + j;
            hn[b * H + j] = st[last];
            cn[b * H + j] = lstm ? st[last + H] : 0.0f;
            ds[last] += dh[b * H + j];
            if (lstm)
                ds[last + H] += dc[b * H + j];
        }
    (lstm ? mp_k_lstm_grad : mp_k_gru_grad)(g, F32, ds, F32, st, F32, whh, F32, B, T, H);
    mp_gemm(0, 0, R, I, G, 1.0f, g, F32, G, wih, F32, I, 0.0f, dx, F32, I);
    mp_k_matmul_tn(dwih, F32, g, F32, x, F32, R, G, I, 0.0f);
    for (int64_t j = 0; j < G; j++) {
        double sum = 0;
        for (int64_t r = 0; r < R; r++)
            sum += g[r * G + j];
        dbih[j] = (float)sum;
    }
    wrf(0, out, R * H); wrf(1, hn, B * H); wrf(2, cn, B * H); wrf(3, dx, R * I);
    wrf(4, dwih, G * I); wrf(5, g + R * G, G * H); wrf(6, dbih, G); wrf(7, g + R * G + G * H, G);
}

/* conv_transpose2d N Cin H W Cout kh kw sh sw ph pw oph opw G OH OW: x, w,
 * b, dy -> y, dx, dw, db (OH, OW: y's size, from torch); the kernels as
 * the generated program calls them: the adjoint conv2d v from y to x */
static void op_conv_transpose2d(void)
{
    int64_t N = arg[0], C = arg[1], H = arg[2], W = arg[3], F = arg[4], kh = arg[5], kw = arg[6];
    int64_t G = arg[13], OH = arg[14], OW = arg[15];
    MpConv v = mp_conv_of(F, OH, OW, C, kh, kw, arg[7], arg[8], arg[9], arg[10], 1, 1, G, H, W);
    int64_t nx = N * C * H * W, nw = C * F / G * kh * kw, ny = N * F * OH * OW;
    float *x = rdf(0, nx), *w = rdf(1, nw), *b = rdf(2, F), *dy = rdf(3, ny);
    float *y = buf(ny), *dx = buf(nx), *dw = buf(nw), *db = buf(F);
    mp_k_conv_transpose2d(y, F32, x, F32, w, F32, b, F32, N, v);
    mp_k_conv2d(dx, F32, dy, F32, w, F32, NULL, F32, N, v);
    mp_k_conv2d_dw(dw, F32, x, F32, dy, F32, N, v, 0.0f);
    mp_k_channel_sum(db, F32, dy, F32, N, F, OH * OW, 0.0f);
    wrf(0, y, ny); wrf(1, dx, nx); wrf(2, dw, nw); wrf(3, db, F);
}

/* pad outer xs[4] ys[4] before[4] 4value mode: x, dy -> y, dx (dx: the pad of dy
 * by the negated list, as autodiff makes it; in the other modes MP_PAD_*:
 * mp_k_pad_mode and mp_k_pad_grad) */
static void op_pad(void)
{
    int64_t outer = arg[0], *xs = arg + 1, *ys = arg + 5, *before = arg + 9, nx = outer, ny = outer;
    int64_t back[4];
    for (int k = 0; k < 4; k++) {
        nx *= xs[k];
        ny *= ys[k];
        back[k] = -before[k];
    }
    float *x = rdf(0, nx), *dy = rdf(1, ny), *y = buf(ny), *dx = buf(nx);
    if (arg[14]) {            /* reflect, replicate, circular */
        mp_k_pad_mode(y, F32, x, F32, outer, xs, ys, before, (int)arg[14]);
        mp_k_pad_grad(dx, F32, dy, F32, outer, xs, ys, before, (int)arg[14]);
    } else {
        mp_k_pad(y, F32, x, F32, outer, xs, ys, before, (float)arg[13] / 4);
        mp_k_pad(dx, F32, dy, F32, outer, ys, xs, back, 0.0f);
    }
    wrf(0, y, ny); wrf(1, dx, nx);
}

/* upsample P H W sh sw mode: x, dy -> y, dx */
static void op_upsample(void)
{
    int64_t P = arg[0], H = arg[1], W = arg[2], sh = arg[3], sw = arg[4], nx = P * H * W;
    int64_t ny = nx * sh * sw;
    float *x = rdf(0, nx), *dy = rdf(1, ny), *y = buf(ny), *dx = buf(nx);
    mp_k_upsample(y, F32, x, F32, P, H, W, sh, sw, (int)arg[5]);
    mp_k_upsample_grad(dx, F32, dy, F32, P, H, W, sh, sw, (int)arg[5]);
    wrf(0, y, ny); wrf(1, dx, nx);
}

/* group_norm N C S G: x, w, b, dy -> y, dx, dw, db (eps 1e-5) */
static void op_group_norm(void)
{
    int64_t N = arg[0], C = arg[1], S = arg[2], G = arg[3], n = N * C * S;
    float *x = rdf(0, n), *w = rdf(1, C), *b = rdf(2, C), *dy = rdf(3, n);
    float *y = buf(n), *dx = buf(n), *dw = buf(C), *db = buf(C);
    mp_k_group_norm(y, F32, x, F32, w, F32, b, F32, N, C, S, G, 1e-5f);
    mp_k_group_norm_dx(dx, F32, dy, F32, x, F32, w, F32, N, C, S, G, 1e-5f);
    mp_k_group_norm_dw(dw, F32, dy, F32, x, F32, N, C, S, G, 1e-5f, 0.0f);
    mp_k_channel_sum(db, F32, dy, F32, N, C, S, 0.0f);
    wrf(0, y, n); wrf(1, dx, n); wrf(2, dw, C); wrf(3, db, C);
}

static const struct {
    const char *name;
    void (*run)(void);
    int nargs;
} ops[] = {
    {"f16", op_f16, 1}, {"bf16", op_bf16, 1}, {"linear", op_linear, 4},
    {"conv2d", op_conv2d, 16}, {"pool", op_pool, 9}, {"gap", op_gap, 3},
    {"layer_norm", op_layer_norm, 2}, {"batch_norm", op_batch_norm, 3},
    {"softmax", op_softmax, 4}, {"cross_entropy", op_cross_entropy, 2},
    {"mse", op_mse, 1}, {"activations", op_activations, 1},
    {"attention", op_attention, 5}, {"attention_opt", op_attention_opt, 11},
    {"attention_drop", op_attention_drop, 11},
    {"embedding", op_embedding, 3},
    {"elementwise2", op_elementwise2, 1}, {"rms_norm", op_rms_norm, 2}, {"rope", op_rope, 6},
    {"cross_entropy2", op_cross_entropy2, 5}, {"select", op_select, 2},
    {"extremum", op_extremum, 3},
    {"route", op_route, 6},
    {"rnn", op_rnn, 6},
    {"conv_transpose2d", op_conv_transpose2d, 16}, {"pad", op_pad, 15},
    {"upsample", op_upsample, 6}, {"group_norm", op_group_norm, 4},
    {"tf32", op_tf32, 1}, {"linear_tf32", op_linear_tf32, 3},
};

int main(int argc, char **argv)
{
    if (argc < 3)
        die("usage: kernels_torch DIR OP INT...");
    dir = argv[1];
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        if (strcmp(argv[2], ops[i].name) != 0)
            continue;
        if (argc - 3 != ops[i].nargs)
            die("wrong number of sizes");
        for (int a = 0; a < ops[i].nargs; a++)
            arg[a] = strtoll(argv[3 + a], NULL, 10);
        ops[i].run();
        return 0;
    }
    die("unknown op");
}
