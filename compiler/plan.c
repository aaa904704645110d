/* plan.c - `mpcc --dump-plan`: the precision plan of PRECISION.md, as
 * - text: a table for a person (like a database's EXPLAIN), one row per
 *   node in execution order, phases under their own headers, then the loss
 *   scaling steps, the parameters and a summary;
 * - json: the keys of PRECISION.md's example and a few more, one node per
 *   line so golden files diff well;
 * - dot: a Graphviz digraph, nodes filled by compute type, casts drawn as
 *   diamonds, one cluster per phase, a dashed one per fusion group; with
 *   --collapse each outermost repeat and block call of a phase one box
 *   (their nodes' fusion groups are not drawn);
 * - html: plan_html.c.
 * Fusion groups (fuse.h) show as the text's `fused` column and the json's
 * `fused` / `stored` keys only when there are any (not under --no-fuse).
 *
 * The dump only reads the graph: it runs after prec_finish(), when every
 * node has its compute and output type, and node ids are indices in
 * g->nodes. Output is deterministic (no addresses, no clock).
 *
 * Counting rules (summary): lowp_ops / f32_ops count the nodes that do
 * arithmetic of the model (not inputs, parameters, constants, casts,
 * views, loss scaling or optimizer steps) by their compute type, forward
 * and backward; casts counts every CAST node, the user's and the
 * backward's included; activation bytes are prec_memory()'s. */
#include "plan.h"
#include "memplan.h"
#include "ops.h"
#include "prec.h"
#include "recompute.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct Summary {
    int lowp_ops, f32_ops, casts, hoisted;
    int fp8_fwd, fp8_bwd;      /* quantised products (mixed_float8) */
    int tf32_ops;                  /* of the f32 ones, products on TF32 (prec_tf32) */
    PrecMemory mem;
} Summary;

/* mixed_float8's state: per scale slot its amax history (delayed: that
 * many steps; current: the step's own) and its scale exponent, 4 bytes
 * each, kept across steps and in checkpoints. */
static int64_t fp8_history(const TrainCfg *t) { return t->fp8 == FP8_DELAYED ? t->fp8_history : 1; }
static int64_t fp8_state_bytes(const IrGraph *g)
{
    return (int64_t)g->nfp8_slots * (fp8_history(&g->train) + 1) * 4;
}
static const char *fp8_role(const Fp8Slot *s) { return s->role == 'x' ? "x" : s->role == 'w' ? "w" : "dy"; }

static Summary summarize(const IrGraph *g)
{
    Summary s = {0};
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->op == OP_CAST) {
            s.casts++;
            s.hoisted += n->hoisted;
        } else if (op_info[n->op].kind != OPK_DATA && op_info[n->op].kind != OPK_STEP
                   && op_info[n->op].cls != CL_NONE) {
            s.lowp_ops += prec_is_lowp(n->compute);
            s.f32_ops += n->compute == DT_F32;
            if (n->fp8[0] || n->fp8[1])
                *(n->phase == PH_FORWARD ? &s.fp8_fwd : &s.fp8_bwd) += 1;
            s.tf32_ops += prec_tf32(g, n);
        }
    }
    s.mem = prec_memory(g);
    return s;
}

/* ---- the memory plan (memplan.h, recompute.h) -------------------------------- */

static const MemPlan *plan_mem(const IrGraph *g)
{
    return g->mem ? g->mem : memplan_build(g->arena, g);
}

/* The forward values the backward pass reads (through views: the value
 * viewed), and the copy that recomputes each, if one does. */
typedef struct Saved {
    bool *saved;
    const IrNode **copy;
    int n;
    int64_t kept_bytes, recomputed_bytes;
} Saved;

static Saved saved_values(const IrGraph *g, const MemPlan *mp)
{
    Saved s = {arena_alloc(g->arena, sizeof *s.saved * (size_t)(g->nnodes + 1)),
               arena_alloc(g->arena, sizeof *s.copy * (size_t)(g->nnodes + 1)), 0, 0, 0};
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *v = g->nodes[i];
        if (v->recomputes && mp->kind[v->recomputes->id] == BUF_ARENA) {
            s.copy[v->recomputes->id] = v;
            s.saved[v->recomputes->id] = true;
        }
        if (v->phase != PH_BACKWARD)
            continue;
        for (int j = 0; j < v->nin; j++) {
            const IrNode *u = g->nodes[mp->root[v->in[j]->id]];
            if (u->phase == PH_FORWARD && !u->hoisted && mp->kind[u->id] == BUF_ARENA)
                s.saved[u->id] = true;
        }
    }
    for (int i = 0; i < g->nnodes; i++)
        if (s.saved[i]) {
            s.n++;
            *(s.copy[i] ? &s.recomputed_bytes : &s.kept_bytes) += memplan_bytes(g->nodes[i]);
        }
    return s;
}

static void text_saved(FILE *out, const IrGraph *g)
{
    const MemPlan *mp = plan_mem(g);
    Saved s = saved_values(g, mp);
    fprintf(out, "\nsaved for the backward pass (%d values): kept, or recomputed in the backward "
            "pass by a copy (#id) from the values it reads\n"
            "   id  name                op             bytes        how\n", s.n);
    for (int i = 0; i < g->nnodes; i++) {
        if (!s.saved[i])
            continue;
        const IrNode *v = g->nodes[i], *c = s.copy[i];
        fprintf(out, "%5d  %-18s  %-13s  %-11lld  ", i, v->name ? v->name : "-", op_info[v->op].name,
                (long long)memplan_bytes(v));
        if (!c) {
            fputs("kept\n", out);
            continue;
        }
        fprintf(out, "recomputed by #%d (from", c->id);
        for (int j = 0; j < c->nin; j++)
            fprintf(out, "%s #%d", j ? "," : "", c->in[j]->id);
        fputs(")\n", out);
    }
}

