/* emit_common.c - see emit_common.h. */
#include "emit.h"
#include "emit_common.h"
#include "ops.h"
#include "prec.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void emit_begin(Emit *e, FILE *out, const IrGraph *g)
{
    memset(e, 0, sizeof *e);
    e->out = out;
    e->g = g;
    arena_init(&e->scratch);
    e->a = &e->scratch;
    e->mp = g->mem ? g->mem : memplan_build(e->a, g);
    e->names = arena_alloc(e->a, sizeof *e->names * (size_t)(g->nnodes + 1));
}

bool emit_end(Emit *e)
{
    arena_free(&e->scratch);
    return !ferror(e->out);
}

void em(Emit *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(e->out, fmt, ap);
    va_end(ap);
}

/* Model names become identifiers only behind a prefix, so no model name can
 * collide with a C or CUDA keyword, a macro or a library function. */
const char *emit_c_name(Arena *a, const char *name)
{
    size_t n = strlen(name);
    char *s = arena_alloc(a, n + 3);
    memcpy(s, "m_", 2);
    for (size_t i = 0; i < n; i++)
        s[i + 2] = isalnum((unsigned char)name[i]) ? name[i] : '_';
    return s;
}

static void append_ident(char *buf, size_t cap, const char *name)
{
    size_t len = strlen(buf);
    for (const char *p = name; *p && len + 1 < cap && len < 60; p++)
        buf[len++] = isalnum((unsigned char)*p) ? *p : '_';
    buf[len] = 0;
}

const char *cname(Emit *e, const IrNode *n)
{
    return loop_name(e, n, emit_base_name(e, n));
}

const char *emit_base_name(Emit *e, const IrNode *n)
{
    if (e->names[n->id])
        return e->names[n->id];
    char buf[96];
    snprintf(buf, sizeof buf, "v%d_", n->id);
    if (n->phase == PH_BACKWARD && n->grad_of) {
        strcat(buf, "d_");
        const IrNode *f = n->grad_of;
        append_ident(buf, sizeof buf, f->name ? f->name : op_info[f->op].name);
    } else
        append_ident(buf, sizeof buf, n->name ? n->name : op_info[n->op].name);
    return e->names[n->id] = arena_strdup(e->a, buf);
}

const char *ctype(DType t)
{
    switch (t) {
    case DT_F32: return "float";
    case DT_F16:
    case DT_BF16: return "uint16_t";
    case DT_I32: return "int32_t";
    case DT_U8: return "uint8_t";
    case DT_U16: return "uint16_t";
    default: return "void";
    }
}

const char *mpdt(DType t)
{
    static const char *const names[] = {
        [DT_NONE] = "0", [DT_F32] = "MP_F32", [DT_F16] = "MP_F16", [DT_BF16] = "MP_BF16",
        [DT_I32] = "MP_I32", [DT_U8] = "MP_U8", [DT_U16] = "MP_U16",
    };
    MP_ASSERT((unsigned)t < sizeof names / sizeof names[0]);
    return names[t];
}

/* The text of the node's source line, trimmed, safe inside a C comment. */
static const char *line_text(Emit *e, SrcLoc loc)
{
    if (!loc.file || loc.line < 1)
        return "";
    const char *t = loc.file->text;
    for (int l = 1; l < loc.line && *t; t++)
        if (*t == '\n')
            l++;
    while (*t == ' ' || *t == '\t')
        t++;
    size_t n = strcspn(t, "\n#");
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\t' || t[n - 1] == '\r'))
        n--;
    if (n > 100)
        n = 100;
    char *s = arena_strndup(e->a, t, n);
    for (char *p = s; *p; p++)
        if ((*p == '*' && p[1] == '/') || (unsigned char)*p < 32 || (unsigned char)*p > 126)
            *p = ' ';
    return s;
}

static const char *file_name(SrcLoc loc)
{
    if (!loc.file)
        return "?";
    const char *s = strrchr(loc.file->path, '/');
    return s ? s + 1 : loc.file->path;
}

const char *source_comment(Emit *e, const IrNode *n)
{
    return arena_printf(e->a, "%s:%d: %s", file_name(n->loc), n->loc.line, line_text(e, n->loc));
}

const char *where(Emit *e, const IrNode *n)
{
    const IrNode *f = n->grad_of ? n->grad_of : n;
    char buf[128] = "";
    append_ident(buf, sizeof buf, f->name ? f->name : "");
    for (char *p = buf; *p; p++)   /* keep dots of parameter names readable */
        if (*p == '_' && f->name && f->name[p - buf] == '.')
            *p = '.';
    return arena_printf(e->a, "%s:%d%s%s%s", file_name(n->loc), n->loc.line, buf[0] ? " (" : "", buf,
                        buf[0] ? ")" : "");
}

