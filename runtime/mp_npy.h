/* mp_npy.h - NumPy .npy arrays: the trainer's data files.
 *
 * Reads versions 1.0, 2.0 and 3.0 of the format (magic "\x93NUMPY", major,
 * minor, a little-endian header length of 2 bytes (v1) or 4 (v2, v3), then
 * a Python dict literal {'descr': '<f4', 'fortran_order': False,
 * 'shape': (60000, 784), } padded with spaces and a newline, then the raw
 * data). Accepted: little-endian, C order, dtype <f4 (MP_F32), <f2 (MP_F16),
 * <i4 (MP_I32), <u2 (MP_U16) and u1 in any byte order (MP_U8). Everything
 * else is refused with one line that names the file and says what was
 * expected and what was found; a file is never half-read into a successful
 * result.
 *
 * Two ways in: mp_npy_load reads the data into one malloc'ed block;
 * mp_npy_map (the trainer's data, TRAINER.md "Big data") maps the file
 * read-only instead, so a data set larger than memory costs page cache, not
 * the process's private memory. mp_raw_map maps a raw file of little-endian
 * values as a 1-D array (nanoGPT's train.bin). Invariants of an MpArray:
 * data points at exactly nbytes = numel(shape) * size(dtype) bytes,
 * little-endian as in the file, never NULL (a zero-size array has a 1-byte
 * block); map is the mapping to release (NULL: data is malloc'ed);
 * mp_array_free releases either. descr is the dtype as the file spells it;
 * when mp_npy_map fails on a well-formed header of a dtype it cannot hold
 * (say '<i8'), descr is still set, so that the caller can say which input
 * needs what and how to convert. Checking the array against what a model
 * declares is the trainer's job. Writing uses the smallest version that
 * fits (1.0, else 2.0), pads the header to a multiple of 64 bytes like
 * NumPy, and writes atomically (mp_write_file_atomic). */
#ifndef MP_NPY_H
#define MP_NPY_H

#include "mp_model.h"
#include "mp_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct MpArray {
    int dtype;                   /* MP_F32, MP_F16, MP_I32, MP_U8, MP_U16 */
    int rank;                    /* 0 .. MP_MAX_RANK */
    int64_t shape[MP_MAX_RANK];
    void *data;                  /* malloc'ed, or inside map */
    int64_t nbytes;
    void *map;                   /* the file's mapping, or NULL */
    size_t map_len;
    char descr[32];              /* as in the file: "<f4", "<i8"; "raw" */
} MpArray;

#define MP_NPY_MAX_HEADER (1 << 20)   /* NumPy itself refuses more than 10000 */

/* The parsed header dict; `seen` has one bit per key. */
typedef struct MpNpyHdr {
    char descr[32];
    int fortran;
    int rank;
    int64_t shape[MP_MAX_RANK];
    int seen;
} MpNpyHdr;

static MP_UNUSED int mp_npy_bad_(MpScan *c, const char *expected)
{
    int len = (int)(c->end - c->s);
    while (len > 0 && (c->s[len - 1] == '\n' || c->s[len - 1] == ' '))
        len--;
    return mp_errf(c->e, "%s: bad header: expected %s at byte %d of %.*s", c->path, expected,
                   (int)(c->p - c->s), len > 200 ? 200 : len, c->s);
}

/* A Python string literal without escapes ('...' or "..."). */
static MP_UNUSED int mp_npy_str_(MpScan *c, char *out, size_t cap)
{
    mp_scan_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return mp_npy_bad_(c, "a quoted string");
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || *c->p == '\n')
            return mp_npy_bad_(c, "a plain string");
        if (n + 1 < cap)
            out[n++] = *c->p;
        c->p++;
    }
    if (c->p >= c->end)
        return mp_npy_bad_(c, "a closing quote");
    c->p++;
    out[n] = 0;
    return 0;
}

/* A non-negative integer, with Python 2's optional L suffix. */
static MP_UNUSED int mp_npy_int_(MpScan *c, int64_t *v)
{
    mp_scan_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return mp_npy_bad_(c, "a non-negative integer");
    int64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (mp_mul_i64(x, 10, &x) || mp_add_i64(x, *c->p - '0', &x))
            return mp_errf(c->e, "%s: bad header: a dimension of the shape overflows int64", c->path);
        c->p++;
    }
    if (c->p < c->end && *c->p == 'L')
        c->p++;
    *v = x;
    return 0;
}

