/* prec.c - the precision-assignment pass (PRECISION.md).
 *
 * prec_forward() walks the forward nodes in order and decides, for each,
 * the class that applies and the rule that decided it (override > list >
 * class), its compute type and its output type, and inserts the casts its
 * inputs need. prec_finish() runs after autodiff: it checks the backward
 * nodes against the plan and appends the optimizer phase.
 *
 * Decisions (where PRECISION.md is silent):
 * - A typed assignment or `precision T {}` region (n->override = T) makes
 *   every operation of it compute in T, whatever its class and the policy,
 *   and casts its float inputs to T; an f16 region under float32 is obeyed.
 *   Its class is recorded as fp32 when T is f32, lowp otherwise.
 * - fp16_ops / fp32_ops move any named operation to the lowp / fp32 class,
 *   follow and view operations included (their inputs are then cast).
 * - Only float inputs are cast: integer inputs (embedding ids, labels) are
 *   read as they are. CONST scalars are weakly typed: never cast, and they
 *   never widen a follow operation.
 * - A view or follow operation with no float input keeps its input's
 *   (integer) type. concat's float operands are cast to the widest of
 *   their types (one copy kernel, one type). Losses and metrics reduced to a scalar (cross_entropy,
 *   mse, accuracy) store an f32 scalar whatever they compute in, so the
 *   minimised value is f32 unless the user forced some other loss
 *   expression to f16 (then a warning says so).
 * - A user cast (`f16(x)`) stays a node as written, even when x already has
 *   that type, and seeds the cast cache: an inserted cast of x to the same
 *   type reuses it.
 * - Casts of parameters are hoisted and placed right after the parameter's
 *   node (after any earlier cast of it), so a parameter's working copies
 *   sit next to its master weight in the plan. Other casts go just before
 *   their first consumer and carry its location.
 * - Warnings: a numerically risky operation (softmax, log_softmax, exp,
 *   log, sum, mean, layer_norm, batch_norm, cross_entropy, mse) moved to
 *   f16 by the user warns (f16 overflows above 65504). Moved to bf16 it
 *   also warns, for precision rather than range: bf16 keeps 8 significant
 *   bits, and PyTorch's autocast keeps these ops in f32 under bf16 too.
 *   fp16_ops under float32 warns that it has no effect.
 * - Unknown names in fp16_ops / fp32_ops and an op in both are errors
 *   that sema.c reports at the list; on a graph made otherwise, fp16_ops
 *   is looked at first.
 *
 * - mixed_float8 (PRECISION.md "Additions: TF32 and FP8"): the lowp type is
 *   bf16; a product is quantised (IrNode.fp8) when it is a linear or a
 *   matmul whose second operand is a parameter, by the class rule (a typed
 *   statement, a region, fp16_ops or fp32_ops keep it out), or a linear or
 *   matmul named in fp8_ops (rule list) unless a typed statement or region
 *   overrides it. Its parameter operand is read as the f32 master weight
 *   (quantised once, never through a bf16 copy), its other operands as
 *   bf16. Forward inputs get an e4m3 scale slot each, in node order; after
 *   autodiff (prec_finish()), the backward products of a quantised product
 *   (its grad_of's MATMUL / MATMUL_TN) read the forward inputs with their
 *   slots and dy with one e5m2 slot per product, shared by dx and dw.
 *
 * Invariants after prec_forward(): every forward node has compute and type
 * set (DT_NONE nowhere); every float input of a lowp, fp32 or override
 * node has that node's compute type, except a quantised input (IrNode.fp8),
 * which may be an f32 parameter; ids are renumbered. */
#include "prec.h"
#include "ops.h"

#include <string.h>

/* Operations the user is warned about when moved to 16 bits. */
static const bool risky[OP__COUNT] = {
    [OP_SOFTMAX] = true, [OP_LOG_SOFTMAX] = true, [OP_EXP] = true, [OP_LOG] = true,
    [OP_SUM] = true, [OP_MEAN] = true, [OP_LAYER_NORM] = true, [OP_BATCH_NORM] = true,
    [OP_CROSS_ENTROPY] = true, [OP_MSE] = true, [OP_RMS_NORM] = true, [OP_POW] = true,
    [OP_GROUP_NORM] = true,
};

/* Losses and metrics: the scalar they produce is stored in f32. */
static const bool scalar_f32_out[OP__COUNT] = {
    [OP_CROSS_ENTROPY] = true, [OP_MSE] = true, [OP_ACCURACY] = true,
};

