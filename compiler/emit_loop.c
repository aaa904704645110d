/* emit_loop.c - `repeat` copies run as a loop over one function per body.
 *
 * The IR stays unrolled (sema.c tags each node with its outermost repeat
 * and copy, IrNode.rep / copy). A pass (emit_pass) is cut into runs: the
 * nodes of one copy, consecutive. Each run is rendered twice over in
 * "canonical" form: every value it names becomes a numbered slot (#s0:f16),
 * and so do the things that differ per copy by design (a parameter's
 * gradient buffer #g, a named value's index #x, an error message's
 * `where` #w); constants and inputs are named directly (#c / #i). Runs with
 * the same canonical text are isomorphic: the same ops, types, shapes and
 * attributes, in the same order, differing only in where their values live.
 * Consecutive isomorphic runs become one body function, rendered once from
 * the first run (its names, as locals), and a loop calling it per copy with
 * that copy's row of two data tables: `at` (memplan offsets, parameter
 * numbers: the slots) and `w` (the where strings). Everything else (a copy
 * unlike its neighbours, a dropout whose seed is its node id, a value read
 * by the runtime) stays straight-line code, as before.
 *
 * Invariant: a program without loops is byte-for-byte the one mpcc wrote
 * before loops existed; with loops it runs the same kernels on the same
 * memory in the same order, so its results are bit-identical. */
#include "emit_common.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>

typedef struct LoopSlot {
    char kind;                 /* 's' value, 'g' parameter gradient, 'x' value index, 'w' where */
    const IrNode *n;           /* 's' */
    long long v;               /* 'g' parameter, 'x' index */
    const char *str;           /* 'w' */
    int ix;                    /* index in the at table ('s' 'g' 'x') or the w table ('w') */
} LoopSlot;

struct LoopBody {
    bool canon;                /* rendering to compare (placeholders), not to emit */
    const bool *same;          /* per slot, in order: a where string every copy shares,
                                  written into the body (emit_loop) */
    LoopSlot *slots;
    int nslots, cap, nat, nw;
};

static LoopSlot *slot(Emit *e, char kind, const IrNode *n, long long v, const char *str)
{
    LoopBody *b = e->body;
    for (int i = 0; i < b->nslots; i++) {
        LoopSlot *s = &b->slots[i];
        if (s->kind == kind && s->n == n && s->v == v && (!str || !strcmp(s->str, str)))
            return s;
    }
    if (b->nslots == b->cap) {
        int cap = b->cap ? b->cap * 2 : 32;
        b->slots = arena_grow(e->a, b->slots, (size_t)b->nslots, (size_t)cap, sizeof *b->slots);
        b->cap = cap;
    }
    LoopSlot *s = &b->slots[b->nslots];
    bool same = b->same && b->same[b->nslots];
    b->nslots++;
    *s = (LoopSlot){kind, n, v, str, same ? -1 : kind == 'w' ? b->nw++ : b->nat++};
    return s;
}

/* ---- the names a node's code uses (emit_common.h) ---------------------- */

static void mark_global(Emit *e, const IrNode *n)
{
    if (!e->global)
        return;
    e->global[n->id] = true;
    e->global[e->mp->root[n->id]] = true;     /* an alias is set from its root */
}

const char *loop_name(Emit *e, const IrNode *n, const char *name)
{
    if (!e->body) {
        mark_global(e, n);
        return name;
    }
    BufKind k = e->mp->kind[e->mp->root[n->id]];
    if (k == BUF_CONST || k == BUF_INPUT) {   /* the same for every copy: named directly */
        if (!e->body->canon) {
            mark_global(e, n);
            return name;
        }
        return k == BUF_CONST ? arena_printf(e->a, "#c%.17g", n->fa[0])
                              : arena_printf(e->a, "#i%lld:%s", (long long)e->g->nodes[e->mp->root[n->id]]->ia[0],
                                             dt_name(n->type));
    }
    LoopSlot *s = slot(e, 's', n, 0, NULL);
    return e->body->canon ? arena_printf(e->a, "#s%d:%s", s->ix, dt_name(n->type)) : name;
}

const char *emit_pgrad(Emit *e, int p)
{
    if (!e->body)
        return arena_printf(e->a, e->grad_fmt, p);
    LoopSlot *s = slot(e, 'g', NULL, p, NULL);
    return e->body->canon ? arena_printf(e->a, "#g%d", s->ix)
                          : arena_printf(e->a, "((float *)mp_loop_at(at[%d]))", s->ix);
}

const char *emit_where_arg(Emit *e, const IrNode *n)
{
    const char *w = where(e, n);
    if (!e->body)
        return arena_printf(e->a, "\"%s\"", w);
    LoopSlot *s = slot(e, 'w', NULL, 0, w);
    if (s->ix < 0)
        return arena_printf(e->a, "\"%s\"", w);
    return arena_printf(e->a, e->body->canon ? "#w%d" : "w[%d]", s->ix);
}

