/* recompute.c - fusion and the memory plan under a budget (recompute.h). */
#include "recompute.h"
#include "cost.h"
#include "fuse.h"
#include "memplan.h"
#include "ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool recompute_parse_size(const char *s, int64_t *out)
{
    static const struct { const char *unit; double mult; } units[] = {
        {"", 1}, {"B", 1}, {"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
    };
    char *end;
    double v = strtod(s, &end);
    if (end == s || !isfinite(v) || v <= 0 || (*s < '0' || *s > '9'))
        return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(end, units[i].unit) == 0) {
            double b = v * units[i].mult;
            if (b < 1 || b > 9e18)
                return false;
            *out = (int64_t)b;
            return true;
        }
    return false;
}

typedef struct Rc {
    IrGraph *g;
    bool fuse;
    int n0;                        /* nodes of the graph without copies */
    IrNode **orig;                 /* its node list */
    IrNode ***orig_in;             /* a backward node's inputs, as autodiff made them */
    IrNode **copy;                 /* per node: its recomputing copy, made once */
    bool *use;                     /* per node: recomputed in this trial */
    IrNode **list;                 /* the trial's node list */
    int nlist;
} Rc;

/* Values a copy may compute again: deterministic forward ops that keep no
 * state (not the RNG's ops, not batch_norm's running statistics). */
static bool recomputable(const IrNode *v)
{
    if (v->phase != PH_FORWARD || v->hoisted || op_info[v->op].kind != OPK_FWD)
        return false;
    switch (v->op) {
    case OP_DROPOUT:
    case OP_RAND:
    case OP_RANDN:
    case OP_BATCH_NORM: return false;
    case OP_ATTENTION: return !(v->fa[1] > 0);   /* dropout: its bits are the node's */
    default: return true;
    }
}

static bool is_view(const IrNode *v)
{
    return v->op == OP_RESHAPE || v->op == OP_FLATTEN || v->op == OP_DETACH;
}

/* A value the runtime reads (loss, metrics) stays where it is. */
static bool runtime_reads(const IrGraph *g, const IrNode *v)
{
    if (v == g->loss)
        return true;
    for (int m = 0; m < g->nmetrics; m++)
        if (g->metrics[m].node == v)
            return true;
    return false;
}

static IrNode *need(Rc *r, IrNode *v)
{
    IrNode *c = r->copy[v->id];
    if (!c) {
        c = arena_alloc(r->g->arena, sizeof *c);
        *c = *v;
        c->in = arena_alloc(r->g->arena, sizeof *c->in * (size_t)(v->nin + 1));
        c->phase = PH_BACKWARD;
        c->grad_of = NULL;
        c->recomputes = v;
        r->copy[v->id] = c;
    }
    if (c->id == -2)               /* placed in this trial */
        return c;
    for (int j = 0; j < v->nin; j++)
        c->in[j] = r->use[v->in[j]->id] ? need(r, v->in[j]) : v->in[j];
    c->id = -2;
    r->list[r->nlist++] = c;
    return c;
}

/* The graph with the values marked in r->use recomputed: fused and planned. */
static MemPlan *trial(Rc *r, Arena *scratch)
{
    IrGraph *g = r->g;
    for (int i = 0; i < r->n0; i++) {
        IrNode *v = r->orig[i];
        v->id = i;
        if (r->orig_in[i])
            memcpy(v->in, r->orig_in[i], sizeof *v->in * (size_t)v->nin);
        if (is_view(v) && r->use[v->in[0]->id])
            r->use[i] = true;      /* a view of a recomputed value is one too */
        if (r->copy[i])
            r->copy[i]->id = -1;
    }
    r->nlist = 0;
    for (int i = 0; i < r->n0; i++) {
        IrNode *v = r->orig[i];
        if (v->phase == PH_BACKWARD)
            for (int j = 0; j < v->nin; j++)
                if (r->use[v->in[j]->id])
                    v->in[j] = need(r, v->in[j]);
        r->list[r->nlist++] = v;
    }
    memcpy(g->nodes, r->list, sizeof *g->nodes * (size_t)r->nlist);
    g->nnodes = r->nlist;
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *v = g->nodes[i];
        v->id = i;
        v->fused = 0;
        v->fused_internal = false;
        v->fused_first = v->fused_last = NULL;
    }
    g->fused = false;
    if (r->fuse)
        fuse_graph(g);
    return memplan_build(scratch, g);
}

typedef struct Class {
    double flops;                  /* its recomputation's */
    int64_t bytes;                 /* its values' */
    int first;                     /* its first member, for a stable order */
} Class;

static int by_cost(const void *pa, const void *pb)
{
    const Class *a = pa, *b = pb;
    double ka = a->flops / (double)(a->bytes + 1), kb = b->flops / (double)(b->bytes + 1);
    if (ka != kb)
        return ka < kb ? -1 : 1;
    return a->first - b->first;
}

/* Class of each candidate (-1: none): a value outside any `repeat` is one
 * class; a value inside one shares its class with the same node (by its
 * place in its copy) of every other copy. */
