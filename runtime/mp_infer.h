/* mp_infer.h - the model in inference mode: evaluation over every sample,
 * --predict, and --export of the weights for PyTorch.
 *
 * Batches of the model are fixed (B rows). A set of N samples is run as
 * ceil(N / B) batches in file order; the last one, when partial, is padded
 * with copies of its last real sample and MpRun.rows says how many rows
 * are real: the loss and metric kernels average over those only (the model
 * code passes mp_real_rows() to them), batch norm runs on its running
 * statistics and no other op mixes rows, so padding changes nothing.
 * randn / rand draw in inference too (a VAE samples): batch j of a set as
 * micro-batch -1 - j of the trainer's step, a stream apart from training's,
 * so a checkpoint evaluates and predicts with the same values every time.
 * Evaluation weights each batch's means by its real rows: the results are
 * means over the N samples.
 *
 * --predict copies one named value (MpModel.values) out of each forward
 * pass as it is made (MpRun.keep: memplan may reuse its memory later in
 * the pass) and writes the real rows of every batch, in file order, as one
 * .npy: f32 for float values, i32 / u8 as they are.
 *
 * --export writes the state_dict of the same network in PyTorch: every
 * parameter and buffer (F32) and, for each batch norm (a parameter named
 * X.running_mean), X.num_batches_tracked as an I64 scalar: the number of
 * training forwards so far (MpTrainer.bn_batches).
 *
 * Files are written by mp_npy_save / mp_st_save (temporary file, rename). */
#ifndef MP_INFER_H
#define MP_INFER_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mp_model.h"
#include "mp_util.h"
#include "mp_exec.h"
#include "mp_npy.h"
#include "mp_safetensors.h"
#include "mp_data.h"
#include "mp_ckpt.h"
#include "mp_dist.h"

/* Batch j of set d (rows first .. first + real - 1, real <= B) into the
 * batch buffers, padded with the last real sample; run set up for it. */
static inline void mp_infer_batch(MpTrainer *t, const MpDataSet *d, int64_t j, int64_t *idx,
                                  MpRun *run)
{
    MpModel *m = t->m;
    int64_t first = j * m->batch, real = d->samples - first < m->batch ? d->samples - first : m->batch;
    for (int64_t i = 0; i < m->batch; i++)
        idx[i] = mp_data_key(d, first + (i < real ? i : real - 1));
    mp_fill_batch(m, d, idx);
    memset(run, 0, sizeof *run);
    run->seed = t->seed;
    run->step = t->step;
    run->micro = -1 - j;   /* randn / rand: batch j's own draw, apart from training's */
    run->rows = real;
}

static inline int64_t mp_infer_batches(const MpTrainer *t, const MpDataSet *d)
{
    return (d->samples + t->m->batch - 1) / t->m->batch;
}

/* Data parallel (mp_dist.h): the batch-norm running statistics (the
 * parameters that are not trained) are each rank's own; rank 0's, the ones
 * its checkpoints hold, to every rank before they evaluate together. The
 * CUDA program keeps them on the device: each rank evaluates with its own. */
static inline void mp_share_buffers(MpTrainer *t)
{
    for (int i = 0; mp_dist.size > 1 && !t->m->device && i < t->m->nparams; i++)
        if (!t->m->params[i].trainable)
            mp_dist_bcast(t->params + t->offset[i], t->m->params[i].numel * (int64_t)sizeof(float));
}

/* Mean loss and metrics over every sample of the --eval set. Batch b runs
 * on rank b % N; its loss and metrics, weighted by its real rows, go into
 * row b of sums (zeros elsewhere), summed over ranks (x + 0 is exact) and
 * then in batch order: the same numbers as one process. */
