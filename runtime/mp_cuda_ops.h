/* mp_cuda_ops.h - the ops of the CUDA program: one launcher mp_cu_<op> per
 * kernel call the generated code makes (one per IR node, as mp_k_<op> in
 * the C program, same argument order), with the storage types of its
 * tensors as template arguments so that each kernel is compiled for exactly
 * the types it is used with.
 *
 *   mp_cu_<unary><Y, X>(y, x, n)            cast neg relu gelu tanh sigmoid
 *                                           silu exp log sqrt rsqrt
 *   mp_cu_<unary>_grad<DX, DY, V>(dx, dy, v, n)
 *   mp_cu_dropout<Y, X>(y, x, n, p, seed, hdr, micro, node)  (+ _grad)
 *   mp_cu_randn<Y>, mp_cu_rand<Y>(y, n, seed, hdr, micro, node)
 *   mp_cu_{add,sub,mul,div}<Y, A, B>(y, ysh, a, ash, b, bsh)  broadcasting
 *   mp_cu_transpose<Y, X>(y, x, xsh, perm)
 *   mp_cu_slice, place, broadcast<Y, X>; arange<Y>   chunk slice concat
 *                                           expand arange, slice_grad
 *   mp_cu_{sum,mean}<Y, X>(y, x, outer, len, inner); expand; sum_to;
 *   channel_sum; softmax, log_softmax and their gradients
 *   mp_cu_cross_entropy, _grad, mse, _grad, accuracy
 *   mp_cu_matmul, matmul_tn, linear                  (cuBLAS)
 *   mp_cu_conv2d, _dx, _dw          (im2col + cuBLAS per group; depthwise direct)
 *   mp_cu_conv_transpose2d          (conv2d_dx's product + col2im, + bias)
 *   mp_cu_pad (+ _mode, _grad), upsample, upsample_grad, group_norm (+ _dx, _dw)   (at the end)
 *   pools, global_avg_pool, embedding, layer_norm, batch_norm, attention
 *   additions (at the end): abs sin cos gelu_tanh (+ _grad), maximum,
 *   minimum, maximum_mask, clamp, pow (+ _grad), rms_norm (+ _dx, _dw),
 *   rope; gt lt ge le eq ne (u8 masks), where (+ _da, _db), fill (zeros,
 *   ones, full); labels and ids of any integer type come with their type (ldt)
 * Shapes that the C program passes as arrays come as MpCuDims values.
 *
 * Each launcher builds a functor (the work of one item: an element, a row,
 * a channel; the per-item functions of mp_cuda_items.h) and runs it with
 * one of mp_cuda.h's kernel shapes. Nothing uses atomics: every sum is made
 * in a fixed order, so a step is deterministic. A scalar result (a loss) is
 * made by a second, one-row kernel from per-row parts in the workspace. */
#ifndef MP_CUDA_OPS_H
#define MP_CUDA_OPS_H

#include "mp_cuda.h"
#include "mp_cuda_flash.h"   /* attention's forward on Tensor Cores */
#include "mp_kernels_nn.h"   /* MpAttnOpt: attention's options, as the C program reads them */

typedef struct MpCuDims {
    int rank;
    int64_t d[MP_MAX_RANK];
} MpCuDims;

/* ---- elementwise ------------------------------------------------------------ */

template <int YT, int XT, class F>
struct MpCuMap1 {
    void *y;
    const void *x;
    F f;
    MP_HD void operator()(int64_t i) const { mp_cu_st(y, YT, i, f(mp_cu_ld(x, XT, i))); }
};

template <int YT, int AT, int BT, class F>
struct MpCuMap2 {
    void *y;
    const void *a, *b;
    F f;
    MP_HD void operator()(int64_t i) const
    {
        mp_cu_st(y, YT, i, f(mp_cu_ld(a, AT, i), mp_cu_ld(b, BT, i)));
    }
};

