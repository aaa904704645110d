/* emit_c.c - the portable C target: one self-contained train.c.
 *
 * Layout of the generated file (a reader finds their layer in seconds):
 *   1. header: how it was made and how to build it
 *   2. the runtime (the runtime/ headers, pasted in the order of AMALGAMATION)
 *   3. the model: one pointer per value, named after the model's names
 *      (v<id>_<name>) with its shape and type; setup() cuts the one arena
 *      of memplan.c into them; cast_params(), forward(), backward() call
 *      one runtime kernel per IR node, under a comment quoting the model's
 *      source line (isomorphic repeat copies and for iterations: one loop
 *      over a body function, emit_loop.c); then the MpModel descriptor and
 *      main().
 * The fixed parts are templates/train.c.in, whose slots emit_c() fills.
 * Each op's call is made by emit_c_<OP> (one per row of ops.def); the
 * arithmetic itself is in runtime/mp_kernels.h, shared with the CUDA target.
 * Every identifier derived from a model name goes through cname(), so model
 * names that are C keywords or library names (int, main, printf) are safe. */
#include "emit.h"
#include "emit_common.h"
#include "emit_fused.h"
#include "fuse.h"
#include "memplan.h"
#include "ops.h"
#include "prec.h"

#include <string.h>

/* ---- the per-op emitters (see emit_common.h for the helpers) ---------- */
#define OP(id, name, nin, cls, kind) EmitFn emit_c_##id;
#include "ops.def"
#undef OP

static EmitFn *const emit_fns[OP__COUNT] = {
#define OP(id, name, nin, cls, kind) [OP_##id] = emit_c_##id,
#include "ops.def"
#undef OP
};

static void declare_values(Emit *e)
{
    const IrGraph *g = e->g;
    em(e, "\n/* ==== model %s ==== */\n\n", g->model);
    em(e, "/* Every value of one training step: %lld bytes of activations and\n"
          " * gradients in one arena (%lld without reuse). */\n",
       (long long)e->mp->arena_bytes, (long long)e->mp->naive_bytes);
    em(e, "static unsigned char *mp_arena;\n");
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (e->mp->kind[i] == BUF_NONE || !emit_declared(e, n))
            continue;
        if (e->mp->kind[i] == BUF_CONST) {
            em(e, "static float %s[1] = {%.9g}; /* constant */\n", cname(e, n), n->fa[0]);
            continue;
        }
        em(e, "static %s *%s; /* %s %s %s */\n", ctype(n->type), cname(e, n), dt_name(n->type),
           shape_str(e->a, &n->shape), describe(e, n));
    }
}

/* Each parameter's lowp working copy (MpParam.work, work_dt), for the
 * trainer's optimizer pass, which writes it while it updates the f32 value
 * (so cast_params() need not run again before the next step). */
static void work_copies(Emit *e)
{
    for (int p = 0; p < e->g->nparams; p++) {
        const char *dt;
        const IrNode *copy = emit_work_copy(e, p, &dt);
        if (copy)
            em(e, "    mp_params[%d].work = mp_arena + %lld;\n", p, (long long)e->mp->offset[copy->id]);
        em(e, "    mp_params[%d].work_dt = %s;\n", p, dt);
    }
}

static void setup_fn(Emit *e)
{
    const IrGraph *g = e->g;
    em(e, "\nstatic int model_setup(void)\n{\n");
    em(e, "    mp_arena = (unsigned char *)mp_alloc_aligned(%lld);\n", (long long)e->mp->arena_bytes);
    em(e, "    if (!mp_arena)\n        return -1;\n");
    if (g->train.tf32)
        em(e, "    mp_gemm_tf32 = 1;   /* float32_matmul = \"tf32\": f32 products on TF32 operands */\n");
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        const char *c = ctype(n->type);
        if (!emit_declared(e, n))
            continue;
        switch (e->mp->kind[i]) {
        case BUF_ARENA:
            em(e, "    %s = (%s *)(mp_arena + %lld);\n", cname(e, n), c, (long long)e->mp->offset[i]);
            break;
        case BUF_ALIAS:
            em(e, "    %s = (%s *)%s;\n", cname(e, n), c, emit_view_base(e, n));
            break;
        case BUF_PARAM:
            em(e, "    %s = mp_params[%lld].value;\n", cname(e, n), (long long)n->ia[0]);
            break;
        case BUF_INPUT:
            em(e, "    %s = (%s *)mp_inputs[%lld].batch;\n", cname(e, n), c, (long long)n->ia[0]);
            break;
        default:
            break;
        }
    }
    work_copies(e);
    em(e, "    return 0;\n}\n");
}

