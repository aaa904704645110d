/* mp_ckpt.h - the state of a training run and its checkpoints.
 *
 * A checkpoint is one safetensors file, written atomically by mp_st_save
 * (temporary file in the same folder, then rename):
 *   <param name>                    every MpParam (batch-norm running
 *                                   statistics included), F32, its shape
 *   optimizer.<slot>.<param name>   for each trainable parameter; slots:
 *                                   momentum_buffer (SGD with momentum),
 *                                   exp_avg and exp_avg_sq (Adam, AdamW),
 *                                   square_avg, momentum_buffer (momentum
 *                                   > 0), grad_avg (centered) (RMSprop)
 *   fp8.amax_history, fp8.scale_exp  mixed_float8's scales (mp_fp8.h): the
 *                                   amax history [history, slots] and each
 *                                   slot's exponent [slots] (F32; integers)
 * and string metadata (numbers in decimal, %.17g for reals):
 *   format "mpcc-checkpoint-1", model, policy, source, mpcc_version,
 *   optimizer (sgd|adam|adamw|rmsprop), step, optimizer_updates (Adam's t), seed,
 *   loss_scale, good_steps, skipped_steps, floor_skips (consecutive skipped
 *   steps at the lowest scale), data_rng (the data stream's xoshiro256**
 *   state before this epoch's shuffle: 4 x 16 hex digits), data_epoch,
 *   data_position (batches used in that epoch), data_samples,
 *   bn_batches_tracked (training forwards so far; absent in older files:
 *   step x accumulate), ranks (the processes of a data-parallel run,
 *   mp_dist.h; absent for one process). --resume refuses to train on with
 *   another count (the data order of a step depends on it); --steps 0
 *   (evaluate, export, predict) takes a checkpoint of any count.
 * Loading checks every name, type and shape and refuses a mismatch, a
 * non-finite value, an unexpected tensor or an unreadable number by name.
 * --init reads only the parameters, converting F16, BF16 and F64 to f32
 * (optimizer.* ignored, a PyTorch *.num_batches_tracked taken as the
 * count); --init-partial takes what matches by name and shape and lists
 * the rest. */
#ifndef MP_CKPT_H
#define MP_CKPT_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mp_model.h"
#include "mp_half.h"
#include "mp_fp8.h"
#include "mp_util.h"
#include "mp_safetensors.h"
#include "mp_optim.h"
#include "mp_data.h"
#include "mp_dist.h"

typedef struct MpTrainer {
    MpModel *m;
    MpTrainCfg cfg;             /* the train block after --lr / --seed */
    uint64_t seed;
    int64_t total;              /* floats in each flat buffer */
    int64_t *offset;            /* of each parameter in the flat buffers */
    float *params, *grads;      /* flat f32 buffers, same layout */
    int nslots;
    const char *slot_name[MP_OPT_SLOTS];
    float *slot[MP_OPT_SLOTS];  /* optimizer state, same layout */
    int64_t step;               /* optimizer steps done, skipped ones included */
    int64_t updates;            /* optimizer updates applied */
    MpScaler ls;
    int64_t floor_skips;        /* consecutive skipped steps at the lowest scale */
    MpDataSet data, eval;
    MpOrder order;
    int64_t *step_idx;          /* samples of this step's micro-batches */
    int64_t bn_batches;         /* training forwards so far: batch norm's
                                   num_batches_tracked (PyTorch's count) */
    double loss_total;          /* sum of the step losses of this run (host) */
    double *micro_loss;         /* the step's N x A micro-batch losses (mp_dist.h) */
    int64_t ckpt_ranks;         /* --resume: the processes of the run that wrote it */
    int grads_zero;             /* the optimizer pass left every gradient 0 */
    int work_fresh;             /* ... and wrote every working copy (mp_optim_pass) */
} MpTrainer;

static inline const char *mp_opt_name(int opt)
{
    return opt == MP_OPT_SGD ? "sgd" : opt == MP_OPT_ADAM ? "adam"
         : opt == MP_OPT_RMSPROP ? "rmsprop" : "adamw";
}

