/* emit_fused.c - see emit_fused.h. */
#include "emit_fused.h"
#include "fuse.h"
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A group as its code needs it: members in order, the values read from
 * outside (full-size arrays and single elements), the element count. */
typedef struct Group {
    const IrNode **m;
    int nm;
    const IrNode **x;          /* external inputs, each once */
    int nx;
    long long len;
} Group;

static Group group_of(Emit *e, const IrNode *last)
{
    const IrGraph *g = e->g;
    Group gr = {0};
    gr.len = (long long)shape_numel(&last->shape);
    int first = last->fused_first->id, span = last->id - first + 1;
    gr.m = arena_alloc(e->a, sizeof *gr.m * (size_t)span);
    gr.x = arena_alloc(e->a, sizeof *gr.x * (size_t)(2 * span));
    for (int i = first; i <= last->id; i++)
        if (g->nodes[i]->fused == last->fused)
            gr.m[gr.nm++] = g->nodes[i];
    for (int j = 0; j < gr.nm; j++)
        for (int k = 0; k < gr.m[j]->nin; k++) {
            const IrNode *v = gr.m[j]->in[k];
            bool seen = v->fused == last->fused;
            for (int q = 0; q < gr.nx && !seen; q++)
                seen = gr.x[q] == v;
            if (!seen)
                gr.x[gr.nx++] = v;
        }
    return gr;
}

/* Temporaries are named by position in the group (t0, t1, ...), never by
 * node id, so the isomorphic groups of repeat copies read the same and
 * share one loop body (emit_loop.c). */
static int member_index(const Group *gr, const IrNode *v)
{
    for (int j = 0; j < gr->nm; j++)
        if (gr->m[j] == v)
            return j;
    return -1;
}

static int ext_index(const Group *gr, const IrNode *v)
{
    for (int q = 0; q < gr->nx; q++)
        if (gr->x[q] == v)
            return q;
    return -1;
}

static bool is_scalar(const Group *gr, const IrNode *v)
{
    return shape_numel(&v->shape) == 1 && gr->len != 1;
}

static const char *in_type(const IrNode *v) { return v->op == OP_CONST ? "MP_F32" : mpdt(v->type); }

/* The member's value, rounded as its unfused kernel's store rounds it;
 * in(k) names input k: a member's temporary or an external input. */
static const char *member_expr(Emit *e, const Group *gr, const IrNode *n, const char *elem, bool fence)
{
    const char *in[2];
    for (int k = 0; k < n->nin; k++) {
        const IrNode *v = n->in[k];
        int q = ext_index(gr, v);
        if (q < 0)
            in[k] = arena_printf(e->a, "t%d%s", member_index(gr, v), elem);
        else
            in[k] = arena_printf(e->a, "%c%d%s", is_scalar(gr, v) ? 's' : 'x', q, is_scalar(gr, v) ? "" : elem);
    }
    const char *x = fuse_expr(e->a, n, in);
    MP_ASSERT(x);
    if (n->type != DT_F32)
        x = arena_printf(e->a, "mp_round(%s, %s)", x, mpdt(n->type));
    return fence ? arena_printf(e->a, "mp_fence(%s)", x) : x;
}

/* "relu -> cast -> mul": the ops of the group, for its comment. */
static const char *op_chain(Emit *e, const Group *gr)
{
    const char *s = "";
    for (int j = 0; j < gr->nm; j++)
        s = arena_printf(e->a, "%s%s%s", s, j ? " -> " : "", op_info[gr->m[j]->op].name);
    return s;
}

static void stored_after(Emit *e, const Group *gr, EmitAfterFn *after)
{
    for (int j = 0; j < gr->nm; j++)
        if (!gr->m[j]->fused_internal)
            after(e, gr->m[j]);
}

/* ---- C: one chunked loop ------------------------------------------------- */

void emit_fused_c(Emit *e, const IrNode *n, EmitAfterFn *after)
{
    Group gr = group_of(e, n);
    em(e, "    { /* fused: %s, one pass */\n", op_chain(e, &gr));
    for (int q = 0; q < gr.nx; q++)
        if (is_scalar(&gr, gr.x[q]))
            em(e, "    const float s%d = mp_ld(%s, %s, 0);\n", q, cname(e, gr.x[q]), in_type(gr.x[q]));
    em(e, "    MP_OMP(parallel for if (%lldLL > MP_PAR_MIN))\n", gr.len);
    em(e, "    for (int64_t c_ = 0; c_ < %lldLL; c_ += MP_CHUNK) {\n", gr.len);
    em(e, "        int64_t m_ = mp_min64(%lldLL - c_, MP_CHUNK);\n", gr.len);
    for (int q = 0; q < gr.nx; q++)
        if (!is_scalar(&gr, gr.x[q]))
            em(e, "        float x%d[MP_CHUNK];\n        mp_ld_n(%s, %s, c_, 1, m_, x%d);\n", q,
               cname(e, gr.x[q]), in_type(gr.x[q]), q);
    for (int j = 0; j < gr.nm; j++) {
        const IrNode *m = gr.m[j];
        em(e, "        float t%d[MP_CHUNK]; /* %s */\n", j, op_info[m->op].name);
        em(e, "        for (int64_t i = 0; i < m_; i++)\n            t%d[i] = %s;\n", j,
           member_expr(e, &gr, m, "[i]", false));
        if (!m->fused_internal)
            em(e, "        mp_st_n(%s, %s, c_, 1, m_, t%d);\n", cname(e, m), mpdt(m->type), j);
    }
    em(e, "    }}\n");
    stored_after(e, &gr, after);
}

