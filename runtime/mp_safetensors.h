/* mp_safetensors.h - safetensors files: the trainer's checkpoints.
 *
 * Format (as the `safetensors` package defines it): 8 bytes, a little-endian
 * u64 N; N bytes of UTF-8 JSON, an object mapping each tensor name to
 * {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} plus an
 * optional "__metadata__" object of string -> string, padded with spaces;
 * then the data buffer. Offsets are relative to the buffer's start; the
 * tensors cover it exactly: no gaps, no overlaps, nothing left over.
 *
 * Writing: the header is padded so that the data starts at a multiple of 8,
 * tensors are laid out in the order given, and the file is written with
 * mp_write_file_atomic (never torn). Reading validates everything (sane
 * header length, strict JSON, known dtypes, sizes = dtype x shape, offsets
 * in range and tiling the buffer, no duplicate names) and refuses anything
 * else with one line naming the file (and the tensor).
 *
 * Invariants of a loaded MpStFile: the whole file is one malloc'ed block;
 * tensor data points into it (so it lives until mp_st_close) and, because
 * the file decides the layout, is NOT necessarily aligned for its type:
 * memcpy it out. Data is little-endian, as on every host the runtime
 * targets. Supported dtypes: F32 F16 BF16 I32 U8 U16 F64 I64. */
#ifndef MP_SAFETENSORS_H
#define MP_SAFETENSORS_H

#include "mp_model.h"
#include "mp_util.h"
#include "mp_out.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct MpTensor {
    const char *name;
    int dtype;                   /* MP_F32 ... */
    int rank;
    int64_t shape[MP_MAX_RANK];
    const void *data;            /* numel(shape) * size(dtype) bytes */
} MpTensor;

typedef struct MpStFile {
    unsigned char *buf;          /* the whole file */
    int64_t size;
    char *pool;                  /* decoded names, metadata keys and values */
    int n;                       /* tensors, in the header's order */
    MpTensor *tensors;
    int nmeta;
    const char **meta_keys, **meta_vals;
} MpStFile;

#define MP_ST_MAX_HEADER ((int64_t)100 << 20)   /* the safetensors package's limit */

static MP_UNUSED const char *const mp_st_dtype_names_[] = {NULL, "F32", "F16", "BF16", "I32", "U8",
                                                            "U16", "F64", "I64"};

/* ---- writing ----------------------------------------------------------- */

