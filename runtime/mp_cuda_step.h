/* mp_cuda_step.h - the CUDA program's device backend (MpDevice, see
 * mp_model.h): start, one training step, pull; and the MpModel functions
 * (cast_params, forward, backward) that the shared runtime calls for
 * evaluation, --gradcheck and --check-numerics.
 *
 * A training step on the device (mp_cu_step), with no host wait unless a
 * log line is due:
 *   host    draws the step's samples (the runtime's data order, as the C
 *           program) and writes their indices into a pinned stage, with a
 *           header (step number, learning rate); when the training set is
 *           too large to keep on the device, it gathers the samples there;
 *   copy    stream: stage -> the step's input slot, once the step that last
 *           used that slot is done (two slots: the copy of step k+1
 *           overlaps step k);
 *   compute stream, one CUDA graph replay (captured once per slot at
 *           start): gather the samples from the training set on the device
 *           by those indices, zero the gradients, forward and backward
 *           of every micro-batch (the model's code), then
 *             unscale: every gradient * 1/S and its square summed, one pass
 *                      over the flat buffer, partial sums per block;
 *             decide:  one thread: the sum (fixed order), finite or not,
 *                      the loss-scale state machine (mp_optim.h's own
 *                      mp_scaler_update), the skip, clipping's factor, the
 *                      optimizer's factors for this update count;
 *             update:  SGD / Adam / AdamW on every trainable element
 *                      (mp_optim.h's mp_sgd_elem / mp_adam_elem), or nothing
 *                      when the step is skipped, and in the same pass each
 *                      parameter's lowp working copy, rounded as
 *                      model_cast_params rounds it (MpCuWork).
 *           model_cast_params runs in the step only when some parameter's
 *           copies are not in the model's MpCuWork table; else once, before
 *           the first step, after the masters came from the host.
 * When a log line is due the host reads the state back (one small copy and
 * a wait). 100 skipped steps in a row at the lowest scale stop the device
 * from changing anything (halted_at); the host sees it at its next read,
 * replays that step's data on the host side of the runtime and reports as
 * the C program does (mp_collapse).
 *
 * Host mode (--gradcheck, --check-numerics): the host owns the parameters;
 * each cast_params uploads them, each backward brings the gradients back,
 * the runtime's own optimizer runs, and a check copies each op's result
 * back to look for inf/NaN. Slow, for tests and debugging.
 *
 * Environment: MP_CUDA_GRAPH=0 launches the step's kernels one by one
 * instead of replaying a graph (the first step always runs so: a warm-up
 * before capture); MP_CUDA_SYNC=1 does too and waits after every launch,
 * so that a failing kernel is named with the model's op and line;
 * MP_CUDA_DEVICE=n picks a GPU; MP_CUBLAS=path picks libcublas (off: the
 * built-in product);
 * MP_CUDA_VERBOSE=1 prints the GPU and the device memory used at start;
 * MP_CUDA_DATA=0 gathers every batch on the host (see mp_cu_plan_data).
 * TF32 products are the model's choice (float32_matmul, MpCuModel.tf32),
 * not the environment's. */
#ifndef MP_CUDA_STEP_H
#define MP_CUDA_STEP_H

#include "mp_cuda_ops.h"
#include "mp_train.h"

/* ---- what the model's code calls besides the ops ---------------------------- */

static inline float *mp_cu_param(int i) { return mp_cu.params + mp_cu.t->offset[i]; }
static inline float *mp_cu_grad(int i) { return mp_cu.grads + mp_cu.t->offset[i]; }

struct MpCuLossSeed {
    float *y;
    const MpCuState *s;
    float v;                       /* eager: the value; s NULL */
    MP_HD void operator()() const { y[0] = s ? (float)(s->ls.scale / (double)s->cfg.accumulate) : v; }
};

/* The loss of micro-batch `micro` added to the step's (graph), or scalar i
 * of the call (eager) kept in outs[i]. */
struct MpCuNote {
    MpCuState *s;
    float *outs;
    int i, dt, first;
    const void *src;
    MP_HD void operator()() const
    {
        float v = mp_cu_ld(src, dt, 0);
        if (!s)
            outs[i] = v;
        else
            s->loss_sum = first ? (double)v : s->loss_sum + (double)v;
    }
};

/* The backward pass starts from d(loss) = S / accumulate. */
static inline void mp_cu_loss_seed(float *y, const MpCuRun *r)
{
    MpCuLossSeed f = {y, r->graph ? mp_cu.state : NULL, r->seed_grad};
    mp_cu_one("loss_scale", f);
}

/* Scalar result i (0: the loss, 1 + j: metric j) made by the node just run:
 * kept before the arena's bytes are reused by later nodes. */
static inline void mp_cu_out(const MpCuRun *r, int i, const void *src, int dt)
{
    /* a step's first micro-batch on this rank is micro-batch `rank` of the
     * step's N x A (mp_dist.h) */
    MpCuNote f = {r->graph ? mp_cu.state : NULL, mp_cu.outs, i, dt, r->micro == mp_dist.rank, src};
    if (!r->graph || i == 0)
        mp_cu_one("loss", f);
}

/* --check-numerics: the node's result copied back and looked at. */
static inline int mp_cu_nonfinite(const void *buf, int64_t n, int dt)
{
    size_t bytes = (size_t)n * (size_t)mp_cu_dt_size(dt);
    void *h = malloc(bytes ? bytes : 1);
    if (!h)
        mp_cu_die("check", "out of host memory");
    mp_cu_ok(cudaMemcpyAsync(h, buf, bytes, cudaMemcpyDeviceToHost, mp_cu.st), "check: copy");
    mp_cu_ok(cudaStreamSynchronize(mp_cu.st), "check: wait");
    int bad = mp_nonfinite(h, n, dt);
    free(h);
    return bad;
}