/* shape = "(" [int ("," int)* [","]] ")" */
static MP_UNUSED int mp_npy_shape_(MpScan *c, MpNpyHdr *h)
{
    if (!mp_scan_eat(c, '('))
        return mp_npy_bad_(c, "'(' to start the shape");
    h->rank = 0;
    while (!mp_scan_eat(c, ')')) {
        int64_t d = 0;
        if (mp_npy_int_(c, &d))
            return -1;
        if (h->rank == MP_MAX_RANK)
            return mp_errf(c->e, "%s: expected at most %d dimensions, found more", c->path, MP_MAX_RANK);
        h->shape[h->rank++] = d;
        if (!mp_scan_eat(c, ',')) {
            if (!mp_scan_eat(c, ')'))
                return mp_npy_bad_(c, "',' or ')' in the shape");
            break;
        }
    }
    return 0;
}

/* One "key: value" pair of the header dict. */
static MP_UNUSED int mp_npy_pair_(MpScan *c, MpNpyHdr *h)
{
    char key[32];
    if (mp_npy_str_(c, key, sizeof key))
        return -1;
    if (!mp_scan_eat(c, ':'))
        return mp_npy_bad_(c, "':' after a key");
    int bit = !strcmp(key, "descr") ? 1 : !strcmp(key, "fortran_order") ? 2
            : !strcmp(key, "shape") ? 4 : 0;
    if (!bit)
        return mp_errf(c->e, "%s: bad header: expected the keys descr, fortran_order and shape, found '%s'",
                       c->path, key);
    if (h->seen & bit)
        return mp_errf(c->e, "%s: bad header: key '%s' appears twice", c->path, key);
    h->seen |= bit;
    mp_scan_ws(c);
    if (bit == 1) {
        if (c->p < c->end && (*c->p == '[' || *c->p == '{'))
            return mp_errf(c->e, "%s: expected a plain numeric array, found a structured dtype", c->path);
        return mp_npy_str_(c, h->descr, sizeof h->descr);
    }
    if (bit == 2) {
        size_t left = (size_t)(c->end - c->p);
        if (left >= 4 && !memcmp(c->p, "True", 4))
            h->fortran = 1, c->p += 4;
        else if (left >= 5 && !memcmp(c->p, "False", 5))
            h->fortran = 0, c->p += 5;
        else
            return mp_npy_bad_(c, "True or False for fortran_order");
        return 0;
    }
    return mp_npy_shape_(c, h);
}

/* dict = "{" [pair ("," pair)* [","]] "}" then only white space. */
static MP_UNUSED int mp_npy_dict_(MpScan *c, MpNpyHdr *h)
{
    memset(h, 0, sizeof *h);
    if (!mp_scan_eat(c, '{'))
        return mp_npy_bad_(c, "'{'");
    while (!mp_scan_eat(c, '}')) {
        if (mp_npy_pair_(c, h))
            return -1;
        if (!mp_scan_eat(c, ',')) {
            if (!mp_scan_eat(c, '}'))
                return mp_npy_bad_(c, "',' or '}'");
            break;
        }
    }
    mp_scan_ws(c);
    if (c->p != c->end)
        return mp_npy_bad_(c, "only white space after the dict");
    if (h->seen != 7)
        return mp_errf(c->e, "%s: bad header: missing key '%s'", c->path,
                       !(h->seen & 1) ? "descr" : !(h->seen & 2) ? "fortran_order" : "shape");
    return 0;
}

/* Maps a descr to MP_*; -1 with e saying what was expected otherwise. */
static MP_UNUSED int mp_npy_dtype_(const char *path, const char *d, MpErr *e)
{
    static const char *const names[] = {"<f4", "<f2", "<i4", "|u1", "<u1", ">u1", "<u2"};
    static const int types[] = {MP_F32, MP_F16, MP_I32, MP_U8, MP_U8, MP_U8, MP_U16};
    for (int i = 0; i < 7; i++)
        if (!strcmp(d, names[i]))
            return types[i];
    if (strchr("|<>=", d[0]) && d[1] == 'O')
        return mp_errf(e, "%s: expected a numeric array, found an object array (dtype '%s')", path, d);
    if (d[0] == '>')
        return mp_errf(e, "%s: expected a little-endian array, found dtype '%s' (big-endian)", path, d);
    return mp_errf(e, "%s: expected dtype '<f4', '<f2', '<i4', '<u2' or '|u1', found '%s'", path, d);
}

