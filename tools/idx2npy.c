/* idx2npy - converts an MNIST-style IDX file (gzip-compressed or plain) into
 * a NumPy .npy file that a generated trainer reads with --data / --eval.
 *
 *   idx2npy [--shape flat|nchw] [--limit N] [--pad P] IN OUT.npy
 *
 * Images (magic 0x00000803: count, rows, cols, then count*rows*cols bytes)
 * become u8 [count, rows*cols] (--shape flat, the default) or
 * u8 [count, 1, rows, cols] (--shape nchw, for conv2d). Labels (magic
 * 0x00000801: count, then count bytes) become i32 [count]: class labels are
 * i32 in the language (--shape does not apply to them). --limit N keeps the
 * first N samples. --pad P surrounds every image with P rows and columns of
 * zeros on each side (Fashion-MNIST's 28x28 to the 32x32 of a CIFAR network:
 * --pad 2, like torchvision's transforms.Pad(2)). Examples:
 *
 *   idx2npy ../shared/data/mnist/train-images-idx3-ubyte.gz train_x.npy
 *   idx2npy ../shared/data/mnist/train-labels-idx1-ubyte.gz train_y.npy
 *   idx2npy --shape nchw --limit 1000 t10k-images-idx3-ubyte.gz test_x.npy
 *   idx2npy --shape nchw --pad 2 fashion-mnist/train-images-idx3-ubyte.gz x32.npy
 *
 * The header must agree with the data exactly (a file too short or too long
 * is refused). Exit status: 0 ok; 1 a bad input or an output that cannot be
 * written (one line naming the file); 2 bad usage. */
#include "mp_npy.h"
#include "tool_input.h"

static const char usage[] =
    "usage: idx2npy [--shape flat|nchw] [--limit N] [--pad P] IN OUT.npy\n"
    "  IN: IDX images (u8 [N, rows*cols], or [N, 1, rows, cols] with --shape nchw)\n"
    "      or IDX labels (i32 [N]), gzip-compressed or plain\n"
    "  --limit N   keep only the first N samples\n"
    "  --pad P     P rows and columns of zeros around every image (28x28 -> 32x32: --pad 2)\n";

typedef struct Opts { const char *in, *out; int nchw; long long limit, pad; } Opts;

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
        if ((!strcmp(a, "--shape") || !strcmp(a, "--limit") || !strcmp(a, "--pad")) && i + 1 >= argc) {
            fprintf(stderr, "idx2npy: %s needs a value\n%s", a, usage);
            return 2;
        }
        if (!strcmp(a, "--shape")) {
            const char *v = argv[++i];
            if (strcmp(v, "flat") && strcmp(v, "nchw")) {
                fprintf(stderr, "idx2npy: --shape must be flat or nchw, not '%s'\n", v);
                return 2;
            }
            o->nchw = !strcmp(v, "nchw");
        } else if (!strcmp(a, "--limit")) {
            if (tool_int(argv[++i], 1, INT64_MAX, &o->limit)) {
                fprintf(stderr, "idx2npy: --limit needs a positive count, not '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--pad")) {
            if (tool_int(argv[++i], 0, 1 << 12, &o->pad)) {
                fprintf(stderr, "idx2npy: --pad needs a count of pixels from 0 to 4096, not '%s'\n", argv[i]);
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "idx2npy: unknown option '%s'\n%s", a, usage);
            return 2;
        } else if (npos < 2) {
            *(npos++ ? &o->out : &o->in) = a;
        } else {
            fprintf(stderr, "idx2npy: too many arguments\n%s", usage);
            return 2;
        }
    }
    if (npos != 2) {
        fprintf(stderr, "idx2npy: expected an input and an output file\n%s", usage);
        return 2;
    }
    return 0;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Checks the IDX header against the data; dims[0..nd) are the counts. */