static void json_memory(FILE *out, const IrGraph *g)
{
    const MemPlan *mp = plan_mem(g);
    Saved s = saved_values(g, mp);
    double added, flops = recompute_flops(g, &added);
    fprintf(out, ",\n \"memory\": {\"step_bytes\": %lld, \"param_bytes\": %lld, \"grad_bytes\": %lld, "
            "\"state_bytes\": %lld, \"arena_bytes\": %lld, \"peak_bytes\": %lld, \"peak_at\": %d, "
            "\"activations\": %lld, \"gradients\": %lld, \"working_copies\": %lld, \"budget\": %lld, "
            "\"flops\": %.17g, \"flops_recomputed\": %.17g,\n  \"saved\": [",
            (long long)memplan_step_bytes(mp), (long long)mp->param_bytes, (long long)mp->param_bytes,
            (long long)mp->state_bytes, (long long)mp->arena_bytes, (long long)mp->peak_bytes, mp->peak_at,
            (long long)mp->peak_kind[MEM_ACT], (long long)mp->peak_kind[MEM_GRAD],
            (long long)mp->peak_kind[MEM_WORK], (long long)mp->budget, flops, added);
    int k = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (!s.saved[i])
            continue;
        const IrNode *c = s.copy[i];
        fprintf(out, "%s{\"id\": %d, \"bytes\": %lld, \"recomputed\": %s", k++ ? ", " : "", i,
                (long long)memplan_bytes(g->nodes[i]), c ? "true" : "false");
        if (c) {
            fprintf(out, ", \"copy\": %d, \"from\": [", c->id);
            for (int j = 0; j < c->nin; j++)
                fprintf(out, "%s%d", j ? ", " : "", c->in[j]->id);
            fputc(']', out);
        }
        fputc('}', out);
    }
    fputs("]}", out);
}

/* The types of a parameter's working copies (its forward casts), in the
 * order they appear; returns how many (at most 3 float types). */
static int param_copies(const IrGraph *g, const IrParam *p, const IrNode **out)
{
    int n = 0;
    for (int i = 0; i < g->nnodes && n < 3; i++) {
        const IrNode *c = g->nodes[i];
        if (c->op == OP_CAST && c->phase == PH_FORWARD && c->in[0] == p->node)
            out[n++] = c;
    }
    return n;
}

/* A cast the user wrote (`f16(x)`): sema sets its override; the casts
 * prec.c and autodiff insert have none. */
static bool user_cast(const IrNode *n) { return n->op == OP_CAST && n->override != DT_NONE; }

/* What the plan shows for a node. A cast, whoever made it, is class
 * none, rule cast, and computes in the type it rounds to (autodiff gives
 * its casts back their forward node's class, rule and compute). */
static PrecClass shown_class(const IrNode *n) { return n->op == OP_CAST ? CL_NONE : n->cls; }
static PrecRule shown_rule(const IrNode *n) { return n->op == OP_CAST ? RULE_CAST : n->rule; }
static DType shown_compute(const IrNode *n) { return n->op == OP_CAST ? n->type : n->compute; }

/* mixed_float8: a quantised product shows the format of its inputs (e4m3
 * forward; e5m2 dy with e4m3 backward) as its compute type; its output is
 * still its type (bf16). */
static bool is_fp8(const IrNode *n) { return n->fp8[0] || n->fp8[1]; }
static const char *shown_compute_name(const IrGraph *g, const IrNode *n)
{
    if (is_fp8(n))
        return n->phase == PH_FORWARD ? "e4m3" : "e5m2";
    return prec_compute_name(g, n, shown_compute(n));
}
static const char *input_type_name(const IrGraph *g, const IrNode *n, int k)
{
    return k < 2 && n->fp8[k] ? prec_fp8_name(g->fp8_slots[n->fp8[k] - 1].fmt) : dt_name(n->in[k]->type);
}

static const char *phase_name(Phase p)
{
    static const char *const names[] = {"forward", "backward", "optimizer"};
    return names[p];
}

/* A node's name for people: its own; for a parameter's gradient
 * "grad(h.weight)"; for another backward node "bwd(h)", h the forward node
 * it differentiates; else "-". */
static const char *display_name(const IrGraph *g, const IrNode *n)
{
    if (n->name)
        return n->name;
    for (int i = 0; i < g->nparams; i++)
        if (g->params[i].grad == n)
            return arena_printf(g->arena, "grad(%s)", g->params[i].name);
    if (n->prelude)            /* a temporary of a prelude block: "[softplus]" */
        return arena_printf(g->arena, "[%s]", n->prelude);
    if (n->grad_of && n->grad_of->name)
        return arena_printf(g->arena, "bwd(%s)", n->grad_of->name);
    if (n->grad_of && n->grad_of->prelude)
        return arena_printf(g->arena, "bwd([%s])", n->grad_of->prelude);
    return "-";
}

/* ---- json ---------------------------------------------------------------- */