#define MP_CU_UNARY(NAME, EXPR)                                                \
    struct MpCuF_##NAME {                                                      \
        MP_HD float operator()(float a) const { return (EXPR); }               \
    };                                                                         \
    template <int YT, int XT>                                                  \
    static inline void mp_cu_##NAME(void *y, const void *x, int64_t n)         \
    {                                                                          \
        MpCuMap1<YT, XT, MpCuF_##NAME> f = {y, x, MpCuF_##NAME()};             \
        mp_cu_each(#NAME, n, f);                                               \
    }

#define MP_CU_GRAD(NAME, FN)                                                   \
    struct MpCuF_##NAME {                                                      \
        MP_HD float operator()(float g, float v) const { return FN(g, v); }    \
    };                                                                         \
    template <int DXT, int DYT, int VT>                                        \
    static inline void mp_cu_##NAME(void *dx, const void *dy, const void *v, int64_t n) \
    {                                                                          \
        MpCuMap2<DXT, DYT, VT, MpCuF_##NAME> f = {dx, dy, v, MpCuF_##NAME()};  \
        mp_cu_each(#NAME, n, f);                                               \
    }

MP_CU_UNARY(cast, a)
MP_CU_UNARY(neg, -a)
MP_CU_UNARY(relu, mp_relu(a))
MP_CU_UNARY(gelu, mp_gelu(a))
MP_CU_UNARY(tanh, mp_tanhf_p(a))
MP_CU_UNARY(sigmoid, mp_sigmoid(a))
MP_CU_UNARY(silu, mp_silu(a))
MP_CU_UNARY(exp, mp_expf_p(a))
MP_CU_UNARY(log, logf(a))
MP_CU_UNARY(sqrt, sqrtf(a))
MP_CU_UNARY(rsqrt, mp_rsqrt(a))

MP_CU_GRAD(relu_grad, mp_relu_grad)
MP_CU_GRAD(gelu_grad, mp_gelu_grad)
MP_CU_GRAD(silu_grad, mp_silu_grad)
MP_CU_GRAD(tanh_grad, mp_tanh_grad)
MP_CU_GRAD(sigmoid_grad, mp_sigmoid_grad)
MP_CU_GRAD(sqrt_grad, mp_sqrt_grad)
MP_CU_GRAD(rsqrt_grad, mp_rsqrt_grad)

/* dst += f32(src): a parameter's gradient into the flat f32 buffer; the
 * cast of a lowp gradient to f32 is done here when nothing else reads it. */
template <int XT>
struct MpCuAcc {
    float *dst;
    const void *src;
    MP_HD void operator()(int64_t i) const { dst[i] += mp_cu_ld(src, XT, i); }
};

template <int XT>
static inline void mp_cu_acc_grad(float *dst, const void *src, int64_t n)
{
    MpCuAcc<XT> f = {dst, src};
    mp_cu_each("accumulate_grad", n, f);
}

/* Dropout: the mask of (seed, step, micro, node) as mp_k_dropout; the step
 * is read on the device, so one captured step serves every step. */
template <int YT, int XT>
struct MpCuDropout {
    void *y;
    const void *x;
    float p;
    uint64_t seed;
    const MpCuHdr *hdr;
    int64_t micro, node;
    MP_HD void operator()(int64_t i) const
    {
        uint64_t key = mp_dropout_key(seed, hdr->step, micro, node);
        float s = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
        mp_cu_st(y, YT, i, mp_dropout_at(key, i, p, s, mp_cu_ld(x, XT, i)));
    }
};

template <int YT, int XT>
static inline void mp_cu_dropout(void *y, const void *x, int64_t n, float p, uint64_t seed,
                                 const MpCuHdr *hdr, int64_t micro, int64_t node)
{
    if (p <= 0.0f) {
        mp_cu_cast<YT, XT>(y, x, n);
        return;
    }
    MpCuDropout<YT, XT> f = {y, x, p, seed, hdr, micro, node};
    mp_cu_each("dropout", n, f);
}

template <int DXT, int DYT>
static inline void mp_cu_dropout_grad(void *dx, const void *dy, int64_t n, float p, uint64_t seed,
                                      const MpCuHdr *hdr, int64_t micro, int64_t node)
{
    mp_cu_dropout<DXT, DYT>(dx, dy, n, p, seed, hdr, micro, node);
}

/* randn, rand: value i of (seed, step, micro, node) as mp_k_randn /
 * mp_k_rand, the step read on the device (one captured step serves all). */
template <int YT>
struct MpCuRandom {
    void *y;
    uint64_t seed;
    const MpCuHdr *hdr;
    int64_t micro, node;
    int normal;
    MP_HD void operator()(int64_t i) const
    {
        uint64_t key = mp_dropout_key(seed, hdr->step, micro, node);
        mp_cu_st(y, YT, i, normal ? mp_randn_at(key, i) : mp_dropout_u(key, i));
    }
};

template <int YT>
static inline void mp_cu_randn(void *y, int64_t n, uint64_t seed, const MpCuHdr *hdr, int64_t micro,
                               int64_t node)
{
    MpCuRandom<YT> f = {y, seed, hdr, micro, node, 1};
    mp_cu_each("randn", n, f);
}

template <int YT>
static inline void mp_cu_rand(void *y, int64_t n, uint64_t seed, const MpCuHdr *hdr, int64_t micro,
                              int64_t node)
{
    MpCuRandom<YT> f = {y, seed, hdr, micro, node, 0};
    mp_cu_each("rand", n, f);
}

/* ---- broadcasting and views ---------------------------------------------------- */

/* mp_cu_bcast_at in 32 bits: y under 2^31 elements (a and b no larger) */
static inline MP_HD void mp_cu_bcast_at32(const MpBcast *p, uint32_t i, uint32_t *ao, uint32_t *bo)
{
    uint32_t a = 0, b = 0;
    for (int d = p->rank - 1; d >= 0; d--) {
        uint32_t n = (uint32_t)p->n[d], q = i % n;
        i /= n;
        a += q * (uint32_t)p->sa[d];
        b += q * (uint32_t)p->sb[d];
    }
    *ao = a;
    *bo = b;
}

/* Element i of y = f(a, b) broadcast; same (rank 1, both strides 1): no
 * index arithmetic; narrow (y under 2^31 elements): in 32 bits, where a
 * 64-bit division is a called subroutine on the GPU */
template <int YT, int AT, int BT, class F>
struct MpCuBcast {
    void *y;
    const void *a, *b;
    MpBcast p;
    F f;
    int same, narrow;
    MP_HD void operator()(int64_t i) const
    {
        int64_t ao = i, bo = i;
        if (narrow && !same) {
            uint32_t a32, b32;
            mp_cu_bcast_at32(&p, (uint32_t)i, &a32, &b32);
            ao = a32, bo = b32;
        } else if (!same) {
            mp_cu_bcast_at(&p, i, &ao, &bo);
        }
        mp_cu_st(y, YT, i, f(mp_cu_ld(a, AT, ao), mp_cu_ld(b, BT, bo)));
    }
};

template <int YT, int AT, int BT, class F>
static inline void mp_cu_binary(const char *name, void *y, MpCuDims ysh, const void *a, MpCuDims ash,
                                const void *b, MpCuDims bsh, F fn)
{
    MpBcast p = mp_bcast(ysh.rank, ysh.d, ash.rank, ash.d, bsh.rank, bsh.d);
    int64_t n = mp_numel(ysh.rank, ysh.d);
    MpCuBcast<YT, AT, BT, F> f = {y, a, b, p, fn, p.rank == 0 || (p.rank == 1 && p.sa[0] == 1 && p.sb[0] == 1),
                                  n < ((int64_t)1 << 31)};
    mp_cu_each(name, n, f);
}

#define MP_CU_BINARY(NAME, EXPR)                                               \
    struct MpCuF_##NAME {                                                      \
        MP_HD float operator()(float a, float b) const { return (EXPR); }      \
    };                                                                         \
    template <int YT, int AT, int BT>                                          \
    static inline void mp_cu_##NAME(void *y, MpCuDims ysh, const void *a, MpCuDims ash, \
                                    const void *b, MpCuDims bsh)               \
    {                                                                          \
        mp_cu_binary<YT, AT, BT>(#NAME, y, ysh, a, ash, b, bsh, MpCuF_##NAME()); \
    }

MP_CU_BINARY(add, a + b)
MP_CU_BINARY(sub, a - b)
MP_CU_BINARY(mul, a * b)
MP_CU_BINARY(div, a / b)

/* y[i] = x[view(i)]: transposes and layout changes */
template <int YT, int XT>
struct MpCuGather {
    void *y;
    const void *x;
    MpCuView v;
    MP_HD void operator()(int64_t i) const { mp_cu_st(y, YT, i, mp_cu_ld(x, XT, mp_cu_view_at(&v, i))); }
};

/* ---- copies by words -------------------------------------------------------------
 * A copy between tensors of one type whose runs of contiguous elements,
 * strides and offsets are all multiples of V elements moves V of them an
 * item: one word of 4, 8 or 16 bytes (one vector load and store where the
 * element-wise copy issues up to eight), its index arithmetic once a word
 * and in 32 bits. The bits are the element-wise copy's. Copies that do not
 * qualify (types that differ, odd runs, more than 2^31 words) stay element
 * by element. Three word sizes, whatever the element types: few kernels. */
template <int NB>
struct alignas(NB) MpCuWord {
    uint32_t w[NB / 4];
};

/* Elements of es bytes a word holds, a power of two of 4 to 16 bytes that
 * divides every count OR-ed into m (runs, strides, offsets, addresses in
 * elements); 0 when none does. */
static inline int mp_cu_word_elems(int es, int64_t m)
{
    int64_t v = (m | (16 / es)) & -(m | (16 / es));
    return v * es >= 4 ? (int)v : 0;
}

static inline int64_t mp_cu_addr_elems(const void *p, int es) { return (int64_t)((uintptr_t)p / (uintptr_t)es); }

static inline MP_HD uint32_t mp_cu_view_at32(const MpCuView *v, uint32_t i)
{
    uint32_t off = 0;
    for (int d = v->rank - 1; d >= 0; d--) {
        uint32_t n = (uint32_t)v->n[d];
        off += (i % n) * (uint32_t)v->s[d];
        i /= n;
    }
    return off;
}

template <int NB>
struct MpCuGatherWords {
    MpCuWord<NB> *y;
    const MpCuWord<NB> *x;
    MpCuView v;
    MP_HD void operator()(int64_t i) const { y[i] = x[mp_cu_view_at32(&v, (uint32_t)i)]; }
};

/* The gather of whole words, when v qualifies (its last dim contiguous) */
static inline bool mp_cu_gather_words(const char *name, void *y, const void *x, int es, MpCuView v)
{
    int r = v.rank;
    int64_t m = mp_cu_addr_elems(y, es) | mp_cu_addr_elems(x, es), hi = 0;
    if (r == 0 || v.s[r - 1] != 1)
        return false;
    m |= v.n[r - 1];
    for (int d = 0; d < r - 1; d++)
        m |= v.s[d];
    int w = mp_cu_word_elems(es, m);
    if (w == 0)
        return false;
    v.n[r - 1] /= w;
    for (int d = 0; d < r - 1; d++)
        v.s[d] /= w;
    for (int d = 0; d < r; d++)
        hi += (v.n[d] - 1) * v.s[d];
    int64_t n = mp_cu_view_numel(&v);
    if (n >= ((int64_t)1 << 31) || hi >= ((int64_t)1 << 31))
        return false;
    if (w * es == 16) {
        MpCuGatherWords<16> f = {(MpCuWord<16> *)y, (const MpCuWord<16> *)x, v};
        mp_cu_each(name, n, f);
    } else if (w * es == 8) {
        MpCuGatherWords<8> f = {(MpCuWord<8> *)y, (const MpCuWord<8> *)x, v};
        mp_cu_each(name, n, f);
    } else {
        MpCuGatherWords<4> f = {(MpCuWord<4> *)y, (const MpCuWord<4> *)x, v};
        mp_cu_each(name, n, f);
    }
    return true;
}

template <int YT, int XT>
static inline void mp_cu_gather(void *y, const void *x, MpCuView v)
{
    if (YT == XT && mp_cu_gather_words("gather", y, x, mp_cu_dt_size(XT), v))
        return;
    MpCuGather<YT, XT> f = {y, x, v};
    mp_cu_each("gather", mp_cu_view_numel(&v), f);
}

template <int YT, int XT>
static inline void mp_cu_transpose(void *y, const void *x, MpCuDims xsh, MpCuDims perm)
{
    mp_cu_gather<YT, XT>(y, x, mp_cu_view_permute(xsh.rank, xsh.d, perm.d));
}

/* ---- structural ops: chunk, slice, concat, expand, arange ------------------ */

/* One item of a window [outer, wlen, inner] of the big tensor [outer, blen,
 * inner]: MP_CU_SLICE reads y's element i from the window of x; MP_CU_PLACE
 * writes x's element i into the window of y (concat); MP_CU_PAD writes
 * every element i of y, 0 outside the window (slice_grad). */
enum { MP_CU_SLICE, MP_CU_PLACE, MP_CU_PAD };

template <int YT, int XT>
struct MpCuWindow {
    void *y;
    const void *x;
    int64_t blen, inner, start, wlen;
    int mode;
    MP_HD void operator()(int64_t i) const
    {
        if (mode == MP_CU_SLICE)
            mp_cu_mv(y, YT, i, x, XT, mp_cu_window_at(i, blen, inner, start, wlen));
        else if (mode == MP_CU_PLACE)
            mp_cu_mv(y, YT, mp_cu_window_at(i, blen, inner, start, wlen), x, XT, i);
        else
            mp_cu_pad_at(y, YT, x, XT, i, blen, inner, start, wlen);
    }
};

/* The window copies by words (see mp_cu_gather_words), in 32 bits */
template <int NB>
struct MpCuWindowWords {
    MpCuWord<NB> *y;
    const MpCuWord<NB> *x;
    uint32_t blen, inner, start, wlen;
    int mode;
    MP_HD void operator()(int64_t i64) const
    {
        uint32_t i = (uint32_t)i64, k = i % inner, q = i / inner, j;
        if (mode == MP_CU_SLICE) {
            y[i] = x[((q / wlen) * blen + start + q % wlen) * inner + k];
        } else if (mode == MP_CU_PLACE) {
            y[((q / wlen) * blen + start + q % wlen) * inner + k] = x[i];
        } else if ((j = q % blen - start) < wlen) {   /* unsigned: j < 0 wraps past wlen */
            y[i] = x[((q / blen) * wlen + j) * inner + k];
        } else {
            MpCuWord<NB> z = {};
            y[i] = z;
        }
    }
};

template <int NB>
static inline void mp_cu_window_run(const char *name, void *y, const void *x, int64_t n, int64_t blen,
                                    int64_t inner, int64_t start, int64_t wlen, int mode)
{
    MpCuWindowWords<NB> f = {(MpCuWord<NB> *)y, (const MpCuWord<NB> *)x, (uint32_t)blen, (uint32_t)inner,
                             (uint32_t)start, (uint32_t)wlen, mode};
    mp_cu_each(name, n, f);
}

/* A window copy of whole words: along a contiguous inner run, or (inner 1)
 * along the window's axis; false when it does not qualify. */
static inline bool mp_cu_window_words(const char *name, void *y, const void *x, int es, int64_t outer,
                                      int64_t blen, int64_t inner, int64_t start, int64_t wlen, int64_t items,
                                      int mode)
{
    int64_t m = mp_cu_addr_elems(y, es) | mp_cu_addr_elems(x, es) | (inner > 1 ? inner : blen | start | wlen);
    int w = mp_cu_word_elems(es, m);
    if (w == 0 || outer * blen * inner / w >= ((int64_t)1 << 31))
        return false;
    if (inner > 1) {
        inner /= w;
    } else {
        blen /= w;
        start /= w;
        wlen /= w;
    }
    items /= w;
    if (w * es == 16)
        mp_cu_window_run<16>(name, y, x, items, blen, inner, start, wlen, mode);
    else if (w * es == 8)
        mp_cu_window_run<8>(name, y, x, items, blen, inner, start, wlen, mode);
    else
        mp_cu_window_run<4>(name, y, x, items, blen, inner, start, wlen, mode);
    return true;
}

template <int YT, int XT>
static inline void mp_cu_slice(void *y, const void *x, int64_t outer, int64_t xlen, int64_t inner,
                               int64_t start, int64_t ylen)
{
    int64_t n = outer * ylen * inner;
    if (YT == XT && mp_cu_window_words("slice", y, x, mp_cu_dt_size(XT), outer, xlen, inner, start, ylen, n,
                                       MP_CU_SLICE))
        return;
    MpCuWindow<YT, XT> f = {y, x, xlen, inner, start, ylen, MP_CU_SLICE};
    mp_cu_each("slice", n, f);
}

/* concat: x into its window of y; slice_grad (zero): y all written */
template <int YT, int XT>
static inline void mp_cu_place(void *y, const void *x, int64_t outer, int64_t ylen, int64_t inner,
                               int64_t start, int64_t xlen, int zero)
{
    const char *name = zero ? "slice_grad" : "concat";
    int64_t n = outer * (zero ? ylen : xlen) * inner;
    int mode = zero ? MP_CU_PAD : MP_CU_PLACE;
    if (YT == XT && mp_cu_window_words(name, y, x, mp_cu_dt_size(XT), outer, ylen, inner, start, xlen, n, mode))
        return;
    MpCuWindow<YT, XT> f = {y, x, ylen, inner, start, xlen, mode};
    mp_cu_each(name, n, f);
}

template <int YT, int XT>
struct MpCuBroadcast {
    void *y;
    const void *x;
    MpCuView v;
    MP_HD void operator()(int64_t i) const { mp_cu_mv(y, YT, i, x, XT, mp_cu_view_at(&v, i)); }
};

template <int YT, int XT>
static inline void mp_cu_broadcast(void *y, MpCuDims ysh, const void *x, MpCuDims xsh)
{
    MpCuBroadcast<YT, XT> f = {y, x, mp_cu_view_broadcast(ysh.rank, ysh.d, xsh.rank, xsh.d)};
    mp_cu_each("expand", mp_cu_view_numel(&f.v), f);
}

struct MpCuArange {
    int32_t *y;
    MP_HD void operator()(int64_t i) const { y[i] = (int32_t)i; }
};

template <int YT>
static inline void mp_cu_arange(void *y, int64_t n)
{
    static_assert(YT == MP_I32, "arange makes i32");
    MpCuArange f = {(int32_t *)y};
    mp_cu_each("arange", n, f);
}

/* ---- reductions ------------------------------------------------------------------ */

/* Output j of a reduction: one thread's whole sum, or (rows) a block's. */
template <int YT, int XT>
struct MpCuReduce {
    void *y;
    const void *x;
    MpCuRed r;
    float beta;
    MP_HD void operator()(int64_t j) const
    {
        mp_cu_red_store(&r, y, YT, j, mp_cu_red_part(&r, x, XT, j, 0, 1), beta);
    }
    MP_HD void operator()(int64_t j, const MpCuTeam &t) const
    {
        MpAcc s = t.sum(mp_cu_red_part(&r, x, XT, j, t.tid, t.nt));
        if (t.tid == 0)
            mp_cu_red_store(&r, y, YT, j, s, beta);
    }
};

/* Many outputs with long sums (a bias gradient [R, N] -> [N]): the items
 * cut in `split` slices, slice s of output j summed into part[s nout + j],
 * then each output's slices added in order. */
template <int XT>
struct MpCuReduceSlice {
    MpAcc *part;
    const void *x;
    MpCuRed r;
    int64_t per;
    MP_HD void operator()(int64_t e) const
    {
        int64_t j = e % r.nout, s = e / r.nout;
        part[e] = mp_cu_red_range(&r, x, XT, j, s * per, (s + 1) * per, 1);
    }
};

template <int YT>
struct MpCuReduceJoin {
    void *y;
    const MpAcc *part;
    MpCuRed r;
    int64_t split;
    float beta;
    MP_HD void operator()(int64_t j) const
    {
        MpAcc s = mp_acc_zero();
        for (int64_t k = 0; k < split; k++)
            s = mp_acc_join(s, part[k * r.nout + j]);
        mp_cu_red_store(&r, y, YT, j, s, beta);
    }
};

/* ---- channel sums read down columns ----------------------------------------------------- */

/* x [N, C, S] with S < 32 seen as rows [N, C S]: a block takes G = 32 / S
 * whole channels (columns b G S ... b G S + G S - 1), lane l of every warp
 * column b G S + l, warp w rows r0 + w, r0 + w + warps, ...: a warp reads
 * neighbouring addresses of one row (coalesced), where a block per channel
 * reads S values every C S. team.sum_cols(v, S) then adds a channel's S
 * lanes over the warps in a fixed order (deterministic, no atomics). One
 * thread (the serial stand-in) takes every channel of the block in turn. */
typedef struct MpCuChan {
    int64_t N, C, S, G;            /* G channels per block */
    int64_t r0, r1;                /* the rows this block sums */
} MpCuChan;

static inline MpCuChan mp_cu_chan(int64_t N, int64_t C, int64_t S)
{
    MpCuChan h = {N, C, S, 32 / S, 0, N};
    return h;
}

/* The block's threads for rows of n: about 16 rows per warp, up to 32 warps
 * (the functors launched so declare `most`: their launch bound). */
static inline int mp_cu_col_threads(int64_t n)
{
    int warps = 1;
    while (warps < MP_CU_COL_MOST / 32 && warps * 16 < n)
        warps *= 2;
    return 32 * warps;
}

/* The channels of block b this thread sums: [*g0, *g1] (lanes: its lane's) */
static MP_HD void mp_cu_chan_mine(const MpCuTeam &t, const MpCuChan *h, int *g0, int *g1)
{
    *g0 = t.nt >= 32 ? t.tid % 32 / (int)h->S : 0;
    *g1 = t.nt >= 32 ? *g0 : (int)h->G - 1;
}

/* Channel b G + g is one of block b's and exists. */
static MP_HD int mp_cu_chan_ok(const MpCuChan *h, int64_t b, int g)
{
    return g < h->G && b * h->G + g < h->C;
}

/* The thread that writes channel b G + g's results: its first lane's (the
 * one thread, alone). */
static MP_HD int mp_cu_chan_lead(const MpCuTeam &t, const MpCuChan *h, int64_t b, int g)
{
    return mp_cu_chan_ok(h, b, g) && (t.nt < 32 || (t.tid < 32 && t.tid % h->S == 0));
}

/* The columns of channel b G + g this thread reads, [*k0, *k1) of a row's
 * C S, down rows *r, *r + *step, ... < h->r1 (none when the channel is not
 * the thread's or does not exist). */
static MP_HD void mp_cu_chan_cols(const MpCuTeam &t, const MpCuChan *h, int64_t b, int g, int64_t *k0,
                                  int64_t *k1, int64_t *r, int64_t *step)
{
    int lanes = t.nt >= 32 ? 32 : 1, S = (int)h->S;
    int l0 = lanes == 32 ? t.tid % 32 : g * S, l1 = lanes == 32 ? l0 + 1 : l0 + S;
    if (l0 / S != g || !mp_cu_chan_ok(h, b, g))
        l1 = l0;
    *k0 = b * h->G * S + l0;
    *k1 = b * h->G * S + l1;
    *r = h->r0 + t.tid / lanes;
    *step = t.nt / lanes;
}

/* Channel b G + g's sum (mp_cu_col_part's kind) over rows r0..r1, every
 * thread of the block taking part (the team's sum_cols). */
template <int DYT, int XT>
static MP_HD MpAcc mp_cu_chan_sum_of(const MpCuTeam &t, const MpCuChan *h, int64_t b, int g,
                                     int kind, const void *dy, const void *x, float mean, float rstd,
                                     float wv)
{
    int64_t k0, k1, r, step;
    MpAcc s = mp_acc_zero();
    mp_cu_chan_cols(t, h, b, g, &k0, &k1, &r, &step);
    for (int64_t k = k0; k < k1; k++)
        s = mp_acc_join(s, mp_cu_col_part(kind, dy, DYT, x, XT, h->C * h->S, k, r, h->r1, step, mean,
                                          rstd, wv));
    return t.sum_cols(s, (int)h->S);
}

/* Channel b G + g's mean and 1/std, as mp_cu_norm_moments; *q the sum of
 * the squared deviations. */
template <int XT>
static MP_HD void mp_cu_chan_moments(const MpCuTeam &t, const MpCuChan *h, int64_t b, int g,
                                     const void *x, float eps, float *mean, float *rstd, float *q)
{
    int64_t n = h->N * h->S;
    float s = mp_acc_get(mp_cu_chan_sum_of<XT, XT>(t, h, b, g, MP_COL_SUM, NULL, x, 0.0f, 0.0f, 1.0f));
    *q = mp_acc_get(mp_cu_chan_sum_of<XT, XT>(t, h, b, g, MP_COL_SQ, NULL, x, s / (float)n, 0.0f, 1.0f));
    mp_cu_norm_stats(s, *q, n, eps, mean, rstd);
}

/* Channel sums of x, rows cut in slices of `per`: block b takes channel
 * group b % groups over slice b / groups; one slice: y directly (r's scale
 * and beta), else slice k's sums into part[k C + c] for MpCuReduceJoin. */
template <int YT, int XT>
struct MpCuChanSum {
    static constexpr int most = MP_CU_COL_MOST;   /* mp_cu_col_threads */
    void *y;
    MpAcc *part;
    const void *x;
    MpCuRed r;
    MpCuChan h;
    int64_t groups, per;
    float beta;
    MP_HD void operator()(int64_t b, const MpCuTeam &t) const
    {
        MpCuChan s = h;
        int64_t k = b / groups, gb = b % groups;
        s.r0 = k * per;
        s.r1 = s.r0 + per < h.N ? s.r0 + per : h.N;
        int g0, g1;
        mp_cu_chan_mine(t, &s, &g0, &g1);
        for (int g = g0; g <= g1; g++) {
            MpAcc v = mp_cu_chan_sum_of<XT, XT>(t, &s, gb, g, MP_COL_SUM, NULL, x, 0.0f, 0.0f, 1.0f);
            int64_t c = gb * s.G + g;
            if (!mp_cu_chan_lead(t, &s, gb, g))
                continue;
            if (part)
                part[k * h.C + c] = v;
            else
                mp_cu_red_store(&r, y, YT, c, v, beta);
        }
    }
};

/* How many slices: a function of N only, so results are the same on every GPU. */
static inline int64_t mp_cu_chan_slices(int64_t N)
{
    int64_t k = N / 1024;
    return k < 1 ? 1 : k > 64 ? 64 : k;
}

/* A reduction that is channel sums of x [N, C, S]: one output dim (C, S),
 * the reduced dims (N, C S) and, for S > 1, (S, 1). */
static inline int mp_cu_red_chan(const MpCuRed *r, int64_t *N, int64_t *C, int64_t *S)
{
    if (r->out.rank != 1)
        return 0;
    *C = r->out.n[0];
    *S = r->out.s[0];
    *N = r->red.n[0];
    if (r->red.rank == 1)
        return *S == 1 && r->red.s[0] == *C;
    return r->red.rank == 2 && r->red.s[0] == *C * *S && r->red.n[1] == *S && r->red.s[1] == 1;
}

template <int YT, int XT>
static inline void mp_cu_chan_sums(void *y, const void *x, MpCuRed r, int64_t N, int64_t C,
                                   int64_t S, float beta)
{
    MpCuChan h = mp_cu_chan(N, C, S);
    int64_t groups = (C + h.G - 1) / h.G, split = mp_cu_chan_slices(N), per = (N + split - 1) / split;
    MpAcc *part = split > 1 ? (MpAcc *)mp_cu_ws(split * C * (int64_t)sizeof(MpAcc)) : NULL;
    MpCuChanSum<YT, XT> a = {y, part, x, r, h, groups, per, beta};
    mp_cu_rows("channel_sum", groups * split, mp_cu_col_threads(per), a);
    if (split > 1) {
        MpCuReduceJoin<YT> j = {y, part, r, split, beta};
        mp_cu_each("channel_sum", C, j);
    }
}

/* ---- middle axes read in tiles of columns ----------------------------------------------- */

/* x [outer, len, inner], inner > 1, worked on along len (a sum, a softmax):
 * a block per (outer index, tile of 32 columns of inner, slice of len).
 * Lane l of warp w reads column tile 32 + l % P of rows l / P + G w, then
 * every G warps further, where P = min(inner, 32) lanes make a row and G =
 * 32 / P rows sit side by side in a warp: a warp reads G P neighbouring
 * addresses (coalesced), where a block per column reads one value every
 * inner. team.sum_lanes / max_lanes(v, P) then join a column's lanes over
 * the warps in a fixed order (deterministic, no atomics). One thread (the
 * serial stand-in) takes the tile's columns in turn, all rows each. */
typedef struct MpCuMid {
    int64_t outer, len, inner;
    int64_t P, G, tiles;           /* lanes per row, rows per warp, tiles per outer */
    int64_t l0, l1;                /* the rows of len this block takes */
} MpCuMid;

static inline MpCuMid mp_cu_mid(int64_t outer, int64_t len, int64_t inner)
{
    int64_t P = inner < 32 ? inner : 32;
    MpCuMid h = {outer, len, inner, P, 32 / P, (inner + 31) / 32, 0, len};
    return h;
}

/* Passes a thread makes over the tile: one (its lane's column), or (one
 * thread alone) one per column. */
static MP_HD int mp_cu_mid_passes(const MpCuTeam &t, const MpCuMid *h)
{
    return t.nt >= 32 ? 1 : (int)h->P;
}

/* Pass k of this thread in block tile `tile` of outer index o: its
 * column, the offset of (o, row 0, column) in x, its rows r0, r0 + step,
 * ... < h->l1; 0 when the lane has no column (past inner, or a lane past
 * G P). */
static MP_HD int mp_cu_mid_at(const MpCuTeam &t, const MpCuMid *h, int64_t o, int64_t tile, int k,
                              int64_t *col, int64_t *off, int64_t *r0, int64_t *step)
{
    int lane = t.nt >= 32 ? t.tid % 32 : k;
    *col = tile * 32 + lane % h->P;
    *off = o * h->len * h->inner + *col;
    *r0 = h->l0 + (t.nt >= 32 ? lane / h->P + h->G * (t.tid / 32) : 0);
    *step = t.nt >= 32 ? h->G * (t.nt / 32) : 1;
    return lane < h->G * h->P && *col < h->inner;
}

/* The thread that writes its column's result: one of the first row's lanes
 * of warp 0 (or the one thread). */
static MP_HD int mp_cu_mid_lead(const MpCuTeam &t, const MpCuMid *h)
{
    return t.nt < 32 || t.tid < h->P;
}

/* Threads for a tile of `rows` rows: about 16 of them per warp. */
static inline int mp_cu_mid_threads(const MpCuMid *h, int64_t rows)
{
    return mp_cu_col_threads((rows + h->G - 1) / h->G);
}

/* A sum over a middle axis (mp_cu_red_axis's shape, or sum_to's that is
 * the same), slices of `per` rows: block b takes tile b % (outer tiles) of
 * slice b / (outer tiles); one slice: y directly, else slice k's sums into
 * part[k nout + j] for MpCuReduceJoin. */
template <int YT, int XT>
struct MpCuMidSum {
    static constexpr int most = MP_CU_COL_MOST;   /* mp_cu_col_threads */
    void *y;
    MpAcc *part;
    const void *x;
    MpCuRed r;
    MpCuMid h;
    int64_t per;
    float beta;
    MP_HD void operator()(int64_t b, const MpCuTeam &t) const
    {
        int64_t tiles = h.outer * h.tiles, k = b / tiles, o = b % tiles / h.tiles;
        MpCuMid s = h;
        s.l0 = k * per;
        s.l1 = s.l0 + per < h.len ? s.l0 + per : h.len;
        for (int p = 0; p < mp_cu_mid_passes(t, &s); p++) {
            int64_t col, off, r0, step;
            int ok = mp_cu_mid_at(t, &s, o, b % h.tiles, p, &col, &off, &r0, &step);
            MpAcc v = t.sum_lanes(ok ? mp_cu_red_range(&r, x, XT, o * h.inner + col, r0, s.l1, step)
                                     : mp_acc_zero(), (int)h.P);
            if (!ok || !mp_cu_mid_lead(t, &s))
                continue;
            if (part)
                part[k * r.nout + o * h.inner + col] = v;
            else
                mp_cu_red_store(&r, y, YT, o * h.inner + col, v, beta);
        }
    }
};

/* A reduction that reads like a middle axis: its outputs' last dim is
 * (inner > 1, stride 1) and its reduced items' last dim steps by inner
 * (x [outer, len, inner] summed over len, sum_to's [A, B, C, D] -> [1, B,
 * 1, D]): outer = nout / inner tiles of columns, the items (any view) as
 * rows. */
static inline int mp_cu_red_mid(const MpCuRed *r, int64_t *outer, int64_t *len, int64_t *inner)
{
    int o = r->out.rank, d = r->red.rank;
    if (o < 1 || d < 1 || r->out.s[o - 1] != 1 || r->out.n[o - 1] < 2
        || r->red.s[d - 1] != r->out.n[o - 1])
        return 0;
    *inner = r->out.n[o - 1];
    *outer = r->nout / *inner;
    *len = r->nred;
    return 1;
}

template <int YT, int XT>
static inline void mp_cu_mid_sums(void *y, const void *x, MpCuRed r, int64_t outer, int64_t len,
                                  int64_t inner, float beta)
{
    MpCuMid h = mp_cu_mid(outer, len, inner);
    int64_t split = mp_cu_chan_slices(len), per = (len + split - 1) / split;
    MpAcc *part = split > 1 ? (MpAcc *)mp_cu_ws(split * r.nout * (int64_t)sizeof(MpAcc)) : NULL;
    MpCuMidSum<YT, XT> a = {y, part, x, r, h, per, beta};
    mp_cu_rows("reduce", outer * h.tiles * split, mp_cu_mid_threads(&h, per), a);
    if (split > 1) {
        MpCuReduceJoin<YT> j = {y, part, r, split, beta};
        mp_cu_each("reduce", r.nout, j);
    }
}

/* ---- sums over the last axis: a block per output (and slice) ------------------------------ */

/* Output j's run of nred neighbouring values (the reduced axis is the last
 * one), slices of `per`: block b takes output b % nout, slice b / nout,
 * its threads neighbouring values (coalesced, where a thread per output
 * reads its own run, nred apart from its neighbour's); one slice: y
 * directly, else part[k nout + j] for MpCuReduceJoin. */
template <int YT, int XT>
struct MpCuRunSum {
    void *y;
    MpAcc *part;
    const void *x;
    MpCuRed r;
    int64_t per;
    float beta;
    MP_HD void operator()(int64_t b, const MpCuTeam &t) const
    {
        int64_t j = b % r.nout, k = b / r.nout, at = k * per;
        int64_t n = at + per < r.nred ? per : r.nred - at;
        MpAcc s = t.sum(mp_cu_row_sum_part(x, XT, mp_cu_view_at(&r.out, j) + at, n, t.tid, t.nt));
        if (t.tid != 0)
            return;
        if (part)
            part[k * r.nout + j] = s;
        else
            mp_cu_red_store(&r, y, YT, j, s, beta);
    }
};

template <int YT, int XT>
static inline void mp_cu_run_sums(void *y, const void *x, MpCuRed r, float beta)
{
    int64_t split = r.nred / 65536 < 1 ? 1 : r.nred / 65536 > 64 ? 64 : r.nred / 65536;
    int64_t per = (r.nred + split - 1) / split;
    MpAcc *part = split > 1 ? (MpAcc *)mp_cu_ws(split * r.nout * (int64_t)sizeof(MpAcc)) : NULL;
    MpCuRunSum<YT, XT> a = {y, part, x, r, per, beta};
    mp_cu_rows("reduce", r.nout * split, mp_cu_row_threads(per), a);
    if (split > 1) {
        MpCuReduceJoin<YT> j = {y, part, r, split, beta};
        mp_cu_each("reduce", r.nout, j);
    }
}

/* The way of summing depends on the sizes only, so results do not change
 * from one GPU to another. */
template <int YT, int XT>
static inline void mp_cu_reduce(void *y, const void *x, MpCuRed r, float beta)
{
    int64_t items = mp_cu_red_items(&r), N, C, S;
    MpCuReduce<YT, XT> f = {y, x, r, beta};
    if (items >= 64 && mp_cu_red_chan(&r, &N, &C, &S) && S < 32) {
        mp_cu_chan_sums<YT, XT>(y, x, r, N, C, S, beta);   /* columns: coalesced */
        return;
    }
    if (items >= 64 && mp_cu_red_mid(&r, &N, &C, &S)) {
        mp_cu_mid_sums<YT, XT>(y, x, r, N, C, S, beta);    /* a middle axis: tiles */
        return;
    }
    if (r.red.rank == 1 && r.red.s[0] == 1 && r.nred >= 32) {
        mp_cu_run_sums<YT, XT>(y, x, r, beta);             /* the last axis: runs */
        return;
    }
    if (items >= 64 && r.nout <= 2048) {
        mp_cu_rows("reduce", r.nout, 256, f);       /* long sums: a block each */
        return;
    }
    if (items < 512) {
        mp_cu_each("reduce", r.nout, f);            /* short sums: a thread each */
        return;
    }
    int64_t split = items / 256 < 64 ? items / 256 : 64, per = (items + split - 1) / split;
    MpAcc *part = (MpAcc *)mp_cu_ws(split * r.nout * (int64_t)sizeof(MpAcc));
    MpCuReduceSlice<XT> a = {part, x, r, per};
    MpCuReduceJoin<YT> b = {y, part, r, split, beta};
    mp_cu_each("reduce", split * r.nout, a);
    mp_cu_each("reduce", r.nout, b);
}

template <int YT, int XT>
static inline void mp_cu_sum(void *y, const void *x, int64_t outer, int64_t len, int64_t inner)
{
    mp_cu_reduce<YT, XT>(y, x, mp_cu_red_axis(outer, len, inner, 1.0f), 0.0f);
}

template <int YT, int XT>
static inline void mp_cu_mean(void *y, const void *x, int64_t outer, int64_t len, int64_t inner)
{
    mp_cu_reduce<YT, XT>(y, x, mp_cu_red_axis(outer, len, inner, 1.0f / (float)len), 0.0f);
}

template <int YT, int XT>
static inline void mp_cu_global_avg_pool(void *y, const void *x, int64_t N, int64_t C, int64_t S)
{
    mp_cu_reduce<YT, XT>(y, x, mp_cu_red_axis(N * C, S, 1, 1.0f / (float)S), 0.0f);
}

template <int YT, int XT>
static inline void mp_cu_channel_sum(void *y, const void *x, int64_t N, int64_t C, int64_t S,
                                     float beta)
{
    mp_cu_reduce<YT, XT>(y, x, mp_cu_red_channels(N, C, S), beta);
}

template <int YT, int DYT>
static inline void mp_cu_sum_to(void *y, MpCuDims ysh, const void *dy, MpCuDims dysh, float beta)
{
    mp_cu_reduce<YT, DYT>(y, dy, mp_cu_red_sum_to(ysh.rank, ysh.d, dysh.rank, dysh.d), beta);
}

template <int YT, int DYT>
struct MpCuExpand {
    void *y;
    const void *dy;
    int64_t len, inner;
    float scale;
    MP_HD void operator()(int64_t i) const
    {
        mp_cu_st(y, YT, i, mp_cu_expand_at(dy, DYT, i, len, inner, scale));
    }
};

template <int YT, int DYT>
static inline void mp_cu_expand(void *y, const void *dy, int64_t outer, int64_t len, int64_t inner,
                                float scale)
{
    MpCuExpand<YT, DYT> f = {y, dy, len, inner, scale};
    mp_cu_each("expand", outer * len * inner, f);
}

template <int DXT, int DYT>
static inline void mp_cu_global_avg_pool_grad(void *dx, const void *dy, int64_t N, int64_t C,
                                              int64_t S)
{
    mp_cu_expand<DXT, DYT>(dx, dy, N * C, S, 1, 1.0f / (float)S);
}

/* ---- softmax: a block per row ------------------------------------------------------ */

template <int YT, int XT>
struct MpCuSoftmax {
    void *y;
    const void *x;
    int64_t len, inner;
    int log_;
    MP_HD void operator()(int64_t row, const MpCuTeam &t) const
    {
        int64_t off = mp_cu_row_off(row, len, inner);
        float m = t.max(mp_cu_row_max(x, XT, off, len, inner, t.tid, t.nt));
        float s = mp_acc_get(t.sum(mp_cu_sumexp_part(x, XT, off, len, inner, m, t.tid, t.nt)));
        mp_cu_softmax_put(y, YT, x, XT, off, len, inner, m, s, log_, t.tid, t.nt);
    }
};

/* The same over a middle axis (inner > 1), in tiles of columns (MpCuMid):
 * each column's max, sum of exp, then its values, every lane its rows. */
template <int YT, int XT>
struct MpCuSoftmaxMid {
    static constexpr int most = MP_CU_COL_MOST;   /* mp_cu_col_threads */
    void *y;
    const void *x;
    MpCuMid h;
    int log_;
    MP_HD void operator()(int64_t b, const MpCuTeam &t) const
    {
        for (int p = 0; p < mp_cu_mid_passes(t, &h); p++) {
            int64_t col, off, r0, step;
            int ok = mp_cu_mid_at(t, &h, b / h.tiles, b % h.tiles, p, &col, &off, &r0, &step);
            if (!ok)
                r0 = h.len;        /* no rows: the identities, at every reduction */
            float m = t.max_lanes(mp_cu_row_max(x, XT, off, h.len, h.inner, r0, step), (int)h.P);
            MpAcc e = mp_cu_sumexp_part(x, XT, off, h.len, h.inner, m, r0, step);
            float s = mp_acc_get(t.sum_lanes(e, (int)h.P));
            mp_cu_softmax_put(y, YT, x, XT, off, h.len, h.inner, m, s, log_, r0, step);
        }
    }
};

template <int YT, int XT>
static inline void mp_cu_softmax_any(const char *name, void *y, const void *x, int64_t outer,
                                     int64_t len, int64_t inner, int log_)
{
    if (inner > 1) {
        MpCuSoftmaxMid<YT, XT> f = {y, x, mp_cu_mid(outer, len, inner), log_};
        mp_cu_rows(name, outer * f.h.tiles, mp_cu_mid_threads(&f.h, len), f);
        return;
    }
    MpCuSoftmax<YT, XT> f = {y, x, len, inner, log_};
    mp_cu_rows(name, outer * inner, mp_cu_row_threads(len), f);
}

template <int YT, int XT>
static inline void mp_cu_softmax(void *y, const void *x, int64_t outer, int64_t len, int64_t inner)
{
    mp_cu_softmax_any<YT, XT>("softmax", y, x, outer, len, inner, 0);
}

template <int YT, int XT>
static inline void mp_cu_log_softmax(void *y, const void *x, int64_t outer, int64_t len,
                                     int64_t inner)
{
    mp_cu_softmax_any<YT, XT>("log_softmax", y, x, outer, len, inner, 1);
}

template <int DXT, int DYT, int YT>
struct MpCuSoftmaxGrad {
    void *dx;
    const void *dy, *y;
    int64_t len, inner;
    int log_;
    MP_HD void operator()(int64_t row, const MpCuTeam &t) const
    {
        int64_t off = mp_cu_row_off(row, len, inner);
        float s = mp_acc_get(t.sum(mp_cu_softmax_grad_sum(dy, DYT, y, YT, off, len, inner, log_, t.tid,
                                                          t.nt)));
        mp_cu_softmax_grad_put(dx, DXT, dy, DYT, y, YT, off, len, inner, s, log_, t.tid, t.nt);
    }
};

/* The same over a middle axis, in tiles of columns (MpCuMid). */
template <int DXT, int DYT, int YT>
struct MpCuSoftmaxGradMid {
    static constexpr int most = MP_CU_COL_MOST;   /* mp_cu_col_threads */
    void *dx;
    const void *dy, *y;
    MpCuMid h;
    int log_;
    MP_HD void operator()(int64_t b, const MpCuTeam &t) const
    {
        for (int p = 0; p < mp_cu_mid_passes(t, &h); p++) {
            int64_t col, off, r0, step;
            if (!mp_cu_mid_at(t, &h, b / h.tiles, b % h.tiles, p, &col, &off, &r0, &step))
                r0 = h.len;
            MpAcc g = mp_cu_softmax_grad_sum(dy, DYT, y, YT, off, h.len, h.inner, log_, r0, step);
            float s = mp_acc_get(t.sum_lanes(g, (int)h.P));
            mp_cu_softmax_grad_put(dx, DXT, dy, DYT, y, YT, off, h.len, h.inner, s, log_, r0, step);
        }
    }
};

template <int DXT, int DYT, int YT>
static inline void mp_cu_softmax_grad_any(const char *name, void *dx, const void *dy, const void *y,
                                          int64_t outer, int64_t len, int64_t inner, int log_)
{
    if (inner > 1) {
        MpCuSoftmaxGradMid<DXT, DYT, YT> f = {dx, dy, y, mp_cu_mid(outer, len, inner), log_};
        mp_cu_rows(name, outer * f.h.tiles, mp_cu_mid_threads(&f.h, len), f);
        return;
    }
    MpCuSoftmaxGrad<DXT, DYT, YT> f = {dx, dy, y, len, inner, log_};
    mp_cu_rows(name, outer * inner, mp_cu_row_threads(len), f);
}

template <int DXT, int DYT, int YT>
static inline void mp_cu_softmax_grad(void *dx, const void *dy, const void *y, int64_t outer,
                                      int64_t len, int64_t inner)
{
    mp_cu_softmax_grad_any<DXT, DYT, YT>("softmax_grad", dx, dy, y, outer, len, inner, 0);
}

template <int DXT, int DYT, int YT>
static inline void mp_cu_log_softmax_grad(void *dx, const void *dy, const void *y, int64_t outer,
                                          int64_t len, int64_t inner)
{
    mp_cu_softmax_grad_any<DXT, DYT, YT>("log_softmax_grad", dx, dy, y, outer, len, inner, 1);
}

/* ---- losses and metrics ------------------------------------------------------------ */

/* The parts of a loss or metric: compensated sums (one per row or chunk),
 * in the workspace; joined by one block in a fixed order. */
static MP_HD MpAcc mp_cu_parts_sum(const MpCuTeam &t, const MpAcc *part, int64_t n)
{
    MpAcc s = mp_acc_zero();
    for (int64_t i = t.tid; i < n; i += t.nt)
        s = mp_acc_join(s, part[i]);
    return t.sum(s);
}

/* y = the sum of part[0..n) / div (div 0: / the sum of part[n..2n)) */
template <int YT>
struct MpCuFinish {
    void *y;
    const MpAcc *part;
    int64_t n;
    float div;
    MP_HD void operator()(int64_t row, const MpCuTeam &t) const
    {
        (void)row;
        float s = mp_acc_get(mp_cu_parts_sum(t, part, n));
        float d = div != 0.0f ? div : mp_acc_get(mp_cu_parts_sum(t, part + n, n));
        if (t.tid == 0)
            mp_cu_st(y, YT, 0, s / d);
    }
};

template <int YT>
static inline void mp_cu_finish(const char *name, void *y, const MpAcc *part, int64_t n, float div)
{
    MpCuFinish<YT> f = {y, part, n, div};
    mp_cu_rows(name, 1, 256, f);
}

static MP_HD MpAcc mp_cu_acc_of(float v)
{
    MpAcc a = {v, 0.0f};
    return a;
}

/* Row r's max and sum of exp (block-wide). */
template <int XT>
static MP_HD void mp_cu_row_stats(const MpCuTeam &t, const void *x, int64_t off, int64_t C, float *m,
                                  float *s)
{
    *m = t.max(mp_cu_row_max(x, XT, off, C, 1, t.tid, t.nt));
    *s = mp_acc_get(t.sum(mp_cu_sumexp_part(x, XT, off, C, 1, *m, t.tid, t.nt)));
}

/* Rows of cross-entropy: part[r] its loss (0 when ignored), part[rows + r]
 * 1 when counted; eps = label smoothing. */
template <int XT>
struct MpCuCeRows {
    MpAcc *part;
    const void *x, *labels;
    int ldt;
    int64_t rows, C, ignore;
    float eps;
    float *st;                     /* NULL, or [rows, 2]: each row's m and s kept */
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        float m, s, sx = 0.0f;
        int64_t lab = mp_ld_id(labels, ldt, r);
        mp_cu_row_stats<XT>(t, x, r * C, C, &m, &s);
        if (st && t.tid == 0) {
            st[2 * r] = m;
            st[2 * r + 1] = s;
        }
        if (eps != 0.0f)
            sx = mp_acc_get(t.sum(mp_cu_row_sum_part(x, XT, r * C, C, t.tid, t.nt)));
        if (t.tid == 0) {
            part[r] = mp_cu_acc_of(lab == ignore ? 0.0f : mp_cu_ce_row(x, XT, r * C, C, lab, m, s, eps, sx));
            part[rows + r] = mp_cu_acc_of(lab == ignore ? 0.0f : 1.0f);
        }
    }
};