static int parse_idx(const char *path, const unsigned char *b, size_t len, int *nd, int64_t dims[3],
                     MpErr *e)
{
    uint32_t magic = len >= 4 ? be32(b) : 0;
    if (len < 4 || (magic != 0x801 && magic != 0x803))
        return mp_errf(e, "%s: not an IDX file of u8 labels or images: expected magic 0x00000801 or "
                       "0x00000803, found %s0x%08x", path, len < 4 ? "only " : "", (unsigned)magic);
    *nd = (int)(magic & 0xff);
    size_t head = 4 + 4 * (size_t)*nd;
    if (len < head)
        return mp_errf(e, "%s: truncated: %zu bytes, fewer than its %zu-byte header", path, len, head);
    int64_t need = 1;
    for (int i = 0; i < *nd; i++) {
        dims[i] = be32(b + 4 + 4 * i);
        if (mp_mul_i64(need, dims[i], &need))
            return mp_errf(e, "%s: its header's counts overflow", path);
    }
    char shp[100];
    mp_shape_str(shp, sizeof shp, *nd, dims);
    if ((int64_t)(len - head) != need)
        return mp_errf(e, "%s: %sheader says %s (%lld bytes) but the file holds %zu bytes of data", path,
                       (int64_t)(len - head) < need ? "truncated: " : "", shp, (long long)need, len - head);
    return 0;
}

/* The .npy array for the first n samples of the IDX data at d. */
static int to_array(const Opts *o, int nd, const int64_t dims[3], int64_t n, const unsigned char *d,
                    MpArray *a, MpErr *e)
{
    memset(a, 0, sizeof *a);
    a->shape[0] = n;
    if (nd == 1) {                    /* labels: i32 [n] */
        int32_t *v = (int32_t *)malloc((size_t)n * 4 + 1);
        if (!v)
            return mp_errf(e, "%s: out of memory", o->out);
        for (int64_t i = 0; i < n; i++)
            v[i] = d[i];
        a->dtype = MP_I32, a->rank = 1, a->data = v, a->nbytes = n * 4;
        return 0;
    }
    int64_t p = o->pad, rows = dims[1] + 2 * p, cols = dims[2] + 2 * p;
    a->dtype = MP_U8;                 /* images: u8, points into the input unless padded */
    a->data = (void *)d;
    a->nbytes = n * rows * cols;
    if (p) {
        unsigned char *v = (unsigned char *)calloc((size_t)a->nbytes + 1, 1);
        if (!v)
            return mp_errf(e, "%s: out of memory", o->out);
        for (int64_t s = 0; s < n; s++)
            for (int64_t r = 0; r < dims[1]; r++)
                memcpy(v + (s * rows + r + p) * cols + p, d + (s * dims[1] + r) * dims[2], (size_t)dims[2]);
        a->data = v;
    }
    if (o->nchw) {
        a->rank = 4, a->shape[1] = 1, a->shape[2] = rows, a->shape[3] = cols;
    } else {
        a->rank = 2, a->shape[1] = rows * cols;
    }
    return 0;
}

int main(int argc, char **argv)
{
    Opts o = {NULL, NULL, 0, 0, 0};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : 2;
    MpErr e;
    unsigned char *buf = NULL;
    size_t len = 0;
    int nd = 0;
    int64_t dims[3] = {0, 0, 0};
    MpArray a;
    memset(&a, 0, sizeof a);
    if (tool_read_input(o.in, &buf, &len, &e) || parse_idx(o.in, buf, len, &nd, dims, &e)) {
        rc = 1;
    } else if (o.limit > dims[0]) {
        mp_errf(&e, "%s: holds %lld samples, fewer than --limit %lld", o.in, (long long)dims[0], o.limit);
        rc = 1;
    } else {
        int64_t n = o.limit ? o.limit : dims[0];
        rc = to_array(&o, nd, dims, n, buf + 4 + 4 * nd, &a, &e) || mp_npy_save(o.out, &a, &e);
        if (a.data != buf + 4 + 4 * nd)
            free(a.data);
    }
    free(buf);
    if (rc) {
        fprintf(stderr, "idx2npy: %s\n", e.msg);
        return 1;
    }
    return 0;
}
