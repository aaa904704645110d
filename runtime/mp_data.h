/* mp_data.h - random numbers, parameter initialisation, training data and
 * the order in which batches are drawn.
 *
 * RNG: xoshiro256** (Blackman & Vigna, 2018). A stream (seed, k) is seeded
 * by running splitmix64 from x = seed XOR (k * 0xD1B54A32D192ED03) and
 * taking its first four outputs as the state. Streams:
 *   k = 0        the data order (one Fisher-Yates shuffle per epoch)
 *   k = 1 + i    parameter i of MpModel.params (declaration order)
 * so a parameter's initial values depend only on the seed, its index and
 * its own shape, not on the data or on the other parameters.
 *   uniform u    = (next() >> 11) * 2^-53, in [0, 1)
 *   normal z     = sqrt(-2 ln(1 - u1)) * cos(2 pi u2), two draws per value
 *   below(n)     = next() % n, redrawn while next() >= 2^64 - (2^64 % n)
 * Each parameter is filled in row-major order, one value per element, in
 * double and rounded to f32:
 *   zeros, ones, constant(a)  no draws
 *   normal(std a)             a * z
 *   uniform(a, b)             a + (b - a) * u
 *   glorot_uniform            l = sqrt(6 / (fan_in + fan_out)); -l + 2 l u
 *   he_normal                 sqrt(2 / fan_in) * z
 *
 * Data order: an epoch is floor(N / B) batches. With shuffling, epoch e
 * starts from the identity permutation of the N samples and shuffles it
 * with Fisher-Yates (for i = N-1 down to 1: swap(i, below(i + 1))) using
 * the data stream, which simply continues from epoch to epoch; batch j of
 * the epoch is perm[jB .. jB+B-1]. Without shuffling the permutation stays
 * the identity: samples 0..B-1, B..2B-1, ..., wrapping round after the
 * last full batch. The state to continue exactly is (the stream's state
 * before this epoch's shuffle, epoch, batches used in this epoch).
 *
 * Window inputs (TRAINER.md "Window inputs"): each input's data is one
 * stream of N values and a row is the W values at an offset o. The set's
 * samples are the evaluation windows, at offsets 0, W-1, 2(W-1), ... that
 * fit: floor((N - W) / (W - 1)) + 1 of them. Training with shuffling draws
 * every row's offset as below(N - W + 1) from the data stream, row after
 * row; `start` is then always the stream's current state (epoch and
 * position stay 0), so a checkpoint's data_rng continues it exactly.
 * Without shuffling the rows take the evaluation windows in order, one per
 * row, back to offset 0 after the last (a batch may span the wrap);
 * position is the next window, epoch the wraps so far.
 *
 * Batches are filled by "keys" (mp_fill_batch): a sample's index, or for a
 * window set a stream offset; mp_data_key gives sample i's key, for
 * evaluation and prediction. Data files are memory-mapped (mp_npy.h) and
 * checked once before training (mp_data_scan): class labels in range for
 * every integer type, float values finite. */
#ifndef MP_DATA_H
#define MP_DATA_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mp_model.h"
#include "mp_util.h"
#include "mp_npy.h"
#include "mp_half.h"

/* ---- xoshiro256** ---------------------------------------------------- */

typedef struct MpRng { uint64_t s[4]; } MpRng;

static inline uint64_t mp_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void mp_rng_seed(MpRng *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++)
        r->s[i] = mp_splitmix64(&x);
}

static inline uint64_t mp_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t mp_rng_next(MpRng *r)
{
    uint64_t *s = r->s, out = mp_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = mp_rotl(s[3], 45);
    return out;
}