/* st: NULL, or [rows, 2] floats where each row's max and sum of exp stay
 * for the gradient (the compiler's ir_stats_at) */
template <int LT, int XT>
static inline void mp_cu_cross_entropy(void *loss, const void *x, const void *labels, int ldt,
                                       int64_t rows, int64_t C, int64_t ignore, float eps,
                                       float *st = NULL)
{
    MpAcc *part = (MpAcc *)mp_cu_ws(2 * rows * (int64_t)sizeof(MpAcc));
    MpCuCeRows<XT> f = {part, x, labels, ldt, rows, C, ignore, eps, st};
    mp_cu_rows("cross_entropy", rows, mp_cu_row_threads(C), f);
    mp_cu_finish<LT>("cross_entropy", loss, part, rows, 0.0f);
}

/* count[0] = the rows whose label is not ignored (one block) */
struct MpCuCeCount {
    float *count;
    const void *labels;
    int ldt;
    int64_t rows, ignore;
    MP_HD void operator()(int64_t row, const MpCuTeam &t) const
    {
        int64_t c = 0;
        (void)row;
        for (int64_t i = t.tid; i < rows; i += t.nt)
            c += mp_ld_id(labels, ldt, i) != ignore;
        c = t.count(c);
        if (t.tid == 0)
            count[0] = (float)c;
    }
};

template <int DXT, int DLT, int XT>
struct MpCuCeGrad {
    void *dx;
    const void *dl, *x, *labels;
    int ldt;
    const float *count;
    int64_t C, ignore;
    float eps;
    const float *st;               /* NULL, or the forward's m and s of each row */
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        float m, s, g = mp_cu_ld(dl, DLT, 0) / count[0];
        int64_t lab = mp_ld_id(labels, ldt, r);
        if (st)   /* the forward's, the same bits (the same blocks' sums) */
            m = st[2 * r], s = st[2 * r + 1];
        else
            mp_cu_row_stats<XT>(t, x, r * C, C, &m, &s);
        if (lab == ignore)
            for (int64_t j = t.tid; j < C; j += t.nt)
                mp_cu_st(dx, DXT, r * C + j, 0.0f);
        else
            mp_cu_ce_grad_put(dx, DXT, x, XT, r * C, C, lab, m, s, g, eps, t.tid, t.nt);
    }
};

/* st: NULL, or the rows' max and sum of exp mp_cu_cross_entropy kept: one
 * pass over the logits in place of three */
template <int DXT, int DLT, int XT>
static inline void mp_cu_cross_entropy_grad(void *dx, const void *dl, const void *x,
                                            const void *labels, int ldt, int64_t rows, int64_t C,
                                            int64_t ignore, float eps, const float *st = NULL)
{
    float *count = (float *)mp_cu_ws((int64_t)sizeof(float));
    MpCuCeCount c = {count, labels, ldt, rows, ignore};
    MpCuCeGrad<DXT, DLT, XT> f = {dx, dl, x, labels, ldt, count, C, ignore, eps, st};
    mp_cu_rows("cross_entropy_grad", 1, 256, c);
    mp_cu_rows("cross_entropy_grad", rows, mp_cu_row_threads(C), f);
}

template <int XT>
struct MpCuAccuracyRows {
    MpAcc *part;
    const void *x, *labels;
    int ldt;
    int64_t C;
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        float v;
        int64_t at = mp_cu_argmax_part(x, XT, r * C, C, t.tid, t.nt, &v);
        at = t.argmax(v, at);
        if (t.tid == 0)
            part[r] = mp_cu_acc_of(at == mp_ld_id(labels, ldt, r) ? 1.0f : 0.0f);
    }
};

template <int OT, int XT>
static inline void mp_cu_accuracy(void *out, const void *x, const void *labels, int ldt, int64_t rows,
                                  int64_t C)
{
    MpAcc *part = (MpAcc *)mp_cu_ws(rows * (int64_t)sizeof(MpAcc));
    MpCuAccuracyRows<XT> f = {part, x, labels, ldt, C};
    mp_cu_rows("accuracy", rows, mp_cu_row_threads(C), f);
    mp_cu_finish<OT>("accuracy", out, part, rows, (float)rows);
}

template <int PT, int TT>
struct MpCuMseChunks {
    MpAcc *part;
    const void *p, *t;
    int64_t n;
    MP_HD void operator()(int64_t w) const { part[w] = mp_cu_mse_chunk(p, PT, t, TT, n, w); }
};

template <int LT, int PT, int TT>
static inline void mp_cu_mse(void *loss, const void *pred, const void *target, int64_t n)
{
    int64_t nc = (n + MP_CHUNK - 1) / MP_CHUNK;
    MpAcc *part = (MpAcc *)mp_cu_ws(nc * (int64_t)sizeof(MpAcc));
    MpCuMseChunks<PT, TT> f = {part, pred, target, n};
    mp_cu_each("mse", nc, f);
    mp_cu_finish<LT>("mse", loss, part, nc, (float)n);
}

template <int DXT, int DLT, int PT, int TT>
struct MpCuMseGrad {
    void *dx;
    const void *dl, *p, *t;
    int64_t n;
    MP_HD void operator()(int64_t i) const
    {
        float g = 2.0f * mp_cu_ld(dl, DLT, 0) / (float)n;
        mp_cu_st(dx, DXT, i, g * (mp_cu_ld(p, PT, i) - mp_cu_ld(t, TT, i)));
    }
};

template <int DXT, int DLT, int PT, int TT>
static inline void mp_cu_mse_grad(void *dx, const void *dl, const void *pred, const void *target,
                                  int64_t n)
{
    MpCuMseGrad<DXT, DLT, PT, TT> f = {dx, dl, pred, target, n};
    mp_cu_each("mse_grad", n, f);
}

