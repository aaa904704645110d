/* cost.c - the cost of one training step before running it (cost.h).
 *
 * The roofline of each op: its time is the larger of FLOPs over the peak
 * rate of the type it computes in and bytes over the memory bandwidth,
 * plus a launch overhead per kernel; the step's time is the sum (one
 * stream: ops do not overlap). A step is `accumulate` micro-batches of the
 * forward and backward passes, then once the hoisted casts of the
 * parameters' working copies, the unscale, clip and optimizer nodes.
 *
 * Counting rules (what the numbers mean):
 *   FLOPs    a multiply-add is 2. Products: 2 M N K (linear and conv2d
 *            add their bias, one per output); attention 4 B H P D forward
 *            (q k^T and P v) and 8 B H P D backward (dv, dP, dq, dk), P
 *            the (query, key) pairs a query sees (causal: key <= query),
 *            the model's FLOPs: the kernels' recomputation of the scores
 *            in the backward pass is not counted. Elementwise ops 1 per
 *            output element (softmax 5, norms 8, cross-entropy 5 per logit,
 *            adam / adamw 12, sgd 4 per parameter element); copies 0.
 *   bytes    every input read once and the output written once, at their
 *            storage types; views (reshape, flatten) nothing; embedding
 *            reads only the rows it gathers; inside a fusion group
 *            (fuse.c) values kept in registers are neither written nor
 *            read back, and the group is one launch; the optimizer reads
 *            and writes the f32 master, its state (adam: m, v; sgd with
 *            momentum: the buffer) and writes the working copies.
 *   rates    products computing in f16 / bf16 run at the Tensor Cores'
 *            dense rate of that type; f32 products at the CUDA cores' f32
 *            rate, or under float32_matmul "tf32" (prec_tf32: cuBLAS's
 *            TF32 mode) at the TF32 Tensor Core rate; every other op at
 *            the f32 rate. The table's fp8 rates are there for
 *            completeness: no op of mpcc uses them yet.
 *   MFU      the step's FLOPs over (peak of the policy's compute type x
 *            predicted time): bf16 / f16 Tensor Cores, or f32 for float32
 *            (tf32 under float32_matmul "tf32").
 * The prediction leaves out what overlaps or hides (graph replay makes a
 * launch cheaper than eager launches; caches make re-reads cheaper) and
 * the kernels' own efficiency (no GEMM reaches its peak): it is a bound,
 * a floor under the real step time, to compare models and devices by. */
#include "cost.h"
#include "fuse.h"
#include "ops.h"
#include "plan.h"
#include "prec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the device table ----------------------------------------------------------- */

#define T_ (1e12)                  /* TFLOP/s */
#define GBS (1e9)                  /* GB/s */
#define US (1e-6)                  /* microseconds */

/* Peak dense rates (no 2:4 sparsity) from NVIDIA's data sheets, SXM parts
 * where there are several; launch: a kernel launched from a CUDA graph on
 * the device, about 2 us (eager launches take 3 to 5). */
static const CostDevice devices[] = {
    /* key    name                       f32       tf32       f16         bf16        fp8          bandwidth    launch */
    {"h100", "NVIDIA H100 SXM5 80GB",  66.9 * T_, 494.7 * T_, 989.4 * T_, 989.4 * T_, 1978.9 * T_, 3350 * GBS, 2 * US},
    {"h200", "NVIDIA H200 SXM 141GB",  66.9 * T_, 494.7 * T_, 989.4 * T_, 989.4 * T_, 1978.9 * T_, 4800 * GBS, 2 * US},
    {"a100", "NVIDIA A100 SXM4 80GB",  19.5 * T_, 156.0 * T_, 312.0 * T_, 312.0 * T_, 0,           2039 * GBS, 2 * US},
    {"l4",   "NVIDIA L4",              30.3 * T_, 60.0 * T_,  121.0 * T_, 121.0 * T_, 242.0 * T_,  300 * GBS,  2 * US},
};

#define NDEV ((int)(sizeof devices / sizeof devices[0]))

