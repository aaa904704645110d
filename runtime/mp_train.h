/* mp_train.h - mp_main: the generated trainer's command line, training
 * loop, evaluation, logs and exit codes (TRAINER.md is the contract).
 *
 * One optimizer step k (1-based):
 *   grads = 0; cast_params() (both skipped when the previous step's
 *   optimizer pass did them); for each of `accumulate` micro-batches: fill
 *   the batch buffers, forward (training, seed_grad = S / accumulate),
 *   backward (adds S-scaled gradients); loss = mean of the micro losses.
 *   Then one read of the flat gradient buffer sums the squares of g * 1/S
 *   (mp_optim.h); a non-finite sum skips the step (loss scale state
 *   machine), otherwise lr = mp_sched_lr(k) and one pass over the flat
 *   buffers, split across threads in fixed chunks (mp_optim_pass), takes
 *   each gradient * 1/S * clipping's factor, updates the f32 value, writes
 *   its lowp working copy (MpParam.work) and zeroes the gradient.
 *   Skipped steps count as steps (they use data and a step number).
 * A run that keeps skipping at the lowest scale (S = 1, or a static scale)
 * for MP_COLLAPSE_STEPS steps in a row stops: the step is replayed with
 * run.check = 1 to name the first operation that produced a non-finite
 * value. --check-numerics runs every training forward with check on.
 *
 * Logging: step k is logged when k % log_every == 0 and at the last step;
 * `loss_scale` is the scale step k used, `skipped` the run's total,
 * `grad_norm` the unscaled global norm before clipping (null when not
 * finite), `samples_per_s` over the steps since the previous log line.
 * The JSONL file is truncated by a fresh run and appended to by --resume.
 * Evaluation (every --eval-every steps and once at the end) and --save-every
 * checkpoints run after a step; the last step's are done once, after the
 * loop. Non-finite numbers are written as JSON null.
 * The data order and every parameter's init follow mp_data.h; the
 * optimizer, schedule and loss scale mp_optim.h; checkpoints mp_ckpt.h.
 * --gradcheck (for mpcc's own tests) runs mp_gradcheck.h instead of
 * training. Buffers the model captures in setup() (parameter values,
 * gradients, input batches) are allocated before it and never move.
 *
 * With a device (MpModel.device: the CUDA program), mp_step hands each
 * step, its loss scaling and its optimizer update to the device, which
 * reports back only when a log line or redraw is due (mp_log_due);
 * checkpoints pull the device's state first (mp_save). --gradcheck and
 * --check-numerics keep the host as the owner of the parameters.
 *
 * Production runs (TRAINER.md "Additions for production runs"): every
 * output path is checked before anything else (the tables mp_file_inputs /
 * mp_file_outputs, mp_out.h's rules); mp_guard.h has SIGINT / SIGTERM
 * (mp_stop ends the loop after a step, with a checkpoint), the non-finite
 * loss and parameter checks, the schedule warning and --dry-run.
 *
 * Data parallel (mp_dist.h, `mpirun -np N` of the -DMP_USE_MPI build): a
 * step is N x accumulate micro-batches, this rank's those of index rank,
 * rank + N, ...; mp_reduce_step sums the gradients (and gathers the micro
 * losses) before the unscale pass; the stop flag is agreed before each
 * step (mp_stop_agreed); rank 0 alone checks and writes outputs and prints
 * log lines; an error is printed as "rank R: ..." and ends every rank.
 *
 * Exit status: 0 done, 1 run-time error (one line on stderr), 2 usage,
 * 130 / 143 stopped by SIGINT / SIGTERM (after saving). */
#ifndef MP_TRAIN_H
#define MP_TRAIN_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "mp_model.h"
#include "mp_util.h"
#include "mp_dist.h"
#include "mp_kernels.h"
#include "mp_optim.h"
#include "mp_data.h"
#include "mp_ckpt.h"
#include "mp_infer.h"
#include "mp_tboard.h"
#include "mp_gradcheck.h"
#include "mp_guard.h"

#define MP_COLLAPSE_STEPS 100

/* ---- command line ------------------------------------------------------ */

typedef struct MpList { char **v; int n; } MpList;

typedef struct MpOpts {
    MpList data, eval;
    int64_t no_shuffle, check_numerics, gradcheck, help, dry_run;
    int64_t steps, eval_every, log_every, save_every, seed;   /* -1: not given */
    double lr;                                                /* -1: not given */
    const char *init, *save, *resume, *log;
    MpList predict;
    int64_t init_partial;
    const char *out, *output, *export_, *tensorboard;
} MpOpts;

enum { MP_O_FLAG, MP_O_COUNT, MP_O_POS, MP_O_REAL, MP_O_STR, MP_O_LIST };

typedef struct MpOptDef {
    const char *name;
    int kind;                   /* MP_O_*; COUNT >= 0, POS >= 1 */
    size_t off;
    const char *arg, *help;
} MpOptDef;

#define MP_OPT(n, k, f, a, h) { n, k, offsetof(MpOpts, f), a, h }
static const MpOptDef mp_optdefs[] = {
    MP_OPT("--data", MP_O_LIST, data, "NAME=FILE.npy", "training data for input NAME (one per input)"),
    MP_OPT("--no-shuffle", MP_O_FLAG, no_shuffle, "", "batches in file order, wrapping around"),
    MP_OPT("--eval", MP_O_LIST, eval, "NAME=FILE.npy", "evaluation data for input NAME (every sample)"),
    MP_OPT("--steps", MP_O_COUNT, steps, "N", "train until optimizer step N (default: the train "
           "block's, %s); 0: no training"),
    MP_OPT("--eval-every", MP_O_POS, eval_every, "N", "evaluate every N steps (default: only at the end)"),
    MP_OPT("--log-every", MP_O_POS, log_every, "N", "log every N steps (default: 100)"),
    MP_OPT("--lr", MP_O_REAL, lr, "X", "base learning rate (default: the train block's, %s)"),
    MP_OPT("--seed", MP_O_COUNT, seed, "N", "random seed (default: the train block's, %s)"),
    MP_OPT("--init", MP_O_STR, init, "FILE", "start from these parameters (safetensors, by name; "
           "F32, F16, BF16, F64)"),
    MP_OPT("--init-partial", MP_O_FLAG, init_partial, "", "with --init: take what matches by name "
           "and shape, list the rest"),
    MP_OPT("--save", MP_O_STR, save, "FILE", "write a checkpoint at the end (safetensors)"),
    MP_OPT("--save-every", MP_O_POS, save_every, "N", "also write it every N steps (default: only "
           "at the end)"),
    MP_OPT("--resume", MP_O_STR, resume, "FILE", "continue exactly where that checkpoint stopped"),
    MP_OPT("--export", MP_O_STR, export_, "FILE", "write the weights for PyTorch's load_state_dict "
           "at the end (safetensors)"),
    MP_OPT("--predict", MP_O_LIST, predict, "NAME=FILE.npy", "run the model on these inputs "
           "(with --init or --resume; no training)"),
    MP_OPT("--out", MP_O_STR, out, "FILE.npy", "--predict's output: one row per sample"),
    MP_OPT("--output", MP_O_STR, output, "VALUE", "the value --predict writes (default: %s)"),
    MP_OPT("--log", MP_O_STR, log, "FILE.jsonl", "one JSON object per logged step"),
    MP_OPT("--dry-run", MP_O_FLAG, dry_run, "", "check data, checkpoints and outputs, print the "
           "memory the run needs, do not train"),
    MP_OPT("--tensorboard", MP_O_STR, tensorboard, "DIR", "also write TensorBoard event files there "
           "(created if missing)"),
    MP_OPT("--check-numerics", MP_O_FLAG, check_numerics, "", "stop at the first inf/NaN of a forward pass"),
    MP_OPT("--gradcheck", MP_O_FLAG, gradcheck, "", "check the backward pass against finite "
           "differences (mpcc's tests; no data needed)"),
    MP_OPT("--help", MP_O_FLAG, help, "", "this text"),
};
#undef MP_OPT
#define MP_NOPTS ((int)(sizeof mp_optdefs / sizeof mp_optdefs[0]))

