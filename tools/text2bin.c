/* text2bin - turns a text file into character-level token streams for a
 * window input (`input seq: u16[B, T + 1] window`), the way nanoGPT's
 * data/shakespeare_char/prepare.py does:
 *
 *   text2bin [--split F] IN.txt TRAIN.bin VAL.bin VOCAB.txt
 *
 * The vocabulary is the sorted set of the text's characters (Unicode code
 * points, decoded from UTF-8); character c becomes the id of its place in
 * that order. The first int(n * F) characters (F = 0.9 by default, as
 * prepare.py) go to TRAIN.bin, the rest to VAL.bin, each a raw stream of
 * little-endian u16 ids (prepare.py's `np.array(ids, np.uint16).tofile`).
 * VOCAB.txt holds the vocabulary's characters in id order, UTF-8, nothing
 * between them (id i is the i-th character), so that a sample decodes with
 * `vocab[id]` in Python. The vocabulary size is printed on standard output.
 *
 * Refused, with one line naming the file: text that is not UTF-8 (the byte
 * offset), an empty text, more than 65536 distinct characters, an output
 * that cannot be written. Every output is written to a temporary file and
 * renamed into place. Exit status: 0 ok; 1 a bad input or output; 2 bad
 * usage. */
#include "mp_npy.h"
#include "tool_input.h"

static const char usage[] =
    "usage: text2bin [--split F] IN.txt TRAIN.bin VAL.bin VOCAB.txt\n"
    "  character-level u16 token streams (nanoGPT's shakespeare_char prepare.py):\n"
    "  the first int(n * F) characters to TRAIN.bin, the rest to VAL.bin (F = 0.9);\n"
    "  VOCAB.txt: the sorted distinct characters, UTF-8, in id order\n";

typedef struct Opts { const char *path[4]; double split; } Opts;

/* 0 ok, 2 bad usage (message printed), 1 for --help (usage printed). */
static int parse_args(int argc, char **argv, Opts *o)
{
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 1;
        }
        if (!strcmp(a, "--split")) {
            char *end = NULL;
            o->split = i + 1 < argc ? strtod(argv[++i], &end) : -1;
            if (!end || *end || end == argv[i] || !(o->split > 0 && o->split < 1)) {
                fprintf(stderr, "text2bin: --split needs a fraction between 0 and 1 (exclusive)\n%s", usage);
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "text2bin: unknown option '%s'\n%s", a, usage);
            return 2;
        } else if (npos < 4) {
            o->path[npos++] = a;
        } else {
            fprintf(stderr, "text2bin: too many arguments\n%s", usage);
            return 2;
        }
    }
    if (npos != 4) {
        fprintf(stderr, "text2bin: expected an input text and three output files\n%s", usage);
        return 2;
    }
    return 0;
}

/* The code point at b[*i] (advancing *i), or -1 for a malformed sequence:
 * a bad lead or continuation byte, an overlong form, a surrogate, > U+10FFFF. */
