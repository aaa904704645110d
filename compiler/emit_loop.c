/* emit_loop.c - the copies of a `repeat` and the iterations of a `for`
 * loop run as a loop over one function per body.
 *
 * The IR stays unrolled (sema.c / sema_blocks.c tag each node with its
 * outermost repeat or for loop and its copy, IrNode.rep / copy; a for
 * loop's copy k is NAME = from + k, IrGraph.loops). A pass
 * (emit_pass) is cut into runs: the nodes of one copy, consecutive. Each
 * run is rendered twice over in "canonical" form: every value it names
 * becomes a numbered slot (#s0:f16), and so do the things that differ per
 * copy by design (a parameter's gradient buffer #g, a named value's index
 * #x, an integer argument such as the start of a slice, a for loop's
 * select(x, 1, t), #a, an error message's `where` #w); constants and
 * inputs are named directly (#c / #i). Runs with the same canonical text
 * are isomorphic: the same ops, types, shapes and attributes, in the same
 * order, differing only in where their values live and in those integers.
 * Consecutive isomorphic runs become one body function, rendered once from
 * the first run (its names, as locals), and a loop calling it per copy with
 * that copy's row of the data: `at` (memplan offsets, parameter numbers,
 * integer arguments: the slots) and `w` (the where strings); an integer or
 * a where string that every copy shares is written into the body. Each
 * column of `at` is a rule where one fits (Rule: a step per copy, or a few
 * values in turn, with a few first and last copies written out), else a
 * table column, so a loop over a recurrent body is as long at 1000 steps
 * as at 10. Everything else (a copy unlike its neighbours, a dropout whose
 * seed is its node id, a constant that differs per iteration, a value read
 * by the runtime) stays straight-line code, as before; so does a first or
 * last copy whose own buffers would make a table column longer than its
 * code (emit_repeat).
 *
 * Invariant: a program without loops is byte-for-byte the one mpcc wrote
 * before loops existed; with loops it runs the same kernels on the same
 * memory in the same order, so its results are bit-identical. */
#include "emit_common.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>

typedef struct LoopSlot {
    char kind;                 /* 's' value, 'g' parameter gradient, 'x' value index,
                                  'a' integer argument, 'w' where */
    const IrNode *n;           /* 's' */
    long long v;               /* 'g' parameter, 'x' index, 'a' value */
    const char *str;           /* 'w' */
    int ix;                    /* index in the at table ('s' 'g' 'x') or the w table ('w') */
} LoopSlot;

struct LoopBody {
    bool canon;                /* rendering to compare (placeholders), not to emit */
    const bool *same;          /* per slot, in order: a where string or an integer
                                  argument every copy shares, written into
                                  the body (emit_loop) */
    LoopSlot *slots;
    int nslots, cap, nat, nw;
};