const char *describe(Emit *e, const IrNode *n)
{
    const char *what = op_info[n->op].name;
    if (n->recomputes)
        return arena_printf(e->a, "%s, recomputed, %s", what, where(e, n));
    if (n->phase == PH_BACKWARD)
        return arena_printf(e->a, "%s, gradient, %s", what, where(e, n));
    return arena_printf(e->a, "%s, %s", what, where(e, n));
}

const char *dims_list(Emit *e, const Shape *s)
{
    char buf[MP_MAX_RANK * 24 + 2] = "";
    size_t len = 0;
    for (int i = 0; i < s->rank; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%lld", i ? ", " : "", (long long)s->d[i]);
    return arena_strdup(e->a, buf);
}

const char *dims_init(Emit *e, const Shape *s)
{
    return s->rank ? arena_printf(e->a, "{%s}", dims_list(e, s)) : "{0}";
}

bool *needed_by(Emit *e, const IrNode *root)
{
    int n = e->g->nnodes;
    bool *need = arena_alloc(e->a, sizeof *need * (size_t)(n + 1));
    if (!root)
        return need;
    need[root->id] = true;
    for (int i = root->id; i >= 0; i--)
        if (need[i])
            for (int j = 0; j < e->g->nodes[i]->nin; j++)
                need[e->g->nodes[i]->in[j]->id] = true;
    return need;
}

/* ---- parts of the generated program both targets write alike ----------- */

void emit_runtime(Emit *e, int count, const char *const *names, const char *const *texts)
{
    for (int i = 0; i < count; i++) {
        em(e, "\n/* ==== runtime/%s ==== */\n", names[i]);
        const char *t = texts[i];
        while (*t) {
            const char *nl = strchr(t, '\n');
            size_t len = nl ? (size_t)(nl - t) + 1 : strlen(t);
            /* the runtime's own includes are already pasted */
            if (!(strncmp(t, "#include \"mp_", 13) == 0))
                fwrite(t, 1, len, e->out);
            t += len;
        }
    }
}

/* ---- the skeleton: templates/ -------------------------------------------- */

static void runtime_slot(Emit *e) { emit_runtime(e, mp_runtime_count, mp_runtime_names, mp_runtime_texts); }

static bool fill_from(Emit *e, const EmitSlot *slots, int nslots, const char *name, size_t len)
{
    for (int i = 0; i < nslots; i++)
        if (strlen(slots[i].name) == len && !strncmp(slots[i].name, name, len)) {
            if (slots[i].fn)
                slots[i].fn(e);
            else
                em(e, "%s", slots[i].text);
            return true;
        }
    return false;
}

/* A target's own slots first, then those every template has. */
static void fill(Emit *e, const EmitSlot *slots, int nslots, const char *name, size_t len)
{
    const IrGraph *g = e->g;
    const EmitSlot common[] = {
        {"MODEL", g->model, NULL},
        {"SOURCE", g->model_loc.file ? g->model_loc.file->path : "?", NULL},
        {"POLICY", prec_policy_name(g->train.policy), NULL},
        {"VERSION", MPCC_VERSION, NULL},
        {"RUNTIME", NULL, runtime_slot},
        {"DESCRIPTORS", NULL, emit_descriptors},
    };
    if (fill_from(e, slots, nslots, name, len) ||
        fill_from(e, common, (int)(sizeof common / sizeof common[0]), name, len))
        return;
    fprintf(stderr, "mpcc: internal error: template slot '%.*s' has no filler\n", (int)len, name);
    MP_ASSERT(!"template slot without filler");
}

void emit_template(Emit *e, const char *name, const EmitSlot *slots, int nslots)
{
    const char *t = NULL;
    for (int i = 0; i < mp_template_count && !t; i++)
        if (!strcmp(mp_template_names[i], name))
            t = mp_template_texts[i];
    MP_ASSERT(t != NULL);
    while (*t) {
        const char *nl = strchr(t, '\n');
        size_t len = nl ? (size_t)(nl - t) + 1 : strlen(t);
        const char *end = t + len - (nl ? 1 : 0);       /* the line without its newline */
        if (!strncmp(t, "@@#", 3)) {
            t += len;
            continue;
        }
        if (end - t > 4 && !strncmp(t, "@@", 2) && !strncmp(end - 2, "@@", 2) &&
            !memchr(t + 2, '@', (size_t)(end - t) - 4)) {   /* a slot alone on its line */
            fill(e, slots, nslots, t + 2, (size_t)(end - t) - 4);
            t += len;
            continue;
        }
        const char *p = t, *stop = t + len;             /* slots inside the line */
        for (;;) {
            const char *at = strstr(p, "@@");
            if (!at || at >= end) {
                fwrite(p, 1, (size_t)(stop - p), e->out);
                break;
            }
            const char *close = strstr(at + 2, "@@");
            MP_ASSERT(close && close < end);
            fwrite(p, 1, (size_t)(at - p), e->out);
            fill(e, slots, nslots, at + 2, (size_t)(close - at - 2));
            p = close + 2;
        }
        t = stop;
    }
}

/* ---- named values (--predict) ---------------------------------------- */

static bool is_value(Emit *e, const IrNode *n)
{
    BufKind k = e->mp->kind[n->id];
    if (!n->name || n->phase != PH_FORWARD || n->hoisted || k == BUF_PARAM || k == BUF_INPUT
        || k == BUF_CONST || k == BUF_NONE)
        return false;
    /* a lowp (or f32) working copy carries its source's name */
    return !(n->op == OP_CAST && n->in[0]->name && !strcmp(n->in[0]->name, n->name));
}

static const IrGraph *sort_graph;   /* qsort has no context argument */

static int by_name_then_id(const void *pa, const void *pb)
{
    int a = *(const int *)pa, b = *(const int *)pb;
    int c = strcmp(sort_graph->nodes[a]->name, sort_graph->nodes[b]->name);
    return c ? c : a - b;
}

/* Each name's first node is its value: the candidates sorted by (name, id),
 * so a model of n nodes takes O(n log n). */
static void find_values(Emit *e)
{
    const IrGraph *g = e->g;
    e->value_ix = arena_alloc(e->a, sizeof *e->value_ix * (size_t)(g->nnodes + 1));
    int *cand = arena_alloc(e->a, sizeof *cand * (size_t)(g->nnodes + 1));
    bool *first = arena_alloc(e->a, sizeof *first * (size_t)(g->nnodes + 1));
    int nc = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (is_value(e, g->nodes[i]))
            cand[nc++] = i;
    sort_graph = g;
    qsort(cand, (size_t)nc, sizeof *cand, by_name_then_id);
    for (int k = 0; k < nc; k++)
        first[cand[k]] = k == 0 || strcmp(g->nodes[cand[k - 1]]->name, g->nodes[cand[k]]->name);
    for (int i = 0; i < g->nnodes; i++)
        e->value_ix[i] = first[i] ? e->nvalues++ : -1;
}

bool emit_keep_bthd(const IrNode *n)
{
    return n->op == OP_ATTENTION && n->ia[5];
}

const char *emit_view_base(Emit *e, const IrNode *n)
{
    const char *root = cname(e, e->g->nodes[e->mp->root[n->id]]);
    long long off = (long long)e->mp->view_off[n->id];
    return off ? arena_printf(e->a, "((unsigned char *)%s + %lld)", root, off) : root;
}

const char *emit_keep(Emit *e, const IrNode *n, bool cuda)
{
    const char *v = emit_value_arg(e, emit_value(e, n)), *r = cuda ? "r, " : "";
    long long stride = (long long)ir_view_stride(e->g, n);
    if (stride) {   /* a chunk read in place (or a reshape of one): its rows, stride apart */
        const IrNode *c = n;
        while (c->op == OP_RESHAPE)
            c = c->in[0];
        long long len = (long long)c->shape.d[c->shape.rank - 1], es = dt_size(n->type);
        return arena_printf(e->a, "    %s(%s%s, %s, %lld, %lld, %lld);\n",
                            cuda ? "mp_cu_keep_rows" : "MP_KEEP_ROWS", r, v, cname(e, n),
                            (long long)shape_numel(&n->shape) / len, len * es, stride * es);
    }
    if (emit_keep_bthd(n)) {
        const int64_t *d = n->shape.d;
        return arena_printf(e->a, "    %s(%s%s, %s, %d, %lld, %lld, %lld, %lld);\n",
                            cuda ? "mp_cu_keep_bthd" : "MP_KEEP_BTHD", r, v, cname(e, n),
                            dt_size(n->type), (long long)d[0], (long long)d[1], (long long)d[2],
                            (long long)d[3]);
    }
    return arena_printf(e->a, "    %s(%s%s, %s, %lld);\n", cuda ? "mp_cu_keep" : "MP_KEEP", r, v,
                        cname(e, n), (long long)(shape_numel(&n->shape) * dt_size(n->type)));
}

int emit_value(Emit *e, const IrNode *n)
{
    if (!e->value_ix)
        find_values(e);
    return e->value_ix[n->id];
}

int emit_output(Emit *e)
{
    const IrNode *x = e->g->loss;
    while (x && x->op == OP_CAST)
        x = x->in[0];
    if (!x || !ops_is_loss(x->op))
        return -1;              /* a sum of losses: --predict needs --output */
    while (x->nin > 0) {
        x = x->in[0];
        if (emit_value(e, x) >= 0)
            return emit_value(e, x);
    }
    return -1;
}

const char *emit_real_rows(Emit *e, const char *run, long long n)
{
    return arena_printf(e->a, "mp_real_rows(%s, %lld, %lld)", run, n, (long long)e->g->batch);
}

/* mp_values: name, type, shape and the inputs each depends on (a mask of
 * input indices, bit 63 for any beyond, propagated along the graph once). */
static void values_table(Emit *e)
{
    const IrGraph *g = e->g;
    emit_value(e, g->nodes[0]);
    unsigned long long *in = arena_alloc(e->a, sizeof *in * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (e->mp->kind[i] == BUF_INPUT)
            in[i] = 1ull << (n->ia[0] < 63 ? n->ia[0] : 63);
        for (int j = 0; j < n->nin; j++)
            in[i] |= in[n->in[j]->id];
    }
    em(e, "\nstatic const MpValue mp_values[%d] = {\n", e->nvalues ? e->nvalues : 1);
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        Shape s = n->shape;
        if (emit_keep_bthd(n))   /* stored [B, T, H, D], the value [B, H, T, D] */
            s.d[1] = n->shape.d[2], s.d[2] = n->shape.d[1];
        if (e->value_ix[i] >= 0)
            em(e, "    {\"%s\", %s, %d, %s, 0x%llxull},\n", n->name, mpdt(n->type), s.rank,
               dims_init(e, &s), in[i]);
    }
    em(e, "};\n");
}