const char *emit_value_arg(Emit *e, int ix)
{
    if (!e->body)
        return arena_printf(e->a, "%d", ix);
    LoopSlot *s = slot(e, 'x', NULL, ix, NULL);
    return arena_printf(e->a, e->body->canon ? "#x%d" : "(int)at[%d]", s->ix);
}

/* ---- rendering runs ------------------------------------------------------ */

typedef struct Item { const IrNode *n; bool wrap; } Item;   /* wrap: evaluation only */
typedef struct Run { int from, to; char *text; LoopBody body; } Run;

static void item(Emit *e, const Item *it, EmitNodeFn *node, const char *training, int *line)
{
    if (!it->wrap) {
        node(e, it->n, line);
        return;
    }
    em(e, "    if (!%s) {", training);
    node(e, it->n, line);
    em(e, "    }\n");
}

/* The run's code with e->body = b, as text. */
static char *render(Emit *e, const Item *items, int from, int to, EmitNodeFn *node,
                    const char *training, LoopBody *b)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    MP_ASSERT(mem != NULL);
    FILE *out = e->out;
    e->out = mem;
    e->body = b;
    int line = -1;
    for (int i = from; i < to; i++)
        item(e, &items[i], node, training, &line);
    e->body = NULL;
    e->out = out;
    fclose(mem);
    char *copy = arena_strdup(e->a, text);
    free(text);
    return copy;
}

/* One int64 of a copy's at row: where slot s of run r lives. */
static long long at_value(Emit *e, const LoopSlot *s)
{
    if (s->kind == 'g')
        return s->v << 2 | 2;
    if (s->kind == 'x')
        return s->v;
    int root = e->mp->root[s->n->id];
    if (e->mp->kind[root] == BUF_PARAM)
        return (long long)e->g->nodes[root]->ia[0] << 2 | 1;
    MP_ASSERT(e->mp->kind[root] == BUF_ARENA);
    return (long long)e->mp->offset[root] << 2;
}

static const char *copy_name(Emit *e, const Run *r, const Item *items)
{
    const IrNode *n = items[r->from].n;
    return arena_printf(e->a, "%d", n->copy);
}

/* The body function, its tables and the loop calling it, for runs [a, b). */
static void emit_loop(Emit *e, const Item *items, Run *runs, int a, int b, EmitNodeFn *node,
                      const char *training, EmitPass pass)
{
    int id = e->nloops++;
    /* where strings all the copies share go into the body, not the table */
    int ns = runs[a].body.nslots;
    bool *same = arena_alloc(e->a, sizeof *same * (size_t)(ns + 1));
    for (int s = 0; s < ns; s++) {
        same[s] = runs[a].body.slots[s].kind == 'w';
        for (int r = a + 1; r < b && same[s]; r++)
            same[s] = !strcmp(runs[r].body.slots[s].str, runs[a].body.slots[s].str);
    }
    LoopBody real = {.same = same};
    char *text = render(e, items, runs[a].from, runs[a].to, node, training, &real);
    FILE *f = e->fns;
    const IrNode *first = items[runs[a].from].n;
    fprintf(f, "\n/* %s, copies %s to %s of its repeat (%d runs of this body): %s */\n",
            source_comment(e, first), copy_name(e, &runs[a], items), copy_name(e, &runs[b - 1], items),
            b - a, pass == PASS_BACKWARD ? "backward" : pass == PASS_FORWARD ? "forward" : "casts");
    int K = real.nat ? real.nat : 1, W = real.nw ? real.nw : 1;
    fprintf(f, "static const int64_t mp_loop%d_at[%d][%d] = {\n", id, b - a, K);
    for (int r = a; r < b; r++) {
        fprintf(f, "    {");
        for (int s = 0, k = 0; s < runs[r].body.nslots; s++)
            if (runs[r].body.slots[s].kind != 'w')
                fprintf(f, "%s%lld", k++ ? ", " : "", at_value(e, &runs[r].body.slots[s]));
        fprintf(f, "%s},\n", real.nat ? "" : "0");
    }
    fprintf(f, "};\nstatic const char *const mp_loop%d_w[%d][%d] = {\n", id, b - a, W);
    for (int r = a; r < b; r++) {
        fprintf(f, "    {");
        for (int s = 0, k = 0; s < runs[r].body.nslots; s++)
            if (runs[r].body.slots[s].kind == 'w' && !same[s])
                fprintf(f, "%s\"%s\"", k++ ? ", " : "", runs[r].body.slots[s].str);
        fprintf(f, "%s},\n", real.nw ? "" : "NULL");
    }
    fprintf(f, "};\n\nstatic int mp_loop%d(%s, const int64_t *at, const char *const *w)\n{\n", id,
            e->loop_params);
    for (int s = 0; s < real.nslots; s++) {
        const LoopSlot *sl = &real.slots[s];
        if (sl->kind == 's')
            fprintf(f, "    %s *%s = (%s *)mp_loop_at(at[%d]);\n", ctype(sl->n->type), emit_base_name(e, sl->n),
                    ctype(sl->n->type), sl->ix);
    }
    fprintf(f, "%s    (void)%s;\n    (void)at;\n    (void)w;\n    return 0;\n}\n", text, e->loop_args);
    em(e, "\n    for (int l = 0; l < %d; l++) /* %s */\n", b - a, source_comment(e, first));
    em(e, pass == PASS_CAST_PARAMS ? "        (void)mp_loop%d(%s, mp_loop%d_at[l], mp_loop%d_w[l]);\n"
                                   : "        if (mp_loop%d(%s, mp_loop%d_at[l], mp_loop%d_w[l]))\n"
                                     "            return 1;\n",
       id, pass == PASS_CAST_PARAMS ? e->loop_cast_args : e->loop_args, id, id);
}