/* "cpu": the machine mpcc runs on, for the C program (OpenMP over every
 * core): cores x clock x f32 lanes of its widest vector unit (AVX-512 16,
 * AVX2 8, else 4) x 2 (FMA) x 2 FMA units per core; every type at that
 * rate (the C program computes lowp products in f32); bandwidth a rough
 * 10 GB/s per core, at most 100 GB/s; a "launch" (a kernel's call and
 * its threads' start) 1 us. */
static CostDevice cpu_device(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    double mhz = 0;
    int lanes = 4;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[4096];
        while (fgets(line, sizeof line, f)) {
            if (mhz == 0 && strncmp(line, "cpu MHz", 7) == 0 && strchr(line, ':'))
                mhz = atof(strchr(line, ':') + 1);
            if (strncmp(line, "flags", 5) == 0) {
                if (strstr(line, " avx512f"))
                    lanes = lanes > 16 ? lanes : 16;
                else if (strstr(line, " avx2"))
                    lanes = lanes > 8 ? lanes : 8;
            }
        }
        fclose(f);
    }
    if (cores < 1)
        cores = 1;
    if (mhz <= 0)
        mhz = 3000;                /* no clock in /proc/cpuinfo: 3 GHz */
    double peak = (double)cores * mhz * 1e6 * lanes * 2 * 2;
    double bw = (double)cores * 10 * GBS;
    static char name[96];
    snprintf(name, sizeof name, "this machine's CPU: %ld cores at %.2f GHz, %d f32 lanes", cores,
             mhz / 1e3, lanes);
    CostDevice d = {"cpu", name, peak, peak, peak, peak, peak, bw < 100 * GBS ? bw : 100 * GBS, 1 * US};
    return d;
}

const CostDevice *cost_device(const char *key)
{
    static CostDevice cpu;
    for (int i = 0; i < NDEV; i++)
        if (strcmp(key, devices[i].key) == 0)
            return &devices[i];
    if (strcmp(key, "cpu") == 0) {
        cpu = cpu_device();
        return &cpu;
    }
    return NULL;
}

const char *cost_device_keys(void) { return "h100, h200, a100, l4 or cpu"; }

static double peak_of(const CostDevice *d, DType t, bool tf32)
{
    double r = t == DT_F16 ? d->f16 : t == DT_BF16 ? d->bf16 : tf32 ? d->tf32 : d->f32;
    return r > 0 ? r : d->f32;
}

/* ---- one op ------------------------------------------------------------------------ */

static double numel(const IrNode *n) { return (double)shape_numel(&n->shape); }
static double bytes(const IrNode *n) { return numel(n) * dt_size(n->type); }

/* n's value lives in a register of its fusion group (memplan.c's BUF_NONE):
 * never written, and read only inside the group. */
static bool in_register(const IrNode *n)
{
    return n->fused_internal && !(n == n->fused_first && fuse_is_product(n));
}

/* (query, key) pairs attention computes: every pair, or causal key <= query. */
static double att_pairs(double T, double Tk, bool causal)
{
    if (!causal)
        return T * Tk;
    double full = T < Tk ? T : Tk;  /* queries 0..full-1 see i + 1 keys, the rest Tk */
    return full * (full + 1) / 2 + (T - full) * Tk;
}

/* FLOPs of attention's products per pair and head dimension: 4 forward, 8 backward. */
static double att_flops(const IrNode *f, double per)
{
    IrAttn a = ir_attention(f);
    return per * (double)(a.B * a.H) * att_pairs((double)a.T, (double)a.Tk, f->ia[0] != 0) *
           (double)a.D;
}

/* The work of the CUDA program's attention kernels, in FLOPs (time is
 * work over the rate; the table's FLOPs stay the model's):
 *   f16 / bf16, head size up to 64 (MP_CU_FA_DMAX): Tensor Cores
 *     (runtime/mp_cuda_flash.h), per (query, key) pair of every tile of
 *     64 x 64 walked (causal: the tiles at or left of the diagonal), D'
 *     = D rounded up to 16, 32 or 64: 4 D' forward, 14 D' backward (16
 *     with dropout at D' 64: dk's and dv's kernels apart, the scores twice);
 *   otherwise the f32 tiles (mp_cuda_ops.h) on CUDA cores, per pair: 6 D
 *     forward (the scores for the max and sum, again for P; P v), 20 D
 *     backward (attention_grad_q: the scores three times, dP twice, dq;
 *     attention_grad_kv: the scores, dP, dv, dk). */