/* mixed_float8's scale slots (the plan's s#N, compiler/prec.c) and their
 * state, mp_fp8.h's MpFp8: formats, this step's exponents and amaxes, the
 * amax histories; mp_model.fp8 points at it. The C and CUDA programs
 * declare it alike (the CUDA program keeps a copy on the device:
 * runtime/mp_cuda_fp8.h). */
void emit_fp8_state(Emit *e)
{
    const IrGraph *g = e->g;
    int n = g->nfp8_slots;
    long long hist = g->train.fp8 == FP8_DELAYED ? (long long)g->train.fp8_history : 1;
    if (n == 0)
        return;
    em(e, "\n/* mixed_float8: %d per-tensor scales (the plan's s#1..s#%d), %s scaling */\n", n, n,
       prec_fp8_recipe_name(g->train.fp8));
    em(e, "static const unsigned char mp_fp8_fmt[%d] = {\n", n);
    for (int s = 0; s < n; s++) {
        const Fp8Slot *f = &g->fp8_slots[s];
        em(e, "    %s, /* s#%d: %s of %s, %s */\n", f->fmt == FP8_E4M3 ? "MP_E4M3" : "MP_E5M2", s + 1,
           f->role == 'g' ? "dy" : f->role == 'w' ? "w" : "x", op_info[f->product->op].name,
           where(e, f->product));
    }
    em(e, "};\nstatic int mp_fp8_exp[%d];\nstatic float mp_fp8_amax[%d];\n", n, n);
    em(e, "static float mp_fp8_hist[%lld];\n", hist * n);
    em(e, "static MpFp8 mp_fp8 = {%d, %lld, %lld, %d, mp_fp8_fmt, mp_fp8_exp, mp_fp8_amax, mp_fp8_hist, 0, 0, 0};\n",
       n, hist, (long long)g->train.fp8_margin, g->train.fp8 == FP8_CURRENT ? 1 : 0);
}