#define MP_CU_CHECK(buf, n, dt, op, where)                                     \
    do {                                                                       \
        if (r->check && mp_cu_nonfinite((buf), (n), (dt))) {                   \
            r->run->bad_op = (op);                                             \
            r->run->bad_where = (where);                                       \
            return 1;                                                          \
        }                                                                      \
    } while (0)

/* ---- the step's own kernels ------------------------------------------------------ */

/* The sums of squares are compensated f32 sums (MpAcc), twice: of v^2,
 * and of (v 2^-80)^2, which no finite f32 v overflows (the C program's
 * double does not either): that one says whether the gradients are finite
 * and gives the norm when v^2's sum overflows f32 (|v| above 1.8e19). */
#define MP_CU_NORM_SHRINK 0x1p-80f

/* g *= 1/S over part b of the flat buffer; its sums of squares into
 * part[2b] (of v^2) and part[2b + 1] (of (v 2^-80)^2). */
struct MpCuUnscale {
    float *g;
    int64_t n, per;                /* per: elements of each part */
    const MpCuState *s;
    MpAcc *part;
    MP_HD void operator()(int64_t b, const MpCuTeam &t) const
    {
        float inv = (float)(1.0 / s->ls.scale);
        int64_t end = (b + 1) * per < n ? (b + 1) * per : n;
        MpAcc sq = mp_acc_zero(), small = mp_acc_zero();
        for (int64_t i = b * per + t.tid; i < end; i += t.nt) {
            float v = g[i], u;
            if (inv != 1.0f) {
                v *= inv;
                g[i] = v;
            }
            u = v * MP_CU_NORM_SHRINK;
            mp_acc_add(&sq, v * v);
            mp_acc_add(&small, u * u);
        }
        sq = t.sum(sq);
        small = t.sum(small);
        if (t.tid == 0) {
            part[2 * b] = sq;
            part[2 * b + 1] = small;
        }
    }
};

/* mp_step's decisions (mp_train.h), on the device; under mixed_float8
 * the end of the step for its scales too (mp_fp8_step_end). */
struct MpCuDecide {
    MpCuState *s;
    const MpCuHdr *h;
    const MpAcc *part;
    int nparts;
    MpFp8 *fp8;                    /* mp_cu.fp8: NULL but under mixed_float8 */
    MP_HD void operator()() const
    {
        MpAcc a = mp_acc_zero(), b = mp_acc_zero();
        for (int i = 0; i < nparts; i++) {
            a = mp_acc_join(a, part[2 * i]);
            b = mp_acc_join(b, part[2 * i + 1]);
        }
        float ss = mp_acc_get(a), small = mp_acc_get(b);
        s->loss = (float)(s->loss_sum / (double)s->cfg.accumulate);
        s->loss_total += (double)s->loss;
        s->grad_norm = isfinite(ss) ? (double)sqrtf(ss) : (double)sqrtf(small) / (double)MP_CU_NORM_SHRINK;
        s->scale_used = s->ls.scale;
        s->step = h->step;
        s->taken = 0;
        if (s->halted_at)
            return;
        int at_floor = mp_scaler_at_floor(&s->ls) || fp8;   /* mixed_float8: no scale to lower */
        s->taken = mp_scaler_update(&s->ls, isfinite(small));
        if (fp8) {
            s->taken = mp_fp8_step_taken(fp8, s->taken, isfinite(small), &s->ls.skipped);
            s->fp8_lo = fp8->lo;
            s->fp8_hi = fp8->hi;
        }
        if (!s->taken) {
            s->floor_skips = at_floor ? s->floor_skips + 1 : 0;
            if (s->floor_skips >= MP_COLLAPSE_STEPS)
                s->halted_at = h->step;
            return;
        }
        s->floor_skips = 0;
        s->coef = s->cfg.clip > 0 ? mp_clip_coef(s->grad_norm, s->cfg.clip) : 1.0f;
        s->updates++;
        s->k = mp_optim_k(&s->cfg, h->lr, s->updates);
    }
};

/* The optimizer on tile b (nothing if skipped), then the new value's
 * working copy; a tile of a parameter that is not trained (a buffer that
 * the forward pass may have changed) has its copy written every step. */
struct MpCuUpdate {
    const MpCuState *s;
    const MpCuTile *tiles;
    float *p, *st[MP_OPT_SLOTS];   /* st: the optimizer state (mp_optim_slots) */
    const float *g;
    unsigned char *arena;          /* the working copies' (MpCuTile.work_at) */
    MP_HD void operator()(int64_t b, const MpCuTeam &t) const
    {
        const MpCuTile tl = tiles[b];
        if (tl.train && !s->taken)
            return;
        MpOptK k = tl.no_decay ? mp_optk_no_decay(s->k) : s->k;
        float coef = s->coef;
        float *rb = MP_RMS_BUF(&k, st), *ra = MP_RMS_AVG(&k, st);
        void *w = tl.work_dt ? arena + tl.work_at : NULL;
        for (int64_t i = tl.start + t.tid; i < tl.start + tl.len; i += t.nt) {
            if (tl.train) {
                float gi = coef != 1.0f ? g[i] * coef : g[i];
                if (k.adam)
                    mp_adam_elem(&k, &p[i], gi, &st[0][i], &st[1][i]);
                else if (k.rms)
                    mp_rms_elem(&k, &p[i], gi, &st[0][i], rb ? &rb[i] : (float *)NULL,
                                ra ? &ra[i] : (float *)NULL);
                else
                    mp_sgd_elem(&k, &p[i], gi, st[0] ? &st[0][i] : (float *)NULL);
            }
            if (w)
                mp_cu_st(w, tl.work_dt, i - tl.start, p[i]);
        }
    }
};

/* ---- one step, as launched (and captured) ------------------------------------------ */

