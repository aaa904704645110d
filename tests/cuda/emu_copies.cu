/* emu_copies.cu - the CUDA program's copies by words (runtime/mp_cuda_ops.h:
 * mp_cu_gather_words, mp_cu_window_words) against a plain host copy, in
 * the CPU stand-in (tests/cuda/mp_cuda_emu.h). Each case runs through the
 * launcher a program calls (mp_cu_transpose, mp_cu_slice, mp_cu_place,
 * mp_cu_linear's bias rows) and through the word copy alone, which must
 * run where the case says it qualifies and decline where it does not (odd
 * runs, a misaligned start); both results must equal the host's byte for
 * byte. Output buffers start as NaN bits, so an element left unwritten is
 * caught. Cases: GPT-2's head transposes
 * [B, T, H, D] -> [B, H, T, D] (f16, f32, u8, D 64 and 3), the q / k / v
 * chunks of [B, T, 3 C] (inner 1, start C), attention_grad's slices of
 * [B H, 3 T, D] (inner D), concat and slice_grad (zeros outside the window),
 * a bias broadcast down rows.
 * Built and run by tests/t_cuda_emu.sh:
 *     g++ -std=c++17 -x c++ -DMP_CU_EMU -include tests/cuda/mp_cuda_emu.h \
 *         -Iruntime tests/cuda/emu_copies.cu
 * Exit 0 when every case agrees, 1 otherwise. */
#include "mp_kernels_nn.h"
#include "mp_cuda.h"
#include "mp_cuda_ops.h"
#include "emu_io.h"   /* to_dev, to_host */

static int fails = 0;

static unsigned rng = 777;
static unsigned next(void) { return rng = rng * 1103515245u + 12345u; }

static std::vector<unsigned char> host(int64_t n, int dt)
{
    std::vector<unsigned char> h((size_t)(n * mp_cu_dt_size(dt)));
    for (int64_t i = 0; i < n; i++)   /* values, not bits: a NaN's payload may change in a conversion */
        mp_cu_st(h.data(), dt, i, (float)(next() >> 16 & 0xFFF) / 64.0f - 32.0f);
    return h;
}

/* n elements of es bytes: the output buffer, every byte 0xff (NaN in f16 / f32) */
static void *poisoned(int64_t n, int es) { return to_dev(std::vector<unsigned char>((size_t)(n * es), 0xff)); }

/* got (the launcher's) and, when words ran, gotw (the word copy's) equal want */
static void check(const char *name, const std::vector<unsigned char> &got, const std::vector<unsigned char> &gotw,
                  const std::vector<unsigned char> &want, bool words, bool want_words)
{
    int64_t bad = -1;
    for (size_t i = 0; i < want.size() && bad < 0; i++)
        if (got[i] != want[i] || (words && gotw[i] != want[i]))
            bad = (int64_t)i;
    if (bad >= 0 || words != want_words) {
        printf("FAIL %s: %s\n", name,
               bad >= 0 ? "a byte differs from the host's copy" :
               want_words ? "the word copy declined where whole words qualify" :
                            "the word copy ran where words do not qualify");
        if (bad >= 0)
            printf("     byte %lld: launcher %u, words %u, expected %u\n", (long long)bad, got[(size_t)bad],
                   words ? gotw[(size_t)bad] : 0u, want[(size_t)bad]);
        fails++;
    } else {
        printf("ok   %s%s\n", name, words ? " (words)" : " (elements)");
    }
}

/* [B, T, H, D] -> [B, H, T, D] of type DT, through mp_cu_transpose */
template <int DT>
static void transpose(const char *name, int64_t B, int64_t T, int64_t H, int64_t D, bool want)
{
    int es = mp_cu_dt_size(DT);
    int64_t n = B * T * H * D;
    std::vector<unsigned char> x = host(n, DT), want_y((size_t)(n * es));
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                memcpy(&want_y[(size_t)((((b * H + h) * T + t) * D) * es)],
                       &x[(size_t)((((b * T + t) * H + h) * D) * es)], (size_t)(D * es));
    void *dx = to_dev(x), *dy = poisoned(n, es), *dw = poisoned(n, es);
    int64_t sh[4] = {B, T, H, D}, perm[4] = {0, 2, 1, 3};
    mp_cu_transpose<DT, DT>(dy, dx, MpCuDims{4, {B, T, H, D}}, MpCuDims{4, {0, 2, 1, 3}});
    bool w = mp_cu_gather_words("gather", dw, dx, es, mp_cu_view_permute(4, sh, perm));
    check(name, to_host(dy, (size_t)(n * es)), to_host(dw, (size_t)(n * es)), want_y, w, want);
}

/* window [outer, wlen, inner] of [outer, blen, inner] at start: slice (out of
 * it), concat (into it, the rest of y untouched) and slice_grad (zeros
 * around it), of type DT; x_off elements into x's buffer (misaligned when odd) */