/* Reads and checks the preamble and header; leaves f at the first data byte. */
static MP_UNUSED int mp_npy_header_(FILE *f, const char *path, int64_t fsize, MpNpyHdr *h,
                                    int64_t *data_at, MpErr *e)
{
    unsigned char pre[12];
    size_t got = fread(pre, 1, 10, f);
    if (got < 6 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return mp_errf(e, "%s: not a .npy file: expected it to start with \\x93NUMPY%s", path,
                       got >= 2 && pre[0] == 'P' && pre[1] == 'K' ? " (this looks like a .npz archive)" : "");
    if (got < 10)
        return mp_errf(e, "%s: truncated: the file holds only %lld bytes", path, (long long)fsize);
    int major = pre[6];
    int64_t hlen;
    if (major == 1) {
        hlen = pre[8] | (int64_t)pre[9] << 8;
        *data_at = 10 + hlen;
    } else if (major == 2 || major == 3) {
        if (fread(pre + 10, 1, 2, f) != 2)
            return mp_errf(e, "%s: truncated: the file holds only %lld bytes", path, (long long)fsize);
        hlen = pre[8] | (int64_t)pre[9] << 8 | (int64_t)pre[10] << 16 | (int64_t)pre[11] << 24;
        *data_at = 12 + hlen;
    } else {
        return mp_errf(e, "%s: expected .npy version 1.0, 2.0 or 3.0, found %d.%d", path, major, pre[7]);
    }
    if (hlen > MP_NPY_MAX_HEADER)
        return mp_errf(e, "%s: bad header: %lld bytes long (at most %d expected)", path,
                       (long long)hlen, MP_NPY_MAX_HEADER);
    if (*data_at > fsize)
        return mp_errf(e, "%s: truncated: the header is %lld bytes long but the file holds only %lld "
                       "bytes after the preamble", path, (long long)hlen, (long long)(fsize - (*data_at - hlen)));
    char *text = (char *)malloc((size_t)hlen + 1);
    if (!text)
        return mp_errf(e, "%s: out of memory", path);
    int rc;
    if (fread(text, 1, (size_t)hlen, f) != (size_t)hlen) {
        rc = mp_errf(e, "%s: read error in the header", path);
    } else {
        MpScan c = {text, text, text + hlen, path, e};
        rc = mp_npy_dict_(&c, h);
    }
    free(text);
    return rc;
}

static MP_UNUSED void mp_array_free(MpArray *a)
{
    if (!a)
        return;
    if (a->map)
        munmap(a->map, a->map_len);
    else
        free(a->data);
    memset(a, 0, sizeof *a);
}

/* Opens path and checks its header against its size: out gets dtype, rank,
 * shape, nbytes and descr; *data_at is the first data byte. Returns the
 * open file, or NULL with e set (out->descr set when only the dtype was
 * refused). */
static MP_UNUSED FILE *mp_npy_open_(const char *path, MpArray *out, int64_t *data_at, MpErr *e)
{
    memset(out, 0, sizeof *out);
    int64_t fsize = 0, numel, nbytes = 0;
    FILE *f = mp_open_read(path, &fsize, e);
    MpNpyHdr h;
    char shp[160];
    if (!f)
        return NULL;
    if (mp_npy_header_(f, path, fsize, &h, data_at, e)) {
        fclose(f);
        return NULL;
    }
    int dtype = mp_npy_dtype_(path, h.descr, e);
    numel = mp_numel(h.rank, h.shape);
    mp_shape_str(shp, sizeof shp, h.rank, h.shape);
    snprintf(out->descr, sizeof out->descr, "%s", h.descr);
    if (dtype < 0) {
        /* e says why */
    } else if (h.fortran)
        mp_errf(e, "%s: expected a C-order array, found fortran_order True", path);
    else if (numel < 0 || mp_mul_i64(numel, mp_dtype_size(dtype), &nbytes) || (uint64_t)nbytes >= SIZE_MAX / 2)
        mp_errf(e, "%s: the shape %s overflows", path, shp);
    else if (fsize - *data_at != nbytes)
        mp_errf(e, "%s: %sheader says %s %s (%lld bytes) but the file holds %lld bytes of data", path,
                fsize - *data_at < nbytes ? "truncated: " : "", shp, mp_dtype_name(dtype),
                (long long)nbytes, (long long)(fsize - *data_at));
    else {
        out->dtype = dtype;
        out->rank = h.rank;
        memcpy(out->shape, h.shape, sizeof h.shape);
        out->nbytes = nbytes;
        return f;
    }
    fclose(f);
    if (dtype >= 0)
        out->descr[0] = 0;
    return NULL;
}

/* Loads path into out (zeroed first). 0 ok; -1 with e set and out empty. */
static MP_UNUSED int mp_npy_load(const char *path, MpArray *out, MpErr *e)
{
    int64_t data_at = 0;
    FILE *f = mp_npy_open_(path, out, &data_at, e);
    if (!f)
        return -1;
    int rc = -1;
    size_t n = (size_t)out->nbytes;
    if (!(out->data = malloc(n ? n : 1)))
        mp_errf(e, "%s: out of memory for %lld bytes", path, (long long)out->nbytes);
    else if (n && fread(out->data, 1, n, f) != n)
        mp_errf(e, "%s: read error in the data", path);
    else
        rc = 0;
    fclose(f);
    if (rc)
        mp_array_free(out);
    return rc;
}

/* Maps the open file f (size bytes) read-only; the data starts at byte at. */
static MP_UNUSED int mp_map_file_(FILE *f, const char *path, int64_t size, int64_t at, MpArray *out, MpErr *e)
{
    if (out->nbytes == 0) {               /* nothing to map: a 1-byte block */
        out->data = calloc(1, 1);
        return out->data ? 0 : mp_errf(e, "%s: out of memory", path);
    }
    void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fileno(f), 0);
    if (p == MAP_FAILED)
        return mp_errf(e, "%s: cannot map the file into memory: %s", path, strerror(errno));
    out->map = p;
    out->map_len = (size_t)size;
    out->data = (char *)p + at;
    return 0;
}