/* One input as the model declares it: "image  u8[64, 784]  (64 per batch)". */
static inline void mp_usage_input(FILE *f, const MpInput *x)
{
    fprintf(f, "  %-14s %s[", x->name, mp_dtype_name(x->dtype));
    for (int d = 0; d < x->rank; d++)
        fprintf(f, "%s%lld", d ? ", " : "", (long long)x->shape[d]);
    fprintf(f, "]");
    if (x->classes > 0)
        fprintf(f, "  class labels in [0, %lld)", (long long)x->classes);
    fprintf(f, "\n");
}

static inline void mp_usage(FILE *f, const char *prog, const MpModel *m)
{
    char dflt[3][64];
    const char *out = m->output >= 0 && m->output < m->nvalues ? m->values[m->output].name
                    : "none: the loss is not one loss operation";
    char names[1024];
    snprintf(dflt[0], sizeof dflt[0], "%lld", (long long)m->cfg.steps);
    snprintf(dflt[1], sizeof dflt[1], "%g", m->cfg.lr);
    snprintf(dflt[2], sizeof dflt[2], "%lld", (long long)m->cfg.seed);
    fprintf(f, "usage: %s --data NAME=FILE.npy ... [options]\n"
            "       %s --init FILE --predict NAME=FILE.npy ... --out FILE.npy [--output VALUE]\n"
            "trains model '%s' (%s, from %s); batch %lld\ninputs (the first axis is the batch; a "
            "file's first axis holds the samples):\n", prog, prog, m->name, m->policy, m->source,
            (long long)m->batch);
    for (int i = 0; i < m->ninputs; i++)
        mp_usage_input(f, &m->inputs[i]);
    fprintf(f, "options:\n");
    for (int i = 0; i < MP_NOPTS; i++) {
        const char *h = mp_optdefs[i].help, *pct = strstr(h, "%s");
        const char *d = !strcmp(mp_optdefs[i].name, "--steps") ? dflt[0]
            : !strcmp(mp_optdefs[i].name, "--lr") ? dflt[1]
            : !strcmp(mp_optdefs[i].name, "--seed") ? dflt[2] : out;
        fprintf(f, "  %-16s %-14s %.*s%s%s\n", mp_optdefs[i].name, mp_optdefs[i].arg,
                pct ? (int)(pct - h) : (int)strlen(h), h, pct ? d : "", pct ? pct + 2 : "");
    }
    fprintf(f, "--output can take (the values with one row per sample): %s\n",
            mp_output_names(m, names, sizeof names));
}

static inline int mp_opt_value(const MpOptDef *d, MpOpts *o, const char *v, MpErr *e)
{
    char *end, *field = (char *)o + d->off;
    if (d->kind == MP_O_STR) {
        *(const char **)field = v;
        return 0;
    }
    if (d->kind == MP_O_LIST) {
        MpList *l = (MpList *)field;
        l->v[l->n++] = (char *)v;
        return 0;
    }
    if (d->kind == MP_O_REAL) {
        double x = strtod(v, &end);
        if (end == v || *end || !(x > 0) || !isfinite(x))
            return mp_errf(e, "%s: expected a positive number, got '%s'", d->name, v);
        *(double *)field = x;
        return 0;
    }
    long long n = strtoll(v, &end, 10);
    if (end == v || *end || n < (d->kind == MP_O_POS ? 1 : 0))
        return mp_errf(e, "%s: expected an integer >= %d, got '%s'", d->name,
                       d->kind == MP_O_POS ? 1 : 0, v);
    *(int64_t *)field = (int64_t)n;
    return 0;
}

