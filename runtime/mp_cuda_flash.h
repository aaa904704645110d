/* mp_cuda_flash.h - attention's forward on Tensor Cores (f16 / bf16
 * products), FlashAttention-2's way: a block of four warps owns 64 query
 * rows of one head (16 a warp), walks the key tiles of 64 (causal: those at
 * or left of its last row), and keeps each row's running max m, sum of
 * exp l and output o in the registers of the lanes that hold the row
 * (online softmax: o and l rescaled by exp(m_old - m_new) when the max
 * grows); y = o / l once at the end, and each row's log-sum-exp m + log l
 * to `lse` for the backward. S = q k^T and o += P v are mma.sync m16n8k16 with
 * f32 accumulation, their operands the tiles of q, k, v staged in dynamic
 * shared memory as the compute type (64 rows of D rounded up to 16, 8
 * halves of padding a row: 27 KB at D 64; a layout above the 48 KB a block
 * gets without cudaFuncSetAttribute is opted in by mp_cu_rows_sh), P the S accumulators rounded to
 * the compute type in place (the C layout of two n-tiles is the A layout
 * of one k-tile). A warp's q fragments are read once an item into
 * registers, k's and v's by ldmatrix (.trans for v) four 8x8 matrices at a
 * time; rows already of the compute type are staged 16 bytes at a time,
 * and key tiles the whole block sees skip the per-score tests. The scores see the same rules as the f32 tiles
 * (mp_cuda_items.h: mp_cu_att_sees, mp_cu_att_mask: causal, cross, u8 and
 * f32 additive masks), element by element inside the tile. Dropout (the
 * options' drop) keeps P's sum l whole and drops the P that multiplies v,
 * each (head, query, key)'s mask bit drawn again where a kernel needs it,
 * as the f32 tiles and the C program draw it (mp_dropout_at): y = (P o M
 * / (1 - p)) v / l. The backward drops dP (dP' = dP o M / (1 - p), the
 * gradient of the dropped P) and dv's P; D = rowsum(dy y) is rowsum(P
 * dP') with y's dropout in it.
 *
 * Against the C program (normalise, round P, then P v) the sums run in
 * another order and P is rounded before it is normalised: the two differ
 * by up to twice P's rounding (2^-11 relative in f16, 2^-8 in bf16) of
 * sum |P v| plus one unit of y's last place, tests/cuda/emu_attention.cu's
 * 2e-3 (f16) and 1e-2 (bf16) of max |y|.
 *
 * FLOPs: a block's key tile of BC = 64 keys is D' BC / 16 mma's a warp, 4 warps (D' = D rounded up to 16), 2048 FMAs
 * each: 2 x 64 x BC x D' FMAs, the 4 x 64 x BC x D FLOPs FlashAttention-2
 * counts when D is a multiple of 16; causal, the diagonal tiles are
 * computed whole (mp_cu_fa_fmas counts it: 1.06x FA-2's causal count at
 * T 1024, D 64).
 *
 * In the CPU stand-in (tests/cuda/mp_cuda_emu.h) mma.sync and the quad
 * shuffles are barriers of the block's fibers: each lane posts its
 * registers and the stand-in multiplies the fragments as the PTX ISA lays
 * them out, so a lane that loads another's element is wrong there. */
#ifndef MP_CUDA_FLASH_H
#define MP_CUDA_FLASH_H

#include "mp_cuda.h"
#include "mp_kernels_nn.h"   /* MpAttnLays: where attention's tensors lie */

#define MP_CU_FA_BR 64             /* query rows of a block: 4 warps of 16 */
#define MP_CU_FA_NT 128            /* threads of a block */
#define MP_CU_FA_PAD 8             /* halves after each staged row (banks) */
#define MP_CU_FA_DMAX 64           /* the largest head size it takes: at D' 128
                                      the output's 64 registers a thread beside
                                      the rest take ptxas to 160 (sm_90), past
                                      t_cuda_build's 128; those heads run on the
                                      f32 tiles */

/* Keys of a tile for D' (one constant for every D' it takes now; a larger
 * D' would want fewer, its output's registers beside the scores') */
#define MP_CU_FA_BC(DP) 64

/* The staged tiles' bytes for D': q (64 rows), k and v (BC rows), each
 * row D' + PAD halves; then a word a thread, dropout's keep bits (a
 * register would pass 128 there: mp_cu_fa_keep); then the item's head
 * offsets (8 int64: mp_cu_fa_heads). */
#define MP_CU_FA_BYTES(DP) ((64 + 2 * MP_CU_FA_BC(DP)) * ((DP) + MP_CU_FA_PAD) * 2 + 4 * MP_CU_FA_NT + 64)

/* The backward's: dq's four tiles, D a row (its keep bits stay in a
 * register) and the head offsets; dk and dv's four tiles, three floats a
 * row and dropout's bits a thread */
#define MP_CU_FA_Q_BYTES(DP) (4 * 64 * ((DP) + MP_CU_FA_PAD) * 2 + 64 * 4 + 64)
#define MP_CU_FA_KV_BYTES(DP) (4 * 64 * ((DP) + MP_CU_FA_PAD) * 2 + 3 * 64 * 4 + 4 * MP_CU_FA_NT)

/* Loops over a thread's registers are unrolled: an array indexed by a
 * variable would live in local memory (a stack frame). */
#ifdef __CUDA_ARCH__
#define MP_CU_UNROLL _Pragma("unroll")
#define MP_CU_NO_UNROLL _Pragma("unroll 1")
#define MP_CU_PRAGMA(x) _Pragma(#x)
#define MP_CU_UNROLL_BY(n) MP_CU_PRAGMA(unroll n)   /* n: a constant expression */
#else
#define MP_CU_UNROLL
#define MP_CU_NO_UNROLL
#define MP_CU_UNROLL_BY(n)
#endif

/* name: the block's dynamic shared memory as halves (bytes: its size) */
#ifdef __CUDA_ARCH__
#define MP_CU_SHARED_DYN(name, bytes, t)                                       \
    extern __shared__ __align__(16) unsigned char mp_cu_dyn_sh[];              \
    uint16_t *name = (uint16_t *)mp_cu_dyn_sh
#elif defined(MP_CU_EMU)
#define MP_CU_SHARED_DYN(name, bytes, t) uint16_t *name = (uint16_t *)mp_emu_shared((t).emu, (size_t)(bytes) / 4)
#else
#define MP_CU_SHARED_DYN(name, bytes, t) uint16_t *name = (uint16_t *)0  /* nvcc's host pass */
#endif

/* d += a b: one warp's mma.sync.aligned.m16n8k16.row.col.f32 of f16 (bf:
 * bf16) fragments (layouts: the PTX ISA's, as tests/cuda/mp_cuda_emu.h). */
static inline MP_HD void mp_cu_mma(const MpCuTeam &t, float d[4], const uint32_t a[4],
                                   const uint32_t b[2], int bf)
{
#ifdef __CUDA_ARCH__
#if __CUDA_ARCH__ >= 800
    if (bf)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    (void)t;
#else
    (void)t; (void)d; (void)a; (void)b; (void)bf;
    __trap();                      /* never launched: mp_cu_fa_ready */
#endif
#elif defined(MP_CU_EMU)
    MpEmuBlock *e = t.emu;
    memcpy(&e->mab[(size_t)t.tid * 6], a, 4 * sizeof *a);
    memcpy(&e->mab[(size_t)t.tid * 6 + 4], b, 2 * sizeof *b);
    memcpy(&e->mcd[(size_t)t.tid * 4], d, 4 * sizeof *d);
    e->mbf = bf;
    mp_emu_barrier(e, 9, mp_emu_mma_combine);
    memcpy(d, &e->mcd[(size_t)t.tid * 4], 4 * sizeof *d);
#else
    (void)t; (void)d; (void)a; (void)b; (void)bf;
#endif
}

