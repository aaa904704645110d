/* ir.c - building the graph IR (see ir.h for its invariants). */
#include "ir.h"
#include "ops.h"

#include <stdio.h>
#include <string.h>

static const char *const dt_names[] = {"none", "f32", "f16", "bf16", "i32", "u8", "u16"};
static const int dt_sizes[] = {0, 4, 2, 2, 4, 1, 2};

const char *dt_name(DType t) { return dt_names[t]; }
int dt_size(DType t) { return dt_sizes[t]; }
bool dt_is_float(DType t) { return t == DT_F32 || t == DT_F16 || t == DT_BF16; }

int64_t shape_numel(const Shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->d[i];
    return n;
}

bool shape_eq(const Shape *a, const Shape *b)
{
    if (a->rank != b->rank)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->d[i] != b->d[i])
            return false;
    return true;
}

char *shape_str(Arena *a, const Shape *s)
{
    char buf[MP_MAX_RANK * 24 + 4];
    int n = snprintf(buf, sizeof buf, "[");
    for (int i = 0; i < s->rank; i++)
        n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%lld", i ? ", " : "",
                      (long long)s->d[i]);
    snprintf(buf + n, sizeof buf - (size_t)n, "]");
    return arena_strdup(a, buf);
}

bool ir_attention_tc(const IrNode *n)
{
    return n->op == OP_ATTENTION && (n->compute == DT_F16 || n->compute == DT_BF16) &&
           n->in[0]->shape.d[3] <= 64;
}

IrAttn ir_attention(const IrNode *f)
{
    const Shape *q = &f->in[0]->shape, *k = &f->in[1]->shape;
    IrAttn a = {q->d[0], 0, 0, 0, q->d[3], f->ia[3] != 0, f->ia[4] != 0, IR_GLAY_BHTD};
    int t = a.qkv_bthd ? 1 : 2;
    a.H = q->d[3 - t];
    a.T = q->d[t];
    a.Tk = k->d[t];
    if (a.qkv_bthd)
        a.glay = a.T == a.Tk ? IR_GLAY_BT3HD : IR_GLAY_BTHD;
    return a;
}

/* Its output, dq, dk and dv side by side (ir.h IrAttn's glay) */
Shape ir_attention_grad_shape(const IrNode *f)
{
    IrAttn a = ir_attention(f);
    Shape s = f->in[0]->shape;
    if (a.glay == IR_GLAY_BHTD)
        s.d[2] = a.T + 2 * a.Tk;
    else if (a.glay == IR_GLAY_BTHD)
        s.d[1] = a.T + 2 * a.Tk;
    else
        s = (Shape){5, {a.B, a.T, 3, a.H, a.D}};
    return s;
}

/* r is read, and read only, as q, k or v (inputs 0-2 of an attention,
 * 1-3 of its gradient) of attentions in the [B, T, H, D] layout; by at
 * least one. */
static bool read_as_qkv(const IrGraph *g, const IrNode *r)
{
    int reads = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        const IrNode *f = n->op == OP_ATTENTION_GRAD ? n->grad_of : n;
        int lo = n->op == OP_ATTENTION ? 0 : 1;
        for (int k = 0; k < n->nin; k++) {
            if (n->in[k] != r)
                continue;
            if ((n->op != OP_ATTENTION && n->op != OP_ATTENTION_GRAD) || !f || !f->ia[3] ||
                k < lo || k > lo + 2)
                return false;
            reads++;
        }
    }
    return reads > 0 && r != g->loss;
}

bool ir_chunk_view(const IrGraph *g, const IrNode *c)
{
    if (c->op != OP_CHUNK || c->fused || c->hoisted || c->phase == PH_OPTIMIZER)
        return false;
    const IrNode *x = c->in[0];
    int last = x->shape.rank - 1;
    switch (x->op) {
    case OP_PARAM: case OP_INPUT: case OP_CONST: case OP_RESHAPE: case OP_FLATTEN:
    case OP_DETACH: case OP_CHUNK:
        return false;             /* only where a kernel wrote x, densely */
    default:
        break;
    }
    if (c->ia[0] != last || c->type != x->type || x->fused_internal || c == g->loss)
        return false;
    int reads = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *r = g->nodes[i];
        for (int k = 0; k < r->nin; k++) {
            if (r->in[k] != c)
                continue;
            if (r->op != OP_RESHAPE || r->fused || r->shape.rank != 4 ||
                r->shape.d[2] * r->shape.d[3] != c->shape.d[last] || !read_as_qkv(g, r))
                return false;
            reads++;
        }
    }
    for (int m = 0; m < g->nmetrics; m++)
        if (g->metrics[m].node == c)
            return false;
    return reads > 0;
}

int64_t ir_view_stride(const IrGraph *g, const IrNode *v)
{
    while (v->op == OP_RESHAPE)
        v = v->in[0];
    return ir_chunk_view(g, v) ? v->in[0]->shape.d[v->in[0]->shape.rank - 1] : 0;
}

