/* csv2npy - converts a CSV file of numbers (gzip-compressed or plain) into
 * NumPy .npy files that a generated trainer reads with --data / --eval.
 *
 *   csv2npy [--features COLS] [--label COL | --target COL] [--dtype f32|u8|i32]
 *           [--header] IN OUT_X.npy [OUT_Y.npy]
 *
 * Every row becomes one sample. The feature columns go to OUT_X as
 * [rows, features] of --dtype (default f32); with --label the label column
 * goes to OUT_Y as i32 [rows] (class labels), with --target as f32 [rows]
 * (a regression target, for mse).
 * COLS is a Python-style slice of 0-based column numbers, A:B (B excluded;
 * either may be left out; negative counts from the end) or one number; by
 * default the features are every column but the label. --header skips the
 * first line; a first line that is not numbers is refused with a hint to
 * add it. Blank lines are skipped; every other line must have as many
 * columns as the first. Examples:
 *
 *   # 1797 rows of 64 pixels then the digit: f32 [1797, 64] + i32 [1797]
 *   csv2npy --label -1 ../shared/data/digits/digits.csv.gz digits_x.npy digits_y.npy
 *   csv2npy --features 0:64 --dtype u8 digits.csv.gz digits_u8.npy
 *
 * Values must be finite numbers that fit the output type (whole numbers in
 * range for u8 and i32, labels included); anything else is refused with
 * FILE:LINE, the column and what was found. Exit status: 0 ok; 1 a bad input
 * or an output that cannot be written; 2 bad usage. */
#include "mp_npy.h"
#include "tool_input.h"

#include <math.h>

static const char usage[] =
    "usage: csv2npy [--features COLS] [--label COL | --target COL] [--dtype f32|u8|i32]\n"
    "               [--header] IN OUT_X.npy [OUT_Y.npy]\n"
    "  COLS: A:B (0-based, B excluded, negative from the end) or one column;\n"
    "        default: every column but the label\n"
    "  --label COL   label column, written to OUT_Y.npy as i32\n"
    "  --target COL  regression target column, written to OUT_Y.npy as f32\n"
    "  --dtype T     type of the features (default f32)\n"
    "  --header      skip the first line\n";

/* A column slice as written; resolved against the width of the first row. */
typedef struct Cols { int given, single; long long a, b; int has_a, has_b; } Cols;

typedef struct Opts {
    const char *in, *out_x, *out_y;
    Cols feat, label;
    int dtype, header;
    int ydtype;                          /* MP_I32 (--label) or MP_F32 (--target) */
} Opts;

static int parse_cols(const char *s, Cols *c)
{
    const char *colon = strchr(s, ':');
    char a[32] = "", b[32] = "";
    if (strlen(s) >= sizeof a)
        return -1;
    memset(c, 0, sizeof *c);
    c->given = 1;
    c->single = !colon;
    if (colon) {
        snprintf(a, sizeof a, "%.*s", (int)(colon - s), s);
        snprintf(b, sizeof b, "%s", colon + 1);
    } else {
        snprintf(a, sizeof a, "%s", s);
    }
    c->has_a = a[0] != 0;
    c->has_b = b[0] != 0;
    if (c->single && !c->has_a)
        return -1;
    return (c->has_a && tool_int(a, -(1LL << 30), 1LL << 30, &c->a)) ||
           (c->has_b && tool_int(b, -(1LL << 30), 1LL << 30, &c->b)) ? -1 : 0;
}

/* Resolves c against width w into [*lo, *hi); -1 if empty or out of range. */
static int resolve_cols(const Cols *c, long long w, long long *lo, long long *hi)
{
    long long a = c->has_a ? (c->a < 0 ? c->a + w : c->a) : 0;
    long long b = c->single ? a + 1 : c->has_b ? (c->b < 0 ? c->b + w : c->b) : w;
    *lo = a, *hi = b;
    return a < 0 || b > w || a >= b ? -1 : 0;
}

/* The value of --opt, or NULL (message printed) when it is missing. */
static const char *value(int argc, char **argv, int *i)
{
    if (*i + 1 < argc)
        return argv[++*i];
    fprintf(stderr, "csv2npy: %s needs a value\n%s", argv[*i], usage);
    return NULL;
}