static int32_t utf8_next(const unsigned char *b, size_t len, size_t *i)
{
    static const int32_t lowest[4] = {0, 0x80, 0x800, 0x10000};
    unsigned char c = b[*i];
    int extra = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
    if (extra < 0 || *i + (size_t)extra >= len + (extra ? 0 : 1))
        return -1;
    int32_t cp = extra ? c & (0x3f >> extra) : c;
    for (int k = 1; k <= extra; k++) {
        if ((b[*i + k] & 0xc0) != 0x80)
            return -1;
        cp = cp << 6 | (b[*i + k] & 0x3f);
    }
    if (cp < lowest[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return -1;
    *i += (size_t)extra + 1;
    return cp;
}

/* One code point as UTF-8 into out (4 bytes room); its length. */
static int utf8_put(int32_t cp, unsigned char *out)
{
    if (cp < 0x80)
        return out[0] = (unsigned char)cp, 1;
    if (cp < 0x800)
        return out[0] = (unsigned char)(0xc0 | cp >> 6), out[1] = (unsigned char)(0x80 | (cp & 0x3f)), 2;
    int n = cp < 0x10000 ? 3 : 4;
    out[0] = (unsigned char)(n == 3 ? 0xe0 | cp >> 12 : 0xf0 | cp >> 18);
    for (int k = 1; k < n; k++)
        out[k] = (unsigned char)(0x80 | ((cp >> (6 * (n - 1 - k))) & 0x3f));
    return n;
}

/* The text as code points (malloc'ed) and their count; refuses bad UTF-8. */
static int decode(const char *path, const unsigned char *b, size_t len, int32_t **cps, size_t *n, MpErr *e)
{
    int32_t *v = (int32_t *)malloc((len + 1) * sizeof *v);
    if (!v)
        return mp_errf(e, "%s: out of memory", path);
    size_t i = 0, k = 0;
    while (i < len) {
        int32_t cp = utf8_next(b, len, &i);
        if (cp < 0) {
            free(v);
            return mp_errf(e, "%s: not UTF-8 text: malformed byte sequence at byte offset %zu", path, i);
        }
        v[k++] = cp;
    }
    if (k == 0) {
        free(v);
        return mp_errf(e, "%s: empty text: expected at least one character", path);
    }
    *cps = v;
    *n = k;
    return 0;
}

static int cmp_cp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* ids[i] = rank of cps[i] in the sorted set of distinct code points, which
 * is left in vocab[0..*nv). Binary search keeps any alphabet size cheap. */
static int tokenize(const char *path, const int32_t *cps, size_t n, uint16_t *ids, int32_t *vocab, size_t *nv,
                    MpErr *e)
{
    memcpy(vocab, cps, n * sizeof *cps);
    qsort(vocab, n, sizeof *vocab, cmp_cp);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || vocab[u - 1] != vocab[i])
            vocab[u++] = vocab[i];
    if (u > 65536)
        return mp_errf(e, "%s: %zu distinct characters, more than the 65536 ids of u16", path, u);
    for (size_t i = 0; i < n; i++) {
        const int32_t *at = (const int32_t *)bsearch(&cps[i], vocab, u, sizeof *vocab, cmp_cp);
        ids[i] = (uint16_t)(at - vocab);
    }
    *nv = u;
    return 0;
}

/* ids as raw little-endian u16, atomically. */
static int write_ids(const char *path, const uint16_t *ids, size_t n, MpErr *e)
{
    unsigned char *b = (unsigned char *)malloc(2 * n + 1);
    if (!b)
        return mp_errf(e, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++)
        b[2 * i] = (unsigned char)(ids[i] & 0xff), b[2 * i + 1] = (unsigned char)(ids[i] >> 8);
    const void *parts[1] = {b};
    size_t sizes[1] = {2 * n};
    int rc = mp_write_file_atomic(path, parts, sizes, 1, e);
    free(b);
    return rc;
}

static int write_vocab(const char *path, const int32_t *vocab, size_t nv, MpErr *e)
{
    unsigned char *b = (unsigned char *)malloc(4 * nv + 1);
    if (!b)
        return mp_errf(e, "%s: out of memory", path);
    size_t len = 0;
    for (size_t i = 0; i < nv; i++)
        len += (size_t)utf8_put(vocab[i], b + len);
    const void *parts[1] = {b};
    size_t sizes[1] = {len};
    int rc = mp_write_file_atomic(path, parts, sizes, 1, e);
    free(b);
    return rc;
}

static int run(const Opts *o, MpErr *e)
{
    unsigned char *text = NULL;
    size_t len = 0, n = 0, nv = 0;
    int32_t *cps = NULL, *vocab = NULL;
    uint16_t *ids = NULL;
    int rc = tool_read_input(o->path[0], &text, &len, e) || decode(o->path[0], text, len, &cps, &n, e);
    if (!rc) {
        vocab = (int32_t *)malloc(n * sizeof *vocab);
        ids = (uint16_t *)malloc(n * sizeof *ids);
        rc = !vocab || !ids ? mp_errf(e, "%s: out of memory", o->path[0])
                            : tokenize(o->path[0], cps, n, ids, vocab, &nv, e);
    }
    if (!rc) {
        size_t ntrain = (size_t)((double)n * o->split);   /* prepare.py: int(n * 0.9) */
        rc = write_ids(o->path[1], ids, ntrain, e) || write_ids(o->path[2], ids + ntrain, n - ntrain, e) ||
             write_vocab(o->path[3], vocab, nv, e);
        if (!rc)
            printf("vocab_size %zu, train %zu tokens, val %zu tokens\n", nv, ntrain, n - ntrain);
    }
    free(text);
    free(cps);
    free(vocab);
    free(ids);
    return rc;
}

int main(int argc, char **argv)
{
    Opts o = {{NULL, NULL, NULL, NULL}, 0.9};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : 2;
    MpErr e;
    if (run(&o, &e)) {
        fprintf(stderr, "text2bin: %s\n", e.msg);
        return 1;
    }
    return 0;
}