static inline MpCuRun mp_cu_run_of(int graph, int training, MpRun *run)
{
    MpCuRun r;
    memset(&r, 0, sizeof r);
    r.graph = graph;
    r.training = training;
    r.run = run;
    r.seed = mp_cu.t ? mp_cu.t->seed : 0;
    r.in = mp_cu.in[2] ? mp_cu.in[2] + MP_CU_HDR : NULL;
    r.hdr = (const MpCuHdr *)mp_cu.in[2];
    if (run) {
        r.check = run->check;
        r.micro = run->micro;
        r.seed = run->seed;
        r.seed_grad = run->seed_grad;
    }
    return r;
}

/* One input of one micro-batch: y[b] = data[idx[b]], samples of sb bytes,
 * moved in 4-byte words when sb allows. */
struct MpCuGatherRows {
    unsigned char *y;
    const unsigned char *data;
    const int64_t *idx;
    int64_t sb;
    int unit;
    MP_HD void operator()(int64_t e) const
    {
        int64_t per = sb / unit, b = e / per, k = e % per;
        if (unit == 4)
            ((uint32_t *)y)[e] = ((const uint32_t *)(data + idx[b] * sb))[k];
        else
            y[e] = data[idx[b] * sb + k];
    }
};

/* The samples of slot s's indices from the training set on the device. */
static inline void mp_cu_gather_slot(int s)
{
    MpModel *m = mp_cu.t->m;
    for (int64_t u = 0; u < mp_cu.t->cfg.accumulate; u++)
        for (int i = 0; i < m->ninputs; i++) {
            int64_t sb = mp_sample_bytes(&m->inputs[i]);
            MpCuGatherRows f = {mp_cu.in[s] + mp_cu.in_base + u * mp_cu.model->in_bytes
                                    + mp_cu.model->in_off[i],
                                mp_cu.data[i], (const int64_t *)(mp_cu.in[s] + MP_CU_HDR) + u * m->batch,
                                sb, sb % 4 ? 1 : 4};
            mp_cu_each("inputs", m->batch * sb / f.unit, f);
        }
}

/* Data parallel: buf[0..n) summed (MP_NCCL_SUM) or the largest
 * (MP_NCCL_MAX) over the ranks, on the compute stream. */
static inline void mp_cu_nccl_reduce(void *buf, int64_t n, int type, int op)
{
    if (!mp_cu.comm || mp_cu.measure)
        return;
    int rc = mp_cu.nccl.all_reduce(buf, buf, (size_t)n, type, op, mp_cu.comm, mp_cu.st);
    if (rc != MP_NCCL_SUCCESS)
        mp_cu_lib_failed();
    if (rc != MP_NCCL_SUCCESS && !mp_cu_captured_err("ncclAllReduce", mp_cu.nccl.error_string(rc)))
        mp_cu_die("ncclAllReduce", mp_cu.nccl.error_string(rc));
}

/* Everything of one optimizer step, on the compute stream, inputs in slot s.
 * With N ranks, this rank's micro-batch u of A is the step's u N + rank
 * (mp_dist.h), and the gradients and the loss are summed over the ranks
 * before the unscale pass; the loss seed and the mean use N A (MpCuState's
 * cfg.accumulate, mp_cu_push). */
static inline void mp_cu_step_body(int s)
{
    MpTrainer *t = mp_cu.t;
    MpCuRun r = mp_cu_run_of(1, 1, NULL);
    r.hdr = (const MpCuHdr *)mp_cu.in[s];
    if (mp_cu.data)
        mp_cu_gather_slot(s);
    mp_cu_memset(mp_cu.grads, t->total * (int64_t)sizeof(float));
    if (!mp_cu.work_all)
        mp_cu.model->cast_params(&r);
    for (int64_t u = 0; u < t->cfg.accumulate; u++) {
        r.micro = u * mp_dist.size + mp_dist.rank;
        r.in = mp_cu.in[s] + mp_cu.in_base + u * mp_cu.model->in_bytes;
        mp_cu.model->forward(&r);
        mp_cu.model->backward(&r);
    }
    mp_cu_nccl_reduce(mp_cu.grads, t->total, MP_NCCL_FLOAT32, MP_NCCL_SUM);
    mp_cu_nccl_reduce(&mp_cu.state->loss_sum, 1, MP_NCCL_FLOAT64, MP_NCCL_SUM);
    if (mp_cu.fp8)                 /* mixed_float8: the amaxes of every rank's micro-batches */
        mp_cu_nccl_reduce(mp_cu.fp8_at.amax, mp_cu.fp8_at.nslots, MP_NCCL_FLOAT32, MP_NCCL_MAX);
    MpCuUnscale un = {mp_cu.grads, t->total, (t->total + mp_cu.nparts - 1) / mp_cu.nparts,
                      mp_cu.state, mp_cu.part};
    MpCuDecide de = {mp_cu.state, r.hdr, mp_cu.part, mp_cu.nparts, mp_cu.fp8};
    MpCuUpdate up = {mp_cu.state, mp_cu.tiles, mp_cu.params,
                     {mp_cu.slot[0], mp_cu.slot[1], mp_cu.slot[2]}, mp_cu.grads, mp_cu.arena};
    mp_cu_rows("unscale", mp_cu.nparts, 256, un);
    mp_cu_one("decide", de);
    mp_cu_rows("update", mp_cu.ntiles, 256, up);
}

/* Captures slot s's step as a graph; 0, or -1 (then steps run eagerly).
 * Any error while capturing (a launch, cuBLAS, a call the capture refuses)
 * ends the capture, and the program goes on with eager steps after one note. */
