/* fuse.c - the fusion pass (see fuse.h). */
#include "fuse.h"
#include "ops.h"

#include <stdio.h>
#include <string.h>

/* The per-element math of the elementwise kernels, as mp_k_<op> in
 * runtime/mp_kernels.h and mp_cu_<op> in runtime/mp_cuda_ops.h write it:
 * %s are the inputs in order (unary: x; binary: a, b; gradients: dy, v).
 * A fused chain must compute exactly what those kernels compute. */
static const char *const expr_of[OP__COUNT] = {
    [OP_CAST] = "%s",
    [OP_ADD] = "%s + %s",
    [OP_SUB] = "%s - %s",
    [OP_MUL] = "%s * %s",
    [OP_DIV] = "%s / %s",
    [OP_NEG] = "-%s",
    [OP_RELU] = "mp_relu(%s)",
    [OP_TANH] = "mp_tanhf_p(%s)",
    [OP_SIGMOID] = "mp_sigmoid(%s)",
    [OP_SILU] = "mp_silu(%s)",
    [OP_EXP] = "mp_expf_p(%s)",
    [OP_LOG] = "logf(%s)",
    [OP_SQRT] = "sqrtf(%s)",
    [OP_RSQRT] = "mp_rsqrt(%s)",
    [OP_ABS] = "fabsf(%s)",
    [OP_SIN] = "sinf(%s)",
    [OP_COS] = "cosf(%s)",
    [OP_MAXIMUM] = "mp_maximum(%s, %s)",
    [OP_MINIMUM] = "mp_minimum(%s, %s)",
    [OP_MAXIMUM_MASK] = "mp_maximum_mask(%s, %s)",
    [OP_RELU_GRAD] = "mp_relu_grad(%s, %s)",
    [OP_TANH_GRAD] = "mp_tanh_grad(%s, %s)",
    [OP_SIGMOID_GRAD] = "mp_sigmoid_grad(%s, %s)",
    [OP_SILU_GRAD] = "mp_silu_grad(%s, %s)",
    [OP_SQRT_GRAD] = "mp_sqrt_grad(%s, %s)",
    [OP_RSQRT_GRAD] = "mp_rsqrt_grad(%s, %s)",
    [OP_ABS_GRAD] = "mp_abs_grad(%s, %s)",
    [OP_SIN_GRAD] = "mp_sin_grad(%s, %s)",
    [OP_COS_GRAD] = "mp_cos_grad(%s, %s)",
    [OP_WHERE_DA] = "mp_where_da(%s, %s)",
    [OP_WHERE_DB] = "mp_where_db(%s, %s)",
};

const char *fuse_expr(Arena *a, const IrNode *n, const char *const *in)
{
    if (!dt_is_float(n->type))
        return NULL;
    /* attributes as the unfused emitters print them: (float)%.9g */
    switch (n->op) {
    case OP_GELU:
        return arena_printf(a, "%s(%s)", n->ia[0] ? "mp_gelu_tanh" : "mp_gelu", in[0]);
    case OP_GELU_GRAD:
        return arena_printf(a, "%s(%s, %s)", n->ia[0] ? "mp_gelu_tanh_grad" : "mp_gelu_grad", in[0], in[1]);
    case OP_CLAMP:
        return arena_printf(a, "mp_clamp(%s, (float)%.9g, (float)%.9g)", in[0], n->fa[0], n->fa[1]);
    case OP_CLAMP_GRAD:
        return arena_printf(a, "mp_clamp_grad(%s, %s, (float)%.9g, (float)%.9g)", in[0], in[1],
                            n->grad_of->fa[0], n->grad_of->fa[1]);
    case OP_POW:
        return arena_printf(a, "powf(%s, (float)%.9g)", in[0], n->fa[0]);
    case OP_POW_GRAD:
        return arena_printf(a, "mp_pow_grad(%s, %s, (float)%.9g)", in[0], in[1], n->grad_of->fa[0]);
    default:
        break;
    }
    const char *f = expr_of[n->op];
    if (!f)
        return NULL;
    return n->nin == 1 ? arena_printf(a, f, in[0]) : arena_printf(a, f, in[0], in[1]);
}