/* Items [from, to), all of one repeat: loops where runs repeat. */
static void emit_repeat(Emit *e, const Item *items, int from, int to, EmitNodeFn *node,
                        const char *training, EmitPass pass, int *line)
{
    Run *runs = arena_alloc(e->a, sizeof *runs * (size_t)(to - from + 1));
    int nr = 0;
    for (int i = from; i < to; nr++) {
        runs[nr].from = i;
        while (i < to && items[i].n->copy == items[runs[nr].from].n->copy)
            i++;
        runs[nr].to = i;
        runs[nr].body.canon = true;
        runs[nr].text = render(e, items, runs[nr].from, i, node, training, &runs[nr].body);
    }
    for (int a = 0; a < nr;) {
        int b = a + 1;
        while (b < nr && !strcmp(runs[b].text, runs[a].text))
            b++;
        if (b - a >= 2) {
            emit_loop(e, items, runs, a, b, node, training, pass);
            *line = -1;
        } else
            for (int i = runs[a].from; i < runs[a].to; i++)
                item(e, &items[i], node, training, line);
        a = b;
    }
}

void emit_pass(Emit *e, EmitPass pass, EmitNodeFn *node, const char *training)
{
    const IrGraph *g = e->g;
    bool *for_loss = needed_by(e, g->loss);
    Item *items = arena_alloc(e->a, sizeof *items * (size_t)(g->nnodes + 1));
    int ni = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        BufKind k = e->mp->kind[i];
        if (pass != PASS_FORWARD) {
            if (pass == PASS_CAST_PARAMS ? n->hoisted : n->phase == PH_BACKWARD)
                items[ni++] = (Item){n, false};
            continue;
        }
        if (n->phase != PH_FORWARD || n->hoisted || k == BUF_PARAM || k == BUF_INPUT || k == BUF_CONST)
            continue;
        items[ni++] = (Item){n, !for_loss[i]};
    }
    int line = -1;
    for (int i = 0; i < ni;) {
        int rep = items[i].n->rep, j = i + 1;
        while (e->loops && rep && j < ni && items[j].n->rep == rep)
            j++;
        if (e->loops && rep)
            emit_repeat(e, items, i, j, node, training, pass, &line);
        else
            item(e, &items[i], node, training, &line);
        i = j;
    }
}

/* ---- the parts of the program around the loops ---------------------------- */

static void loops_begin(Emit *e)
{
    e->global = arena_alloc(e->a, sizeof *e->global * (size_t)(e->g->nnodes + 1));
    e->fns = open_memstream(&e->fns_text, &e->fns_len);
    MP_ASSERT(e->fns != NULL);
}

bool emit_declared(Emit *e, const IrNode *n)
{
    return !e->nloops || !n->rep || e->global[n->id];
}

static void emit_loops_end(Emit *e, const char *at_fn)
{
    fclose(e->fns);
    e->fns = NULL;
    if (e->nloops) {
        em(e, "\n/* ==== the bodies of repeat loops: one function per body, called per copy\n"
              " * with that copy's row of its tables (at: where each value lives, as\n"
              " * mp_loop_at() reads it; w: the copy's names for error messages) ==== */\n");
        em(e, "%s", at_fn);
        fwrite(e->fns_text, 1, e->fns_len, e->out);
    }
    free(e->fns_text);
    e->fns_text = NULL;
}

void emit_model_code(Emit *e, void (*passes)(Emit *), void (*decls)(Emit *), const char *at_fn)
{
    char *text = NULL;
    size_t len = 0;
    FILE *file = e->out;
    e->out = open_memstream(&text, &len);
    MP_ASSERT(e->out != NULL);
    loops_begin(e);
    passes(e);
    fclose(e->out);
    e->out = file;
    decls(e);
    emit_loops_end(e, at_fn);
    fwrite(text, 1, len, e->out);
    free(text);
}