static void json_str(FILE *out, const char *s)
{
    if (!s) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

void plan_json_string(FILE *out, const char *s) { json_str(out, s); }

/* Shortest text that reads back as the same double; null for inf and NaN,
 * which JSON cannot hold. */
static void json_num(FILE *out, double v)
{
    if (!isfinite(v)) {
        fputs("null", out);
        return;
    }
    char buf[32];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    fputs(buf, out);
}

static void json_shape(FILE *out, const Shape *s)
{
    fputc('[', out);
    for (int i = 0; i < s->rank; i++)
        fprintf(out, "%s%lld", i ? ", " : "", (long long)s->d[i]);
    fputc(']', out);
}

static void json_loss_scale(FILE *out, const TrainCfg *t)
{
    fprintf(out, " \"loss_scale\": {\"kind\": \"%s\"", prec_ls_name(t->ls));
    if (t->ls != LS_NONE) {
        fputs(", \"init\": ", out);
        json_num(out, t->ls_init);
    }
    if (t->ls == LS_DYNAMIC) {
        fputs(", \"growth\": ", out);
        json_num(out, t->ls_growth);
        fputs(", \"backoff\": ", out);
        json_num(out, t->ls_backoff);
        fprintf(out, ", \"interval\": %lld", (long long)t->ls_interval);
    }
    fputs("},\n", out);
}

/* The weight decay the optimizer applies to p (no_decay: 0). */
static double param_decay(const IrGraph *g, const IrParam *p)
{
    return p->trainable && !p->no_decay ? g->train.weight_decay : 0;
}

static void json_params(FILE *out, const IrGraph *g)
{
    fputs(" \"params\": [", out);
    for (int i = 0; i < g->nparams; i++) {
        const IrParam *p = &g->params[i];
        const IrNode *c[3];
        int nc = param_copies(g, p, c);
        fputs(i ? ",\n  {\"name\": " : "\n  {\"name\": ", out);
        json_str(out, p->name);
        fputs(", \"shape\": ", out);
        json_shape(out, &p->shape);
        fprintf(out, ", \"master\": \"f32\", \"copies\": [");
        for (int k = 0; k < nc; k++)
            fprintf(out, "%s\"%s\"", k ? ", " : "", dt_name(c[k]->type));
        fprintf(out, "], \"trainable\": %s, \"buffer\": %s, \"weight_decay\": ",
                p->trainable ? "true" : "false", p->buffer ? "true" : "false");
        json_num(out, param_decay(g, p));
        fprintf(out, ", \"id\": %d}", p->node->id);
    }
    fputs(g->nparams ? "\n ],\n" : "],\n", out);
}

/* Input k of n is read transposed: a product's transpose flag (ops.def MATMUL). */
static bool read_transposed(const IrNode *n, int k)
{
    return n->op == OP_MATMUL && k < 2 && n->ia[k];
}

static bool any_transposed(const IrGraph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (read_transposed(g->nodes[i], 0) || read_transposed(g->nodes[i], 1))
            return true;
    return false;
}

/* The dropout p of an attention node or its gradient (0: none). */
static double attention_dropout(const IrNode *n)
{
    return n->op == OP_ATTENTION || n->op == OP_ATTENTION_GRAD ? n->fa[1] : 0;
}

static void json_node(FILE *out, const IrGraph *g, const IrNode *n)
{
    fprintf(out, "  {\"id\": %d, \"phase\": \"%s\", \"line\": %d, \"name\": ", n->id,
            phase_name(n->phase), n->loc.line);
    json_str(out, n->name);
    fprintf(out, ", \"op\": \"%s\", \"class\": \"%s\", \"rule\": \"%s\", \"compute\": \"%s\", "
            "\"inputs\": [", op_info[n->op].name, prec_class_name(shown_class(n)),
            prec_rule_name(shown_rule(n)), shown_compute_name(g, n));
    for (int k = 0; k < n->nin; k++) {
        fprintf(out, "%s{\"from\": %d, \"type\": \"%s\", \"cast\": %s%s", k ? ", " : "",
                n->in[k]->id, dt_name(n->in[k]->type), n->in[k]->op == OP_CAST ? "true" : "false",
                read_transposed(n, k) ? ", \"transposed\": true" : "");
        if (k < 2 && n->fp8[k])
            fprintf(out, ", \"fp8\": \"%s\", \"slot\": %d", input_type_name(g, n, k), n->fp8[k]);
        fputc('}', out);
    }
    fputs("], \"shape\": ", out);
    json_shape(out, &n->shape);
    fprintf(out, ", \"type\": \"%s\"", dt_name(n->type));
    if (n->grad_of)
        fprintf(out, ", \"grad_of\": %d", n->grad_of->id);
    if (n->recomputes)
        fprintf(out, ", \"recomputes\": %d", n->recomputes->id);
    if (n->op == OP_CAST)
        fprintf(out, ", \"hoisted\": %s, \"user\": %s", n->hoisted ? "true" : "false",
                user_cast(n) ? "true" : "false");
    if (attention_dropout(n) > 0) {
        fputs(", \"dropout\": ", out);
        json_num(out, attention_dropout(n));
    }
    if (n->fused)
        fprintf(out, ", \"fused\": %d, \"stored\": %s", n->fused, n->fused_internal ? "false" : "true");
    fputc('}', out);
}

/* mixed_float8's recipe and scale slots (only under that policy, so other
 * plans are unchanged). */
static void json_fp8(FILE *out, const IrGraph *g)
{
    const TrainCfg *t = &g->train;
    if (t->policy != POLICY_MIXED_F8)
        return;
    fprintf(out, ",\n \"fp8\": {\"recipe\": \"%s\", \"amax_history\": %lld, \"margin\": %lld, "
            "\"slots\": [", prec_fp8_recipe_name(t->fp8), (long long)fp8_history(t), (long long)t->fp8_margin);
    for (int i = 0; i < g->nfp8_slots; i++) {
        const Fp8Slot *s = &g->fp8_slots[i];
        fprintf(out, "%s\n  {\"slot\": %d, \"format\": \"%s\", \"role\": \"%s\", \"of\": %d, "
                "\"product\": %d}", i ? "," : "", i + 1, prec_fp8_name(s->fmt), fp8_role(s), prec_fp8_of(s)->id,
                s->product->id);
    }
    fputs(g->nfp8_slots ? "\n ]}" : "]}", out);
}

static void dump_json(FILE *out, const IrGraph *g)
{
    static const char *const opt[] = {"sgd", "adam", "adamw", "rmsprop"};
    const TrainCfg *t = &g->train;
    fputs("{\"model\": ", out);
    json_str(out, g->model);
    fprintf(out, ", \"policy\": \"%s\", \"lowp\": \"%s\", \"optimizer\": \"%s\", "
            "\"accumulate\": %lld, \"clip_grad_norm\": ", prec_policy_name(t->policy),
            dt_name(g->lowp), opt[t->opt], (long long)t->accumulate);
    json_num(out, t->clip);
    if (t->tf32)
        fputs(", \"float32_matmul\": \"tf32\"", out);
    fputs(",\n", out);
    json_loss_scale(out, t);
    json_params(out, g);
    fputs(" \"nodes\": [", out);
    for (int i = 0; i < g->nnodes; i++) {
        fputs(i ? ",\n" : "\n", out);
        json_node(out, g, g->nodes[i]);
    }
    fputs(g->nnodes ? "\n ]" : "]", out);
    json_memory(out, g);
    json_fp8(out, g);
    Summary s = summarize(g);
    fprintf(out, ",\n \"summary\": {\"lowp_ops\": %d, \"f32_ops\": %d, \"casts\": %d, "
            "\"hoisted_casts\": %d, \"activation_bytes\": %lld, \"activation_bytes_f32\": %lld",
            s.lowp_ops, s.f32_ops, s.casts, s.hoisted,
            (long long)s.mem.bytes, (long long)s.mem.bytes_f32);
    if (g->train.policy == POLICY_MIXED_F8)
        fprintf(out, ", \"fp8_products\": %d, \"fp8_forward\": %d, \"fp8_slots\": %d, "
                "\"fp8_state_bytes\": %lld", s.fp8_fwd + s.fp8_bwd, s.fp8_fwd, g->nfp8_slots,
                (long long)fp8_state_bytes(g));
    if (g->train.tf32)
        fprintf(out, ", \"tf32_ops\": %d", s.tf32_ops);
    fputs("}}\n", out);
}

/* ---- dot ----------------------------------------------------------------- */

static void dot_str(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', out);
        fputc(*s, out);
    }
}