static inline int mp_cu_capture(int s)
{
    cudaGraph_t g = NULL;
    cudaError_t rc = cudaStreamBeginCapture(mp_cu.st, cudaStreamCaptureModeRelaxed);
    if (rc == cudaSuccess) {
        mp_cu.capturing = 1;
        mp_cu.capture_err[0] = 0;
        mp_cu_step_body(s);
        rc = cudaStreamEndCapture(mp_cu.st, &g);
        mp_cu.capturing = 0;
        if (rc == cudaSuccess && !mp_cu.capture_err[0])
            rc = cudaGraphInstantiate(&mp_cu.exec[s], g, 0);
        if (g)
            cudaGraphDestroy(g);
    }
    cudaGetLastError();            /* the capture's error is not the next launch's */
    if (rc == cudaSuccess && !mp_cu.capture_err[0])
        return 0;
    mp_cu.exec[s] = NULL;
    fprintf(stderr, "note: CUDA graph capture failed (%s); the step's kernels are launched "
            "one by one\n", mp_cu.capture_err[0] ? mp_cu.capture_err : cudaGetErrorString(rc));
    return -1;
}

/* ---- start ---------------------------------------------------------------------------- */

/* The dry run: how much workspace the model's calls need. */
static inline void mp_cu_measure(void)
{
    static unsigned char dummy[MP_CU_HDR];
    MpCuRun r = mp_cu_run_of(0, 1, NULL);
    r.in = dummy;
    r.hdr = (const MpCuHdr *)dummy;
    mp_cu.measure = 1;
    mp_cu.model->cast_params(&r);
    mp_cu.model->forward(&r);
    mp_cu.model->backward(&r);
    r.training = 0;
    mp_cu.model->forward(&r);
    mp_cu.measure = 0;
}

/* The step slots' layout, and whether the training set goes to the device:
 * when it takes at most a quarter of the free device memory (and 16 GiB)
 * and is not a set of window streams (their rows are gathered on the host),
 * so that each step copies only sample indices. MP_CUDA_DATA=0: never. */
static inline void mp_cu_plan_data(MpTrainer *t, int host)
{
    int64_t acc = t->cfg.accumulate, idx = mp_cu_round_up(acc * t->m->batch * (int64_t)sizeof(int64_t));
    int64_t bytes = 0;
    size_t free_b = 0, total_b = 0;
    const char *env = getenv("MP_CUDA_DATA");
    mp_cu.in_base = MP_CU_HDR + idx;
    mp_cu.slot_bytes = mp_cu.in_base + acc * mp_cu.model->in_bytes;
    mp_cu.copy_bytes = mp_cu.slot_bytes;
    for (int i = 0; i < t->m->ninputs && t->data.arr; i++)
        bytes += mp_cu_round_up(t->data.arr[i].nbytes);
    if (host || !t->data.arr || t->data.window || (env && *env == '0') || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess
        || bytes > (int64_t)(free_b / 4) || bytes > ((int64_t)16 << 30))
        return;
    if (!(mp_cu.data = (unsigned char **)calloc((size_t)t->m->ninputs + 1, sizeof *mp_cu.data)))
        return;
    mp_cu.copy_bytes = mp_cu.in_base;
}

/* Cuts the one allocation; with mem NULL only counts the bytes. */
static inline int64_t mp_cu_layout(unsigned char *mem)
{
    MpTrainer *t = mp_cu.t;
    int64_t at = 0, fl = mp_cu_round_up(t->total * (int64_t)sizeof(float));
#define MP_CU_CUT(ptr, type, bytes) (ptr = (type)(mem ? mem + at : NULL), at += mp_cu_round_up(bytes))
    MP_CU_CUT(mp_cu.arena, unsigned char *, mp_cu.model->arena_bytes);
    MP_CU_CUT(mp_cu.params, float *, fl);
    MP_CU_CUT(mp_cu.grads, float *, fl);
    for (int s = 0; s < MP_OPT_SLOTS; s++)
        MP_CU_CUT(mp_cu.slot[s], float *, s < t->nslots ? fl : 0);
    for (int s = 0; s < 2; s++)
        MP_CU_CUT(mp_cu.in[s], unsigned char *, mp_cu.host ? 0 : mp_cu.slot_bytes);
    MP_CU_CUT(mp_cu.in[2], unsigned char *, MP_CU_HDR + mp_cu.model->in_bytes);
    MP_CU_CUT(mp_cu.ws, unsigned char *, mp_cu.ws_need);
    MP_CU_CUT(mp_cu.blas_ws, unsigned char *, MP_CU_BLAS_WS);
    MP_CU_CUT(mp_cu.outs, float *, (1 + t->m->nmetrics) * (int64_t)sizeof(float));
    MP_CU_CUT(mp_cu.part, MpAcc *, 2 * mp_cu.nparts * (int64_t)sizeof(MpAcc));
    MP_CU_CUT(mp_cu.state, MpCuState *, (int64_t)sizeof(MpCuState));
    MP_CU_CUT(mp_cu.tiles, MpCuTile *, mp_cu.ntiles * (int64_t)sizeof(MpCuTile));
    for (int i = 0; mp_cu.data && i < t->m->ninputs; i++)
        MP_CU_CUT(mp_cu.data[i], unsigned char *, t->data.arr[i].nbytes);
#undef MP_CU_CUT
    mp_cu_fp8_layout(mem, &at, t->m->fp8);
    for (int s = 0; s < MP_OPT_SLOTS; s++)
        if (s >= t->nslots)
            mp_cu.slot[s] = NULL;
    return at;
}

/* 1 when the model's table names every parameter's working copy (MpCuWork),
 * so that the update pass can write them all and the step need not cast. */
static inline int mp_cu_work_all(const MpTrainer *t)
{
    for (int i = 0; i < t->m->nparams; i++) {
        int dt = mp_cu.model->work[i].dt;
        if (dt != MP_F32 && dt != MP_F16 && dt != MP_BF16)
            return 0;
    }
    return 1;
}

/* The optimizer's work: every trainable parameter in pieces of 4096, and
 * when the update writes the working copies (work_all), the parameters
 * that are not trained but have one. */