/* 0 ok, 2 bad usage (message printed), 1 for --help (usage printed). */
static int parse_args(int argc, char **argv, Opts *o)
{
    const char *pos[3];
    int npos = 0;
    o->dtype = MP_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return 1;
        } else if (!strcmp(a, "--header")) {
            o->header = 1;
        } else if (!strcmp(a, "--features") || !strcmp(a, "--label") || !strcmp(a, "--target")) {
            Cols *c = a[2] == 'f' ? &o->feat : &o->label;
            if (c == &o->label && o->label.given) {
                fprintf(stderr, "csv2npy: give one of --label and --target, once\n%s", usage);
                return 2;
            }
            if (c == &o->label)
                o->ydtype = a[2] == 'l' ? MP_I32 : MP_F32;
            if (!(v = value(argc, argv, &i)))
                return 2;
            if (parse_cols(v, c) || (c == &o->label && !c->single)) {
                fprintf(stderr, "csv2npy: bad %s '%s'\n%s", a, v, usage);
                return 2;
            }
        } else if (!strcmp(a, "--dtype")) {
            if (!(v = value(argc, argv, &i)))
                return 2;
            o->dtype = !strcmp(v, "f32") ? MP_F32 : !strcmp(v, "u8") ? MP_U8 : !strcmp(v, "i32") ? MP_I32 : 0;
            if (!o->dtype) {
                fprintf(stderr, "csv2npy: --dtype must be f32, u8 or i32, not '%s'\n", v);
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "csv2npy: unknown option '%s'\n%s", a, usage);
            return 2;
        } else if (npos < 3) {
            pos[npos++] = a;
        } else {
            npos = 4;
        }
    }
    if (npos != 2 + o->label.given) {
        fprintf(stderr, "csv2npy: expected IN and OUT_X.npy%s\n%s",
                o->label.given ? " and OUT_Y.npy (for --label / --target)"
                : " (OUT_Y.npy only with --label or --target)", usage);
        return 2;
    }
    o->in = pos[0], o->out_x = pos[1], o->out_y = o->label.given ? pos[2] : NULL;
    return 0;
}

/* Splits one line [p, end) into at most cap numbers; -1 with e set. */
static int split(const char *path, long line, const char *p, const char *end, double *v, long long cap,
                 long long *n, MpErr *e)
{
    *n = 0;
    for (;;) {
        char *stop;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        double x = p < end ? strtod(p, &stop) : 0;
        if (p == end || stop == p || stop > end) {
            const char *fe = (const char *)memchr(p, ',', (size_t)(end - p));
            int flen = (int)((fe ? fe : end) - p);
            return mp_errf(e, "%s:%ld: column %lld: expected a number, found '%.*s'", path, line, *n,
                           flen > 20 ? 20 : flen, p);
        }
        p = stop;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (p < end && *p != ',')
            return mp_errf(e, "%s:%ld: column %lld: expected ',' after the number, found '%c'", path, line,
                           *n, *p);
        if (*n < cap)
            v[*n] = x;
        ++*n;
        if (p == end)
            return 0;
        p++;
    }
}

/* Stores x as dtype at out; -1 with e set when it does not fit. */
static int store(const char *path, long line, long long col, double x, int dtype, void *out, MpErr *e)
{
    if (!isfinite(x))
        return mp_errf(e, "%s:%ld: column %lld: expected a finite number, found %g", path, line, col, x);
    double lo = dtype == MP_U8 ? 0 : dtype == MP_I32 ? -2147483648.0 : -3.4028234663852886e38;
    double hi = dtype == MP_U8 ? 255 : dtype == MP_I32 ? 2147483647.0 : 3.4028234663852886e38;
    if (dtype != MP_F32 && x != floor(x))
        return mp_errf(e, "%s:%ld: column %lld: expected a whole number for %s, found %.17g", path, line, col,
                       mp_dtype_name(dtype), x);
    if (x < lo || x > hi)
        return mp_errf(e, "%s:%ld: column %lld: %.17g is out of range for %s", path, line, col, x,
                       mp_dtype_name(dtype));
    if (dtype == MP_F32) {
        float f = (float)x;
        memcpy(out, &f, 4);
    } else if (dtype == MP_I32) {
        int32_t i = (int32_t)x;
        memcpy(out, &i, 4);
    } else {
        *(uint8_t *)out = (uint8_t)x;
    }
    return 0;
}

/* What is being built: the layout from the first row, then the arrays. */
typedef struct Conv {
    const Opts *o;
    long long width, flo, fhi, label;   /* label -1: none */
    long long rows, cap;
    unsigned char *x;                    /* rows * nfeat * size */
    unsigned char *y;                    /* rows * 4: i32 or f32 */
    double *vals;
} Conv;