/* The max (sum: the sum) of v over the thread's quad (the four lanes that
 * hold one row of an mma accumulator), __shfl_xor_sync's butterfly. */
static inline MP_HD float mp_cu_quad(const MpCuTeam &t, float v, int sum)
{
#ifdef __CUDA_ARCH__
    (void)t;
    for (int o = 1; o <= 2; o <<= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = sum ? v + u : u > v ? u : v;
    }
    return v;
#elif defined(MP_CU_EMU)
    t.emu->mcd[(size_t)t.tid * 4] = v;
    t.emu->width = sum;
    mp_emu_barrier(t.emu, 10, mp_emu_quad_combine);
    return t.emu->mcd[(size_t)t.tid * 4];
#else
    (void)t; (void)sum;
    return v;
#endif
}

static inline MP_HD uint32_t mp_cu_fa_half(float x, int bf)
{
    return bf ? mp_f32_to_bf16(x) : mp_f32_to_f16(x);
}

/* lo, hi rounded to the compute type, one .f16x2 / .bf16x2 register. On
 * the device one cvt.rn.f16x2.f32 / .bf16x2.f32 (sm_80+): round to nearest
 * even with IEEE overflow to inf and subnormals, the bits mp_f32_to_f16 /
 * mp_f32_to_bf16 give for every input but a NaN (still a NaN, its payload
 * the hardware's), where the software rounding costs ~20 instructions and
 * branches an element; the stand-in keeps the portable path. */
static inline MP_HD uint32_t mp_cu_fa_pack(float lo, float hi, int bf)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
    if (bf)
        asm("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(r) : "f"(lo), "f"(hi));
    else
        asm("cvt.rn.f16x2.f32 %0, %2, %1;" : "=r"(r) : "f"(lo), "f"(hi));
    return r;
#else
    return mp_cu_fa_half(lo, bf) | mp_cu_fa_half(hi, bf) << 16;
#endif
}

/* halves p[0] (low) and p[step] (high) as one register; step 1 (p at an
 * even half: every caller's row, k and column offsets are even) one 32-bit
 * shared load in place of two 16-bit ones */
static inline MP_HD uint32_t mp_cu_fa_pair(const uint16_t *p, int step)
{
    if (step == 1) {
#ifdef __CUDA_ARCH__
        return *(const uint32_t *)p;
#else
        uint32_t u;
        memcpy(&u, p, sizeof u);   /* little-endian: p[0] the low half */
        return u;
#endif
    }
    return p[0] | (uint32_t)p[step] << 16;
}

/* ldmatrix.sync.aligned.m8n8.x4.shared.b16 (trans: .trans): four 8x8
 * matrices of halves, matrix q's rows at the addresses lanes 8 q..8 q + 7
 * pass (p: this lane's row, 16-byte aligned); r[q] is the lane's pair of
 * matrix q: row g, columns 2 (lane % 4), + 1 (trans: rows 2 (lane % 4), + 1
 * of column g), the layout of an mma's B fragment. One instruction for what
 * takes 4 (trans: 8) shared loads of 32 (16) bits a lane; the stand-in
 * gathers the pairs from the posted addresses (mp_emu_ldsm_combine). */
static inline MP_HD void mp_cu_ldsm(const MpCuTeam &t, uint32_t r[4], const uint16_t *p, int trans)
{
#ifdef __CUDA_ARCH__
#if __CUDA_ARCH__ >= 800
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    (void)t;
#else
    (void)t; (void)r; (void)p; (void)trans;
    __trap();                      /* never launched: mp_cu_fa_ready */
#endif
#elif defined(MP_CU_EMU)
    MpEmuBlock *e = t.emu;
    e->a[(size_t)t.tid] = (int64_t)(intptr_t)p;
    e->width = trans;
    mp_emu_barrier(e, 11, mp_emu_ldsm_combine);
    memcpy(r, &e->mab[(size_t)t.tid * 6], 4 * sizeof *r);
#else
    (void)t; (void)r; (void)p; (void)trans;
#endif
}

/* 16 bytes from src to dst (both 16-byte aligned): one 128-bit load and store */
static inline MP_HD void mp_cu_fa_copy16(void *dst, const void *src)
{
#ifdef __CUDA_ARCH__
    *(uint4 *)dst = *(const uint4 *)src;
#else
    memcpy(dst, src, 16);
#endif
}

/* One attention problem on Tensor Cores (mp_cu_attention's arguments). */
struct MpCuFa {
    const void *q, *k, *v;
    void *o;
    int qdt, kdt, vdt, odt;
    float *lse;                    /* [BH T]: each row's log-sum-exp m + log l of
                                      the scores (-inf: it sees no key), for the
                                      backward; or NULL */
    int64_t T, Tk, D, nqt;         /* nqt: query tiles of 64 a head */
    int causal, bf;
    float scale;
    const void *mask;              /* options (MpAttnOpt, mp_kernels_nn.h) */
    int mdt;
    int64_t H, ms[4];
    float drop, dscale;            /* dropout p (0: none), 1 / (1 - p) */
    uint64_t seed;                 /* its generator: (seed, step, micro, node) */
    const MpCuHdr *hdr;            /* the step, on the device */
    int64_t micro, node;
    MpAttnLays lay;                /* where q, k, v, y (dy), dq, dk, dv lie */
    unsigned vec;                  /* bit MP_CU_FA_V*: staged 16 bytes at a time */
    const void *qd, *kd, *vd;      /* q, k, v dense ([BH, T or T', D]), for the
                                      kernels that read them so (MP_CU_FA_DENSE) */
};

/* The kernels that stage q, k, v (and dy) dense, from copies where they lie
 * otherwise (mp_cu_att_dense): attention_grad_kv_tc, and the forward with
 * dropout at D' 64. Staged through their strides, each took more than 128
 * registers, into spills, however the strides were kept. */
#define MP_CU_FA_DENSE_FWD(DP, DROP) ((DROP) && (DP) == 64)

/* The tensors staged (mp_cu_fa_stage): their bits in MpCuFa's vec */
enum { MP_CU_FA_VQ, MP_CU_FA_VK, MP_CU_FA_VV, MP_CU_FA_VDY, MP_CU_FA_VY };

/* The key of attention dropout's mask this step, the step read on the
 * device (0: no dropout); the f32 tiles' too (mp_cu_att_key) */
static inline MP_HD uint64_t mp_cu_drop_key(float drop, uint64_t seed, const MpCuHdr *hdr,
                                            int64_t micro, int64_t node)
{
    return drop > 0.0f ? mp_dropout_key(seed, hdr->step, micro, node) : 0;
}

static inline MP_HD uint64_t mp_cu_fa_key(const MpCuFa *a)
{
    return mp_cu_drop_key(a->drop, a->seed, a->hdr, a->micro, a->node);
}

/* Dropout's keep bits of one thread's 32 elements of a 64 x 64 tile (a
 * template's DROP: the kernels without dropout are built without it),
 * drawn in a loop before the tile's unrolled ones, which then read a bit
 * where they would hold a hash. Element u (u = 4 n + e of the thread's
 * accumulators s[n][e], n-tiles of 8 across the tile) is row 16 w + g +
 * 8 (e >> 1), column 8 n + c + (e & 1) of the tile; of the tile of query
 * rows i0.. and keys j0.. or, tr: the tile of keys j0.. (rows) and query
 * rows i0.. (columns), dk and dv's. Bit u: mp_dropout_at's test. */