template <int DT>
static void window(const char *name, int64_t outer, int64_t blen, int64_t inner, int64_t start,
                   int64_t wlen, int64_t x_off, bool want)
{
    int es = mp_cu_dt_size(DT);
    int64_t nb = outer * blen * inner, nw = outer * wlen * inner;
    std::vector<unsigned char> big = host(nb + x_off, DT), small = host(nw + x_off, DT);
    std::vector<unsigned char> sl((size_t)(nw * es)), pl(big.begin() + x_off * es, big.end()),
        pad((size_t)(nb * es), 0);
    for (int64_t o = 0; o < outer; o++) {
        size_t run = (size_t)(wlen * inner * es), at = (size_t)((o * blen + start) * inner * es),
               w = (size_t)(o * wlen * inner * es);
        memcpy(&sl[w], &big[(size_t)(x_off * es) + at], run);
        memcpy(&pl[at], &small[(size_t)(x_off * es) + w], run);
        memcpy(&pad[at], &small[(size_t)(x_off * es) + w], run);
    }
    char full[160];
    unsigned char *dbig = (unsigned char *)to_dev(big), *dsmall = (unsigned char *)to_dev(small);
    void *y = poisoned(nw, es), *yw = poisoned(nw, es);
    mp_cu_slice<DT, DT>(y, dbig + x_off * es, outer, blen, inner, start, wlen);
    bool w = mp_cu_window_words("slice", yw, dbig + x_off * es, es, outer, blen, inner, start, wlen, nw,
                                MP_CU_SLICE);
    snprintf(full, sizeof full, "%s: slice", name);
    check(full, to_host(y, (size_t)(nw * es)), to_host(yw, (size_t)(nw * es)), sl, w, want);

    std::vector<unsigned char> rest(big.begin() + x_off * es, big.end());
    void *yb = to_dev(rest), *ybw = to_dev(rest);
    mp_cu_place<DT, DT>(yb, dsmall + x_off * es, outer, blen, inner, start, wlen, 0);
    w = mp_cu_window_words("concat", ybw, dsmall + x_off * es, es, outer, blen, inner, start, wlen, nw,
                           MP_CU_PLACE);
    snprintf(full, sizeof full, "%s: concat", name);
    check(full, to_host(yb, (size_t)(nb * es)), to_host(ybw, (size_t)(nb * es)), pl, w, want);

    void *yp = poisoned(nb, es), *ypw = poisoned(nb, es);
    mp_cu_place<DT, DT>(yp, dsmall + x_off * es, outer, blen, inner, start, wlen, 1);
    w = mp_cu_window_words("slice_grad", ypw, dsmall + x_off * es, es, outer, blen, inner, start, wlen, nb,
                           MP_CU_PAD);
    snprintf(full, sizeof full, "%s: slice_grad", name);
    check(full, to_host(yp, (size_t)(nb * es)), to_host(ypw, (size_t)(nb * es)), pad, w, want);
}

/* y [M, N] = bias[N] in every row: linear's first store (K 0: no product
 * after it) */
template <int DT>
static void bias_rows(const char *name, int64_t M, int64_t N, bool want)
{
    int es = mp_cu_dt_size(DT);
    std::vector<unsigned char> b = host(N, DT), want_y((size_t)(M * N * es));
    for (int64_t m = 0; m < M; m++)
        memcpy(&want_y[(size_t)(m * N * es)], b.data(), (size_t)(N * es));
    void *db = to_dev(b), *dy = poisoned(M * N, es), *dw = poisoned(M * N, es);
    MpCuView rows = {2, {M, N}, {0, 1}};
    mp_cu_linear<DT, DT, DT, DT>(dy, NULL, NULL, db, M, N, 0);   /* K 0: the bias rows alone */
    bool w = mp_cu_gather_words("linear", dw, db, es, rows);
    check(name, to_host(dy, (size_t)(M * N * es)), to_host(dw, (size_t)(M * N * es)), want_y, w, want);
}

int main(void)
{
    mp_cu_ok(cudaStreamCreateWithFlags(&mp_cu.st, cudaStreamNonBlocking), "stream");
    mp_cu_ok(cudaStreamCreateWithFlags(&mp_cu.cp, cudaStreamNonBlocking), "stream");
    mp_cu.sms = 2;
    mp_cu.blas_off = 1;   /* linear's product: the built-in one */
    transpose<MP_F16>("transpose f16 [2, 5, 3, 64] (GPT-2's heads)", 2, 5, 3, 64, true);
    transpose<MP_F32>("transpose f32 [2, 5, 3, 16]", 2, 5, 3, 16, true);
    transpose<MP_U8>("transpose u8 [2, 5, 3, 8]", 2, 5, 3, 8, true);
    transpose<MP_F16>("transpose f16 [2, 5, 3, 3] (runs of 3 halves)", 2, 5, 3, 3, false);
    transpose<MP_F32>("transpose f32 [2, 5, 3, 3] (words of one float)", 2, 5, 3, 3, true);
    window<MP_F16>("chunk f16 [6, 3 x 24, 1] part 1", 6, 72, 1, 24, 24, 0, true);
    window<MP_F16>("slice f16 [4, 3 x 7, 16] rows 7..13", 4, 21, 16, 7, 7, 0, true);
    window<MP_F32>("slice f32 [4, 10, 1] from 2 (8-byte words)", 4, 10, 1, 2, 6, 0, true);
    window<MP_F16>("slice f16 [4, 10, 1] from 3 (odd start)", 4, 10, 1, 3, 6, 0, false);
    window<MP_F16>("slice f16 [3, 16, 8], x one half off 16 bytes", 3, 16, 8, 4, 8, 1, false);
    window<MP_BF16>("slice bf16 [5, 12, 4] from 4", 5, 12, 4, 4, 4, 0, true);
    bias_rows<MP_F16>("linear's bias rows f16 [7, 40]", 7, 40, true);
    bias_rows<MP_F16>("linear's bias rows f16 [7, 5] (odd width)", 7, 5, false);
    printf("%s\n", fails ? "emu_copies: FAILED" : "emu_copies: all cases agree");
    return fails ? 1 : 0;
}