/* Ops whose result type is fixed whatever they compute in: comparisons
 * and one_hot make a u8 mask, argmax, argmin and topk i32 indices. */
static const DType fixed_out[OP__COUNT] = {
    [OP_GT] = DT_U8, [OP_LT] = DT_U8, [OP_GE] = DT_U8, [OP_LE] = DT_U8, [OP_EQ] = DT_U8,
    [OP_NE] = DT_U8, [OP_ARGMAX] = DT_I32, [OP_ARGMIN] = DT_I32,
    [OP_TOPK] = DT_I32, [OP_ONE_HOT] = DT_U8,
};

/* The first input that decides an op's type: where's condition does not. */
static int first_typed(const IrNode *n) { return n->op == OP_WHERE ? 1 : 0; }

const char *prec_policy_name(Policy p)
{
    static const char *const names[] = {"float32", "mixed_float16", "mixed_bfloat16", "mixed_float8"};
    return names[p];
}

const IrNode *prec_fp8_of(const Fp8Slot *s) { return s->reader->in[s->k]; }

const char *prec_fp8_name(Fp8Format f) { return f == FP8_E4M3 ? "e4m3" : "e5m2"; }

const char *prec_fp8_recipe_name(Fp8Recipe r) { return r == FP8_DELAYED ? "delayed" : "current"; }

const char *prec_class_name(PrecClass c)
{
    static const char *const names[] = {"none", "lowp", "fp32", "follow"};
    return names[c];
}

const char *prec_rule_name(PrecRule r)
{
    static const char *const names[] = {"class", "list", "override", "cast"};
    return names[r];
}

const char *prec_ls_name(LossScaleKind k)
{
    static const char *const names[] = {"none", "static", "dynamic"};
    return names[k];
}

bool prec_is_lowp(DType t) { return t == DT_F16 || t == DT_BF16; }

/* A grouped convolution with one channel per group runs the direct
 * depthwise kernels (runtime mp_conv_depthwise: G == C > 1); C is x's
 * channels for conv2d, y's for conv_transpose2d (the conv from y to x). */
static bool depthwise(const IrNode *f)
{
    int64_t groups = f->ia[6], c = f->op == OP_CONV2D ? f->in[0]->shape.d[1] : f->shape.d[1];
    return groups > 1 && groups == c;
}

bool prec_tf32(const IrGraph *g, const IrNode *n)
{
    if (!g->train.tf32 || n->compute != DT_F32)
        return false;
    switch (n->op) {
    case OP_MATMUL: case OP_LINEAR: case OP_MATMUL_TN:
    case OP_GRU: case OP_LSTM: case OP_GRU_GRAD: case OP_LSTM_GRAD:
        return true;
    case OP_CONV2D: case OP_CONV_TRANSPOSE2D:
        return !depthwise(n);
    case OP_CONV2D_DX: case OP_CONV2D_DW: case OP_CONV_TRANSPOSE2D_DX: case OP_CONV_TRANSPOSE2D_DW:
        return !depthwise(n->grad_of);
    default:
        return false;
    }
}

const char *prec_compute_name(const IrGraph *g, const IrNode *n, DType t)
{
    return n->op != OP_CAST && prec_tf32(g, n) ? "tf32" : dt_name(t);
}

/* ---- the cast cache: one cast per (value, type) ------------------------ */

/* (value, type) -> its CAST node: an open-addressing hash table, so a
 * model of n nodes is planned in O(n). */
typedef struct CastCache {
    IrNode **src, **cast;          /* slots; src NULL = empty */
    int n, cap;                    /* cap: a power of two, or 0 */
} CastCache;

static unsigned slot_of(const CastCache *c, const IrNode *src, DType t)
{
    uintptr_t h = ((uintptr_t)src >> 4) * 0x9E3779B97F4A7C15ull + (uintptr_t)t;
    return (unsigned)(h ^ (h >> 29)) & (unsigned)(c->cap - 1);
}

static IrNode *cache_find(const CastCache *c, const IrNode *src, DType t)
{
    if (!c->cap)
        return NULL;
    for (unsigned i = slot_of(c, src, t); c->src[i]; i = (i + 1) & (unsigned)(c->cap - 1))
        if (c->src[i] == src && c->cast[i]->type == t)
            return c->cast[i];
    return NULL;
}

