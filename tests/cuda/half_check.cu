/* half_check.cu - runtime/mp_half.h's f16 / bf16 conversions (the ones
 * both programs use, on the device too) equal CUDA's own: the host
 * implementations in cuda_fp16.h / cuda_bf16.h, which follow the device
 * instructions. Built and run by tests/t_cuda_build.sh (no GPU needed):
 *     nvcc -Iruntime tests/cuda/half_check.cu -o half_check && ./half_check
 * Checked: all 65536 patterns to f32 (NaN: both NaN); back from f32 every
 * pattern's value, the midpoints between neighbours (ties to even) and one
 * f32 ulp either side of each, plus overflow and underflow edges. Exit 0 when
 * all agree, 1 with the first differences otherwise. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cmath>
#include <cstdio>
#include "mp_half.h"

static long bad;

static void differ(const char *what, float x, unsigned want, unsigned got)
{
    if (bad++ < 10)
        printf("FAIL %s(%a): CUDA %#06x, mp_half.h %#06x\n", what, x, want, got);
}

static unsigned h_bits(__half h) { return __half_as_ushort(h); }
static unsigned b_bits(__nv_bfloat16 b) { return __bfloat16_as_ushort(b); }

/* f32 -> f16 and -> bf16 of x: the same bits, or both NaN. */
static void down(float x)
{
    unsigned w = h_bits(__float2half_rn(x)), g = mp_f32_to_f16(x);
    int wn = (w & 0x7c00u) == 0x7c00u && (w & 0x3ffu), gn = (g & 0x7c00u) == 0x7c00u && (g & 0x3ffu);
    if (wn != gn || (!wn && w != g))
        differ("f32->f16", x, w, g);
    w = b_bits(__float2bfloat16_rn(x));
    g = mp_f32_to_bf16(x);
    wn = (w & 0x7f80u) == 0x7f80u && (w & 0x7fu);
    gn = (g & 0x7f80u) == 0x7f80u && (g & 0x7fu);
    if (wn != gn || (!wn && w != g))
        differ("f32->bf16", x, w, g);
}

int main(void)
{
    long n = 0;
    for (unsigned u = 0; u < 65536; u++) {
        float wf = __half2float(__ushort_as_half((unsigned short)u)), gf = mp_f16_to_f32((uint16_t)u);
        float wb = __bfloat162float(__ushort_as_bfloat16((unsigned short)u)), gb = mp_bf16_to_f32((uint16_t)u);
        unsigned a, b;
        memcpy(&a, &wf, 4);
        memcpy(&b, &gf, 4);
        if (!(std::isnan(wf) && std::isnan(gf)) && a != b)
            differ("f16->f32", 0, u, u);
        memcpy(&a, &wb, 4);
        memcpy(&b, &gb, 4);
        if (!(std::isnan(wb) && std::isnan(gb)) && a != b)
            differ("bf16->f32", 0, u, u);
        /* back: the value, its neighbours' midpoints, an ulp around them */
        for (int k = 0; k < 2; k++) {
            float v = k ? gb : gf, next = k ? mp_bf16_to_f32((uint16_t)(u + 1)) : mp_f16_to_f32((uint16_t)(u + 1));
            down(v);
            n++;
            if (!std::isfinite(v) || !std::isfinite(next) || u == 0x7fffu || u == 0xffffu)
                continue;
            float mid = (float)(((double)v + (double)next) / 2);
            down(mid);
            down(std::nextafter(mid, INFINITY));
            down(std::nextafter(mid, -INFINITY));
            n += 3;
        }
    }
    const float edges[] = {65504.0f, 65519.99f, 65520.0f, 3.0e38f, INFINITY, -INFINITY, NAN, 1e-8f,
                           2.9802322e-8f, 2.9802326e-8f, 5.9604645e-8f, 6.1035156e-5f, 3.4028235e38f};
    for (float x : edges) {
        down(x);
        down(-x);
        n += 2;
    }
    if (bad)
        printf("FAIL: %ld of %ld conversions differ from CUDA's\n", bad, n);
    else
        printf("ok   mp_half.h: 2 x 65536 patterns to f32 and %ld values back to f16 and bf16, as CUDA's\n", n);
    return bad ? 1 : 0;
}