/* Fills o from argv; returns 0, or 2 with e set. */
static inline int mp_parse_args(int argc, char **argv, MpOpts *o, MpErr *e)
{
    memset(o, 0, sizeof *o);
    o->steps = o->eval_every = o->log_every = o->save_every = o->seed = -1;
    o->lr = -1;
    o->data.v = (char **)calloc((size_t)argc + 1, sizeof(char *));
    o->eval.v = (char **)calloc((size_t)argc + 1, sizeof(char *));
    o->predict.v = (char **)calloc((size_t)argc + 1, sizeof(char *));
    if (!o->data.v || !o->eval.v || !o->predict.v)
        return mp_errf(e, "out of memory"), 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        size_t len = eq && !strncmp(a, "--", 2) ? (size_t)(eq - a) : strlen(a);
        const MpOptDef *d = NULL;
        for (int k = 0; k < MP_NOPTS && !d; k++)
            if (strlen(mp_optdefs[k].name) == len && !strncmp(a, mp_optdefs[k].name, len))
                d = &mp_optdefs[k];
        if (!d)
            return mp_errf(e, "unknown option '%s' (see --help)", a), 2;
        if (d->kind == MP_O_FLAG) {
            if (a[len])
                return mp_errf(e, "%s takes no value", d->name), 2;
            *(int64_t *)((char *)o + d->off) = 1;
            continue;
        }
        const char *v = a[len] ? a + len + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!v)
            return mp_errf(e, "%s needs a value: %s %s", d->name, d->name, d->arg), 2;
        if (mp_opt_value(d, o, v, e))
            return 2;
    }
    if (o->help || o->gradcheck)
        return 0;
    if (o->predict.n && (!o->out || !(o->init || o->resume)))
        return mp_errf(e, "--predict needs --out FILE.npy and the weights: --init or --resume"), 2;
    if ((o->out || o->output) && !o->predict.n)
        return mp_errf(e, "%s needs --predict NAME=FILE.npy", o->out ? "--out" : "--output"), 2;
    if (o->predict.n && (o->data.n || o->steps > 0 || o->save))
        return mp_errf(e, "--predict does not train: drop --data, --steps and --save"), 2;
    if (o->init_partial && !o->init)
        return mp_errf(e, "--init-partial needs --init FILE"), 2;
    if (o->data.n == 0 && o->steps != 0 && !o->predict.n)
        return mp_errf(e, "no training data: give --data NAME=FILE.npy for every input "
                       "(or --steps 0 to only evaluate or export)"), 2;
    if (o->data.n == 0 && o->save)
        return mp_errf(e, "--save needs --data: a checkpoint records the data order"), 2;
    if (o->eval_every > 0 && !o->eval.n)
        return mp_errf(e, "--eval-every needs --eval NAME=FILE.npy"), 2;
    if (o->save_every > 0 && !o->save)
        return mp_errf(e, "--save-every needs --save FILE"), 2;
    if (o->resume && o->init)
        return mp_errf(e, "--resume and --init exclude each other"), 2;
    if (o->resume && o->seed >= 0)
        return mp_errf(e, "--resume continues with the checkpoint's seed; drop --seed"), 2;
    return 0;
}

/* ---- set-up --------------------------------------------------------------- */

static inline int mp_alloc_f32(float **p, int64_t n, MpErr *e)
{
    *p = (float *)calloc((size_t)n + 1, sizeof(float));
    return *p ? 0 : mp_errf(e, "out of memory for %lld floats", (long long)n);
}

/* Flat buffers (each parameter 64-byte aligned inside them), batches. */
static inline int mp_alloc(MpTrainer *t, MpErr *e)
{
    MpModel *m = t->m;
    t->offset = (int64_t *)calloc((size_t)m->nparams + 1, sizeof *t->offset);
    if (!t->offset)
        return mp_errf(e, "out of memory");
    for (int i = 0; i < m->nparams; i++) {
        t->offset[i] = t->total;
        t->total += (m->params[i].numel + 15) / 16 * 16;
    }
    t->nslots = mp_optim_slots(&t->cfg, t->slot_name);
    if (mp_alloc_f32(&t->params, t->total, e) || mp_alloc_f32(&t->grads, t->total, e))
        return 1;
    for (int s = 0; s < t->nslots; s++)
        if (mp_alloc_f32(&t->slot[s], t->total, e))
            return 1;
    for (int i = 0; i < m->nparams; i++) {
        m->params[i].value = t->params + t->offset[i];
        m->params[i].grad = m->params[i].trainable ? t->grads + t->offset[i] : NULL;
    }
    for (int i = 0; i < m->ninputs; i++)
        if (!(m->inputs[i].batch = calloc((size_t)(m->batch * mp_sample_bytes(&m->inputs[i])) + 1, 1)))
            return mp_errf(e, "out of memory for the batch of input '%s'", m->inputs[i].name);
    int64_t acc = (t->cfg.accumulate > 0 ? t->cfg.accumulate : 1) * mp_dist.size;
    t->step_idx = (int64_t *)calloc((size_t)(acc * m->batch) + 1, sizeof(int64_t));
    t->micro_loss = (double *)calloc((size_t)acc + 1, sizeof(double));
    return t->step_idx && t->micro_loss ? 0 : mp_errf(e, "out of memory");
}

static inline void mp_free(MpTrainer *t)
{
    for (int i = 0; i < t->m->ninputs; i++) {
        free(t->m->inputs[i].batch);
        t->m->inputs[i].batch = NULL;
    }
    for (int i = 0; i < t->m->nparams; i++)
        t->m->params[i].value = t->m->params[i].grad = NULL;
    free(t->offset);
    free(t->params);
    free(t->grads);
    for (int s = 0; s < MP_OPT_SLOTS; s++)
        free(t->slot[s]);
    free(t->step_idx);
    free(t->micro_loss);
    free(t->order.perm);
    mp_data_free(&t->data);
    mp_data_free(&t->eval);
}

static inline void mp_configure(MpTrainer *t, const MpOpts *o)
{
    t->cfg = t->m->cfg;
    if (o->lr > 0)
        t->cfg.lr = o->lr;
    t->seed = (uint64_t)(o->seed >= 0 ? o->seed : t->m->cfg.seed);
    if (t->cfg.accumulate < 1)
        t->cfg.accumulate = 1;
    mp_scaler_init(&t->ls, &t->cfg);
}

/* --gradcheck: initialised parameters and batch buffers, no data. */
static inline int mp_gradcheck_run(MpTrainer *t, const MpOpts *o, MpErr *e)
{
    mp_gemm_exact = 1;             /* no TF32 products (float32_matmul) here */
    mp_configure(t, o);
    if (mp_alloc(t, e) || mp_init_params(t->m, t->seed, e))
        return 1;
    if (t->m->setup && t->m->setup())
        return mp_errf(e, "model '%s': set-up failed (out of memory?)", t->m->name);
    if (t->m->device && t->m->device->start(t, 1, e))
        return 1;
    return mp_gradcheck(t->m, t->seed) ? mp_errf(e, "gradcheck failed") : 0;
}

/* Data, parameters (init / --init / --resume), model set-up. */
static inline int mp_prepare(MpTrainer *t, const MpOpts *o, MpErr *e)
{
    MpModel *m = t->m;
    mp_configure(t, o);
    /* without --data (--steps 0, --predict) there is no data order */
    if ((o->data.n && (mp_data_load(&t->data, m, "--data", o->data.v, o->data.n, 0, e)
                       || mp_data_scan(&t->data, m, e)))
        || (o->eval.n && (mp_data_load(&t->eval, m, "--eval", o->eval.v, o->eval.n, MP_DATA_PARTIAL, e)
                          || mp_data_scan(&t->eval, m, e)))
        || mp_alloc(t, e)
        || (o->data.n && mp_order_init(&t->order, &t->data, m->batch, !o->no_shuffle, t->seed, e)))
        return 1;
    if (o->init_partial && mp_init_params(m, t->seed, e))
        return 1;
    if (o->resume ? mp_ckpt_resume(t, o->resume, e)
        : o->init ? mp_ckpt_init(t, o->init, (int)o->init_partial, e) : mp_init_params(m, t->seed, e))
        return 1;
    if (m->setup && m->setup())
        return mp_errf(e, "model '%s': set-up failed (out of memory?)", m->name);
    if (!o->dry_run && m->device && m->device->start(t, (int)o->check_numerics, e))
        return 1;
    return 0;
}