/* ---- products ------------------------------------------------------------------------ */

template <int YT, int AT, int BT>
static inline void mp_cu_matmul(void *y, const void *a, const void *b, int64_t batch, int64_t M,
                                int64_t N, int64_t K, int ta, int tb, int64_t stride_a,
                                int64_t stride_b)
{
    MpCuGemm g = mp_cu_gemm_of(ta, tb, M, N, K, 1.0f, a, AT, ta ? M : K, b, BT, tb ? K : N, 0.0f,
                               y, YT, N);
    g.batch = batch;
    g.sa = stride_a;
    g.sb = stride_b;
    g.sc = M * N;
    mp_cu_gemm(&g);
}

template <int YT, int AT, int BT>
static inline void mp_cu_matmul_tn(void *y, const void *a, const void *b, int64_t R, int64_t K,
                                   int64_t N, float beta)
{
    MpCuGemm g = mp_cu_gemm_of(1, 0, K, N, R, 1.0f, a, AT, K, b, BT, N, beta, y, YT, N);
    mp_cu_gemm(&g);
}

/* y[i] = b[i / S % C]: a bias put in place before a product adds into it
 * (beta = 1), so that the result is rounded once. */
template <int YT, int BT>
struct MpCuFillBias {
    void *y;
    const void *b;
    int64_t C, S;
    MP_HD void operator()(int64_t i) const { mp_cu_st(y, YT, i, mp_cu_ld(b, BT, i / S % C)); }
};

template <int YT, int XT, int WT, int BT>
static inline void mp_cu_linear(void *y, const void *x, const void *w, const void *bias,
                                int64_t M, int64_t N, int64_t K)
{
    MpCuView rows = {2, {M, N}, {0, 1}};   /* y's rows start as the bias, by words where they can */
    if (bias && !(YT == BT && mp_cu_gather_words("linear", y, bias, mp_cu_dt_size(BT), rows))) {
        MpCuFillBias<YT, BT> f = {y, bias, N, 1};
        mp_cu_each("linear", M * N, f);
    }
    MpCuGemm g = mp_cu_gemm_of(0, 1, M, N, K, 1.0f, x, XT, K, w, WT, K, bias ? 1.0f : 0.0f, y, YT,
                               N);
    mp_cu_gemm(&g);
}

/* ---- convolution: im2col, then products per group; depthwise directly ----------------- */

template <int CT, int XT>
struct MpCuIm2col {
    void *col;
    const void *x;
    MpConv v;
    int64_t N;
    int by_image;
    MP_HD void operator()(int64_t i) const { mp_cu_st(col, CT, i, mp_cu_im2col_at(&v, N, x, XT, i, by_image)); }
};

/* bias[c] (conv_transpose2d; NULL: none) of element i of [N, C, H, W] */
static inline MP_HD float mp_cu_plane_bias(const MpConv *v, const void *bias, int bdt, int64_t i)
{
    return bias ? mp_cu_ld(bias, bdt, i / (v->H * v->W) % v->C) : 0.0f;
}

template <int DXT, int BT>
struct MpCuCol2im {
    void *dx;
    const float *dcol;
    const void *bias;
    MpConv v;
    MP_HD void operator()(int64_t i) const
    {
        mp_cu_st(dx, DXT, i, mp_cu_col2im_at(&v, dcol, MP_F32, i) + mp_cu_plane_bias(&v, bias, BT, i));
    }
};

template <int YT, int XT, int WT, int BT>
struct MpCuDepthwise {
    void *y;
    const void *x, *w, *bias;
    MpConv v;
    MP_HD void operator()(int64_t i) const { mp_cu_st(y, YT, i, mp_cu_depthwise_at(&v, x, XT, w, WT, bias, BT, i)); }
};

template <int DXT, int DYT, int WT, int BT>
struct MpCuDepthwiseDx {
    void *dx;
    const void *dy, *w, *bias;
    MpConv v;
    MP_HD void operator()(int64_t i) const
    {
        mp_cu_st(dx, DXT, i, mp_cu_depthwise_dx_at(&v, dy, DYT, w, WT, i) + mp_cu_plane_bias(&v, bias, BT, i));
    }
};

template <int DYT, int XT>
struct MpCuDepthwiseDwPart {
    float *part;
    const void *dy, *x;
    MpConv v;
    int64_t N;
    MP_HD void operator()(int64_t i) const { part[i] = mp_cu_depthwise_dw_part(&v, N, dy, DYT, x, XT, i); }
};

/* dw[i] = the N parts of weight element i summed in order (+ beta dw). */
template <int DWT>
struct MpCuDepthwiseDwSum {
    void *dw;
    const float *part;
    int64_t N;
    float beta;
    MP_HD void operator()(int64_t i) const
    {
        MpAcc s = mp_acc_zero();
        for (int64_t n = 0; n < N; n++) mp_acc_add(&s, part[i * N + n]);
        float r = mp_acc_get(s);
        mp_cu_st(dw, DWT, i, beta != 0.0f ? r + beta * mp_cu_ld(dw, DWT, i) : r);
    }
};

/* Element e of a device array of type dt. */
static inline const void *mp_cu_elem(const void *p, int dt, int64_t e)
{
    return p ? (const char *)p + e * mp_cu_dt_size(dt) : NULL;
}

/* y[n] = w_g [F/G, C/G kh kw] @ col_g[n] [C/G kh kw, OH OW] (+ bias), one
 * batched product per group */
template <int YT, int XT, int WT, int BT>
static inline void mp_cu_conv2d(void *y, const void *x, const void *w, const void *bias, int64_t N,
                                MpConv v)
{
    int64_t ohw = v.OH * v.OW;
    if (mp_conv_depthwise(&v)) {
        MpCuDepthwise<YT, XT, WT, BT> d = {y, x, w, bias, v};
        mp_cu_each("conv2d", N * v.F * ohw, d);
        return;
    }
    int64_t ckk = v.C * v.kh * v.kw, gk = ckk / v.G, fg = v.F / v.G;
    MpCuIm2col<XT, XT> f = {mp_cu_ws(N * ckk * ohw * mp_cu_dt_size(XT)), x, v, N, 1};
    mp_cu_each("conv2d", N * ckk * ohw, f);
    if (bias) {
        MpCuFillBias<YT, BT> b = {y, bias, v.F, ohw};
        mp_cu_each("conv2d", N * v.F * ohw, b);
    }
    for (int64_t g = 0; g < v.G; g++) {
        MpCuGemm m = mp_cu_gemm_of(0, 0, fg, ohw, gk, 1.0f, mp_cu_elem(w, WT, g * fg * gk), WT, gk,
                                   mp_cu_elem(f.col, XT, g * gk * ohw), XT, ohw, bias ? 1.0f : 0.0f,
                                   (void *)mp_cu_elem(y, YT, g * fg * ohw), YT, ohw);
        m.batch = N;
        m.sb = ckk * ohw;
        m.sc = v.F * ohw;
        mp_cu_gemm(&m);
    }
}

/* dcol_g[n] = w_g^T [C/G kh kw, F/G] @ dy_g[n] [F/G, OH OW] in f32, then
 * col2im sums it into dx (+ bias[c] when not NULL): conv2d's input
 * gradient, and conv_transpose2d's forward */
template <int DXT, int DYT, int WT, int BT>
static inline void mp_cu_conv_adjoint(const char *name, void *dx, const void *dy, const void *w,
                                      const void *bias, int64_t N, MpConv v)
{
    int64_t ohw = v.OH * v.OW, nx = N * v.C * v.H * v.W;
    if (mp_conv_depthwise(&v)) {
        MpCuDepthwiseDx<DXT, DYT, WT, BT> d = {dx, dy, w, bias, v};
        mp_cu_each(name, nx, d);
        return;
    }
    int64_t ckk = v.C * v.kh * v.kw, gk = ckk / v.G, fg = v.F / v.G;
    MpCuCol2im<DXT, BT> f = {dx, (const float *)mp_cu_ws(N * ckk * ohw * 4), bias, v};
    for (int64_t g = 0; g < v.G; g++) {
        MpCuGemm m = mp_cu_gemm_of(1, 0, gk, ohw, fg, 1.0f, mp_cu_elem(w, WT, g * fg * gk), WT, gk,
                                   mp_cu_elem(dy, DYT, g * fg * ohw), DYT, ohw, 0.0f,
                                   (void *)mp_cu_elem(f.dcol, MP_F32, g * gk * ohw), MP_F32, ohw);
        m.batch = N;
        m.sb = v.F * ohw;
        m.sc = ckk * ohw;
        mp_cu_gemm(&m);
    }
    mp_cu_each(name, nx, f);
}

template <int DXT, int DYT, int WT>
static inline void mp_cu_conv2d_dx(void *dx, const void *dy, const void *w, int64_t N, MpConv v)
{
    mp_cu_conv_adjoint<DXT, DYT, WT, MP_F32>("conv2d_dx", dx, dy, w, NULL, N, v);
}

/* conv_transpose2d: the adjoint of the conv2d v from y to x, + bias (its
 * gradients are that conv2d and its weight gradient, see emit_cuda_ops.c) */
template <int YT, int XT, int WT, int BT>
static inline void mp_cu_conv_transpose2d(void *y, const void *x, const void *w, const void *bias,
                                          int64_t N, MpConv v)
{
    mp_cu_conv_adjoint<YT, XT, WT, BT>("conv_transpose2d", y, x, w, bias, N, v);
}

/* dw_g [F/G, C/G kh kw] = dy_g as [F/G, N OH OW] @ (x's im2col, group g's
 * rows of [C kh kw, N OH OW])^T + beta dw; depthwise: per (f, tap, image)
 * sums, then the images' in order */
template <int DWT, int DYT, int XT>
static inline void mp_cu_conv2d_dw(void *dw, const void *dy, const void *x, int64_t N, MpConv v,
                                   float beta)
{
    int64_t ohw = v.OH * v.OW, ckk = v.C * v.kh * v.kw, gk = ckk / v.G, fg = v.F / v.G;
    if (mp_conv_depthwise(&v)) {
        int64_t nw = v.F * v.kh * v.kw;
        MpCuDepthwiseDwPart<DYT, XT> p = {(float *)mp_cu_ws(nw * N * 4), dy, x, v, N};
        mp_cu_each("conv2d_dw", nw * N, p);
        MpCuDepthwiseDwSum<DWT> s = {dw, p.part, N, beta};
        mp_cu_each("conv2d_dw", nw, s);
        return;
    }
    int64_t ncol = ckk * N * ohw, ndy = v.F * N * ohw;
    int64_t cbytes = mp_cu_round_up(ncol * mp_cu_dt_size(XT));
    unsigned char *ws = mp_cu_ws(cbytes + ndy * mp_cu_dt_size(DYT));
    void *dyp = ws ? ws + cbytes : NULL;
    MpCuView d;                                       /* dy [N][F][ohw] as [F][N][ohw] */
    d.rank = 0;
    mp_cu_view_push(&d, v.F, ohw);
    mp_cu_view_push(&d, N, v.F * ohw);
    mp_cu_view_push(&d, ohw, 1);
    MpCuIm2col<XT, XT> f = {ws, x, v, N, 0};
    mp_cu_each("conv2d_dw", ncol, f);
    mp_cu_gather<DYT, DYT>(dyp, dy, d);
    for (int64_t g = 0; g < v.G; g++) {
        MpCuGemm m = mp_cu_gemm_of(0, 1, fg, gk, N * ohw, 1.0f, mp_cu_elem(dyp, DYT, g * fg * N * ohw), DYT,
                                   N * ohw, mp_cu_elem(ws, XT, g * gk * N * ohw), XT, N * ohw, beta,
                                   (void *)mp_cu_elem(dw, DWT, g * fg * gk), DWT, gk);
        mp_cu_gemm(&m);
    }
}

/* ---- pooling ------------------------------------------------------------------------------ */

template <int YT, int XT>
struct MpCuPool {
    void *y;
    const void *x;
    MpCuImg g;
    int is_max;
    MP_HD void operator()(int64_t i) const
    {
        int64_t at;
        mp_cu_st(y, YT, i, is_max ? mp_cu_pool_max(&g, x, XT, i, &at) : mp_cu_pool_avg(&g, x, XT, i));
    }
};

template <int DXT, int DYT, int XT>
struct MpCuPoolGrad {
    void *dx;
    const void *dy, *x;
    MpCuImg g;
    int is_max;
    MP_HD void operator()(int64_t i) const
    {
        mp_cu_st(dx, DXT, i, mp_cu_pool_grad_at(&g, dy, DYT, x, XT, i, is_max));
    }
};

/* The image of a pooling: torch's padding, and avg_pool2d's count_include_pad. */
static inline MpCuImg mp_cu_pool_img(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k,
                                     int64_t stride, int64_t pad, int incl)
{
    MpCuImg g = mp_cu_img(N, C, H, W, k, stride, pad);
    g.incl = incl;
    return g;
}

template <int YT, int XT>
static inline void mp_cu_max_pool2d(void *y, const void *x, int64_t N, int64_t C, int64_t H,
                                    int64_t W, int64_t k, int64_t stride, int64_t pad)
{
    MpCuPool<YT, XT> f = {y, x, mp_cu_pool_img(N, C, H, W, k, stride, pad, 1), 1};
    mp_cu_each("max_pool2d", N * C * f.g.OH * f.g.OW, f);
}

template <int YT, int XT>
static inline void mp_cu_avg_pool2d(void *y, const void *x, int64_t N, int64_t C, int64_t H,
                                    int64_t W, int64_t k, int64_t stride, int64_t pad, int incl)
{
    MpCuPool<YT, XT> f = {y, x, mp_cu_pool_img(N, C, H, W, k, stride, pad, incl), 0};
    mp_cu_each("avg_pool2d", N * C * f.g.OH * f.g.OW, f);
}

template <int DXT, int DYT, int XT>
static inline void mp_cu_max_pool2d_grad(void *dx, const void *dy, const void *x, int64_t N,
                                         int64_t C, int64_t H, int64_t W, int64_t k, int64_t stride,
                                         int64_t pad)
{
    MpCuPoolGrad<DXT, DYT, XT> f = {dx, dy, x, mp_cu_pool_img(N, C, H, W, k, stride, pad, 1), 1};
    mp_cu_each("max_pool2d_grad", N * C * H * W, f);
}

template <int DXT, int DYT>
static inline void mp_cu_avg_pool2d_grad(void *dx, const void *dy, int64_t N, int64_t C, int64_t H,
                                         int64_t W, int64_t k, int64_t stride, int64_t pad, int incl)
{
    MpCuPoolGrad<DXT, DYT, MP_F32> f = {dx, dy, NULL, mp_cu_pool_img(N, C, H, W, k, stride, pad, incl), 0};
    mp_cu_each("avg_pool2d_grad", N * C * H * W, f);
}

/* ---- embedding -------------------------------------------------------------------------------- */

template <int YT, int WT>
struct MpCuEmbedding {
    void *y;
    const void *ids;
    int idt;
    const void *w;
    int64_t vocab, dim;
    MP_HD void operator()(int64_t i) const
    {
        int64_t id = mp_ld_id(ids, idt, i / dim);
        mp_cu_st(y, YT, i, id >= 0 && id < vocab ? mp_cu_ld(w, WT, id * dim + i % dim) : NAN);
    }
};

template <int YT, int WT>
static inline void mp_cu_embedding(void *y, const void *ids, int idt, const void *w, int64_t n,
                                   int64_t vocab, int64_t dim)
{
    MpCuEmbedding<YT, WT> f = {y, ids, idt, w, vocab, dim};
    mp_cu_each("embedding", n * dim, f);
}

/* Step 1 of the weight gradient: a block per id finds its rank. */
struct MpCuIdRank {
    const void *ids;
    int idt;
    int64_t n;
    int32_t *order, *sorted;
    MP_HD void operator()(int64_t i, const MpCuTeam &t) const
    {
        int64_t r = t.count(mp_cu_id_rank_part(ids, idt, n, i, t.tid, t.nt));
        if (t.tid == 0) {
            order[r] = (int32_t)i;
            sorted[r] = (int32_t)mp_ld_id(ids, idt, i);
        }
    }
};

/* Step 2: each element of dw, its id's segment summed. */
template <int DWT, int DYT>
struct MpCuEmbeddingDw {
    void *dw;
    const void *dy;
    const int32_t *order, *sorted;
    int64_t n, dim;
    MP_HD void operator()(int64_t i) const
    {
        mp_cu_st(dw, DWT, i, mp_cu_embedding_dw_at(dy, DYT, order, sorted, n, dim, i));
    }
};

template <int DWT, int DYT>
static inline void mp_cu_embedding_dw(void *dw, const void *dy, const void *ids, int idt, int64_t n,
                                      int64_t vocab, int64_t dim)
{
    int32_t *order = (int32_t *)mp_cu_ws(2 * n * (int64_t)sizeof(int32_t));
    int32_t *sorted = order ? order + n : NULL;
    MpCuIdRank rank = {ids, idt, n, order, sorted};
    MpCuEmbeddingDw<DWT, DYT> f = {dw, dy, order, sorted, n, dim};
    mp_cu_rows("embedding_dw_sort", n, mp_cu_row_threads(n), rank);
    mp_cu_each("embedding_dw", vocab * dim, f);
}

/* ---- normalisation: a block per row (layer norm) or channel (batch norm) -------------------- */

/* Mean and 1/std of one set: the mean, then the squared deviations from it. */
template <int XT>
static MP_HD void mp_cu_norm_moments(const MpCuTeam &t, const MpCuNorm *g, const void *x,
                                     int64_t base, float eps, float *mean, float *rstd, float *sq)
{
    float s = mp_acc_get(t.sum(mp_cu_norm_sum(g, x, XT, base, 0.0f, t.tid, t.nt, 0)));
    float q = mp_acc_get(t.sum(mp_cu_norm_sum(g, x, XT, base, s / (float)g->count, t.tid, t.nt, 1)));
    mp_cu_norm_stats(s, q, g->count, eps, mean, rstd);
    if (sq)
        *sq = q;
}

/* dx of one set: the two sums of the gradient, then dx. */
template <int DXT, int DYT, int XT, int WT>
static MP_HD void mp_cu_norm_dx(const MpCuTeam &t, const MpCuNorm *g, void *dx, const void *dy,
                                const void *x, const void *w, int64_t w_per_elem, int64_t wi,
                                int64_t base, float eps)
{
    float mean, rstd;
    MpAcc s1, s2;
    mp_cu_norm_moments<XT>(t, g, x, base, eps, &mean, &rstd, NULL);
    mp_cu_norm_grad_sums(g, dy, DYT, x, XT, w, WT, w_per_elem, wi, base, mean, rstd, t.tid, t.nt,
                         &s1, &s2);
    float m1 = mp_acc_get(t.sum(s1)), m2 = mp_acc_get(t.sum(s2));
    mp_cu_norm_grad_put(g, dx, DXT, dy, DYT, x, XT, w, WT, w_per_elem, wi, base, mean, rstd, m1, m2,
                        t.tid, t.nt);
}

template <int YT, int XT, int WT, int BT>
struct MpCuLayerNorm {
    void *y;
    const void *x, *w, *b;
    int64_t dim;
    float eps;
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        MpCuNorm g = {dim, dim, 0};
        float mean, rstd;
        mp_cu_norm_moments<XT>(t, &g, x, r * dim, eps, &mean, &rstd, NULL);
        mp_cu_norm_put(&g, y, YT, x, XT, w, WT, b, BT, 1, 0, r * dim, mean, rstd, t.tid, t.nt);
    }
};