static inline MpCuTile *mp_cu_tiles(int64_t *n)
{
    MpModel *m = mp_cu.t->m;
    const MpCuWork *w = mp_cu.model->work;
    int all = mp_cu_work_all(mp_cu.t);
    int64_t count = 0;
    for (int pass = 0; pass < 2; pass++) {
        MpCuTile *tl = pass ? (MpCuTile *)calloc((size_t)count + 1, sizeof *tl) : NULL;
        if (pass && !tl)
            return NULL;
        count = 0;
        for (int i = 0; i < m->nparams; i++) {
            int copy = all && (w[i].dt == MP_F16 || w[i].dt == MP_BF16);
            for (int64_t a = 0; (m->params[i].trainable || copy) && a < m->params[i].numel; a += 4096) {
                if (tl) {
                    tl[count].start = mp_cu.t->offset[i] + a;
                    tl[count].len = mp_min64(m->params[i].numel - a, 4096);
                    tl[count].no_decay = m->params[i].no_decay;
                    tl[count].train = m->params[i].trainable;
                    tl[count].work_dt = copy ? w[i].dt : 0;
                    tl[count].work_at = w[i].off + a * mp_cu_dt_size(w[i].dt);
                }
                count++;
            }
        }
        if (pass) {
            *n = count;
            return tl;
        }
    }
    return NULL;
}

static inline void mp_cu_h2d(void *dst, const void *src, int64_t bytes)
{
    if (bytes > 0)
        mp_cu_ok(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyHostToDevice, mp_cu.st),
                 "copy to the device");
}

static inline void mp_cu_d2h(void *dst, const void *src, int64_t bytes)
{
    if (bytes > 0)
        mp_cu_ok(cudaMemcpyAsync(dst, src, (size_t)bytes, cudaMemcpyDeviceToHost, mp_cu.st),
                 "copy from the device");
}

/* Waits for the GPU; a kernel's fault often shows here (mp_cu_earlier). */
static inline void mp_cu_wait(void)
{
    mp_cu_ok(cudaStreamSynchronize(mp_cu.st), "the GPU");
}

/* --predict: the chosen value copied back as the eager forward pass makes
 * it (mp_cu_forward waits for the copy). */
static inline void mp_cu_keep(const MpCuRun *r, int i, const void *src, int64_t bytes)
{
    if (r->run && r->run->keep == i + 1) {
        mp_cu_d2h(r->run->kept, src, bytes);
        r->run->kept_done = 1;
    }
}

/* mp_cu_keep of a chunk attention reads in place (MP_KEEP_ROWS): the rows'
 * span copied back, then gathered. */
static inline void mp_cu_keep_rows(const MpCuRun *r, int i, const void *src, int64_t rows,
                                   int64_t len, int64_t stride)
{
    if (!r->run || r->run->keep != i + 1 || rows <= 0)
        return;
    int64_t span = (rows - 1) * stride + len;
    void *host = malloc((size_t)span);
    if (!host)
        mp_cu_die("--predict", "out of host memory for the value's copy");
    mp_cu_d2h(host, src, span);
    mp_gather_rows(r->run->kept, host, rows, len, stride);
    free(host);
    r->run->kept_done = 1;
}

/* mp_cu_keep of an attention's y stored [B, T, H, D] whose value is
 * [B, H, T, D] (MP_KEEP_BTHD): copied back, then its axes swapped. */
static inline void mp_cu_keep_bthd(const MpCuRun *r, int i, const void *src, int64_t esize,
                                   int64_t B, int64_t T, int64_t H, int64_t D)
{
    if (!r->run || r->run->keep != i + 1)
        return;
    int64_t bytes = B * T * H * D * esize;
    void *host = malloc((size_t)bytes + 1);
    if (!host)
        mp_cu_die("--predict", "out of host memory for the value's copy");
    mp_cu_d2h(host, src, bytes);
    mp_swap12(r->run->kept, host, esize, B, T, H, D);
    free(host);
    r->run->kept_done = 1;
}

/* Parameters, optimizer state and the loss-scale state to the device. */
static inline void mp_cu_push(MpTrainer *t, MpCuTile *tiles)
{
    MpCuState s;
    memset(&s, 0, sizeof s);
    s.ls = t->ls;
    s.cfg = t->cfg;
    s.cfg.accumulate = t->cfg.accumulate * mp_dist.size;   /* micro-batches of a step, all ranks */
    s.floor_skips = t->floor_skips;
    s.updates = t->updates;
    s.coef = 1.0f;
    mp_cu_h2d(mp_cu.params, t->params, t->total * (int64_t)sizeof(float));
    mp_cu.work_stale = 1;          /* new masters: cast before the next step */
    mp_cu_memset(mp_cu.grads, t->total * (int64_t)sizeof(float));
    for (int i = 0; i < t->nslots; i++)
        mp_cu_h2d(mp_cu.slot[i], t->slot[i], t->total * (int64_t)sizeof(float));
    mp_cu_h2d(mp_cu.state, &s, (int64_t)sizeof s);
    mp_cu_h2d(mp_cu.tiles, tiles, mp_cu.ntiles * (int64_t)sizeof *tiles);
    mp_cu_memset(mp_cu.in[2], MP_CU_HDR + mp_cu.model->in_bytes);
    mp_cu_fp8_push(t->m->fp8);
    mp_cu_wait();
}

static int64_t mp_cu_bytes(const MpTrainer *t);