static void cache_put(IrGraph *g, CastCache *c, IrNode *src, IrNode *cast)
{
    if (2 * (c->n + 1) > c->cap) {             /* keep it at most half full */
        CastCache big = {0};
        big.cap = c->cap ? c->cap * 2 : 64;
        big.src = arena_alloc(g->arena, sizeof *big.src * (size_t)big.cap);
        big.cast = arena_alloc(g->arena, sizeof *big.cast * (size_t)big.cap);
        for (int i = 0; i < c->cap; i++)
            if (c->src[i])
                cache_put(g, &big, c->src[i], c->cast[i]);
        *c = big;
    }
    unsigned i = slot_of(c, src, cast->type);
    while (c->src[i])
        i = (i + 1) & (unsigned)(c->cap - 1);
    c->src[i] = src;
    c->cast[i] = cast;
    c->n++;
}

/* A new cast of `src` goes before its consumer; a parameter's goes right
 * after the parameter and its earlier casts (ir_insert_after). */
static IrNode *insert_cast(IrGraph *g, IrNode *src, IrNode *consumer)
{
    if (src->op == OP_PARAM)
        return ir_insert_after(g, src, OP_CAST, consumer->loc, 1, &src);
    return ir_insert_before(g, consumer, OP_CAST, consumer->loc, 1, &src);
}

/* The value `src` in type t, as read by `consumer`: a cached cast or a new
 * one (placed in g->nodes at the next ir_renumber()). */
static IrNode *cast_to(IrGraph *g, CastCache *c, IrNode *src, DType t, IrNode *consumer)
{
    IrNode *k = cache_find(c, src, t);
    if (k)
        return k;
    k = insert_cast(g, src, consumer);
    k->phase = src->op == OP_PARAM ? PH_FORWARD : consumer->phase;
    k->name = src->name;
    k->shape = src->shape;
    k->type = k->compute = t;
    k->cls = CL_NONE;
    k->rule = RULE_CAST;
    k->hoisted = src->op == OP_PARAM;
    if (k->hoisted)
        k->loc = src->loc;
    cache_put(g, c, src, k);
    return k;
}

/* ---- fp16_ops / fp32_ops -------------------------------------------------- */

static bool in_list(const char *const *list, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(list[i], name) == 0)
            return true;
    return false;
}

/* sema.c has checked the names (each a FWD op) and that no op is in both
 * lists, pointing at the list; here only the no-op case remains. */
static void check_lists(IrGraph *g)
{
    const TrainCfg *t = &g->train;
    if (t->nfp16_ops > 0 && g->lowp == DT_F32)
        diag_warning(t->loc, "fp16_ops has no effect under precision float32: nothing is lowered");
    if ((t->fp8_set || t->nfp8_ops > 0) && t->policy != POLICY_MIXED_F8)
        diag_warning(t->loc, "%s has no effect under precision %s: only mixed_float8 quantises "
                     "products to FP8", t->fp8_set ? "fp8" : "fp8_ops", prec_policy_name(t->policy));
}

/* ---- mixed_float8: quantised products and their scale slots --------------- */

/* A new scale slot; returns its number (1-based, IrNode.fp8). */
static int fp8_slot(IrGraph *g, Fp8Format fmt, char role, const IrNode *reader, int k,
                    const IrNode *product)
{
    if ((g->nfp8_slots & (g->nfp8_slots - 1)) == 0) {      /* 0, 1, 2, 4, ...: grow */
        Fp8Slot *big = arena_alloc(g->arena, sizeof *big * (size_t)(g->nfp8_slots ? 2 * g->nfp8_slots : 1));
        if (g->nfp8_slots)
            memcpy(big, g->fp8_slots, sizeof *big * (size_t)g->nfp8_slots);
        g->fp8_slots = big;
    }
    g->fp8_slots[g->nfp8_slots] = (Fp8Slot){fmt, role, reader, k, product};
    return ++g->nfp8_slots;
}

/* Is forward node n (class decided) a product that mixed_float8 quantises?
 * A listed one gets rule list. */
static bool fp8_product(const IrGraph *g, IrNode *n)
{
    if (g->train.policy != POLICY_MIXED_F8 || (n->op != OP_LINEAR && n->op != OP_MATMUL)
        || n->cls != CL_LOWP || n->rule == RULE_OVERRIDE)
        return false;
    if (n->rule == RULE_CLASS && n->in[1]->op == OP_PARAM)
        return true;
    if (!in_list(g->train.fp8_ops, g->train.nfp8_ops, op_info[n->op].name))
        return false;
    n->rule = RULE_LIST;
    return true;
}

/* The backward products of quantised forward products: their forward
 * operands with the forward slots, dy with one e5m2 slot per product. */