/* ---- writing ------------------------------------------------------------ */

enum { MP_CKPT_NMETA = 22 };

static inline int mp_ckpt_meta(const MpTrainer *t, const char **k, const char **v,
                               char (*buf)[72])
{
    const MpModel *m = t->m;
    int n = 0;
#define MP_META_S(key, val) (k[n] = key, v[n] = val, n++)
#define MP_META_F(key, ...) (snprintf(buf[n], 72, __VA_ARGS__), MP_META_S(key, buf[n]))
    MP_META_S("format", "mpcc-checkpoint-1");
    MP_META_S("model", m->name);
    MP_META_S("policy", m->policy ? m->policy : "");
    MP_META_S("source", m->source ? m->source : "");
    MP_META_S("mpcc_version", m->mpcc_version ? m->mpcc_version : "");
    MP_META_S("optimizer", mp_opt_name(t->cfg.opt));
    MP_META_F("step", "%" PRId64, t->step);
    MP_META_F("optimizer_updates", "%" PRId64, t->updates);
    MP_META_F("seed", "%" PRIu64, t->seed);
    MP_META_F("loss_scale", "%.17g", t->ls.scale);
    MP_META_F("good_steps", "%" PRId64, t->ls.good);
    MP_META_F("skipped_steps", "%" PRId64, t->ls.skipped);
    MP_META_F("floor_skips", "%" PRId64, t->floor_skips);
    MP_META_F("data_rng", "%016" PRIx64 "%016" PRIx64 "%016" PRIx64 "%016" PRIx64,
              t->order.start.s[0], t->order.start.s[1], t->order.start.s[2], t->order.start.s[3]);
    MP_META_F("data_epoch", "%" PRId64, t->order.epoch);
    MP_META_F("data_position", "%" PRId64, t->order.pos);
    MP_META_F("data_samples", "%" PRId64, t->order.samples);
    MP_META_F("bn_batches_tracked", "%" PRId64, t->bn_batches);
    if (mp_dist.size > 1)
        MP_META_F("ranks", "%d", mp_dist.size);
    if (m->fp8)
        MP_META_F("fp8_steps", "%" PRId64, m->fp8->steps);
#undef MP_META_F
#undef MP_META_S
    return n;
}

static inline void mp_tensor_of(MpTensor *x, const MpParam *p, const char *name, const float *data)
{
    memset(x, 0, sizeof *x);
    x->name = name;
    x->dtype = MP_F32;
    x->rank = p->rank;
    memcpy(x->shape, p->shape, sizeof x->shape);
    x->data = data;
}

/* mixed_float8's two tensors, as parameters of their shapes: the history
 * [history, slots] (k 0) and the exponents [slots] (k 1), in f32 */
static inline MpParam mp_fp8_tensor(const MpFp8 *f, int k)
{
    MpParam p;
    memset(&p, 0, sizeof p);
    p.name = k ? "fp8.scale_exp" : "fp8.amax_history";
    p.rank = k ? 1 : 2;
    p.shape[0] = k ? f->nslots : f->history;
    p.shape[1] = f->nslots;
    p.numel = k ? f->nslots : (int64_t)f->history * f->nslots;
    return p;
}

