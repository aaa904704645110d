/* memplan.c - liveness-based arena layout (see memplan.h). */
#include "memplan.h"
#include "fuse.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int64_t memplan_bytes(const IrNode *n)
{
    if (ir_stats_at(n))   /* and the rows' statistics for the backward (ir.h) */
        return ir_stats_at(n) + ir_stats_bytes(n);
    return shape_numel(&n->shape) * dt_size(n->type);
}

static BufKind kind_of(const IrGraph *g, const IrNode *n)
{
    if (n->fused_internal && !(n == n->fused_first && fuse_is_product(n)))
        return BUF_NONE;           /* a fused chain keeps it in a register */
    switch (n->op) {
    case OP_PARAM: return BUF_PARAM;
    case OP_INPUT: return BUF_INPUT;
    case OP_CONST: return BUF_CONST;
    case OP_RESHAPE:
    case OP_FLATTEN:
    case OP_DETACH: return BUF_ALIAS;
    case OP_CHUNK: return ir_chunk_view(g, n) ? BUF_ALIAS : BUF_ARENA;
    default: break;
    }
    return n->phase == PH_OPTIMIZER ? BUF_NONE : BUF_ARENA;
}

typedef struct Buf {
    int node;
    int64_t size;
    int first, last;               /* live range, in node indices */
} Buf;

static int by_size_desc(const void *pa, const void *pb)
{
    const Buf *a = pa, *b = pb;
    if (a->size != b->size)
        return a->size < b->size ? 1 : -1;
    return a->node - b->node;      /* deterministic */
}

/* The placed buffers, sorted by offset, in blocks of at most BLOCK: each
 * block knows the earliest start and latest end of its buffers' live ranges,
 * so a search skips whole blocks that are never live with the buffer being
 * placed, and an insertion moves at most one block's entries. A block whose
 * buffers are all live with it (the stack of activations a deep model keeps
 * for its backward pass) and holds no gap it fits in is passed in one step:
 * the search would end past its reach. (The order and the search are those
 * of one sorted array: the result is the same; the search returns the lowest
 * aligned offset free of every buffer live with it, however it walks.) */
#define BLOCK 128

typedef struct Summary {
    int first, last;               /* min first, max last of its buffers */
    int all_first, all_last;       /* max first, min last: all live in between */
    int64_t off0;                  /* its lowest offset */
    int64_t reach, gap;            /* max aligned end; the widest gap between a
                                      buffer and those before it in the block */
} Summary;

typedef struct Block {
    int n;
    int bfirst[BLOCK], blast[BLOCK];   /* each buffer's live range, */
    int64_t off[BLOCK], end[BLOCK];    /* offset and aligned end */
} Block;

/* The blocks in offset order, and their summaries in an array of their own
 * (a search reads every block's summary and few blocks). */
typedef struct Placed {
    Arena *a;
    Block **blk;
    Summary *sum;
    int nblk, cap;
} Placed;

/* Lowest aligned offset where `b` overlaps in address no placed buffer that
 * overlaps it in time: the placed buffers in offset order, a gap before the
 * next one live with b that is big enough ends the search. */
static int64_t place(const Buf *b, const Placed *pl)
{
    int64_t at = 0;
    for (int k = 0; k < pl->nblk; k++) {
        const Summary *sm = &pl->sum[k];
        if (sm->last < b->first || b->last < sm->first)
            continue;              /* none of them live together with b */
        if (sm->all_first <= b->last && b->first <= sm->all_last && sm->off0 < at + b->size &&
            sm->gap < b->size) {   /* all live with b, no gap b fits in */
            if (sm->reach > at)
                at = sm->reach;
            continue;
        }
        const Block *bk = pl->blk[k];
        for (int i = 0; i < bk->n; i++) {
            if (bk->blast[i] < b->first || b->last < bk->bfirst[i])
                continue;          /* never live together */
            if (bk->off[i] >= at + b->size)
                return at;         /* fits in the gap before it */
            if (bk->end[i] > at)
                at = bk->end[i];
        }
    }
    return at;
}

static void summarize(const Block *bk, Summary *sm)
{
    sm->first = sm->all_last = INT_MAX;
    sm->last = sm->all_first = INT_MIN;
    sm->off0 = bk->n ? bk->off[0] : 0;
    sm->reach = sm->gap = 0;
    for (int i = 0; i < bk->n; i++) {
        if (bk->bfirst[i] < sm->first)
            sm->first = bk->bfirst[i];
        if (bk->blast[i] > sm->last)
            sm->last = bk->blast[i];
        if (bk->bfirst[i] > sm->all_first)
            sm->all_first = bk->bfirst[i];
        if (bk->blast[i] < sm->all_last)
            sm->all_last = bk->blast[i];
        if (i > 0 && bk->off[i] - sm->reach > sm->gap)
            sm->gap = bk->off[i] - sm->reach;
        if (bk->end[i] > sm->reach)
            sm->reach = bk->end[i];
    }
}