static inline int mp_evaluate(MpTrainer *t, double *loss, double *metric, MpErr *e)
{
    MpModel *m = t->m;
    int64_t nb = mp_infer_batches(t, &t->eval), w = 1 + m->nmetrics;
    float *mv = (float *)calloc((size_t)m->nmetrics + 1, sizeof(float));
    int64_t *idx = (int64_t *)malloc((size_t)m->batch * sizeof(int64_t));
    double *sums = (double *)calloc((size_t)(nb * w) + 1, sizeof(double));
    if (!mv || !idx || !sums) {
        free(mv);
        free(idx);
        free(sums);
        return mp_errf(e, "out of memory for evaluation");
    }
    mp_share_buffers(t);
    m->cast_params();
    for (int64_t b = mp_dist.rank; b < nb; b += mp_dist.size) {
        MpRun run;
        mp_infer_batch(t, &t->eval, b, idx, &run);
        run.metrics = mv;
        m->forward(&run);
        sums[b * w] = (double)run.loss * (double)run.rows;
        for (int j = 0; j < m->nmetrics; j++)
            sums[b * w + 1 + j] = (double)mv[j] * (double)run.rows;
    }
    mp_dist_sum_f64(sums, nb * w);
    *loss = 0;
    for (int j = 0; j < m->nmetrics; j++)
        metric[j] = 0;
    for (int64_t b = 0; b < nb; b++) {
        *loss += sums[b * w];
        for (int j = 0; j < m->nmetrics; j++)
            metric[j] += sums[b * w + 1 + j];
    }
    *loss /= (double)t->eval.samples;
    for (int j = 0; j < m->nmetrics; j++)
        metric[j] /= (double)t->eval.samples;
    free(mv);
    free(idx);
    free(sums);
    return 0;
}

/* ---- --predict ----------------------------------------------------------- */

/* The names --output can take (the values with one row per sample), joined
 * by ", " into buf; "none" when there are none. */
static inline const char *mp_output_names(const MpModel *m, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < m->nvalues; i++) {
        const MpValue *x = &m->values[i];
        if (x->rank >= 1 && x->shape[0] == m->batch && len < size)
            len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? ", " : "", x->name);
    }
    return len ? buf : "none";
}

/* --predict without --output where the model has no default: the loss is
 * a formula of several operations (TRAINER.md). A usage error. */
static inline int mp_no_default_output(const MpModel *m, MpErr *e)
{
    char names[1024];
    return mp_errf(e, "--predict needs --output VALUE: the loss is not one loss operation, so there "
                   "is no default (--output can take: %s)", mp_output_names(m, names, sizeof names));
}

/* The value --output names (NULL: the model's default), checked for use. */
static inline int mp_predict_value(const MpModel *m, const MpDataSet *d, const char *name, MpErr *e)
{
    int v = -1;
    char list[512] = "";
    for (int i = 0; i < m->nvalues; i++) {
        if (name && !strcmp(name, m->values[i].name))
            v = i;
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", m->values[i].name);
    }
    if (!name && (v = m->output) < 0)
        return mp_no_default_output(m, e), -1;
    if (v < 0)
        return mp_errf(e, "--output %s: model '%s' has no value of that name (values: %s)",
                       name, m->name, list), -1;
    const MpValue *x = &m->values[v];
    char shape[160];
    if (x->rank < 1 || x->shape[0] != m->batch)
        return mp_errf(e, "--output %s: its shape is %s, not one row per sample (batch %lld)",
                       x->name, mp_shape_str(shape, sizeof shape, x->rank, x->shape),
                       (long long)m->batch), -1;
    for (int i = 0; i < m->ninputs; i++)
        if ((x->inputs >> (i < 63 ? i : 63) & 1) && !d->file[i])
            return mp_errf(e, "--predict: value '%s' depends on input '%s': give --predict %s=FILE.npy",
                           x->name, m->inputs[i].name, m->inputs[i].name), -1;
    return v;
}

/* The real rows of one batch's copy of value x, appended to out. */
static inline void mp_predict_rows(const MpValue *x, const void *kept, int64_t rows, int64_t per,
                                   MpArray *out, int64_t at)
{
    int64_t n = rows * per;
    if (out->dtype == MP_F32) {
        float *o = (float *)out->data + at * per;
        for (int64_t i = 0; i < n; i++)
            o[i] = mp_load_scalar((const char *)kept + i * mp_dtype_size(x->dtype), x->dtype);
    } else if (out->dtype == x->dtype) {
        memcpy((char *)out->data + at * per * mp_dtype_size(x->dtype), kept,
               (size_t)(n * mp_dtype_size(x->dtype)));
    } else {                                    /* u16 ids: as i32 */
        int32_t *o = (int32_t *)out->data + at * per;
        for (int64_t i = 0; i < n; i++)
            o[i] = (int32_t)mp_load_scalar((const char *)kept + 2 * i, x->dtype);
    }
}