static inline MP_HD uint32_t mp_cu_fa_keep(const MpCuFa *a, int64_t h, int64_t i0, int64_t j0,
                                           int w, int g, int c, int tr)
{
    uint64_t key = mp_cu_fa_key(a);   /* again each tile: no register held across */
    uint32_t b = 0;
    MP_CU_NO_UNROLL
    for (int u = 0; u < 32; u++) {
        int row = 16 * w + g + (u & 3) / 2 * 8, col = 8 * (u >> 2) + c + (u & 1);
        int64_t i = i0 + (tr ? col : row), j = j0 + (tr ? row : col);
        b |= (uint32_t)(mp_dropout_u(key, (h * a->T + i) * a->Tk + j) >= a->drop) << u;
    }
    return b;
}

/* x after dropout: x / (1 - p) where bit u of keep keeps it, else 0 */
static inline MP_HD float mp_cu_fa_dropped(uint32_t keep, int u, float dscale, float x)
{
    return keep >> u & 1u ? x * dscale : 0.0f;
}

/* Keys a query tile from i0 walks: every T', or causal up to its last row. */
static inline MP_HD int64_t mp_cu_fa_keys(const MpCuFa *a, int64_t i0)
{
    int64_t last = i0 + MP_CU_FA_BR;
    return a->causal && last < a->Tk ? last : a->Tk;
}

/* n rows of x (type xdt; head h of `rows` rows of D, dense, from row r0)
 * into s as the compute type, D' halves a row (zeros past D and past the
 * last row): the staging of attention_grad_kv_tc's q, k, v and dy, which
 * it reads dense (mp_cu_attention_grad copies them dense where they do not
 * lie so: staged through their strides, that kernel took more than 128
 * registers at D' 64, into spills, however the strides were kept) */
template <int DP>
static inline MP_HD void mp_cu_fa_stage_dense(uint16_t *s, int n, const void *x, int xdt,
                                              int64_t rows, int64_t h, int64_t r0, int64_t D,
                                              int bf, const MpCuTeam &t)
{
    if (xdt == (bf ? MP_BF16 : MP_F16) && D == DP && ((uintptr_t)x & 15) == 0) {
        const uint16_t *xs = (const uint16_t *)x + (h * rows + r0) * DP;
        for (int e = t.tid; e < n * (DP / 8); e += t.nt) {
            int r = e / (DP / 8), d = e % (DP / 8) * 8;
            uint16_t *to = s + r * (DP + MP_CU_FA_PAD) + d;
            if (r0 + r < rows)
                mp_cu_fa_copy16(to, xs + (int64_t)r * DP + d);
            else
                for (int u = 0; u < 8; u++)
                    to[u] = 0;
        }
        return;
    }
    for (int e = t.tid; e < n * DP; e += t.nt) {
        int r = e / DP, d = e % DP;
        float v = r0 + r < rows && d < D ? mp_cu_ld(x, xdt, (h * rows + r0 + r) * D + d) : 0.0f;
        s[r * (DP + MP_CU_FA_PAD) + d] = (uint16_t)mp_cu_fa_half(v, bf);
    }
}

/* n rows of tensor `which` (x, type xdt: its layout in a.lay; its head's
 * rows from element hb (mp_attn_head), of `rows`, from row r0) into s as
 * the compute type, D' halves a row (zeros past D and past the last row) */
template <int DP>
static inline MP_HD void mp_cu_fa_stage(uint16_t *s, int n, const MpCuFa &a, int which,
                                        const void *x, int xdt, int64_t hb, int64_t r0, int vbit,
                                        const MpCuTeam &t)
{
    int64_t rows = which == MP_ATT_K || which == MP_ATT_V ? a.Tk : a.T, D = a.D;
    const int st = (int)a.lay.l[which].st;   /* under 2^25 (mp_cu_fa_lays): r st in 32 bits */
    int64_t at = hb + r0 * st;
    /* The common case, x already the compute type and D = D' (rows of 16-byte
     * multiples) from 16-byte aligned rows (vec's bit vbit: mp_cu_fa_vec):
     * rows copied 8 halves at a time (f16 -> f32 -> f16 is exact: the same
     * bits as below), zeros past the last row. Other types, widths or
     * alignments: element by element. */
    if ((a.vec >> vbit & 1u) && D == DP) {
        const uint16_t *xs = (const uint16_t *)x + at;
        for (int e = t.tid; e < n * (DP / 8); e += t.nt) {
            int r = e / (DP / 8), d = e % (DP / 8) * 8;
            uint16_t *to = s + r * (DP + MP_CU_FA_PAD) + d;
            if (r0 + r < rows)
                mp_cu_fa_copy16(to, xs + (r * st + d));   /* 32 bits: r < 64, st < 2^25 */
            else
                for (int u = 0; u < 8; u++)
                    to[u] = 0;
        }
        return;
    }
    for (int e = t.tid; e < n * DP; e += t.nt) {
        int r = e / DP, d = e % DP;
        float v = r0 + r < rows && d < D ? mp_cu_ld(x, xdt, at + (r * st + d)) : 0.0f;
        s[r * (DP + MP_CU_FA_PAD) + d] = (uint16_t)mp_cu_fa_half(v, a.bf);
    }
}

/* Head h's offset in the mask (0 without one): once an item where it can,
 * a 64-bit division being a called subroutine on the GPU */
static inline MP_HD int64_t mp_cu_fa_mask_head(const MpCuFa *a, int64_t h)
{
    return a->mask ? h / a->H * a->ms[0] + h % a->H * a->ms[1] : 0;
}

/* hb[x]: the element where the rows of tensor x of the item's head h
 * begin (mp_attn_head), one thread each, in the block's shared memory; the
 * caller's barrier follows. The stagings and stores read them there after
 * barriers, so that they hold no registers across the tile loops (the
 * divisions and their results took the kernels at D' 64 past 128
 * registers into spills). */
static inline MP_HD void mp_cu_fa_heads(int64_t *hb, const MpCuFa &a, int64_t h, const MpCuTeam &t)
{
    if (t.tid < MP_ATT_NLAY)
        hb[t.tid] = mp_attn_head(&a.lay, t.tid, h);
}

/* The score of query row i, key j from the product acc (mh: the head's
 * mp_cu_fa_mask_head): scaled, masked, -INFINITY where the row does not see
 * the key (or is past T). */
static inline MP_HD float mp_cu_fa_score_at(const MpCuFa *a, float acc, int64_t mh, int64_t i, int64_t j)
{
    if (i >= a->T || !mp_cu_att_sees(i, j, a->Tk, a->causal))
        return -INFINITY;
    float s = acc * a->scale;
    if (a->mask)
        s = mp_cu_att_mask(s, a->mask, a->mdt, mh + i * a->ms[2] + j * a->ms[3]);
    return s;
}

/* the same of head h */
static inline MP_HD float mp_cu_fa_score(const MpCuFa *a, float acc, int64_t h, int64_t i, int64_t j)
{
    return mp_cu_fa_score_at(a, acc, mp_cu_fa_mask_head(a, h), i, j);
}

/* A key tile of bc keys from j0 that every query row of the tile from i0
 * sees whole (no mask, rows and keys inside T and T', causal: left of the
 * tile's first row): its scores need only the scale, mp_cu_fa_score's
 * value there without its tests. */
static inline MP_HD int mp_cu_fa_whole(const MpCuFa *a, int64_t i0, int64_t j0, int64_t bc)
{
    return !a->mask && i0 + MP_CU_FA_BR <= a->T && j0 + bc <= a->Tk && (!a->causal || j0 + bc - 1 <= i0);
}

/* Forward: item (head, query tile of 64). Warp w holds rows 16 w + g and
 * 16 w + g + 8 of the tile (g = lane / 4) in its accumulators' registers
 * 0, 1 and 2, 3; columns 2 (lane % 4) and + 1 of each n-tile of 8. */