static void fp8_backward(IrGraph *g)
{
    int *dy_slot = arena_alloc(g->arena, sizeof *dy_slot * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *b = g->nodes[i];
        const IrNode *f = b->grad_of;
        if (b->phase != PH_BACKWARD || !f || !(f->fp8[0] || f->fp8[1])
            || (b->op != OP_MATMUL && b->op != OP_MATMUL_TN))
            continue;
        for (int k = 0; k < 2; k++) {
            if (b->in[k] == f->in[0] || b->in[k] == f->in[1]) {
                b->fp8[k] = f->fp8[b->in[k] == f->in[0] ? 0 : 1];
                continue;
            }
            if (!dy_slot[f->id])
                dy_slot[f->id] = fp8_slot(g, FP8_E5M2, 'g', b, k, f);
            MP_ASSERT(prec_fp8_of(&g->fp8_slots[dy_slot[f->id] - 1]) == b->in[k]);   /* one dy for dx and dw */
            b->fp8[k] = dy_slot[f->id];
        }
    }
}

/* ---- one forward node ---------------------------------------------------- */

/* Class and rule by precedence: override > list > class. */
static void decide_class(const IrGraph *g, IrNode *n)
{
    const char *name = op_info[n->op].name;
    if (n->override != DT_NONE) {
        n->rule = RULE_OVERRIDE;
        n->cls = n->override == DT_F32 ? CL_FP32 : CL_LOWP;
    } else if (in_list(g->train.fp16_ops, g->train.nfp16_ops, name)) {
        n->rule = RULE_LIST;
        n->cls = CL_LOWP;
    } else if (in_list(g->train.fp32_ops, g->train.nfp32_ops, name)) {
        n->rule = RULE_LIST;
        n->cls = CL_FP32;
    } else {
        n->rule = RULE_CLASS;
        n->cls = op_info[n->op].cls;
    }
}

/* The widest float type among the non-CONST inputs (f16 with bf16 is f32),
 * or DT_NONE if no such input is a float. */
static DType widest_float(const IrNode *n)
{
    DType w = DT_NONE;
    for (int i = first_typed(n); i < n->nin; i++) {
        DType t = n->in[i]->type;
        if (n->in[i]->op == OP_CONST || !dt_is_float(t) || t == w)
            continue;
        w = w == DT_NONE ? t : DT_F32;
    }
    return w;
}

/* The first non-CONST input's type: what an all-integer operation keeps;
 * an op with no inputs (arange) keeps the type its shape rule gave it
 * (randn and rand: f32, or a typed statement's / region's float type). */
static DType first_type(const IrNode *n)
{
    for (int i = first_typed(n); i < n->nin; i++)
        if (n->in[i]->op != OP_CONST)
            return n->in[i]->type;
    return n->nin == 0 && n->type != DT_NONE ? n->type : DT_F32;
}

static DType compute_type(const IrGraph *g, const IrNode *n)
{
    PrecClass base = op_info[n->op].cls;
    bool drawn = n->nin == 0 && dt_is_float(n->type) && n->rule == RULE_OVERRIDE;
    if ((base == CL_NONE || base == CL_FOLLOW) && widest_float(n) == DT_NONE && !drawn)
        return first_type(n);           /* integer views and arithmetic */
    if (n->rule == RULE_OVERRIDE)
        return n->override;
    switch (n->cls) {
    case CL_LOWP:   return g->lowp;
    case CL_FP32:   return DT_F32;
    case CL_FOLLOW: return widest_float(n);
    case CL_NONE:   return n->nin > 1 ? widest_float(n) : n->in[0]->type;   /* concat: one type */
    }
    return DT_NONE;
}

static void warn_risky(const IrGraph *g, const IrNode *n)
{
    if (!risky[n->op] || !prec_is_lowp(n->compute) || n->rule == RULE_CLASS)
        return;
    const char *op = op_info[n->op].name, *t = dt_name(n->compute);
    const char *why = n->rule == RULE_LIST ? "fp16_ops"
                                           : arena_printf(g->arena, "its '%s' statement or precision region", t);
    if (n->compute == DT_F16)
        diag_warning(n->loc, "'%s' computes in f16 because of %s: f16 overflows above 65504; "
                     "PyTorch, Keras and Paddle keep %s in float32", op, why, op);
    else
        diag_warning(n->loc, "'%s' computes in bf16 because of %s: bf16 keeps only 8 significant "
                     "bits, so sums and normalisations lose accuracy; PyTorch, Keras and Paddle "
                     "keep %s in float32", op, why, op);
}