static double att_work(const IrNode *n, bool *tc)
{
    bool fwd = n->op == OP_ATTENTION, causal;
    const IrNode *f = fwd ? n : n->grad_of;
    IrAttn a = ir_attention(f);
    double bh = (double)(a.B * a.H), D = (double)a.D;
    int64_t T = a.T, Tk = a.Tk;
    causal = f->ia[0] != 0;
    *tc = ir_attention_tc(f);
    if (!*tc)
        return (fwd ? 6 : 20) * bh * att_pairs((double)T, (double)Tk, causal) * D;
    int64_t dp = D <= 16 ? 16 : D <= 32 ? 32 : 64;
    double pairs = 0;
    for (int64_t i0 = 0; i0 < T; i0 += 64) {
        int64_t keys = causal && i0 + 64 < Tk ? i0 + 64 : Tk;
        pairs += 64.0 * (double)((keys + 63) / 64 * 64);
    }
    return (fwd ? 4 : f->fa[1] > 0 && dp == 64 ? 16 : 14) * bh * pairs * (double)dp;
}

/* Per-element FLOPs of the ops that are not products or copies. */
static double elem_flops(IrOp op)
{
    switch (op) {
    case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_SOFTMAX_GRAD: case OP_LOG_SOFTMAX_GRAD:
    case OP_CROSS_ENTROPY: case OP_CROSS_ENTROPY_GRAD:
        return 5;
    case OP_LAYER_NORM: case OP_LAYER_NORM_DX: case OP_LAYER_NORM_DW: case OP_BATCH_NORM:
    case OP_BATCH_NORM_DX: case OP_BATCH_NORM_DW: case OP_RMS_NORM: case OP_RMS_NORM_DX:
    case OP_RMS_NORM_DW: case OP_GROUP_NORM: case OP_GROUP_NORM_DX: case OP_GROUP_NORM_DW:
        return 8;
    case OP_ADAM: case OP_ADAMW:
        return 12;
    case OP_SGD:
        return 4;
    case OP_RMSPROP:                          /* centered with momentum: 10 */
        return 10;
    case OP_CHUNK: case OP_SLICE: case OP_CONCAT: case OP_EXPAND: case OP_ARANGE:
    case OP_TRANSPOSE: case OP_SLICE_GRAD: case OP_CAST: case OP_EMBEDDING: case OP_PAD: case OP_PAD_GRAD:
    case OP_ONE_HOT: case OP_GATHER:
        return 0;
    default:
        return 1;
    }
}