/* Runs the model over every sample of d and writes value `name` to path. */
static inline int mp_predict(MpTrainer *t, const MpDataSet *d, const char *name, const char *path,
                             MpErr *e)
{
    MpModel *m = t->m;
    int v = mp_predict_value(m, d, name, e);
    if (v < 0)
        return 1;
    const MpValue *x = &m->values[v];
    int64_t per = mp_numel(x->rank - 1, x->shape + 1);
    MpArray out;
    memset(&out, 0, sizeof out);
    out.dtype = x->dtype == MP_F16 || x->dtype == MP_BF16 ? MP_F32 : x->dtype == MP_U16 ? MP_I32 : x->dtype;
    out.rank = x->rank;
    memcpy(out.shape, x->shape, sizeof out.shape);
    out.shape[0] = d->samples;
    out.nbytes = d->samples * per * mp_dtype_size(out.dtype);
    out.data = malloc((size_t)out.nbytes + 1);
    void *kept = malloc((size_t)(m->batch * per * mp_dtype_size(x->dtype)) + 1);
    int64_t *idx = (int64_t *)malloc((size_t)m->batch * sizeof(int64_t));
    float *mv = (float *)calloc((size_t)m->nmetrics + 1, sizeof(float));
    int rc = !out.data || !kept || !idx || !mv ? mp_errf(e, "%s: out of memory for the predictions", path) : 0;
    if (!rc)
        m->cast_params();
    for (int64_t b = 0; !rc && b < mp_infer_batches(t, d); b++) {
        MpRun run;
        mp_infer_batch(t, d, b, idx, &run);
        run.metrics = mv;
        run.keep = v + 1;
        run.kept = kept;
        m->forward(&run);
        if (!run.kept_done)
            rc = mp_errf(e, "--output %s: the forward pass did not compute it", x->name);
        else
            mp_predict_rows(x, kept, run.rows, per, &out, b * m->batch);
    }
    rc = rc || mp_npy_save(path, &out, e);
    free(out.data);
    free(kept);
    free(idx);
    free(mv);
    return rc;
}

/* ---- --export -------------------------------------------------------------- */

/* The state_dict: parameters, buffers, num_batches_tracked per batch norm. */
static inline int mp_export(const MpTrainer *t, const char *path, MpErr *e)
{
    const MpModel *m = t->m;
    int cap = 2 * m->nparams, n = 0, rc = 1;
    MpTensor *ts = (MpTensor *)calloc((size_t)cap + 1, sizeof *ts);
    char **names = (char **)calloc((size_t)cap + 1, sizeof *names);
    int64_t count = t->bn_batches;
    if (!ts || !names) {
        mp_errf(e, "%s: out of memory writing the export", path);
        goto out;
    }
    for (int i = 0; i < m->nparams; i++) {
        const char *p = m->params[i].name;
        mp_tensor_of(&ts[n++], &m->params[i], p, t->params + t->offset[i]);
        if (!mp_ends_with(p, ".running_mean"))
            continue;
        size_t len = strlen(p) - strlen(".running_mean");
        if (!(names[n] = (char *)malloc(len + 32))) {
            mp_errf(e, "%s: out of memory writing the export", path);
            goto out;
        }
        snprintf(names[n], len + 32, "%.*s.num_batches_tracked", (int)len, p);
        memset(&ts[n], 0, sizeof ts[n]);
        ts[n].name = names[n];
        ts[n].dtype = MP_I64;
        ts[n].rank = 0;
        ts[n].data = &count;
        n++;
    }
    {
        const char *key = "format", *val = "pt";   /* as safetensors.torch writes it */
        rc = mp_st_save(path, ts, n, &key, &val, 1, e);
    }
out:
    for (int i = 0; names && i < cap; i++)
        free(names[i]);
    free(names);
    free(ts);
    return rc;
}

#endif