/* Pinned stages, events, graphs: what device-mode steps need. */
static inline int mp_cu_start_steps(MpErr *e)
{
    cudaError_t rc = cudaSuccess;
    for (int s = 0; s < 2 && rc == cudaSuccess; s++) {
        rc = cudaHostAlloc((void **)&mp_cu.stage[s], (size_t)mp_cu.slot_bytes, cudaHostAllocDefault);
        if (rc == cudaSuccess)
            rc = cudaEventCreateWithFlags(&mp_cu.copied[s], cudaEventDisableTiming);
        if (rc == cudaSuccess)
            rc = cudaEventCreateWithFlags(&mp_cu.done[s], cudaEventDisableTiming);
    }
    if (rc == cudaSuccess)
        rc = cudaHostAlloc((void **)&mp_cu.hstate, sizeof(MpCuState), cudaHostAllocDefault);
    if (rc != cudaSuccess)
        return mp_errf(e, "CUDA: cannot allocate pinned host memory: %s", cudaGetErrorString(rc));
    memset(mp_cu.stage[0], 0, (size_t)mp_cu.slot_bytes);
    memset(mp_cu.stage[1], 0, (size_t)mp_cu.slot_bytes);
    const char *g = getenv("MP_CUDA_GRAPH");
    mp_cu.graphs = !(g && *g == '0') && !mp_cu.sync;   /* captured after a warm-up step */
    mp_cu.snap = mp_cu.t->order;
    mp_cu.snap_step = mp_cu.t->step;
    const char *v = getenv("MP_CUDA_VERBOSE");
    if (v && *v == '1')
        fprintf(stderr, "cuda: %s, %d SMs; %.1f MiB of device memory in one allocation "
                "(--dry-run's figure %.1f; arena %.1f, workspace %.1f); training set %s; steps %s; "
                "f16 / bf16 attention %s\n",
                mp_cu.device, mp_cu.sms, (double)mp_cu.mem_bytes / (1 << 20),
                (double)mp_cu_bytes(mp_cu.t) / (1 << 20), (double)mp_cu.model->arena_bytes / (1 << 20),
                (double)mp_cu.ws_need / (1 << 20), mp_cu.data ? "on the device" : "gathered on the host",
                mp_cu.graphs ? "as CUDA graphs after one eager step" : "launched one by one",
                mp_cu_fa_ready() ? "on Tensor Cores (mma.sync, mp_cuda_flash.h)"
                                 : "on the f32 tiles (kernels built for an arch before sm_80)");
    return 0;
}

/* From here on the host owns the parameters (see the header). */
static inline int mp_cu_host_mode(MpTrainer *t, MpErr *e)
{
    mp_cu.host = 1;
    if (!mp_cu.hgrads && !(mp_cu.hgrads = (float *)malloc((size_t)(t->total + 1) * sizeof(float))))
        return mp_errf(e, "out of memory for %lld gradients", (long long)t->total);
    return 0;
}

/* The unscale pass's parts: from sizes only, so its sums are deterministic. */
static inline int mp_cu_nparts(const MpTrainer *t)
{
    int n = (int)mp_min64((t->total + 4095) / 4096, 1024);
    return n < 1 ? 1 : n;
}

/* Data parallel on more than one rank: NCCL loaded, rank 0's id to every
 * rank (MPI), the communicator joined on this rank's GPU. */
static inline int mp_cu_nccl_open(MpErr *e)
{
    char msg[512];
    MpNcclId id;
    int rc;
    if (mp_dist.size == 1)
        return 0;
    if (mp_nccl_load(&mp_cu.nccl, msg, sizeof msg))
        return mp_errf(e, "%s", msg);
    memset(&id, 0, sizeof id);
    if (mp_dist.rank == 0 && (rc = mp_cu.nccl.get_unique_id(&id)) != MP_NCCL_SUCCESS)
        return mp_errf(e, "NCCL: ncclGetUniqueId: %s", mp_cu.nccl.error_string(rc));
    mp_dist_bcast(&id, (int64_t)sizeof id);
    if ((rc = mp_cu.nccl.comm_init_rank(&mp_cu.comm, mp_dist.size, id, mp_dist.rank)) != MP_NCCL_SUCCESS)
        return mp_errf(e, "NCCL: rank %d of %d cannot join (ncclCommInitRank): %s", mp_dist.rank,
                       mp_dist.size, mp_cu.nccl.error_string(rc));
    return 0;
}

static int mp_cu_start(MpTrainer *t, int host, MpErr *e)
{
    mp_cu.t = t;
    mp_cu.host = host;
    if (!mp_cu.model)
        return mp_errf(e, "CUDA: the program has no model bound (a bug of mpcc)");
    if (mp_cu_open(e))
        return 1;
    mp_cu_measure();
    mp_cu_plan_data(t, host);
    mp_cu.nparts = mp_cu_nparts(t);
    mp_cu.work_all = mp_cu_work_all(t);
    MpCuTile *tiles = mp_cu_tiles(&mp_cu.ntiles);
    if (!tiles)
        return mp_errf(e, "out of memory");
    mp_cu.mem_bytes = mp_cu_layout(NULL);
    cudaError_t rc = cudaMalloc((void **)&mp_cu.mem, (size_t)mp_cu.mem_bytes);
    if (rc != cudaSuccess) {
        free(tiles);
        return mp_errf(e, "CUDA: cannot allocate %.1f MiB of device memory: %s",
                       (double)mp_cu.mem_bytes / (1 << 20), cudaGetErrorString(rc));
    }
    mp_cu_layout(mp_cu.mem);
#ifndef MP_CU_EMU
    if (!mp_cu.blas_off)
        mp_cu_blas_ok(mp_cu.blas.set_workspace(mp_cu.handle, mp_cu.blas_ws, MP_CU_BLAS_WS),
                      "cublasSetWorkspace");
#endif
    mp_cu.model->bind(mp_cu.arena);
    mp_cu_push(t, tiles);
    free(tiles);
    for (int i = 0; mp_cu.data && i < t->m->ninputs; i++)
        mp_cu_h2d(mp_cu.data[i], t->data.arr[i].data, t->data.arr[i].nbytes);
    mp_cu_wait();
    mp_cu.started = 1;
    mp_cu_fp8_open(t->m);
    return host ? mp_cu_host_mode(t, e) : mp_cu_nccl_open(e) || mp_cu_start_steps(e);
}