static int classes(Rc *r, int *cls, Class **out)
{
    IrGraph *g = r->g;
    int n = r->n0, maxrep = 0, maxcopy = 0, ncls = 0;
    bool *read_back = arena_alloc(g->arena, sizeof *read_back * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        IrNode *v = r->orig[i];
        if (v->rep > maxrep)
            maxrep = v->rep;
        if (v->copy > maxcopy)
            maxcopy = v->copy;
        if (v->phase == PH_BACKWARD)
            for (int j = 0; j < v->nin; j++) {
                const IrNode *u = v->in[j];
                while (is_view(u))
                    u = u->in[0];
                read_back[u->id] = true;
            }
    }
    int *count = arena_alloc(g->arena, sizeof *count * (size_t)((maxrep + 1) * (maxcopy + 1)));
    int *pos = arena_alloc(g->arena, sizeof *pos * (size_t)(n + 1));
    int maxpos = 0;
    for (int i = 0; i < n; i++) {
        IrNode *v = r->orig[i];
        if (v->phase != PH_FORWARD)
            continue;
        pos[i] = count[v->rep * (maxcopy + 1) + v->copy]++;
        if (pos[i] > maxpos)
            maxpos = pos[i];
    }
    int *by_key = arena_alloc(g->arena, sizeof *by_key * (size_t)((maxrep + 1) * (maxpos + 1)));
    Class *c = arena_alloc(g->arena, sizeof *c * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        IrNode *v = r->orig[i];
        cls[i] = -1;
        if (!read_back[i] || !recomputable(v) || is_view(v) || runtime_reads(g, v))
            continue;
        int *slot = v->rep ? &by_key[v->rep * (maxpos + 1) + pos[i]] : NULL;
        if (slot && *slot)
            cls[i] = *slot - 1;
        else {
            cls[i] = ncls;
            c[ncls++] = (Class){0, 0, i};
            if (slot)
                *slot = ncls;
        }
        c[cls[i]].flops += cost_op(g, v).flops;
        c[cls[i]].bytes += memplan_bytes(v);
    }
    *out = c;
    return ncls;
}

double recompute_flops(const IrGraph *g, double *added)
{
    double f = 0;
    *added = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *v = g->nodes[i];
        if (v->phase == PH_OPTIMIZER)
            continue;
        double x = cost_op(g, v).flops;
        f += x;
        if (v->recomputes)
            *added += x;
    }
    return f;
}

static void finish(IrGraph *g, MemPlan *mp, int64_t budget)
{
    mp->budget = budget;
    g->mem = mp;
}

bool recompute_plan(IrGraph *g, int64_t budget, SrcLoc at, bool fuse)
{
    if (budget <= 0) {
        if (fuse)
            fuse_graph(g);
        finish(g, memplan_build(g->arena, g), 0);
        return true;
    }
    Rc r = {.g = g, .fuse = fuse, .n0 = g->nnodes};
    int n = g->nnodes;
    r.orig = arena_alloc(g->arena, sizeof *r.orig * (size_t)(n + 1));
    memcpy(r.orig, g->nodes, sizeof *r.orig * (size_t)n);
    r.orig_in = arena_alloc(g->arena, sizeof *r.orig_in * (size_t)(n + 1));
    r.copy = arena_alloc(g->arena, sizeof *r.copy * (size_t)(n + 1));
    r.use = arena_alloc(g->arena, sizeof *r.use * (size_t)(n + 1));
    r.list = arena_alloc(g->arena, sizeof *r.list * (size_t)(2 * n + 1));
    /* the copies make the node list longer: room for all of them */
    g->nodes = arena_grow(g->arena, g->nodes, (size_t)g->cap, (size_t)(2 * n + 1), sizeof *g->nodes);
    g->cap = 2 * n + 1;
    for (int i = 0; i < n; i++) {
        IrNode *v = r.orig[i];
        if (v->phase == PH_BACKWARD && v->nin) {
            r.orig_in[i] = arena_alloc(g->arena, sizeof *v->in * (size_t)v->nin);
            memcpy(r.orig_in[i], v->in, sizeof *v->in * (size_t)v->nin);
        }
    }
    int *cls = arena_alloc(g->arena, sizeof *cls * (size_t)(n + 1));
    Class *c;
    int ncls = classes(&r, cls, &c);
    int *order = arena_alloc(g->arena, sizeof *order * (size_t)(ncls + 1));
    Class *sorted = arena_alloc(g->arena, sizeof *sorted * (size_t)(ncls + 1));
    memcpy(sorted, c, sizeof *c * (size_t)ncls);
    qsort(sorted, (size_t)ncls, sizeof *sorted, by_cost);
    for (int k = 0; k < ncls; k++)
        order[k] = cls[sorted[k].first];

    bool *best = arena_alloc(g->arena, sizeof *best * (size_t)(n + 1));
    Arena scratch;
    arena_init(&scratch);
    MemPlan *mp = trial(&r, &scratch);
    int64_t best_bytes = memplan_step_bytes(mp);
    for (int k = 0; k < ncls && best_bytes > budget; k++) {
        memcpy(r.use, best, sizeof *best * (size_t)n);
        for (int i = 0; i < n; i++)
            if (cls[i] == order[k])
                r.use[i] = true;
        arena_free(&scratch);
        arena_init(&scratch);
        int64_t b = memplan_step_bytes(trial(&r, &scratch));
        if (b < best_bytes) {
            best_bytes = b;
            memcpy(best, r.use, sizeof *best * (size_t)n);
        }
    }
    arena_free(&scratch);
    memcpy(r.use, best, sizeof *best * (size_t)n);
    mp = trial(&r, g->arena);      /* the chosen one, for good */
    if (memplan_step_bytes(mp) > budget) {
        diag_error(at, "memory budget of %lld bytes (%.2f GiB) cannot be met: the smallest "
                   "budget this model can meet is %lld bytes (%.2f GiB), with every forward value "
                   "that frees memory recomputed", (long long)budget, (double)budget / 1073741824.0,
                   (long long)memplan_step_bytes(mp), (double)memplan_step_bytes(mp) / 1073741824.0);
        return false;
    }
    finish(g, mp, budget);
    return true;
}
