/* memplan.c - liveness-based arena layout (see memplan.h). */
#include "memplan.h"

#include <stdlib.h>

int64_t memplan_bytes(const IrNode *n) { return shape_numel(&n->shape) * dt_size(n->type); }

static BufKind kind_of(const IrNode *n)
{
    if (n->fused_internal)
        return BUF_NONE;           /* a fused chain keeps it in a register */
    switch (n->op) {
    case OP_PARAM: return BUF_PARAM;
    case OP_INPUT: return BUF_INPUT;
    case OP_CONST: return BUF_CONST;
    case OP_RESHAPE:
    case OP_FLATTEN: return BUF_ALIAS;
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

/* Lowest aligned offset where `b` overlaps in address no placed buffer that
 * overlaps it in time. placed[] is kept sorted by offset. */
static int64_t place(const Buf *b, const Buf *placed, const int64_t *off, int np)
{
    int64_t at = 0;
    for (int i = 0; i < np; i++) {
        const Buf *p = &placed[i];
        if (p->last < b->first || b->last < p->first)
            continue;              /* never live together */
        if (off[i] >= at + b->size)
            break;                 /* fits in the gap before p */
        int64_t end = off[i] + p->size;
        end = (end + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN;
        if (end > at)
            at = end;
    }
    return at;
}

MemPlan *memplan_build(Arena *a, const IrGraph *g)
{
    int n = g->nnodes;
    MemPlan *mp = arena_alloc(a, sizeof *mp);
    mp->kind = arena_alloc(a, sizeof *mp->kind * (size_t)(n + 1));
    mp->offset = arena_alloc(a, sizeof *mp->offset * (size_t)(n + 1));
    mp->root = arena_alloc(a, sizeof *mp->root * (size_t)(n + 1));
    mp->last_use = arena_alloc(a, sizeof *mp->last_use * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        const IrNode *v = g->nodes[i];
        mp->kind[i] = kind_of(v);
        mp->root[i] = mp->kind[i] == BUF_ALIAS ? mp->root[v->in[0]->id] : i;
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

    Buf *bufs = arena_alloc(a, sizeof *bufs * (size_t)(n + 1));
    int nb = 0;
    for (int i = 0; i < n; i++) {
        if (mp->kind[i] != BUF_ARENA)
            continue;
        const IrNode *v = g->nodes[i];
        bufs[nb++] = (Buf){i, memplan_bytes(v), v->hoisted ? -1 : i, mp->last_use[i]};
        mp->naive_bytes += memplan_bytes(v);
    }
    qsort(bufs, (size_t)nb, sizeof *bufs, by_size_desc);

    /* placed[] sorted by offset, with the offsets alongside. */
    Buf *placed = arena_alloc(a, sizeof *placed * (size_t)(nb + 1));
    int64_t *poff = arena_alloc(a, sizeof *poff * (size_t)(nb + 1));
    for (int k = 0; k < nb; k++) {
        int64_t at = place(&bufs[k], placed, poff, k);
        int pos = k;
        while (pos > 0 && poff[pos - 1] > at) {
            placed[pos] = placed[pos - 1];
            poff[pos] = poff[pos - 1];
            pos--;
        }
        placed[pos] = bufs[k];
        poff[pos] = at;
        mp->offset[bufs[k].node] = at;
        if (at + bufs[k].size > mp->arena_bytes)
            mp->arena_bytes = at + bufs[k].size;
    }
    mp->arena_bytes = (mp->arena_bytes + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN;
    return mp;
}