template <int YT, int XT, int WT, int BT>
static inline void mp_cu_layer_norm(void *y, const void *x, const void *w, const void *b,
                                    int64_t rows, int64_t dim, float eps)
{
    MpCuLayerNorm<YT, XT, WT, BT> f = {y, x, w, b, dim, eps};
    mp_cu_rows("layer_norm", rows, mp_cu_row_threads(dim), f);
}

template <int DXT, int DYT, int XT, int WT>
struct MpCuLayerNormDx {
    void *dx;
    const void *dy, *x, *w;
    int64_t dim;
    float eps;
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        MpCuNorm g = {dim, dim, 0};
        mp_cu_norm_dx<DXT, DYT, XT, WT>(t, &g, dx, dy, x, w, 1, 0, r * dim, eps);
    }
};

template <int DXT, int DYT, int XT, int WT>
static inline void mp_cu_layer_norm_dx(void *dx, const void *dy, const void *x, const void *w,
                                       int64_t rows, int64_t dim, float eps)
{
    MpCuLayerNormDx<DXT, DYT, XT, WT> f = {dx, dy, x, w, dim, eps};
    mp_cu_rows("layer_norm_dx", rows, mp_cu_row_threads(dim), f);
}

/* Per-row (mean, rstd) into st, then a block per 32 columns sums dy * xhat. */
template <int XT>
struct MpCuRowStats {
    float *st;
    const void *x;
    int64_t dim;
    float eps;
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        MpCuNorm g = {dim, dim, 0};
        float mean, rstd;
        mp_cu_norm_moments<XT>(t, &g, x, r * dim, eps, &mean, &rstd, NULL);
        if (t.tid == 0) {
            st[2 * r] = mean;
            st[2 * r + 1] = rstd;
        }
    }
};

/* dw of 32 columns over a slice of rows per block: block b takes columns
 * 32 (b % groups).. and rows slice b / groups (per rows each); lane l of
 * every warp reads column 32 g + l (a warp reads 32 neighbours of one
 * row: coalesced), warp w rows r0 + w, r0 + w + warps...; the warps' sums
 * of each lane added in order. One slice: dw directly, else slice k's sums
 * into part[k dim + column] for MpCuNormDwJoin. One thread (the old
 * stand-in) does each column in turn. */
template <int DWT, int DYT, int XT>
struct MpCuLayerNormDw {
    static constexpr int most = MP_CU_COL_MOST;   /* mp_cu_col_threads */
    void *dw;
    MpAcc *part;
    const void *dy, *x;
    const float *st;
    int64_t rows, dim, groups, per;
    float beta;
    MP_HD void operator()(int64_t b, const MpCuTeam &t) const
    {
        int lanes = t.nt >= 32 ? 32 : 1;
        int64_t g = b % groups, k = b / groups, r0 = k * per, r1 = r0 + per < rows ? r0 + per : rows;
        for (int c = t.tid % lanes; c < 32; c += lanes) {
            int64_t col = g * 32 + c;
            MpAcc s = col < dim ? mp_cu_ln_dw_part(dy, DYT, x, XT, st, r1, dim, col, r0 + t.tid / lanes,
                                                   t.nt / lanes) : mp_acc_zero();
            s = t.sum_cols(s, 1);
            if (t.tid >= lanes || col >= dim)
                continue;
            if (part)
                part[k * dim + col] = s;
            else
                mp_cu_st_beta(dw, DWT, col, mp_acc_get(s), beta);
        }
    }
};

/* dw[j] from the slices' sums, in slice order */
template <int DWT>
struct MpCuNormDwJoin {
    void *dw;
    const MpAcc *part;
    int64_t dim, split;
    float beta;
    MP_HD void operator()(int64_t j) const
    {
        MpAcc s = mp_acc_zero();
        for (int64_t k = 0; k < split; k++)
            s = mp_acc_join(s, part[k * dim + j]);
        mp_cu_st_beta(dw, DWT, j, mp_acc_get(s), beta);
    }
};

/* Slices of rows of a norm's weight gradient: 256 rows each, at most 64: a
 * function of the rows only, so dw is the same on every GPU (GPT-2 small's
 * 8192 rows: 32 slices of its 24 column groups, 768 blocks, where one
 * slice would be 24 blocks on 132 SMs). */
static inline int64_t mp_cu_norm_dw_slices(int64_t rows)
{
    int64_t k = rows / 256;
    return k < 1 ? 1 : k > 64 ? 64 : k;
}

/* The column pass of a norm's weight gradient from per-row (mean, rstd) in
 * st: layer_norm's, and rms_norm's with mean 0; the slices' sums joined in
 * a second pass. */
template <int DWT, int DYT, int XT>
static inline void mp_cu_norm_dw_cols(const char *name, void *dw, const void *dy, const void *x,
                                      const float *st, int64_t rows, int64_t dim, float beta)
{
    int64_t groups = (dim + 31) / 32, split = mp_cu_norm_dw_slices(rows), per = (rows + split - 1) / split;
    MpAcc *part = NULL;
    if (split > 1) {               /* the work space after st (rows x 2 floats) */
        unsigned char *ws = mp_cu_ws(mp_cu_round_up(rows * 2 * (int64_t)sizeof(float)) +
                                     split * dim * (int64_t)sizeof(MpAcc));
        part = ws ? (MpAcc *)(ws + mp_cu_round_up(rows * 2 * (int64_t)sizeof(float))) : NULL;
    }
    MpCuLayerNormDw<DWT, DYT, XT> b = {dw, part, dy, x, st, rows, dim, groups, per, beta};
    mp_cu_rows(name, groups * split, mp_cu_col_threads(per), b);
    if (split > 1) {
        MpCuNormDwJoin<DWT> j = {dw, part, dim, split, beta};
        mp_cu_each(name, dim, j);
    }
}

template <int DWT, int DYT, int XT>
static inline void mp_cu_layer_norm_dw(void *dw, const void *dy, const void *x, int64_t rows,
                                       int64_t dim, float eps, float beta)
{
    float *st = (float *)mp_cu_ws(rows * 2 * (int64_t)sizeof(float));
    MpCuRowStats<XT> a = {st, x, dim, eps};
    mp_cu_rows("layer_norm_dw", rows, mp_cu_row_threads(dim), a);
    mp_cu_norm_dw_cols<DWT, DYT, XT>("layer_norm_dw", dw, dy, x, st, rows, dim, beta);
}

/* The running statistics after a training step: unbiased variance, as
 * torch (q the sum of squared deviations of count values). */
static MP_HD void mp_cu_bn_running(float *rmean, float *rvar, float mean, float q, int64_t count,
                                   float momentum)
{
    float unbiased = count > 1 ? q / (float)(count - 1) : q / (float)count;
    *rmean = (1.0f - momentum) * *rmean + momentum * mean;
    *rvar = (1.0f - momentum) * *rvar + momentum * unbiased;
}

/* Batch norm over x [N, C, S]: channel c is the set; the running statistics
 * are updated (unbiased variance, as torch) when training, used otherwise. */
template <int YT, int XT, int WT, int BT>
struct MpCuBatchNorm {
    void *y;
    const void *x, *w, *b;
    float *rmean, *rvar;
    int64_t N, C, S;
    float momentum, eps;
    int training;
    MP_HD void operator()(int64_t c, const MpCuTeam &t) const
    {
        MpCuNorm g = {N * S, S, C * S};
        float mean, rstd, q;
        if (training) {
            mp_cu_norm_moments<XT>(t, &g, x, c * S, eps, &mean, &rstd, &q);
            if (t.tid == 0)
                mp_cu_bn_running(rmean + c, rvar + c, mean, q, g.count, momentum);
        } else {
            mean = rmean[c];
            rstd = 1.0f / sqrtf(rvar[c] + eps);
        }
        mp_cu_norm_put(&g, y, YT, x, XT, w, WT, b, BT, 0, c, c * S, mean, rstd, t.tid, t.nt);
    }
};

/* The same for S < 32, read and written down columns (MpCuChan): a block
 * per G channels, each lane its column's rows. */
template <int YT, int XT, int WT, int BT>
struct MpCuBatchNormCols {
    static constexpr int most = MP_CU_COL_MOST;   /* mp_cu_col_threads */
    void *y;
    const void *x, *w, *b;
    float *rmean, *rvar;
    MpCuChan h;
    float momentum, eps;
    int training;
    MP_HD void operator()(int64_t blk, const MpCuTeam &t) const
    {
        int g0, g1;
        mp_cu_chan_mine(t, &h, &g0, &g1);
        for (int g = g0; g <= g1; g++) {
            int64_t c = blk * h.G + g, k0, k1, r, step, W = h.C * h.S;
            float mean = 0.0f, rstd = 1.0f, q;
            if (training) {
                mp_cu_chan_moments<XT>(t, &h, blk, g, x, eps, &mean, &rstd, &q);
                if (mp_cu_chan_lead(t, &h, blk, g))
                    mp_cu_bn_running(rmean + c, rvar + c, mean, q, h.N * h.S, momentum);
            } else if (mp_cu_chan_ok(&h, blk, g)) {
                mean = rmean[c];
                rstd = 1.0f / sqrtf(rvar[c] + eps);
            }
            mp_cu_chan_cols(t, &h, blk, g, &k0, &k1, &r, &step);
            if (k0 == k1)
                continue;
            float sc = rstd * (w ? mp_cu_ld(w, WT, c) : 1.0f), sh = b ? mp_cu_ld(b, BT, c) : 0.0f;
            for (int64_t k = k0; k < k1; k++)
                for (int64_t i = r; i < h.N; i += step)
                    mp_cu_st(y, YT, i * W + k, (mp_cu_ld(x, XT, i * W + k) - mean) * sc + sh);
        }
    }
};

template <int YT, int XT, int WT, int BT>
static inline void mp_cu_batch_norm(void *y, const void *x, const void *w, const void *b,
                                    float *rmean, float *rvar, int64_t N, int64_t C, int64_t S,
                                    float momentum, float eps, int training)
{
    if (S < 32) {
        MpCuBatchNormCols<YT, XT, WT, BT> f = {y, x, w, b, rmean, rvar, mp_cu_chan(N, C, S), momentum,
                                               eps, training};
        mp_cu_rows("batch_norm", (C + f.h.G - 1) / f.h.G, mp_cu_col_threads(N), f);
        return;
    }
    MpCuBatchNorm<YT, XT, WT, BT> f = {y, x, w, b, rmean, rvar, N, C, S, momentum, eps, training};
    mp_cu_rows("batch_norm", C, 256, f);
}

template <int DXT, int DYT, int XT, int WT>
struct MpCuBatchNormDx {
    void *dx;
    const void *dy, *x, *w;
    int64_t N, C, S;
    float eps;
    MP_HD void operator()(int64_t c, const MpCuTeam &t) const
    {
        MpCuNorm g = {N * S, S, C * S};
        mp_cu_norm_dx<DXT, DYT, XT, WT>(t, &g, dx, dy, x, w, 0, c, c * S, eps);
    }
};

/* The same for S < 32 down columns: the moments, the two sums of the
 * gradient (mp_cu_norm_dx's), then dx, each lane its column's rows. */
template <int DXT, int DYT, int XT, int WT>
struct MpCuBatchNormDxCols {
    static constexpr int most = MP_CU_COL_MOST;   /* mp_cu_col_threads */
    void *dx;
    const void *dy, *x, *w;
    MpCuChan h;
    float eps;
    MP_HD void operator()(int64_t blk, const MpCuTeam &t) const
    {
        int g0, g1;
        mp_cu_chan_mine(t, &h, &g0, &g1);
        for (int g = g0; g <= g1; g++) {
            int64_t c = blk * h.G + g, k0, k1, r, step, W = h.C * h.S, n = h.N * h.S;
            float mean, rstd, q, wv = w && mp_cu_chan_ok(&h, blk, g) ? mp_cu_ld(w, WT, c) : 1.0f;
            mp_cu_chan_moments<XT>(t, &h, blk, g, x, eps, &mean, &rstd, &q);
            float m1 = mp_acc_get(mp_cu_chan_sum_of<DYT, XT>(t, &h, blk, g, MP_COL_GY, dy, x, mean, rstd, wv));
            float m2 = mp_acc_get(mp_cu_chan_sum_of<DYT, XT>(t, &h, blk, g, MP_COL_GX, dy, x, mean, rstd, wv));
            m1 /= (float)n;
            m2 /= (float)n;
            mp_cu_chan_cols(t, &h, blk, g, &k0, &k1, &r, &step);
            for (int64_t k = k0; k < k1; k++)
                for (int64_t i = r; i < h.N; i += step)
                    mp_cu_norm_dx_at(dx, DXT, dy, DYT, x, XT, i * W + k, wv, mean, rstd, m1, m2);
        }
    }
};

template <int DXT, int DYT, int XT, int WT>
static inline void mp_cu_batch_norm_dx(void *dx, const void *dy, const void *x, const void *w,
                                       int64_t N, int64_t C, int64_t S, float eps)
{
    if (S < 32) {
        MpCuBatchNormDxCols<DXT, DYT, XT, WT> f = {dx, dy, x, w, mp_cu_chan(N, C, S), eps};
        mp_cu_rows("batch_norm_dx", (C + f.h.G - 1) / f.h.G, mp_cu_col_threads(N), f);
        return;
    }
    MpCuBatchNormDx<DXT, DYT, XT, WT> f = {dx, dy, x, w, N, C, S, eps};
    mp_cu_rows("batch_norm_dx", C, 256, f);
}

template <int DWT, int DYT, int XT>
struct MpCuBatchNormDw {
    void *dw;
    const void *dy, *x;
    int64_t N, C, S;
    float eps, beta;
    MP_HD void operator()(int64_t c, const MpCuTeam &t) const
    {
        MpCuNorm g = {N * S, S, C * S};
        float mean, rstd;
        mp_cu_norm_moments<XT>(t, &g, x, c * S, eps, &mean, &rstd, NULL);
        MpAcc s = t.sum(mp_cu_norm_dw_part(&g, dy, DYT, x, XT, c * S, mean, rstd, t.tid, t.nt));
        if (t.tid == 0)
            mp_cu_st_beta(dw, DWT, c, mp_acc_get(s), beta);
    }
};

/* The same for S < 32, read down columns (MpCuChan): a block per G
 * channels; their mean, squared deviations and dy xhat in three passes. */
template <int DWT, int DYT, int XT>
struct MpCuBatchNormDwCols {
    static constexpr int most = MP_CU_COL_MOST;   /* mp_cu_col_threads */
    void *dw;
    const void *dy, *x;
    MpCuChan h;
    float eps, beta;
    MP_HD void operator()(int64_t b, const MpCuTeam &t) const
    {
        int g0, g1;
        mp_cu_chan_mine(t, &h, &g0, &g1);
        for (int g = g0; g <= g1; g++) {
            float mean, rstd, q;
            mp_cu_chan_moments<XT>(t, &h, b, g, x, eps, &mean, &rstd, &q);
            MpAcc d = mp_cu_chan_sum_of<DYT, XT>(t, &h, b, g, MP_COL_GX, dy, x, mean, rstd, 1.0f);
            if (mp_cu_chan_lead(t, &h, b, g))
                mp_cu_st_beta(dw, DWT, b * h.G + g, mp_acc_get(d), beta);
        }
    }
};

template <int DWT, int DYT, int XT>
static inline void mp_cu_batch_norm_dw(void *dw, const void *dy, const void *x, int64_t N,
                                       int64_t C, int64_t S, float eps, float beta)
{
    if (S < 32) {
        MpCuBatchNormDwCols<DWT, DYT, XT> f = {dw, dy, x, mp_cu_chan(N, C, S), eps, beta};
        mp_cu_rows("batch_norm_dw", (C + f.h.G - 1) / f.h.G, mp_cu_col_threads(N), f);
        return;
    }
    MpCuBatchNormDw<DWT, DYT, XT> f = {dw, dy, x, N, C, S, eps, beta};
    mp_cu_rows("batch_norm_dw", C, 256, f);
}

/* ---- attention: q, y [BH, T, D], k, v [BH, Tk, D] (as mp_kernels_nn.h):
 * S = scale q k^T (f32; masked: MpAttnOpt, mp_cu_att_mask; a row that sees
 * no key has a zero sum and P = 0), P = softmax (causal: j <= i) in f32, rounded to
 * cdt; y = P v with f32 accumulation. Flash-attention style: a block owns
 * a tile of query rows of one head and walks the key tiles (causal: only
 * those at or left of its last row), each staged in shared memory as f32
 * (rows padded to D + 1 floats: a warp's threads read different keys from
 * different banks); no [T, T'] buffer anywhere.
 * Forward, two passes over the key tiles: the rows' running max and
 * compensated sum of exp (online softmax), then P exactly normalised
 * before it is rounded (as the C program, which normalises first) times v
 * into the f32 output tile, keys in order (the C program's order).
 * Backward (one op, g [BH, T + 2Tk, D]: per head dq, dk, dv), two kernels
 * and no atomics: attention_grad_q, per query tile, the rows' max and sum
 * again, then D_i = rowsum(P dP) with dP = dy v^T, then dS = P (dP - D)
 * scale rounded to cdt and dq = dS k; it leaves each row's max, sum and D
 * (f32, 3 BH T floats of the op's work space) to attention_grad_kv, per
 * key tile, which walks the query tiles that see it: Pr (P rounded) and dS
 * from the scores, dv = Pr^T dy, dk = dS^T q. Every sum is f32 (the rows'
 * sums compensated); the scores are computed once per pass.
 * Dropout (MpAttnOpt's drop): each kernel draws the mask bit of (head,
 * query, key) again from the key of (seed, step, micro, node), the step
 * read on the device; P o M / (1 - p) is rounded for y and dv, dP' =
 * dP o M / (1 - p) enters D_i and dS (the Tensor Core kernels draw the
 * same bits: mp_cuda_flash.h). */
#define MP_CU_ATT_SH 12160         /* shared floats per block (47.5 KB) */
#define MP_CU_ATT_NT 128           /* threads per block */

/* One attention problem and its tiles. A block's shared memory: nb tiles
 * [t, D + 1], two [t, t] (scores, dP), up to eight floats per query row. */
struct MpCuAttP {
    const void *q, *k, *v, *dy;
    void *o;                       /* y, or g */
    int qdt, kdt, vdt, dydt, odt;
    float *st;                     /* backward: [BH T, 3] row max, sum, D */
    int64_t T, Tk, D, ld;          /* ld = D + 1: a staged row */
    int64_t nqt, nkt;              /* query, key tiles per head */
    int t, causal, cdt;            /* t: a tile's query rows and keys */
    float scale;
    const void *mask;              /* options (MpAttnOpt, mp_kernels_nn.h) */
    int mdt;
    int64_t H, ms[4];
    float drop, dscale;            /* dropout p (0: none), 1 / (1 - p) */
    uint64_t seed;                 /* its generator: (seed, step, micro, node) */
    const MpCuHdr *hdr;
    int64_t micro, node;
    MpAttnLays lay;                /* where q, k, v, y (dy), dq, dk, dv lie */
};

/* The largest tile (up to 64) whose layout of nb row tiles fits; 0: none */
static inline int mp_cu_att_tile(int64_t D, int nb)
{
    for (int t = 64; t >= 1; t /= 2)
        if (nb * t * (D + 1) + 2 * t * t + 8 * t <= MP_CU_ATT_SH)
            return t;
    return 0;
}

/* Its tiles, for a layout of nb row tiles, and its options (o: NULL for
 * none); a too large head: one line */