/* Each parameter's first forward reader (through its casts), for
 * --gradcheck's messages: "conv2d, model.mp:12 (h)". */
static const char **param_readers(Emit *e)
{
    const IrGraph *g = e->g;
    const char **reader = arena_alloc(e->a, sizeof *reader * (size_t)(g->nparams + 1));
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->phase != PH_FORWARD || n->op == OP_CAST)
            continue;
        for (int j = 0; j < n->nin; j++) {
            const IrNode *x = n->in[j];
            while (x->op == OP_CAST)
                x = x->in[0];
            if (x->op == OP_PARAM && !reader[x->ia[0]])
                reader[x->ia[0]] = describe(e, n);
        }
    }
    return reader;
}

void emit_descriptors(Emit *e)
{
    const IrGraph *g = e->g;
    em(e, "\nstatic MpInput mp_inputs[%d] = {\n", g->ninputs ? g->ninputs : 1);
    for (int i = 0; i < g->ninputs; i++) {
        const IrInput *in = &g->inputs[i];
        /* ..., window, has_ignore, ignore */
        em(e, "    {\"%s\", %s, %d, %s, %lld, NULL, NULL, %d, %d, (int64_t)%lld},\n", in->name,
           mpdt(in->type), in->shape.rank, dims_init(e, &in->shape), (long long)in->classes,
           in->window ? 1 : 0, in->has_ignore, (long long)in->ignore);
    }
    em(e, "};\n\nstatic MpParam mp_params[%d] = {\n", g->nparams ? g->nparams : 1);
    const char **reader = param_readers(e);
    for (int i = 0; i < g->nparams; i++) {
        const IrParam *p = &g->params[i];
        em(e, "    {\"%s\", %d, %s, %lld, %d, %.17g, %.17g, %lld, %lld, %d, NULL, NULL, %d, NULL, 0, "
           "\"%s\", %.17g},\n", p->name, p->shape.rank, dims_init(e, &p->shape), (long long)shape_numel(&p->shape),
           (int)p->init, p->a, p->b, (long long)p->fan_in, (long long)p->fan_out,
           p->trainable && p->grad ? 1 : 0, p->no_decay ? 1 : 0, reader[i] ? reader[i] : "unused", p->c);
    }
    em(e, "};\n\nstatic const char *const mp_metric_names[%d] = {", g->nmetrics ? g->nmetrics : 1);
    for (int i = 0; i < g->nmetrics; i++)
        em(e, "%s\"%s\"", i ? ", " : "", g->metrics[i].name);
    em(e, "%s};\n", g->nmetrics ? "" : "NULL");   /* C11 has no empty initialiser */
    values_table(e);
}