static const char *dot_color(DType t)
{
    static const char *const colors[] = {
        [DT_NONE] = "white", [DT_F32] = "#9ecae1", [DT_F16] = "#fdae6b",
        [DT_BF16] = "#bcbddc", [DT_I32] = "#d9d9d9", [DT_U8] = "#d9d9d9", [DT_U16] = "#d9d9d9",
    };
    return colors[t];
}

/* A node's fill: its compute type's, green for a TF32 product (as the page's). */
static const char *node_color(const IrGraph *g, const IrNode *n)
{
    return n->op != OP_CAST && prec_tf32(g, n) ? "#a1d99b" : dot_color(shown_compute(n));
}

static void dot_node(FILE *out, const IrGraph *g, const IrNode *n)
{
    const char *name = display_name(g, n);
    fprintf(out, "    n%d [label=\"#%d %s\\n", n->id, n->id, op_info[n->op].name);
    if (strcmp(name, "-") != 0) {
        dot_str(out, name);
        fputs("\\n", out);
    }
    fprintf(out, "%s %s\", fillcolor=\"%s\"", shape_str(g->arena, &n->shape),
            dt_name(n->type), node_color(g, n));
    if (n->op == OP_CAST)
        fputs(", shape=diamond", out);
    else if (n->op == OP_PARAM || n->op == OP_INPUT)
        fputs(", shape=box3d", out);
    fputs("];\n", out);
}

/* Edges carry their value's type as an xlabel (placed after layout: plain
 * labels make dot lay out each edge's label as a node, several times
 * slower on a transformer). An optimizer step is drawn reading only its
 * gradient -- the parameter it updates is in its label -- since edges from
 * every parameter at the top to the bottom of the picture are what dot's
 * crossing minimisation spends most of its time on. */
static void dot_edges(FILE *out, const IrNode *n)
{
    bool step = n->phase == PH_OPTIMIZER;
    for (int k = 0; k < n->nin; k++)
        if (!(step && n->in[k]->op == OP_PARAM))
            fprintf(out, "  n%d -> n%d [xlabel=\"%s\"];\n", n->in[k]->id, n->id,
                    dt_name(n->in[k]->type));
}

/* Each fusion group (fuse.h) of phase ph as a dashed cluster inside it,
 * "fused N", drawn where its first node is. */
static void dot_groups(FILE *out, const IrGraph *g, Phase ph)
{
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        bool first = n->fused && n->phase == ph;
        for (int j = 0; j < i && first; j++)
            first = g->nodes[j]->fused != n->fused;
        if (!first)
            continue;
        fprintf(out, "  subgraph cluster_fused_%d {\n    label=\"fused %d\"; style=dashed;\n", n->fused,
                n->fused);
        for (int j = i; j < g->nnodes; j++)
            if (g->nodes[j]->fused == n->fused)
                dot_node(out, g, g->nodes[j]);
        fputs("  }\n", out);
    }
}