/* Leaves and user casts: their types were set by sema. */
static void plan_data(IrGraph *g, CastCache *c, IrNode *n)
{
    n->cls = CL_NONE;
    n->rule = RULE_CLASS;
    if (n->op == OP_CONST && n->type == DT_NONE)
        n->type = DT_F32;
    if (n->op == OP_CAST) {
        if (n->type == DT_NONE)
            n->type = n->override;
        n->rule = RULE_CAST;
        if (!cache_find(c, n->in[0], n->type))
            cache_put(g, c, n->in[0], n);
    }
    MP_ASSERT(n->type != DT_NONE);
    n->compute = n->type;
}

static void plan_op(IrGraph *g, CastCache *c, IrNode *n)
{
    decide_class(g, n);
    n->compute = compute_type(g, n);
    MP_ASSERT(n->compute != DT_NONE);
    bool casts = n->rule == RULE_OVERRIDE || n->cls == CL_LOWP || n->cls == CL_FP32 ||
                 (n->cls == CL_NONE && n->nin > 1);
    bool fp8 = fp8_product(g, n);
    for (int i = 0; casts && i < n->nin; i++) {
        IrNode *in = n->in[i];
        if (fp8 && i < 2 && in->op == OP_PARAM)
            continue;                   /* quantised from the master weight */
        if (in->op != OP_CONST && dt_is_float(in->type) && in->type != n->compute)
            n->in[i] = cast_to(g, c, in, n->compute, n);
    }
    for (int i = 0; fp8 && i < 2; i++)         /* a @ transpose(a): one value, one scale */
        n->fp8[i] = i == 1 && n->in[1] == n->in[0]
                        ? n->fp8[0] : fp8_slot(g, FP8_E4M3, n->in[i]->op == OP_PARAM ? 'w' : 'x', n, i, n);
    n->type = scalar_f32_out[n->op] ? DT_F32 : fixed_out[n->op] ? fixed_out[n->op] : n->compute;
    warn_risky(g, n);
}

static void resolve_loss_scale(IrGraph *g)
{
    if (!g->train.ls_set)
        g->train.ls = g->train.policy == POLICY_MIXED_F16 ? LS_DYNAMIC : LS_NONE;
}

static DType policy_lowp(Policy p)
{
    static const DType lowp[] = {DT_F32, DT_F16, DT_BF16, DT_BF16};
    return lowp[p];
}

void prec_forward(IrGraph *g)
{
    g->lowp = policy_lowp(g->train.policy);
    resolve_loss_scale(g);
    check_lists(g);
    CastCache cache = {0};
    /* Index by pointer position: insertions shift ids, so re-read n->id. */
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->phase != PH_FORWARD || (n->op == OP_CAST && n->compute != DT_NONE))
            continue;                   /* not forward, or already planned */
        if (op_info[n->op].kind == OPK_DATA)
            plan_data(g, &cache, n);
        else
            plan_op(g, &cache, n);
        i = n->id;
    }
    ir_renumber(g);
    IrNode *loss = g->loss;
    if (loss && loss->type != DT_F32 && !risky[loss->op])
        diag_warning(loss->loc, "the minimized loss '%s' is %s: it is multiplied by the loss "
                     "scale and should be f32; compute it in f32",
                     loss->name ? loss->name : op_info[loss->op].name, dt_name(loss->type));
}

/* ---- after autodiff ------------------------------------------------------ */

/* A lowp backward operation reads its float inputs in its compute type;
 * autodiff normally guarantees it, and this casts where it did not. */
static void check_backward(IrGraph *g)
{
    CastCache cache = {0};
    for (int i = 0; i < g->nnodes; i++)         /* reuse the forward casts */
        if (g->nodes[i]->op == OP_CAST && g->nodes[i]->phase == PH_FORWARD)
            cache_put(g, &cache, g->nodes[i]->in[0], g->nodes[i]);
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->phase != PH_BACKWARD || n->op == OP_CAST)
            continue;
        MP_ASSERT(n->type != DT_NONE && n->compute != DT_NONE);
        /* PRECISION.md "Backward"; a sum of contributions rounds to the
         * gradient's own type (f32 for a master weight) */
        if (n->grad_of && op_info[n->op].kind != OPK_STEP)
            MP_ASSERT(n->compute == n->grad_of->compute
                      || (n->op == OP_ADD && n->compute == n->type));
        if (op_info[n->op].cls != CL_LOWP)
            continue;
        for (int k = 0; k < n->nin; k++)
            if (dt_is_float(n->in[k]->type) && n->in[k]->type != n->compute && !(k < 2 && n->fp8[k]))
                n->in[k] = cast_to(g, &cache, n->in[k], n->compute, n);
        i = n->id;
    }
}