/* ---- one optimizer step ---------------------------------------------------- */

typedef struct MpStepOut {
    float loss;
    double grad_norm, lr, scale;
    int taken;
    int known;                  /* the fields above are filled (a device fills
                                   them only when asked: MpDevice.step) */
    double loss_total;          /* the sum of this run's step losses so far */
} MpStepOut;

static inline int mp_numerics_error(int64_t k, const MpRun *r, const char *why, MpErr *e)
{
    return mp_errf(e, "step %lld: %s: operation '%s' at %s produced a non-finite value",
                   (long long)k, why, r->bad_op ? r->bad_op : "?",
                   r->bad_where ? r->bad_where : "?");
}

/* Forward + backward of this rank's micro-batches of step k (mp_dist.h:
 * u = rank, rank + N, ... of the step's N x A), from t->step_idx when
 * replay is set, else from the data order; each one's loss into
 * t->micro_loss[u] (the other slots 0). Returns 1 when check stopped at a
 * non-finite value (*run says where). */
static inline int mp_micro_batches(MpTrainer *t, int64_t k, float scale, int check,
                                   int replay, MpRun *run)
{
    MpModel *m = t->m;
    int64_t acc = t->cfg.accumulate * mp_dist.size;
    memset(t->micro_loss, 0, (size_t)acc * sizeof(double));
    if (!t->grads_zero)
        memset(t->grads, 0, (size_t)t->total * sizeof(float));
    if (!t->work_fresh)
        m->cast_params();
    t->grads_zero = t->work_fresh = 0;
    for (int64_t u = 0; u < acc; u++) {
        int64_t *idx = t->step_idx + u * m->batch;
        if (!replay)
            memcpy(idx, mp_order_next(&t->order), (size_t)m->batch * sizeof *idx);
        if (u % mp_dist.size != mp_dist.rank)
            continue;
        mp_fill_batch(m, &t->data, idx);
        memset(run, 0, sizeof *run);
        run->training = 1;
        run->seed_grad = (float)(scale / (double)acc);
        run->seed = t->seed;
        run->step = k;
        run->micro = u;
        run->check = check;
        if (m->forward(run) && check)
            return 1;
        t->micro_loss[u] = run->loss;
        run->check = replay;
        if (m->backward(run) && replay)
            return 1;
    }
    return 0;
}

/* Every rank's gradients summed into each rank's, and the step's loss: the
 * mean of its micro-batch losses, added in micro-batch order (the same
 * number as one process's). */
static inline double mp_reduce_step(MpTrainer *t)
{
    int64_t acc = t->cfg.accumulate * mp_dist.size;
    double loss = 0;
    mp_dist_sum_f64(t->micro_loss, acc);
    mp_dist_sum_f32(t->grads, t->total);
    for (int64_t u = 0; u < acc; u++)
        loss += t->micro_loss[u];
    return loss / (double)acc;
}

/* The collapse stop: which gradients, then a replay with checks. */
static inline int mp_collapse(MpTrainer *t, int64_t k, MpErr *e)
{
    MpModel *m = t->m;
    char names[200] = "";
    size_t len = 0;
    for (int i = 0, shown = 0; i < m->nparams; i++) {
        const MpParam *p = &m->params[i];
        if (!p->trainable || isfinite(mp_unscale_sumsq(p->grad, p->numel, 1.0f)))
            continue;
        if (shown++ < 6 && len < sizeof names)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", shown > 1 ? ", " : "", p->name);
    }
    MpRun run;
    int found = mp_micro_batches(t, k, (float)t->ls.scale, 1, 1, &run);
    return mp_errf(e, "step %lld: %d steps in a row skipped at loss scale %g: the gradients of "
                   "%s are not finite; %s '%s' at %s", (long long)k, MP_COLLAPSE_STEPS,
                   t->ls.scale, names[0] ? names : "(none)",
                   found ? "the first non-finite value comes from" : "replaying the step found no "
                   "non-finite value; last checked", found ? run.bad_op : "-",
                   found ? run.bad_where : "-");
}

/* ---- the optimizer pass ------------------------------------------------------ */

/* The flat buffers are updated in chunks of this many elements: a fixed
 * split, so that which thread takes which chunk changes nothing (every
 * element's update is its own). Below MP_OPT_PAR_MIN elements in all, one
 * thread does it: a parallel region costs more than such an update. */
#define MP_OPT_CHUNK 8192
#define MP_OPT_PAR_MIN (1 << 15)

/* 1 when every parameter's working copy is registered (MpParam.work_dt),
 * so that the optimizer pass can write them all. */
static inline int mp_work_known(const MpModel *m)
{
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].work_dt != MP_F32 && m->params[i].work_dt != MP_F16
            && m->params[i].work_dt != MP_BF16)
            return 0;
    return 1;
}

/* Elements [lo, hi) of the flat buffers: the update of each trainable
 * parameter's part of them (mp_optim_span: unscale, clip, update), the
 * new value's working copy, and the gradients zeroed for the next step. */
static inline void mp_optim_chunk(MpTrainer *t, const MpOptK *k, int64_t lo, int64_t hi,
                                  float inv, float coef)
{
    const MpModel *m = t->m;
    int a = 0, b = m->nparams;           /* a: the first parameter ending after lo */
    while (a < b) {
        int mid = (a + b) / 2;
        if (t->offset[mid] + m->params[mid].numel <= lo)
            a = mid + 1;
        else
            b = mid;
    }
    for (int i = a; i < m->nparams && t->offset[i] < hi; i++) {
        const MpParam *q = &m->params[i];
        int64_t s = lo > t->offset[i] ? lo : t->offset[i];
        int64_t end = mp_min64(hi, t->offset[i] + q->numel);
        if (s >= end)
            continue;
        int half = q->work_dt == MP_F16 || q->work_dt == MP_BF16;
        int64_t tile = half ? MP_OPT_TILE : end - s;
        MpOptK kq = q->no_decay ? mp_optk_no_decay(*k) : *k;
        /* with a working copy a tile at a time, written while it is in cache */
        for (int64_t c = s; c < end; c += tile) {
            int64_t n = mp_min64(end - c, tile);
            float *sc[MP_OPT_SLOTS];
            for (int j = 0; j < MP_OPT_SLOTS; j++)
                sc[j] = t->slot[j] ? t->slot[j] + c : NULL;
            if (q->trainable)
                mp_optim_span(&kq, t->params + c, t->grads + c, sc, n, inv, coef);
            if (half)
                mp_st_n(q->work, q->work_dt, c - t->offset[i], 1, n, t->params + c);
        }
    }
    memset(t->grads + lo, 0, (size_t)(hi - lo) * sizeof(float));
}