/* ---- dot --collapse ------------------------------------------------------ */

const char *plan_scope_label(Arena *a, const IrScope *s)
{
    switch (s->kind) {
    case SC_REPEAT: return arena_printf(a, "%s \u00d7%d", s->name, s->count);
    case SC_COPY:   return arena_printf(a, "%s.%d", s->name, s->copy);
    case SC_BLOCK:  break;
    }
    return strcmp(s->name, s->block) == 0 ? s->name : arena_printf(a, "%s: %s", s->name, s->block);
}

static const IrScope *outermost(const IrScope *s)
{
    while (s && s->parent)
        s = s->parent;
    return s;
}

/* What stands for node n in the collapsed picture: its own id, or its
 * outermost group's box in its phase, numbered after the nodes. */
static int shown_as(const IrGraph *g, const IrNode *n)
{
    const IrScope *s = outermost(n->scope);
    return s ? g->nnodes + (int)n->phase * (g->nscopes + 1) + s->id : n->id;
}

/* The box of group s in phase ph: its name, how many nodes it holds and
 * their arithmetic by compute type; filled with the type most of it runs
 * in. */
static void dot_box(FILE *out, const IrGraph *g, const IrScope *s, Phase ph)
{
    int count = 0, by_type[DT_U16 + 1] = {0}, casts = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->phase != ph || outermost(n->scope) != s)
            continue;
        count++;
        casts += n->op == OP_CAST;
        if (n->op != OP_CAST && op_info[n->op].kind != OPK_DATA && op_info[n->op].cls != CL_NONE)
            by_type[n->compute]++;
    }
    DType most = DT_F32;
    for (DType t = DT_F32; t <= DT_U16; t++)
        if (by_type[t] > by_type[most])
            most = t;
    fprintf(out, "    b%d [label=\"", shown_as(g, &(IrNode){.phase = ph, .scope = s}));
    dot_str(out, plan_scope_label(g->arena, s));
    fprintf(out, "\\n%d nodes:", count);
    for (DType t = DT_F32; t <= DT_U16; t++)
        if (by_type[t])
            fprintf(out, " %d %s,", by_type[t], dt_name(t));
    fprintf(out, " %d casts\", shape=box, peripheries=2, fillcolor=\"%s\"];\n", casts,
            dot_color(most));
}

static int cmp_pair(const void *a, const void *b)
{
    const int *x = a, *y = b;
    return x[0] != y[0] ? (x[0] > y[0]) - (x[0] < y[0]) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* One edge per pair of things shown, dashed and marked "cast" when one of
 * the edges it stands for reads through a cast (pair[2]). Edges between
 * passes are left out (the page does the same): the passes then stand side
 * by side, each top to bottom, and the picture fits a screen's height. */
static void dot_collapsed_edges(FILE *out, const IrGraph *g)
{
    int n = 0, cap = 64;
    int (*pair)[3] = malloc(sizeof *pair * (size_t)cap);
    MP_ASSERT(pair != NULL);
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *d = g->nodes[i];
        for (int k = 0; k < d->nin; k++) {
            int a = shown_as(g, d->in[k]), b = shown_as(g, d);
            if (a == b || d->in[k]->phase != d->phase)
                continue;
            if (n == cap) {
                cap *= 2;
                pair = realloc(pair, sizeof *pair * (size_t)cap);
                MP_ASSERT(pair != NULL);
            }
            pair[n][0] = a;
            pair[n][1] = b;
            pair[n++][2] = d->in[k]->op == OP_CAST;
        }
    }
    qsort(pair, (size_t)n, sizeof *pair, cmp_pair);
    for (int i = 0; i < n;) {
        int j = i, cast = 0;
        for (; j < n && pair[j][0] == pair[i][0] && pair[j][1] == pair[i][1]; j++)
            cast |= pair[j][2];
        fprintf(out, "  %c%d -> %c%d%s;\n", pair[i][0] < g->nnodes ? 'n' : 'b', pair[i][0],
                pair[i][1] < g->nnodes ? 'n' : 'b', pair[i][1],
                cast ? " [style=dashed, xlabel=\"cast\"]" : "");
        i = j;
    }
    free(pair);
}

