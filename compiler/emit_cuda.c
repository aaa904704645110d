/* emit_cuda.c - the CUDA target: one self-contained train.cu that builds
 * with `nvcc train.cu` (no flags: cuBLAS is loaded at run time).
 *
 * Layout of the generated file (as the C target's, emit_c.c):
 *   1. header: how it was made and how to build it
 *   2. the runtime: runtime/AMALGAMATION (the host side, shared with the C
 *      program: command line, data, checkpoints, logs), then
 *      runtime/AMALGAMATION_CUDA (device context, kernels, the device step)
 *   3. the model: the descriptors, one device pointer per value
 *      (v<id>_<name>, with its shape and type), model_bind() cutting the one
 *      arena of memplan.c into them (same offsets as the C program),
 *      model_cast_params(), model_forward(), model_backward() making one
 *      launcher call per IR node under a comment quoting the model's source
 *      line (isomorphic repeat copies and for iterations: one loop over a
 *      body function, emit_loop.c), then the MpCuModel and MpModel
 *      descriptors and main().
 * The fixed parts are templates/train.cu.in, whose slots emit_cuda() fills.
 * The functions run in three ways (runtime/mp_cuda_step.h): captured once
 * into the CUDA graph of a training step, eagerly for evaluation, and
 * eagerly with a check after each node (--check-numerics). Each op's call is
 * made by emit_cuda_<OP> in emit_cuda_ops.c, one per row of ops.def. */
#include "emit.h"
#include "emit_common.h"
#include "emit_fused.h"
#include "fuse.h"
#include "memplan.h"
#include "ops.h"
#include "prec.h"

#include <string.h>

#define OP(id, name, nin, cls, kind) EmitFn emit_cuda_##id;
#include "ops.def"
#undef OP

static EmitFn *const emit_fns[OP__COUNT] = {
#define OP(id, name, nin, cls, kind) [OP_##id] = emit_cuda_##id,
#include "ops.def"
#undef OP
};

/* The input slot of one micro-batch, each input at a 256-byte boundary:
 * the one table of offsets (and, last, the slot's size) that both the
 * model's pointers (model_inputs) and the runtime (MpCuModel.in_off,
 * in_bytes) read, so the two cannot disagree. */
static void input_offsets(Emit *e)
{
    const IrGraph *g = e->g;
    int64_t at = 0;
    em(e, "\n/* Each input's offset in a micro-batch's input slot, then the slot's bytes. */\n");
    em(e, "static const int64_t mp_cu_in_off[%d] = {", g->ninputs + 1);
    for (int i = 0; i < g->ninputs; i++) {
        em(e, "%lld, ", (long long)at);
        at += (shape_numel(&g->inputs[i].shape) * dt_size(g->inputs[i].type) + 255) / 256 * 256;
    }
    em(e, "%lld};\n", (long long)at);
}

static void declare_values(Emit *e)
{
    const IrGraph *g = e->g;
    em(e, "\n/* ==== model %s ==== */\n\n", g->model);
    em(e, "/* Every value of one training step, on the device: %lld bytes of activations\n"
          " * and gradients in one arena (%lld without reuse). */\n",
       (long long)e->mp->arena_bytes, (long long)e->mp->naive_bytes);
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (e->mp->kind[i] == BUF_NONE || !emit_declared(e, n))
            continue;
        if (e->mp->kind[i] == BUF_CONST) {
            em(e, "static __device__ float %s_dev[1] = {%.9g}; /* constant */\n", cname(e, n), n->fa[0]);
            em(e, "static float *%s;\n", cname(e, n));
            continue;
        }
        em(e, "static %s *%s; /* %s %s %s */\n", ctype(n->type), cname(e, n), dt_name(n->type),
           shape_str(e->a, &n->shape), describe(e, n));
    }
}