CostOp cost_op(const IrGraph *g, const IrNode *n)
{
    CostOp c = {.launches = 1, .unit = DT_F32};
    switch (n->op) {
    case OP_INPUT: case OP_PARAM: case OP_CONST: case OP_RESHAPE: case OP_FLATTEN:
        c.launches = 0;            /* no work: leaves and views */
        return c;
    case OP_CHUNK:
        if (ir_chunk_view(g, n)) { /* attention reads it in place */
            c.launches = 0;
            return c;
        }
        break;
    default:
        break;
    }
    /* bytes: inputs read, output written, values kept in registers aside */
    for (int i = 0; i < n->nin; i++)
        if (!(in_register(n->in[i]) && n->in[i]->fused == n->fused))
            c.rd += bytes(n->in[i]);
    c.wr = in_register(n) ? 0 : bytes(n);
    if (n->fused && fuse_last(g, n) != n && !(n == n->fused_first && fuse_is_product(n)))
        c.launches = 0;            /* the group runs where its last node stands */
    double out = numel(n), per;
    bool tc = false;               /* attention: on Tensor Cores */
    switch (n->op) {
    case OP_MATMUL: {
        ProductDims d = fuse_matmul_dims(n);
        c.flops = 2.0 * (double)d.batch * (double)d.m * (double)d.n * (double)d.k;
        c.product = true;
        break;
    }
    case OP_LINEAR:                /* x [..., K] weight [N, K] */
        c.flops = 2.0 * out * (double)n->in[0]->shape.d[n->in[0]->shape.rank - 1]
                + (n->nin > 2 ? out : 0);
        c.product = true;
        break;
    case OP_MATMUL_TN: {           /* a [..., K] b [..., N] -> [K, N] over the leading axes */
        const Shape *a = &n->in[0]->shape;
        double K = (double)a->d[a->rank - 1];
        c.flops = 2.0 * out * (numel(n->in[0]) / K);
        c.product = true;
        break;
    }
    case OP_CONV2D:                /* 2 out Cin k k, + bias */
        per = numel(n->in[1]) / (double)n->in[1]->shape.d[0];
        c.flops = 2.0 * out * per + (n->nin > 2 ? out : 0);
        c.product = true;
        break;
    case OP_CONV2D_DX:             /* (dy, weight): 2 |dy| Cin k k */
        c.flops = 2.0 * numel(n->in[0]) * numel(n->in[1]) / (double)n->in[1]->shape.d[0];
        c.product = true;
        break;
    case OP_CONV2D_DW:             /* (dy, x) -> weight [c, Cin, k, k] */
        c.flops = 2.0 * numel(n->in[0]) * out / (double)n->shape.d[0];
        c.product = true;
        break;
    case OP_CONV_TRANSPOSE2D:      /* 2 |x| (c/G) k k, + bias: conv2d_dx's product */
    case OP_CONV_TRANSPOSE2D_DX:   /* the conv2d of dy: 2 |x| (c/G) k k */
    case OP_CONV_TRANSPOSE2D_DW: { /* (dy, x): 2 |x| (c/G) k k */
        const IrNode *f = n->op == OP_CONV_TRANSPOSE2D ? n : n->grad_of;
        c.flops = 2.0 * numel(f->in[0]) * numel(f->in[1]) / (double)f->in[1]->shape.d[0]
                + (n->op == OP_CONV_TRANSPOSE2D && n->nin > 2 ? out : 0);
        c.product = true;
        break;
    }
    case OP_UPSAMPLE: case OP_UPSAMPLE_GRAD:   /* per output (dy) element: bilinear 4
                                                  weighted reads, nearest a copy (an add) */
        c.flops = (n->ia[2] ? 8.0 : n->op == OP_UPSAMPLE ? 0.0 : 1.0) *
                  (n->op == OP_UPSAMPLE ? out : numel(n->in[0]));
        break;
    case OP_ATTENTION:
        c.flops = att_flops(n, 4);
        c.work = att_work(n, &tc);
        c.product = true;
        break;
    case OP_ATTENTION_GRAD:        /* (dy, q, k, v) */
        c.flops = att_flops(n->grad_of, 8);
        c.work = att_work(n, &tc);
        c.product = true;
        break;
    case OP_GRU: case OP_LSTM:     /* (gi [B, T, G], w_hh [G, H]): a product per step + cells */
        c.flops = 2.0 * numel(n->in[0]) * (double)n->in[1]->shape.d[1] + 10.0 * out;
        c.launches = 2 * (int)n->shape.d[1];
        c.product = true;
        break;
    case OP_GRU_GRAD: case OP_LSTM_GRAD: {   /* the steps' products, dW_hh, the cells */
        const IrNode *gi = n->grad_of->in[0];
        c.flops = 4.0 * numel(gi) * (double)n->in[2]->shape.d[1] + 20.0 * numel(n->in[1]);
        c.launches = 2 * (int)gi->shape.d[1] + (int)gi->shape.d[0];
        c.product = true;
        break;
    }
    case OP_EMBEDDING:             /* (ids, weight): the rows gathered */
        c.rd = bytes(n->in[0]) + out * dt_size(n->in[1]->type);
        break;
    case OP_EMBEDDING_DW:          /* a scatter-add of dy's rows */
        c.flops = numel(n->in[0]);
        break;
    case OP_SUM: case OP_MEAN: case OP_CHANNEL_SUM: case OP_SUM_TO: case OP_ACCURACY:
    case OP_MSE: case OP_GLOBAL_AVG_POOL:
        c.flops = numel(n->in[0]);
        break;
    case OP_CROSS_ENTROPY: case OP_LAYER_NORM_DW: case OP_BATCH_NORM_DW: case OP_RMS_NORM_DW:
    case OP_GROUP_NORM_DW:
    case OP_BATCH_NORM:
        c.flops = elem_flops(n->op) * numel(n->in[0]);
        break;
    case OP_MAX_POOL2D: case OP_AVG_POOL2D:
        c.flops = out * (double)n->ia[0] * (double)n->ia[0];
        break;
    case OP_TOPK:                  /* one pass, each element against up to k kept */
        c.flops = numel(n->in[0]) * (double)n->ia[1];
        break;
    case OP_GATHER:                /* (x, index): the elements gathered */
        c.rd = bytes(n->in[1]) + out * dt_size(n->in[0]->type);
        break;
    case OP_GATHER_GRAD:           /* zeros, then a scatter-add of dy */
        c.flops = numel(n->in[0]);
        break;
    case OP_UNSCALE: case OP_CLIP_GRAD_NORM: {   /* every gradient, in place */
        double all = 0;
        for (int i = 0; i < n->nin; i++)
            all += bytes(n->in[i]);
        c.rd = n->op == OP_CLIP_GRAD_NORM ? 2 * all : all;   /* the norm, then the scaling */
        c.wr = all;
        c.flops = 2 * all / 4;
        break;
    }
    case OP_SGD: case OP_ADAM: case OP_ADAMW: case OP_RMSPROP: {  /* (param, grad) */
        double p = numel(n->in[0]), state = opt_slots(&g->train);
        c.rd = p * 4 * (2 + state);                /* master, gradient, state */
        c.wr = p * 4 * (1 + state);
        for (int i = 0; i < g->nnodes; i++) {      /* its working copies */
            const IrNode *w = g->nodes[i];
            if (w->op == OP_CAST && w->hoisted && w->in[0] == n->in[0])
                c.wr += bytes(w);
        }
        c.flops = elem_flops(n->op) * p;
        break;
    }
    default:
        c.flops = elem_flops(n->op) * out;
        break;
    }
    if (c.product)
        c.unit = (n->compute == DT_F16 || n->compute == DT_BF16) && (tc || !c.work) ? n->compute : DT_F32;
    c.tf32 = c.product && prec_tf32(g, n);
    return c;
}