/* The step's update of every parameter in one pass over the flat buffers
 * (gradients still scaled by 1/inv; coef: clipping's factor, 1 for none),
 * in one parallel region. Leaves the gradients 0 and, when the model
 * registered them, the working copies written: the next step skips both. */
static inline void mp_optim_pass(MpTrainer *t, const MpOptK *k, float inv, float coef)
{
    int64_t nchunks = (t->total + MP_OPT_CHUNK - 1) / MP_OPT_CHUNK;
    MP_OMP(parallel for schedule(static) if (t->total > MP_OPT_PAR_MIN))
    for (int64_t c = 0; c < nchunks; c++)
        mp_optim_chunk(t, k, c * MP_OPT_CHUNK, mp_min64(t->total, (c + 1) * MP_OPT_CHUNK), inv, coef);
    t->grads_zero = 1;
    t->work_fresh = mp_work_known(t->m);
}

/* The sum of squares of the unscaled gradients (g * inv) of the flat
 * buffer, in double, in a fixed order whatever the number of threads:
 * each chunk of MP_OPT_CHUNK elements summed on its own (MP_SUMSQ_W
 * interleaved partial sums, so that the compiler makes them one vector
 * of doubles: 17.4 -> 12.2 ms for GPT-2 small's 124M gradients on 2
 * threads; four were bound by the adds' latency), the chunks' sums added in
 * chunk order. Finite exactly when every gradient is (as mp_unscale_sumsq). */
#define MP_SUMSQ_W 8
static inline double mp_grad_sumsq(const MpTrainer *t, float inv)
{
    int64_t nchunks = (t->total + MP_OPT_CHUNK - 1) / MP_OPT_CHUNK;
    double *part = (double *)mp_kalloc((size_t)nchunks * sizeof(double)), s = 0;
    MP_OMP(parallel for schedule(static) if (t->total > MP_OPT_PAR_MIN))
    for (int64_t c = 0; c < nchunks; c++) {
        const float *g = t->grads + c * MP_OPT_CHUNK;
        int64_t n = mp_min64(t->total - c * MP_OPT_CHUNK, MP_OPT_CHUNK), i = 0;
        double a[MP_SUMSQ_W] = {0};
        for (; i + MP_SUMSQ_W <= n; i += MP_SUMSQ_W)
            for (int j = 0; j < MP_SUMSQ_W; j++) {
                float u = g[i + j] * inv;
                a[j] += (double)u * u;
            }
        for (; i < n; i++) {
            float u = g[i] * inv;
            a[0] += (double)u * u;
        }
        for (int w = MP_SUMSQ_W / 2; w > 0; w /= 2)   /* a[j] += a[j + w], halving */
            for (int j = 0; j < w; j++)
                a[j] += a[j + w];
        part[c] = a[0];
    }
    for (int64_t c = 0; c < nchunks; c++)
        s += part[c];
    free(part);
    return s;
}

/* need: *out is read after this step (a device step waits for it then). */
static inline int mp_step(MpTrainer *t, int64_t k, int check, int need, MpStepOut *out, MpErr *e)
{
    MpModel *m = t->m;
    MpRun run;
    double loss;
    if (m->device && !check)
        return m->device->step(t, k, need, out, e);
    out->known = 1;
    out->scale = t->ls.scale;
    out->lr = mp_sched_lr(&t->cfg, t->cfg.lr, k);
    if (mp_micro_batches(t, k, (float)out->scale, check, 0, &run))
        return mp_numerics_error(k, &run, "--check-numerics", e);
    loss = mp_reduce_step(t);
    out->loss = (float)loss;
    if (mp_loss_stop(t, k, k, out->loss, e))
        return 1;
    out->loss_total = t->loss_total += (double)out->loss;
    float inv = (float)(1.0 / out->scale);
    double ss = mp_grad_sumsq(t, inv);
    out->grad_norm = sqrt(ss);
    int at_floor = mp_scaler_at_floor(&t->ls) || m->fp8;   /* mixed_float8: no scale to lower */
    out->taken = mp_scaler_update(&t->ls, isfinite(ss));
    if (m->fp8) {           /* the scales from every rank's micro-batches */
        mp_dist_max_f32(m->fp8->amax, m->fp8->nslots);
        out->taken = mp_fp8_step_taken(m->fp8, out->taken, isfinite(ss), &t->ls.skipped);
    }
    t->step = k;
    if (!out->taken) {
        t->floor_skips = at_floor ? t->floor_skips + 1 : 0;
        return t->floor_skips >= MP_COLLAPSE_STEPS ? mp_collapse(t, k, e) : 0;
    }
    t->floor_skips = 0;
    t->updates++;
    MpOptK ok = mp_optim_k(&t->cfg, out->lr, t->updates);
    mp_optim_pass(t, &ok, inv, t->cfg.clip > 0 ? mp_clip_coef(out->grad_norm, t->cfg.clip) : 1.0f);
    return 0;
}

/* ---- logs and progress -------------------------------------------------------- */

/* Shortest decimal that reads back as the same f32; null when not finite. */
static inline void mp_fmt_f32(char *buf, size_t cap, double v)
{
    if (!isfinite(v)) {
        snprintf(buf, cap, "null");
        return;
    }
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, cap, "%.*g", p, v);
        if ((float)strtod(buf, NULL) == (float)v)
            return;
    }
}