ProductDims fuse_matmul_dims(const IrNode *n)
{
    const IrNode *a = n->in[0], *b = n->in[1];
    ProductDims d = {.ta = (int)n->ia[0], .tb = (int)n->ia[1]};
    const Shape *sa = &a->shape, *sb = &b->shape;
    d.m = (long long)sa->d[sa->rank + (d.ta ? -1 : -2)];
    d.k = (long long)sa->d[sa->rank + (d.ta ? -2 : -1)];
    d.n = (long long)sb->d[sb->rank + (d.tb ? -2 : -1)];
    d.batch = (long long)shape_numel(&n->shape) / (d.m * d.n);
    d.sa = sa->rank > 2 ? d.m * d.k : 0;
    d.sb = sb->rank > 2 ? d.k * d.n : 0;
    if (!d.ta && d.sb == 0) {      /* [..., M, K] @ [K, N]: one product of M' rows */
        d.m *= d.batch;
        d.batch = 1;
        d.sa = 0;
    }
    return d;
}

bool fuse_is_product(const IrNode *n)
{
    if (n->op == OP_LINEAR)
        return true;
    return n->op == OP_MATMUL && n->in[0]->shape.rank >= 2 && n->in[1]->shape.rank >= 2
        && fuse_matmul_dims(n).batch == 1;
}

/* ---- grouping ------------------------------------------------------------ */

typedef struct Fuse {
    IrGraph *g;
    int **users;               /* per node id: the nodes reading it */
    int *nusers;
    bool *for_loss;            /* forward: the loss depends on it (else metrics only) */
    bool *must_store;          /* read by the runtime: loss, metrics, named values */
    int *first, *last;         /* per group: its lowest and highest node id */
    int ngroups;
    bool *pgrad;               /* per node id: a parameter's gradient */
} Fuse;

static bool is_param_grad(Fuse *f, const IrNode *n)
{
    if (!f->pgrad) {           /* made once: the pass stays linear in the model */
        f->pgrad = arena_alloc(f->g->arena, sizeof *f->pgrad * (size_t)(f->g->nnodes + 1));
        for (int p = 0; p < f->g->nparams; p++)
            if (f->g->params[p].grad)
                f->pgrad[f->g->params[p].grad->id] = true;
    }
    return f->pgrad[n->id];
}

/* n may be a member: elementwise float math over inputs of its own size
 * or single elements; not a parameter's gradient (accumulated by the
 * runtime), not a hoisted cast (run once per optimizer step). */
static bool fusable(Fuse *f, const IrNode *n)
{
    const char *in[2] = {"a", "b"};
    if (n->phase == PH_OPTIMIZER || n->hoisted || n->nin < 1 || n->nin > 2)
        return false;
    if (!fuse_expr(f->g->arena, n, in) || is_param_grad(f, n))
        return false;
    int64_t len = shape_numel(&n->shape);
    for (int k = 0; k < n->nin; k++) {
        int64_t m = shape_numel(&n->in[k]->shape);
        if (m != len && m != 1)
            return false;
    }
    return true;
}

/* n may head a group: a product of float storage in the step's passes. */
static bool product_head(Fuse *f, const IrNode *n)
{
    return fuse_is_product(n) && dt_is_float(n->type) && n->phase != PH_OPTIMIZER && !n->hoisted
        && !is_param_grad(f, n);
}

static void find_users(Fuse *f)
{
    IrGraph *g = f->g;
    size_t n = (size_t)g->nnodes + 1;
    f->users = arena_alloc(g->arena, sizeof *f->users * n);
    f->nusers = arena_alloc(g->arena, sizeof *f->nusers * n);
    int *cap = arena_alloc(g->arena, sizeof *cap * n);
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i]->nin; k++) {
            int p = g->nodes[i]->in[k]->id;
            if (f->nusers[p] == cap[p]) {
                int *grown = arena_alloc(g->arena, sizeof *grown * (size_t)(cap[p] * 2 + 2));
                if (f->nusers[p])
                    memcpy(grown, f->users[p], sizeof *grown * (size_t)f->nusers[p]);
                f->users[p] = grown;
                cap[p] = cap[p] * 2 + 2;
            }
            f->users[p][f->nusers[p]++] = i;
        }
}