/* ---- pull, collapse -------------------------------------------------------------------------- */

static inline void mp_cu_mirror(MpTrainer *t, const MpCuState *s)
{
    t->ls = s->ls;
    t->floor_skips = s->floor_skips;
    t->updates = s->updates;
    if (t->m->fp8) {               /* the log's range of the scales */
        t->m->fp8->lo = s->fp8_lo;
        t->m->fp8->hi = s->fp8_hi;
    }
}

static int mp_cu_pull(MpTrainer *t, MpErr *e)
{
    (void)e;
    if (!mp_cu.started || mp_cu.host)
        return 0;
    MpCuState s;
    mp_cu_d2h(t->params, mp_cu.params, t->total * (int64_t)sizeof(float));
    for (int i = 0; i < t->nslots; i++)
        mp_cu_d2h(t->slot[i], mp_cu.slot[i], t->total * (int64_t)sizeof(float));
    mp_cu_d2h(&s, mp_cu.state, (int64_t)sizeof s);
    mp_cu_wait();
    mp_cu_mirror(t, &s);
    mp_cu_fp8_pull(t->m->fp8);
    return 0;
}

/* Step k0 skipped the 100th time in a row at the lowest scale and the
 * device has changed nothing since: bring its state back, replay k0's data
 * on the host side (from the data order at the last read) and report. */
static inline int mp_cu_collapse(MpTrainer *t, int64_t k0, MpErr *e)
{
    int64_t acc = t->cfg.accumulate * mp_dist.size;
    MpRun run;
    if (mp_cu_pull(t, e) || mp_cu_host_mode(t, e))
        return 1;
    mp_order_restore(&t->order, &mp_cu.snap.start, mp_cu.snap.epoch, mp_cu.snap.pos);
    for (int64_t j = mp_cu.snap_step + 1; j < k0; j++)
        for (int64_t u = 0; u < acc; u++)
            mp_order_next(&t->order);
    mp_micro_batches(t, k0, (float)t->ls.scale, 0, 0, &run);   /* step k0's gradients */
    return mp_collapse(t, k0, e);
}

/* ---- a step ------------------------------------------------------------------------------------ */

/* Copies the samples of one micro-batch into a stage (as mp_fill_batch). */
static inline void mp_cu_gather_batch(const MpTrainer *t, unsigned char *dst, const int64_t *idx)
{
    const MpModel *m = t->m;
    for (int i = 0; i < m->ninputs; i++) {
        int64_t sb = mp_sample_bytes(&m->inputs[i]);
        unsigned char *d = dst + mp_cu.model->in_off[i];
        for (int64_t b = 0; b < m->batch; b++)
            memcpy(d + b * sb, mp_data_row(m, &t->data, i, idx[b]), (size_t)sb);
    }
}

/* The state of step k read back: the one wait for the GPU. */
static inline int mp_cu_sync(MpTrainer *t, int64_t k, double lr, MpStepOut *out, MpErr *e)
{
    mp_cu_d2h(mp_cu.hstate, mp_cu.state, (int64_t)sizeof(MpCuState));
    mp_cu_wait();
    const MpCuState *s = mp_cu.hstate;
    mp_cu_mirror(t, s);
    out->loss = s->loss;
    out->loss_total = s->loss_total;
    out->grad_norm = s->grad_norm;
    out->lr = lr;
    out->scale = s->scale_used;
    out->taken = s->taken;
    out->known = 1;
    if (s->halted_at)
        return mp_cu_collapse(t, s->halted_at, e);
    mp_cu.snap = t->order;
    mp_cu.snap_step = k;
    return 0;
}

static int mp_cu_step(MpTrainer *t, int64_t k, int need, MpStepOut *out, MpErr *e)
{
    MpModel *m = t->m;
    int s = (int)(k & 1);
    unsigned char *stage = mp_cu.stage[s];
    MpCuHdr h = {k, mp_sched_lr(&t->cfg, t->cfg.lr, k)};
    /* the first step runs eagerly (cuBLAS and the kernels load), then each
     * slot's step is captured once */
    if (mp_cu.graphs && mp_cu.warm && !mp_cu.exec[s] && mp_cu_capture(s))
        mp_cu.graphs = 0;
    mp_cu.warm = 1;
    mp_cu_ok(cudaEventSynchronize(mp_cu.copied[s]), "input copy");
    memcpy(stage, &h, sizeof h);
    for (int64_t u = 0; u < t->cfg.accumulate * mp_dist.size; u++) {   /* every rank's */
        int64_t *idx = t->step_idx + u * m->batch, a = u / mp_dist.size;   /* a: this rank's */
        memcpy(idx, mp_order_next(&t->order), (size_t)m->batch * sizeof *idx);
        if (u % mp_dist.size != mp_dist.rank)
            continue;
        memcpy(stage + MP_CU_HDR + a * m->batch * (int64_t)sizeof *idx, idx, (size_t)m->batch * sizeof *idx);
        if (!mp_cu.data)
            mp_cu_gather_batch(t, stage + mp_cu.in_base + a * mp_cu.model->in_bytes, idx);
    }
    mp_cu_ok(cudaStreamWaitEvent(mp_cu.cp, mp_cu.done[s], 0), "input copy");
    mp_cu_ok(cudaMemcpyAsync(mp_cu.in[s], stage, (size_t)mp_cu.copy_bytes, cudaMemcpyHostToDevice,
                             mp_cu.cp), "input copy");
    mp_cu_ok(cudaEventRecord(mp_cu.copied[s], mp_cu.cp), "input copy");
    mp_cu_ok(cudaStreamWaitEvent(mp_cu.st, mp_cu.copied[s], 0), "step");
    if (mp_cu.work_all && mp_cu.work_stale) {   /* the step's update writes them after this */
        MpCuRun r = mp_cu_run_of(1, 1, NULL);
        mp_cu.model->cast_params(&r);
        mp_cu.work_stale = 0;
    }
    if (mp_cu.graphs && mp_cu.exec[s])
        mp_cu_ok(cudaGraphLaunch(mp_cu.exec[s], mp_cu.st), "step (graph launch)");
    else
        mp_cu_step_body(s);
    mp_cu_ok(cudaEventRecord(mp_cu.done[s], mp_cu.st), "step");
    t->step = k;
    out->known = 0;
    return need ? mp_cu_sync(t, k, h.lr, out, e) : 0;
}