static MP_UNUSED int mp_st_cmp_str_(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first name that appears twice among n strings found every `stride`
 * bytes from base (an array of names, or the .name of an MpTensor array),
 * or NULL. *oom is set when there was no memory to look. */
static MP_UNUSED const char *mp_st_dup_(const void *base, size_t stride, int n, int *oom)
{
    size_t cnt = n > 0 ? (size_t)n : 0;
    const char **s = (const char **)malloc((cnt ? cnt : 1) * sizeof *s);
    *oom = !s;
    if (!s)
        return NULL;
    for (size_t i = 0; i < cnt; i++)
        s[i] = *(const char *const *)((const char *)base + i * stride);
    qsort(s, cnt, sizeof *s, mp_st_cmp_str_);
    const char *dup = NULL;
    for (size_t i = 1; i < cnt && !dup; i++)
        if (!strcmp(s[i - 1], s[i]))
            dup = s[i];
    free(s);
    return dup;
}

/* Names (of tensors, then of metadata keys) must be unique. */
static MP_UNUSED int mp_st_unique_(const char *path, const MpTensor *t, int n, const char *const *keys,
                                   int nmeta, MpErr *e)
{
    int oom1, oom2;
    const char *dup = mp_st_dup_(n ? &t[0].name : NULL, sizeof *t, n, &oom1);
    const char *mdup = mp_st_dup_(keys, sizeof *keys, nmeta, &oom2);
    if (oom1 || oom2)
        return mp_errf(e, "%s: out of memory", path);
    if (dup)
        return mp_errf(e, "%s: tensor '%s' appears twice", path, dup);
    if (mdup)
        return mp_errf(e, "%s: metadata key '%s' appears twice", path, mdup);
    return 0;
}

/* Bytes of a tensor (-1: bad dtype, rank or shape). */
static MP_UNUSED int64_t mp_st_nbytes(const MpTensor *t)
{
    int64_t numel = t->rank < 0 || t->rank > MP_MAX_RANK ? -1 : mp_numel(t->rank, t->shape), nb;
    if (numel < 0 || !mp_dtype_size(t->dtype) || mp_mul_i64(numel, mp_dtype_size(t->dtype), &nb))
        return -1;
    return nb;
}

/* Checks the caller's tensors and metadata before anything is written. */
static MP_UNUSED int mp_st_check_save_(const char *path, const MpTensor *t, int n, const char *const *keys,
                                      const char *const *vals, int nmeta, MpErr *e)
{
    for (int i = 0; i < n; i++) {
        if (!t[i].name || !t[i].name[0] || !strcmp(t[i].name, "__metadata__"))
            return mp_errf(e, "%s: tensor %d has an empty or reserved name", path, i);
        int64_t nb = mp_st_nbytes(&t[i]);
        if (nb < 0 || (nb > 0 && !t[i].data))
            return mp_errf(e, "%s: tensor '%s': bad dtype, shape or data", path, t[i].name);
    }
    for (int i = 0; i < nmeta; i++)
        if (!keys[i] || !vals[i])
            return mp_errf(e, "%s: metadata entry %d is NULL", path, i);
    return mp_st_unique_(path, t, n, keys, nmeta, e);
}

/* Writes n tensors (in this order) and nmeta string pairs to path. */
static MP_UNUSED int mp_st_save(const char *path, const MpTensor *t, int n, const char *const *meta_keys,
                                const char *const *meta_vals, int nmeta, MpErr *e)
{
    if (mp_st_check_save_(path, t, n, meta_keys, meta_vals, nmeta, e))
        return -1;
    MpBuf h = {NULL, 0, 0, 0};
    mp_buf_puts(&h, "{");
    if (nmeta > 0) {
        mp_buf_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            mp_buf_puts(&h, i ? "," : "");
            mp_buf_json_str(&h, meta_keys[i]);
            mp_buf_puts(&h, ":");
            mp_buf_json_str(&h, meta_vals[i]);
        }
        mp_buf_puts(&h, "}");
    }
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t nb = mp_st_nbytes(&t[i]);
        mp_buf_puts(&h, i || nmeta > 0 ? "," : "");
        mp_buf_json_str(&h, t[i].name);
        mp_buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", mp_st_dtype_names_[t[i].dtype]);
        for (int d = 0; d < t[i].rank; d++)
            mp_buf_printf(&h, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
        mp_buf_printf(&h, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + nb));
        off += nb;
    }
    mp_buf_puts(&h, "}");
    while (h.len % 8)
        mp_buf_puts(&h, " ");
    const void **parts = (const void **)malloc((size_t)(n + 2) * sizeof *parts);
    size_t *sizes = (size_t *)malloc((size_t)(n + 2) * sizeof *sizes);
    int rc;
    if (h.oom || !parts || !sizes) {
        rc = mp_errf(e, "%s: out of memory", path);
    } else {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++)
            len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
        parts[0] = len8, sizes[0] = 8;
        parts[1] = h.p, sizes[1] = h.len;
        for (int i = 0; i < n; i++)
            parts[i + 2] = t[i].data, sizes[i + 2] = (size_t)mp_st_nbytes(&t[i]);
        rc = mp_write_file_atomic(path, parts, sizes, n + 2, e);
    }
    free(parts);
    free(sizes);
    mp_buf_free(&h);
    return rc;
}

/* ---- a strict JSON reader for the header's subset ----------------------
 * value = object | array of integers | string | integer; no true/false/null,
 * no fractions. Decoded strings go into one pool sized to the header, so
 * nothing is allocated per string. */

typedef struct MpJs {
    MpScan c;
    const char *tensor;          /* the entry being read, for messages */
    char *pool;
    size_t used;
} MpJs;

static MP_UNUSED int mp_js_bad_(MpJs *j, const char *expected)
{
    int byte = (int)(j->c.p - j->c.s) + 8;   /* an offset in the file */
    const char *t = j->tensor;
    return mp_errf(j->c.e, "%s: bad header JSON at byte %d%s%s%s: expected %s", j->c.path, byte,
                   t ? " (tensor '" : "", t ? t : "", t ? "')" : "", expected);
}