static void bind_fn(Emit *e)
{
    const IrGraph *g = e->g;
    em(e, "\n/* Points every value at its place: memplan's offsets in the arena, the\n"
          " * runtime's flat parameter buffer, the constants. */\n");
    em(e, "static void model_bind(unsigned char *arena)\n{\n");
    if (e->nloops)
        em(e, "    mp_loop_arena = arena;\n");
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        const char *c = ctype(n->type);
        if (!emit_declared(e, n))
            continue;
        switch (e->mp->kind[i]) {
        case BUF_ARENA:
            em(e, "    %s = (%s *)(arena + %lld);\n", cname(e, n), c, (long long)e->mp->offset[i]);
            break;
        case BUF_ALIAS:
            em(e, "    %s = (%s *)%s;\n", cname(e, n), c, emit_view_base(e, n));
            break;
        case BUF_PARAM:
            em(e, "    %s = mp_cu_param(%lld);\n", cname(e, n), (long long)n->ia[0]);
            break;
        case BUF_CONST:
            em(e, "    mp_cu_ok(cudaGetSymbolAddress((void **)&%s, %s_dev), \"constants\");\n", cname(e, n),
               cname(e, n));
            break;
        default:
            break;
        }
    }
    em(e, "}\n");
}

/* Inputs (and views of them) point into the call's input slot. */
static void inputs_fn(Emit *e)
{
    const IrGraph *g = e->g;
    em(e, "\nstatic void model_inputs(const MpCuRun *r)\n{\n");
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (!emit_declared(e, n))
            continue;
        if (e->mp->kind[i] == BUF_INPUT)
            em(e, "    %s = (%s *)(r->in + mp_cu_in_off[%lld]);\n", cname(e, n), ctype(n->type),
               (long long)n->ia[0]);
        else if (e->mp->kind[i] == BUF_ALIAS && e->mp->kind[e->mp->root[i]] == BUF_INPUT)
            em(e, "    %s = (%s *)%s;\n", cname(e, n), ctype(n->type), cname(e, g->nodes[e->mp->root[i]]));
    }
    em(e, "    (void)r;\n}\n");
}

/* What follows a node: the numerics check, a parameter gradient's
 * accumulation, and the loss or a metric kept for the runtime. */
static void after(Emit *e, const IrNode *n)
{
    const IrGraph *g = e->g;
    int p = emit_grad_param(e, n);
    if (emit_folded_cast(e, n)) {
        em(e, "    mp_cu_acc_grad<%s>(%s, %s, %lld); /* f32(x) */\n", mpdt(n->in[0]->type),
           emit_pgrad(e, p), cname(e, n->in[0]), (long long)shape_numel(&n->shape));
        return;
    }
    if (e->mp->kind[n->id] == BUF_ARENA && dt_is_float(n->type))
        em(e, "    MP_CU_CHECK(%s, %lld, %s, \"%s\", %s);\n", cname(e, n),
           (long long)shape_numel(&n->shape), mpdt(n->type), op_info[n->op].name, emit_where_arg(e, n));
    if (p >= 0)
        em(e, "    mp_cu_acc_grad<%s>(%s, %s, %lld);\n", mpdt(n->type), emit_pgrad(e, p), cname(e, n),
           (long long)shape_numel(&n->shape));
    if (emit_value(e, n) >= 0)
        em(e, "%s", emit_keep(e, n, true));
    if (n == g->loss)
        em(e, "    mp_cu_out(r, 0, %s, %s);\n", cname(e, n), mpdt(n->type));
    for (int m = 0; m < g->nmetrics; m++)
        if (g->metrics[m].node == n)
            em(e, "    mp_cu_out(r, %d, %s, %s);\n", m + 1, cname(e, n), mpdt(n->type));
}

/* A product; under mixed_float8 a quantised one (IrNode.fp8) between the
 * amax of each tensor it is the first to read (in the order written, as
 * the C program's) and, unless --gradcheck keeps products exact, its
 * operands' quantised bf16 copies (runtime/mp_cuda_fp8.h), which the
 * product's call reads in place of the operands: the same emitter with the
 * operands named mp_q0 / mp_q1 and typed bf16 while it writes. */