static inline int mp_ckpt_save(const MpTrainer *t, const char *path, MpErr *e)
{
    const MpModel *m = t->m;
    int cap = m->nparams * (1 + t->nslots) + 2, n = 0, rc = 1;
    MpParam fp8p[2];
    float *exps = NULL;
    MpTensor *ts = (MpTensor *)calloc((size_t)cap + 1, sizeof *ts);
    char **names = (char **)calloc((size_t)cap + 1, sizeof *names);
    const char *keys[MP_CKPT_NMETA], *vals[MP_CKPT_NMETA];
    char buf[MP_CKPT_NMETA][72];
    if (!ts || !names) {
        mp_errf(e, "%s: out of memory writing the checkpoint", path);
        goto out;
    }
    for (int i = 0; i < m->nparams; i++)
        mp_tensor_of(&ts[n++], &m->params[i], m->params[i].name, t->params + t->offset[i]);
    for (int s = 0; s < t->nslots; s++)
        for (int i = 0; i < m->nparams; i++) {
            if (!m->params[i].trainable)
                continue;
            size_t len = strlen(m->params[i].name) + strlen(t->slot_name[s]) + 12;
            if (!(names[n] = (char *)malloc(len))) {
                mp_errf(e, "%s: out of memory writing the checkpoint", path);
                goto out;
            }
            snprintf(names[n], len, "optimizer.%s.%s", t->slot_name[s], m->params[i].name);
            mp_tensor_of(&ts[n], &m->params[i], names[n], t->slot[s] + t->offset[i]);
            n++;
        }
    if (m->fp8) {
        if (!(exps = (float *)malloc(sizeof *exps * (size_t)m->fp8->nslots + 1))) {
            mp_errf(e, "%s: out of memory writing the checkpoint", path);
            goto out;
        }
        for (int s = 0; s < m->fp8->nslots; s++)
            exps[s] = (float)m->fp8->exp[s];
        fp8p[0] = mp_fp8_tensor(m->fp8, 0);
        fp8p[1] = mp_fp8_tensor(m->fp8, 1);
        mp_tensor_of(&ts[n], &fp8p[0], fp8p[0].name, m->fp8->hist);
        n++;
        mp_tensor_of(&ts[n], &fp8p[1], fp8p[1].name, exps);
        n++;
    }
    rc = mp_st_save(path, ts, n, keys, vals, mp_ckpt_meta(t, keys, vals, buf), e);
out:
    for (int i = 0; i < cap; i++)
        free(names ? names[i] : NULL);
    free(names);
    free(ts);
    free(exps);
    return rc;
}

/* ---- reading -------------------------------------------------------------- */

static inline const char *mp_st_dtype_str(int t)
{
    return t >= MP_F32 && t <= MP_I64 ? mp_st_dtype_names_[t] : "?";
}

/* A loaded tensor must hold finite values only (TRAINER.md, Non-finite values). */
static inline int mp_ckpt_finite(const char *file, const char *name, const float *v, int64_t n,
                                 MpErr *e)
{
    int64_t j = mp_first_nonfinite(v, n);
    return j < 0 ? 0 : mp_errf(e, "%s: tensor '%s' holds %s at element %lld: refusing a "
                               "non-finite value", file, name, mp_nonfinite_name(v[j]), (long long)j);
}

/* Float tensor data of type dt as f32 (data need not be aligned). */
static inline void mp_to_f32(float *dst, const void *data, int dt, int64_t n)
{
    const unsigned char *p = (const unsigned char *)data;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        double d;
        if (dt == MP_F64) {
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
        } else if (dt == MP_F16 || dt == MP_BF16) {
            memcpy(&h, p + 2 * i, 2);
            dst[i] = dt == MP_F16 ? mp_f16_to_f32(h) : mp_bf16_to_f32(h);
        } else {
            memcpy(dst + i, p + 4 * i, 4);
        }
    }
}

/* Copies tensor `name` of f into dst after checking type and shape; with
 * any_float (--init), F16, BF16 and F64 are converted. */
static inline int mp_ckpt_take(const MpStFile *f, const char *file, const char *name,
                               const MpParam *p, float *dst, int any_float, MpErr *e)
{
    const MpTensor *x = mp_st_find(f, name);
    char want[160], got[160];
    int dt = x ? x->dtype : 0;
    if (!x)
        return mp_errf(e, "%s: no tensor '%s' (the model has it)", file, name);
    if (dt != MP_F32 && !(any_float && (dt == MP_F16 || dt == MP_BF16 || dt == MP_F64)))
        return mp_errf(e, "%s: tensor '%s' is %s, expected F32%s", file, name,
                       mp_st_dtype_str(x->dtype), any_float ? " (or F16, BF16, F64)" : "");
    int same = x->rank == p->rank;
    for (int d = 0; same && d < p->rank; d++)
        same = x->shape[d] == p->shape[d];
    if (!same) {
        mp_shape_str(want, sizeof want, p->rank, p->shape);
        mp_shape_str(got, sizeof got, x->rank, x->shape);
        return mp_errf(e, "%s: tensor '%s' has shape %s, the model's is %s", file, name, got, want);
    }
    mp_to_f32(dst, x->data, dt, p->numel);
    return mp_ckpt_finite(file, name, dst, p->numel, e);
}