static MP_UNUSED int mp_js_hex4_(MpJs *j, unsigned *u)
{
    *u = 0;
    for (int i = 0; i < 4; i++, j->c.p++) {
        char c = j->c.p < j->c.end ? *j->c.p : 0;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return mp_js_bad_(j, "4 hex digits after \\u");
        *u = *u * 16 + (unsigned)d;
    }
    return 0;
}

/* Appends code point u as UTF-8 to the pool. */
static MP_UNUSED void mp_js_utf8_(MpJs *j, unsigned u)
{
    char *o = j->pool + j->used;
    if (u < 0x80) {
        o[0] = (char)u, j->used += 1;
    } else if (u < 0x800) {
        o[0] = (char)(0xC0 | u >> 6), o[1] = (char)(0x80 | (u & 63)), j->used += 2;
    } else if (u < 0x10000) {
        o[0] = (char)(0xE0 | u >> 12), o[1] = (char)(0x80 | (u >> 6 & 63));
        o[2] = (char)(0x80 | (u & 63)), j->used += 3;
    } else {
        o[0] = (char)(0xF0 | u >> 18), o[1] = (char)(0x80 | (u >> 12 & 63));
        o[2] = (char)(0x80 | (u >> 6 & 63)), o[3] = (char)(0x80 | (u & 63)), j->used += 4;
    }
}

/* One escape after the backslash. A \uXXXX never takes more room than its
 * six source bytes, so the pool (sized to the header) cannot overflow. */
static MP_UNUSED int mp_js_escape_(MpJs *j)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    char c = j->c.p < j->c.end ? *j->c.p++ : 0;
    const char *k = c ? strchr(from, c) : NULL;
    if (k) {
        j->pool[j->used++] = to[k - from];
        return 0;
    }
    unsigned u, lo;
    if (c != 'u' || mp_js_hex4_(j, &u))
        return c == 'u' ? -1 : mp_js_bad_(j, "a valid escape");
    if (u >= 0xD800 && u < 0xDC00) {   /* a surrogate pair */
        if (j->c.end - j->c.p < 2 || j->c.p[0] != '\\' || j->c.p[1] != 'u')
            return mp_js_bad_(j, "a low surrogate after a high one");
        j->c.p += 2;
        if (mp_js_hex4_(j, &lo))
            return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return mp_js_bad_(j, "a low surrogate after a high one");
        u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
    } else if ((u >= 0xDC00 && u < 0xE000) || u == 0) {
        return mp_js_bad_(j, u ? "no lone low surrogate" : "no \\u0000 in a string");
    }
    mp_js_utf8_(j, u);
    return 0;
}

/* Copies one raw UTF-8 sequence whose lead byte c was just read, refusing
 * what is not UTF-8 (stray continuation bytes, overlong forms, surrogates,
 * code points past U+10FFFF), as the safetensors package does. */
static MP_UNUSED int mp_js_utf8_check_(MpJs *j, unsigned char c)
{
    int n = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
    const unsigned char *q = (const unsigned char *)j->c.p;
    if (n < 0 || j->c.end - j->c.p < n)
        return mp_js_bad_(j, "valid UTF-8");
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    for (int i = 0; i < n; i++)
        if (q[i] < (i ? 0x80 : lo) || q[i] > (i ? 0xBF : hi))
            return mp_js_bad_(j, "valid UTF-8");
    j->pool[j->used++] = (char)c;
    memcpy(j->pool + j->used, j->c.p, (size_t)n);
    j->used += (size_t)n;
    j->c.p += n;
    return 0;
}

/* A string; *out points at its NUL-terminated decoding in the pool. */
static MP_UNUSED int mp_js_str_(MpJs *j, const char **out)
{
    if (!mp_scan_eat(&j->c, '"'))
        return mp_js_bad_(j, "a string");
    *out = j->pool + j->used;
    for (;;) {
        if (j->c.p >= j->c.end)
            return mp_js_bad_(j, "a closing '\"'");
        unsigned char c = (unsigned char)*j->c.p++;
        if (c == '"')
            break;
        if (c < 0x20)
            return mp_js_bad_(j, "no control characters in a string");
        if (c == '\\') {
            if (mp_js_escape_(j))
                return -1;
        } else if (c >= 0x80) {
            if (mp_js_utf8_check_(j, c))
                return -1;
        } else {
            j->pool[j->used++] = (char)c;
        }
    }
    j->pool[j->used++] = 0;
    return 0;
}