static void dump_dot(FILE *out, const IrGraph *g, bool collapse)
{
    fputs("digraph \"", out);
    dot_str(out, g->model ? g->model : "model");
    fprintf(out, "\" {\n  graph [rankdir=TB, labelloc=t, fontname=\"Helvetica\", label=\"");
    dot_str(out, g->model ? g->model : "model");
    fprintf(out, ": %s (f16 orange, bf16 purple, f32 blue,%s integer grey, casts diamonds%s)\"%s];\n"
            "  node [shape=box, style=\"filled,rounded\", fontname=\"Helvetica\", fontsize=10];\n"
            "  edge [fontname=\"Helvetica\", fontsize=9];\n", prec_policy_name(g->train.policy),
            g->train.tf32 ? " tf32 green," : "",
            collapse ? ", double boxes repeats and blocks, dashed edges casts; edges between passes "
            "not drawn" : "",
            collapse ? ", newrank=true, ranksep=0.2, nodesep=0.15" : "");
    for (Phase ph = PH_FORWARD; ph <= PH_OPTIMIZER; ph++) {
        fprintf(out, "  subgraph cluster_%s {\n    label=\"%s\";\n", phase_name(ph), phase_name(ph));
        for (int i = 0; i < g->nnodes; i++) {
            const IrNode *n = g->nodes[i];
            const IrScope *s = outermost(n->scope);
            if (n->phase != ph || (n->fused && !collapse) || (collapse && s))
                continue;
            dot_node(out, g, n);
        }
        for (int i = 0; collapse && i < g->nnodes; i++) {  /* each box where its first node is */
            const IrNode *n = g->nodes[i];
            const IrScope *s = outermost(n->scope);
            bool first = s && n->phase == ph;
            for (int j = 0; j < i && first; j++)
                first = !(g->nodes[j]->phase == ph && outermost(g->nodes[j]->scope) == s);
            if (first)
                dot_box(out, g, s, ph);
        }
        if (!collapse)
            dot_groups(out, g, ph);
        fputs("  }\n", out);
    }
    if (collapse)
        dot_collapsed_edges(out, g);
    else
        for (int i = 0; i < g->nnodes; i++)
            dot_edges(out, g->nodes[i]);
    fputs("}\n", out);
}

/* ---- text ---------------------------------------------------------------- */

enum { C_ID, C_LINE, C_NAME, C_OP, C_CLASS, C_RULE, C_COMPUTE, C_OUTPUT, C_FUSED, C_INPUTS, NCOL };
static const char *const col_title[NCOL] = {
    "id", "line", "name", "op", "class", "rule", "compute", "output", "fused", "inputs",
};
#define MAX_SHOWN_INPUTS 3

static char *inputs_text(const IrGraph *g, const IrNode *n)
{
    Arena *a = g->arena;
    if (n->nin == 0)
        return "-";
    char *s = "";
    int shown = n->nin > MAX_SHOWN_INPUTS ? MAX_SHOWN_INPUTS : n->nin;
    for (int k = 0; k < shown; k++)
        if (k < 2 && n->fp8[k])        /* quantised: format and scale slot */
            s = arena_printf(a, "%s%s#%d%s %s s#%d", s, k ? ", " : "", n->in[k]->id,
                             read_transposed(n, k) ? "^T" : "", input_type_name(g, n, k), n->fp8[k]);
        else
            s = arena_printf(a, "%s%s#%d%s %s%s", s, k ? ", " : "", n->in[k]->id,
                             read_transposed(n, k) ? "^T" : "", dt_name(n->in[k]->type),
                             n->in[k]->op == OP_CAST ? "*" : "");
    if (shown < n->nin)
        s = arena_printf(a, "%s +%d more", s, n->nin - shown);
    return s;
}

static void row_cells(const IrGraph *g, const IrNode *n, const char **cell)
{
    Arena *a = g->arena;
    cell[C_ID] = arena_printf(a, "%d", n->id);
    cell[C_LINE] = n->loc.line ? arena_printf(a, "%d", n->loc.line) : "-";
    cell[C_NAME] = display_name(g, n);
    cell[C_OP] = attention_dropout(n) > 0
                     ? arena_printf(a, "%s dropout=%g", op_info[n->op].name, attention_dropout(n))
                     : op_info[n->op].name;
    cell[C_CLASS] = prec_class_name(shown_class(n));
    cell[C_RULE] = user_cast(n) ? "user" : prec_rule_name(shown_rule(n));
    cell[C_COMPUTE] = shown_compute_name(g, n);
    cell[C_OUTPUT] = arena_printf(a, "%s %s", shape_str(a, &n->shape), dt_name(n->type));
    cell[C_FUSED] = !n->fused ? "-" : arena_printf(a, "%d%s", n->fused, n->fused_internal ? " reg" : "");
    cell[C_INPUTS] = inputs_text(g, n);
}

/* w[C_FUSED] < 0: no fusion groups, no column (the plan of --no-fuse). */
static void print_row(FILE *out, const char *const *cell, const int *w)
{
    fprintf(out, "  %*s  %*s  ", w[C_ID], cell[C_ID], w[C_LINE], cell[C_LINE]);
    for (int c = C_NAME; c < C_INPUTS; c++)
        if (w[c] >= 0)
            fprintf(out, "%-*s  ", w[c], cell[c]);
    fprintf(out, "%s\n", cell[C_INPUTS]);
}

static bool any_fused(const IrGraph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->fused)
            return true;
    return false;
}

/* Column widths of one phase's table (each table has its own header, and
 * backward op names are long); names longer than 20 characters overflow
 * their column rather than widen it. */
static void col_widths(const IrGraph *g, Phase ph, int *w)
{
    const char *cell[NCOL];
    for (int c = 0; c < NCOL; c++)
        w[c] = (int)strlen(col_title[c]);
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i]->phase != ph)
            continue;
        row_cells(g, g->nodes[i], cell);
        for (int c = 0; c < C_INPUTS; c++) {
            int len = (int)strlen(cell[c]);
            if (len > w[c] && (c != C_NAME || len <= 20))
                w[c] = len;
        }
    }
    if (!any_fused(g))
        w[C_FUSED] = -1;
}

static void text_nodes(FILE *out, const IrGraph *g)
{
    for (Phase ph = PH_FORWARD; ph <= PH_OPTIMIZER; ph++) {
        int count = 0, w[NCOL];
        for (int i = 0; i < g->nnodes; i++)
            count += g->nodes[i]->phase == ph;
        fprintf(out, "\n%s pass (%d nodes)\n", phase_name(ph), count);
        col_widths(g, ph, w);
        print_row(out, col_title, w);
        const char *cell[NCOL];
        for (int i = 0; i < g->nnodes; i++)
            if (g->nodes[i]->phase == ph) {
                row_cells(g, g->nodes[i], cell);
                print_row(out, cell, w);
            }
    }
}