static inline void mp_cu_att_tiles(const char *op, MpCuAttP *a, int nb, const MpAttnOpt *o)
{
    a->scale = o && o->scaled ? o->scale : 1.0f / sqrtf((float)a->D);
    a->lay = mp_attn_lays(o, a->T, a->Tk, a->D);
    a->mask = o ? o->mask : NULL;
    a->drop = o && o->drop > 0.0f ? o->drop : 0.0f;
    a->dscale = a->drop > 0.0f ? mp_dropout_scale(a->drop) : 1.0f;
    if (a->drop > 0.0f) {
        a->seed = o->seed;
        a->hdr = (const MpCuHdr *)o->hdr;
        a->micro = o->micro;
        a->node = o->node;
    }
    if (a->mask) {
        a->mdt = o->mdt;
        a->H = o->H;
        for (int i = 0; i < 4; i++)
            a->ms[i] = o->ms[i];
    }
    a->ld = a->D + 1;
    a->t = mp_cu_att_tile(a->D, nb);
    if (!a->t) {
        char why[128];
        snprintf(why, sizeof why, "a head size (the last axis of q, k, v) of %lld, more than "
                 "the %d its tiles in shared memory take", (long long)a->D,
                 (MP_CU_ATT_SH - 10) / nb - 1);
        mp_cu_die(op, why);
    }
    a->nqt = (a->T + a->t - 1) / a->t;
    a->nkt = (a->Tk + a->t - 1) / a->t;
}

/* Keys the query rows below i1 see: all T', or causal i1 (at most T'). */
static inline MP_HD int64_t mp_cu_att_keys(const MpCuAttP *a, int64_t i1)
{
    return a->causal && i1 < a->Tk ? i1 : a->Tk;
}

/* The key of dropout's mask for this step (0: no dropout) */
static inline MP_HD uint64_t mp_cu_att_key(const MpCuAttP *a)
{
    return mp_cu_drop_key(a->drop, a->seed, a->hdr, a->micro, a->node);
}

/* x (P or dP of query i, key j of head h) after dropout: times 1 / (1 - p)
 * where the mask keeps it, else 0; x itself without dropout. */
static inline MP_HD float mp_cu_att_drop(const MpCuAttP *a, uint64_t key, int64_t h, int64_t i,
                                         int64_t j, float x)
{
    if (a->drop <= 0.0f)
        return x;
    return mp_dropout_at(key, (h * a->T + i) * a->Tk + j, a->drop, a->dscale, x);
}

/* Rows of a tile from r0 (n of them; of `total` in the tensor) */
static inline MP_HD int mp_cu_att_n(const MpCuAttP *a, int64_t r0, int64_t total)
{
    return (int)(total - r0 < a->t ? total - r0 : a->t);
}

/* n rows of D from tensor x (type xdt, layout `which` of a->lay: head h,
 * from row r0) into sh as f32, rows ld apart */
static inline MP_HD void mp_cu_att_load(float *sh, int64_t ld, const void *x, int xdt,
                                        const MpCuAttP *a, int which, int64_t h, int64_t r0, int n,
                                        const MpCuTeam &t)
{
    int64_t D = a->D, st = a->lay.l[which].st, at = mp_attn_head(&a->lay, which, h) + r0 * st;
    for (int64_t e = t.tid; e < n * D; e += t.nt)
        sh[e / D * ld + e % D] = mp_cu_ld(x, xdt, at + e / D * st + e % D);
}

/* The scores of nq query rows (qs, from row i0) of head h against n keys
 * (ks, staged, from key j0) into s [t, t], masked (mp_cu_att_mask);
 * -INFINITY where a row does not see a key. dp (if any): dP = dys . vs
 * alongside. */
static inline MP_HD void mp_cu_att_scores(const MpCuAttP *a, float *s, float *dp, const float *qs,
                                          const float *ks, const float *dys, const float *vs,
                                          int64_t h, int64_t i0, int nq, int64_t j0, int n,
                                          const MpCuTeam &t)
{
    int64_t mb = a->mask ? h / a->H * a->ms[0] + h % a->H * a->ms[1] : 0;
    for (int e = t.tid; e < nq * n; e += t.nt) {
        int r = e / n, j = e % n;
        int sees = mp_cu_att_sees(i0 + r, j0 + j, a->Tk, a->causal);
        float sc = sees ? mp_cu_att_dot(qs + r * a->D, ks + j * a->ld, a->D) * a->scale : -INFINITY;
        if (sees && a->mask)
            sc = mp_cu_att_mask(sc, a->mask, a->mdt,
                                mb + (i0 + r) * a->ms[2] + (j0 + j) * a->ms[3]);
        s[r * a->t + j] = sc;
        if (dp)
            dp[r * a->t + j] = sees ? mp_cu_att_dot(dys + r * a->D, vs + j * a->ld, a->D) : 0.0f;
    }
}

/* The key tile [j0, j0 + n) of head h staged (k, and v where vs), then the
 * query tile's scores (and dP where dp) against it. */
static inline MP_HD void mp_cu_att_key_tile(const MpCuAttP *a, float *ks, float *vs, float *s,
                                            float *dp, const float *qs, const float *dys, int64_t h,
                                            int64_t i0, int nq, int64_t j0, int n, const MpCuTeam &t)
{
    t.sync();   /* the tiles' previous readers are done */
    mp_cu_att_load(ks, a->ld, a->k, a->kdt, a, MP_ATT_K, h, j0, n, t);
    if (vs)
        mp_cu_att_load(vs, a->ld, a->v, a->vdt, a, MP_ATT_V, h, j0, n, t);
    t.sync();   /* the key tile staged: every thread sees it */
    mp_cu_att_scores(a, s, dp, qs, ks, dys, vs, h, i0, nq, j0, n, t);
    t.sync();
}

/* acc[r, d] += sum over u < n of w[r sw + u su] x[u xs + d], r < nr
 * (rows of D in acc), u in order: each thread its own elements of acc. */
static inline MP_HD void mp_cu_att_acc(float *acc, const float *w, int sw, int su, const float *x,
                                       int64_t xs, int nr, int n, int64_t D, const MpCuTeam &t)
{
    for (int64_t e = t.tid; e < nr * D; e += t.nt) {
        int64_t r = e / D, d = e % D;
        float s = acc[e];
        for (int u = 0; u < n; u++)
            s += w[r * sw + u * su] * x[u * xs + d];
        acc[e] = s;
    }
}

/* A query tile's start (forward, dq): its nq rows from i0 of q (and of dy
 * where dys) staged, acc zeroed, the rows' running max rm, and rows' sum
 * of exp (MpAcc s, c at rm + t, rm + 2t), from every key tile they see;
 * nz - 1 more floats per row after rm zeroed. */
static inline MP_HD void mp_cu_att_begin(const MpCuAttP *a, float *qs, float *dys, float *acc,
                                         float *rm, int nz, float *s, float *ks, int64_t h,
                                         int64_t i0, int nq, const MpCuTeam &t)
{
    t.sync();   /* the block's previous item is done with its tiles */
    mp_cu_att_load(qs, a->D, a->q, a->qdt, a, MP_ATT_Q, h, i0, nq, t);
    if (dys)
        mp_cu_att_load(dys, a->D, a->dy, a->dydt, a, MP_ATT_Y, h, i0, nq, t);
    for (int64_t e = t.tid; e < nq * a->D; e += t.nt)
        acc[e] = 0.0f;
    for (int e = t.tid; e < nz * a->t; e += t.nt)
        rm[e] = e < a->t ? -INFINITY : 0.0f;
    int64_t nk = mp_cu_att_keys(a, i0 + nq);
    for (int64_t j0 = 0; j0 < nk; j0 += a->t) {
        int n = mp_cu_att_n(a, j0, nk);
        mp_cu_att_key_tile(a, ks, NULL, s, NULL, qs, NULL, h, i0, nq, j0, n, t);
        for (int r = t.tid; r < nq; r += t.nt) {
            MpAcc l = {rm[a->t + r], rm[2 * a->t + r]};
            mp_cu_att_online(&rm[r], &l, s + r * a->t, n);
            rm[a->t + r] = l.s;
            rm[2 * a->t + r] = l.c;
        }
    }
}

/* The tile's rows' outputs (acc, nq rows of D) to o: rows from r0 of head
 * h of its tensor `which` (y, dq, dk or dv). */
static inline MP_HD void mp_cu_att_put(const MpCuAttP *a, int which, int64_t h, int64_t r0,
                                       const float *acc, int nq, const MpCuTeam &t)
{
    int64_t D = a->D, st = a->lay.l[which].st, at = mp_attn_head(&a->lay, which, h) + r0 * st;
    t.sync();
    for (int64_t e = t.tid; e < nq * D; e += t.nt)
        mp_cu_st(a->o, a->odt, at + e / D * st + e % D, acc[e]);
}

/* Forward: item (head, query tile). */
struct MpCuAttFwd {
    MpCuAttP a;
    MP_HD void operator()(int64_t it, const MpCuTeam &t) const
    {
        MP_CU_SHARED_F32(sh, MP_CU_ATT_SH, t);
        int64_t h = it / a.nqt, i0 = it % a.nqt * a.t, D = a.D;
        int nq = mp_cu_att_n(&a, i0, a.T);
        float *ks = sh, *vs = ks + a.t * a.ld, *qs = vs + a.t * a.ld, *acc = qs + a.t * D;
        float *s = acc + a.t * D, *rm = s + 2 * a.t * a.t, *rl = rm + a.t, *rc = rl + a.t;
        mp_cu_att_begin(&a, qs, NULL, acc, rm, 3, s, ks, h, i0, nq, t);
        int64_t nk = mp_cu_att_keys(&a, i0 + nq);
        uint64_t key = mp_cu_att_key(&a);
        for (int64_t j0 = 0; j0 < nk; j0 += a.t) {
            int n = mp_cu_att_n(&a, j0, nk);
            mp_cu_att_key_tile(&a, ks, vs, s, NULL, qs, NULL, h, i0, nq, j0, n, t);
            for (int e = t.tid; e < nq * n; e += t.nt) {
                int r = e / n, j = e % n;
                float inv = 1.0f / (rl[r] + rc[r]);
                float p = mp_cu_att_p(s[r * a.t + j], rm[r], inv);
                s[r * a.t + j] = mp_round(mp_cu_att_drop(&a, key, h, i0 + r, j0 + j, p), a.cdt);
            }
            t.sync();
            mp_cu_att_acc(acc, s, a.t, 1, vs, a.ld, nq, n, D, t);
        }
        mp_cu_att_put(&a, MP_ATT_Y, h, i0, acc, nq, t);
    }
};

/* Backward, dq: item (head, query tile); leaves the rows' max, sum, D. */
struct MpCuAttDq {
    MpCuAttP a;
    MP_HD void operator()(int64_t it, const MpCuTeam &t) const
    {
        MP_CU_SHARED_F32(sh, MP_CU_ATT_SH, t);
        int64_t h = it / a.nqt, i0 = it % a.nqt * a.t, D = a.D;
        int nq = mp_cu_att_n(&a, i0, a.T);
        float *ks = sh, *vs = ks + a.t * a.ld, *qs = vs + a.t * a.ld, *dys = qs + a.t * D;
        float *acc = dys + a.t * D, *s = acc + a.t * D, *dp = s + a.t * a.t;
        float *rm = dp + a.t * a.t, *rl = rm + a.t, *rc = rl + a.t, *ds = rc + a.t, *dc = ds + a.t;
        mp_cu_att_begin(&a, qs, dys, acc, rm, 5, s, ks, h, i0, nq, t);
        int64_t nk = mp_cu_att_keys(&a, i0 + nq);
        uint64_t key = mp_cu_att_key(&a);
        for (int pass = 0; pass < 2; pass++)   /* D_i, then dS and dq */
            for (int64_t j0 = 0; j0 < nk; j0 += a.t) {
                int n = mp_cu_att_n(&a, j0, nk);
                mp_cu_att_key_tile(&a, ks, vs, s, dp, qs, dys, h, i0, nq, j0, n, t);
                if (pass == 0) {
                    for (int r = t.tid; r < nq; r += t.nt) {
                        float inv = 1.0f / (rl[r] + rc[r]);
                        MpAcc d = {ds[r], dc[r]};
                        for (int j = 0; j < n; j++)
                            mp_acc_add(&d, mp_cu_att_drop(&a, key, h, i0 + r, j0 + j, dp[r * a.t + j]) *
                                               mp_cu_att_p(s[r * a.t + j], rm[r], inv));
                        ds[r] = d.s;
                        dc[r] = d.c;
                    }
                    continue;
                }
                for (int e = t.tid; e < nq * n; e += t.nt) {
                    int r = e / n, j = e % n;
                    float p = mp_cu_att_p(s[r * a.t + j], rm[r], 1.0f / (rl[r] + rc[r]));
                    float dpm = mp_cu_att_drop(&a, key, h, i0 + r, j0 + j, dp[r * a.t + j]);
                    s[r * a.t + j] = mp_cu_att_ds(p, dpm, ds[r] + dc[r], a.scale, a.cdt);
                }
                t.sync();
                mp_cu_att_acc(acc, s, a.t, 1, ks, a.ld, nq, n, D, t);
            }
        mp_cu_att_put(&a, MP_ATT_DQ, h, i0, acc, nq, t);
        for (int r = t.tid; r < nq; r += t.nt) {
            float *st = a.st + (h * a.T + i0 + r) * 3;
            st[0] = rm[r];
            st[1] = rl[r] + rc[r];
            st[2] = ds[r] + dc[r];
        }
    }
};

/* Backward, dk and dv: item (head, key tile), over the query tiles that
 * see it (causal: from the one holding its first key). */
struct MpCuAttDkv {
    MpCuAttP a;
    MP_HD void operator()(int64_t it, const MpCuTeam &t) const
    {
        MP_CU_SHARED_F32(sh, MP_CU_ATT_SH, t);
        int64_t h = it / a.nkt, j0 = it % a.nkt * a.t, D = a.D;
        int n = mp_cu_att_n(&a, j0, a.Tk);
        float *ks = sh, *vs = ks + a.t * a.ld, *qs = vs + a.t * a.ld, *dys = qs + a.t * D;
        float *dk = dys + a.t * D, *dv = dk + a.t * D, *s = dv + a.t * D, *dp = s + a.t * a.t;
        float *rm = dp + a.t * a.t, *rinv = rm + a.t, *rd = rinv + a.t;
        t.sync();
        mp_cu_att_load(ks, a.ld, a.k, a.kdt, &a, MP_ATT_K, h, j0, n, t);
        mp_cu_att_load(vs, a.ld, a.v, a.vdt, &a, MP_ATT_V, h, j0, n, t);
        for (int64_t e = t.tid; e < n * D; e += t.nt)
            dk[e] = dv[e] = 0.0f;
        uint64_t key = mp_cu_att_key(&a);
        for (int64_t i0 = a.causal ? j0 : 0; i0 < a.T; i0 += a.t) {
            int nq = mp_cu_att_n(&a, i0, a.T);
            t.sync();
            mp_cu_att_load(qs, D, a.q, a.qdt, &a, MP_ATT_Q, h, i0, nq, t);
            mp_cu_att_load(dys, D, a.dy, a.dydt, &a, MP_ATT_Y, h, i0, nq, t);
            for (int r = t.tid; r < nq; r += t.nt) {
                const float *st = a.st + (h * a.T + i0 + r) * 3;
                rm[r] = st[0];
                rinv[r] = 1.0f / st[1];
                rd[r] = st[2];
            }
            t.sync();   /* the query tile staged: every thread sees it */
            mp_cu_att_scores(&a, s, dp, qs, ks, dys, vs, h, i0, nq, j0, n, t);
            t.sync();
            for (int e = t.tid; e < nq * n; e += t.nt) {
                int r = e / n, j = e % n;
                float p = mp_cu_att_p(s[r * a.t + j], rm[r], rinv[r]);
                s[r * a.t + j] = mp_round(mp_cu_att_drop(&a, key, h, i0 + r, j0 + j, p), a.cdt);
                float dpm = mp_cu_att_drop(&a, key, h, i0 + r, j0 + j, dp[r * a.t + j]);
                dp[r * a.t + j] = mp_cu_att_ds(p, dpm, rd[r], a.scale, a.cdt);
            }
            t.sync();
            mp_cu_att_acc(dv, s, 1, a.t, dys, D, n, nq, D, t);   /* Pr^T dy */
            mp_cu_att_acc(dk, dp, 1, a.t, qs, D, n, nq, D, t);   /* dS^T q */
        }
        mp_cu_att_put(&a, MP_ATT_DK, h, j0, dk, n, t);
        mp_cu_att_put(&a, MP_ATT_DV, h, j0, dv, n, t);
    }
};

/* Where attention runs on Tensor Cores (mp_cuda_flash.h): f16 / bf16
 * products, heads up to MP_CU_FA_DMAX, a GPU (or stand-in) that runs
 * mma.sync; with dropout, a build with its instances (MP_CU_FA_DROPOUT:
 * every program whose attention drops out). The compiler keeps the
 * forward's rows' log-sum-exp for the backward on the same rule (ir.h:
 * ir_attention_tc). */
static inline int mp_cu_fa_takes(int cdt, int64_t D, float drop)
{
    return (cdt == MP_F16 || cdt == MP_BF16) && D <= MP_CU_FA_DMAX && (MP_CU_FA_DROPOUT || drop <= 0.0f) &&
           mp_cu_fa_ready();
}

/* Layouts the Tensor Core kernels take (else the f32 tiles run): v's as
 * k's (v is staged through k's offsets), dv's as dk's but for its offset,
 * and row strides under 2^25 (a tile's 64 rows in 32-bit offsets). The
 * compiler's are so (compiler/emit_common.c attention_lays). */
static inline int mp_cu_fa_lays(const MpAttnLays *L)
{
    const MpAttnLay *k = &L->l[MP_ATT_K], *v = &L->l[MP_ATT_V];
    const MpAttnLay *dk = &L->l[MP_ATT_DK], *dv = &L->l[MP_ATT_DV];
    int ok = k->off == v->off && k->sb == v->sb && k->sh == v->sh && k->st == v->st &&
             dk->sb == dv->sb && dk->sh == dv->sh && dk->st == dv->st;
    for (int i = 0; i < MP_ATT_NLAY; i++)
        ok = ok && L->l[i].st < ((int64_t)1 << 25);
    return ok;
}

/* The Tensor Core kernels' problem from the f32 tiles' (its output a->o,
 * lse: the rows' log-sum-exp, or NULL) */
static inline MpCuFa mp_cu_fa_of(const MpCuAttP *a, float *lse)
{
    MpCuFa f = {a->q, a->k, a->v, a->o, a->qdt, a->kdt, a->vdt, a->odt, lse, a->T, a->Tk, a->D,
                0, a->causal, a->cdt == MP_BF16, a->scale, a->mask, a->mdt, a->H,
                {a->ms[0], a->ms[1], a->ms[2], a->ms[3]}, a->drop, a->dscale, a->seed, a->hdr,
                a->micro, a->node, a->lay, 0, NULL, NULL, NULL};
    return f;
}

/* x (tensor `which`, type XT, BH rows of D a head) dense: x itself where
 * its layout is the dense one, else its copy at ws, gathered through the
 * layout as a view [B, H, rows, D] (mp_cu_gather: by words where they fit) */
template <int XT>
static inline const void *mp_cu_att_dense(const MpCuAttP *a, int which, const void *x, int64_t BH,
                                          int64_t rows, unsigned char *ws)
{
    const MpAttnLay *l = &a->lay.l[which];
    int64_t D = a->D, H = a->lay.H;
    if (l->off == 0 && l->st == D && (H == 1 ? l->sb == rows * D : l->sh == rows * D && l->sb == H * l->sh))
        return x;
    MpCuView v = {4, {BH / H, H, rows, D}, {l->sb, l->sh, l->st, 1}};
    mp_cu_gather<XT, XT>(ws, (const char *)x + l->off * mp_cu_dt_size(XT), v);
    return ws;
}