int64_t ir_stats_at(const IrNode *n)
{
    if ((n->op != OP_ATTENTION && n->op != OP_CROSS_ENTROPY) || !n->ia[2])
        return 0;
    return (shape_numel(&n->shape) * dt_size(n->type) + 15) / 16 * 16;
}

int64_t ir_stats_bytes(const IrNode *n)
{
    if (!ir_stats_at(n))
        return 0;
    if (n->op == OP_ATTENTION)   /* [B, H, T, D]: a float a row */
        return shape_numel(&n->shape) / n->shape.d[3] * (int64_t)sizeof(float);
    return shape_numel(&n->in[1]->shape) * 2 * (int64_t)sizeof(float);   /* a label a row */
}

int opt_slots(const TrainCfg *t)
{
    switch (t->opt) {
    case OPT_SGD:
        return t->momentum != 0;
    case OPT_RMSPROP:                 /* square_avg, momentum_buffer, grad_avg */
        return 1 + (t->momentum != 0) + t->centered;
    default:
        return 2;                     /* exp_avg, exp_avg_sq */
    }
}

IrGraph *ir_new(Arena *a)
{
    IrGraph *g = arena_alloc(a, sizeof *g);
    g->arena = a;
    g->train.opt = OPT_ADAM;
    g->train.lr = 1e-3;
    g->train.beta1 = 0.9;
    g->train.alpha = 0.99;
    g->train.beta2 = 0.999;
    g->train.eps = 1e-8;
    g->train.policy = POLICY_MIXED_F16;
    g->train.ls_init = 32768;
    g->train.ls_growth = 2;
    g->train.ls_backoff = 0.5;
    g->train.ls_interval = 2000;
    g->train.accumulate = 1;
    g->train.steps = 1000;
    g->train.fp8_history = 16;
    return g;
}

static IrNode *new_node(IrGraph *g, IrOp op, SrcLoc loc, int nin, IrNode *const *in)
{
    IrNode *n = arena_alloc(g->arena, sizeof *n);
    n->op = op;
    n->loc = loc;
    n->nin = nin;
    n->in = arena_alloc(g->arena, sizeof(IrNode *) * (size_t)(nin ? nin : 1));
    for (int i = 0; i < nin; i++) {
        MP_ASSERT(in[i] != NULL);
        n->in[i] = in[i];
    }
    n->cls = op_info[op].cls;
    n->scope = g->scope;
    return n;
}

IrScope *ir_scope_enter(IrGraph *g, ScopeKind kind, const char *name, const char *block,
                        int copy, int count)
{
    IrScope *s = arena_alloc(g->arena, sizeof *s);
    *s = (IrScope){kind, name, block, copy, count, ++g->nscopes, g->scope};
    g->scope = s;
    return s;
}

void ir_scope_leave(IrGraph *g)
{
    MP_ASSERT(g->scope != NULL);
    g->scope = (IrScope *)g->scope->parent;
}

static void reserve(IrGraph *g, int extra)
{
    if (g->nnodes + extra <= g->cap)
        return;
    int cap = g->cap ? g->cap * 2 : 64;
    while (cap < g->nnodes + extra)
        cap *= 2;
    g->nodes = arena_grow(g->arena, g->nodes, (size_t)g->nnodes, (size_t)cap, sizeof *g->nodes);
    g->cap = cap;
}

IrNode *ir_add(IrGraph *g, IrOp op, SrcLoc loc, int nin, IrNode *const *in)
{
    IrNode *n = new_node(g, op, loc, nin, in);
    reserve(g, 1);
    n->id = g->nnodes;
    g->nodes[g->nnodes++] = n;
    return n;
}

IrNode *ir_add1(IrGraph *g, IrOp op, SrcLoc loc, IrNode *a) { return ir_add(g, op, loc, 1, &a); }

int ir_loop_add(IrGraph *g, const char *var, int64_t from)
{
    if (g->nloops == g->loops_cap) {
        int cap = g->loops_cap ? g->loops_cap * 2 : 8;
        g->loops = arena_grow(g->arena, g->loops, (size_t)g->nloops, (size_t)cap, sizeof *g->loops);
        g->loops_cap = cap;
    }
    g->loops[g->nloops] = (IrLoop){var, from};
    return ++g->nloops;
}

IrNode *ir_add2(IrGraph *g, IrOp op, SrcLoc loc, IrNode *a, IrNode *b)
{
    IrNode *in[2] = {a, b};
    return ir_add(g, op, loc, 2, in);
}