static inline int mp_ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

/* Is `name` a tensor this model's checkpoint has (slots: with_slots)? */
static inline int mp_ckpt_known(const MpTrainer *t, const char *name, int with_slots)
{
    const MpModel *m = t->m;
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(name, m->params[i].name))
            return 1;
    if (!with_slots)
        return !strncmp(name, "optimizer.", 10) || !strncmp(name, "fp8.", 4) ||
               mp_ends_with(name, ".num_batches_tracked");
    if (!strcmp(name, "fp8.amax_history") || !strcmp(name, "fp8.scale_exp"))
        return 1;               /* mixed_float8's scales; another policy leaves them unread */
    for (int s = 0; s < t->nslots; s++) {
        size_t l = strlen(t->slot_name[s]);
        if (!strncmp(name, "optimizer.", 10) && !strncmp(name + 10, t->slot_name[s], l)
            && name[10 + l] == '.')
            for (int i = 0; i < m->nparams; i++)
                if (m->params[i].trainable && !strcmp(name + 11 + l, m->params[i].name))
                    return 1;
    }
    return 0;
}

static inline int mp_ckpt_unexpected(const MpTrainer *t, const MpStFile *f,
                                     const char *file, int with_slots, MpErr *e)
{
    for (int i = 0; i < f->n; i++) {
        const char *name = f->tensors[i].name;
        if (!mp_ckpt_known(t, name, with_slots))
            return mp_errf(e, "%s: tensor '%s' is not part of model '%s'", file, name, t->m->name);
    }
    return 0;
}

/* A PyTorch num_batches_tracked (I64 scalar) in f: the batch-norm count. */
static inline void mp_ckpt_bn_count(MpTrainer *t, const MpStFile *f)
{
    for (int i = 0; i < f->n; i++)
        if (f->tensors[i].dtype == MP_I64 && mp_numel(f->tensors[i].rank, f->tensors[i].shape) == 1
            && mp_ends_with(f->tensors[i].name, ".num_batches_tracked")) {
            memcpy(&t->bn_batches, f->tensors[i].data, 8);
            return;
        }
}

/* --init-partial: each parameter whose name and shape match; the others
 * keep their initialiser (already run) and are listed on stderr. */
static inline int mp_ckpt_init_partial(MpTrainer *t, const MpStFile *f, const char *file, MpErr *e)
{
    const MpModel *m = t->m;
    int taken = 0, left = 0;
    for (int i = 0; i < m->nparams; i++) {
        MpErr skip;
        if (!mp_ckpt_take(f, file, m->params[i].name, &m->params[i], t->params + t->offset[i], 1, &skip)) {
            taken++;
            continue;
        }
        fprintf(stderr, "%s%s", left++ ? ", " : "--init-partial: left at their initialisers: ",
                m->params[i].name);
    }
    if (left)
        fprintf(stderr, "\n");
    if (!taken)
        return mp_errf(e, "%s: --init-partial: no tensor matches a parameter of model '%s' by "
                       "name and shape", file, m->name);
    return 0;
}

/* --init: every parameter by name (partial: those that match); nothing
 * else is restored. */
static inline int mp_ckpt_init(MpTrainer *t, const char *file, int partial, MpErr *e)
{
    MpStFile f;
    const MpModel *m = t->m;
    if (mp_st_load(file, &f, e))
        return 1;
    int rc = partial ? mp_ckpt_init_partial(t, &f, file, e) : mp_ckpt_unexpected(t, &f, file, 0, e);
    for (int i = 0; !rc && !partial && i < m->nparams; i++)
        rc = mp_ckpt_take(&f, file, m->params[i].name, &m->params[i], t->params + t->offset[i], 1, e);
    if (!rc)
        mp_ckpt_bn_count(t, &f);
    mp_st_close(&f);
    return rc;
}