void emit_cuda_product(Emit *e, const IrNode *n)
{
    IrNode *in[2] = {(IrNode *)n->in[0], (IrNode *)n->in[1]};
    for (int k = 0; k < 2; k++) {
        int s = n->fp8[k];
        if (s == 0 || e->fp8_seen[s - 1])
            continue;
        e->fp8_seen[s - 1] = true;
        em(e, "    mp_cu_fp8_observe<%s>(%d, %s, %lld, r->training);\n", mpdt(in[k]->type), s,
           cname(e, in[k]), (long long)shape_numel(&in[k]->shape));
    }
    if (!n->fp8[0] || !n->fp8[1]) {     /* quantised only with both scales (mp_fp8_use) */
        emit_fns[n->op](e, n);
        return;
    }
    const char *name[2] = {e->names[in[0]->id], e->names[in[1]->id]};
    DType type[2] = {in[0]->type, in[1]->type};
    em(e, "    if (mp_cu_fp8_on()) {\n");
    for (int k = 0; k < 2 && !(k == 1 && in[1] == in[0]); k++)   /* a @ transpose(a): one copy */
        em(e, "    const uint16_t *mp_q%d = mp_cu_fp8_quant<%s>(%d, %d, %s, %lld);\n", k, mpdt(in[k]->type),
           k, n->fp8[k], cname(e, in[k]), (long long)shape_numel(&in[k]->shape));
    for (int k = 0; k < 2; k++) {
        e->names[in[k]->id] = k == 1 && in[1] != in[0] ? "mp_q1" : "mp_q0";
        in[k]->type = DT_BF16;
    }
    emit_fns[n->op](e, n);
    for (int k = 1; k >= 0; k--) {  /* back as they were (in[1] may be in[0]) */
        e->names[in[k]->id] = name[k];
        in[k]->type = type[k];
    }
    em(e, "    } else {\n");
    emit_fns[n->op](e, n);
    em(e, "    }\n");
}

/* The op and line MP_CUDA_SYNC=1 names when one of its kernels fails. */
static void at(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_at(\"%s\", %s);\n", op_info[n->op].name, emit_where_arg(e, n));
}

static void node(Emit *e, const IrNode *n, int *line)
{
    if (n->fused && fuse_last(e->g, n) != n)
        return;                     /* written with its group's last node */
    emit_source_line(e, n, line, "\n");
    if (n->fused) {
        emit_fused_cuda(e, n, after);
        return;
    }
    at(e, n);
    if (!emit_folded_cast(e, n))
        emit_cuda_product(e, n);
    after(e, n);
}

static void cast_node(Emit *e, const IrNode *n, int *line)
{
    emit_source_line(e, n, line, "");
    at(e, n);
    emit_fns[n->op](e, n);
}

static void cast_params_fn(Emit *e)
{
    em(e, "\n/* The lowp working copies of the f32 master weights, once per optimizer step. */\n");
    em(e, "static void model_cast_params(MpCuRun *r)\n{\n");
    emit_pass(e, PASS_CAST_PARAMS, cast_node, NULL);
    em(e, "    (void)r;\n}\n");
}

static void forward_fn(Emit *e)
{
    em(e, "\nstatic int model_forward(MpCuRun *r)\n{\n    model_inputs(r);\n");
    emit_pass(e, PASS_FORWARD, node, "r->training");
    em(e, "    return 0;\n}\n");
}

static void backward_fn(Emit *e)
{
    em(e, "\nstatic int model_backward(MpCuRun *r)\n{\n    model_inputs(r);\n");
    emit_pass(e, PASS_BACKWARD, node, NULL);
    em(e, "    return 0;\n}\n");
}

/* Each parameter's lowp working copy in the arena (MpCuWork), which the
 * device's optimizer pass writes as it updates the value, so that the step
 * runs model_cast_params only when the masters changed otherwise. */