/* ---- the step ---------------------------------------------------------------------- */

typedef struct Row {
    const IrNode *n;
    CostOp c;
    double runs;                   /* per step */
    double t_flops, t_bytes, time; /* one run's roofline terms; time per step */
} Row;

typedef struct Step {
    Row *rows;
    int nrows;
    double flops, rd, wr, time, top10, mfu, peak;
    double t_compute, t_memory, t_launch;   /* time per step by what bounds each op */
    int launches;
    DType policy;
    bool tf32;                     /* the policy's peak is TF32's (float32_matmul) */
} Step;

/* What bounds an op's time: the largest of its three terms. */
static const char *bound_of(const Row *r, const CostDevice *dev)
{
    double launch = r->c.launches * dev->launch;
    if (launch > r->t_flops && launch > r->t_bytes)
        return "launch";
    return r->t_flops >= r->t_bytes ? "compute" : "memory";
}

static int by_time_desc(const void *pa, const void *pb)
{
    const Row *a = *(const Row *const *)pa, *b = *(const Row *const *)pb;
    if (a->time != b->time)
        return a->time < b->time ? 1 : -1;
    return a->n->id - b->n->id;
}

static Step measure(const IrGraph *g, const CostDevice *dev)
{
    Step s = {0};
    s.rows = arena_alloc(g->arena, sizeof *s.rows * (size_t)(g->nnodes ? g->nnodes : 1));
    double acc = g->train.accumulate > 0 ? (double)g->train.accumulate : 1;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        CostOp c = cost_op(g, n);
        if (c.launches == 0 && c.flops == 0 && c.rd + c.wr == 0)
            continue;              /* no work */
        Row *r = &s.rows[s.nrows++];
        r->n = n;
        r->c = c;
        r->runs = n->phase == PH_OPTIMIZER || n->hoisted ? 1 : acc;
        bool gpu = strcmp(dev->key, "cpu") != 0;   /* work: the CUDA program's kernels */
        r->t_flops = (gpu && c.work > 0 ? c.work : c.flops) / peak_of(dev, c.unit, c.tf32);
        r->t_bytes = (c.rd + c.wr) / dev->bandwidth;
        double roof = r->t_flops > r->t_bytes ? r->t_flops : r->t_bytes;
        r->time = r->runs * (roof + c.launches * dev->launch);
        s.flops += r->runs * c.flops;
        s.rd += r->runs * c.rd;
        s.wr += r->runs * c.wr;
        s.time += r->time;
        s.launches += (int)r->runs * c.launches;
        s.t_launch += r->runs * c.launches * dev->launch;
        if (r->t_flops >= r->t_bytes)
            s.t_compute += r->runs * roof;
        else
            s.t_memory += r->runs * roof;
    }
    const Row **order = arena_alloc(g->arena, sizeof *order * (size_t)(s.nrows ? s.nrows : 1));
    for (int i = 0; i < s.nrows; i++)
        order[i] = &s.rows[i];
    qsort(order, (size_t)s.nrows, sizeof *order, by_time_desc);
    for (int i = 0; i < s.nrows && i < 10; i++)
        s.top10 += order[i]->time;
    s.top10 = s.time > 0 ? s.top10 / s.time : 0;
    s.policy = g->train.policy == POLICY_MIXED_F16 ? DT_F16
             : g->train.policy == POLICY_MIXED_BF16 || g->train.policy == POLICY_MIXED_F8 ? DT_BF16
             : DT_F32;   /* mixed_float8: its products costed at bf16 until its program quantises */
    s.tf32 = g->train.tf32 && s.policy == DT_F32;
    s.peak = peak_of(dev, s.policy, s.tf32);
    s.mfu = s.time > 0 ? s.flops / (s.peak * s.time) : 0;
    return s;
}