/* o: the options (MpAttnOpt, as the C program's mp_k_attention_opt;
 * the mask a device pointer), or NULL; lse: NULL, or [BH T] floats where
 * the Tensor Core forward leaves each row's log-sum-exp for the backward */
template <int YT, int QT, int KT, int VT>
static inline void mp_cu_attention(void *y, const void *q, const void *k, const void *v,
                                   int64_t BH, int64_t T, int64_t Tk, int64_t D, int causal,
                                   int cdt, const MpAttnOpt *o = NULL, float *lse = NULL)
{
    MpCuAttP a = {q, k, v, NULL, y, QT, KT, VT, MP_F32, YT, NULL, T, Tk, D};
    a.causal = causal;
    a.cdt = cdt;
    mp_cu_att_tiles("attention", &a, 4, o);
    if (mp_cu_fa_takes(cdt, D, a.drop) && mp_cu_fa_lays(&a.lay)) {
        MpCuFa f = mp_cu_fa_of(&a, lse);
        if (MP_CU_FA_DENSE_FWD(D > 32 ? 64 : 32, a.drop > 0.0f)) {   /* q, k, v read dense */
            int64_t qb = mp_cu_round_up(BH * T * D * 4), kb = mp_cu_round_up(BH * Tk * D * 4);
            unsigned char *w = mp_cu_ws(qb + 2 * kb);
            if (w) {
                f.qd = mp_cu_att_dense<QT>(&a, MP_ATT_Q, q, BH, T, w);
                f.kd = mp_cu_att_dense<KT>(&a, MP_ATT_K, k, BH, Tk, w + qb);
                f.vd = mp_cu_att_dense<VT>(&a, MP_ATT_V, v, BH, Tk, w + qb + kb);
            }
        }
        mp_cu_fa_run(f, BH);   /* Tensor Cores (mp_cuda_flash.h) */
        return;
    }
    MpCuAttFwd f = {a};
    mp_cu_rows("attention", BH * a.nqt, MP_CU_ATT_NT, f);
}

/* y (type ydt) and lse: the forward's output and the rows' log-sum-exp
 * it kept (mp_cu_attention's lse); without them the f32 tiles run */
template <int GT, int DYT, int QT, int KT, int VT>
static inline void mp_cu_attention_grad(void *g, const void *dy, const void *q, const void *k,
                                        const void *v, int64_t BH, int64_t T, int64_t Tk,
                                        int64_t D, int causal, int cdt, const MpAttnOpt *o = NULL,
                                        const void *y = NULL, int ydt = MP_F32,
                                        const float *lse = NULL)
{
    MpCuAttP a = {q, k, v, dy, g, QT, KT, VT, DYT, GT, NULL, T, Tk, D};
    a.causal = causal;
    a.cdt = cdt;
    mp_cu_att_tiles("attention_grad", &a, 6, o);
    int tc = y && lse && mp_cu_fa_takes(cdt, D, a.drop) && mp_cu_fa_lays(&a.lay);
    /* the workspace: the rows' statistics, then (Tensor Cores) room for
     * dense copies of q, dy, k, v (mp_cu_att_dense) */
    int64_t stb = mp_cu_round_up(BH * T * 3 * (int64_t)sizeof(float));
    int64_t qb = mp_cu_round_up(BH * T * D * 4), kb = mp_cu_round_up(BH * Tk * D * 4);
    unsigned char *ws = mp_cu_ws(stb + (tc ? 2 * qb + 2 * kb : 0));
    a.st = (float *)ws;
    if (tc) {
        unsigned char *w = ws ? ws + stb : NULL;
        MpCuFaB b = {mp_cu_fa_of(&a, NULL), dy, y, DYT, ydt, lse, a.st, 0};
        if (ws) {
            b.a.qd = mp_cu_att_dense<QT>(&a, MP_ATT_Q, q, BH, T, w);
            b.dyd = mp_cu_att_dense<DYT>(&a, MP_ATT_Y, dy, BH, T, w + qb);
            b.a.kd = mp_cu_att_dense<KT>(&a, MP_ATT_K, k, BH, Tk, w + 2 * qb);
            b.a.vd = mp_cu_att_dense<VT>(&a, MP_ATT_V, v, BH, Tk, w + 2 * qb + kb);
        }
        mp_cu_fa_grad(b, BH);   /* Tensor Cores (mp_cuda_flash.h) */
        return;
    }
    MpCuAttDq fq = {a};
    MpCuAttDkv fkv = {a};
    mp_cu_rows("attention_grad_q", BH * a.nqt, MP_CU_ATT_NT, fq);
    mp_cu_rows("attention_grad_kv", BH * a.nkt, MP_CU_ATT_NT, fkv);
}

/* ---- elementwise, norm and rope additions ------------------------------------------ */

MP_CU_UNARY(gelu_tanh, mp_gelu_tanh(a))
MP_CU_UNARY(abs, fabsf(a))
MP_CU_UNARY(sin, sinf(a))
MP_CU_UNARY(cos, cosf(a))
MP_CU_GRAD(gelu_tanh_grad, mp_gelu_tanh_grad)
MP_CU_GRAD(abs_grad, mp_abs_grad)
MP_CU_GRAD(sin_grad, mp_sin_grad)
MP_CU_GRAD(cos_grad, mp_cos_grad)
MP_CU_BINARY(maximum, mp_maximum(a, b))
MP_CU_BINARY(minimum, mp_minimum(a, b))
MP_CU_BINARY(maximum_mask, mp_maximum_mask(a, b))

/* ---- selection, comparison, masks (mp_kernels.h's per-element math) ---- */
MP_CU_BINARY(gt, mp_gt(a, b))
MP_CU_BINARY(lt, mp_lt(a, b))
MP_CU_BINARY(ge, mp_ge(a, b))
MP_CU_BINARY(le, mp_le(a, b))
MP_CU_BINARY(eq, mp_eq(a, b))
MP_CU_BINARY(ne, mp_ne(a, b))
MP_CU_BINARY(where_da, mp_where_da(a, b))
MP_CU_BINARY(where_db, mp_where_db(a, b))

/* where(c, a, b): (a, b) and (c, c) each mapped onto y as binary ops map */
template <int YT, int CT, int AT, int BT>
struct MpCuWhere {
    void *y;
    const void *c, *a, *b;
    MpBcast pab, pc;
    MP_HD void operator()(int64_t i) const
    {
        int64_t ao, bo, co, unused;
        mp_cu_bcast_at(&pab, i, &ao, &bo);
        mp_cu_bcast_at(&pc, i, &co, &unused);
        mp_cu_st(y, YT, i, mp_where(mp_cu_ld(c, CT, co), mp_cu_ld(a, AT, ao), mp_cu_ld(b, BT, bo)));
    }
};

template <int YT, int CT, int AT, int BT>
static inline void mp_cu_where(void *y, MpCuDims ysh, const void *c, MpCuDims csh, const void *a,
                               MpCuDims ash, const void *b, MpCuDims bsh)
{
    MpCuWhere<YT, CT, AT, BT> f = {y, c, a, b,
                                   mp_bcast(ysh.rank, ysh.d, ash.rank, ash.d, bsh.rank, bsh.d),
                                   mp_bcast(ysh.rank, ysh.d, csh.rank, csh.d, csh.rank, csh.d)};
    mp_cu_each("where", mp_numel(ysh.rank, ysh.d), f);
}

/* max, min, argmax, argmin: one item per output (o, i), as mp_k_extremum */
template <int YT, int XT>
struct MpCuExtremum {
    void *y;
    const void *x;
    int64_t len, inner;
    float sign;
    int index;
    MP_HD void operator()(int64_t j) const
    {
        int64_t o = j / inner, i = j % inner;
        int64_t at = mp_extremum_at(x, XT, o, len, inner, i, sign);
        if (index)
            ((int32_t *)y)[j] = (int32_t)at;
        else
            mp_cu_st(y, YT, j, mp_cu_ld(x, XT, (o * len + at) * inner + i));
    }
};

template <int YT, int XT>
static inline void mp_cu_extremum(void *y, const void *x, int64_t outer, int64_t len, int64_t inner,
                                  int sign, int index)
{
    MpCuExtremum<YT, XT> f = {y, x, len, inner, (float)sign, index};
    mp_cu_each(index ? "argmax" : "max", outer * inner, f);
}

/* their gradient: item (o, i) writes its whole column of dx */
template <int DXT, int DYT, int XT>
struct MpCuExtremumGrad {
    void *dx;
    const void *dy, *x;
    int64_t len, inner;
    float sign;
    MP_HD void operator()(int64_t j) const
    {
        int64_t o = j / inner, i = j % inner;
        int64_t at = mp_extremum_at(x, XT, o, len, inner, i, sign);
        float g = mp_cu_ld(dy, DYT, j);
        for (int64_t l = 0; l < len; l++)
            mp_cu_st(dx, DXT, (o * len + l) * inner + i, l == at ? g : 0.0f);
    }
};

template <int DXT, int DYT, int XT>
static inline void mp_cu_extremum_grad(void *dx, const void *dy, const void *x, int64_t outer,
                                       int64_t len, int64_t inner, int sign)
{
    MpCuExtremumGrad<DXT, DYT, XT> f = {dx, dy, x, len, inner, (float)sign};
    mp_cu_each("extremum_grad", outer * inner, f);
}

/* zeros, ones, full: y = v */
template <int YT>
struct MpCuFill {
    void *y;
    float v;
    MP_HD void operator()(int64_t i) const { mp_cu_st(y, YT, i, v); }
};

template <int YT>
static inline void mp_cu_fill(void *y, float v, int64_t n)
{
    MpCuFill<YT> f = {y, v};
    mp_cu_each("full", n, f);
}

/* ---- routing and indexing: topk, one_hot, gather, cumsum ------------------------------- */

/* topk: one item per column (o, i), one pass as mp_k_topk */
template <int XT>
struct MpCuTopk {
    int32_t *y;
    const void *x;
    int64_t len, inner, k;
    MP_HD void operator()(int64_t j) const { mp_topk_col(y, x, XT, j / inner, len, inner, j % inner, k); }
};

template <int XT>
static inline void mp_cu_topk(void *y, const void *x, int64_t outer, int64_t len, int64_t inner, int64_t k)
{
    MpCuTopk<XT> f = {(int32_t *)y, x, len, inner, k};
    mp_cu_each("topk", outer * inner, f);
}

/* one_hot: one item per element of the mask */
template <int YT>
struct MpCuOneHot {
    void *y;
    const void *ids;
    int idt;
    int64_t classes;
    MP_HD void operator()(int64_t j) const
    {
        mp_cu_st(y, YT, j, mp_ld_id(ids, idt, j / classes) == j % classes ? 1.0f : 0.0f);
    }
};

template <int YT>
static inline void mp_cu_one_hot(void *y, const void *ids, int idt, int64_t n, int64_t classes)
{
    MpCuOneHot<YT> f = {y, ids, idt, classes};
    mp_cu_each("one_hot", n * classes, f);
}

/* gather: one item per element of the result */
template <int YT, int XT>
struct MpCuGatherIndex {
    void *y;
    const void *x, *index;
    int idt, axis;
    MpCuDims xs, is;
    MP_HD void operator()(int64_t j) const
    {
        int64_t id = mp_ld_id(index, idt, j);
        mp_cu_st(y, YT, j, id >= 0 && id < xs.d[axis]
                 ? mp_cu_ld(x, XT, mp_gather_at(j, is.rank, xs.d, is.d, axis, id)) : NAN);
    }
};

template <int YT, int XT>
static inline void mp_cu_gather_index(void *y, const void *x, const void *index, int idt, MpCuDims xs,
                                MpCuDims is, int axis)
{
    MpCuGatherIndex<YT, XT> f = {y, x, index, idt, axis, xs, is};
    mp_cu_each("gather_index", mp_numel(is.rank, is.d), f);
}

/* its gradient: zeros, then one item per index column (race-free, the
 * order of the C program's sums) */
struct MpCuGatherIndexGrad {
    void *dx;
    int dxdt;
    const void *dy;
    int dydt;
    const void *index;
    int idt, axis;
    MpCuDims xs, is;
    MP_HD void operator()(int64_t c) const
    {
        mp_gather_grad_col(dx, dxdt, dy, dydt, index, idt, is.rank, xs.d, is.d, axis, c);
    }
};

template <int DXT, int DYT>
static inline void mp_cu_gather_index_grad(void *dx, const void *dy, const void *index, int idt, MpCuDims xs,
                                     MpCuDims is, int axis)
{
    mp_cu_fill<DXT>(dx, 0.0f, mp_numel(xs.rank, xs.d));
    MpCuGatherIndexGrad f = {dx, DXT, dy, DYT, index, idt, axis, xs, is};
    mp_cu_each("gather_index_grad", mp_numel(is.rank, is.d) / is.d[axis], f);
}

/* cumsum: one item per column (o, i), summed in double as the C program */
template <int YT, int XT>
struct MpCuCumsum {
    void *y;
    const void *x;
    int64_t len, inner;
    int reverse;
    MP_HD void operator()(int64_t j) const { mp_cumsum_col(y, YT, x, XT, j / inner, len, inner, j % inner, reverse); }
};

template <int YT, int XT>
static inline void mp_cu_cumsum(void *y, const void *x, int64_t outer, int64_t len, int64_t inner, int reverse)
{
    MpCuCumsum<YT, XT> f = {y, x, len, inner, reverse};
    mp_cu_each("cumsum", outer * inner, f);
}

struct MpCuF_clamp {
    float lo, hi;
    MP_HD float operator()(float a) const { return mp_clamp(a, lo, hi); }
};

struct MpCuF_clamp_grad {
    float lo, hi;
    MP_HD float operator()(float g, float v) const { return mp_clamp_grad(g, v, lo, hi); }
};

struct MpCuF_pow {
    float p;
    MP_HD float operator()(float a) const { return powf(a, p); }
};

struct MpCuF_pow_grad {
    float p;
    MP_HD float operator()(float g, float v) const { return mp_pow_grad(g, v, p); }
};

template <int YT, int XT>
static inline void mp_cu_clamp(void *y, const void *x, int64_t n, float lo, float hi)
{
    MpCuMap1<YT, XT, MpCuF_clamp> f = {y, x, {lo, hi}};
    mp_cu_each("clamp", n, f);
}

template <int DXT, int DYT, int XT>
static inline void mp_cu_clamp_grad(void *dx, const void *dy, const void *x, int64_t n, float lo, float hi)
{
    MpCuMap2<DXT, DYT, XT, MpCuF_clamp_grad> f = {dx, dy, x, {lo, hi}};
    mp_cu_each("clamp_grad", n, f);
}

template <int YT, int XT>
static inline void mp_cu_pow(void *y, const void *x, int64_t n, float p)
{
    MpCuMap1<YT, XT, MpCuF_pow> f = {y, x, {p}};
    mp_cu_each("pow", n, f);
}

template <int DXT, int DYT, int XT>
static inline void mp_cu_pow_grad(void *dx, const void *dy, const void *x, int64_t n, float p)
{
    MpCuMap2<DXT, DYT, XT, MpCuF_pow_grad> f = {dx, dy, x, {p}};
    mp_cu_each("pow_grad", n, f);
}

/* rms_norm: a block per row */
template <int YT, int XT, int WT>
struct MpCuRmsNorm {
    void *y;
    const void *x, *w;
    int64_t dim;
    float eps;
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        float rs = mp_cu_rms_rstd(t.sum(mp_cu_sumsq_part(x, XT, r * dim, dim, t.tid, t.nt)), dim, eps);
        for (int64_t j = t.tid; j < dim; j += t.nt)
            mp_cu_st(y, YT, r * dim + j, mp_cu_ld(x, XT, r * dim + j) * rs * mp_cu_ld(w, WT, j));
    }
};

template <int YT, int XT, int WT>
static inline void mp_cu_rms_norm(void *y, const void *x, const void *w, int64_t rows, int64_t dim,
                                  float eps)
{
    MpCuRmsNorm<YT, XT, WT> f = {y, x, w, dim, eps};
    mp_cu_rows("rms_norm", rows, mp_cu_row_threads(dim), f);
}

/* dx = rstd (g - xhat mean(g xhat)), g = dy w, xhat = x rstd */
template <int DXT, int DYT, int XT, int WT>
struct MpCuRmsNormDx {
    void *dx;
    const void *dy, *x, *w;
    int64_t dim;
    float eps;
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        int64_t off = r * dim;
        float rs = mp_cu_rms_rstd(t.sum(mp_cu_sumsq_part(x, XT, off, dim, t.tid, t.nt)), dim, eps);
        float sgx = mp_acc_get(t.sum(mp_cu_rms_gx_part(dy, DYT, x, XT, w, WT, off, dim, t.tid, t.nt)));
        float mgx = sgx * rs / (float)dim;
        for (int64_t j = t.tid; j < dim; j += t.nt) {
            float g = mp_cu_ld(dy, DYT, off + j) * mp_cu_ld(w, WT, j);
            mp_cu_st(dx, DXT, off + j, rs * (g - mp_cu_ld(x, XT, off + j) * rs * mgx));
        }
    }
};

template <int DXT, int DYT, int XT, int WT>
static inline void mp_cu_rms_norm_dx(void *dx, const void *dy, const void *x, const void *w,
                                     int64_t rows, int64_t dim, float eps)
{
    MpCuRmsNormDx<DXT, DYT, XT, WT> f = {dx, dy, x, w, dim, eps};
    mp_cu_rows("rms_norm_dx", rows, mp_cu_row_threads(dim), f);
}

/* Per-row (0, rstd) into st, then layer_norm's coalesced column pass
 * (x - 0) * rstd = x * rstd. */
template <int XT>
struct MpCuRmsRows {
    float *st;
    const void *x;
    int64_t dim;
    float eps;
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        float rs = mp_cu_rms_rstd(t.sum(mp_cu_sumsq_part(x, XT, r * dim, dim, t.tid, t.nt)), dim, eps);
        if (t.tid == 0) {
            st[2 * r] = 0.0f;
            st[2 * r + 1] = rs;
        }
    }
};

template <int DWT, int DYT, int XT>
static inline void mp_cu_rms_norm_dw(void *dw, const void *dy, const void *x, int64_t rows,
                                     int64_t dim, float eps, float beta)
{
    float *st = (float *)mp_cu_ws(rows * 2 * (int64_t)sizeof(float));
    MpCuRmsRows<XT> a = {st, x, dim, eps};
    mp_cu_rows("rms_norm_dw", rows, mp_cu_row_threads(dim), a);
    mp_cu_norm_dw_cols<DWT, DYT, XT>("rms_norm_dw", dw, dy, x, st, rows, dim, beta);
}

/* rope: one output element per item, reading its pair partner */
template <int YT, int XT>
struct MpCuRope {
    void *y;
    const void *x;
    int64_t P, inner, D;
    float theta, sign;
    int half;
    MP_HD void operator()(int64_t e) const
    {
        mp_cu_st(y, YT, e, mp_cu_rope_at(x, XT, e, P, inner, D, theta, half, sign));
    }
};

template <int YT, int XT>
static inline void mp_cu_rope(void *y, const void *x, int64_t outer, int64_t P, int64_t inner,
                              int64_t D, float theta, int half, float sign)
{
    MpCuRope<YT, XT> f = {y, x, P, inner, D, theta, sign, half};
    mp_cu_each("rope", outer * P * inner, f);
}