static IrNode *add_step(IrGraph *g, IrOp op, SrcLoc loc, int nin, IrNode *const *in)
{
    IrNode *n = ir_add(g, op, loc, nin, in);
    n->phase = PH_OPTIMIZER;
    n->cls = op_info[op].cls;
    n->rule = RULE_CLASS;
    n->type = n->compute = DT_F32;
    return n;
}

/* The trainable parameters' gradients, in parameter order. */
static int param_grads(const IrGraph *g, IrNode **out)
{
    int n = 0;
    for (int i = 0; i < g->nparams; i++)
        if (g->params[i].trainable && g->params[i].grad)
            out[n++] = g->params[i].grad;
    return n;
}

static void add_optimizer(IrGraph *g)
{
    static const IrOp step_op[] = {[OPT_SGD] = OP_SGD, [OPT_ADAM] = OP_ADAM, [OPT_ADAMW] = OP_ADAMW,
                                   [OPT_RMSPROP] = OP_RMSPROP};
    IrNode **grads = arena_alloc(g->arena, sizeof *grads * (size_t)(g->nparams + 1));
    int ngrads = param_grads(g, grads);
    if (g->train.ls != LS_NONE)
        add_step(g, OP_UNSCALE, g->train.loc, ngrads, grads);
    if (g->train.clip > 0)
        add_step(g, OP_CLIP_GRAD_NORM, g->train.loc, ngrads, grads)->fa[0] = g->train.clip;
    for (int i = 0; i < g->nparams; i++) {
        IrParam *p = &g->params[i];
        if (!p->trainable || !p->grad)
            continue;
        MP_ASSERT(p->grad->type == DT_F32);
        IrNode *in[2] = {p->node, p->grad};
        IrNode *s = add_step(g, step_op[g->train.opt], p->loc, 2, in);
        s->ia[0] = i;
        s->name = p->name;
        s->shape = p->shape;
        s->scope = p->node->scope;
    }
}

void prec_finish(IrGraph *g)
{
    resolve_loss_scale(g);
    fp8_backward(g);
    check_backward(g);
    add_optimizer(g);
    ir_renumber(g);
}

/* ---- activation memory --------------------------------------------------- */

/* What a value is under float32: a float-to-float cast is its source. */
static const IrNode *f32_source(const IrNode *n)
{
    while (n->op == OP_CAST && dt_is_float(n->in[0]->type))
        n = n->in[0];
    return n;
}

static int64_t f32_bytes(const IrNode *n)
{
    int size = dt_is_float(n->type) ? 4 : dt_size(n->type);
    return shape_numel(&n->shape) * size;
}

/* Counts each distinct forward value that a backward node reads, except
 * parameters' f32 master weights (state, not activations) and CONST
 * scalars (literals in the code): under the plan at its own type (so a
 * parameter's lowp working copy counts), under float32 at 4 bytes per
 * float element with casts resolved to their source (so each underlying
 * value counts once, and a parameter's working copy not at all). */
PrecMemory prec_memory(const IrGraph *g)
{
    PrecMemory m = {0, 0};
    bool *seen = arena_alloc(g->arena, (size_t)g->nnodes + 1);
    bool *seen8 = arena_alloc(g->arena, (size_t)g->nnodes + 1);
    bool *seen32 = arena_alloc(g->arena, (size_t)g->nnodes + 1);
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->phase != PH_BACKWARD)
            continue;
        for (int k = 0; k < n->nin; k++) {
            const IrNode *v = n->in[k];
            bool q = k < 2 && n->fp8[k];          /* read as its e4m3 copy */
            if (v->phase != PH_FORWARD || v->op == OP_PARAM || v->op == OP_CONST
                || (q ? seen8 : seen)[v->id])
                continue;
            (q ? seen8 : seen)[v->id] = true;
            m.bytes += shape_numel(&v->shape) * (q ? 1 : dt_size(v->type));
            const IrNode *s = f32_source(v);
            if (s->op != OP_PARAM && !seen32[s->id]) {
                seen32[s->id] = true;
                m.bytes_f32 += f32_bytes(s);
            }
        }
    }
    return m;
}