/* ---- output -------------------------------------------------------------------------- */

static const char *phase_name(Phase p)
{
    return p == PH_FORWARD ? "forward" : p == PH_BACKWARD ? "backward" : "optimizer";
}

static const char *unit_name(DType t, bool tf32)
{
    return t == DT_F16 ? "f16 tensor" : t == DT_BF16 ? "bf16 tensor" : tf32 ? "tf32 tensor" : "f32";
}

static void dump_json(FILE *out, const IrGraph *g, const CostDevice *dev, const Step *s)
{
    fputs("{\n  \"model\": ", out);
    plan_json_string(out, g->model);
    fputs(",\n  \"device\": {\"key\": ", out);
    plan_json_string(out, dev->key);
    fputs(", \"name\": ", out);
    plan_json_string(out, dev->name);
    fprintf(out, ", \"f32_flops\": %.6g, \"tf32_flops\": %.6g, \"f16_flops\": %.6g, "
            "\"bf16_flops\": %.6g, \"fp8_flops\": %.6g, \"bandwidth\": %.6g, \"launch_s\": %.6g},\n",
            dev->f32, dev->tf32, dev->f16, dev->bf16, dev->fp8, dev->bandwidth, dev->launch);
    fprintf(out, "  \"accumulate\": %lld,\n  \"ops\": [", (long long)(g->train.accumulate > 0 ? g->train.accumulate : 1));
    for (int i = 0; i < s->nrows; i++) {
        const Row *r = &s->rows[i];
        fprintf(out, "%s\n    {\"id\": %d, \"op\": ", i ? "," : "", r->n->id);
        plan_json_string(out, op_info[r->n->op].name);
        fputs(", \"name\": ", out);
        plan_json_string(out, r->n->name);
        fprintf(out, ", \"line\": %d, \"phase\": \"%s\", \"compute\": \"%s\", \"product\": %s, "
                "\"flops\": %.17g, \"bytes_read\": %.17g, \"bytes_written\": %.17g, "
                "\"launches\": %d, \"runs\": %.17g, \"time_s\": %.6g, \"bound\": \"%s\"}",
                r->n->loc.line, phase_name(r->n->phase), r->c.tf32 ? "tf32" : dt_name(r->c.unit),
                r->c.product ? "true" : "false", r->c.flops, r->c.rd, r->c.wr, r->c.launches,
                r->runs, r->time, bound_of(r, dev));
    }
    fprintf(out, "\n  ],\n  \"step\": {\"flops\": %.17g, \"bytes_read\": %.17g, \"bytes_written\": %.17g, "
            "\"launches\": %d, \"time_s\": %.6g, \"compute_s\": %.6g, \"memory_s\": %.6g, "
            "\"launch_s\": %.6g, \"top10_share\": %.6g, \"peak_flops\": %.6g, \"peak_type\": \"%s\", "
            "\"mfu\": %.6g}\n}\n",
            s->flops, s->rd, s->wr, s->launches, s->time, s->t_compute, s->t_memory, s->t_launch,
            s->top10, s->peak, s->tf32 ? "tf32" : dt_name(s->policy), s->mfu);
}