template <int DP, int DROP>
struct MpCuFaFwd {
    static constexpr int most = MP_CU_FA_NT;
    static constexpr int BC = MP_CU_FA_BC(DP), NB = BC / 8;   /* keys, n-tiles of a key tile */
    MpCuFa a;
    MP_HD void operator()(int64_t it, const MpCuTeam &t) const
    {
        MP_CU_SHARED_DYN(sh, MP_CU_FA_BYTES(DP), t);
        const int ld = DP + MP_CU_FA_PAD, w = t.tid / 32, lane = t.tid % 32;
        const int g = lane >> 2, c = (lane & 3) * 2;
        const int64_t h = it / a.nqt;
        const int i0 = (int)(it % a.nqt) * MP_CU_FA_BR;   /* rows and keys in 32 bits: registers */
        uint16_t *qs = sh, *ks = qs + 64 * ld, *vs = ks + BC * ld;
        uint32_t *kw = (uint32_t *)(vs + BC * ld);   /* DROP: each thread's keep bits */
        int64_t *hb = (int64_t *)(kw + MP_CU_FA_NT);   /* the heads' rows (mp_cu_fa_heads) */
        float o[DP / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
        MP_CU_UNROLL
        for (int d = 0; d < DP / 8; d++)
            o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
        t.sync();   /* the block's previous item is done with the tiles */
        if (!MP_CU_FA_DENSE_FWD(DP, DROP)) {
            mp_cu_fa_heads(hb, a, h, t);
            t.sync();
        }
        if (MP_CU_FA_DENSE_FWD(DP, DROP))
            mp_cu_fa_stage_dense<DP>(qs, 64, a.qd, a.qdt, a.T, h, i0, a.D, a.bf, t);
        else
            mp_cu_fa_stage<DP>(qs, 64, a, MP_ATT_Q, a.q, a.qdt, hb[MP_ATT_Q], i0, MP_CU_FA_VQ, t);
        t.sync();   /* q staged */
        uint32_t fq[DP / 16][4];   /* the warp's q rows as A fragments, once an item */
        MP_CU_UNROLL
        for (int kk = 0; kk < DP / 16; kk++) {
            const uint16_t *q0 = qs + (16 * w + g) * ld + 16 * kk + c, *q1 = q0 + 8 * ld;
            fq[kk][0] = mp_cu_fa_pair(q0, 1);
            fq[kk][1] = mp_cu_fa_pair(q1, 1);
            fq[kk][2] = mp_cu_fa_pair(q0 + 8, 1);
            fq[kk][3] = mp_cu_fa_pair(q1 + 8, 1);
        }
        const int nk = (int)mp_cu_fa_keys(&a, i0);
        const int64_t mh = mp_cu_fa_mask_head(&a, h);
        for (int j0 = 0; j0 < nk; j0 += BC) {
            t.sync();   /* the previous key tile's readers are done */
            if (MP_CU_FA_DENSE_FWD(DP, DROP)) {
                mp_cu_fa_stage_dense<DP>(ks, BC, a.kd, a.kdt, a.Tk, h, j0, a.D, a.bf, t);
                mp_cu_fa_stage_dense<DP>(vs, BC, a.vd, a.vdt, a.Tk, h, j0, a.D, a.bf, t);
            } else {
                mp_cu_fa_stage<DP>(ks, BC, a, MP_ATT_K, a.k, a.kdt, hb[MP_ATT_K], j0, MP_CU_FA_VK, t);
                mp_cu_fa_stage<DP>(vs, BC, a, MP_ATT_K, a.v, a.vdt, hb[MP_ATT_K], j0, MP_CU_FA_VV, t);   /* v lies as k */
            }
            if (DROP)
                kw[t.tid] = mp_cu_fa_keep(&a, h, i0, j0, w, g, c, 0);
            t.sync();   /* k, v staged: every warp sees them */
            float s[NB][4];
            MP_CU_UNROLL
            for (int n = 0; n < NB; n++)
                s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            MP_CU_UNROLL
            for (int kk = 0; kk < DP / 16; kk++)   /* S = q k^T */
                MP_CU_UNROLL
                for (int n = 0; n < NB; n += 2) {   /* k rows 8 n.. and 8 n + 8.., d 16 kk.. */
                    uint32_t fb[4];
                    mp_cu_ldsm(t, fb, ks + (8 * n + (lane & 7) + (lane >> 4) * 8) * ld + 16 * kk +
                                          (lane >> 3 & 1) * 8, 0);
                    mp_cu_mma(t, s[n], fq[kk], fb, a.bf);
                    mp_cu_mma(t, s[n + 1], fq[kk], fb + 2, a.bf);
                }
            if (mp_cu_fa_whole(&a, i0, j0, BC)) {
                MP_CU_UNROLL
                for (int n = 0; n < NB; n++)
                    MP_CU_UNROLL
                    for (int e = 0; e < 4; e++)
                        s[n][e] *= a.scale;
            } else {
                MP_CU_UNROLL
                for (int n = 0; n < NB; n++)
                    MP_CU_UNROLL
                    for (int e = 0; e < 4; e++) {
                        int i = i0 + 16 * w + g + (e >> 1) * 8, j = j0 + 8 * n + c + (e & 1);
                        s[n][e] = mp_cu_fa_score_at(&a, s[n][e], mh, i, j);
                    }
            }
            float mx[2] = {m[0], m[1]};
            MP_CU_UNROLL
            for (int n = 0; n < NB; n++)
                MP_CU_UNROLL
                for (int e = 0; e < 4; e++)
                    mx[e >> 1] = s[n][e] > mx[e >> 1] ? s[n][e] : mx[e >> 1];
            MP_CU_UNROLL
            for (int r = 0; r < 2; r++) {   /* the new max; o and l in its units */
                mx[r] = mp_cu_quad(t, mx[r], 0);
                float f = m[r] == -INFINITY ? 0.0f : mp_expf_p(m[r] - mx[r]);
                m[r] = mx[r];
                l[r] *= f;
                MP_CU_UNROLL
                for (int d = 0; d < DP / 8; d++) {
                    o[d][2 * r] *= f;
                    o[d][2 * r + 1] *= f;
                }
            }
            MP_CU_UNROLL
            for (int n = 0; n < NB; n++)
                MP_CU_UNROLL
                for (int e = 0; e < 4; e++) {
                    float p = s[n][e] == -INFINITY ? 0.0f : mp_expf_p(s[n][e] - m[e >> 1]);
                    s[n][e] = p;
                    l[e >> 1] += p;
                }
            MP_CU_UNROLL
            for (int kc = 0; kc < NB / 2; kc++) {   /* o += P v, 16 keys at a time */
                if (DROP)   /* l keeps the whole sum; the P that multiplies v is dropped */
                    MP_CU_UNROLL
                    for (int n = 2 * kc; n < 2 * kc + 2; n++)
                        MP_CU_UNROLL
                        for (int e = 0; e < 4; e++)
                            s[n][e] = mp_cu_fa_dropped(kw[t.tid], 4 * n + e, a.dscale, s[n][e]);
                uint32_t fa[4] = {mp_cu_fa_pack(s[2 * kc][0], s[2 * kc][1], a.bf),
                                  mp_cu_fa_pack(s[2 * kc][2], s[2 * kc][3], a.bf),
                                  mp_cu_fa_pack(s[2 * kc + 1][0], s[2 * kc + 1][1], a.bf),
                                  mp_cu_fa_pack(s[2 * kc + 1][2], s[2 * kc + 1][3], a.bf)};
                MP_CU_UNROLL
                for (int d = 0; d < DP / 8; d += 2) {   /* v rows 16 kc.., columns 8 d.. and 8 d + 8.. */
                    uint32_t fb[4];
                    mp_cu_ldsm(t, fb, vs + (16 * kc + (lane & 15)) * ld + 8 * d + (lane >> 4) * 8, 1);
                    mp_cu_mma(t, o[d], fa, fb, a.bf);
                    mp_cu_mma(t, o[d + 1], fa, fb + 2, a.bf);
                }
            }
        }
        const int64_t yh = MP_CU_FA_DENSE_FWD(DP, DROP) ? mp_attn_head(&a.lay, MP_ATT_Y, h) : hb[MP_ATT_Y];
        const int64_t yst = a.lay.l[MP_ATT_Y].st;
        MP_CU_UNROLL
        for (int r = 0; r < 2; r++) {
            l[r] = mp_cu_quad(t, l[r], 1);
            int i = i0 + 16 * w + g + 8 * r;
            if (i >= a.T)
                continue;
            float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;   /* a row that sees no key: 0 */
            MP_CU_UNROLL
            for (int d = 0; d < DP / 8; d++)
                MP_CU_UNROLL
                for (int e = 0; e < 2; e++)
                    if (8 * d + c + e < a.D)
                        mp_cu_st(a.o, a.odt, yh + i * yst + 8 * d + c + e, o[d][2 * r + e] * inv);
            if (a.lse && c == 0)
                a.lse[h * a.T + i] = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
        }
    }
};

/* FMAs the forward's mma's do for BH heads (the kernel's own loops: every
 * block, every key tile it walks, 4 warps x (D'/16 x BC/8 + BC/16 x D'/8)
 * mma's of 16 x 8 x 16), to compare with FlashAttention-2's 2 BH T T' D
 * (causal: half). */
static inline double mp_cu_fa_fmas(int64_t BH, int64_t T, int64_t Tk, int64_t D, int causal)
{
    int64_t dp = D <= 16 ? 16 : D <= 32 ? 32 : 64, bc = MP_CU_FA_BC(dp), tiles = 0;
    MpCuFa a = {};
    a.Tk = Tk;
    a.causal = causal;
    for (int64_t i0 = 0; i0 < T; i0 += MP_CU_FA_BR)
        tiles += (mp_cu_fa_keys(&a, i0) + bc - 1) / bc;
    double per_tile = 4.0 * (dp / 16 * (bc / 8) + bc / 16 * (dp / 8)) * 16 * 8 * 16;
    return (double)BH * (double)tiles * per_tile;
}

/* ---- the backward on Tensor Cores ------------------------------------------------
 * Two kernels and no atomics (as the f32 tiles), each 4 warps over 16-row
 * slices of a tile of 64, the products mma.sync's in chunks of 16 so that
 * a chunk's scores and dP are one A fragment:
 *   attention_grad_q_tc, per query tile: the rows' log-sum-exp the forward
 *     kept (lse: P = exp(s - lse)), D = rowsum(dy y) from the staged tiles of dy
 *     and y (FlashAttention-2's; the C program sums P dP over the keys:
 *     the same value, y's and P's roundings apart); one walk over the key
 *     tiles it sees: S = q k^T, dP = dy v^T, dS = P (dP - D) scale rounded
 *     to the compute type (mp_cu_att_ds, as the C program) and dq += dS k;
 *     leaves each row's lse, 1, D (st, [BH T, 3] floats of the op's work
 *     space: as the f32 tiles' m, l, D);
 *   attention_grad_kv_tc, per key tile (warp w: keys 16 w..16 w + 15): over
 *     the query tiles that see it, S^T = k q^T and dP^T = v dy^T, P^T from
 *     the rows' m and l (mp_cu_att_p, rounded: Pr), dS^T, dv += Pr^T dy and
 *     dk += dS^T q.
 * The products' operands are read from the staged tiles by ldmatrix (A and
 * B fragments four 8x8 matrices an instruction, .trans for the B of dq, dv
 * and dk), and a tile every row sees whole skips the per-score tests, as in
 * the forward; dS is rounded once, by its fragment's packing
 * (mp_cu_att_ds to MP_F32: unrounded there; the packing's rounding gives the
 * bits the C program's rounding of dS does).
 * Per (query, key) pair and D': 2 + 2 + 2 (dq's walk) + 2 + 2 + 2 + 2:
 * 14 FLOPs against FlashAttention-2's 10 (which adds dq atomically from
 * the dk, dv walk): mp_cu_fa_bwd_fmas counts it. */

/* rows 16 kc.. of bs as the B operand B[row][d] of d-tiles d and d + 1
 * (fb[0..1], fb[2..3]): one ldmatrix .trans */
template <int DP>
static inline MP_HD void mp_cu_fa_cols_b(uint32_t fb[4], const uint16_t *bs, int kc, int d, int lane,
                                         const MpCuTeam &t)
{
    mp_cu_ldsm(t, fb, bs + (16 * kc + (lane & 15)) * (DP + MP_CU_FA_PAD) + 8 * d + (lane >> 4) * 8, 1);
}

/* s[nn] = (rows 16 w.. of as) (rows 16 kc + 8 nn.. of bs)^T over D', nn < 2:
 * the chunk's two n-tiles of 8. Per 16 of D', one ldmatrix for the A
 * fragment (its four 8x8 matrices: rows 0-7 and 8-15 of columns 0-7, then
 * of columns 8-15) and one for the B fragments of both n-tiles (rows 0-7 of
 * columns 0-7 and 8-15, then rows 8-15), as the forward reads k. */
template <int DP>
static inline MP_HD void mp_cu_fa_chunk(float s[2][4], const uint16_t *as, const uint16_t *bs, int w,
                                        int kc, int lane, int bf, const MpCuTeam &t)
{
    const int ld = DP + MP_CU_FA_PAD;
    const uint16_t *ar = as + (16 * w + (lane & 7) + (lane >> 3 & 1) * 8) * ld + (lane >> 4) * 8;
    const uint16_t *br = bs + (16 * kc + (lane & 7) + (lane >> 4) * 8) * ld + (lane >> 3 & 1) * 8;
    MP_CU_UNROLL
    for (int nn = 0; nn < 2; nn++)
        s[nn][0] = s[nn][1] = s[nn][2] = s[nn][3] = 0.0f;
    MP_CU_UNROLL
    for (int kk = 0; kk < DP; kk += 16) {
        uint32_t fa[4], fb[4];
        mp_cu_ldsm(t, fa, ar + kk, 0);
        mp_cu_ldsm(t, fb, br + kk, 0);
        mp_cu_mma(t, s[0], fa, fb, bf);
        mp_cu_mma(t, s[1], fa, fb + 2, bf);
    }
}

/* x[2][4] (an accumulator pair) as one A fragment, rounded */
static inline MP_HD void mp_cu_fa_a(uint32_t fa[4], const float x[2][4], int bf)
{
    fa[0] = mp_cu_fa_pack(x[0][0], x[0][1], bf);
    fa[1] = mp_cu_fa_pack(x[0][2], x[0][3], bf);
    fa[2] = mp_cu_fa_pack(x[1][0], x[1][1], bf);
    fa[3] = mp_cu_fa_pack(x[1][2], x[1][3], bf);
}

/* The backward's problem: the forward's, with dy and the gradient g
 * [BH, T + 2 T', D] (dq, dk, dv a head) in place of y; the forward's y
 * and the rows' log-sum-exp it kept (MpCuFa.lse). */
struct MpCuFaB {
    MpCuFa a;
    const void *dy, *y;
    int dydt, ydt;
    const float *lse;              /* [BH T] */
    float *st;                     /* [BH T, 3]: m, l, D */
    int64_t nkt;                   /* key tiles of 64 a head */
    const void *dyd;               /* dy dense [BH, T, D] (as MpCuFa's qd) */
};


template <int DP, int DROP>
struct MpCuFaDq {
    static constexpr int most = MP_CU_FA_NT;
    MpCuFaB b;
    MP_HD void operator()(int64_t it, const MpCuTeam &t) const
    {
        MP_CU_SHARED_DYN(sh, MP_CU_FA_Q_BYTES(DP), t);
        const MpCuFa &a = b.a;
        const int ld = DP + MP_CU_FA_PAD, w = t.tid / 32, lane = t.tid % 32;
        const int g = lane >> 2, c = (lane & 3) * 2;
        const int64_t h = it / a.nqt;
        const int i0 = (int)(it % a.nqt) * MP_CU_FA_BR;   /* rows and keys in 32 bits: registers */
        uint16_t *qs = sh, *dys = qs + 64 * ld, *ks = dys + 64 * ld, *vs = ks + 64 * ld;
        float *sd = (float *)(vs + 64 * ld);
        int64_t *hb = (int64_t *)(sd + 64);   /* the heads' rows (mp_cu_fa_heads) */
        float dq[DP / 8][4];
        MP_CU_UNROLL
        for (int d = 0; d < DP / 8; d++)
            dq[d][0] = dq[d][1] = dq[d][2] = dq[d][3] = 0.0f;
        t.sync();   /* the block's previous item is done with the tiles */
        mp_cu_fa_heads(hb, a, h, t);
        t.sync();
        mp_cu_fa_stage<DP>(qs, 64, a, MP_ATT_Q, a.q, a.qdt, hb[MP_ATT_Q], i0, MP_CU_FA_VQ, t);
        mp_cu_fa_stage<DP>(dys, 64, a, MP_ATT_Y, b.dy, b.dydt, hb[MP_ATT_Y], i0, MP_CU_FA_VDY, t);
        mp_cu_fa_stage<DP>(ks, 64, a, MP_ATT_Y, b.y, b.ydt, hb[MP_ATT_Y], i0, MP_CU_FA_VY, t);   /* y, for D */
        t.sync();
        for (int r = t.tid; r < 64; r += t.nt) {   /* D = rowsum(dy y) */
            float s = 0.0f;
            for (int d = 0; d < DP; d++)
                s += mp_cu_ld(dys, a.bf ? MP_BF16 : MP_F16, r * ld + d) *
                     mp_cu_ld(ks, a.bf ? MP_BF16 : MP_F16, r * ld + d);
            sd[r] = s;
        }
        t.sync();   /* D seen by every warp; ks free again */
        float lse[2], dd[2];   /* P = exp(s - lse); +inf (P 0): rows past T or that see no key */
        MP_CU_UNROLL
        for (int r = 0; r < 2; r++) {
            int64_t i = i0 + 16 * w + g + 8 * r;
            lse[r] = i < a.T ? b.lse[h * a.T + i] : INFINITY;
            lse[r] = lse[r] == -INFINITY ? INFINITY : lse[r];
            dd[r] = sd[16 * w + g + 8 * r];
        }
        const int nk = (int)mp_cu_fa_keys(&a, i0);
        const int64_t mh = mp_cu_fa_mask_head(&a, h);
        for (int j0 = 0; j0 < nk; j0 += 64) {
            t.sync();   /* the previous key tile's readers are done */
            mp_cu_fa_stage<DP>(ks, 64, a, MP_ATT_K, a.k, a.kdt, hb[MP_ATT_K], j0, MP_CU_FA_VK, t);
            mp_cu_fa_stage<DP>(vs, 64, a, MP_ATT_K, a.v, a.vdt, hb[MP_ATT_K], j0, MP_CU_FA_VV, t);   /* v lies as k */
            const uint32_t keep = DROP ? mp_cu_fa_keep(&a, h, i0, j0, w, g, c, 0) : 0;
            t.sync();   /* staged: every warp sees them */
            const int whole = mp_cu_fa_whole(&a, i0, j0, 64);
            MP_CU_NO_UNROLL   /* the chunks one body: registers and instruction cache */
            for (int kc = 0; kc < 4; kc++) {
                float s[2][4], dp[2][4];
                mp_cu_fa_chunk<DP>(s, qs, ks, w, kc, lane, a.bf, t);    /* q k^T */
                mp_cu_fa_chunk<DP>(dp, dys, vs, w, kc, lane, a.bf, t);  /* dy v^T */
                MP_CU_UNROLL
                for (int nn = 0; nn < 2; nn++)   /* dS */
                    MP_CU_UNROLL
                    for (int e = 0; e < 4; e++) {
                        int i = i0 + 16 * w + g + (e >> 1) * 8;
                        int j = j0 + 16 * kc + 8 * nn + c + (e & 1);
                        float sc = whole ? s[nn][e] * a.scale : mp_cu_fa_score_at(&a, s[nn][e], mh, i, j);
                        float dpv = DROP ? mp_cu_fa_dropped(keep, 8 * kc + 4 * nn + e, a.dscale, dp[nn][e])
                                         : dp[nn][e];   /* dP' */
                        s[nn][e] = mp_cu_att_ds(mp_cu_att_p(sc, lse[e >> 1], 1.0f), dpv, dd[e >> 1],
                                                a.scale, MP_F32);
                    }
                uint32_t fa[4];
                mp_cu_fa_a(fa, s, a.bf);
                MP_CU_UNROLL
                for (int d = 0; d < DP / 8; d += 2) {   /* dq += dS k */
                    uint32_t fb[4];
                    mp_cu_fa_cols_b<DP>(fb, ks, kc, d, lane, t);
                    mp_cu_mma(t, dq[d], fa, fb, a.bf);
                    mp_cu_mma(t, dq[d + 1], fa, fb + 2, a.bf);
                }
            }
        }
        const int64_t qat = hb[MP_ATT_DQ], qst = a.lay.l[MP_ATT_DQ].st;
        MP_CU_UNROLL
        for (int r = 0; r < 2; r++) {
            int64_t i = i0 + 16 * w + g + 8 * r;
            if (i >= a.T)
                continue;
            MP_CU_UNROLL
            for (int d = 0; d < DP / 8; d++)
                MP_CU_UNROLL
                for (int e = 0; e < 2; e++)
                    if (8 * d + c + e < a.D)
                        mp_cu_st(a.o, a.odt, qat + i * qst + 8 * d + c + e, dq[d][2 * r + e]);
            if (c == 0) {   /* as m, l, D: P = exp(s - lse) / 1 */
                float *st = b.st + (h * a.T + i) * 3;
                st[0] = lse[r];
                st[1] = lse[r] != INFINITY ? 1.0f : 0.0f;
                st[2] = dd[r];
            }
        }
    }
};

/* dk and dv (PART 0), or dv alone (1: no dP, no dS) or dk alone (2): at
 * D' 64 with dropout, the two kernels (dP's scores computed twice), whose
 * 64 accumulators beside dropout's bits would pass 128 registers in one */
template <int DP, int DROP, int PART = 0>
struct MpCuFaDkv {
    static constexpr int most = MP_CU_FA_NT;
    static constexpr bool DK = PART != 1, DV = PART != 2;
    MpCuFaB b;
    MP_HD void operator()(int64_t it, const MpCuTeam &t) const
    {
        MP_CU_SHARED_DYN(sh, MP_CU_FA_KV_BYTES(DP), t);
        const MpCuFa &a = b.a;
        const int ld = DP + MP_CU_FA_PAD, w = t.tid / 32, lane = t.tid % 32;
        const int g = lane >> 2, c = (lane & 3) * 2;
        int64_t h = it / b.nkt, j0 = it % b.nkt * 64, mh = mp_cu_fa_mask_head(&a, h);
        uint16_t *ks = sh, *vs = ks + 64 * ld, *qs = vs + 64 * ld, *dys = qs + 64 * ld;
        float *sm = (float *)(dys + 64 * ld), *sinv = sm + 64, *sd = sinv + 64;
        uint32_t *kw = (uint32_t *)(sd + 64);   /* DROP: each thread's keep bits */
        float dk[DP / 8][4], dv[DP / 8][4];
        MP_CU_UNROLL
        for (int d = 0; d < DP / 8; d++)
            MP_CU_UNROLL
            for (int e = 0; e < 4; e++)
                dk[d][e] = dv[d][e] = 0.0f;
        t.sync();   /* the block's previous item is done with the tiles */
        mp_cu_fa_stage_dense<DP>(ks, 64, a.kd, a.kdt, a.Tk, h, j0, a.D, a.bf, t);
        if (DK)
            mp_cu_fa_stage_dense<DP>(vs, 64, a.vd, a.vdt, a.Tk, h, j0, a.D, a.bf, t);
        for (int64_t i0 = a.causal ? j0 : 0; i0 < a.T; i0 += 64) {
            t.sync();   /* the previous query tile's readers are done */
            mp_cu_fa_stage_dense<DP>(qs, 64, a.qd, a.qdt, a.T, h, i0, a.D, a.bf, t);
            mp_cu_fa_stage_dense<DP>(dys, 64, b.dyd, b.dydt, a.T, h, i0, a.D, a.bf, t);
            for (int r = t.tid; r < 64; r += t.nt) {
                const float *st = b.st + (h * a.T + i0 + r) * 3;
                int in = i0 + r < a.T && st[1] > 0.0f;
                sm[r] = in ? st[0] : 0.0f;
                sinv[r] = in ? 1.0f / st[1] : 0.0f;
                sd[r] = in ? st[2] : 0.0f;
            }
            if (DROP)
                kw[t.tid] = mp_cu_fa_keep(&a, h, i0, j0, w, g, c, 1);
            t.sync();   /* staged: every warp sees them */
            const int whole = mp_cu_fa_whole(&a, i0, j0, 64);
            MP_CU_UNROLL_BY((DROP && DP < 64 ? 1 : 4))   /* (ptxas: no spill either way) */
            for (int qc = 0; qc < 4; qc++) {
                float s[2][4], dp[2][4];
                mp_cu_fa_chunk<DP>(s, ks, qs, w, qc, lane, a.bf, t);    /* k q^T */
                if (DK)
                    mp_cu_fa_chunk<DP>(dp, vs, dys, w, qc, lane, a.bf, t);  /* v dy^T */
                MP_CU_UNROLL
                for (int nn = 0; nn < 2; nn++)
                    MP_CU_UNROLL
                    for (int e = 0; e < 4; e++) {
                        int r = 16 * qc + 8 * nn + c + (e & 1);   /* the query, in the tile */
                        int64_t j = j0 + 16 * w + g + (e >> 1) * 8;
                        float sc = whole ? s[nn][e] * a.scale : mp_cu_fa_score_at(&a, s[nn][e], mh, i0 + r, j);
                        float p = mp_cu_att_p(sc, sm[r], sinv[r]);
                        const int u = 8 * qc + 4 * nn + e;   /* DROP: dS from dP', then dv's P dropped */
                        if (DK)
                            dp[nn][e] = mp_cu_att_ds(p, DROP ? mp_cu_fa_dropped(kw[t.tid], u, a.dscale, dp[nn][e])
                                                             : dp[nn][e], sd[r], a.scale, MP_F32);
                        s[nn][e] = DROP && DV ? mp_cu_fa_dropped(kw[t.tid], u, a.dscale, p) : p;
                    }
                uint32_t fp[4], fs[4];
                if (DV)
                    mp_cu_fa_a(fp, s, a.bf);
                if (DK)
                    mp_cu_fa_a(fs, dp, a.bf);
                MP_CU_UNROLL
                for (int d = 0; d < DP / 8; d += 2) {
                    uint32_t fb[4];
                    if (DV) {
                        mp_cu_fa_cols_b<DP>(fb, dys, qc, d, lane, t);
                        mp_cu_mma(t, dv[d], fp, fb, a.bf);   /* Pr^T dy */
                        mp_cu_mma(t, dv[d + 1], fp, fb + 2, a.bf);
                    }
                    if (DK) {
                        mp_cu_fa_cols_b<DP>(fb, qs, qc, d, lane, t);
                        mp_cu_mma(t, dk[d], fs, fb, a.bf);   /* dS^T q */
                        mp_cu_mma(t, dk[d + 1], fs, fb + 2, a.bf);
                    }
                }
            }
        }
        /* dv lies as dk, from another offset (mp_cu_fa_lays) */
        const int64_t kat = mp_attn_head(&a.lay, MP_ATT_DK, h), vo = a.lay.l[MP_ATT_DV].off - a.lay.l[MP_ATT_DK].off;
        MP_CU_UNROLL
        for (int r = 0; r < 2; r++) {
            int64_t j = j0 + 16 * w + g + 8 * r, at = kat + j * a.lay.l[MP_ATT_DK].st;
            if (j >= a.Tk)
                continue;
            MP_CU_UNROLL
            for (int d = 0; d < DP / 8; d++)
                MP_CU_UNROLL
                for (int e = 0; e < 2; e++)
                    if (8 * d + c + e < a.D) {
                        if (DK)
                            mp_cu_st(a.o, a.odt, at + 8 * d + c + e, dk[d][2 * r + e]);
                        if (DV)
                            mp_cu_st(a.o, a.odt, at + vo + 8 * d + c + e, dv[d][2 * r + e]);
                    }
        }
    }
};

/* 4 blocks an SM (128 registers a thread): the kernels' operands in
 * registers take ptxas past t_cuda_build's 128 otherwise */
template <int DP, int DROP> struct MpCuMinBlocks<MpCuFaFwd<DP, DROP> > { static constexpr int n = 4; };
template <int DP, int DROP> struct MpCuMinBlocks<MpCuFaDq<DP, DROP> > { static constexpr int n = 4; };
template <int DP, int DROP, int PART> struct MpCuMinBlocks<MpCuFaDkv<DP, DROP, PART> > { static constexpr int n = 4; };

/* FMAs the backward's mma's do (its kernels' loops: attention_grad_q_tc
 * per (query tile, key tile) it walks 4 warps x (4 chunks x 2 products x 2
 * n-tiles x D'/16 + 4 x D'/8); _kv_tc per
 * (key tile, query tile) 4 warps x 4 chunks x (2 x 2 x D'/16 + 2 x D'/8);
 * with dropout at D' 64, _v_tc and _k_tc: the scores' 2 x D'/16 twice). */
static inline double mp_cu_fa_bwd_fmas(int64_t BH, int64_t T, int64_t Tk, int64_t D, int causal,
                                       int drop)
{
    int64_t dp = D <= 16 ? 16 : D <= 32 ? 32 : 64, qtiles = 0, ktiles = 0;
    MpCuFa a = {};
    a.Tk = Tk;
    a.causal = causal;
    for (int64_t i0 = 0; i0 < T; i0 += MP_CU_FA_BR)
        qtiles += (mp_cu_fa_keys(&a, i0) + 63) / 64;
    for (int64_t j0 = 0; j0 < Tk; j0 += 64)
        ktiles += ((T - (causal ? j0 : 0)) + 63) / 64;
    double q = 4.0 * (4 * 2 * 2 * (dp / 16) + 4 * (dp / 8));
    double kv = 4.0 * 4 * ((drop && dp == 64 ? 3 : 2) * 2 * (dp / 16) + 2 * (dp / 8));
    return (double)BH * (qtiles * q + ktiles * kv) * 16 * 8 * 16;
}

/* The forward on Tensor Cores can run here: the stand-in's fibers (not
 * MP_EMU_SERIAL's one thread a block), or a GPU build whose kernels were
 * compiled for sm_80 or later (mma.sync m16n8k16; PTX for an older arch,
 * JIT-compiled for a newer GPU, would run the __trap). */
static inline int mp_cu_fa_ready(void);

#ifndef MP_CU_EMU
template <class F>
static inline void mp_cu_rows_sh(const char *name, int64_t rows, int threads, int bytes, F f)
{
    if (mp_cu.measure || rows <= 0)
        return;
    mp_cu_rows_fit<F>(name, threads);
    static int opted;              /* the dynamic shared memory this kernel was opted in to */
    if (bytes > 48 * 1024 && bytes > opted) {
        mp_cu_ok(cudaFuncSetAttribute(mp_cu_k_rows<MpCuMost<F>::n, F>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), name);
        opted = bytes;
    }
    mp_cu_k_rows<MpCuMost<F>::n, F><<<mp_cu_blocks(rows, 1), threads, (size_t)bytes, mp_cu.st>>>(rows, f);
    mp_cu_launched(name);
}

static inline int mp_cu_fa_ready(void)
{
    static int ok = -1;
    if (ok < 0) {
        cudaFuncAttributes at;
        ok = cudaFuncGetAttributes(&at, mp_cu_k_rows<MP_CU_FA_NT, MpCuFaFwd<64, 0> >) == cudaSuccess &&
             at.ptxVersion >= 80;
        cudaGetLastError();        /* a failed query is no fault of a kernel */
    }
    return ok;
}
#else
template <class F>
static inline void mp_cu_rows_sh(const char *name, int64_t rows, int threads, int bytes, F f)
{
    (void)bytes;                   /* the stand-in's shared memory grows to what is asked */
    mp_cu_rows(name, rows, threads, f);
}

static inline int mp_cu_fa_ready(void) { return !mp_emu_serial(); }
#endif

/* Whether x's rows (layout `which`) can be staged 16 bytes at a time: x of
 * the compute type, 16-byte aligned, and its layout's offsets and stride
 * whole multiples of 8 halves (a bit of MpCuFa's vec) */
static inline unsigned mp_cu_fa_vec(const MpCuFa &a, int which, const void *x, int xdt)
{
    const MpAttnLay *l = &a.lay.l[which];
    return xdt == (a.bf ? MP_BF16 : MP_F16) && ((uintptr_t)x & 15) == 0 && l->off % 8 == 0 &&
           l->sb % 8 == 0 && l->sh % 8 == 0 && l->st % 8 == 0;
}

/* y = attention(q, k, v) on Tensor Cores (mp_cu_attention's arguments,
 * cdt f16 or bf16, D <= MP_CU_FA_DMAX); a.lse: NULL or [BH T] floats. */
template <int DP, int DROP>
static inline void mp_cu_fa_forward(MpCuFa a, int64_t BH)
{
    MpCuFaFwd<DP, DROP> f = {a};
    mp_cu_rows_sh("attention_tc", BH * a.nqt, MP_CU_FA_NT, MP_CU_FA_BYTES(DP), f);
}

/* dk and dv: one kernel, or (SPLIT) dv's and dk's (MpCuFaDkv's PART) */
template <int DP, int DROP, int SPLIT>
struct MpCuFaKv {
    static void run(MpCuFaB b, int64_t BH)
    {
        MpCuFaDkv<DP, DROP> f = {b};
        mp_cu_rows_sh("attention_grad_kv_tc", BH * b.nkt, MP_CU_FA_NT, MP_CU_FA_KV_BYTES(DP), f);
    }
};
template <int DP, int DROP>
struct MpCuFaKv<DP, DROP, 1> {
    static void run(MpCuFaB b, int64_t BH)
    {
        MpCuFaDkv<DP, DROP, 1> fv = {b};
        MpCuFaDkv<DP, DROP, 2> fk = {b};
        mp_cu_rows_sh("attention_grad_v_tc", BH * b.nkt, MP_CU_FA_NT, MP_CU_FA_KV_BYTES(DP), fv);
        mp_cu_rows_sh("attention_grad_k_tc", BH * b.nkt, MP_CU_FA_NT, MP_CU_FA_KV_BYTES(DP), fk);
    }
};

/* dq, dk, dv of attention on Tensor Cores into b.a.o (g), stats at b.st */
template <int DP, int DROP>
static inline void mp_cu_fa_backward(MpCuFaB b, int64_t BH)
{
    MpCuFaDq<DP, DROP> fq = {b};
    mp_cu_rows_sh("attention_grad_q_tc", BH * b.a.nqt, MP_CU_FA_NT, MP_CU_FA_Q_BYTES(DP), fq);
    MpCuFaKv<DP, DROP, DROP && DP == 64>::run(b, BH);
}

/* The head size's kernels (16, 32 or 64 wide), with dropout's or without;
 * a program none of whose attentions drops out defines MP_CU_FA_DROPOUT 0
 * (compiler/emit_cuda.c) and is built without the dropout instances */
#ifndef MP_CU_FA_DROPOUT
#define MP_CU_FA_DROPOUT 1
#endif
#if MP_CU_FA_DROPOUT
#define MP_CU_FA_PICK(FN, D, DROP, ...)                                        \
    ((D) <= 16 ? ((DROP) ? FN<16, 1>(__VA_ARGS__) : FN<16, 0>(__VA_ARGS__))    \
     : (D) <= 32 ? ((DROP) ? FN<32, 1>(__VA_ARGS__) : FN<32, 0>(__VA_ARGS__))  \
     : ((DROP) ? FN<64, 1>(__VA_ARGS__) : FN<64, 0>(__VA_ARGS__)))
#else
#define MP_CU_FA_PICK(FN, D, DROP, ...)                                        \
    ((D) <= 16 ? FN<16, 0>(__VA_ARGS__) : (D) <= 32 ? FN<32, 0>(__VA_ARGS__)   \
               : FN<64, 0>(__VA_ARGS__))
#endif

static inline void mp_cu_fa_grad(MpCuFaB b, int64_t BH)
{
    b.a.vec = mp_cu_fa_vec(b.a, MP_ATT_Q, b.a.q, b.a.qdt) << MP_CU_FA_VQ |
              mp_cu_fa_vec(b.a, MP_ATT_K, b.a.k, b.a.kdt) << MP_CU_FA_VK |
              mp_cu_fa_vec(b.a, MP_ATT_K, b.a.v, b.a.vdt) << MP_CU_FA_VV |
              mp_cu_fa_vec(b.a, MP_ATT_Y, b.dy, b.dydt) << MP_CU_FA_VDY |
              mp_cu_fa_vec(b.a, MP_ATT_Y, b.y, b.ydt) << MP_CU_FA_VY;
    b.a.nqt = (b.a.T + MP_CU_FA_BR - 1) / MP_CU_FA_BR;
    b.nkt = (b.a.Tk + 63) / 64;
    MP_CU_FA_PICK(mp_cu_fa_backward, b.a.D, b.a.drop > 0.0f, b, BH);
}

static inline void mp_cu_fa_run(MpCuFa a, int64_t BH)
{
    a.vec = mp_cu_fa_vec(a, MP_ATT_Q, a.q, a.qdt) << MP_CU_FA_VQ |
            mp_cu_fa_vec(a, MP_ATT_K, a.k, a.kdt) << MP_CU_FA_VK |
            mp_cu_fa_vec(a, MP_ATT_K, a.v, a.vdt) << MP_CU_FA_VV;
    a.nqt = (a.T + MP_CU_FA_BR - 1) / MP_CU_FA_BR;
    MP_CU_FA_PICK(mp_cu_fa_forward, a.D, a.drop > 0.0f, a, BH);
}

#endif
