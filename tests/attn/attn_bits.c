/* attn_bits.c - the CPU attention kernels (runtime/mp_kernels_nn.h:
 * mp_k_attention, mp_k_attention_grad) against the unblocked kernels they
 * replaced (attn_ref.c, built without contraction), bit for bit: y, dq, dk
 * and dv compared with memcmp. Blocking several outputs into registers
 * must change no output's order of additions, and the kernels never fuse
 * a product into a sum, so any difference is a bug. Cases: f32, f16, bf16
 * storage (compute type the same), causal and not, cross attention
 * (T' above and below T), head sizes 1 to 130 (odd ones, the vector
 * widths and around them), T past one query tile and one key tile, a row
 * of large scores (softmax's extremes). Built by tests/t_attn_bits.sh with
 * several sets of flags (FMA and contraction on, OpenMP) and run under
 * every MP_CPU path. Exit 0 when all cases agree, 1 otherwise. */
#include "mp_kernels.h"
#include "mp_kernels_gemm.h"
#include "mp_kernels_nn.h"
#include "attn_ref.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static float rnd(float scale)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((float)(rng >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * scale;
}

static size_t dt_size(int dt) { return dt == MP_F32 ? 4 : 2; }

/* n random values of type dt; scale 30 makes some rows' softmax one-hot */
static void *fill(int64_t n, int dt, float scale)
{
    void *p = malloc((size_t)n * dt_size(dt));
    for (int64_t i = 0; i < n; i++) mp_st(p, dt, i, rnd(scale));
    return p;
}

static const char *dt_name(int dt) { return dt == MP_F32 ? "f32" : dt == MP_F16 ? "f16" : "bf16"; }

/* one case: 0 when the new kernels give the old bits */
static int check(int64_t BH, int64_t T, int64_t Tk, int64_t D, int causal, int dt, float scale)
{
    int64_t nq = BH * T * D, nk = BH * Tk * D, ng = BH * (T + 2 * Tk) * D;
    size_t es = dt_size(dt);
    void *q = fill(nq, dt, scale), *k = fill(nk, dt, 1.0f), *v = fill(nk, dt, 1.0f);
    void *dy = fill(nq, dt, 1.0f);
    char *y[2], *g[2];
    for (int i = 0; i < 2; i++) {
        y[i] = calloc((size_t)nq, es), g[i] = calloc((size_t)ng, es);
    }
    mp_k_attention(y[0], dt, q, dt, k, dt, v, dt, BH, T, Tk, D, causal, dt);
    ref_attention(y[1], dt, q, dt, k, dt, v, dt, BH, T, Tk, D, causal, dt);
    mp_k_attention_grad(g[0], dt, dy, dt, q, dt, k, dt, v, dt, BH, T, Tk, D, causal, dt);
    ref_attention_grad(g[1], dt, dy, dt, q, dt, k, dt, v, dt, BH, T, Tk, D, causal, dt);
    int bad = 0;
    const char *what = "y";
    int64_t at = -1;
    for (int64_t i = 0; i < nq && at < 0; i++)
        if (memcmp(y[0] + i * es, y[1] + i * es, es)) at = i;
    for (int64_t i = 0; i < ng && at < 0; i++)
        if (memcmp(g[0] + i * es, g[1] + i * es, es)) {
            int64_t r = i / D % (T + 2 * Tk);
            at = i, what = r < T ? "dq" : r < T + Tk ? "dk" : "dv";
        }
    if (at >= 0) {
        const char *p0 = *what == 'y' ? y[0] : g[0], *p1 = *what == 'y' ? y[1] : g[1];
        printf("FAIL attention %s BH=%lld T=%lld T'=%lld D=%lld causal=%d scale=%g: %s element "
               "%lld is %.9g, the old kernel's %.9g\n", dt_name(dt), (long long)BH, (long long)T,
               (long long)Tk, (long long)D, causal, scale, what, (long long)at,
               mp_ld(p0, dt, at), mp_ld(p1, dt, at));
        bad = 1;
    }
    free(q), free(k), free(v), free(dy);
    for (int i = 0; i < 2; i++) free(y[i]), free(g[i]);
    return bad;
}

int main(void)
{
    static const int64_t Ds[] = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 23, 24, 31, 32, 33,
                                 47, 48, 63, 64, 65, 96, 127, 128, 130};
    static const int64_t TT[][2] = {{64, 64}, {37, 37}, {70, 70}, {1, 1}, {5, 5},
                                    {37, 53}, {70, 33}, {3, 130}, {9, 2}};
    static const int dts[] = {MP_F32, MP_F16, MP_BF16};
    int fail = 0, n = 0;
    for (size_t t = 0; t < sizeof dts / sizeof *dts; t++)
        for (size_t d = 0; d < sizeof Ds / sizeof *Ds; d++)
            for (size_t s = 0; s < sizeof TT / sizeof *TT; s++)
                for (int causal = 0; causal < 2; causal++) {
                    if (causal && TT[s][0] != TT[s][1])
                        continue;
                    /* big head sizes on a few shapes only: the run stays short */
                    if (Ds[d] > 64 && s > 1 && s != 5)
                        continue;
                    fail |= check(3, TT[s][0], TT[s][1], Ds[d], causal, dts[t],
                                  (d + s) % 5 == 0 ? 30.0f : 2.0f);
                    n++;
                }
    fail |= check(2, 300, 300, 16, 1, MP_F16, 2.0f), n++;   /* tq below 32, many key tiles */
    fail |= check(2, 90, 600, 20, 0, MP_BF16, 2.0f), n++;
    printf("attn_bits: %d cases, %s\n", n, fail ? "FAIL" : "all bit-identical to the old kernels");
    return fail;
}