static const IrNode *find_op(const IrGraph *g, IrOp op)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == op)
            return g->nodes[i];
    return NULL;
}

static void node_ref(FILE *out, const char *before, const IrNode *n)
{
    if (n)
        fprintf(out, "%s%d", before, n->id);
}

static void text_loss_scale(FILE *out, const IrGraph *g)
{
    const TrainCfg *t = &g->train;
    fprintf(out, "\nloss scaling: %s (policy %s)\n", prec_ls_name(t->ls), prec_policy_name(t->policy));
    if (t->ls == LS_NONE) {
        fputs("  S = 1: the loss is not scaled and gradients are not checked for inf/NaN\n", out);
    } else {
        fputs("  1. the f32 loss", out);
        if (g->loss && g->loss->name)
            fprintf(out, " '%s'", g->loss->name);
        node_ref(out, " #", g->loss);
        fputs(" is multiplied by S", out);
        node_ref(out, " at #", g->loss_scale);
        fputs("; the backward pass starts from S\n", out);
        fputs("  2. every parameter gradient is multiplied by 1/S in f32 and checked for\n"
              "     inf/NaN in one pass", out);
        node_ref(out, " at #", find_op(g, OP_UNSCALE));
        fputs("\n", out);
        if (t->ls == LS_DYNAMIC)
            fprintf(out, "  3. not finite: the step is skipped, S = S x %g, the good-step count restarts;\n"
                    "     finite: the step is taken; after %lld good steps in a row S = S x %g\n"
                    "  4. S starts at %g and never goes below 1; 100 skipped steps in a row at\n"
                    "     S = 1 stop training with an error naming the parameters and the op\n",
                    t->ls_backoff, (long long)t->ls_interval, t->ls_growth, t->ls_init);
        else
            fprintf(out, "  3. not finite: the step is skipped; S stays %g\n", t->ls_init);
    }
    if (t->clip > 0)
        fprintf(out, "  clipping: gradient norm clipped to %g, on the unscaled gradients\n", t->clip);
}

static void text_fp8(FILE *out, const IrGraph *g)
{
    const TrainCfg *t = &g->train;
    if (t->policy != POLICY_MIXED_F8)
        return;
    fprintf(out, "\nfp8 scaling: %s (amax_history %lld, margin %lld), %d scale slots\n",
            prec_fp8_recipe_name(t->fp8), (long long)fp8_history(t), (long long)t->fp8_margin,
            g->nfp8_slots);
    fputs("  each quantised tensor v has a scale s = 2^(floor(log2(max / amax)) - margin), max\n"
          "  448 (e4m3) or 57344 (e5m2); q = round-to-nearest-even(v * s) saturated to +-max;\n"
          "  the product of quantised a and b is divided by sa * sb in f32\n", out);
    if (t->fp8 == FP8_DELAYED)
        fprintf(out, "  amax: the largest |v| over the last %lld steps (the first step: its own)\n",
                (long long)t->fp8_history);
    else
        fputs("  amax: the largest |v| of the tensor itself (one more pass)\n", out);
    if (g->nfp8_slots)
        fputs("  slot  format  role  value  product\n", out);
    for (int i = 0; i < g->nfp8_slots; i++) {
        const Fp8Slot *s = &g->fp8_slots[i];
        const char *slot = arena_printf(g->arena, "s#%d", i + 1);
        fprintf(out, "  %-4s  %-6s  %-4s  #%-4d  #%d %s (line %d)\n", slot, prec_fp8_name(s->fmt),
                fp8_role(s), prec_fp8_of(s)->id, s->product->id, op_info[s->product->op].name, s->product->loc.line);
    }
}

static void text_params(FILE *out, const IrGraph *g)
{
    int wn = (int)strlen("name"), ws = (int)strlen("shape");
    for (int i = 0; i < g->nparams; i++) {
        int ln = (int)strlen(g->params[i].name);
        int ls = (int)strlen(shape_str(g->arena, &g->params[i].shape));
        wn = ln > wn ? ln : wn;
        ws = ls > ws ? ls : ws;
    }
    fprintf(out, "\nparameters (%d)\n  %-*s  %-*s  master  working copies\n", g->nparams, wn,
            "name", ws, "shape");
    for (int i = 0; i < g->nparams; i++) {
        const IrParam *p = &g->params[i];
        const IrNode *c[3];
        int nc = param_copies(g, p, c);
        fprintf(out, "  %-*s  %-*s  f32     ", wn, p->name, ws, shape_str(g->arena, &p->shape));
        for (int k = 0; k < nc; k++)
            fprintf(out, "%s%s (#%d)", k ? ", " : "", dt_name(c[k]->type), c[k]->id);
        fputs(nc ? "" : "none", out);
        fputs(p->buffer ? "  (buffer, not trained)\n" : !p->trainable ? "  (not trained)\n"
              : p->no_decay ? "  (no weight decay)\n" : "\n", out);
    }
}

static const char *human_bytes(Arena *a, int64_t b)
{
    if (b < 1024)
        return arena_printf(a, "%lld B", (long long)b);
    if (b < 1024 * 1024)
        return arena_printf(a, "%.1f KiB", (double)b / 1024);
    if (b < 1024 * 1024 * 1024)
        return arena_printf(a, "%.1f MiB", (double)b / (1024.0 * 1024.0));
    return arena_printf(a, "%.2f GiB", (double)b / (1024.0 * 1024.0 * 1024.0));
}