void emit_model_struct(Emit *e, const char *hooks)
{
    const IrGraph *g = e->g;
    const TrainCfg *t = &g->train;
    em(e, "\nstatic MpModel mp_model = {\n");
    em(e, "    \"%s\", \"%s\", \"%s\", \"%s\", %lld,\n", g->model, prec_policy_name(t->policy),
       g->model_loc.file ? g->model_loc.file->path : "", MPCC_VERSION, (long long)g->batch);
    em(e, "    %d, mp_inputs, %d, mp_params, %d, mp_metric_names,\n", g->ninputs, g->nparams,
       g->nmetrics);
    em(e, "    {%d, %.17g, %.17g, %.17g, %.17g, %.17g, %.17g, %d,\n", (int)t->opt, t->lr, t->momentum,
       t->beta1, t->beta2, t->eps, t->weight_decay, t->nesterov ? 1 : 0);
    em(e, "     %d, %.17g, %.17g, %.17g, %lld,\n", (int)t->ls, t->ls_init, t->ls_growth, t->ls_backoff,
       (long long)t->ls_interval);
    em(e, "     %d, %.17g, %.17g, %.17g, %lld, %lld, %lld, %d, %.17g,\n", (int)t->sched, t->warmup,
       t->sched_min, t->clip, (long long)t->accumulate, (long long)t->steps, (long long)t->seed,
       (int)t->warmup_style, t->dampening);
    em(e, "     %.17g, %d},\n", t->alpha, t->centered ? 1 : 0);
    em(e, "    %s,\n", hooks);
    em(e, "    %d, mp_values, %d, %s,\n};\n", e->nvalues, emit_output(e),
       g->nfp8_slots ? "&mp_fp8" : "NULL");
}

/* ---- sizes of a node's tensors, as kernels take them -------------------- */

long long emit_dim(const IrNode *v, int i)
{
    return (long long)v->shape.d[i < 0 ? v->shape.rank + i : i];
}

/* MpAttnLays: where q, k, v, y (dy) and dq, dk, dv lie (ir.h IrAttn):
 * each tensor's {off, sb, sh, st}, row t of sample b, head h at element
 * off + b sb + h sh + t st */
static const char *attention_lays(Emit *e, const IrNode *f, const IrNode *const *qkv)
{
    IrAttn a = ir_attention(f);
    long long H = a.H, T = a.T, Tk = a.Tk, D = a.D, HD = H * D, l[7][4];
    for (int i = 0; i < 4; i++) {          /* q, k, v, y */
        long long t = i == 1 || i == 2 ? Tk : T;
        bool bthd = i < 3 ? a.qkv_bthd : a.y_bthd;
        /* a [B, T, H, D] row's elements, or a chunk's row in place: S apart */
        long long view = i < 3 ? (long long)ir_view_stride(e->g, qkv[i]) : 0, S = view ? view : HD;
        long long *x = l[i];
        x[0] = 0, x[1] = t * S, x[2] = bthd ? D : t * D, x[3] = bthd ? S : D;
    }
    long long part[3] = {0, T, T + Tk};    /* dq, dk, dv: rows from */
    for (int i = 0; i < 3; i++) {
        long long *x = l[4 + i], g = T + 2 * Tk;
        if (a.glay == IR_GLAY_BHTD)
            x[0] = part[i] * D, x[1] = H * g * D, x[2] = g * D, x[3] = D;
        else if (a.glay == IR_GLAY_BTHD)
            x[0] = part[i] * HD, x[1] = g * HD, x[2] = D, x[3] = HD;
        else
            x[0] = i * HD, x[1] = 3 * T * HD, x[2] = D, x[3] = 3 * HD;
    }
    const char *s = arena_printf(e->a, "{%lld, {", H);
    for (int i = 0; i < 7; i++)
        s = arena_printf(e->a, "%s%s{%lld, %lld, %lld, %lld}", s, i ? ", " : "", l[i][0], l[i][1],
                         l[i][2], l[i][3]);
    return arena_printf(e->a, "%s}}", s);
}