/* ---- CUDA: one `each` kernel ---------------------------------------------- */

/* The functor's members and operator(), which depend only on the group's
 * ops, types and size: groups with the same text share one MpFused<k>. */
static char *functor_body(Emit *e, const IrNode *last)
{
    Group gr = group_of(e, last);
    char *text = NULL;
    size_t len = 0;
    FILE *save = e->out;
    e->out = open_memstream(&text, &len);
    MP_ASSERT(e->out);
    em(e, "    /* %s */\n", op_chain(e, &gr));
    for (int j = 0; j < gr.nm; j++)
        if (!gr.m[j]->fused_internal)
            em(e, "    void *y%d;\n", j);
    for (int q = 0; q < gr.nx; q++)
        em(e, "    const void *%c%d;\n", is_scalar(&gr, gr.x[q]) ? 'p' : 'q', q);
    em(e, "    MP_HD void operator()(int64_t i) const\n    {\n");
    for (int q = 0; q < gr.nx; q++)
        em(e, "        float %c%d = mp_cu_ld(%c%d, %s, %s);\n", is_scalar(&gr, gr.x[q]) ? 's' : 'x', q,
           is_scalar(&gr, gr.x[q]) ? 'p' : 'q', q, in_type(gr.x[q]), is_scalar(&gr, gr.x[q]) ? "0" : "i");
    for (int j = 0; j < gr.nm; j++) {
        const IrNode *m = gr.m[j];
        em(e, "        float t%d = %s;\n", j, member_expr(e, &gr, m, "", true));
        if (!m->fused_internal)
            em(e, "        mp_cu_st(y%d, %s, i, t%d);\n", j, mpdt(m->type), j);
    }
    em(e, "    }\n");
    fclose(e->out);
    e->out = save;
    char *copy = arena_strdup(e->a, text);
    free(text);
    return copy;
}

/* Every group's functor number, and the distinct bodies: made at the first
 * group written (the passes are rendered before the declarations). */
static void prepare_functors(Emit *e)
{
    const IrGraph *g = e->g;
    int ngroups = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->fused > ngroups)
            ngroups = g->nodes[i]->fused;
    e->fused_functor = arena_alloc(e->a, sizeof *e->fused_functor * (size_t)(ngroups + 1));
    e->fused_texts = arena_alloc(e->a, sizeof *e->fused_texts * (size_t)(ngroups + 1));
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (!n->fused || fuse_last(g, n) != n)
            continue;
        const char *body = functor_body(e, n);
        int k = 0;
        while (k < e->nfused_texts && strcmp(e->fused_texts[k], body) != 0)   /* few distinct */
            k++;
        if (k == e->nfused_texts)
            e->fused_texts[e->nfused_texts++] = body;
        e->fused_functor[n->fused] = k + 1;
    }
}

void emit_fused_cuda_functors(Emit *e)
{
    if (!e->fused_functor)
        prepare_functors(e);
    for (int k = 0; k < e->nfused_texts; k++)
        em(e, "\nstruct MpFused%d {\n%s};\n", k + 1, e->fused_texts[k]);
}

void emit_fused_cuda(Emit *e, const IrNode *n, EmitAfterFn *after)
{
    if (!e->fused_functor)
        prepare_functors(e);
    Group gr = group_of(e, n);
    int k = e->fused_functor[n->fused];
    em(e, "    mp_cu_at(\"fused %s\", %s);\n", op_chain(e, &gr), emit_where_arg(e, n));
    em(e, "    { MpFused%d f_ = {", k);
    const char *sep = "";
    for (int j = 0; j < gr.nm; j++)
        if (!gr.m[j]->fused_internal) {
            em(e, "%s%s", sep, cname(e, gr.m[j]));
            sep = ", ";
        }
    for (int q = 0; q < gr.nx; q++) {
        em(e, "%s%s", sep, cname(e, gr.x[q]));
        sep = ", ";
    }
    em(e, "};\n      mp_cu_each(\"fused_%d\", %lldLL, f_); }\n", k, gr.len);
    stored_after(e, &gr, after);
}