static void find_roots(Fuse *f)
{
    IrGraph *g = f->g;
    size_t n = (size_t)g->nnodes + 1;
    f->for_loss = arena_alloc(g->arena, sizeof *f->for_loss * n);
    f->must_store = arena_alloc(g->arena, sizeof *f->must_store * n);
    if (g->loss) {
        f->for_loss[g->loss->id] = f->must_store[g->loss->id] = true;
        for (int i = g->loss->id; i >= 0; i--)
            if (f->for_loss[i])
                for (int k = 0; k < g->nodes[i]->nin; k++)
                    f->for_loss[g->nodes[i]->in[k]->id] = true;
    }
    for (int m = 0; m < g->nmetrics; m++)
        f->must_store[g->metrics[m].node->id] = true;
    for (int i = 0; i < g->nnodes; i++)   /* --predict --output NAME reads these */
        if (g->nodes[i]->phase == PH_FORWARD && g->nodes[i]->name)
            f->must_store[i] = true;
}

/* Whether a and b may share a group: the same copy of a repeat (or both
 * outside every loop); any iterations of one for loop, the groups that
 * span more than two then split (split_long_groups). */
static bool same_copy(const IrGraph *g, const IrNode *a, const IrNode *b)
{
    if (a->rep != b->rep)
        return false;
    return a->copy == b->copy || (a->rep && g->loops[a->rep - 1].var);
}

/* Whether n can join group grp: same phase, size, evaluation status and
 * repeat copy, and nothing outside the group reads one of its members before n. */
static bool can_join(Fuse *f, const IrNode *n, int grp)
{
    IrGraph *g = f->g;
    const IrNode *last = g->nodes[f->last[grp]];
    if (last->phase != n->phase || shape_numel(&last->shape) != shape_numel(&n->shape)
        || f->for_loss[last->id] != f->for_loss[n->id])
        return false;
    if (!same_copy(g, last, n))
        return false;       /* copies stay isomorphic (emit_loop.c) */
    for (int i = f->first[grp]; i <= last->id; i++) {
        if (g->nodes[i]->fused != grp)
            continue;
        for (int u = 0; u < f->nusers[i]; u++) {
            int r = f->users[i][u];
            if (r != n->id && g->nodes[r]->fused != grp && r < n->id)
                return false;
        }
    }
    return true;
}

/* A group that already reads `in` (not a single element), which n may
 * join: in `relu(x) + log(1 + exp(-abs(x)))` with x stored, abs(x) joins
 * relu(x)'s loop, so x is read once and the formula is one loop (the
 * prelude's blocks, compiler/prelude.mp, are written so). 0: none. */
static int sibling_group(Fuse *f, const IrNode *n, const IrNode *in)
{
    if (shape_numel(&in->shape) == 1)
        return 0;
    for (int u = f->nusers[in->id] - 1; u >= 0; u--) {
        const IrNode *r = f->g->nodes[f->users[in->id][u]];
        if (r->id < n->id && r->fused && can_join(f, n, r->fused))
            return r->fused;
    }
    return 0;
}

/* n joins group grp: an input of n alone in a group of its own, all of
 * whose readers come at or after n, moves into grp (the mask of minimum's
 * gradient, made from forward values before the chain reached it): the
 * group runs where its last node stands, after n. */
static void adopt_inputs(Fuse *f, const IrNode *n, int grp)
{
    const IrNode *last = f->g->nodes[f->last[grp]];
    for (int k = 0; k < n->nin; k++) {
        IrNode *b = n->in[k];
        int h = b->fused;
        if (!h || h == grp || !fusable(f, b) || f->first[h] != b->id || f->last[h] != b->id || b->phase != n->phase
            || shape_numel(&b->shape) != shape_numel(&n->shape) || !same_copy(f->g, b, last)
            || f->for_loss[b->id] != f->for_loss[n->id])
            continue;
        bool later = true;
        for (int u = 0; u < f->nusers[b->id] && later; u++)
            later = f->users[b->id][u] >= n->id;
        if (!later)
            continue;
        b->fused = grp;
        if (b->id < f->first[grp])
            f->first[grp] = b->id;
    }
}

static void form_groups(Fuse *f)
{
    IrGraph *g = f->g;
    f->first = arena_alloc(g->arena, sizeof *f->first * (size_t)(g->nnodes + 1));
    f->last = arena_alloc(g->arena, sizeof *f->last * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (product_head(f, n)) {   /* starts a group its consumers may join */
            n->fused = ++f->ngroups;
            f->first[n->fused] = f->last[n->fused] = i;
            continue;
        }
        if (!fusable(f, n))
            continue;
        int grp = 0;
        for (int k = 0; k < n->nin && !grp; k++)
            if (n->in[k]->fused && can_join(f, n, n->in[k]->fused))
                grp = n->in[k]->fused;
        for (int k = 0; k < n->nin && !grp; k++)
            grp = sibling_group(f, n, n->in[k]);
        if (!grp)
            f->first[grp = ++f->ngroups] = i;
        else
            adopt_inputs(f, n, grp);
        n->fused = grp;
        f->last[grp] = i;
    }
}