const char *emit_attention_opt(Emit *e, const IrNode *n, const IrNode *f, const IrNode *mask, bool cuda)
{
    IrAttn a = ir_attention(f);
    if (!mask && !f->ia[1] && !(f->fa[1] > 0) && !a.qkv_bthd && !a.y_bthd)
        return NULL;
    /* the mask's strides over [B, H, T, T'] (right-aligned; 0 where it
     * broadcasts) */
    long long st[4] = {0, 0, 0, 0}, step = 1;
    for (int i = 0; mask && i < mask->shape.rank; i++) {
        int64_t d = mask->shape.d[mask->shape.rank - 1 - i];
        st[3 - i] = d == 1 ? 0 : step;
        step *= (long long)d;
    }
    /* dropout (training only): the generator's (seed, step, micro-batch,
     * forward node), the CUDA program's step read on the device */
    const char *drop = f->fa[1] > 0
        ? arena_printf(e->a, ",\n            %s->training ? (float)%.9g : 0.0f, %s->seed, %s, %s->micro, %d, %s",
                       cuda ? "r" : "run", f->fa[1], cuda ? "r" : "run", cuda ? "0" : "run->step",
                       cuda ? "r" : "run", f->id, cuda ? "r->hdr" : "NULL")
        : ", 0.0f, 0, 0, 0, 0, NULL";     /* every field: -Wmissing-field-initializers */
    return arena_printf(e->a, "{%d, (float)%.9g, %s, %s, %lld, {%lld, %lld, %lld, %lld}%s,\n            %s}",
                        (int)f->ia[1], f->fa[0], mask ? cname(e, mask) : "NULL",
                        mask ? mpdt(mask->type) : "MP_U8", (long long)a.H, st[0], st[1],
                        st[2], st[3], drop,
                        attention_lays(e, f, (const IrNode *const *)(n == f ? f->in : n->in + 1)));
}

void emit_around_axis(const IrNode *x, int64_t axis, long long *outer, long long *len, long long *inner)
{
    *outer = *len = *inner = 1;
    if (axis < 0) {
        *len = (long long)shape_numel(&x->shape);
        return;
    }
    for (int i = 0; i < x->shape.rank; i++)
        *(i < axis ? outer : i == axis ? len : inner) *= x->shape.d[i];
}

/* chunk, slice, slice_grad, concat: the window [start, start + len) along
 * axis ia[0] of `big` (the sliced input, or the output placed into) */
EmitWindow emit_window(const IrNode *big, int64_t axis, int64_t start, int64_t len)
{
    EmitWindow w = {0, 0, 0, (long long)start, (long long)len};
    emit_around_axis(big, axis, &w.outer, &w.big, &w.inner);
    return w;
}

EmitWindow emit_window_of(const IrNode *n)
{
    int64_t axis = n->ia[0];
    if (n->op == OP_CHUNK) {
        int64_t len = n->shape.d[axis];
        return emit_window(n->in[0], axis, n->ia[2] * len, len);
    }
    return emit_window(n->op == OP_SLICE ? n->in[0] : n, axis, n->ia[1], n->ia[2] - n->ia[1]);
}

void emit_ncs(const IrNode *x, long long *n0, long long *c, long long *s)
{
    *n0 = emit_dim(x, 0);
    *c = emit_dim(x, 1);
    *s = (long long)shape_numel(&x->shape) / (*n0 * *c);
}

const char *emit_nchw(Emit *e, const IrNode *x)
{
    return arena_printf(e->a, "%lld, %lld, %lld, %lld", emit_dim(x, 0), emit_dim(x, 1), emit_dim(x, 2),
                        emit_dim(x, 3));
}

const char *emit_conv(Emit *e, const IrNode *f)
{
    const IrNode *x = f->in[0], *w = f->in[1];
    const int64_t *a = f->ia;
    return arena_printf(e->a, "%lld, mp_conv_of(%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
                        "%lld, %lld, %lld, %lld, %lld, %lld)", emit_dim(x, 0), emit_dim(x, 1),
                        emit_dim(x, 2), emit_dim(x, 3), emit_dim(w, 0), emit_dim(w, 2), emit_dim(w, 3),
                        (long long)a[0], (long long)a[1], (long long)a[2], (long long)a[3],
                        (long long)a[4], (long long)a[5], (long long)a[6], emit_dim(f, 2), emit_dim(f, 3));
}