static inline double mp_now(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct MpLog {
    FILE *jsonl;
    const char *path;
    int tty, drawn;             /* drawn: a progress line is on screen */
    int stopped;                /* the signal that stopped the run, or 0 */
    int64_t first, last_step, total;   /* steps: this run's first, last logged, target */
    double t0, last_time, last_draw;
    double last_total;          /* MpStepOut.loss_total at the last log line */
    double loss_avg;            /* of the last log line (NAN: none yet) */
    MpTb tb;                    /* --tensorboard */
    char eval[256];             /* the last evaluation, for the summary */
} MpLog;

static inline int mp_log_io(MpLog *l, MpErr *e)
{
    if (l->jsonl && (fflush(l->jsonl) || ferror(l->jsonl)))
        return mp_errf(e, "%s: write failed", l->path);
    return mp_tb_flush(&l->tb, e);
}

static inline void mp_fmt_eta(char *buf, size_t cap, double s)
{
    long v = (long)(s + 0.5);
    snprintf(buf, cap, "%ld:%02ld:%02ld", v / 3600, v / 60 % 60, v % 60);
}

/* The progress line (terminal only): step, loss, scale, speed, time left. */
static inline void mp_log_draw(MpLog *l, const MpTrainer *t, int64_t k, const MpStepOut *s, double now)
{
    char loss[32], eta[32];
    double rate = (now - l->t0) / (double)(k - l->first + 1);
    mp_fmt_f32(loss, sizeof loss, s->loss);
    mp_fmt_eta(eta, sizeof eta, rate * (double)(l->total - k));
    fprintf(stderr, "\r\033[Kstep %lld/%lld  loss %s  scale %g  %.0f samples/s  %s left",
            (long long)k, (long long)l->total, loss, s->scale,
            (now - l->t0) > 0 ? (double)((k - l->first + 1) * t->m->batch
                                         * t->cfg.accumulate * mp_dist.size) / (now - l->t0) : 0, eta);
    l->last_draw = now;
    l->drawn = 1;
}

/* The scalars of a log line, to TensorBoard. */
static inline void mp_log_tb(MpLog *l, const MpTrainer *t, int64_t k, const MpStepOut *s,
                             double sps, double now)
{
    static const char *const tags[] = {"train/loss", "train/loss_avg", "train/lr", "train/loss_scale",
                                       "train/grad_norm", "train/skipped", "train/samples_per_s"};
    double v[7] = {s->loss, l->loss_avg, s->lr, s->scale, s->grad_norm, (double)t->ls.skipped, sps};
    mp_tb_scalars(&l->tb, now, k, tags, v, 7);
}

/* A log line (stderr, --log, --tensorboard) when logged; on a terminal the
 * line is printed above the progress line, which is then redrawn. */
static inline int mp_log_step(MpLog *l, const MpTrainer *t, int64_t k, const MpStepOut *s,
                              int logged, MpErr *e)
{
    double now = mp_now(), dt = now - l->last_time;
    double sps = dt > 0 ? (double)((k - l->last_step) * t->m->batch * t->cfg.accumulate
                                   * mp_dist.size) / dt : 0;
    char loss[32], gn[32], avg[32], f8[48] = "", f8j[64] = "";
    if (!mp_dist_writer())
        return 0;
    if (t->m->fp8) {    /* mixed_float8: the range of the step's scales, 2^lo .. 2^hi */
        snprintf(f8, sizeof f8, " fp8_scale 2^%d..2^%d", t->m->fp8->lo, t->m->fp8->hi);
        snprintf(f8j, sizeof f8j, ",\"fp8_exp_min\":%d,\"fp8_exp_max\":%d", t->m->fp8->lo, t->m->fp8->hi);
    }
    if (logged) {
        l->loss_avg = (s->loss_total - l->last_total) / (double)(k - l->last_step);
        mp_fmt_f32(loss, sizeof loss, s->loss);
        mp_fmt_f32(gn, sizeof gn, s->grad_norm);
        mp_fmt_f32(avg, sizeof avg, l->loss_avg);
        fprintf(stderr, "%sstep %lld/%lld loss %s loss_avg %s loss_scale %.10g skipped %lld lr %.6g "
                "grad_norm %s samples/s %.0f%s\n", l->drawn ? "\r\033[K" : "", (long long)k,
                (long long)l->total, loss, avg, s->scale, (long long)t->ls.skipped, s->lr, gn, sps, f8);
        l->drawn = 0;
        if (l->jsonl)
            fprintf(l->jsonl, "{\"step\":%lld,\"loss\":%s,\"loss_avg\":%s,\"loss_scale\":%.17g,"
                    "\"skipped\":%lld,\"lr\":%.10g,\"grad_norm\":%s,\"samples_per_s\":%.0f%s}\n",
                    (long long)k, loss, avg, s->scale, (long long)t->ls.skipped, s->lr, gn, sps, f8j);
        mp_log_tb(l, t, k, s, sps, now);
        l->last_time = now;
        l->last_step = k;
        l->last_total = s->loss_total;
    }
    if (l->tty && s->known && (logged || now - l->last_draw > 0.1 || k == l->total))
        mp_log_draw(l, t, k, s, now);
    return logged ? mp_log_io(l, e) : 0;
}

static inline int mp_log_eval(MpLog *l, const MpTrainer *t, double loss, const double *metric,
                              MpErr *e)
{
    const MpModel *m = t->m;
    char v[32], tag[160];
    size_t at = 0;
    if (!mp_dist_writer())
        return 0;
    mp_fmt_f32(v, sizeof v, loss);
    fprintf(stderr, "%sstep %lld eval: loss %s", l->drawn ? "\r\033[K" : "", (long long)t->step, v);
    at += (size_t)snprintf(l->eval, sizeof l->eval, "eval loss %s", v);
    l->drawn = 0;
    if (l->jsonl)
        fprintf(l->jsonl, "{\"step\":%lld,\"eval\":{\"loss\":%s", (long long)t->step, v);
    const char *tags[1] = {"eval/loss"};
    mp_tb_scalars(&l->tb, mp_now(), t->step, tags, &loss, 1);
    for (int j = 0; j < m->nmetrics; j++) {
        mp_fmt_f32(v, sizeof v, metric[j]);
        fprintf(stderr, " %s %s", m->metric_names[j], v);
        if (at < sizeof l->eval)
            at += (size_t)snprintf(l->eval + at, sizeof l->eval - at, " %s %s", m->metric_names[j], v);
        if (l->jsonl)
            fprintf(l->jsonl, ",\"%s\":%s", m->metric_names[j], v);
        snprintf(tag, sizeof tag, "eval/%s", m->metric_names[j]);
        tags[0] = tag;
        mp_tb_scalars(&l->tb, mp_now(), t->step, tags, &metric[j], 1);
    }
    fprintf(stderr, "\n");
    if (l->jsonl)
        fprintf(l->jsonl, "}}\n");
    return mp_log_io(l, e);
}

/* Must step k's results be known when it returns: a log line, or a redraw
 * of the progress line? (Only then does a device step wait for the device.) */
static inline int mp_log_due(const MpLog *l, int logged)
{
    /* several ranks wait at the same steps (the CPU stand-in of the CUDA
     * program runs a rank's device work only when the host waits for it) */
    return logged || (mp_dist.size == 1 && l->tty && mp_now() - l->last_draw > 0.1);
}

/* The weights for PyTorch, brought back from the device first (rank 0). */
static inline int mp_save_export(MpTrainer *t, const char *path, MpErr *e)
{
    if (!mp_dist_writer())
        return 0;
    if (t->m->device && t->m->device->pull(t, e))
        return 1;
    return mp_params_finite(t, path, e) || mp_export(t, path, e);
}

/* A checkpoint of the trainer's buffers, brought back from the device first
 * (rank 0). */
static inline int mp_save(MpTrainer *t, const char *path, MpErr *e)
{
    if (!mp_dist_writer())
        return 0;
    if (t->m->device && t->m->device->pull(t, e))
        return 1;
    return mp_params_finite(t, path, e) || mp_ckpt_save(t, path, e);
}

/* ---- production runs: output paths, stopping on a signal ---------------------- */

/* The run's inputs and outputs by option (TRAINER.md, Outputs): an option
 * that reads or writes a file is one line here. `may_replace`: the input an
 * output may name (--save over --resume: the preemption loop). */
typedef struct MpFileOpt {
    const char *name;
    size_t off;                 /* an MpList (list) or a const char * in MpOpts */
    int list, dir;              /* dir: a folder, created when missing */
    const char *may_replace;
} MpFileOpt;

static const MpFileOpt mp_file_inputs[] = {
    {"--data", offsetof(MpOpts, data), 1, 0, NULL},
    {"--eval", offsetof(MpOpts, eval), 1, 0, NULL},
    {"--init", offsetof(MpOpts, init), 0, 0, NULL},
    {"--resume", offsetof(MpOpts, resume), 0, 0, NULL},
    {"--predict", offsetof(MpOpts, predict), 1, 0, NULL},
};
static const MpFileOpt mp_file_outputs[] = {
    {"--save", offsetof(MpOpts, save), 0, 0, "--resume"},
    {"--log", offsetof(MpOpts, log), 0, 0, NULL},
    {"--export", offsetof(MpOpts, export_), 0, 0, NULL},
    {"--out", offsetof(MpOpts, out), 0, 0, NULL},
    {"--tensorboard", offsetof(MpOpts, tensorboard), 0, 1, NULL},
};
#define MP_NFILEOPTS(a) ((int)(sizeof a / sizeof a[0]))

/* Every path a MpFileOpt holds, with its option's name (NAME=FILE: FILE). */
static inline int mp_file_paths(const MpOpts *o, const MpFileOpt *d, MpOutIn *out)
{
    const char *field = (const char *)o + d->off;
    if (!d->list) {
        out->opt = d->name;
        out->path = *(const char *const *)field;
        return out->path != NULL;
    }
    const MpList *l = (const MpList *)field;
    for (int i = 0; i < l->n; i++) {
        const char *eq = strchr(l->v[i], '=');
        out[i].opt = d->name;
        out[i].path = eq ? eq + 1 : l->v[i];
    }
    return l->n;
}

/* Before anything else: every output path may be written (mp_out_check).
 * Returns 0, or 2 (usage) with e set. */
static inline int mp_check_outputs(const MpOpts *o, MpErr *e)
{
    int cap = 1, n = 0;
    for (int i = 0; i < MP_NFILEOPTS(mp_file_inputs); i++) {
        const char *field = (const char *)o + mp_file_inputs[i].off;
        cap += mp_file_inputs[i].list ? ((const MpList *)field)->n : 1;
    }
    MpOutIn *in = (MpOutIn *)calloc((size_t)cap, sizeof *in), out;
    if (!in)
        return mp_errf(e, "out of memory"), 2;
    for (int i = 0; i < MP_NFILEOPTS(mp_file_inputs); i++)
        n += mp_file_paths(o, &mp_file_inputs[i], in + n);
    int rc = 0;
    for (int i = 0; i < MP_NFILEOPTS(mp_file_outputs) && !rc; i++)
        if (mp_file_paths(o, &mp_file_outputs[i], &out))
            rc = mp_out_check(out.opt, out.path, in, n, mp_file_outputs[i].may_replace,
                              mp_file_outputs[i].dir, e) ? 2 : 0;
    free(in);
    return rc;
}

/* The signal that stops the run before its next step, or 0: with several
 * ranks, the one every rank agrees on (SIGTERM first), so that all stop
 * after the same step. */
static inline int mp_stop_agreed(void)
{
    double v[2] = {mp_stop_signal == SIGTERM ? 1.0 : 0.0, mp_stop_signal == SIGINT ? 1.0 : 0.0};
    if (mp_dist.size == 1)
        return mp_stop_signal;
    mp_dist_sum_f64(v, 2);
    return v[0] > 0 ? SIGTERM : v[1] > 0 ? SIGINT : 0;
}

/* A signal arrived: the step in progress is done; save, flush, say where. */
static inline int mp_stop(MpTrainer *t, const MpOpts *o, MpLog *l, int sig, MpErr *e)
{
    if (l->drawn)
        fprintf(stderr, "\n");
    l->drawn = 0;
    if ((o->save && mp_save(t, o->save, e)) || mp_log_io(l, e))
        return 1;
    l->stopped = sig;
    if (mp_dist_writer())
        fprintf(stderr, "stopped by %s after step %lld of %lld: %s%s%s\n", mp_signal_name(l->stopped),
            (long long)t->step, (long long)l->total,
            o->save ? "checkpoint written to " : "no --save given, nothing saved",
            o->save ? o->save : "", o->save ? " (continue with --resume)" : "");
    return 0;
}

/* ---- the loop ---------------------------------------------------------------- */

static inline int mp_eval_and_log(MpTrainer *t, MpLog *l, MpErr *e)
{
    double loss = 0, *metric = (double *)calloc((size_t)t->m->nmetrics + 1, sizeof(double));
    if (!metric)
        return mp_errf(e, "out of memory");
    int rc = mp_evaluate(t, &loss, metric, e) || mp_log_eval(l, t, loss, metric, e);
    free(metric);
    return rc;
}

static inline int mp_train(MpTrainer *t, const MpOpts *o, MpLog *l, MpErr *e)
{
    int64_t steps = l->total, log_every = o->log_every > 0 ? o->log_every : 100;
    MpPause pause;              /* a test-only hook (mp_guard.h) */
    if (mp_pause_init(&pause, e))
        return 1;
    for (int64_t k = t->step + 1; k <= steps; k++) {
        MpStepOut s = {0};
        int logged = k % log_every == 0 || k == steps, sig = mp_stop_agreed();
        if (sig)
            return mp_stop(t, o, l, sig, e);
        if (mp_step(t, k, (int)o->check_numerics, mp_log_due(l, logged), &s, e)
            || (s.known && mp_loss_stop(t, l->last_step + 1, k, s.loss, e)))
            return 1;
        t->bn_batches += t->cfg.accumulate;
        if (mp_log_step(l, t, k, &s, logged, e) || (k == pause.at && mp_pause(&pause, k, e)))
            return 1;
        if (k == steps)                         /* the end does both */
            break;
        if ((t->eval.n && o->eval_every > 0 && k % o->eval_every == 0 && mp_eval_and_log(t, l, e))
            || (o->save_every > 0 && k % o->save_every == 0 && mp_save(t, o->save, e)))
            return 1;
    }
    if (l->drawn)                               /* keep the last progress line */
        fprintf(stderr, "\n");
    l->drawn = 0;
    if (mp_dist_writer())
        mp_report_skipped(t);
    return (t->eval.n && mp_eval_and_log(t, l, e)) || (o->save && mp_save(t, o->save, e))
        || (o->export_ && mp_save_export(t, o->export_, e));
}

static inline const char *mp_prog_name(const char *argv0)
{
    const char *s = argv0 ? strrchr(argv0, '/') : NULL;
    return s ? s + 1 : argv0 ? argv0 : "train";
}

/* The end-of-run line: steps, time, last loss_avg, eval, skipped, checkpoint. */
static inline void mp_summary(const MpLog *l, const MpTrainer *t, const MpOpts *o)
{
    char avg[32], eta[32];
    mp_fmt_f32(avg, sizeof avg, l->loss_avg);
    mp_fmt_eta(eta, sizeof eta, mp_now() - l->t0);
    fprintf(stderr, "done: %lld steps (to step %lld) in %s, loss_avg %s%s%s, %lld skipped, "
            "checkpoint %s%s%s\n", (long long)(t->step - l->first + 1), (long long)t->step, eta,
            isnan(l->loss_avg) ? "-" : avg, l->eval[0] ? ", " : "", l->eval,
            (long long)t->ls.skipped, o->save ? o->save : "none (no --save)",
            o->export_ ? ", export " : "", o->export_ ? o->export_ : "");
}

/* --predict: the inputs given, the model over every sample, one .npy. */
static inline int mp_run_predict(MpTrainer *t, const MpOpts *o, MpErr *e)
{
    MpDataSet d;
    int rc = mp_data_load(&d, t->m, "--predict", o->predict.v, o->predict.n,
                          MP_DATA_PARTIAL | MP_DATA_SOME, e)
        || mp_data_scan(&d, t->m, e) || mp_predict(t, &d, o->output, o->out, e);
    if (!rc)
        fprintf(stderr, "wrote %s: '%s' of %lld samples\n", o->out,
                o->output ? o->output : t->m->values[t->m->output].name, (long long)d.samples);
    mp_data_free(&d);
    return rc;
}

/* Training proper: data and parameters, then the loop, with its log file. */
static inline int mp_run(MpTrainer *t, const MpOpts *o, MpLog *l, MpErr *e)
{
    if (mp_prepare(t, o, e))
        return 1;
    l->total = o->steps >= 0 ? o->steps : t->m->cfg.steps;
    if (l->total > 0 && t->step > l->total)
        return mp_errf(e, "%s: the checkpoint is at step %lld, past --steps %lld",
                       o->resume, (long long)t->step, (long long)l->total);
    if (o->resume && l->total > t->step && mp_ckpt_ranks_ok(t, o->resume, e))
        return 1;
    int writer = mp_dist_writer();      /* rank 0: files, reports, log lines */
    if (writer)
        mp_warn_horizon(t, l->total);
    if (o->dry_run || o->predict.n)
        return !writer ? 0 : o->dry_run ? mp_dry_run(t, l->total, e) : mp_run_predict(t, o, e);
    if (writer && o->log && !(l->jsonl = mp_out_append(o->log, !o->resume, e)))
        return 1;
    if (writer && o->tensorboard && mp_tb_open(&l->tb, o->tensorboard, e))
        return 1;
    l->loss_avg = NAN;
    l->path = o->log;
    l->tty = writer && isatty(2);
    l->first = t->step + 1;
    l->last_step = t->step;
    l->t0 = l->last_time = mp_now();
    int rc = mp_train(t, o, l, e);
    if (l->jsonl && fclose(l->jsonl) && !rc)
        rc = mp_errf(e, "%s: write failed", o->log);
    MpErr later;                /* after an error, the first one is reported */
    if (mp_tb_close(&l->tb, rc ? &later : e) && !rc)
        rc = 1;
    if (!rc && writer)
        mp_summary(l, t, o);
    return rc;
}

#ifndef MP_PART_MODEL    /* mp_model.h: the program in two parts */
int mp_main(int argc, char **argv, MpModel *m)
{
    const char *prog = mp_prog_name(argc > 0 ? argv[0] : NULL);
    MpOpts o;
    MpErr e;
    MpTrainer t;
    MpLog l;
    memset(&t, 0, sizeof t);
    memset(&l, 0, sizeof l);
    e.msg[0] = 0;
    t.m = m;
    mp_dist_init(&argc, &argv);
    int rc = mp_parse_args(argc, argv, &o, &e);
#ifdef MP_X86
    if (!rc && mp_cpu_env_error(e.msg, sizeof e.msg))
        rc = 2;                         /* a usage error, before anything runs */
#endif
    if (!rc && !o.help && !o.gradcheck && o.predict.n && !o.output && m->output < 0)
        rc = mp_no_default_output(m, &e) ? 2 : 0;
    if (!rc && !o.help && !o.gradcheck && mp_dist_writer())
        rc = mp_check_outputs(&o, &e);
    if (!rc && o.help) {
        if (mp_dist_writer())
            mp_usage(stdout, prog, m);
    } else if (!rc) {
        mp_catch_signals();
        rc = (o.gradcheck ? mp_gradcheck_run(&t, &o, &e) : mp_run(&t, &o, &l, &e)) ? 1
           : l.stopped ? 128 + l.stopped : 0;
    }
    char who[32] = "";                  /* several ranks: which one says it */
    if (mp_dist.size > 1)
        snprintf(who, sizeof who, "rank %d: ", mp_dist.rank);
    if (rc && !l.stopped)
        fprintf(stderr, "%s%s%s: error: %s\n", l.drawn ? "\n" : "", who, prog, e.msg);
    mp_free(&t);
    free(o.data.v);
    free(o.eval.v);
    free(o.predict.v);
    return mp_dist_exit(rc, l.stopped != 0);
}
#endif /* MP_PART_MODEL */

#endif
