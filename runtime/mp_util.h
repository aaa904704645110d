/* mp_util.h - small helpers shared by the runtime's file formats and trainer:
 * one-line error messages (MpErr), element-type facts, overflow-checked
 * int64 arithmetic, a growable text buffer with a JSON string escaper
 * (MpBuf), a cursor for parsing header text (MpScan), whole-file reading;
 * writing files is mp_out.h's.
 *
 * Invariants: every function that can fail returns 0 or -1 and, on -1, has
 * set its MpErr to one line (no newline) that names the file involved.
 * Nothing here prints. Everything is `static` (the runtime is pasted into
 * each generated program) and MP_UNUSED so that unused helpers do not warn.
 * POSIX is needed for fstat/open; the feature macro below only takes
 * effect when this is the first header of a translation unit, which is why
 * mp_model.h (first in the amalgamation) sets it too. */
#ifndef MP_UTIL_H
#define MP_UTIL_H

#if !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE) && !defined(__cplusplus)
#define _POSIX_C_SOURCE 200809L
#endif

#include "mp_model.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__GNUC__) || defined(__clang__)
#define MP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define MP_PRINTF(f, a)
#endif

typedef struct MpErr { char msg[512]; } MpErr;   /* one line, no newline */

/* Sets e->msg (newlines become spaces, long text is cut) and returns -1, so
 * that callers can write `return mp_errf(e, "%s: ...", path);`. */
static MP_UNUSED MP_PRINTF(2, 3) int mp_errf(MpErr *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    for (char *p = e->msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return -1;
}

/* ---- element types (MP_F32 ... from mp_model.h) ----------------------- */

/* Bytes per element; 0 for an unknown type. */
static MP_UNUSED int mp_dtype_size(int dtype)
{
    switch (dtype) {
    case MP_F32: case MP_I32: return 4;
    case MP_F16: case MP_BF16: case MP_U16: return 2;
    case MP_U8: return 1;
    case MP_F64: case MP_I64: return 8;
    default: return 0;
    }
}

/* The language's name of the type: "f32" ...; "?" for an unknown one. */
static MP_UNUSED const char *mp_dtype_name(int dtype)
{
    switch (dtype) {
    case MP_F32: return "f32";
    case MP_F16: return "f16";
    case MP_BF16: return "bf16";
    case MP_I32: return "i32";
    case MP_U8: return "u8";
    case MP_U16: return "u16";
    case MP_F64: return "f64";
    case MP_I64: return "i64";
    default: return "?";
    }
}

/* "NaN", "+inf" or "-inf", for messages about a non-finite value. */
static MP_UNUSED const char *mp_nonfinite_name(double v)
{
    return isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf";
}

/* Index of the first non-finite value of v[0..n), or -1. */
static MP_UNUSED int64_t mp_first_nonfinite(const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return i;
    return -1;
}

/* ---- overflow-checked int64 arithmetic: 0 ok, -1 overflow ------------- */

static MP_UNUSED int mp_add_i64(int64_t a, int64_t b, int64_t *r)
{
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return -1;
    *r = a + b;
    return 0;
}

static MP_UNUSED int mp_mul_i64(int64_t a, int64_t b, int64_t *r)
{
    if (a != 0 && b != 0) {
        if (a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
                  : (b > 0 ? a < INT64_MIN / b : a < INT64_MAX / b))
            return -1;
    }
    *r = a * b;
    return 0;
}

/* Elements of a shape (rank 0: 1); -1 when a dimension is negative or the
 * product overflows int64. */
static MP_UNUSED int64_t mp_numel(int rank, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++)
        if (shape[i] < 0 || mp_mul_i64(n, shape[i], &n))
            return -1;
    return n;
}

/* Writes "60000x784" (rank 0: "scalar") into buf. */
static MP_UNUSED const char *mp_shape_str(char *buf, size_t cap, int rank, const int64_t *shape)
{
    size_t len = 0;
    buf[0] = 0;
    if (rank == 0)
        snprintf(buf, cap, "scalar");
    for (int i = 0; i < rank && len < cap; i++) {
        int k = snprintf(buf + len, cap - len, "%s%lld", i ? "x" : "", (long long)shape[i]);
        if (k < 0)
            break;
        len += (size_t)k;
    }
    return buf;
}

/* ---- a growable text buffer ------------------------------------------- */

/* Appends never fail visibly: on out-of-memory `oom` is set and later
 * appends are dropped, so callers check once at the end. */
typedef struct MpBuf { char *p; size_t len, cap; int oom; } MpBuf;

static MP_UNUSED void mp_buf_add(MpBuf *b, const void *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = (char *)realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static MP_UNUSED void mp_buf_puts(MpBuf *b, const char *s) { mp_buf_add(b, s, strlen(s)); }

static MP_UNUSED MP_PRINTF(2, 3) void mp_buf_printf(MpBuf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        mp_buf_add(b, tmp, (size_t)n);
        return;
    }
    char *big = (char *)malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    mp_buf_add(b, big, (size_t)n);
    free(big);
}

/* Appends s as a JSON string literal, quotes included. Bytes >= 0x80 pass
 * through unchanged (UTF-8 stays UTF-8); control characters are escaped. */
static MP_UNUSED void mp_buf_json_str(MpBuf *b, const char *s)
{
    mp_buf_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const char *esc = NULL;
        char u[8];
        switch (*p) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (*p < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", *p);
                esc = u;
            }
        }
        if (esc)
            mp_buf_puts(b, esc);
        else
            mp_buf_add(b, p, 1);
    }
    mp_buf_add(b, "\"", 1);
}

static MP_UNUSED void mp_buf_free(MpBuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}

/* ---- a cursor over a file's header text --------------------------------- */

/* Used by the .npy dict and the safetensors JSON readers; path and e let
 * every parse error name the file. */
typedef struct MpScan { const char *s, *p, *end, *path; MpErr *e; } MpScan;

static MP_UNUSED void mp_scan_ws(MpScan *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Skips white space, then the character ch if it is next: 1 if it was. */
static MP_UNUSED int mp_scan_eat(MpScan *c, char ch)
{
    mp_scan_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* ---- files ------------------------------------------------------------- */

/* Opens path for reading: NULL, with e set, when it cannot be opened or is
 * not a regular file (a folder, a FIFO); *size is its length. */
static MP_UNUSED FILE *mp_open_read(const char *path, int64_t *size, MpErr *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        mp_errf(e, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        mp_errf(e, "%s: not a regular file", path);
        return NULL;
    }
    *size = (int64_t)st.st_size;
    return f;
}

/* Reads the whole file with one fread into a malloc'ed buffer (one spare
 * NUL byte after the end). 0 ok; -1 with e naming the file. */
static MP_UNUSED int mp_read_file(const char *path, unsigned char **out, int64_t *size, MpErr *e)
{
    *out = NULL;
    *size = 0;
    int64_t len;
    FILE *f = mp_open_read(path, &len, e);
    if (!f)
        return -1;
    size_t n = (size_t)len;
    unsigned char *buf = (unsigned char *)malloc(n + 1);
    if (!buf) {
        fclose(f);
        return mp_errf(e, "%s: out of memory reading %lld bytes", path, (long long)len);
    }
    size_t got = n ? fread(buf, 1, n, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (bad || got != n) {
        free(buf);
        return mp_errf(e, "%s: read error (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = 0;
    *out = buf;
    *size = len;
    return 0;
}

#endif