static inline int mp_meta_str(const MpStFile *f, const char *file, const char *key,
                              const char **out, MpErr *e)
{
    if (!(*out = mp_st_meta(f, key)))
        return mp_errf(e, "%s: no metadata '%s': not a checkpoint of an mpcc trainer", file, key);
    return 0;
}

static inline int mp_meta_i64(const MpStFile *f, const char *file, const char *key,
                              int64_t *out, MpErr *e)
{
    const char *s;
    char *end;
    if (mp_meta_str(f, file, key, &s, e))
        return 1;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || v < 0)
        return mp_errf(e, "%s: metadata '%s' = '%s' is not a count", file, key, s);
    *out = (int64_t)v;
    return 0;
}

static inline int mp_meta_rng(const MpStFile *f, const char *file, MpRng *r, MpErr *e)
{
    const char *s;
    if (mp_meta_str(f, file, "data_rng", &s, e))
        return 1;
    for (int i = 0; i < 4; i++) {
        char part[17], *end;
        if (strlen(s) != 64)
            break;
        memcpy(part, s + 16 * i, 16);
        part[16] = 0;
        r->s[i] = (uint64_t)strtoull(part, &end, 16);
        if (*end)
            break;
        if (i == 3)
            return 0;
    }
    return mp_errf(e, "%s: metadata 'data_rng' = '%s' is not 64 hex digits", file, s);
}

/* A data-parallel checkpoint continues training exactly only on as many
 * processes (evaluating, exporting or predicting from it works on any). */
static inline int mp_ckpt_ranks_ok(const MpTrainer *t, const char *file, MpErr *e)
{
    if (t->ckpt_ranks == mp_dist.size)
        return 0;
    return mp_errf(e, "%s: written by a run on %lld process%s, this run has %d: resume it with "
                   "mpirun -np %lld (the data order of a step depends on the count)", file,
                   (long long)t->ckpt_ranks, t->ckpt_ranks == 1 ? "" : "es", mp_dist.size,
                   (long long)t->ckpt_ranks);
}

/* The counters and the data order. */
static inline int mp_ckpt_counters(MpTrainer *t, const MpStFile *f, const char *file, MpErr *e)
{
    const char *s, *model, *opt;
    int64_t seed = 0, epoch = 0, pos = 0, samples = 0;
    t->ckpt_ranks = 1;
    MpRng rng = {{0, 0, 0, 0}};
    char *end;
    if (mp_meta_str(f, file, "model", &model, e) || mp_meta_str(f, file, "optimizer", &opt, e))
        return 1;
    if (strcmp(model, t->m->name))
        return mp_errf(e, "%s: a checkpoint of model '%s', this program trains '%s'",
                       file, model, t->m->name);
    if (strcmp(opt, mp_opt_name(t->cfg.opt)))
        return mp_errf(e, "%s: written by optimizer %s, this program uses %s",
                       file, opt, mp_opt_name(t->cfg.opt));
    if (mp_meta_i64(f, file, "step", &t->step, e)
        || mp_meta_i64(f, file, "optimizer_updates", &t->updates, e)
        || mp_meta_i64(f, file, "seed", &seed, e)
        || mp_meta_i64(f, file, "good_steps", &t->ls.good, e)
        || mp_meta_i64(f, file, "skipped_steps", &t->ls.skipped, e)
        || mp_meta_i64(f, file, "floor_skips", &t->floor_skips, e)
        || mp_meta_i64(f, file, "data_epoch", &epoch, e)
        || mp_meta_i64(f, file, "data_position", &pos, e)
        || mp_meta_i64(f, file, "data_samples", &samples, e)
        || mp_meta_rng(f, file, &rng, e) || mp_meta_str(f, file, "loss_scale", &s, e)
        || (mp_st_meta(f, "ranks") && mp_meta_i64(f, file, "ranks", &t->ckpt_ranks, e)))
        return 1;
    t->ls.scale = strtod(s, &end);
    if (end == s || *end || !(t->ls.scale >= 1))
        return mp_errf(e, "%s: metadata 'loss_scale' = '%s' is not a scale >= 1", file, s);
    /* The scale belongs to the policy: a checkpoint of another policy (or a
     * static scale) keeps this program's own. */
    const char *policy = mp_st_meta(f, "policy");
    if (t->ls.kind != MP_LS_DYNAMIC || !policy || strcmp(policy, t->m->policy)) {
        t->ls.scale = t->ls.kind == MP_LS_NONE ? 1 : t->cfg.ls_init;
        t->ls.good = 0;
    }
    t->seed = (uint64_t)seed;
    t->bn_batches = t->step * t->cfg.accumulate;
    if (mp_st_meta(f, "bn_batches_tracked")
        && mp_meta_i64(f, file, "bn_batches_tracked", &t->bn_batches, e))
        return 1;
    mp_order_restore(&t->order, &rng, epoch, samples == t->order.samples ? pos : t->order.batches);
    return 0;
}