static void text_summary(FILE *out, const IrGraph *g)
{
    Summary s = summarize(g);
    fprintf(out, "\nsummary\n  operations   %d in %s, %d in f32; %d casts (%d hoisted: parameter "
            "working copies)\n", s.lowp_ops, dt_name(g->lowp == DT_F32 ? DT_F16 : g->lowp),
            s.f32_ops, s.casts, s.hoisted);
    if (g->train.policy == POLICY_MIXED_F8)
        fprintf(out, "  fp8          %d products quantised (%d forward e4m3, %d backward e5m2 x e4m3); "
                "%d scale slots,\n               %lld bytes of amax histories and scales (in checkpoints)\n",
                s.fp8_fwd + s.fp8_bwd, s.fp8_fwd, s.fp8_bwd, g->nfp8_slots, (long long)fp8_state_bytes(g));
    if (g->train.tf32)
        fprintf(out, "               of the f32 operations, %d products on TF32 operands "
                "(float32_matmul \"tf32\")\n", s.tf32_ops);
    fprintf(out, "  activations  %lld bytes (%s) kept for the backward pass under %s\n",
            (long long)s.mem.bytes, human_bytes(g->arena, s.mem.bytes),
            prec_policy_name(g->train.policy));
    fprintf(out, "               %lld bytes (%s) under float32", (long long)s.mem.bytes_f32,
            human_bytes(g->arena, s.mem.bytes_f32));
    if (s.mem.bytes_f32 > 0)
        fprintf(out, "; the plan keeps %.0f%% of that",
                100.0 * (double)s.mem.bytes / (double)s.mem.bytes_f32);
    fputs("\n", out);
    const MemPlan *mp = plan_mem(g);
    double added, flops = recompute_flops(g, &added);
    int64_t step = memplan_step_bytes(mp);
    fprintf(out, "  memory       %lld bytes (%s) a step: parameters %lld, gradients %lld, optimizer "
            "state %lld\n               (the runtime's f32 buffers), arena %lld (%s)\n", (long long)step,
            human_bytes(g->arena, step), (long long)mp->param_bytes, (long long)mp->param_bytes,
            (long long)mp->state_bytes, (long long)mp->arena_bytes, human_bytes(g->arena, mp->arena_bytes));
    fprintf(out, "  arena        peak %lld bytes live after #%d: activations %lld, gradients %lld, working "
            "copies %lld\n", (long long)mp->peak_bytes, mp->peak_at, (long long)mp->peak_kind[MEM_ACT],
            (long long)mp->peak_kind[MEM_GRAD], (long long)mp->peak_kind[MEM_WORK]);
    fprintf(out, "  flops        %.4g a step; recomputation adds %.4g (%.1f%%)", flops, added,
            flops > 0 ? 100.0 * added / flops : 0.0);
    if (mp->budget)
        fprintf(out, "; budget %lld bytes (%s) met", (long long)mp->budget, human_bytes(g->arena, mp->budget));
    fputs("\n", out);
}

static void dump_text(FILE *out, const IrGraph *g)
{
    const SrcFile *f = g->model_loc.file;
    fprintf(out, "precision plan of model %s%s%s%s\n", g->model ? g->model : "?",
            f ? " (" : "", f ? f->path : "", f ? ")" : "");
    fprintf(out, "policy %s: lowp type %s, master weights f32, loss scale %s\n",
            prec_policy_name(g->train.policy), dt_name(g->lowp), prec_ls_name(g->train.ls));
    if (g->train.tf32)
        fputs("float32_matmul tf32: products computing in f32 round their operands to TF32\n"
              "(compute tf32), accumulating in f32\n", out);
    fputs("class: lowp, fp32, follow (widest input), none (view); rule: override (typed\n"
          "statement or precision region), list (fp16_ops/fp32_ops), class, cast\n"
          "(inserted by the plan), user (a cast written in the model);\n"
          "inputs: #id type, * = read through a cast node\n", out);
    if (g->train.policy == POLICY_MIXED_F8)
        fputs("fp8: a quantised input shows its format and scale slot (#id e4m3 s#1); the\n"
              "product's compute column shows e4m3 (forward) or e5m2 (dy, backward)\n", out);
    if (any_transposed(g))
        fputs("#id^T: a product reads the input transposed, in place (no copy)\n", out);
    if (any_fused(g))
        fputs("fused: the fusion group that runs the node, one pass over memory where its\n"
              "last node stands; reg = kept in registers, never stored; a group that starts\n"
              "with a product runs in the product's store (C), or as one kernel right\n"
              "after it (CUDA: cuBLAS stores the product)\n", out);
    text_nodes(out, g);
    text_loss_scale(out, g);
    text_fp8(out, g);
    text_params(out, g);
    text_saved(out, g);
    text_summary(out, g);
}

void plan_dump(FILE *out, const IrGraph *g, PlanFormat fmt)
{
    switch (fmt) {
    case PLAN_TEXT: dump_text(out, g); break;
    case PLAN_JSON: dump_json(out, g); break;
    case PLAN_DOT:  dump_dot(out, g, false); break;
    case PLAN_DOT_COLLAPSED: dump_dot(out, g, true); break;
    case PLAN_HTML: plan_dump_html(out, g, NULL); break;
    }
}