/* What follows a node's call: the numerics check, for a parameter's
 * gradient its accumulation, the --predict copy. */
static void after(Emit *e, const IrNode *n)
{
    int p = emit_grad_param(e, n);
    if (e->mp->kind[n->id] == BUF_ARENA && dt_is_float(n->type))
        em(e, "    MP_CHECK(%s, %lld, %s, \"%s\", %s);\n", cname(e, n),
           (long long)shape_numel(&n->shape), mpdt(n->type), op_info[n->op].name, emit_where_arg(e, n));
    if (p >= 0)
        em(e, "    mp_accumulate_grad(%s, %s, %lld);\n", emit_pgrad(e, p), cname(e, n),
           (long long)shape_numel(&n->shape));
    if (emit_value(e, n) >= 0)
        em(e, "%s", emit_keep(e, n, false));
}

/* A weight's gradient product (emit_acc_product), or a part of a gradient
 * (emit_grad_part: a product, an embedding's scatter), that adds itself
 * into parameter p's f32 gradient; the numerics check looks at the gradient,
 * which held only finite values before (the check stops at the first). */
static void acc_product(Emit *e, const IrNode *n, int p)
{
    const char *grad = emit_pgrad(e, p);
    if (n->op == OP_EMBEDDING_DW)
        emit_c_embedding_dw_acc(e, n, grad);
    else
        emit_c_matmul_tn_acc(e, n, grad);
    em(e, "    MP_CHECK(%s, %lld, MP_F32, \"%s\", %s);\n", grad, (long long)shape_numel(&n->shape),
       op_info[n->op].name, emit_where_arg(e, n));
}

/* One node: the source comment when the line changes, the kernel call
 * (or its fusion group's loop, fuse.h), what follows it. */
static void node_code(Emit *e, const IrNode *n, int *line)
{
    emit_source_line(e, n, line, "\n");
    if (emit_folded_cast(e, n) && emit_acc_product(e, n->in[0]) >= 0)
        return;                     /* added into the gradient by its product */
    if (emit_grad_sum(e, n))
        return;                     /* its parts added themselves into the gradient */
    if (emit_grad_part(e, n) >= 0) {
        acc_product(e, n, emit_grad_part(e, n));
        return;
    }
    if (emit_acc_product(e, n) >= 0) {
        acc_product(e, n, emit_acc_product(e, n));
        return;
    }
    if (emit_folded_cast(e, n)) {
        em(e, "    mp_k_acc(%s, %s, %s, 1.0f, %lld); /* f32(x) */\n",
           emit_pgrad(e, emit_grad_param(e, n)), cname(e, n->in[0]), mpdt(n->in[0]->type),
           (long long)shape_numel(&n->shape));
        return;
    }
    if (n->fused) {
        emit_fused_c(e, n, after);
        return;
    }
    emit_fns[n->op](e, n);
    after(e, n);
}

/* mixed_float8: the quantised product whose call n's code makes (n, or the
 * product heading n's fusion group), or NULL */
static const IrNode *fp8_product(Emit *e, const IrNode *n)
{
    if (e->g->nfp8_slots == 0 || n->fp8[0] || n->fp8[1])
        return e->g->nfp8_slots ? n : NULL;
    for (int i = n->id - 1; n->fused && i >= 0; i--) {
        const IrNode *m = e->g->nodes[i];
        if (m->fused && fuse_last(e->g, m) == n && (m->fp8[0] || m->fp8[1]))
            return m;
    }
    return NULL;
}

/* A node; a quantised product (mp_fp8.h) between the amax of each tensor
 * it is the first to read (in the order written, which in the backward pass
 * is not the nodes' order) and its scales' use (the GEMM's operand
 * rounding). */