/* mixed_float8's scales from f: the history, the exponents (integers in
 * [-MP_FP8_EMAX, MP_FP8_EMAX]) and the steps recorded. A checkpoint of
 * another policy has none: the scales start afresh, as in a new run. */
static inline int mp_ckpt_fp8(MpFp8 *f8, const MpStFile *f, const char *file, MpErr *e)
{
    MpParam h = mp_fp8_tensor(f8, 0), x = mp_fp8_tensor(f8, 1);
    const char *policy = mp_st_meta(f, "policy");
    if (!mp_st_find(f, h.name) && !mp_st_find(f, x.name) && (!policy || strcmp(policy, "mixed_float8")))
        return 0;
    float *exps = (float *)malloc(sizeof *exps * (size_t)f8->nslots + 1);
    int rc = !exps ? mp_errf(e, "%s: out of memory reading the checkpoint", file)
           : mp_ckpt_take(f, file, h.name, &h, f8->hist, 0, e) ||
             mp_ckpt_take(f, file, x.name, &x, exps, 0, e) ||
             mp_meta_i64(f, file, "fp8_steps", &f8->steps, e);
    for (int s = 0; !rc && s < f8->nslots; s++) {
        if (exps[s] != (float)(int)exps[s] || exps[s] > MP_FP8_EMAX || exps[s] < -MP_FP8_EMAX)
            rc = mp_errf(e, "%s: tensor '%s' element %d is %g, expected an integer in [%d, %d]",
                         file, x.name, s, exps[s], -MP_FP8_EMAX, MP_FP8_EMAX);
        else
            f8->exp[s] = (int)exps[s];
    }
    if (!rc && f8->steps < 0)
        rc = mp_errf(e, "%s: metadata 'fp8_steps' = %lld is negative", file, (long long)f8->steps);
    free(exps);
    return rc;
}

/* --resume: parameters, optimizer state, counters, data order. */
static inline int mp_ckpt_resume(MpTrainer *t, const char *file, MpErr *e)
{
    MpStFile f;
    const MpModel *m = t->m;
    char name[512];
    if (mp_st_load(file, &f, e))
        return 1;
    int rc = mp_ckpt_counters(t, &f, file, e) || mp_ckpt_unexpected(t, &f, file, 1, e);
    for (int i = 0; !rc && i < m->nparams; i++) {
        const MpParam *p = &m->params[i];
        rc = mp_ckpt_take(&f, file, p->name, p, t->params + t->offset[i], 0, e);
        for (int s = 0; !rc && p->trainable && s < t->nslots; s++) {
            snprintf(name, sizeof name, "optimizer.%s.%s", t->slot_name[s], p->name);
            rc = mp_ckpt_take(&f, file, name, p, t->slot[s] + t->offset[i], 0, e);
        }
    }
    if (!rc && m->fp8)
        rc = mp_ckpt_fp8(m->fp8, &f, file, e);
    mp_st_close(&f);
    return rc;
}

#endif