/* As mp_npy_load, but the data stays in the file, mapped (see the top). */
static MP_UNUSED int mp_npy_map(const char *path, MpArray *out, MpErr *e)
{
    int64_t data_at = 0;
    FILE *f = mp_npy_open_(path, out, &data_at, e);
    if (!f)
        return -1;
    int rc = mp_map_file_(f, path, data_at + out->nbytes, data_at, out, e);
    fclose(f);                            /* the mapping outlives the descriptor */
    if (rc)
        mp_array_free(out);
    return rc;
}

/* A raw file of little-endian dtype values as a mapped 1-D array. */
static MP_UNUSED int mp_raw_map(const char *path, int dtype, MpArray *out, MpErr *e)
{
    memset(out, 0, sizeof *out);
    int64_t size = 0, el = mp_dtype_size(dtype);
    FILE *f = mp_open_read(path, &size, e);
    if (!f)
        return -1;
    int rc = -1;
    if (size % el)
        mp_errf(e, "%s: expected raw %s values (%lld bytes each), found %lld bytes, not a whole "
                "number of them", path, mp_dtype_name(dtype), (long long)el, (long long)size);
    else {
        out->dtype = dtype;
        out->rank = 1;
        out->shape[0] = size / el;
        out->nbytes = size;
        snprintf(out->descr, sizeof out->descr, "raw");
        rc = mp_map_file_(f, path, size, 0, out, e);
    }
    fclose(f);
    if (rc)
        mp_array_free(out);
    return rc;
}

/* Writes a as a .npy file (atomically). nbytes must match dtype x shape. */
static MP_UNUSED int mp_npy_save(const char *path, const MpArray *a, MpErr *e)
{
    static const char *const descr[] = {NULL, "<f4", "<f2", NULL, "<i4", "|u1", "<u2"};
    if (a->dtype < MP_F32 || a->dtype > MP_U16 || !descr[a->dtype])
        return mp_errf(e, "%s: cannot save %s as .npy (NumPy has no such type)", path, mp_dtype_name(a->dtype));
    if (a->rank < 0 || a->rank > MP_MAX_RANK)
        return mp_errf(e, "%s: cannot save an array of rank %d", path, a->rank);
    int64_t numel = mp_numel(a->rank, a->shape), nbytes;
    if (numel < 0 || mp_mul_i64(numel, mp_dtype_size(a->dtype), &nbytes) || nbytes != a->nbytes)
        return mp_errf(e, "%s: array of %lld bytes does not match its shape and type", path,
                       (long long)a->nbytes);
    MpBuf h = {NULL, 0, 0, 0};
    mp_buf_printf(&h, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr[a->dtype]);
    for (int i = 0; i < a->rank; i++)   /* NumPy's spelling: (3,) (2, 3) */
        mp_buf_printf(&h, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
    mp_buf_puts(&h, a->rank == 1 ? ",), }" : "), }");
    /* Version 1 while the header fits 2 length bytes; pad to 64 with spaces. */
    int pre = h.len + 64 <= 65535 ? 10 : 12;
    while ((pre + h.len + 1) % 64)
        mp_buf_puts(&h, " ");
    mp_buf_puts(&h, "\n");
    if (h.oom) {
        mp_buf_free(&h);
        return mp_errf(e, "%s: out of memory", path);
    }
    unsigned char p[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)(pre == 10 ? 1 : 2), 0};
    for (int i = 0; i < pre - 8; i++)
        p[8 + i] = (unsigned char)(h.len >> (8 * i));
    const void *parts[3] = {p, h.p, a->data};
    size_t sizes[3] = {(size_t)pre, h.len, (size_t)nbytes};
    int rc = mp_write_file_atomic(path, parts, sizes, 3, e);
    mp_buf_free(&h);
    return rc;
}

#endif