/* A non-negative JSON integer (no sign, no leading zeros, no fraction). */
static MP_UNUSED int mp_js_uint_(MpJs *j, int64_t *v)
{
    mp_scan_ws(&j->c);
    const char *start = j->c.p;
    int64_t x = 0;
    while (j->c.p < j->c.end && *j->c.p >= '0' && *j->c.p <= '9') {
        if (mp_mul_i64(x, 10, &x) || mp_add_i64(x, *j->c.p - '0', &x))
            return mp_js_bad_(j, "an integer that fits in 64 bits");
        j->c.p++;
    }
    if (j->c.p == start || (*start == '0' && j->c.p - start > 1))
        return mp_js_bad_(j, "a non-negative integer");
    if (j->c.p < j->c.end && (*j->c.p == '.' || *j->c.p == 'e' || *j->c.p == 'E'))
        return mp_js_bad_(j, "an integer, not a fraction");
    *v = x;
    return 0;
}

/* "[" [uint ("," uint)*] "]" with at most max entries; *n gets the count. */
static MP_UNUSED int mp_js_uints_(MpJs *j, int64_t *v, int max, int *n, const char *what)
{
    *n = 0;
    if (!mp_scan_eat(&j->c, '['))
        return mp_js_bad_(j, what);
    if (mp_scan_eat(&j->c, ']'))
        return 0;
    do {
        if (*n == max)
            return mp_js_bad_(j, what);
        if (mp_js_uint_(j, &v[(*n)++]))
            return -1;
    } while (mp_scan_eat(&j->c, ','));
    return mp_scan_eat(&j->c, ']') ? 0 : mp_js_bad_(j, "',' or ']'");
}

/* ---- reading ----------------------------------------------------------- */

/* One tensor's entry while the header is parsed. */
typedef struct MpStSpan { int64_t begin, end; int index; } MpStSpan;

/* Parser state: the growing tensor and metadata arrays. */
typedef struct MpStLoad {
    MpJs j;
    MpStFile *f;
    MpStSpan *spans;
    int cap, mcap;
} MpStLoad;

