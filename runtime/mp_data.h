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
 * before this epoch's shuffle, epoch, batches used in this epoch). */
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
    if (p->init == MP_INIT_GLOROT_UNIFORM && p->fan_in + p->fan_out > 0)
        lim = sqrt(6.0 / (double)(p->fan_in + p->fan_out));
    else if (p->init == MP_INIT_HE_NORMAL && p->fan_in > 0)
        lim = sqrt(2.0 / (double)p->fan_in);
    else if (p->init == MP_INIT_GLOROT_UNIFORM || p->init == MP_INIT_HE_NORMAL)
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
        case MP_INIT_HE_NORMAL: v = lim * mp_rng_normal(&r); break;
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

/* Bytes of one sample of input x. */
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
} MpDataSet;

static inline void mp_data_free(MpDataSet *d)
{
    for (int i = 0; d->arr && i < d->n; i++)
        mp_array_free(&d->arr[i]);
    free(d->arr);
    free((void *)d->file);
    memset(d, 0, sizeof *d);
}

/* Type and per-sample shape of one loaded file against its input. */
static inline int mp_check_array(const MpInput *x, const MpArray *a, const char *file, MpErr *e)
{
    char want[160], got[160];
    if (a->dtype != x->dtype)
        return mp_errf(e, "%s: input '%s' needs %s values, the file holds %s",
                       file, x->name, mp_data_type_str(x->dtype), mp_data_type_str(a->dtype));
    int same = a->rank == x->rank;
    for (int d = 1; same && d < x->rank; d++)
        same = a->shape[d] == x->shape[d];
    if (same && a->rank >= 1)
        return 0;
    mp_shape_str(want, sizeof want, x->rank - 1, x->shape + 1);
    mp_shape_str(got, sizeof got, a->rank, a->shape);
    return mp_errf(e, "%s: input '%s' needs an array of shape Nx%s (N samples), "
                   "the file's shape is %s", file, x->name, want, got);
}

/* Class labels of input x must lie in [0, classes). */
static inline int mp_check_labels(const MpInput *x, const MpArray *a, const char *file, MpErr *e)
{
    if (x->classes <= 0 || x->dtype != MP_I32)
        return 0;
    const int32_t *v = (const int32_t *)a->data;
    int64_t n = a->nbytes / 4, per = mp_sample_bytes(x) / 4;
    for (int64_t i = 0; i < n; i++)
        if (v[i] < 0 || v[i] >= x->classes)
            return mp_errf(e, "%s: sample %lld: label %ld is outside [0, %lld) of input '%s'",
                           file, (long long)(i / per), (long)v[i], (long long)x->classes, x->name);
    return 0;
}

static inline int mp_find_input(const MpModel *m, const char *name, size_t len)
{
    for (int i = 0; i < m->ninputs; i++)
        if (strlen(m->inputs[i].name) == len && !strncmp(m->inputs[i].name, name, len))
            return i;
    return -1;
}

/* Loads one NAME=FILE spec into d. */
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
    if (mp_npy_load(file, &d->arr[i], e))
        return 1;
    return mp_check_array(&m->inputs[i], &d->arr[i], file, e)
        || mp_check_labels(&m->inputs[i], &d->arr[i], file, e);
}

/* What a set may lack: MP_DATA_PARTIAL (--eval, --predict) every sample
 * counts, so fewer than one batch is fine; MP_DATA_SOME (--predict) inputs
 * may be missing (their batch buffers hold zeros). */
enum { MP_DATA_PARTIAL = 1, MP_DATA_SOME = 2 };

/* Loads and checks a whole set: every input given once, same number of
 * samples, at least one batch. Refuses with a message naming the file. */
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
    for (int k = 0; k < nspecs; k++)
        if (mp_data_add(d, m, specs[k], e))
            return 1;
    for (int i = 0, first = -1; i < m->ninputs; i++) {
        if (!d->file[i] && (flags & MP_DATA_SOME))
            continue;
        if (!d->file[i])
            return mp_errf(e, "no %s %s=FILE.npy: every input needs one", opt, m->inputs[i].name);
        int64_t n = d->arr[i].shape[0];
        if (first >= 0 && n != d->samples)
            return mp_errf(e, "%s: %lld samples, but %s has %lld: every %s file must have "
                           "the same number", d->file[i], (long long)n, d->file[first],
                           (long long)d->samples, opt);
        first = first < 0 ? i : first;
        d->samples = n;
    }
    d->batches = m->batch > 0 ? d->samples / m->batch : 0;
    if ((flags & MP_DATA_PARTIAL) && d->samples < 1)
        return mp_errf(e, "%s: no samples", d->file[0] ? d->file[0] : opt);
    if (d->batches < 1 && !(flags & MP_DATA_PARTIAL))
        return mp_errf(e, "%s: %lld samples, fewer than one batch of %lld",
                       d->file[0], (long long)d->samples, (long long)m->batch);
    return 0;
}

/* Copies the samples idx[0..B-1] of every input into its batch buffer
 * (zeros for an input the set lacks: MP_DATA_SOME). */
static inline void mp_fill_batch(MpModel *m, const MpDataSet *d, const int64_t *idx)
{
    for (int i = 0; i < m->ninputs; i++) {
        int64_t sb = mp_sample_bytes(&m->inputs[i]);
        char *dst = (char *)m->inputs[i].batch;
        const char *src = (const char *)d->arr[i].data;
        if (!d->file[i]) {
            memset(dst, 0, (size_t)(m->batch * sb));
            continue;
        }
        for (int64_t b = 0; b < m->batch; b++)
            memcpy(dst + b * sb, src + idx[b] * sb, (size_t)sb);
    }
}

/* ---- batch order ------------------------------------------------------ */

typedef struct MpOrder {
    MpRng rng;                  /* the data stream, after this epoch's shuffle */
    MpRng start;                /* the data stream before this epoch's shuffle */
    int shuffle;
    int64_t samples, batch, batches;
    int64_t epoch, pos;         /* pos: batches used in this epoch */
    int64_t *perm;
} MpOrder;

static inline void mp_order_shuffle(MpOrder *o)
{
    o->start = o->rng;
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
    o->batches = d->batches;
    o->perm = (int64_t *)malloc((size_t)d->samples * sizeof *o->perm);
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

/* The sample indices of the next batch. */
static inline const int64_t *mp_order_next(MpOrder *o)
{
    if (o->pos >= o->batches) {
        o->epoch++;
        o->pos = 0;
        mp_order_shuffle(o);
    }
    return o->perm + o->batch * o->pos++;
}

#endif