/* ---- recurrent layers: GRU and LSTM, as mp_k_gru / mp_k_lstm (mp_kernels_nn.h): per
 * step one product for all gates (cuBLAS; the bias put in place first, beta = 1, as
 * linear) and one kernel of cells (mp_gru_cell / mp_lstm_cell, an item per element of
 * [B, H]); backwards, per step a kernel of cell gradients and one product d h_{t-1} +=
 * dg_t W_hh; then dW_hh as one product per sequence summed in f32 (beta = 1), db_hh
 * as compensated sums down columns. The step loop runs on the host: T launches
 * of each, whatever the program's size. Work space: the step's hidden product,
 * the LSTM's f32 c; backwards the hidden gates' gradients, d h and d c (f32),
 * dW_hh's f32 sum. */
/* gh [B, G] = h_{t-1} W_hh^T + b_hh (h_{-1} = 0), stored as ST */
template <int ST, int WT, int BT>
static inline void mp_cu_rnn_hidden(void *gh, const void *s, int64_t t, const void *w,
                                    const void *bias, int64_t B, int64_t T, int64_t H, int64_t G,
                                    int64_t W)
{
    if (bias) {
        MpCuFillBias<ST, BT> f = {gh, bias, G, 1};
        mp_cu_each("rnn_bias", B * G, f);
    } else if (t == 0) {
        mp_cu_memset(gh, B * G * mp_cu_dt_size(ST));
    }
    if (t == 0)
        return;
    MpCuGemm g = mp_cu_gemm_of(0, 1, B, G, H, 1.0f, (const char *)s + (t - 1) * W * mp_cu_dt_size(ST),
                               ST, T * W, w, WT, H, bias ? 1.0f : 0.0f, gh, ST, G);
    mp_cu_gemm(&g);
}

template <int ST, int GT>
struct MpCuGruCell {
    void *s;
    const void *gi, *gh;
    int64_t t, T, H;
    MP_HD void operator()(int64_t e) const
    {
        int64_t b = e / H, j = e % H, G = 3 * H, W = 5 * H;
        int64_t gb = (b * T + t) * G + j, sb = (b * T + t) * W + j;
        float v[5];
        mp_gru_cell(mp_cu_ld(gi, GT, gb), mp_cu_ld(gi, GT, gb + H), mp_cu_ld(gi, GT, gb + 2 * H),
                    mp_cu_ld(gh, ST, b * G + j), mp_cu_ld(gh, ST, b * G + H + j),
                    mp_cu_ld(gh, ST, b * G + 2 * H + j), t ? mp_cu_ld(s, ST, sb - W) : 0.0f, v);
        for (int k = 0; k < 5; k++)
            mp_cu_st(s, ST, sb + k * H, v[k]);
    }
};

template <int ST, int GT>
struct MpCuLstmCell {
    void *s;
    float *c;
    const void *gi, *gh;
    int64_t t, T, H;
    MP_HD void operator()(int64_t e) const
    {
        int64_t b = e / H, j = e % H, G = 4 * H, W = 6 * H;
        int64_t gb = (b * T + t) * G + j, sb = (b * T + t) * W + j;
        float p[4], v[6];
        for (int k = 0; k < 4; k++)
            p[k] = mp_cu_ld(gi, GT, gb + k * H) + mp_cu_ld(gh, ST, b * G + k * H + j);
        mp_lstm_cell(p[0], p[1], p[2], p[3], c[e], v);
        c[e] = v[1];
        for (int k = 0; k < 6; k++)
            mp_cu_st(s, ST, sb + k * H, v[k]);
    }
};

template <int ST, int GT, int WT, int BT>
static inline void mp_cu_gru(void *s, const void *gi, const void *w, const void *bias, int64_t B,
                             int64_t T, int64_t H)
{
    void *gh = mp_cu_ws(B * 3 * H * mp_cu_dt_size(ST));
    for (int64_t t = 0; t < T; t++) {
        mp_cu_rnn_hidden<ST, WT, BT>(gh, s, t, w, bias, B, T, H, 3 * H, 5 * H);
        MpCuGruCell<ST, GT> f = {s, gi, gh, t, T, H};
        mp_cu_each("gru", B * H, f);
    }
}

template <int ST, int GT, int WT, int BT>
static inline void mp_cu_lstm(void *s, const void *gi, const void *w, const void *bias, int64_t B,
                              int64_t T, int64_t H)
{
    int64_t at = mp_cu_round_up(B * 4 * H * mp_cu_dt_size(ST));
    unsigned char *ws = mp_cu_ws(at + B * H * 4);
    float *c = (float *)(ws + at);
    mp_cu_memset(c, B * H * 4);
    for (int64_t t = 0; t < T; t++) {
        mp_cu_rnn_hidden<ST, WT, BT>(ws, s, t, w, bias, B, T, H, 4 * H, 6 * H);
        MpCuLstmCell<ST, GT> f = {s, c, gi, ws, t, T, H};
        mp_cu_each("lstm", B * H, f);
    }
}

template <int OT, int DT, int ST>
struct MpCuGruGradCell {
    void *o, *dgh;
    float *dhr;
    const void *ds, *s;
    int64_t t, T, H;
    MP_HD void operator()(int64_t e) const
    {
        int64_t b = e / H, j = e % H, G = 3 * H, W = 5 * H;
        int64_t gb = (b * T + t) * G + j, sb = (b * T + t) * W + j;
        float d[5];
        mp_gru_cell_grad(mp_cu_ld(ds, DT, sb) + dhr[e], t ? mp_cu_ld(s, ST, sb - W) : 0.0f,
                         mp_cu_ld(s, ST, sb + H), mp_cu_ld(s, ST, sb + 2 * H),
                         mp_cu_ld(s, ST, sb + 3 * H), mp_cu_ld(s, ST, sb + 4 * H), d);
        for (int k = 0; k < 3; k++)
            mp_cu_st(o, OT, gb + k * H, d[k]);
        mp_cu_st(dgh, OT, gb, d[0]);
        mp_cu_st(dgh, OT, gb + H, d[1]);
        mp_cu_st(dgh, OT, gb + 2 * H, d[3]);
        dhr[e] = d[4];
    }
};

template <int OT, int DT, int ST>
struct MpCuLstmGradCell {
    void *o;
    float *dhr, *dcr;
    const void *ds, *s;
    int64_t t, T, H;
    MP_HD void operator()(int64_t e) const
    {
        int64_t b = e / H, j = e % H, G = 4 * H, W = 6 * H;
        int64_t gb = (b * T + t) * G + j, sb = (b * T + t) * W + j;
        float d[4];
        mp_lstm_cell_grad(mp_cu_ld(ds, DT, sb) + dhr[e], mp_cu_ld(ds, DT, sb + H) + dcr[e],
                          t ? mp_cu_ld(s, ST, sb - W + H) : 0.0f, mp_cu_ld(s, ST, sb + H),
                          mp_cu_ld(s, ST, sb + 2 * H), mp_cu_ld(s, ST, sb + 3 * H),
                          mp_cu_ld(s, ST, sb + 4 * H), mp_cu_ld(s, ST, sb + 5 * H), d, &dcr[e]);
        for (int k = 0; k < 4; k++)
            mp_cu_st(o, OT, gb + k * H, d[k]);
    }
};

/* dW_hh's f32 sum stored as OT; db_hh[j]: the column sum of dg [B T, G] */
template <int OT>
struct MpCuRnnWeightGrads {
    void *o;
    const float *acc;
    const void *dg;
    int64_t rows, G, GH;
    MP_HD void operator()(int64_t i) const
    {
        if (i < GH) {
            mp_cu_st(o, OT, i, acc[i]);
            return;
        }
        MpAcc sum = mp_acc_zero();
        for (int64_t r = 0; r < rows; r++)
            mp_acc_add(&sum, mp_cu_ld(dg, OT, r * G + i - GH));
        mp_cu_st(o, OT, i, mp_acc_get(sum));
    }
};

template <int OT, int ST>
static inline void mp_cu_rnn_weight_grads(void *o, float *acc, const void *dg, const void *s,
                                          int64_t B, int64_t T, int64_t H, int64_t G, int64_t W)
{
    if (T < 2)
        mp_cu_memset(acc, G * H * 4);
    for (int64_t b = 0; T > 1 && b < B; b++) {
        MpCuGemm g = mp_cu_gemm_of(1, 0, G, H, T - 1, 1.0f,
                                   (const char *)dg + (b * T + 1) * G * mp_cu_dt_size(OT), OT, G,
                                   (const char *)s + b * T * W * mp_cu_dt_size(ST), ST, W,
                                   b > 0 ? 1.0f : 0.0f, acc, MP_F32, H);
        mp_cu_gemm(&g);
    }
    MpCuRnnWeightGrads<OT> f = {(char *)o + B * T * G * mp_cu_dt_size(OT), acc, dg, B * T, G, G * H};
    mp_cu_each("rnn_weight_grads", G * H + G, f);
}

template <int OT, int DT, int ST, int WT>
static inline void mp_cu_gru_grad(void *o, const void *ds, const void *s, const void *w, int64_t B,
                                  int64_t T, int64_t H)
{
    int64_t G = 3 * H, a1 = mp_cu_round_up(B * T * G * mp_cu_dt_size(OT));
    int64_t a2 = a1 + mp_cu_round_up(B * H * 4);
    unsigned char *ws = mp_cu_ws(a2 + G * H * 4);
    void *dgh = ws;
    float *dhr = (float *)(ws + a1), *acc = (float *)(ws + a2);
    mp_cu_memset(dhr, B * H * 4);
    for (int64_t t = T - 1; t >= 0; t--) {
        MpCuGruGradCell<OT, DT, ST> f = {o, dgh, dhr, ds, s, t, T, H};
        mp_cu_each("gru_grad", B * H, f);
        if (t == 0)
            break;
        MpCuGemm g = mp_cu_gemm_of(0, 0, B, H, G, 1.0f, (const char *)dgh + t * G * mp_cu_dt_size(OT),
                                   OT, T * G, w, WT, H, 1.0f, dhr, MP_F32, H);
        mp_cu_gemm(&g);
    }
    mp_cu_rnn_weight_grads<OT, ST>(o, acc, dgh, s, B, T, H, G, 5 * H);
}

template <int OT, int DT, int ST, int WT>
static inline void mp_cu_lstm_grad(void *o, const void *ds, const void *s, const void *w, int64_t B,
                                   int64_t T, int64_t H)
{
    int64_t G = 4 * H, a1 = mp_cu_round_up(2 * B * H * 4);
    unsigned char *ws = mp_cu_ws(a1 + G * H * 4);
    float *dhr = (float *)ws, *dcr = dhr + B * H, *acc = (float *)(ws + a1);
    mp_cu_memset(dhr, 2 * B * H * 4);
    for (int64_t t = T - 1; t >= 0; t--) {
        MpCuLstmGradCell<OT, DT, ST> f = {o, dhr, dcr, ds, s, t, T, H};
        mp_cu_each("lstm_grad", B * H, f);
        if (t == 0)
            break;
        MpCuGemm g = mp_cu_gemm_of(0, 0, B, H, G, 1.0f, (const char *)o + t * G * mp_cu_dt_size(OT),
                                   OT, T * G, w, WT, H, 0.0f, dhr, MP_F32, H);
        mp_cu_gemm(&g);
    }
    mp_cu_rnn_weight_grads<OT, ST>(o, acc, o, s, B, T, H, G, 6 * H);
}

/* ---- pad, upsample ------------------------------------------------------------- */

/* pad: y [outer, ys[0..3]] from x [outer, xs[0..3]], index j of axis k
 * reading x's j - before[k], value outside */
typedef struct MpCuPad { int64_t xs[4], ys[4], before[4]; } MpCuPad;

template <int YT, int XT>
struct MpCuPadOp {
    void *y;
    const void *x;
    MpCuPad p;
    float value;
    MP_HD void operator()(int64_t i) const
    {
        int64_t rest = i, xi = 0, stride = 1;
        for (int k = 3; k >= 0; k--) {
            int64_t j = rest % p.ys[k] - p.before[k];
            rest /= p.ys[k];
            if (j < 0 || j >= p.xs[k]) {
                mp_cu_st(y, YT, i, value);
                return;
            }
            xi += j * stride;
            stride *= p.xs[k];
        }
        mp_cu_mv(y, YT, i, x, XT, xi + rest * stride);
    }
};

template <int YT, int XT>
static inline void mp_cu_pad(void *y, const void *x, int64_t outer, const int64_t *xs, const int64_t *ys,
                             const int64_t *before, float value)
{
    MpCuPadOp<YT, XT> f = {y, x, {}, value};
    for (int k = 0; k < 4; k++) {
        f.p.xs[k] = xs[k];
        f.p.ys[k] = ys[k];
        f.p.before[k] = before[k];
    }
    mp_cu_each("pad", outer * ys[0] * ys[1] * ys[2] * ys[3], f);
}

/* pad in mode reflect / replicate / circular (grad 0) and its gradient
 * (grad 1): one element per item, mp_kernels.h's per-element functions */
template <int YT, int XT>
struct MpCuPadMode {
    void *y;
    const void *x;
    MpCuPad p;
    int mode, grad;
    MP_HD void operator()(int64_t e) const
    {
        mp_cu_st(y, YT, e, grad ? mp_pad_grad_at(x, XT, p.xs, p.ys, p.before, mode, e)
                                : mp_pad_mode_at(x, XT, p.xs, p.ys, p.before, mode, e));
    }
};

template <int YT, int XT>
static inline void mp_cu_pad_mode_run(void *y, const void *x, int64_t outer, const int64_t *xs,
                                      const int64_t *ys, const int64_t *before, int mode, int grad)
{
    MpCuPadMode<YT, XT> f = {y, x, {}, mode, grad};
    int64_t n = outer;
    for (int k = 0; k < 4; k++) {
        f.p.xs[k] = xs[k];
        f.p.ys[k] = ys[k];
        f.p.before[k] = before[k];
        n *= grad ? xs[k] : ys[k];
    }
    mp_cu_each(grad ? "pad_grad" : "pad", n, f);
}

template <int YT, int XT>
static inline void mp_cu_pad_mode(void *y, const void *x, int64_t outer, const int64_t *xs, const int64_t *ys,
                                  const int64_t *before, int mode)
{
    mp_cu_pad_mode_run<YT, XT>(y, x, outer, xs, ys, before, mode, 0);
}

template <int DXT, int DYT>
static inline void mp_cu_pad_grad(void *dx, const void *dy, int64_t outer, const int64_t *xs, const int64_t *ys,
                                  const int64_t *before, int mode)
{
    mp_cu_pad_mode_run<DXT, DYT>(dx, dy, outer, xs, ys, before, mode, 1);
}

/* upsample (grad 0) and its gradient (grad 1): one element per item, the
 * C program's per-element functions (mp_kernels.h) */
template <int YT, int XT>
struct MpCuUpsample {
    void *y;
    const void *x;
    int64_t H, W, sh, sw;
    int mode, grad;
    MP_HD void operator()(int64_t e) const
    {
        mp_cu_st(y, YT, e, grad ? mp_upsample_grad_at(x, XT, H, W, sh, sw, mode, e)
                                : mp_upsample_at(x, XT, H, W, sh, sw, mode, e));
    }
};

template <int YT, int XT>
static inline void mp_cu_upsample(void *y, const void *x, int64_t P, int64_t H, int64_t W, int64_t sh,
                                  int64_t sw, int mode)
{
    MpCuUpsample<YT, XT> f = {y, x, H, W, sh, sw, mode, 0};
    mp_cu_each("upsample", P * H * sh * W * sw, f);
}

template <int DXT, int DYT>
static inline void mp_cu_upsample_grad(void *dx, const void *dy, int64_t P, int64_t H, int64_t W,
                                       int64_t sh, int64_t sw, int mode)
{
    MpCuUpsample<DXT, DYT> f = {dx, dy, H, W, sh, sw, mode, 1};
    mp_cu_each("upsample_grad", P * H * W, f);
}

/* ---- group_norm: a block per (sample, group) row of x [N, C, S] ------------------- */

template <int YT, int XT, int WT, int BT>
struct MpCuGroupNorm {
    void *y;
    const void *x, *w, *b;
    int64_t C, S, G;
    float eps;
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        int64_t len = C / G * S;
        MpCuNorm g = {len, len, 0};
        float mean, rstd;
        mp_cu_norm_moments<XT>(t, &g, x, r * len, eps, &mean, &rstd, NULL);
        mp_cu_norm_put(&g, y, YT, x, XT, w, WT, b, BT, S, r % G * (C / G), r * len, mean, rstd, t.tid, t.nt);
    }
};

template <int YT, int XT, int WT, int BT>
static inline void mp_cu_group_norm(void *y, const void *x, const void *w, const void *b, int64_t N,
                                    int64_t C, int64_t S, int64_t G, float eps)
{
    MpCuGroupNorm<YT, XT, WT, BT> f = {y, x, w, b, C, S, G, eps};
    mp_cu_rows("group_norm", N * G, mp_cu_row_threads(C / G * S), f);
}

template <int DXT, int DYT, int XT, int WT>
struct MpCuGroupNormDx {
    void *dx;
    const void *dy, *x, *w;
    int64_t C, S, G;
    float eps;
    MP_HD void operator()(int64_t r, const MpCuTeam &t) const
    {
        int64_t len = C / G * S;
        MpCuNorm g = {len, len, 0};
        mp_cu_norm_dx<DXT, DYT, XT, WT>(t, &g, dx, dy, x, w, S, r % G * (C / G), r * len, eps);
    }
};

template <int DXT, int DYT, int XT, int WT>
static inline void mp_cu_group_norm_dx(void *dx, const void *dy, const void *x, const void *w, int64_t N,
                                       int64_t C, int64_t S, int64_t G, float eps)
{
    MpCuGroupNormDx<DXT, DYT, XT, WT> f = {dx, dy, x, w, C, S, G, eps};
    mp_cu_rows("group_norm_dx", N * G, mp_cu_row_threads(C / G * S), f);
}

/* dw[c]: a block per channel over its N S values (batch norm's set), each
 * image's values normalised with its row's statistics (st, from
 * MpCuRowStats over the N G rows) */
template <int DWT, int DYT, int XT>
struct MpCuGroupNormDw {
    void *dw;
    const void *dy, *x;
    const float *st;
    int64_t N, C, S, G;
    float beta;
    MP_HD void operator()(int64_t c, const MpCuTeam &t) const
    {
        MpCuNorm g = {N * S, S, C * S};
        MpAcc a = mp_acc_zero();
        for (int64_t e = t.tid; e < g.count; e += t.nt) {
            int64_t at = mp_cu_norm_at(&g, c * S, e);
            const float *m = st + 2 * (e / S * G + c / (C / G));
            mp_acc_add(&a, mp_cu_ld(dy, DYT, at) * ((mp_cu_ld(x, XT, at) - m[0]) * m[1]));
        }
        MpAcc s = t.sum(a);
        if (t.tid == 0)
            mp_cu_st_beta(dw, DWT, c, mp_acc_get(s), beta);
    }
};

template <int DWT, int DYT, int XT>
static inline void mp_cu_group_norm_dw(void *dw, const void *dy, const void *x, int64_t N, int64_t C,
                                       int64_t S, int64_t G, float eps, float beta)
{
    int64_t len = C / G * S;
    float *st = (float *)mp_cu_ws(N * G * 2 * (int64_t)sizeof(float));
    MpCuRowStats<XT> a = {st, x, len, eps};
    mp_cu_rows("group_norm_dw", N * G, mp_cu_row_threads(len), a);
    MpCuGroupNormDw<DWT, DYT, XT> f = {dw, dy, x, st, N, C, S, G, beta};
    mp_cu_rows("group_norm_dw", C, 256, f);
}

#endif