static MP_UNUSED int mp_st_grow_(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int c = *cap ? *cap * 2 : 16;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* "__metadata__": {"key": "value", ...} */
static MP_UNUSED int mp_st_meta_(MpStLoad *L)
{
    MpStFile *f = L->f;
    if (f->meta_keys)
        return mp_errf(L->j.c.e, "%s: bad header: __metadata__ appears twice", L->j.c.path);
    if (!mp_scan_eat(&L->j.c, '{'))
        return mp_js_bad_(&L->j, "an object for __metadata__");
    f->meta_keys = (const char **)malloc(sizeof(char *));   /* non-NULL marks "seen" */
    if (!f->meta_keys)
        return mp_errf(L->j.c.e, "%s: out of memory", L->j.c.path);
    if (mp_scan_eat(&L->j.c, '}'))
        return 0;
    do {
        int c = L->mcap;
        if (mp_st_grow_((void **)&f->meta_keys, &L->mcap, f->nmeta + 1, sizeof(char *)) ||
            mp_st_grow_((void **)&f->meta_vals, &c, f->nmeta + 1, sizeof(char *)))
            return mp_errf(L->j.c.e, "%s: out of memory", L->j.c.path);
        if (mp_js_str_(&L->j, &f->meta_keys[f->nmeta]))
            return -1;
        if (!mp_scan_eat(&L->j.c, ':'))
            return mp_js_bad_(&L->j, "':' after a metadata key");
        if (mp_js_str_(&L->j, &f->meta_vals[f->nmeta]))
            return -1;
        f->nmeta++;
    } while (mp_scan_eat(&L->j.c, ','));
    return mp_scan_eat(&L->j.c, '}') ? 0 : mp_js_bad_(&L->j, "',' or '}' in __metadata__");
}

/* {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, keys in any order. */
static MP_UNUSED int mp_st_entry_(MpStLoad *L, MpTensor *t, MpStSpan *sp)
{
    MpJs *j = &L->j;
    int seen = 0;
    if (!mp_scan_eat(&j->c, '{'))
        return mp_js_bad_(j, "an object for the tensor");
    do {
        const char *key, *dt;
        int64_t off[3];
        int n;
        if (mp_js_str_(j, &key))
            return -1;
        if (!mp_scan_eat(&j->c, ':'))
            return mp_js_bad_(j, "':' after a key");
        int bit = !strcmp(key, "dtype") ? 1 : !strcmp(key, "shape") ? 2 : !strcmp(key, "data_offsets") ? 4 : 0;
        if (!bit || (seen & bit))
            return mp_errf(j->c.e, "%s: tensor '%s': %s key '%s'", j->c.path, t->name,
                           bit ? "repeated" : "unknown", key);
        seen |= bit;
        if (bit == 1) {
            if (mp_js_str_(j, &dt))
                return -1;
            for (int d = MP_F32; d <= MP_I64; d++)
                if (!strcmp(dt, mp_st_dtype_names_[d]))
                    t->dtype = d;
            if (!t->dtype)
                return mp_errf(j->c.e, "%s: tensor '%s': expected dtype F32, F16, BF16, I32, U8, U16, F64 or I64, found %s",
                               j->c.path, t->name, dt);
        } else if (bit == 2) {
            if (mp_js_uints_(j, t->shape, MP_MAX_RANK, &t->rank, "a shape of at most 8 non-negative integers"))
                return -1;
        } else {
            if (mp_js_uints_(j, off, 3, &n, "data_offsets [begin, end]"))
                return -1;
            if (n != 2)
                return mp_errf(j->c.e, "%s: tensor '%s': expected 2 data_offsets, found %d", j->c.path, t->name, n);
            sp->begin = off[0], sp->end = off[1];
        }
    } while (mp_scan_eat(&j->c, ','));
    if (!mp_scan_eat(&j->c, '}'))
        return mp_js_bad_(j, "',' or '}'");
    if (seen != 7)
        return mp_errf(j->c.e, "%s: tensor '%s': missing '%s'", j->c.path, t->name,
                       !(seen & 1) ? "dtype" : !(seen & 2) ? "shape" : "data_offsets");
    return 0;
}

/* The whole header object: tensors and __metadata__, then only white space. */
static MP_UNUSED int mp_st_header_(MpStLoad *L)
{
    MpJs *j = &L->j;
    MpStFile *f = L->f;
    if (j->c.p >= j->c.end || *j->c.p != '{')
        return mp_js_bad_(j, "a JSON object starting with '{'");
    j->c.p++;
    if (!mp_scan_eat(&j->c, '}')) {
        do {
            const char *name;
            if (mp_js_str_(j, &name))
                return -1;
            if (!mp_scan_eat(&j->c, ':'))
                return mp_js_bad_(j, "':' after a name");
            if (!strcmp(name, "__metadata__")) {
                if (mp_st_meta_(L))
                    return -1;
                continue;
            }
            int c = L->cap;
            if (mp_st_grow_((void **)&f->tensors, &L->cap, f->n + 1, sizeof *f->tensors) ||
                mp_st_grow_((void **)&L->spans, &c, f->n + 1, sizeof *L->spans))
                return mp_errf(j->c.e, "%s: out of memory", j->c.path);
            MpTensor *t = &f->tensors[f->n];
            memset(t, 0, sizeof *t);
            t->name = name;
            L->spans[f->n].index = f->n;
            j->tensor = name;
            if (mp_st_entry_(L, t, &L->spans[f->n]))
                return -1;
            j->tensor = NULL;
            f->n++;
        } while (mp_scan_eat(&j->c, ','));
        if (!mp_scan_eat(&j->c, '}'))
            return mp_js_bad_(j, "',' or '}'");
    }
    mp_scan_ws(&j->c);
    return j->c.p == j->c.end ? 0 : mp_js_bad_(j, "only white space after the header object");
}

static MP_UNUSED int mp_st_cmp_span_(const void *a, const void *b)
{
    const MpStSpan *x = (const MpStSpan *)a, *y = (const MpStSpan *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* Sizes match dtype x shape, offsets tile [0, dlen) exactly, names unique;
 * then the data pointers are set. */
static MP_UNUSED int mp_st_check_(MpStLoad *L, const unsigned char *data, int64_t dlen)
{
    MpStFile *f = L->f;
    const char *path = L->j.c.path;
    MpErr *e = L->j.c.e;
    for (int i = 0; i < f->n; i++) {
        MpTensor *t = &f->tensors[i];
        MpStSpan *s = &L->spans[i];
        int64_t nb = mp_st_nbytes(t);
        char shp[160];
        mp_shape_str(shp, sizeof shp, t->rank, t->shape);
        if (nb < 0)
            return mp_errf(e, "%s: tensor '%s': shape %s overflows", path, t->name, shp);
        if (s->begin > s->end)
            return mp_errf(e, "%s: tensor '%s': data_offsets [%lld, %lld] end before they begin", path, t->name,
                           (long long)s->begin, (long long)s->end);
        if (s->end - s->begin != nb)
            return mp_errf(e, "%s: tensor '%s': dtype %s, shape %s: needs %lld bytes but data_offsets [%lld, %lld] hold %lld",
                           path, t->name, mp_st_dtype_names_[t->dtype], shp, (long long)nb,
                           (long long)s->begin, (long long)s->end, (long long)(s->end - s->begin));
        if (s->end > dlen)
            return mp_errf(e, "%s: truncated: tensor '%s' ends at byte %lld of the data but the file holds %lld",
                           path, t->name, (long long)s->end, (long long)dlen);
        t->data = data + s->begin;
    }
    if (f->n > 0)
        qsort(L->spans, (size_t)f->n, sizeof *L->spans, mp_st_cmp_span_);
    int64_t at = 0;
    for (int i = 0; i < f->n; i++) {
        const MpStSpan *s = &L->spans[i];
        if (s->begin != at)
            return mp_errf(e, "%s: tensor '%s': data_offsets [%lld, %lld] %s", path, f->tensors[s->index].name,
                           (long long)s->begin, (long long)s->end,
                           s->begin < at ? "overlap another tensor" : "leave a gap before them");
        at = s->end;
    }
    if (at != dlen)
        return mp_errf(e, "%s: %lld bytes of data after the last tensor belong to no tensor", path,
                       (long long)(dlen - at));
    return mp_st_unique_(path, f->tensors, f->n, f->meta_keys, f->nmeta, e);
}

static MP_UNUSED void mp_st_close(MpStFile *f)
{
    if (!f)
        return;
    free(f->buf);
    free(f->pool);
    free(f->tensors);
    free((void *)f->meta_keys);
    free((void *)f->meta_vals);
    memset(f, 0, sizeof *f);
}

/* The header length: present, sane and within the file. */
static MP_UNUSED int mp_st_hlen_(const char *path, const unsigned char *buf, int64_t size, int64_t *hlen,
                                 MpErr *e)
{
    if (size < 8)
        return mp_errf(e, "%s: truncated: %lld bytes is too short for a safetensors file", path, (long long)size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | buf[i];
    if (n > (uint64_t)MP_ST_MAX_HEADER)
        return mp_errf(e, "%s: not a safetensors file: its header length is %llu bytes", path,
                       (unsigned long long)n);
    if ((int64_t)n > size - 8)
        return mp_errf(e, "%s: truncated: the header length says %llu bytes but only %lld follow", path,
                       (unsigned long long)n, (long long)(size - 8));
    *hlen = (int64_t)n;
    return 0;
}

/* Loads and validates path; 0 ok, -1 with e set and f empty. */
static MP_UNUSED int mp_st_load(const char *path, MpStFile *f, MpErr *e)
{
    memset(f, 0, sizeof *f);
    int64_t hlen = 0;
    if (mp_read_file(path, &f->buf, &f->size, e) || mp_st_hlen_(path, f->buf, f->size, &hlen, e)) {
        mp_st_close(f);
        return -1;
    }
    MpStLoad L;
    memset(&L, 0, sizeof L);
    L.f = f;
    L.j.c.s = L.j.c.p = (const char *)f->buf + 8;
    L.j.c.end = L.j.c.s + hlen;
    L.j.c.path = path;
    L.j.c.e = e;
    L.j.pool = f->pool = (char *)malloc((size_t)hlen + 1);
    int rc = !f->pool ? mp_errf(e, "%s: out of memory", path)
           : mp_st_header_(&L) ? -1 : mp_st_check_(&L, f->buf + 8 + hlen, f->size - 8 - hlen);
    free(L.spans);
    if (rc)
        mp_st_close(f);
    return rc;
}

/* The tensor called name, or NULL. */
static MP_UNUSED const MpTensor *mp_st_find(const MpStFile *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

/* The metadata value of key, or NULL. */
static MP_UNUSED const char *mp_st_meta(const MpStFile *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (!strcmp(f->meta_keys[i], key))
            return f->meta_vals[i];
    return NULL;
}

#endif