/* MpDevice.bytes (--dry-run): the one allocation mp_cu_start would make,
 * worked out without a GPU (the launchers' measure mode and the layout);
 * the training set counted in when it is loaded, at most 16 GiB and not
 * MP_CUDA_DATA=0 (a run also leaves it on the host when it takes more than
 * a quarter of the free memory, which only the GPU knows). */
static int64_t mp_cu_bytes(const MpTrainer *t)
{
    MpCu keep = mp_cu;
    int64_t data = 0, bytes;
    const char *env = getenv("MP_CUDA_DATA");
    mp_cu.t = (MpTrainer *)t;
    mp_cu.host = 0;
    mp_cu.data = NULL;
    mp_cu_measure();
    mp_cu_plan_data(mp_cu.t, 1);   /* the slots' layout only */
    mp_cu.nparts = mp_cu_nparts(t);
    free(mp_cu_tiles(&mp_cu.ntiles));
    bytes = mp_cu_layout(NULL);
    for (int i = 0; i < t->m->ninputs && t->data.arr && !t->data.window && !(env && *env == '0'); i++)
        data += mp_cu_round_up(t->data.arr[i].nbytes);
    mp_cu = keep;
    return bytes + (data <= ((int64_t)16 << 30) ? data : 0);
}

static const MpDevice mp_cu_device = {mp_cu_start, mp_cu_step, mp_cu_pull, mp_cu_bytes};

/* ---- MpModel's functions: evaluation, --gradcheck, --check-numerics ------------------------------ */

static void mp_cu_cast_params(void)
{
    MpCuRun r = mp_cu_run_of(0, 0, NULL);
    if (mp_cu.host)
        mp_cu_h2d(mp_cu.params, mp_cu.t->params, mp_cu.t->total * (int64_t)sizeof(float));
    mp_cu.model->cast_params(&r);
}

/* One micro-batch from the inputs' host batch buffers (filled by the runtime). */
static int mp_cu_forward(MpRun *run)
{
    MpTrainer *t = mp_cu.t;
    MpModel *m = t->m;
    MpCuRun r = mp_cu_run_of(0, run->training, run);
    MpCuHdr h = {run->step, 0.0};
    float outs[1 + 64];
    int nm = m->nmetrics < 64 ? m->nmetrics : 64;
    if (mp_cu.host)                /* the host's trainer ends the steps: its scales */
        mp_cu_fp8_push(m->fp8);
    mp_cu_h2d(mp_cu.in[2], &h, (int64_t)sizeof h);
    for (int i = 0; i < m->ninputs; i++)
        mp_cu_h2d(r.in + mp_cu.model->in_off[i], m->inputs[i].batch,
                  m->batch * mp_sample_bytes(&m->inputs[i]));
    int rc = mp_cu.model->forward(&r);
    if (rc)
        return rc;
    mp_cu_d2h(outs, mp_cu.outs, (1 + nm) * (int64_t)sizeof(float));
    if (mp_cu.host && run->training)   /* batch-norm running statistics */
        mp_cu_d2h(t->params, mp_cu.params, t->total * (int64_t)sizeof(float));
    mp_cu_wait();
    if (mp_cu.host)                /* the amaxes and exponents it saw, back to the host's */
        mp_cu_fp8_pull(m->fp8);
    run->loss = outs[0];
    for (int j = 0; !run->training && j < nm; j++)
        run->metrics[j] = outs[1 + j];
    return 0;
}

/* Adds the micro-batch's gradients into MpParam.grad (host mode). */
static int mp_cu_backward(MpRun *run)
{
    MpTrainer *t = mp_cu.t;
    MpCuRun r = mp_cu_run_of(0, 1, run);
    mp_cu_memset(mp_cu.grads, t->total * (int64_t)sizeof(float));
    int rc = mp_cu.model->backward(&r);
    if (!mp_cu.host)
        return rc;
    mp_cu_fp8_pull(t->m->fp8);
    mp_cu_d2h(mp_cu.hgrads, mp_cu.grads, t->total * (int64_t)sizeof(float));
    mp_cu_wait();
    for (int i = 0; i < t->m->nparams; i++) {
        MpParam *p = &t->m->params[i];
        for (int64_t j = 0; p->grad && j < p->numel; j++)
            p->grad[j] += mp_cu.hgrads[t->offset[i] + j];
    }
    return rc;
}

/* The CUDA program's entry (its main calls it): the device's functions in
 * the model's MpModel, the model's device code, then mp_main. In the
 * runtime part of a program built in two parts (mp_model.h), so that the
 * model part reaches none of the above. */
#ifdef MP_PART_MODEL
int mp_cu_main(int argc, char **argv, MpModel *m, const MpCuModel *cm);
#else
MP_PART_FN int mp_cu_main(int argc, char **argv, MpModel *m, const MpCuModel *cm)
{
    m->cast_params = mp_cu_cast_params;
    m->forward = mp_cu_forward;
    m->backward = mp_cu_backward;
    m->device = &mp_cu_device;
    mp_cu.model = cm;
    return mp_main(argc, argv, m);
}
#endif

#endif