const char *emit_pool(Emit *e, const IrNode *f)
{
    const char *s = arena_printf(e->a, "%lld, %lld, %lld", (long long)f->ia[0], (long long)f->ia[1],
                                 (long long)f->ia[2]);
    return f->op == OP_AVG_POOL2D ? arena_printf(e->a, "%s, %d", s, !f->ia[3]) : s;
}

/* ---- the functions of the generated model ------------------------------- */

void emit_source_line(Emit *e, const IrNode *n, int *line, const char *lead)
{
    if (n->loc.line == *line)
        return;
    *line = n->loc.line;
    em(e, "%s    /* %s */\n", lead, source_comment(e, n));
}

/* Per node id: the parameter whose gradient it is (or -1), and how often
 * and by which node the step reads it; made once, so each query is O(1). */
static void grad_tables(Emit *e)
{
    const IrGraph *g = e->g;
    e->grad_param = arena_alloc(e->a, sizeof *e->grad_param * (size_t)(g->nnodes + 1));
    e->read_in_step = arena_alloc(e->a, sizeof *e->read_in_step * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++)
        e->grad_param[i] = -1;
    for (int p = g->nparams - 1; p >= 0; p--)   /* the first parameter wins */
        if (g->params[p].grad)
            e->grad_param[g->params[p].grad->id] = p;
    e->reader = arena_alloc(e->a, sizeof *e->reader * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin && g->nodes[i]->phase != PH_OPTIMIZER; j++) {
            e->read_in_step[g->nodes[i]->in[j]->id]++;
            e->reader[g->nodes[i]->in[j]->id] = g->nodes[i];
        }
}

int emit_grad_param(Emit *e, const IrNode *n)
{
    if (!e->grad_param)
        grad_tables(e);
    return e->grad_param[n->id];
}

const IrNode *emit_work_copy(Emit *e, int p, const char **dt)
{
    const IrGraph *g = e->g;
    if (!e->work_n) {   /* one pass over the graph for all parameters */
        e->work_n = arena_alloc(e->a, sizeof *e->work_n * (size_t)(g->nparams + 1));
        e->work_last = arena_alloc(e->a, sizeof *e->work_last * (size_t)(g->nparams + 1));
        for (int q = 0; q < g->nparams; q++) {
            e->work_n[q] = 0;
            e->work_last[q] = NULL;
        }
        for (int i = 0; i < g->nnodes; i++) {
            const IrNode *n = g->nodes[i];
            int q = n->hoisted ? (int)n->in[0]->ia[0] : -1;
            if (q >= 0 && q < g->nparams) {
                e->work_n[q]++;
                e->work_last[q] = n;
            }
        }
    }
    int ncopies = e->work_n[p];
    const IrNode *copy = e->work_last[p];
    if (ncopies == 1 && e->mp->kind[copy->id] == BUF_ARENA) {
        *dt = mpdt(copy->type);
        return copy;
    }
    *dt = ncopies ? "MP_WORK_OTHER" : "MP_F32";
    return NULL;
}

bool emit_folded_cast(Emit *e, const IrNode *n)
{
    if (n->op != OP_CAST || n->phase != PH_BACKWARD || emit_grad_param(e, n) < 0)
        return false;
    return !e->read_in_step[n->id];
}

int emit_acc_product(Emit *e, const IrNode *n)
{
    if (!e->g->fused || n->op != OP_MATMUL_TN || n->fused || n->phase != PH_BACKWARD)
        return -1;
    int p = emit_grad_param(e, n);
    if (p >= 0)                 /* its own gradient, accumulated as it is */
        return n->type == DT_F32 && !e->read_in_step[n->id] ? p : -1;
    const IrNode *c = e->reader[n->id];   /* through a folded cast */
    return e->read_in_step[n->id] == 1 && emit_folded_cast(e, c) ? emit_grad_param(e, c) : -1;
}

static bool adds_itself(Emit *e, const IrNode *n)
{
    return (n->op == OP_MATMUL_TN || n->op == OP_EMBEDDING_DW) && n->type == DT_F32 &&
        n->phase == PH_BACKWARD && !n->fused && e->read_in_step[n->id] == 1;
}

bool emit_grad_sum(Emit *e, const IrNode *n)
{
    if (n->op != OP_ADD || n->type != DT_F32 || n->fused || n->phase != PH_BACKWARD ||
        emit_grad_param(e, n) < 0 || e->read_in_step[n->id] || n->in[0] == n->in[1] ||
        !shape_eq(&n->shape, &n->in[0]->shape) || !shape_eq(&n->shape, &n->in[1]->shape))
        return false;
    return adds_itself(e, n->in[0]) && adds_itself(e, n->in[1]);
}