static inline double mp_rng_uniform(MpRng *r)
{
    return (double)(mp_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static inline double mp_rng_normal(MpRng *r)
{
    double u1 = mp_rng_uniform(r), u2 = mp_rng_uniform(r);
    return sqrt(-2 * log(1 - u1)) * cos(2 * 3.14159265358979323846 * u2);
}

/* Uniform in [0, n), n > 0, without modulo bias. */
static inline uint64_t mp_rng_below(MpRng *r, uint64_t n)
{
    uint64_t limit = UINT64_MAX - (UINT64_MAX % n + 1) % n, x;
    do
        x = mp_rng_next(r);
    while (x > limit);
    return x % n;
}

/* ---- parameter initialisation --------------------------------------- */

static inline int mp_init_param(MpParam *p, int index, uint64_t seed, MpErr *e)
{
    MpRng r;
    double a = p->a, b = p->b, lim = 0;
    mp_rng_seed(&r, seed, 1 + (uint64_t)index);
    int64_t fan = p->init == MP_INIT_GLOROT_UNIFORM || p->init == MP_INIT_GLOROT_NORMAL
                      ? p->fan_in + p->fan_out
                  : (p->init == MP_INIT_HE_NORMAL || p->init == MP_INIT_HE_UNIFORM) && a == 1
                      ? p->fan_out : p->fan_in;   /* he_*: a = 1 is mode = "fan_out" */
    switch (p->init) {         /* torch.nn.init's bound or std from the fan */
    case MP_INIT_GLOROT_UNIFORM: lim = sqrt(6.0 / (double)fan); break;
    case MP_INIT_GLOROT_NORMAL: lim = sqrt(2.0 / (double)fan); break;
    case MP_INIT_HE_NORMAL: lim = sqrt(2.0 / (double)fan); break;
    case MP_INIT_HE_UNIFORM: lim = sqrt(6.0 / (double)fan); break;
    case MP_INIT_TORCH_UNIFORM: lim = 1 / sqrt((double)fan); break;
    default: fan = 1; break;
    }
    if (fan <= 0)
        return mp_errf(e, "parameter '%s': fan_in/fan_out are 0, cannot initialise", p->name);
    for (int64_t i = 0; i < p->numel; i++) {
        double v;
        switch (p->init) {
        case MP_INIT_ZEROS: v = 0; break;
        case MP_INIT_ONES: v = 1; break;
        case MP_INIT_CONSTANT: v = a; break;
        case MP_INIT_NORMAL: v = a * mp_rng_normal(&r); break;
        case MP_INIT_UNIFORM: v = a + (b - a) * mp_rng_uniform(&r); break;
        case MP_INIT_GLOROT_UNIFORM: v = -lim + 2 * lim * mp_rng_uniform(&r); break;
        case MP_INIT_HE_NORMAL: case MP_INIT_GLOROT_NORMAL: v = lim * mp_rng_normal(&r); break;
        case MP_INIT_HE_UNIFORM: case MP_INIT_TORCH_UNIFORM: v = -lim + 2 * lim * mp_rng_uniform(&r); break;
        case MP_INIT_TRUNC_NORMAL:   /* N(0, a) redrawn until in [b, c] (sema: b < c, [b, c] within 8 std of 0) */
            do
                v = a * mp_rng_normal(&r);
            while (v < b || v > p->c);
            break;
        default: return mp_errf(e, "parameter '%s': unknown initialiser %d", p->name, p->init);
        }
        p->value[i] = (float)v;
    }
    return 0;
}

static inline int mp_init_params(MpModel *m, uint64_t seed, MpErr *e)
{
    for (int i = 0; i < m->nparams; i++)
        if (mp_init_param(&m->params[i], i, seed, e))
            return 1;
    return 0;
}

/* ---- data sets -------------------------------------------------------- */

/* A type as the language and NumPy write it: "f32 (<f4)". */
static inline const char *mp_data_type_str(int t)
{
    switch (t) {
    case MP_F32: return "f32 (<f4)";
    case MP_F16: return "f16 (<f2)";
    case MP_I32: return "i32 (<i4)";
    case MP_U8: return "u8 (|u1)";
    case MP_U16: return "u16 (<u2)";
    default: return mp_dtype_name(t);
    }
}

/* NumPy's name of a type: "np.float32". */
static inline const char *mp_data_np_name(int t)
{
    switch (t) {
    case MP_F32: return "np.float32";
    case MP_F16: return "np.float16";
    case MP_I32: return "np.int32";
    case MP_U8: return "np.uint8";
    case MP_U16: return "np.uint16";
    default: return "?";
    }
}

/* A NumPy descr in words, for "the file holds <i8 (int64, ...)". */
static inline const char *mp_data_descr_words(const char *d)
{
    static const char *const known[][2] = {
        {"<i8", "int64, NumPy's default integer"}, {"<f8", "float64, NumPy's default float"},
        {"<f4", "float32"}, {"<f2", "float16"}, {"<i4", "int32"}, {"<i2", "int16"},
        {"|i1", "int8"}, {"|u1", "uint8"}, {"<u2", "uint16"}, {"<u4", "uint32"},
        {"<u8", "uint64"}, {"|b1", "bool"}, {">f4", "big-endian float32"},
        {">i4", "big-endian int32"}, {">f8", "big-endian float64"}, {">i8", "big-endian int64"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(d, known[i][0]))
            return known[i][1];
    return "a type the trainer does not read";
}

/* Bytes of one sample of input x (one row of a window input). */
static inline int64_t mp_sample_bytes(const MpInput *x)
{
    int64_t n = mp_dtype_size(x->dtype);
    for (int d = 1; d < x->rank; d++)
        n *= x->shape[d];
    return n;
}

/* One --data (or --eval) set: an array per model input, in input order. */
typedef struct MpDataSet {
    const char *opt;            /* "--data" or "--eval", for messages */
    int n;
    MpArray *arr;
    const char **file;
    int64_t samples, batches;
    int64_t window;             /* W of its window inputs; 0: samples */
    int64_t stream;             /* N, the values of each window stream */
} MpDataSet;

static inline void mp_data_free(MpDataSet *d)
{
    for (int i = 0; d->arr && i < d->n; i++)
        mp_array_free(&d->arr[i]);
    free(d->arr);
    free((void *)d->file);
    memset(d, 0, sizeof *d);
}

/* The key of sample i (in file order): its index, or its window's offset. */
static inline int64_t mp_data_key(const MpDataSet *d, int64_t i)
{
    return d->window ? i * (d->window - 1) : i;
}

/* Input i's row for a key (see mp_data_key). */
static inline const void *mp_data_row(const MpModel *m, const MpDataSet *d, int i, int64_t key)
{
    int64_t step = d->window ? mp_dtype_size(m->inputs[i].dtype) : mp_sample_bytes(&m->inputs[i]);
    return (const char *)d->arr[i].data + key * step;
}

/* Type and per-sample shape of one loaded file against its input. */
static inline int mp_check_dtype(const MpInput *x, const MpArray *a, const char *file, MpErr *e)
{
    if (a->dtype == x->dtype)
        return 0;
    const char *np = mp_data_np_name(x->dtype);
    if (!strcmp(a->descr, "raw"))
        return mp_errf(e, "%s: input '%s' needs %s values", file, x->name, mp_data_type_str(x->dtype));
    if (a->dtype)
        return mp_errf(e, "%s: input '%s' needs %s values, the file holds %s: convert it with "
                       "np.save(f, a.astype(%s))", file, x->name, mp_data_type_str(x->dtype),
                       mp_data_type_str(a->dtype), np);
    return mp_errf(e, "%s: input '%s' needs %s values, the file holds %s (%s): convert it with "
                   "np.save(f, a.astype(%s))", file, x->name, mp_data_type_str(x->dtype), a->descr,
                   mp_data_descr_words(a->descr), np);
}

/* The file's shape is the input's but for a channel axis of 1 (NCHW). */
static inline int mp_missing_channel(const MpInput *x, const MpArray *a)
{
    if (x->rank != 4 || x->shape[1] != 1 || a->rank < 2)
        return 0;
    int64_t want = x->shape[2] * x->shape[3], got = 1;
    for (int d = 1; d < a->rank; d++)
        got *= a->shape[d];
    return got == want && !(a->rank == 4 && a->shape[1] == 1);
}

static inline int mp_check_array(const MpInput *x, const MpArray *a, const char *file, MpErr *e)
{
    char want[160], got[160];
    if (mp_check_dtype(x, a, file, e))
        return 1;
    int same = a->rank == x->rank;
    for (int d = 1; same && d < x->rank; d++)
        same = a->shape[d] == x->shape[d];
    if (same && a->rank >= 1)
        return 0;
    mp_shape_str(want, sizeof want, x->rank - 1, x->shape + 1);
    mp_shape_str(got, sizeof got, a->rank, a->shape);
    return mp_errf(e, "%s: input '%s' needs an array of shape Nx%s (N samples), "
                   "the file's shape is %s%s", file, x->name, want, got,
                   mp_missing_channel(x, a) ? " (images without their channel axis: convert "
                   "IDX files with idx2npy --shape nchw)" : "");
}

/* A window input's stream: 1-D, of its type, at least one window long. */
static inline int mp_check_stream(const MpInput *x, const MpArray *a, const char *file, MpErr *e)
{
    char got[160];
    int64_t w = x->shape[1];
    if (mp_check_dtype(x, a, file, e))
        return 1;
    mp_shape_str(got, sizeof got, a->rank, a->shape);
    if (a->rank != 1)
        return mp_errf(e, "%s: input '%s' is a window input: it needs one stream of %s values "
                       "(a 1-D array), the file's shape is %s", file, x->name,
                       mp_data_type_str(x->dtype), got);
    if (a->shape[0] == 0)
        return mp_errf(e, "%s: input '%s' needs a stream of at least one window of %lld values, "
                       "the file is empty", file, x->name, (long long)w);
    if (a->shape[0] < w)
        return mp_errf(e, "%s: input '%s' needs a stream of at least one window of %lld values, "
                       "the file holds %lld", file, x->name, (long long)w, (long long)a->shape[0]);
    return 0;
}

static inline int mp_find_input(const MpModel *m, const char *name, size_t len)
{
    for (int i = 0; i < m->ninputs; i++)
        if (strlen(m->inputs[i].name) == len && !strncmp(m->inputs[i].name, name, len))
            return i;
    return -1;
}

/* A raw stream file (nanoGPT's train.bin): by its name. */
static inline int mp_data_is_raw(const char *file)
{
    size_t n = strlen(file);
    return n >= 4 && !strcmp(file + n - 4, ".bin");
}

/* Maps one input's file: a .npy, or for a window input also a raw .bin. */
static inline int mp_data_open(const MpInput *x, MpArray *a, const char *file, MpErr *e)
{
    if (mp_data_is_raw(file)) {
        if (!x->window)
            return mp_errf(e, "%s: a raw .bin file is one stream of values, for a window input; "
                           "input '%s' needs a .npy file", file, x->name);
        return mp_raw_map(file, x->dtype, a, e) || mp_check_stream(x, a, file, e);
    }
    if (mp_npy_map(file, a, e))
        return a->descr[0] ? mp_check_dtype(x, a, file, e) : 1;
    return x->window ? mp_check_stream(x, a, file, e) : mp_check_array(x, a, file, e);
}

/* Maps one NAME=FILE spec into d. */
static inline int mp_data_add(MpDataSet *d, const MpModel *m, const char *spec, MpErr *e)
{
    const char *eq = strchr(spec, '='), *file = eq ? eq + 1 : spec;
    int i = eq ? mp_find_input(m, spec, (size_t)(eq - spec)) : -1;
    if (i < 0) {
        char names[256] = "";
        for (int k = 0; k < m->ninputs; k++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                     k ? ", " : "", m->inputs[k].name);
        return mp_errf(e, "%s: %s %.*s=...: the model has no input '%.*s' (its inputs: %s)",
                       file, d->opt, eq ? (int)(eq - spec) : 0, spec,
                       eq ? (int)(eq - spec) : 0, spec, names);
    }
    if (d->file[i])
        return mp_errf(e, "%s: %s gives input '%s' twice (also %s)", file, d->opt,
                       m->inputs[i].name, d->file[i]);
    d->file[i] = file;
    return mp_data_open(&m->inputs[i], &d->arr[i], file, e);
}

/* The model's window W: 0 without window inputs; -1 (e set) when some
 * inputs are windows and some not, or the windows differ or are too short. */
static inline int64_t mp_model_window(const MpModel *m, MpErr *e)
{
    int64_t w = 0;
    for (int i = 0; i < m->ninputs; i++) {
        const MpInput *x = &m->inputs[i];
        int64_t wi = x->window ? (x->rank == 2 ? x->shape[1] : -1) : 0;
        if (wi < 0 || (x->window && wi < 2))
            return mp_errf(e, "window input '%s' must have shape [B, W] with W >= 2", x->name), -1;
        if (i > 0 && wi != w)
            return mp_errf(e, "inputs '%s' and '%s' %s: the inputs of a model with window inputs "
                           "must all be windows of one W", m->inputs[0].name, x->name,
                           (wi == 0) != (w == 0) ? "are not both windows" : "have different W"), -1;
        w = wi;
    }
    return w;
}

/* What a set may lack: MP_DATA_PARTIAL (--eval, --predict) every sample
 * counts, so fewer than one batch is fine; MP_DATA_SOME (--predict) inputs
 * may be missing (their batch buffers hold zeros). */
enum { MP_DATA_PARTIAL = 1, MP_DATA_SOME = 2 };

/* Every input given once (unless MP_DATA_SOME) and of the same length
 * (samples, or values of a window stream); at least one batch (one window
 * for training windows) unless MP_DATA_PARTIAL. */
static inline int mp_data_counts(MpDataSet *d, const MpModel *m, int flags, MpErr *e)
{
    int64_t w = d->window;
    int first = -1;
    for (int i = 0; i < m->ninputs; i++) {
        if (!d->file[i] && (flags & MP_DATA_SOME))
            continue;
        if (!d->file[i])
            return mp_errf(e, "no %s %s=FILE%s: every input needs one", d->opt, m->inputs[i].name,
                           w ? " (.npy or .bin)" : ".npy");
        int64_t n = d->arr[i].shape[0];
        if (first >= 0 && n != (w ? d->stream : d->samples))
            return mp_errf(e, "%s: %lld %s, but %s has %lld: every %s file must have the same "
                           "number", d->file[i], (long long)n, w ? "values" : "samples", d->file[first],
                           (long long)(w ? d->stream : d->samples), d->opt);
        first = first < 0 ? i : first;
        if (w)
            d->stream = n;
        d->samples = w ? (n - w) / (w - 1) + 1 : n;
    }
    d->batches = m->batch > 0 ? d->samples / m->batch : 0;
    if ((flags & MP_DATA_PARTIAL) && d->samples < 1)
        return mp_errf(e, "%s: no samples", first >= 0 ? d->file[first] : d->opt);
    if (d->batches < 1 && !(flags & MP_DATA_PARTIAL) && (!w || strcmp(d->opt, "--data")))
        return mp_errf(e, "%s: %lld %s, fewer than one batch of %lld", d->file[first],
                       (long long)d->samples, w ? "windows" : "samples", (long long)m->batch);
    return 0;
}

/* Maps and checks a whole set; mp_data_scan then checks the values.
 * Refuses with a message naming the file. */
static inline int mp_data_load(MpDataSet *d, const MpModel *m, const char *opt,
                               char *const *specs, int nspecs, int flags, MpErr *e)
{
    memset(d, 0, sizeof *d);
    d->opt = opt;
    d->n = m->ninputs;
    d->arr = (MpArray *)calloc((size_t)m->ninputs + 1, sizeof *d->arr);
    d->file = (const char **)calloc((size_t)m->ninputs + 1, sizeof *d->file);
    if (!d->arr || !d->file)
        return mp_errf(e, "out of memory loading %s", opt);
    if ((d->window = mp_model_window(m, e)) < 0)
        return 1;
    for (int k = 0; k < nspecs; k++)
        if (mp_data_add(d, m, specs[k], e))
            return 1;
    return mp_data_counts(d, m, flags, e);
}

/* ---- the values' checks ------------------------------------------------- */

/* Index of the first element of v[0..n) that fails input x's check, or -1:
 * class labels outside [0, classes), float values not finite. */
static inline int64_t mp_first_bad(const MpInput *x, const void *v, int64_t n)
{
    int64_t c = x->classes;
    switch (x->dtype) {
    case MP_F32: {
        const uint32_t *p = (const uint32_t *)v;      /* exponent all ones */
        for (int64_t i = 0; i < n; i++)
            if ((p[i] & 0x7f800000u) == 0x7f800000u)
                return i;
        return -1;
    }
    case MP_F16: case MP_BF16: {
        const uint16_t *p = (const uint16_t *)v;
        uint16_t ex = x->dtype == MP_F16 ? 0x7c00 : 0x7f80;
        for (int64_t i = 0; i < n; i++)
            if ((p[i] & ex) == ex)
                return i;
        return -1;
    }
#define MP_LABELS(T)                                                    \
    do {                                                                \
        const T *p = (const T *)v;                                      \
        for (int64_t i = 0; c > 0 && i < n; i++)                        \
            if (((int64_t)p[i] < 0 || (int64_t)p[i] >= c)               \
                && !(x->has_ignore && (int64_t)p[i] == x->ignore))      \
                return i;                                               \
        return -1;                                                      \
    } while (0)
    case MP_I32: MP_LABELS(int32_t);
    case MP_U16: MP_LABELS(uint16_t);
    case MP_U8: MP_LABELS(uint8_t);
#undef MP_LABELS
    default: return -1;
    }
}

/* The value at v[i] as text, for messages. */
static inline void mp_value_str(char *buf, size_t cap, int dtype, const void *v, int64_t i)
{
    switch (dtype) {
    case MP_F32: snprintf(buf, cap, "%g", (double)((const float *)v)[i]); break;
    case MP_F16: snprintf(buf, cap, "%g", (double)mp_f16_to_f32(((const uint16_t *)v)[i])); break;
    case MP_BF16: snprintf(buf, cap, "%g", (double)mp_bf16_to_f32(((const uint16_t *)v)[i])); break;
    case MP_I32: snprintf(buf, cap, "%ld", (long)((const int32_t *)v)[i]); break;
    case MP_U16: snprintf(buf, cap, "%u", (unsigned)((const uint16_t *)v)[i]); break;
    default: snprintf(buf, cap, "%u", (unsigned)((const uint8_t *)v)[i]); break;
    }
}

static inline int mp_bad_value(const MpDataSet *d, const MpModel *m, int i, int64_t at, MpErr *e)
{
    const MpInput *x = &m->inputs[i];
    char v[48], where[64];
    mp_value_str(v, sizeof v, x->dtype, d->arr[i].data, at);
    if (d->window)
        snprintf(where, sizeof where, "value %lld of the stream", (long long)at);
    else
        snprintf(where, sizeof where, "sample %lld", (long long)(at / (mp_sample_bytes(x) / mp_dtype_size(x->dtype))));
    if (x->dtype == MP_F32 || x->dtype == MP_F16 || x->dtype == MP_BF16)
        return mp_errf(e, "%s: %s: %s is not a finite number (input '%s' needs finite values)",
                       d->file[i], where, v, x->name);
    return mp_errf(e, "%s: %s: label %s is outside [0, %lld) of input '%s'", d->file[i], where, v,
                   (long long)x->classes, x->name);
}

#define MP_SCAN_CHUNK ((int64_t)64 << 20)     /* bytes between progress redraws */

/* Streams once through every file of the set: labels in range, floats
 * finite. A progress line on standard error when it is a terminal. */
static inline int mp_data_scan(const MpDataSet *d, const MpModel *m, MpErr *e)
{
    int tty = isatty(2), drawn = 0, rc = 0;
    for (int i = 0; i < d->n && !rc; i++) {
        const MpArray *a = &d->arr[i];
        int64_t el = mp_dtype_size(m->inputs[i].dtype), n = a->nbytes / el, step = MP_SCAN_CHUNK / el;
        if (a->map)
            posix_madvise(a->map, a->map_len, POSIX_MADV_SEQUENTIAL);
        for (int64_t at = 0; at < n && !rc; at += step) {
            int64_t bad = mp_first_bad(&m->inputs[i], (const char *)a->data + at * el,
                                       n - at < step ? n - at : step);
            if (bad >= 0)
                rc = mp_bad_value(d, m, i, at + bad, e);
            else if (tty && n > step) {
                fprintf(stderr, "\r\033[Kchecking %s: %.0f%%", d->file[i],
                        100.0 * (double)(at + step < n ? at + step : n) / (double)n);
                drawn = 1;
            }
        }
        if (a->map)
            posix_madvise(a->map, a->map_len, POSIX_MADV_RANDOM);
    }
    if (drawn)
        fprintf(stderr, "\r\033[K");
    return rc;
}

/* Copies the rows of keys[0..B-1] of every input into its batch buffer
 * (zeros for an input the set lacks: MP_DATA_SOME). */
static inline void mp_fill_batch(MpModel *m, const MpDataSet *d, const int64_t *keys)
{
    for (int i = 0; i < m->ninputs; i++) {
        int64_t sb = mp_sample_bytes(&m->inputs[i]);
        char *dst = (char *)m->inputs[i].batch;
        if (!d->file[i]) {
            memset(dst, 0, (size_t)(m->batch * sb));
            continue;
        }
        for (int64_t b = 0; b < m->batch; b++)
            memcpy(dst + b * sb, mp_data_row(m, d, i, keys[b]), (size_t)sb);
    }
}

/* ---- batch order ------------------------------------------------------ */

typedef struct MpOrder {
    MpRng rng;                  /* the data stream, after this epoch's shuffle */
    MpRng start;                /* the data stream before this epoch's shuffle */
    int shuffle;
    int64_t samples, batch, batches;
    int64_t epoch, pos;         /* pos: batches used in this epoch (windows:
                                   the next window without shuffling) */
    int64_t offsets, stride;    /* windows: N - W + 1 offsets, W - 1; else 0 */
    int64_t *perm;              /* windows: the keys of the last batch */
} MpOrder;

static inline void mp_order_shuffle(MpOrder *o)
{
    o->start = o->rng;
    if (o->offsets)
        return;
    for (int64_t i = 0; i < o->samples; i++)
        o->perm[i] = i;
    if (!o->shuffle)
        return;
    for (int64_t i = o->samples - 1; i > 0; i--) {
        int64_t j = (int64_t)mp_rng_below(&o->rng, (uint64_t)i + 1), t = o->perm[i];
        o->perm[i] = o->perm[j];
        o->perm[j] = t;
    }
}

static inline int mp_order_init(MpOrder *o, const MpDataSet *d, int64_t batch,
                                int shuffle, uint64_t seed, MpErr *e)
{
    memset(o, 0, sizeof *o);
    o->shuffle = shuffle;
    o->samples = d->samples;
    o->batch = batch;
    o->batches = d->window ? d->samples : d->batches;
    if (d->window) {
        o->offsets = d->stream - d->window + 1;
        o->stride = d->window - 1;
    }
    int64_t n = d->window ? batch : d->samples;
    o->perm = (int64_t *)malloc((size_t)(n + 1) * sizeof *o->perm);
    if (!o->perm)
        return mp_errf(e, "out of memory for the data order of %lld samples", (long long)d->samples);
    mp_rng_seed(&o->rng, seed, 0);
    mp_order_shuffle(o);
    return 0;
}

/* Continue from a checkpoint's (start state, epoch, position). */
static inline void mp_order_restore(MpOrder *o, const MpRng *start, int64_t epoch, int64_t pos)
{
    o->rng = *start;
    mp_order_shuffle(o);
    o->epoch = epoch;
    o->pos = pos;
}

/* The keys of the next batch of window rows (see the top). */
static inline const int64_t *mp_order_windows(MpOrder *o)
{
    for (int64_t b = 0; b < o->batch; b++) {
        if (o->shuffle) {
            o->perm[b] = (int64_t)mp_rng_below(&o->rng, (uint64_t)o->offsets);
            continue;
        }
        if (o->pos >= o->samples) {
            o->epoch++;
            o->pos = 0;
        }
        o->perm[b] = o->stride * o->pos++;
    }
    o->start = o->rng;
    return o->perm;
}

/* The keys (mp_fill_batch) of the next batch. */
static inline const int64_t *mp_order_next(MpOrder *o)
{
    if (o->offsets)
        return mp_order_windows(o);
    if (o->pos >= o->batches) {
        o->epoch++;
        o->pos = 0;
        mp_order_shuffle(o);
    }
    return o->perm + o->batch * o->pos++;
}

#endif
