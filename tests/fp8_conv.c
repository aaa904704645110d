/* fp8_conv.c - runtime/mp_fp8.h's conversions and scale exponents on raw
 * files, for tests/py/fp8.py to compare with ml_dtypes (tests/t_fp8.sh).
 *
 *   fp8_conv enc e4m3|e5m2 IN OUT   f32 (raw little-endian) -> fp8 bytes
 *   fp8_conv dec e4m3|e5m2 OUT      the 256 patterns 0..255 -> f32
 *   fp8_conv exp e4m3|e5m2 MARGIN IN OUT   amax f32 -> scale exponent
 *       (i32, mp_fp8_scale_exp with prev = 12345: kept for an amax that
 *       is zero or not finite)
 *   fp8_conv same e4m3|e5m2         mp_fp8_round_fast (the GEMM's
 *       packing) against mp_fp8_round on all 2^32 f32 bit patterns: exit
 *       1 naming the first that differs
 * Exit status 2 on bad usage or an unreadable or unwritable file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mp_fp8.h"

static void die(const char *what)
{
    fprintf(stderr, "fp8_conv: %s\n", what);
    exit(2);
}

static float *read_f32(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0)
        die("cannot read the input");
    long bytes = ftell(f);
    rewind(f);
    *n = (size_t)bytes / sizeof(float);
    float *v = malloc(*n * sizeof *v + 1);
    if (!v || fread(v, sizeof *v, *n, f) != *n)
        die("cannot read the input");
    fclose(f);
    return v;
}

static void write_all(const char *path, const void *p, size_t size, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, size, n, f) != n || fclose(f) != 0)
        die("cannot write the output");
}

int main(int argc, char **argv)
{
    if (argc < 3)
        die("usage: fp8_conv enc|dec|exp|same e4m3|e5m2 ...");
    MpFp8Fmt fmt = strcmp(argv[2], "e4m3") == 0 ? MP_E4M3 : MP_E5M2;
    if (strcmp(argv[2], "e4m3") != 0 && strcmp(argv[2], "e5m2") != 0)
        die("the format is e4m3 or e5m2");
    if (strcmp(argv[1], "same") == 0 && argc == 3) {
        uint32_t u = 0;
        do {
            float v = mp_bits_f32(u);
            uint32_t want = mp_f32_bits(mp_fp8_round(v, fmt)), got = mp_f32_bits(mp_fp8_round_fast(v, fmt));
            if (want != got) {
                fprintf(stderr, "fp8_conv: %s: f32 0x%08x rounds to 0x%08x, the fast path gives 0x%08x\n",
                        argv[2], u, want, got);
                return 1;
            }
        } while (++u != 0);
        return 0;
    }
    if (strcmp(argv[1], "enc") == 0 && argc == 5) {
        size_t n;
        float *v = read_f32(argv[3], &n);
        uint8_t *q = malloc(n + 1);
        if (!q)
            die("out of memory");
        for (size_t i = 0; i < n; i++)
            q[i] = mp_f32_to_fp8(v[i], fmt);
        write_all(argv[4], q, 1, n);
    } else if (strcmp(argv[1], "dec") == 0 && argc == 4) {
        float v[256];
        for (int i = 0; i < 256; i++)
            v[i] = mp_fp8_to_f32((uint8_t)i, fmt);
        write_all(argv[3], v, sizeof *v, 256);
    } else if (strcmp(argv[1], "exp") == 0 && argc == 6) {
        size_t n;
        float *v = read_f32(argv[4], &n);
        int32_t *e = malloc(n * sizeof *e + 1);
        if (!e)
            die("out of memory");
        for (size_t i = 0; i < n; i++)
            e[i] = mp_fp8_scale_exp(v[i], fmt, atoi(argv[3]), 12345);
        write_all(argv[5], e, sizeof *e, n);
    } else {
        die("usage: fp8_conv enc|dec|exp|same e4m3|e5m2 ...");
    }
    return 0;
}
