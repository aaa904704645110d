/* emit_fused.c - see emit_fused.h. */
#include "emit_fused.h"
#include "fuse.h"
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A group as its code needs it: members in order, the values read from
 * outside (full-size arrays and single elements), the element count, and
 * the product heading it (fuse_is_product) or NULL. With head_outside (the
 * CUDA program) the product is no member: it runs first, as itself, and
 * the members read its stored value as an external input. The head's own
 * inputs are the GEMM's, never the group's. */
typedef struct Group {
    const IrNode **m;
    int nm;
    const IrNode **x;          /* external inputs, each once */
    int nx;
    long long len;
    const IrNode *head;
} Group;

static int member_index(const Group *gr, const IrNode *v);

static Group group_of(Emit *e, const IrNode *last, bool head_outside)
{
    const IrGraph *g = e->g;
    Group gr = {0};
    gr.len = (long long)shape_numel(&last->shape);
    int first = last->fused_first->id, span = last->id - first + 1;
    if (fuse_is_product(last->fused_first))
        gr.head = last->fused_first;
    gr.m = arena_alloc(e->a, sizeof *gr.m * (size_t)span);
    gr.x = arena_alloc(e->a, sizeof *gr.x * (size_t)(2 * span));
    for (int i = first; i <= last->id; i++)
        if (g->nodes[i]->fused == last->fused && !(head_outside && g->nodes[i] == gr.head))
            gr.m[gr.nm++] = g->nodes[i];
    for (int j = 0; j < gr.nm; j++)
        for (int k = 0; k < gr.m[j]->nin && gr.m[j] != gr.head; k++) {
            const IrNode *v = gr.m[j]->in[k];
            bool seen = member_index(&gr, v) >= 0;
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
/* Input v of a member: t<j> (a member), x<q> (an external array), s<q>
 * (a single element); elem indexes an array. */
static const char *in_name(Emit *e, const Group *gr, const IrNode *v, const char *elem)
{
    int q = ext_index(gr, v);
    if (q < 0)
        return arena_printf(e->a, "t%d%s", member_index(gr, v), elem);
    return arena_printf(e->a, "%c%d%s", is_scalar(gr, v) ? 's' : 'x', q, is_scalar(gr, v) ? "" : elem);
}

static const char *member_expr(Emit *e, const Group *gr, const IrNode *n, const char *elem, bool fence)
{
    const char *in[2];
    for (int k = 0; k < n->nin; k++)
        in[k] = in_name(e, gr, n->in[k], elem);
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

/* The chunk function the unfused kernel runs for n (mp_vmath.h: AVX2 where
 * the CPU has it, bit-identical to the scalar function), or NULL. */
static const char *vec_fn(const IrNode *n)
{
    switch (n->op) {
    case OP_GELU: return n->ia[0] ? "mp_vgelu_tanh" : "mp_vgelu";
    case OP_GELU_GRAD: return n->ia[0] ? "mp_vgelu_tanh_grad" : "mp_vgelu_grad";
    case OP_TANH: return "mp_vtanh";
    case OP_SIGMOID: return "mp_vsigmoid";
    case OP_SILU: return "mp_vsilu";
    case OP_SILU_GRAD: return "mp_vsilu_grad";
    case OP_EXP: return "mp_vexp";
    default: return NULL;
    }
}

/* Member j over the chunk: t<j>[idx] for idx < m_, rounded to its type;
 * through its chunk function when it has one and no single-element input.
 * dst (NULL: not stored): where it is stored, "ARRAY, OFFSET"; the rounding
 * and the store are then one conversion (mp_st_round_n). stored_later: the
 * values go on to a store that rounds them (the GEMM's, for an epilogue's
 * last member), and nothing in the chunk reads them: not rounded here. */
static void c_member(Emit *e, const Group *gr, int j, const char *idx, const char *dst,
                     bool stored_later)
{
    const IrNode *m = gr->m[j];
    const char *vf = vec_fn(m);
    for (int k = 0; k < m->nin; k++)
        if (ext_index(gr, m->in[k]) >= 0 && is_scalar(gr, m->in[k]))
            vf = NULL;
    em(e, "        float t%d[MP_CHUNK]; /* %s */\n", j, op_info[m->op].name);
    if (m == gr->head)          /* the GEMM's f32 result, rounded as its store rounds it */
        em(e, "        memcpy(t%d, v + c_, (size_t)m_ * sizeof *v);\n", j);
    else if (vf) {
        em(e, "        memcpy(t%d, %s, (size_t)m_ * sizeof *t%d);\n", j, in_name(e, gr, m->in[0], ""), j);
        em(e, "        %s(t%d, %s%sm_);\n", vf, j, m->nin > 1 ? in_name(e, gr, m->in[1], "") : "",
           m->nin > 1 ? ", " : "");
    } else {
        const char *in[2];
        for (int k = 0; k < m->nin; k++)
            in[k] = in_name(e, gr, m->in[k], arena_printf(e->a, "[%s]", idx));
        em(e, "        for (int64_t %s = 0; %s < m_; %s++)\n            t%d[%s] = %s;\n", idx, idx, idx, j, idx,
           fuse_expr(e->a, m, in));
    }
    if (dst && m->type == DT_F32)
        em(e, "        mp_st_n(%s, 1, m_, t%d);\n", dst, j);
    else if (dst)
        em(e, "        mp_st_round_n(%s, m_, t%d);\n", dst, j);
    else if (m->type != DT_F32 && !stored_later)
        em(e, "        mp_round_n(t%d, %s, m_);\n", j, mpdt(m->type));
}

static void epilogue_call(Emit *e, const Group *gr, EmitAfterFn *after);

void emit_fused_c(Emit *e, const IrNode *n, EmitAfterFn *after)
{
    Group gr = group_of(e, n, false);
    if (gr.head) {
        epilogue_call(e, &gr, after);
        return;
    }
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
        c_member(e, &gr, j, "i", m->fused_internal ? NULL
                 : arena_printf(e->a, "%s, %s, c_", cname(e, m), mpdt(m->type)), false);
    }
    em(e, "    }}\n");
    stored_after(e, &gr, after);
}

/* ---- C: the product's epilogue (MpGemm.epi) ---------------------------- */

/* The columns of the product's [M, N] result. */
static long long product_cols(const IrNode *p)
{
    return p->op == OP_LINEAR ? (long long)p->in[1]->shape.d[0] : fuse_matmul_dims(p).n;
}

/* The stored member the GEMM itself stores (its C): the last one. */
static int epi_target(const Group *gr)
{
    int t = gr->nm - 1;
    while (t > 0 && gr->m[t]->fused_internal)
        t--;
    return t;
}

/* The context's fields and the function's body, which depend only on the
 * group's ops and types: groups with the same text share one MpEpi<k>. A
 * row segment is done in chunks, each member a tight loop as in
 * emit_fused_c; the target member's values go back in v. */
static void epilogue_text(Emit *e, const IrNode *last)
{
    Group gr = group_of(e, last, false);
    int target = epi_target(&gr);
    em(e, "/* %s */\n    int64_t ldc;         /* the row length of the product */\n", op_chain(e, &gr));
    for (int j = 0; j < gr.nm; j++)
        if (!gr.m[j]->fused_internal && j != target)
            em(e, "    void *y%d;\n", j);
    for (int q = 0; q < gr.nx; q++)
        em(e, "    const void *%c%d;\n", is_scalar(&gr, gr.x[q]) ? 'p' : 'q', q);
    em(e, "@");                 /* fields | body */
    for (int q = 0; q < gr.nx; q++)
        if (is_scalar(&gr, gr.x[q]))
            em(e, "    const float s%d = mp_ld(c->p%d, %s, 0);\n", q, q, in_type(gr.x[q]));
    em(e, "    for (int64_t c_ = 0; c_ < n; c_ += MP_CHUNK) {\n");
    bool at = false;            /* an array of the group is read or written at e_ */
    for (int q = 0; q < gr.nx; q++)
        at |= !is_scalar(&gr, gr.x[q]);
    for (int j = 0; j < gr.nm; j++)
        at |= !gr.m[j]->fused_internal && j != target;
    em(e, "        int64_t m_ = mp_min64(n - c_, MP_CHUNK)%s;\n", at ? ", e_ = row * c->ldc + j0 + c_" : "");
    for (int q = 0; q < gr.nx; q++)
        if (!is_scalar(&gr, gr.x[q]))
            em(e, "        float x%d[MP_CHUNK];\n        mp_ld_n(c->q%d, %s, e_, 1, m_, x%d);\n", q, q,
               in_type(gr.x[q]), q);
    for (int j = 0; j < gr.nm; j++) {
        const IrNode *m = gr.m[j];
        c_member(e, &gr, j, "k_", m->fused_internal || j == target ? NULL
                 : arena_printf(e->a, "c->y%d, %s, e_", j, mpdt(m->type)),
                 j == target && j == gr.nm - 1);
    }
    em(e, "        memcpy(v + c_, t%d, (size_t)m_ * sizeof *v);\n    }\n", target);
}

/* The text `write` gives for the group ending at last. */
static const char *group_text(Emit *e, void (*write)(Emit *, const IrNode *), const IrNode *last)
{
    char *text = NULL;
    size_t len = 0;
    FILE *save = e->out;
    e->out = open_memstream(&text, &len);
    MP_ASSERT(e->out);
    write(e, last);
    fclose(e->out);
    e->out = save;
    char *copy = arena_strdup(e->a, text);
    free(text);
    return copy;
}

/* Every group's number among the distinct texts `write` gives (the CUDA
 * functors, the C epilogues: only product groups), made at the first group
 * written (the passes are rendered before the declarations). */
static void number_groups(Emit *e, void (*write)(Emit *, const IrNode *), bool products)
{
    const IrGraph *g = e->g;
    e->fused_functor = arena_alloc(e->a, sizeof *e->fused_functor * (size_t)(g->nnodes + 1));
    e->fused_texts = arena_alloc(e->a, sizeof *e->fused_texts * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (!n->fused || fuse_last(g, n) != n || (products && !fuse_is_product(n->fused_first)))
            continue;
        const char *body = group_text(e, write, n);
        int k = 0;
        while (k < e->nfused_texts && strcmp(e->fused_texts[k], body) != 0)   /* few distinct */
            k++;
        if (k == e->nfused_texts)
            e->fused_texts[e->nfused_texts++] = body;
        e->fused_functor[n->fused] = k + 1;
    }
}

static void prepare_epilogues(Emit *e) { number_groups(e, epilogue_text, true); }

void emit_fused_c_epilogues(Emit *e)
{
    if (!e->fused_functor)
        prepare_epilogues(e);
    for (int k = 0; k < e->nfused_texts; k++) {
        const char *t = e->fused_texts[k], *bar = strchr(t, '@');
        em(e, "\ntypedef struct MpEpi%d { %.*s} MpEpi%d;\n", k + 1, (int)(bar - t), t, k + 1);
        em(e, "static void mp_epi%d(const void *ctx, float *v, int64_t row, int64_t j0, int64_t n)\n{\n"
              "    const MpEpi%d *c = (const MpEpi%d *)ctx;\n"
              "    (void)c, (void)row, (void)j0;   /* not every epilogue reads them */\n%s}\n", k + 1, k + 1, k + 1, bar + 1);
    }
}

/* The product, its epilogue running the group: the GEMM stores the target
 * member, the epilogue the other stored members. */
static void epilogue_call(Emit *e, const Group *gr, EmitAfterFn *after)
{
    if (!e->fused_functor)
        prepare_epilogues(e);
    const IrNode *last = gr->m[gr->nm - 1];
    int k = e->fused_functor[last->fused], target = epi_target(gr);
    em(e, "    { /* fused: %s, in the product's store */\n", op_chain(e, gr));
    em(e, "    const MpEpi%d c_ = {%lldLL", k, product_cols(gr->head));
    for (int j = 0; j < gr->nm; j++)
        if (!gr->m[j]->fused_internal && j != target)
            em(e, ", %s", cname(e, gr->m[j]));
    for (int q = 0; q < gr->nx; q++)
        em(e, ", %s", cname(e, gr->x[q]));
    em(e, "};\n    MpGemm g_ = %s;\n", emit_c_gemm_of(e, gr->head, gr->m[target]));
    em(e, "    g_.epi = mp_epi%d;\n    g_.epi_ctx = &c_;\n    mp_gemm_ex(&g_); }\n", k);
    stored_after(e, gr, after);
}

/* ---- CUDA: one `each` kernel ---------------------------------------------- */

EmitFn emit_cuda_product;   /* emit_cuda.c: the product, quantised under mixed_float8 */

/* The functor's members and operator(), which depend only on the group's
 * ops, types and size: groups with the same text share one MpFused<k>. */
static void functor_text(Emit *e, const IrNode *last)
{
    Group gr = group_of(e, last, true);
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
}

static void prepare_functors(Emit *e) { number_groups(e, functor_text, false); }

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
    Group gr = group_of(e, n, true);
    if (gr.head) {              /* cuBLAS writes the product; the group runs after it */
        em(e, "    mp_cu_at(\"%s\", %s);\n", op_info[gr.head->op].name, emit_where_arg(e, gr.head));
        emit_cuda_product(e, gr.head);
        after(e, gr.head);
    }
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