static IrNode *insert(IrGraph *g, IrNode *anchor, bool after, IrOp op, SrcLoc loc, int nin,
                      IrNode *const *in)
{
    IrNode *n = new_node(g, op, loc, nin, in);
    MP_ASSERT(anchor->id >= 0 && anchor->id < g->nnodes && g->nodes[anchor->id] == anchor);
    if (g->npend == g->pend_cap) {
        int cap = g->pend_cap ? g->pend_cap * 2 : 64;
        g->pend = arena_grow(g->arena, g->pend, (size_t)g->npend, (size_t)cap, sizeof *g->pend);
        g->pend_anchor = arena_grow(g->arena, g->pend_anchor, (size_t)g->npend, (size_t)cap,
                                    sizeof *g->pend_anchor);
        g->pend_cap = cap;
    }
    n->id = -1;
    n->rep = anchor->rep;
    n->copy = anchor->copy;
    n->scope = anchor->scope;
    g->pend[g->npend] = n;
    g->pend_anchor[g->npend++] = after ? -anchor->id - 1 : anchor->id;
    return n;
}

IrNode *ir_insert_before(IrGraph *g, IrNode *before, IrOp op, SrcLoc loc, int nin,
                         IrNode *const *in)
{
    return insert(g, before, false, op, loc, nin, in);
}

IrNode *ir_insert_after(IrGraph *g, IrNode *after, IrOp op, SrcLoc loc, int nin,
                        IrNode *const *in)
{
    return insert(g, after, true, op, loc, nin, in);
}

/* Place the pending insertions: a stable counting sort of them by slot
 * (2 per node: before it, after it), merged with the nodes. */
static void place_pending(IrGraph *g)
{
    int n = g->nnodes, k = g->npend;
    int *start = arena_alloc(g->arena, sizeof *start * (size_t)(2 * n + 1));
    for (int i = 0; i < k; i++) {
        int a = g->pend_anchor[i], slot = a >= 0 ? 2 * a : 2 * (-a - 1) + 1;
        start[slot + 1]++;
    }
    for (int s = 0; s < 2 * n; s++)
        start[s + 1] += start[s];
    IrNode **sorted = arena_alloc(g->arena, sizeof *sorted * (size_t)k);
    for (int i = 0; i < k; i++) {
        int a = g->pend_anchor[i], slot = a >= 0 ? 2 * a : 2 * (-a - 1) + 1;
        sorted[start[slot]++] = g->pend[i];
    }
    /* start[s] is now the end of slot s */
    IrNode **old = arena_alloc(g->arena, sizeof *old * (size_t)n);
    memcpy(old, g->nodes, sizeof *old * (size_t)n);
    reserve(g, k);
    int out = 0, from = 0;
    for (int s = 0; s < 2 * n; s++) {
        if (s % 2 == 1)
            g->nodes[out++] = old[s / 2];
        while (from < start[s])
            g->nodes[out++] = sorted[from++];
    }
    g->nnodes = out;
    g->npend = 0;
}

void ir_renumber(IrGraph *g)
{
    if (g->npend)
        place_pending(g);
    for (int i = 0; i < g->nnodes; i++)
        g->nodes[i]->id = i;
}

#define GROW(g, arr, n, cap)                                                       \
    do {                                                                           \
        if ((n) == (cap)) {                                                        \
            (cap) = (cap) ? (cap) * 2 : 16;                                        \
            (arr) = arena_grow((g)->arena, (arr), (size_t)(n), (size_t)(cap), sizeof *(arr)); \
        }                                                                          \
    } while (0)

IrParam *ir_add_param(IrGraph *g, const char *name, SrcLoc loc, Shape shape)
{
    GROW(g, g->params, g->nparams, g->params_cap);
    IrParam *p = &g->params[g->nparams];
    memset(p, 0, sizeof *p);
    p->name = name;
    p->loc = loc;
    p->shape = shape;
    p->trainable = true;
    p->node = ir_add(g, OP_PARAM, loc, 0, NULL);
    p->node->ia[0] = g->nparams;
    p->node->name = name;
    p->node->shape = shape;
    p->node->type = DT_F32;
    g->nparams++;
    return p;
}

IrInput *ir_add_input(IrGraph *g, const char *name, SrcLoc loc, DType t, Shape shape)
{
    GROW(g, g->inputs, g->ninputs, g->inputs_cap);
    IrInput *in = &g->inputs[g->ninputs];
    memset(in, 0, sizeof *in);
    in->name = name;
    in->loc = loc;
    in->type = t;
    in->shape = shape;
    in->node = ir_add(g, OP_INPUT, loc, 0, NULL);
    in->node->ia[0] = g->ninputs;
    in->node->name = name;
    in->node->shape = shape;
    in->node->type = t;
    g->ninputs++;
    return in;
}

IrMetric *ir_add_metric(IrGraph *g, const char *name, SrcLoc loc, IrNode *n)
{
    GROW(g, g->metrics, g->nmetrics, g->metrics_cap);
    IrMetric *m = &g->metrics[g->nmetrics++];
    m->name = name;
    m->loc = loc;
    m->node = n;
    return m;
}

IrParam *ir_find_param(IrGraph *g, const char *name)
{
    for (int i = 0; i < g->nparams; i++)
        if (strcmp(g->params[i].name, name) == 0)
            return &g->params[i];
    return NULL;
}