static void node(Emit *e, const IrNode *n, int *line)
{
    if (n->fused && fuse_last(e->g, n) != n)
        return;                     /* written with its group's last node */
    const IrNode *q = fp8_product(e, n);
    if (!q) {
        node_code(e, n, line);
        return;
    }
    emit_source_line(e, n, line, "\n");
    for (int k = 0; k < 2; k++) {
        int s = q->fp8[k];
        if (s == 0 || e->fp8_seen[s - 1])
            continue;
        e->fp8_seen[s - 1] = true;
        em(e, "    mp_fp8_observe(&mp_fp8, %d, %s, %s, %lld, run->training);\n", q->fp8[k],
               cname(e, q->in[k]), mpdt(q->in[k]->type), (long long)shape_numel(&q->in[k]->shape));
    }
    em(e, "    mp_fp8_use(&mp_fp8, %d, %d);\n", q->fp8[0], q->fp8[1]);
    node_code(e, n, line);
    em(e, "    mp_fp8_use(&mp_fp8, 0, 0);\n");
}

static void cast_node(Emit *e, const IrNode *n, int *line)
{
    emit_source_line(e, n, line, "");
    emit_fns[n->op](e, n);
}

static void cast_params_fn(Emit *e)
{
    em(e, "\n/* The lowp working copies of the f32 master weights, once per optimizer step. */\n");
    em(e, "static void model_cast_params(void)\n{\n");
    emit_pass(e, PASS_CAST_PARAMS, cast_node, NULL);
    em(e, "}\n");
}

static void forward_fn(Emit *e)
{
    const IrGraph *g = e->g;
    em(e, "\nstatic int model_forward(MpRun *run)\n{\n");
    emit_pass(e, PASS_FORWARD, node, "run->training");
    em(e, "\n    run->loss = mp_load_scalar(%s, %s);\n", cname(e, g->loss), mpdt(g->loss->type));
    for (int m = 0; m < g->nmetrics; m++)
        em(e, "    if (!run->training)\n        run->metrics[%d] = mp_load_scalar(%s, %s);\n", m,
           cname(e, g->metrics[m].node), mpdt(g->metrics[m].node->type));
    em(e, "    return 0;\n}\n");
}

static void backward_fn(Emit *e)
{
    em(e, "\nstatic int model_backward(MpRun *run)\n{\n");
    emit_pass(e, PASS_BACKWARD, node, NULL);
    em(e, "    return 0;\n}\n");
}

/* int64_t -> pointer, for the repeat loops' tables (emit_common.h) */
static const char at_fn[] =
    "\nstatic void *mp_loop_at(int64_t at)\n{\n"
    "    switch (at & 3) {\n"
    "    case 0: return mp_arena + (at >> 2);\n"
    "    case 1: return mp_params[at >> 2].value;\n"
    "    default: return mp_params[at >> 2].grad;\n"
    "    }\n}\n";

static void passes(Emit *e)
{
    cast_params_fn(e);
    forward_fn(e);
    backward_fn(e);
}

static void decls(Emit *e)
{
    declare_values(e);
    emit_fp8_state(e);
    setup_fn(e);
    emit_fused_c_epilogues(e);
}

/* ---- the template's slots (templates/train.c.in) ------------------------ */

static void code_slot(Emit *e) { emit_model_code(e, passes, decls, at_fn); }

static void model_slot(Emit *e)
{
    emit_model_struct(e, arena_printf(e->a, "model_setup, model_cast_params, model_forward, "
                                      "model_backward, NULL, %lld", (long long)e->mp->arena_bytes));
}

bool emit_c(FILE *out, const IrGraph *g, bool loops)
{
    Emit e;
    emit_begin(&e, out, g);
    e.loops = loops && g->nfp8_slots == 0;  /* a repeat's copies have their own scales */
    e.fp8_seen = arena_alloc(e.a, sizeof *e.fp8_seen * (size_t)(g->nfp8_slots + 1));
    e.loop_params = "MpRun *run";
    e.loop_args = "run";
    e.loop_cast_args = "NULL";
    e.grad_fmt = "mp_params[%d].grad";
    const EmitSlot slots[] = {
        {"NINPUTS", arena_printf(e.a, "%d", g->ninputs ? g->ninputs : 1), NULL},
        {"NPARAMS", arena_printf(e.a, "%d", g->nparams ? g->nparams : 1), NULL},
        {"MODEL_CODE", NULL, code_slot},
        {"MODEL_STRUCT", NULL, model_slot},
    };
    emit_template(&e, "train.c.in", slots, (int)(sizeof slots / sizeof slots[0]));
    return emit_end(&e);
}