/* b at offset `at`, after the placed buffers at offsets <= at. */
static void insert(Placed *pl, const Buf *b, int64_t at)
{
    if (pl->nblk == 0 || pl->nblk == pl->cap) {
        int cap = pl->cap ? pl->cap * 2 : 16;
        pl->blk = arena_grow(pl->a, pl->blk, (size_t)pl->nblk, (size_t)cap, sizeof *pl->blk);
        pl->sum = arena_grow(pl->a, pl->sum, (size_t)pl->nblk, (size_t)cap, sizeof *pl->sum);
        pl->cap = cap;
        if (pl->nblk == 0)
            pl->blk[pl->nblk++] = arena_alloc(pl->a, sizeof(Block));
    }
    int k = 0, top = pl->nblk - 1; /* the first block whose last offset is past at */
    while (k < top) {              /* (the last block if none is): blocks are in offset order */
        int mid = (k + top) / 2;
        if (pl->blk[mid]->n == 0 || pl->blk[mid]->off[pl->blk[mid]->n - 1] <= at)
            k = mid + 1;
        else
            top = mid;
    }
    Block *bk = pl->blk[k];
    if (bk->n == BLOCK) {          /* split it in two halves */
        Block *hi = arena_alloc(pl->a, sizeof(Block));
        hi->n = BLOCK / 2;
        memcpy(hi->bfirst, bk->bfirst + BLOCK / 2, sizeof *hi->bfirst * (BLOCK / 2));
        memcpy(hi->blast, bk->blast + BLOCK / 2, sizeof *hi->blast * (BLOCK / 2));
        memcpy(hi->off, bk->off + BLOCK / 2, sizeof *hi->off * (BLOCK / 2));
        memcpy(hi->end, bk->end + BLOCK / 2, sizeof *hi->end * (BLOCK / 2));
        bk->n = BLOCK / 2;
        memmove(&pl->blk[k + 2], &pl->blk[k + 1], sizeof *pl->blk * (size_t)(pl->nblk - k - 1));
        memmove(&pl->sum[k + 2], &pl->sum[k + 1], sizeof *pl->sum * (size_t)(pl->nblk - k - 1));
        pl->blk[k + 1] = hi;
        pl->nblk++;
        summarize(bk, &pl->sum[k]);
        summarize(hi, &pl->sum[k + 1]);
        if (bk->off[bk->n - 1] <= at)
            bk = pl->blk[++k];
    }
    int pos = bk->n;
    while (pos > 0 && bk->off[pos - 1] > at)
        pos--;
    int move = bk->n - pos;
    memmove(bk->bfirst + pos + 1, bk->bfirst + pos, sizeof *bk->bfirst * (size_t)move);
    memmove(bk->blast + pos + 1, bk->blast + pos, sizeof *bk->blast * (size_t)move);
    memmove(bk->off + pos + 1, bk->off + pos, sizeof *bk->off * (size_t)move);
    memmove(bk->end + pos + 1, bk->end + pos, sizeof *bk->end * (size_t)move);
    bk->bfirst[pos] = b->first;
    bk->blast[pos] = b->last;
    bk->off[pos] = at;
    bk->end[pos] = (at + b->size + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN;
    bk->n++;
    summarize(bk, &pl->sum[k]);
}

/* The input a node's kernel may overwrite with its result when nothing
 * reads that input later, or -1. */
static int writes_over(const IrNode *n)
{
    return n->op == OP_CROSS_ENTROPY_GRAD ? 1 : -1;
}

const char *const memplan_kind_name[MEM__KINDS] = {"working copies", "activations", "gradients"};

MemKind memplan_kind(const IrNode *n)
{
    return n->hoisted ? MEM_WORK : n->phase == PH_FORWARD ? MEM_ACT : MEM_GRAD;
}

static int64_t aligned(int64_t b) { return (b + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN; }

/* The most bytes live at once over the step, and their kinds there. */
static void find_peak(Arena *a, const IrGraph *g, MemPlan *mp, const Buf *bufs, int nb)
{
    int n = g->nnodes;
    int64_t *delta = arena_alloc(a, sizeof *delta * (size_t)(n + 3));   /* time t + 1 */
    for (int k = 0; k < nb; k++) {
        delta[bufs[k].first + 1] += aligned(bufs[k].size);
        delta[bufs[k].last + 2] -= aligned(bufs[k].size);
    }
    int64_t live = 0;
    for (int t = 0; t <= n + 1; t++) {
        live += delta[t];
        if (live > mp->peak_bytes) {
            mp->peak_bytes = live;
            mp->peak_at = t - 1;
        }
    }
    for (int k = 0; k < nb; k++)
        if (bufs[k].first <= mp->peak_at && mp->peak_at <= bufs[k].last)
            mp->peak_kind[memplan_kind(g->nodes[bufs[k].node])] += aligned(bufs[k].size);
}

int64_t memplan_step_bytes(const MemPlan *mp)
{
    return 2 * mp->param_bytes + mp->state_bytes + mp->arena_bytes;
}

MemPlan *memplan_build(Arena *a, const IrGraph *g)
{
    int n = g->nnodes;
    MemPlan *mp = arena_alloc(a, sizeof *mp);
    for (int p = 0; p < g->nparams; p++)
        mp->param_bytes += (shape_numel(&g->params[p].shape) + 15) / 16 * 16 * (int64_t)sizeof(float);
    int slots = opt_slots(&g->train);
    mp->state_bytes = slots * mp->param_bytes;
    mp->kind = arena_alloc(a, sizeof *mp->kind * (size_t)(n + 1));
    mp->offset = arena_alloc(a, sizeof *mp->offset * (size_t)(n + 1));
    mp->root = arena_alloc(a, sizeof *mp->root * (size_t)(n + 1));
    mp->view_off = arena_alloc(a, sizeof *mp->view_off * (size_t)(n + 1));
    mp->last_use = arena_alloc(a, sizeof *mp->last_use * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        const IrNode *v = g->nodes[i];
        mp->kind[i] = kind_of(g, v);
        mp->root[i] = mp->kind[i] == BUF_ALIAS ? mp->root[v->in[0]->id] : i;
        mp->view_off[i] = mp->kind[i] != BUF_ALIAS ? 0 : mp->view_off[v->in[0]->id] +
            (v->op == OP_CHUNK ? v->ia[2] * v->shape.d[v->ia[0]] * dt_size(v->type) : 0);
        mp->last_use[i] = v->hoisted ? n : i;
        mp->offset[i] = -1;
    }
    /* A read keeps the storage it reads alive (through views). Optimizer
     * nodes are carried out by the runtime on its own flat buffers. A
     * fused group (fuse.h) reads all its inputs where its last node runs. */
    int *group_end = arena_alloc(a, sizeof *group_end * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        group_end[g->nodes[i]->fused] = i;
    for (int i = 0; i < n; i++) {
        int at = g->nodes[i]->fused ? group_end[g->nodes[i]->fused] : i;
        for (int j = 0; j < g->nodes[i]->nin && g->nodes[i]->phase != PH_OPTIMIZER; j++) {
            int r = mp->root[g->nodes[i]->in[j]->id];
            if (mp->last_use[r] < at)
                mp->last_use[r] = at;
        }
    }

    /* The loss and the metrics are read when the forward pass ends (their
     * values go to the runtime), after every node: keep them to the end. */
    if (g->loss)
        mp->last_use[mp->root[g->loss->id]] = n;
    for (int m = 0; m < g->nmetrics; m++)
        mp->last_use[mp->root[g->metrics[m].node->id]] = n;

    /* A kernel that may write over an input it reads for the last time takes
     * that input's buffer (cross_entropy's gradient over the logits: each
     * element is read, then written, by the same thread, after the row's
     * statistics). The shared buffer lives until the writer's last reader. */
    int *over = arena_alloc(a, sizeof *over * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        const IrNode *v = g->nodes[i];
        int j = writes_over(v), r = j >= 0 ? mp->root[v->in[j]->id] : -1;
        over[i] = -1;
        if (r >= 0 && mp->kind[i] == BUF_ARENA && !v->fused && mp->kind[r] == BUF_ARENA
            && !g->nodes[r]->hoisted && mp->last_use[r] == i && memplan_bytes(g->nodes[r]) == memplan_bytes(v)) {
            over[i] = r;
            mp->last_use[r] = mp->last_use[i];
        }
    }

    Buf *bufs = arena_alloc(a, sizeof *bufs * (size_t)(n + 1));
    int nb = 0;
    for (int i = 0; i < n; i++) {
        if (mp->kind[i] != BUF_ARENA || over[i] >= 0)
            continue;
        const IrNode *v = g->nodes[i];
        bufs[nb++] = (Buf){i, memplan_bytes(v), v->hoisted ? -1 : i, mp->last_use[i]};
        mp->naive_bytes += memplan_bytes(v);
    }
    qsort(bufs, (size_t)nb, sizeof *bufs, by_size_desc);
    find_peak(a, g, mp, bufs, nb);

    Placed placed = {a, NULL, NULL, 0, 0};
    for (int k = 0; k < nb; k++) {
        int64_t at = place(&bufs[k], &placed);
        insert(&placed, &bufs[k], at);
        mp->offset[bufs[k].node] = at;
        if (at + bufs[k].size > mp->arena_bytes)
            mp->arena_bytes = at + bufs[k].size;
    }
    for (int i = 0; i < n; i++)
        if (over[i] >= 0)
            mp->offset[i] = mp->offset[over[i]];
    mp->arena_bytes = (mp->arena_bytes + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN;
    return mp;
}

/* ---- casts converted where their value is loaded or stored --------------------- */

/* Kernels that load input `j` through the runtime's typed loads (any float
 * type, widened to f32 in registers): a widening cast in front of it costs
 * a buffer and a pass over memory and changes no bit. */
static bool loads_any_float(const IrNode *u, int j)
{
    switch (u->op) {
    case OP_CROSS_ENTROPY:
    case OP_LAYER_NORM:
    case OP_RMS_NORM: return j == 0;
    case OP_CROSS_ENTROPY_GRAD: return j == 1;
    case OP_LAYER_NORM_DX:
    case OP_LAYER_NORM_DW:
    case OP_RMS_NORM_DX:
    case OP_RMS_NORM_DW: return j == 0 || j == 1;
    default: return false;
    }
}

/* Kernels that compute in f32 and round only where they store through the
 * runtime's typed stores: storing in the narrow type is what a narrowing
 * cast after them does (the same rounding, mp_st / mp_cu_st). Only
 * cross-entropy's gradient, which PRECISION.md lets write the logits' type:
 * a forward fp32-class op's output stays f32 (the plan's rules). */
static bool stores_any_float(const IrNode *p)
{
    return p->op == OP_CROSS_ENTROPY_GRAD && p->compute == DT_F32;
}

/* A value the runtime or the plan holds on to by pointer. */
static bool pinned(const IrGraph *g, const IrNode *n)
{
    if (n == g->loss)
        return true;
    for (int m = 0; m < g->nmetrics; m++)
        if (g->metrics[m].node == n)
            return true;
    for (int p = 0; p < g->nparams; p++)
        if (g->params[p].grad == n || g->params[p].node == n)
            return true;
    return false;
}

/* A cast the plan inserted, of one float type to another. */
static bool plan_cast(const IrNode *n)
{
    return n->op == OP_CAST && !n->hoisted && n->override == DT_NONE && n->nin == 1
           && dt_is_float(n->type) && dt_is_float(n->in[0]->type);
}

static void count_uses(const IrGraph *g, int *uses)
{
    memset(uses, 0, sizeof *uses * (size_t)g->nnodes);
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++)
            uses[g->nodes[i]->in[j]->id]++;
}

/* Every read of `from` reads `to` instead. */
static void reroute(IrGraph *g, const IrNode *from, IrNode *to)
{
    for (int i = from->id + 1; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++)
            if (g->nodes[i]->in[j] == from)
                g->nodes[i]->in[j] = to;
}

int memplan_fold_casts(IrGraph *g)
{
    int n = g->nnodes, folded = 0;
    int *uses = arena_alloc(g->arena, sizeof *uses * (size_t)(n + 1));
    IrNode **into = arena_alloc(g->arena, sizeof *into * (size_t)(n + 1));   /* removed: its stand-in */
    count_uses(g, uses);
    /* widening (f16 -> f32): the readers load the narrow value themselves */
    for (int i = 0; i < n; i++) {
        IrNode *c = g->nodes[i];
        if (!plan_cast(c) || c->type != DT_F32 || c->in[0]->type == DT_F32 || !uses[i] || pinned(g, c))
            continue;
        int ok = 0;
        for (int k = i + 1; k < n; k++)
            for (int j = 0; j < g->nodes[k]->nin; j++)
                if (g->nodes[k]->in[j] == c)
                    ok += loads_any_float(g->nodes[k], j) ? 1 : -n;
        if (ok != uses[i])
            continue;
        reroute(g, c, c->in[0]);
        into[i] = c->in[0];
    }
    count_uses(g, uses);
    /* narrowing (f32 -> f16): the one producer stores the narrow value */
    for (int i = 0; i < n; i++) {
        IrNode *c = g->nodes[i], *p = c->nin ? c->in[0] : NULL;
        if (into[i] || !plan_cast(c) || c->type == DT_F32 || p->type != DT_F32 || uses[p->id] != 1
            || !stores_any_float(p) || pinned(g, p) || pinned(g, c))
            continue;
        p->type = c->type;
        reroute(g, c, p);
        into[i] = p;
    }
    int out = 0;
    for (int i = 0; i < n; i++) {
        IrNode *v = g->nodes[i];
        if (into[i]) {
            folded++;
            continue;
        }
        if (v->grad_of && v->grad_of->id >= 0 && v->grad_of->id < n && into[v->grad_of->id])
            v->grad_of = into[v->grad_of->id];   /* the gradient of the value it stood for */
        g->nodes[out++] = v;
    }
    g->nnodes = out;
    ir_renumber(g);
    return folded;
}