/* A group across two neighbouring iterations of a for loop (the end of
 * one step and the start of the next: a state's update and its cast
 * where the next step reads it) is the same in every iteration, and the
 * loop runs it (emit_loop.c); one across more (a shared parameter's
 * gradient summed over every step) would be code as long as the loop:
 * it splits into its iterations' parts, each a group of its own. A part
 * is a group by can_join's rules: an iteration's nodes are consecutive,
 * so no other part reads one of its members before its last node. */
static void split_long_groups(Fuse *f)
{
    IrGraph *g = f->g;
    int n = f->ngroups;
    int *lo = arena_alloc(g->arena, sizeof *lo * (size_t)(n + 1));
    int *hi = arena_alloc(g->arena, sizeof *hi * (size_t)(n + 1));
    int *part = arena_alloc(g->arena, sizeof *part * (size_t)(n + 1));
    int *part_copy = arena_alloc(g->arena, sizeof *part_copy * (size_t)(n + 1));
    for (int grp = 1; grp <= n; grp++)
        lo[grp] = hi[grp] = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *v = g->nodes[i];
        if (!v->fused || !v->rep)
            continue;
        if (lo[v->fused] < 0 || v->copy < lo[v->fused])
            lo[v->fused] = v->copy;
        if (v->copy > hi[v->fused])
            hi[v->fused] = v->copy;
    }
    int total = n;
    for (int grp = 1; grp <= n; grp++)
        if (hi[grp] - lo[grp] > 1)
            total += hi[grp] - lo[grp] + 1;
    if (total == n)
        return;
    f->first = arena_grow(g->arena, f->first, (size_t)n + 1, (size_t)total + 1, sizeof *f->first);
    f->last = arena_grow(g->arena, f->last, (size_t)n + 1, (size_t)total + 1, sizeof *f->last);
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *v = g->nodes[i];
        int grp = v->fused;
        if (!grp || grp > n || hi[grp] - lo[grp] <= 1)
            continue;
        if (!part[grp] || part_copy[grp] != v->copy) {
            part[grp] = ++f->ngroups;
            part_copy[grp] = v->copy;
            f->first[part[grp]] = i;
        }
        v->fused = part[grp];
        f->last[part[grp]] = i;
    }
}

/* Groups of one node are no groups; the others are numbered 1, 2, ... in
 * the order of their last node, and their internal values found. */
static int finish_groups(Fuse *f)
{
    IrGraph *g = f->g;
    int *size = arena_alloc(g->arena, sizeof *size * (size_t)(f->ngroups + 1));
    int *renum = arena_alloc(g->arena, sizeof *renum * (size_t)(f->ngroups + 1));
    for (int i = 0; i < g->nnodes; i++)
        size[g->nodes[i]->fused]++;
    int count = 0;
    for (int i = 0; i < g->nnodes; i++) {
        int grp = g->nodes[i]->fused;
        if (grp && size[grp] > 1 && f->last[grp] == i)
            renum[grp] = ++count;
    }
    IrNode **first = arena_alloc(g->arena, sizeof *first * (size_t)(count + 1));
    IrNode **last = arena_alloc(g->arena, sizeof *last * (size_t)(count + 1));
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        n->fused = n->fused && size[n->fused] > 1 ? renum[n->fused] : 0;
        if (n->fused && !first[n->fused])
            first[n->fused] = n;
        last[n->fused] = n;
    }
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        n->fused_first = n->fused ? first[n->fused] : NULL;
        n->fused_last = n->fused ? last[n->fused] : NULL;
    }
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (!n->fused)
            continue;
        bool inside = !f->must_store[i];
        for (int u = 0; u < f->nusers[i] && inside; u++)
            inside = g->nodes[f->users[i][u]]->fused == n->fused;
        n->fused_internal = inside;
    }
    return count;
}

int fuse_graph(IrGraph *g)
{
    Fuse f = {.g = g};
    g->fused = true;
    find_users(&f);
    find_roots(&f);
    form_groups(&f);
    split_long_groups(&f);
    return finish_groups(&f);
}

const IrNode *fuse_last(const IrGraph *g, const IrNode *n)
{
    (void)g;
    return n->fused ? n->fused_last : n;
}