static void work_table(Emit *e)
{
    const IrGraph *g = e->g;
    em(e, "\n/* Each parameter's working copy: its type (MP_F32: none; MP_WORK_OTHER:\n"
          " * several, cast by model_cast_params) and offset in the arena. */\n");
    em(e, "static const MpCuWork mp_cu_work[%d] = {\n", g->nparams ? g->nparams : 1);
    for (int p = 0; p < g->nparams; p++) {
        const char *dt;
        const IrNode *copy = emit_work_copy(e, p, &dt);
        em(e, "    {%s, %lld}, /* %s%s%s */\n", dt, copy ? (long long)e->mp->offset[copy->id] : 0LL,
           g->params[p].name, copy ? " -> " : "", copy ? cname(e, copy) : "");
    }
    if (!g->nparams)
        em(e, "    {MP_F32, 0},\n");
    em(e, "};\n");
}

static void model_desc(Emit *e)
{
    work_table(e);
    em(e, "\nstatic const MpCuModel mp_cu_model_desc = {\n"
          "    %lld, mp_cu_in_off[%d], mp_cu_in_off,\n"
          "    model_bind, model_cast_params, model_forward, model_backward, mp_cu_work, %d,\n};\n",
       (long long)e->mp->arena_bytes, e->g->ninputs, e->g->train.tf32 ? 1 : 0);
}

/* int64_t -> device pointer, for the repeat loops' tables (emit_common.h) */
static const char at_fn[] =
    "\nstatic unsigned char *mp_loop_arena;   /* model_bind()'s arena */\n"
    "\nstatic void *mp_loop_at(int64_t at)\n{\n"
    "    switch (at & 3) {\n"
    "    case 0: return mp_loop_arena + (at >> 2);\n"
    "    case 1: return mp_cu_param((int)(at >> 2));\n"
    "    default: return mp_cu_grad((int)(at >> 2));\n"
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
    if (e->nloops)
        em(e, "%s", at_fn);
    bind_fn(e);
    input_offsets(e);
    inputs_fn(e);
    emit_fused_cuda_functors(e);
}

/* ---- the template's slots (templates/train.cu.in) ----------------------- */


/* Whether an attention of the model drops out: a program whose attentions
 * do not is built without the Tensor Core kernels' dropout instances
 * (runtime/mp_cuda_flash.h, MP_CU_FA_DROPOUT: half of nvcc's work there) */
static bool att_dropout(const IrGraph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == OP_ATTENTION && g->nodes[i]->fa[1] > 0)
            return true;
    return false;
}

static void cuda_runtime_slot(Emit *e)
{
    if (!att_dropout(e->g))
        em(e, "#define MP_CU_FA_DROPOUT 0   /* no attention here drops out (mp_cuda_flash.h) */\n");
    emit_runtime(e, mp_cuda_runtime_count, mp_cuda_runtime_names, mp_cuda_runtime_texts);
}

static void code_slot(Emit *e)
{
    emit_model_code(e, passes, decls, "");
    model_desc(e);
}

static void model_slot(Emit *e)
{
    /* the device's functions: mp_cu_main sets them (runtime/mp_cuda_step.h) */
    emit_model_struct(e, "NULL, NULL, NULL, NULL, NULL, 0");
}

bool emit_cuda(FILE *out, const IrGraph *g, bool loops)
{
    Emit e;
    emit_begin(&e, out, g);
    e.loops = loops && g->nfp8_slots == 0;  /* a repeat's copies have their own scales */
    e.fp8_seen = arena_alloc(e.a, sizeof *e.fp8_seen * (size_t)(g->nfp8_slots + 1));
    e.loop_params = "MpCuRun *r";
    e.loop_args = "r";
    e.loop_cast_args = "r";
    e.grad_fmt = "mp_cu_grad(%d)";
    const EmitSlot slots[] = {
        {"CUDA_RUNTIME", NULL, cuda_runtime_slot},
        {"MODEL_CODE", NULL, code_slot},
        {"MODEL_STRUCT", NULL, model_slot},
    };
    emit_template(&e, "train.cu.in", slots, (int)(sizeof slots / sizeof slots[0]));
    return emit_end(&e);
}