int emit_grad_part(Emit *e, const IrNode *n)
{
    int p = emit_grad_param(e, n);
    if (p >= 0)
        return n->op == OP_EMBEDDING_DW && n->type == DT_F32 && !n->fused &&
            n->phase == PH_BACKWARD && !e->read_in_step[n->id] ? p : -1;
    if (!(n->op == OP_MATMUL_TN || n->op == OP_EMBEDDING_DW) || e->read_in_step[n->id] != 1 ||
        !emit_grad_sum(e, e->reader[n->id]))
        return -1;
    return emit_grad_param(e, e->reader[n->id]);
}

/* "MP_NO_IGNORE, (float)0.1": cross_entropy's ignored label and label
 * smoothing (forward node f), the last arguments of both targets' calls */
const char *emit_ce_attrs(Emit *e, const IrNode *f)
{
    const char *ignore = f->ia[0] ? arena_printf(e->a, "(int64_t)%lld", (long long)f->ia[1])
                                  : "MP_NO_IGNORE";
    return arena_printf(e->a, "%s, (float)%.9g", ignore, f->fa[0]);
}

/* ---- image operations ------------------------------------------------------------- */

/* "N, mp_conv_of(...)" of conv_transpose2d node f: the conv2d from its
 * output y [N, c, H, W] to its input x [N, Cin, OH, OW], whose adjoint it
 * is (the weight [Cin, c / G, kh, kw] is that conv's [F, C / G, kh, kw]). */
const char *emit_conv_transpose(Emit *e, const IrNode *f)
{
    const IrNode *x = f->in[0], *w = f->in[1];
    const int64_t *a = f->ia;
    return arena_printf(e->a, "%lld, mp_conv_of(%lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, %lld, "
                        "%lld, 1, 1, %lld, %lld, %lld)", emit_dim(x, 0), emit_dim(f, 1), emit_dim(f, 2),
                        emit_dim(f, 3), emit_dim(x, 1), emit_dim(w, 2), emit_dim(w, 3), (long long)a[0],
                        (long long)a[1], (long long)a[2], (long long)a[3], (long long)a[6],
                        emit_dim(x, 2), emit_dim(x, 3));
}

/* "outer, xs, ys, before, value" of pad node n (x -> n): the last four axes
 * (size 1 where the rank is lower), F.pad's list turned to axis order;
 * "..., before, mode" in a mode other than constant (mp_k_pad_mode's). */
const char *emit_pad(Emit *e, const IrNode *n)
{
    const Shape *x = &n->in[0]->shape, *y = &n->shape;
    long long outer = 1, xs[4], ys[4], before[4];
    for (int d = 0; d < x->rank - 4; d++)
        outer *= (long long)x->d[d];
    for (int q = 0; q < 4; q++) {
        int d = x->rank - 4 + q;
        xs[q] = d >= 0 ? (long long)x->d[d] : 1;
        ys[q] = d >= 0 ? (long long)y->d[d] : 1;
        before[q] = (long long)n->ia[2 * (3 - q)];
    }
    const char *geom = arena_printf(e->a, "%lld, (const int64_t[]){%lld, %lld, %lld, %lld}, (const "
                                    "int64_t[]){%lld, %lld, %lld, %lld}, (const int64_t[]){%lld, %lld, "
                                    "%lld, %lld}", outer, xs[0], xs[1], xs[2], xs[3], ys[0], ys[1], ys[2],
                                    ys[3], before[0], before[1], before[2], before[3]);
    if (pad_mode(n))
        return arena_printf(e->a, "%s, %d", geom, pad_mode(n));
    return arena_printf(e->a, "%s, (float)%.9g", geom, n->fa[0]);
}

/* "P, H, W, sh, sw, mode" of upsample node f (x [N, C, H, W]) */
const char *emit_upsample(Emit *e, const IrNode *f)
{
    const IrNode *x = f->in[0];
    return arena_printf(e->a, "%lld, %lld, %lld, %lld, %lld, %d", emit_dim(x, 0) * emit_dim(x, 1),
                        emit_dim(x, 2), emit_dim(x, 3), (long long)f->ia[0], (long long)f->ia[1],
                        (int)f->ia[2]);
}

/* "N, C, S, G, eps" of group_norm node f (x [N, C, ...], S the rest) */
const char *emit_group_norm(Emit *e, const IrNode *f)
{
    long long b, c, s;
    emit_ncs(f->in[0], &b, &c, &s);
    return arena_printf(e->a, "%lld, %lld, %lld, %lld, (float)%.9g", b, c, s, (long long)f->ia[0], f->fa[0]);
}