/* Fixes the layout from the first row's width. */
static int layout(Conv *c, long line, long long width, MpErr *e)
{
    const Opts *o = c->o;
    long long lo, hi;
    c->width = width;
    c->label = -1;
    if (o->label.given && resolve_cols(&o->label, width, &c->label, &hi))
        return mp_errf(e, "%s:%ld: %s %lld is outside the %lld columns", o->in, line,
                       o->ydtype == MP_F32 ? "--target" : "--label", o->label.a, width);
    if (o->feat.given) {
        if (resolve_cols(&o->feat, width, &lo, &hi))
            return mp_errf(e, "%s:%ld: --features selects no columns of the %lld", o->in, line, width);
    } else if (c->label == width - 1 || c->label < 0) {   /* everything before the label */
        lo = 0, hi = c->label < 0 ? width : width - 1;
    } else if (c->label == 0) {
        lo = 1, hi = width;
    } else {
        return mp_errf(e, "%s:%ld: the label is column %lld, in the middle: say which are the --features",
                       o->in, line, c->label);
    }
    if (lo >= hi)
        return mp_errf(e, "%s:%ld: no feature columns left", o->in, line);
    c->flo = lo, c->fhi = hi;
    return 0;
}

/* Appends one row of c->vals to the arrays. */
static int add_row(Conv *c, long line, MpErr *e)
{
    int size = mp_dtype_size(c->o->dtype);
    long long nf = c->fhi - c->flo;
    if (c->rows == c->cap) {
        long long cap = c->cap ? 2 * c->cap : 1024;
        unsigned char *x = (unsigned char *)realloc(c->x, (size_t)(cap * nf * size));
        unsigned char *y = x ? (unsigned char *)realloc(c->y, (size_t)cap * 4) : NULL;
        if (x)
            c->x = x;
        if (!x || !y)
            return mp_errf(e, "%s: out of memory at line %ld", c->o->in, line);
        c->y = y;
        c->cap = cap;
    }
    unsigned char *out = c->x + c->rows * nf * size;
    for (long long j = 0; j < nf; j++)
        if (store(c->o->in, line, c->flo + j, c->vals[c->flo + j], c->o->dtype, out + j * size, e))
            return -1;
    if (c->label >= 0 && store(c->o->in, line, c->label, c->vals[c->label], c->o->ydtype, c->y + 4 * c->rows, e))
        return -1;
    c->rows++;
    return 0;
}

/* A first line that is not numbers is most likely column names. */
static int header_hint(MpErr *e)
{
    char msg[sizeof e->msg];
    snprintf(msg, sizeof msg, "%s", e->msg);
    return mp_errf(e, "%s (if the first row holds column names, add --header)", msg);
}

/* Reads every line of the text into c. */
static int convert(Conv *c, const char *text, size_t len, MpErr *e)
{
    const char *p = text, *end = text + len;
    for (long line = 1; p < end; line++) {
        const char *nl = (const char *)memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end, *q = p;
        if (le > p && le[-1] == '\r')
            le--;
        while (q < le && (*q == ' ' || *q == '\t'))
            q++;
        if (q < le && !(line == 1 && c->o->header)) {
            long long n = 0;
            if (!c->vals) {   /* the first row: count its columns, fix the layout */
                if (split(c->o->in, line, p, le, NULL, 0, &n, e))
                    return line == 1 && !c->o->header ? header_hint(e) : -1;
                if (!(c->vals = (double *)malloc((size_t)n * sizeof *c->vals)))
                    return mp_errf(e, "%s: out of memory", c->o->in);
                if (layout(c, line, n, e))
                    return -1;
            }
            if (split(c->o->in, line, p, le, c->vals, c->width, &n, e))
                return -1;
            if (n != c->width)
                return mp_errf(e, "%s:%ld: expected %lld columns (as on the first row), found %lld", c->o->in,
                               line, c->width, n);
            if (add_row(c, line, e))
                return -1;
        }
        p = nl ? nl + 1 : end;
    }
    return c->rows ? 0 : mp_errf(e, "%s: no rows of data", c->o->in);
}

static int save(const Conv *c, MpErr *e)
{
    MpArray a;
    memset(&a, 0, sizeof a);
    a.dtype = c->o->dtype, a.rank = 2, a.data = c->x;
    a.shape[0] = c->rows, a.shape[1] = c->fhi - c->flo;
    a.nbytes = a.shape[0] * a.shape[1] * mp_dtype_size(a.dtype);
    if (mp_npy_save(c->o->out_x, &a, e))
        return -1;
    if (c->label < 0)
        return 0;
    a.dtype = c->o->ydtype, a.rank = 1, a.data = c->y, a.nbytes = c->rows * 4;
    return mp_npy_save(c->o->out_y, &a, e);
}

int main(int argc, char **argv)
{
    Opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : 2;
    MpErr e;
    unsigned char *text = NULL;
    size_t len = 0;
    Conv c;
    memset(&c, 0, sizeof c);
    c.o = &o;
    rc = tool_read_input(o.in, &text, &len, &e) || convert(&c, (const char *)text, len, &e) || save(&c, &e);
    free(text);
    free(c.x);
    free(c.y);
    free(c.vals);
    if (rc) {
        fprintf(stderr, "csv2npy: %s\n", e.msg);
        return 1;
    }
    return 0;
}