static LoopSlot *slot(Emit *e, char kind, const IrNode *n, long long v, const char *str)
{
    LoopBody *b = e->body;
    for (int i = 0; i < b->nslots; i++) {
        LoopSlot *s = &b->slots[i];
        if (s->kind == kind && kind != 'a' && s->n == n && s->v == v && (!str || !strcmp(s->str, str)))
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

const char *emit_int_arg(Emit *e, long long v)
{
    if (!e->body)
        return arena_printf(e->a, "%lld", v);
    LoopSlot *s = slot(e, 'a', NULL, v, NULL);    /* every call a slot of its own */
    if (s->ix < 0)
        return arena_printf(e->a, "%lld", v);
    return arena_printf(e->a, e->body->canon ? "#a%d" : "at[%d]", s->ix);
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

/* One int64 of a copy's at row: where slot s of run r lives, or its value. */
static long long at_value(Emit *e, const LoopSlot *s)
{
    if (s->kind == 'g')
        return s->v << 2 | 2;
    if (s->kind == 'x' || s->kind == 'a')
        return s->v;
    int root = e->mp->root[s->n->id];
    if (e->mp->kind[root] == BUF_PARAM)
        return (long long)e->g->nodes[root]->ia[0] << 2 | 1;
    MP_ASSERT(e->mp->kind[root] == BUF_ARENA);
    return (long long)(e->mp->offset[root] + e->mp->view_off[s->n->id]) << 2;
}

/* Slot s of runs [a, b) is a where string or an integer argument that
 * every run shares: written into the body, not a table. */
static bool shared(const Run *runs, int a, int b, int s)
{
    const LoopSlot *x = &runs[a].body.slots[s];
    if (x->kind != 'w' && x->kind != 'a')
        return false;
    for (int r = a + 1; r < b; r++) {
        const LoopSlot *y = &runs[r].body.slots[s];
        if (x->kind == 'w' ? strcmp(x->str, y->str) != 0 : x->v != y->v)
            return false;
    }
    return true;
}

#define LOOP_MAX_PERIOD 8   /* a rule's period, at most */

/* A column of a loop's at table as a rule: rows [lead, n - trail) are
 * row lead + (l - lead) % p plus d * ((l - lead) / p); the lead rows
 * before and trail rows after are written out. */
typedef struct Rule { int p, lead, trail; long long d; } Rule;

static long long cell(Emit *e, const Run *runs, int r, int s) { return at_value(e, &runs[r].body.slots[s]); }

/* Column s of the at table of runs [a, b) as the rule that writes the
 * fewest numbers, the rule repeating at least once; false when a table
 * column is as small. A recurrent body's memplan offsets step by a
 * constant or alternate between a few buffers, its first and last steps'
 * often their own; its index on the time axis steps by one; a for loop's
 * parameters are the same in every copy, a repeat's step by its parameters
 * per copy: the program stays flat in the count. */
static bool rule(Emit *e, const Run *runs, int a, int b, int s, Rule *out)
{
    int n = b - a, best = n - 4;     /* a rule's own 4 numbers */
    bool found = false;
    for (int p = 1; p <= LOOP_MAX_PERIOD && 2 * p <= n; p++)
        for (int i = p; i < n;) {
            /* rows [i - p, j): each p rows on, d more */
            long long d = cell(e, runs, a + i, s) - cell(e, runs, a + i - p, s);
            int j = i + 1;
            while (j < n && cell(e, runs, a + j, s) - cell(e, runs, a + j - p, s) == d)
                j++;
            if (j - i >= p && n - (j - i) < best) {   /* rows written out, and p bases */
                best = n - (j - i);
                *out = (Rule){p, i - p, n - j, d};
                found = true;
            }
            i = j;
        }
    return found;
}

/* About the bytes a loop over runs [a, b) adds for its at table: a number
 * per copy for each column no rule gives, the rule's numbers for the others. */
static size_t table_bytes(Emit *e, const Run *runs, int a, int b)
{
    size_t k = 0;
    Rule r;
    for (int s = 0; s < runs[a].body.nslots; s++)
        if (runs[a].body.slots[s].kind != 'w' && !shared(runs, a, b, s))
            k += rule(e, runs, a, b, s, &r) ? (size_t)(4 + r.p + r.lead + r.trail) : (size_t)(b - a);
    return k * 8;
}

static const char *copy_name(Emit *e, const Run *r, const Item *items)
{
    const IrNode *n = items[r->from].n;
    const IrLoop *lp = &e->g->loops[n->rep - 1];
    if (lp->var)
        return arena_printf(e->a, "%s = %lld", lp->var, (long long)(lp->from + n->copy));
    return arena_printf(e->a, "%d", n->copy);
}

/* The body function, its tables and the loop calling it, for runs [a, b). */
static void emit_loop(Emit *e, const Item *items, Run *runs, int a, int b, EmitNodeFn *node,
                      const char *training, EmitPass pass)
{
    int id = e->nloops++;
    /* where strings and integer arguments all the copies share go into the
     * body, not the table */
    int ns = runs[a].body.nslots;
    bool *same = arena_alloc(e->a, sizeof *same * (size_t)(ns + 1));
    for (int s = 0; s < ns; s++)
        same[s] = shared(runs, a, b, s);
    LoopBody real = {.same = same};
    char *text = render(e, items, runs[a].from, runs[a].to, node, training, &real);
    FILE *f = e->fns;
    const IrNode *first = items[runs[a].from].n;
    bool is_for = e->g->loops[first->rep - 1].var != NULL;
    fprintf(f, "\n/* %s, %s %s to %s of its %s (%d runs of this body): %s */\n", source_comment(e, first),
            is_for ? "iterations" : "copies", copy_name(e, &runs[a], items), copy_name(e, &runs[b - 1], items),
            is_for ? "for loop" : "repeat", b - a,
            pass == PASS_BACKWARD ? "backward" : pass == PASS_FORWARD ? "forward" : "casts");
    /* the at row of copy l: each column by its rule, or from the table */
    int nt = 0;
    Rule *ru = arena_alloc(e->a, sizeof *ru * (size_t)(ns + 1));
    if (real.nat) {
        fprintf(f, "static const int64_t mp_loop%d_col[] = {", id);
        for (int s = 0; s < ns; s++) {
            if (runs[a].body.slots[s].kind == 'w' || same[s])
                continue;
            if (!rule(e, runs, a, b, s, &ru[s])) {
                fprintf(f, "\n    0, %d,", nt++);
                continue;
            }
            fprintf(f, "\n    %d, %lld, %d, %d,", ru[s].p, ru[s].d, ru[s].lead, ru[s].trail);
            for (int l = 0; l < ru[s].lead; l++)
                fprintf(f, " %lld,", cell(e, runs, a + l, s));
            for (int l = b - a - ru[s].trail; l < b - a; l++)
                fprintf(f, " %lld,", cell(e, runs, a + l, s));
            for (int l = 0; l < ru[s].p; l++)
                fprintf(f, " %lld,", cell(e, runs, a + ru[s].lead + l, s));
        }
        fprintf(f, "\n};\n");
    }
    if (nt) {
        fprintf(f, "static const int64_t mp_loop%d_at[%d][%d] = {\n", id, b - a, nt);
        for (int r = a; r < b; r++) {
            fprintf(f, "    {");
            for (int s = 0, k = 0; s < ns; s++)
                if (runs[a].body.slots[s].kind != 'w' && !same[s] && !ru[s].p)
                    fprintf(f, "%s%lld", k++ ? ", " : "", cell(e, runs, r, s));
            fprintf(f, "},\n");
        }
        fprintf(f, "};\n");
    }
    if (real.nw) {
        fprintf(f, "static const char *const mp_loop%d_w[%d][%d] = {\n", id, b - a, real.nw);
        for (int r = a; r < b; r++) {
            fprintf(f, "    {");
            for (int s = 0, k = 0; s < ns; s++)
                if (runs[r].body.slots[s].kind == 'w' && !same[s])
                    fprintf(f, "%s\"%s\"", k++ ? ", " : "", runs[r].body.slots[s].str);
            fprintf(f, "},\n");
        }
        fprintf(f, "};\n");
    }
    fprintf(f, "\nstatic int mp_loop%d(%s, const int64_t *at, const char *const *w)\n{\n", id, e->loop_params);
    for (int s = 0; s < real.nslots; s++) {
        const LoopSlot *sl = &real.slots[s];
        if (sl->kind == 's')
            fprintf(f, "    %s *%s = (%s *)mp_loop_at(at[%d]);\n", ctype(sl->n->type), emit_base_name(e, sl->n),
                    ctype(sl->n->type), sl->ix);
    }
    fprintf(f, "%s    (void)%s;\n    (void)at;\n    (void)w;\n    return 0;\n}\n", text, e->loop_args);
    em(e, "\n    for (int l = 0; l < %d; l++) { /* %s */\n", b - a, source_comment(e, first));
    const char *at = "NULL", *w = real.nw ? arena_printf(e->a, "mp_loop%d_w[l]", id) : "NULL";
    if (real.nat) {
        em(e, "        int64_t at[%d];\n        mp_loop_row(at, mp_loop%d_col, %d, %d, l, %s);\n", real.nat, id,
           real.nat, b - a, nt ? arena_printf(e->a, "mp_loop%d_at[l]", id) : "NULL");
        at = "at";
    }
    const char *args = pass == PASS_CAST_PARAMS ? e->loop_cast_args : e->loop_args;
    if (pass == PASS_CAST_PARAMS)
        em(e, "        (void)mp_loop%d(%s, %s, %s);\n    }\n", id, args, at, w);
    else
        em(e, "        if (mp_loop%d(%s, %s, %s))\n            return 1;\n    }\n", id, args, at, w);
}

static void straight(Emit *e, const Item *items, const Run *runs, int a, int b, EmitNodeFn *node,
                     const char *training, int *line)
{
    for (int r = a; r < b; r++)
        for (int i = runs[r].from; i < runs[r].to; i++)
            item(e, &items[i], node, training, line);
}

/* Items [from, to), all of one repeat or for loop: loops where runs repeat. */
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
        if (b - a < 2) {
            straight(e, items, runs, a, b, node, training, line);
            a = b;
            continue;
        }
        /* the first or the last copy written out where that makes the
         * program smaller: a recurrent body's first and last steps often
         * read or write buffers of their own, a table column for the loop */
        size_t text = strlen(runs[a].text), best = table_bytes(e, runs, a, b);
        int lo = a, hi = b;
        for (int c = 1; c < 4; c++) {
            int x = a + (c & 1), y = b - (c >> 1);
            size_t cost = (size_t)(x - a + b - y) * text;
            if (y - x >= 2 && cost < best && cost + table_bytes(e, runs, x, y) < best) {
                best = cost + table_bytes(e, runs, x, y);
                lo = x;
                hi = y;
            }
        }
        straight(e, items, runs, a, lo, node, training, line);
        emit_loop(e, items, runs, lo, hi, node, training, pass);
        *line = -1;
        straight(e, items, runs, hi, b, node, training, line);
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

/* Copy l's at row (k columns) of a loop over n copies: column i by its
 * rule in col (p, d, lead, trail, then the lead rows', the trail rows' and
 * p bases: emit_loop.c's Rule), or where p is 0 column d of tab, the
 * loop's table row l. */
static const char row_fn[] =
    "\nstatic void mp_loop_row(int64_t *at, const int64_t *col, int k, int n, int l, const int64_t *tab)\n{\n"
    "    for (int i = 0; i < k; i++) {\n"
    "        int64_t p = col[0], d = col[1];\n"
    "        if (!p) {\n"
    "            at[i] = tab[d];\n"
    "            col += 2;\n"
    "            continue;\n"
    "        }\n"
    "        int64_t lead = col[2], trail = col[3];\n"
    "        const int64_t *v = col + 4;\n"
    "        at[i] = l < lead ? v[l] : l >= n - trail ? v[lead + l - (n - trail)]\n"
    "              : v[lead + trail + (l - lead) % p] + d * ((l - lead) / p);\n"
    "        col += 4 + lead + trail + p;\n"
    "    }\n}\n";

static void emit_loops_end(Emit *e, const char *at_fn)
{
    fclose(e->fns);
    e->fns = NULL;
    if (e->nloops) {
        em(e, "\n/* ==== the bodies of repeat and for loops: one function per body, called\n"
              " * per copy with that copy's row of its tables (at: where each value lives,\n"
              " * as mp_loop_at() reads it, and the integer arguments that differ per copy;\n"
              " * w: the copy's names for error messages) ==== */\n");
        em(e, "%s%s", at_fn, row_fn);
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