static void dump_text(FILE *out, const IrGraph *g, const CostDevice *dev, const Step *s)
{
    fprintf(out, "cost of one step of model '%s' on %s (%s): peak %.4g TFLOP/s f32, %.4g f16, "
            "%.4g bf16%s; %.4g GB/s; %.3g us a launch\n", g->model, dev->key, dev->name,
            dev->f32 / T_, dev->f16 / T_, dev->bf16 / T_,
            dev->f16 != dev->f32 ? " (Tensor Cores, dense)" : "", dev->bandwidth / GBS, dev->launch / US);
    fprintf(out, "one step: %lld micro-batch(es) of %lld samples; roofline per op: max(FLOPs / "
            "peak of its compute type, bytes / bandwidth) + launches\n\n",
            (long long)(g->train.accumulate > 0 ? g->train.accumulate : 1), (long long)g->batch);
    fprintf(out, "%5s  %-20s %-9s %-11s %12s %10s %10s %5s %11s  %-7s %s\n", "id", "op", "phase",
            "compute", "MFLOP", "KB read", "KB written", "runs", "us / step", "bound", "value");
    for (int i = 0; i < s->nrows; i++) {
        const Row *r = &s->rows[i];
        fprintf(out, "%5d  %-20s %-9s %-11s %12.3f %10.1f %10.1f %5.0f %11.3f  %-7s %s:%d%s%s\n",
                r->n->id, op_info[r->n->op].name, phase_name(r->n->phase), unit_name(r->c.unit, r->c.tf32),
                r->c.flops / 1e6, r->c.rd / 1e3, r->c.wr / 1e3, r->runs, r->time / US,
                bound_of(r, dev), r->n->loc.file ? r->n->loc.file->path : "?", r->n->loc.line,
                r->n->name ? " " : "", r->n->name ? r->n->name : "");
    }
    fprintf(out, "\nstep: %.6g GFLOP, %.6g GB read, %.6g GB written, %d launches\n", s->flops / 1e9,
            s->rd / 1e9, s->wr / 1e9, s->launches);
    fprintf(out, "predicted step time: %.6g ms (compute-bound ops %.3g ms, memory-bound %.3g ms, "
            "launches %.3g ms)\n", s->time * 1e3, s->t_compute * 1e3, s->t_memory * 1e3,
            s->t_launch * 1e3);
    fprintf(out, "the ten costliest ops: %.1f%% of the step time\n", 100 * s->top10);
    fprintf(out, "MFU: %.1f%% (the step's FLOPs over %.4g TFLOP/s %s x the predicted time)\n",
            100 * s->mfu, s->peak / T_, s->tf32 ? "tf32" : dt_name(s->policy));
}

void cost_dump(FILE *out, const IrGraph *g, const CostDevice *dev, bool json)
{
    Step s = measure(g, dev);
    if (json)
        dump_json(out, g, dev, &s);
    else
        dump_text(out, g, dev, &s);
}
