/* shape.c - the shape rule of every operation (one per row of ops.def).
 *
 * shape_<ID>(g, n) reads n's inputs and attributes, sets n->shape (and
 * n->type where the op decides it: losses and metrics are f32 scalars,
 * views pass their input's type, embedding makes floats), and on a misfit
 * reports a user error at n->loc -- what the op needs against what it got
 * -- and returns false. Rules are pure functions of the node: running one
 * twice gives the same answer, so later passes may re-check a node.
 *
 * Float values whose type the precision pass has not chosen yet have type
 * DT_NONE; "integer" always means i32 or u8. Every product or sum of
 * dimensions is checked (shape.h): a model with absurd sizes gets an error,
 * never an overflow.
 *
 * Backward rows (made by autodiff) take their result shape from the forward
 * node they differentiate (n->grad_of) and check their operands against it;
 * a misfit there is a bug in a pass, reported like a user error so the
 * caller can turn it into an internal error with the node in hand. */
#include "shape.h"
#include "ops.h"

#include <stdio.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------- */

static const char *const infix_names[OP__COUNT] = {
    [OP_ADD] = "'+'", [OP_SUB] = "'-'", [OP_MUL] = "'*'", [OP_DIV] = "'/'",
    [OP_NEG] = "unary '-'", [OP_MATMUL] = "'@'", [OP_GT] = "'>'", [OP_LT] = "'<'",
    [OP_GE] = "'>='", [OP_LE] = "'<='", [OP_EQ] = "'=='", [OP_NE] = "'!='",
};

const char *shape_op_name(IrOp op)
{
    return infix_names[op] ? infix_names[op] : op_info[op].name;
}

static const char *name_of(const IrNode *n) { return shape_op_name(n->op); }

static const char *str(IrGraph *g, const Shape *s) { return shape_str(g->arena, s); }

bool shape_numel_checked(const Shape *s, int64_t *out)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        if (s->d[i] < 0 || __builtin_mul_overflow(n, s->d[i], &n) || n > SHAPE_MAX_NUMEL)
            return false;
    *out = n;
    return true;
}

/* Sets the output shape, refusing one too large to address. */
static bool set_shape(IrGraph *g, IrNode *n, const Shape *s)
{
    int64_t count;
    if (!shape_numel_checked(s, &count)) {
        diag_error(n->loc, "%s would make a tensor of shape %s: too many elements (at most %lld)",
                   name_of(n), str(g, s), (long long)SHAPE_MAX_NUMEL);
        return false;
    }
    n->shape = *s;
    return true;
}

bool shape_expect_rank(IrGraph *g, SrcLoc at, const char *op, const char *layout,
                       const Shape *s, int lo, int hi)
{
    if (s->rank >= lo && s->rank <= hi)
        return true;
    diag_error(at, "%s needs %s, got %s", op, layout, str(g, s));
    return false;
}

static bool is_int(DType t) { return t == DT_I32 || t == DT_U8 || t == DT_U16; }

bool shape_expect_float(SrcLoc at, const char *op, DType t, const char *name)
{
    if (!is_int(t))
        return true;
    diag_error(at, "%s needs a float tensor, got %s: cast it first, e.g. f32(%s)", op,
               dt_name(t), name && !strchr(name, '.') ? name : "x");
    return false;
}

static bool float_in(IrNode *n, int i)
{
    return shape_expect_float(n->loc, name_of(n), n->in[i]->type, n->in[i]->name);
}

static bool all_float(IrNode *n)
{
    bool ok = true;
    for (int i = 0; i < n->nin; i++)
        ok = float_in(n, i) && ok;
    return ok;
}

static bool rank_in(IrGraph *g, IrNode *n, int i, const char *layout, int lo, int hi)
{
    return shape_expect_rank(g, n->loc, name_of(n), layout, &n->in[i]->shape, lo, hi);
}

static bool nin_is(IrNode *n, int lo, int hi)
{
    if (n->nin >= lo && n->nin <= hi)
        return true;
    diag_error(n->loc, "%s takes %d to %d operands, got %d", name_of(n), lo, hi, n->nin);
    return false;
}

/* The type an op decides, unless a later pass already chose one (a rule may
 * run again after the precision pass, which must not be undone). */
static void fix_type(IrNode *n, DType t)
{
    if (n->type == DT_NONE)
        n->type = t;
}

/* Views pass their input's type through. */
static void pass_type(IrNode *n) { fix_type(n, n->in[0]->type); }

static const Shape *sh(const IrNode *n, int i) { return &n->in[i]->shape; }

static bool same_shape(IrGraph *g, IrNode *n, int i, int j)
{
    if (shape_eq(sh(n, i), sh(n, j)))
        return true;
    diag_error(n->loc, "%s needs operands of the same shape, got %s and %s", name_of(n),
               str(g, sh(n, i)), str(g, sh(n, j)));
    return false;
}

/* The shape of the forward node's i-th input (backward rows). */
static const Shape *fwd_in(IrNode *n, int i)
{
    if (!n->grad_of || n->grad_of->nin <= i) {
        diag_error(n->loc, "%s is not tied to the forward node it differentiates", name_of(n));
        return NULL;
    }
    return &n->grad_of->in[i]->shape;
}

/* Shape s with its last axis replaced (or dropped when d < 0). */
static Shape with_last(const Shape *s, int64_t d)
{
    Shape r = *s;
    if (d < 0)
        r.rank--;
    else
        r.d[r.rank - 1] = d;
    return r;
}

/* ---- leaves and casts ---------------------------------------------------- */

bool shape_INPUT(IrGraph *g, IrNode *n)
{
    MP_ASSERT(n->ia[0] >= 0 && n->ia[0] < g->ninputs);
    n->type = g->inputs[n->ia[0]].type;
    return set_shape(g, n, &g->inputs[n->ia[0]].shape);
}

bool shape_PARAM(IrGraph *g, IrNode *n)
{
    MP_ASSERT(n->ia[0] >= 0 && n->ia[0] < g->nparams);
    n->type = DT_F32;
    return set_shape(g, n, &g->params[n->ia[0]].shape);
}

bool shape_CONST(IrGraph *g, IrNode *n)
{
    (void)g;
    n->shape = (Shape){0};
    return true;
}

bool shape_CAST(IrGraph *g, IrNode *n)
{
    n->shape = *sh(n, 0);
    (void)g;
    return true;
}

/* ---- elementwise ----------------------------------------------------------- */

/* NumPy broadcasting: align from the right; each pair equal or one is 1. */
static bool broadcast(IrGraph *g, IrNode *n, const Shape *a, const Shape *b)
{
    Shape r = {.rank = a->rank > b->rank ? a->rank : b->rank};
    for (int i = 0; i < r.rank; i++) {
        int ia = a->rank - r.rank + i, ib = b->rank - r.rank + i;
        int64_t x = ia >= 0 ? a->d[ia] : 1, y = ib >= 0 ? b->d[ib] : 1;
        if (x != y && x != 1 && y != 1) {
            diag_error(n->loc, "%s cannot broadcast %s with %s", name_of(n), str(g, a), str(g, b));
            return false;
        }
        r.d[i] = x == 1 ? y : x;
    }
    return set_shape(g, n, &r);
}

/* A float operand that is not a constant: with one, integer operands (a
 * mask, ids) are promoted to the float type, as torch promotes bool and
 * integer tensors; integers with only constants keep the rule "cast it
 * first" (f32(image) / 255), so no float type is ever guessed. */
static bool has_float_tensor(const IrNode *n, int from)
{
    for (int i = from; i < n->nin; i++)
        if (n->in[i]->op != OP_CONST && !is_int(n->in[i]->type))
            return true;
    return false;
}

static bool binary(IrGraph *g, IrNode *n)
{
    return (has_float_tensor(n, 0) || all_float(n)) && broadcast(g, n, sh(n, 0), sh(n, 1));
}

bool shape_ADD(IrGraph *g, IrNode *n) { return binary(g, n); }
bool shape_SUB(IrGraph *g, IrNode *n) { return binary(g, n); }
bool shape_MUL(IrGraph *g, IrNode *n) { return binary(g, n); }
bool shape_DIV(IrGraph *g, IrNode *n) { return binary(g, n); }

/* Unary elementwise: same shape, float input. */
static bool unary(IrGraph *g, IrNode *n) { return float_in(n, 0) && set_shape(g, n, sh(n, 0)); }

bool shape_NEG(IrGraph *g, IrNode *n) { return unary(g, n); }
bool shape_RELU(IrGraph *g, IrNode *n) { return unary(g, n); }
bool shape_GELU(IrGraph *g, IrNode *n) { return unary(g, n); }
bool shape_TANH(IrGraph *g, IrNode *n) { return unary(g, n); }
bool shape_SIGMOID(IrGraph *g, IrNode *n) { return unary(g, n); }
bool shape_SILU(IrGraph *g, IrNode *n) { return unary(g, n); }
bool shape_EXP(IrGraph *g, IrNode *n) { return unary(g, n); }
bool shape_LOG(IrGraph *g, IrNode *n) { return unary(g, n); }
bool shape_SQRT(IrGraph *g, IrNode *n) { return unary(g, n); }
bool shape_RSQRT(IrGraph *g, IrNode *n) { return unary(g, n); }

bool shape_DROPOUT(IrGraph *g, IrNode *n)
{
    if (!(n->fa[0] >= 0 && n->fa[0] < 1)) {
        diag_error(n->loc, "dropout probability must be in [0, 1), got %g", n->fa[0]);
        return false;
    }
    return unary(g, n);
}

/* ---- products ---------------------------------------------------------------- */

/* op(a) @ op(b) where op swaps the last two axes when ia[0] / ia[1] say so:
 * [..., M, K] @ [K, N] -> [..., M, N], or [B.., M, K] @ [B.., K, N]. */
bool shape_MATMUL(IrGraph *g, IrNode *n)
{
    if (!all_float(n) || !rank_in(g, n, 0, "matrices [..., M, K]", 2, MP_MAX_RANK) ||
        !rank_in(g, n, 1, "matrices [..., K, N]", 2, MP_MAX_RANK))
        return false;
    Shape a = *sh(n, 0), b = *sh(n, 1);
    int ra = a.rank, rb = b.rank;
    int64_t m = a.d[ra - 2], ka = a.d[ra - 1], kb = b.d[rb - 2], nn = b.d[rb - 1], t;
    if (n->ia[0])
        t = m, m = ka, ka = t;
    if (n->ia[1])
        t = kb, kb = nn, nn = t;
    if (ka != kb) {
        diag_error(n->loc, "%s needs matching inner dimensions, got %s @ %s", name_of(n),
                   str(g, &a), str(g, &b));
        return false;
    }
    if (rb > 2 && (ra != rb || memcmp(a.d, b.d, sizeof a.d[0] * (size_t)(ra - 2)) != 0)) {
        diag_error(n->loc, "%s needs equal batch dimensions, got %s @ %s", name_of(n),
                   str(g, &a), str(g, &b));
        return false;
    }
    Shape r = a;
    r.d[ra - 2] = m;
    r.d[ra - 1] = nn;
    return set_shape(g, n, &r);
}

/* (x [..., K], weight [n, K] [, bias [n]]) -> [..., n] */
bool shape_LINEAR(IrGraph *g, IrNode *n)
{
    if (!nin_is(n, 2, 3) || !all_float(n) || !rank_in(g, n, 0, "an input [..., K]", 1, MP_MAX_RANK) ||
        !rank_in(g, n, 1, "a weight [n, K]", 2, 2))
        return false;
    const Shape *x = sh(n, 0), *w = sh(n, 1);
    if (x->d[x->rank - 1] != w->d[1]) {
        diag_error(n->loc, "linear weight %s needs inputs [..., %lld], got %s", str(g, w),
                   (long long)w->d[1], str(g, x));
        return false;
    }
    if (n->nin == 3 && (sh(n, 2)->rank != 1 || sh(n, 2)->d[0] != w->d[0])) {
        diag_error(n->loc, "linear bias must be [%lld], got %s", (long long)w->d[0], str(g, sh(n, 2)));
        return false;
    }
    Shape r = with_last(x, w->d[0]);
    return set_shape(g, n, &r);
}

/* Output size of a window of k with stride s and padding p over h (torch):
 * floor((h + 2p - k) / s) + 1, which must be at least 1. */
static bool window(IrGraph *g, IrNode *n, const Shape *x, int64_t k, int64_t s, int64_t p,
                   Shape *out)
{
    if (k < 1 || s < 1 || p < 0) {
        diag_error(n->loc, "%s needs kernel >= 1, stride >= 1 and padding >= 0, got kernel %lld, "
                   "stride %lld, padding %lld", name_of(n), (long long)k, (long long)s, (long long)p);
        return false;
    }
    *out = *x;
    for (int i = 2; i < 4; i++) {
        int64_t span;
        if (__builtin_mul_overflow(p, 2, &span) || __builtin_add_overflow(span, x->d[i], &span) ||
            span - k < 0) {
            diag_error(n->loc, "%s kernel %lld does not fit input %s (height and width %lld x %lld "
                       "with padding %lld)", name_of(n), (long long)k, str(g, x), (long long)x->d[2],
                       (long long)x->d[3], (long long)p);
            return false;
        }
        out->d[i] = (span - k) / s + 1;
    }
    return true;
}

static const char nchw[] = "NCHW input [N, C, H, W]";

/* (x [N, C, H, W], weight [c, C / groups, kh, kw] [, bias [c]]); ia[] as
 * ops.def says: strides, padding before, dilations, groups, padding after. */
bool shape_CONV2D(IrGraph *g, IrNode *n)
{
    if (!nin_is(n, 2, 3) || !all_float(n) || !rank_in(g, n, 0, nchw, 4, 4) ||
        !rank_in(g, n, 1, "a weight [c, C / groups, kh, kw]", 4, 4))
        return false;
    const Shape *x = sh(n, 0), *w = sh(n, 1);
    int64_t G = n->ia[6];
    if (G < 1 || x->d[1] % G || w->d[0] % G) {
        diag_error(n->loc, "conv2d groups %lld must divide the input channels %lld and the output "
                   "channels %lld", (long long)G, (long long)x->d[1], (long long)w->d[0]);
        return false;
    }
    if (w->d[1] != x->d[1] / G) {
        diag_error(n->loc, "conv2d weight %s does not fit input %s: needs [c, %lld, kh, kw]",
                   str(g, w), str(g, x), (long long)(x->d[1] / G));
        return false;
    }
    if (n->nin == 3 && (sh(n, 2)->rank != 1 || sh(n, 2)->d[0] != w->d[0])) {
        diag_error(n->loc, "conv2d bias must be [%lld], got %s", (long long)w->d[0], str(g, sh(n, 2)));
        return false;
    }
    Shape r = *x;
    r.d[1] = w->d[0];
    for (int i = 0; i < 2; i++) {
        int64_t k = w->d[2 + i], s = n->ia[i], p = n->ia[2 + i], d = n->ia[4 + i];
        int64_t after = p + (i == 0 ? n->ia[7] / 2 : n->ia[7] % 2), span, reach;
        if (s < 1 || d < 1 || p < 0 || n->ia[7] < 0 || n->ia[7] > 3) {
            diag_error(n->loc, "conv2d needs stride >= 1, dilation >= 1 and padding >= 0, got "
                       "stride %lld, dilation %lld, padding %lld", (long long)s, (long long)d,
                       (long long)p);
            return false;
        }
        if (__builtin_mul_overflow(d, k - 1, &reach) || __builtin_add_overflow(reach, 1, &reach) ||
            __builtin_add_overflow(p, after, &span) || __builtin_add_overflow(span, x->d[2 + i], &span) ||
            span < reach) {
            diag_error(n->loc, "conv2d kernel %lld x %lld (dilation %lld x %lld) does not fit input %s "
                       "with its padding", (long long)w->d[2], (long long)w->d[3], (long long)n->ia[4],
                       (long long)n->ia[5], str(g, x));
            return false;
        }
        r.d[2 + i] = (span - reach) / s + 1;
    }
    return set_shape(g, n, &r);
}

/* The mask of attention n (q [B, H, T, D], k [B, H, T', D]): u8 or float,
 * broadcasting to [B, H, T, T']. */
static bool attention_mask(IrGraph *g, IrNode *n)
{
    const Shape *m = sh(n, 3);
    Shape full = {.rank = 4, .d = {sh(n, 0)->d[0], sh(n, 0)->d[1], sh(n, 0)->d[2], sh(n, 1)->d[2]}};
    bool fits = m->rank <= 4;
    for (int i = 0; fits && i < m->rank; i++) {
        int64_t d = m->d[m->rank - 1 - i], want = full.d[3 - i];
        fits = d == want || d == 1;
    }
    if (!fits) {
        diag_error(n->loc, "attention's mask must broadcast to [B, H, T, T'] = %s, got %s",
                   str(g, &full), str(g, m));
        return false;
    }
    if (is_int(n->in[3]->type) && n->in[3]->type != DT_U8) {
        diag_error(n->loc, "attention's mask must be u8 (1 = attend) or a float tensor added "
                   "to the scores, got %s", dt_name(n->in[3]->type));
        return false;
    }
    return true;
}

/* (q, k, v [, mask]) [B, H, T, D], k and v of one length T'; causal needs
 * T == T'. */
bool shape_ATTENTION(IrGraph *g, IrNode *n)
{
    if (!nin_is(n, 3, 4))
        return false;
    bool fl = true;
    for (int i = 0; i < 3; i++)
        fl = float_in(n, i) && fl;
    if (!fl)
        return false;
    for (int i = 0; i < 3; i++)
        if (!rank_in(g, n, i, "q, k, v [B, H, T, D]", 4, 4))
            return false;
    const Shape *q = sh(n, 0), *k = sh(n, 1), *v = sh(n, 2);
    bool ok = shape_eq(k, v) && q->d[0] == k->d[0] && q->d[1] == k->d[1] && q->d[3] == k->d[3];
    if (!ok) {
        diag_error(n->loc, "attention needs q [B, H, T, D] and k, v [B, H, T', D], got %s, %s, %s",
                   str(g, q), str(g, k), str(g, v));
        return false;
    }
    if (n->ia[0] && q->d[2] != k->d[2]) {
        diag_error(n->loc, "causal attention needs q and k of the same length, got %lld and %lld",
                   (long long)q->d[2], (long long)k->d[2]);
        return false;
    }
    if (n->nin == 4 && !attention_mask(g, n))
        return false;
    return set_shape(g, n, q);
}

/* ---- views ------------------------------------------------------------------ */

/* To n->shape, as set by its maker; one dimension of -1 is inferred. */
bool shape_RESHAPE(IrGraph *g, IrNode *n)
{
    Shape to = n->shape;
    int64_t have, known = 1;
    int infer = -1;
    if (!shape_numel_checked(sh(n, 0), &have))
        return set_shape(g, n, sh(n, 0));
    for (int i = 0; i < to.rank; i++) {
        if (to.d[i] == -1 && infer < 0) {
            infer = i;
            continue;
        }
        if (to.d[i] < 1) {
            diag_error(n->loc, "reshape to %s: dimensions must be >= 1, or one -1 to infer",
                       str(g, &to));
            return false;
        }
        if (__builtin_mul_overflow(known, to.d[i], &known) || known > SHAPE_MAX_NUMEL)
            known = SHAPE_MAX_NUMEL + 1;   /* cannot match `have`: reported below */
    }
    if (infer >= 0 && known <= have && have % known == 0)
        to.d[infer] = have / known;
    else if (infer >= 0) {
        diag_error(n->loc, "reshape of %s (%lld elements) to %s: %lld is not a multiple of %lld",
                   str(g, sh(n, 0)), (long long)have, str(g, &to), (long long)have, (long long)known);
        return false;
    } else if (known != have) {
        diag_error(n->loc, "reshape of %s (%lld elements) to %s (%s elements): element counts differ",
                   str(g, sh(n, 0)), (long long)have, str(g, &to),
                   known > SHAPE_MAX_NUMEL ? "too many" : arena_printf(g->arena, "%lld", (long long)known));
        return false;
    }
    pass_type(n);
    return set_shape(g, n, &to);
}

/* ia[0..rank-1] is a permutation of the input's axes. */
bool shape_TRANSPOSE(IrGraph *g, IrNode *n)
{
    const Shape *x = sh(n, 0);
    bool seen[MP_MAX_RANK] = {false};
    Shape r = {.rank = x->rank};
    for (int i = 0; i < x->rank; i++) {
        int64_t p = n->ia[i];
        if (p < 0 || p >= x->rank || seen[p]) {
            diag_error(n->loc, "transpose of %s needs a permutation of 0..%d", str(g, x), x->rank - 1);
            return false;
        }
        seen[p] = true;
        r.d[i] = x->d[p];
    }
    pass_type(n);
    return set_shape(g, n, &r);
}

/* [B, ...] -> [B, prod(...)] */
bool shape_FLATTEN(IrGraph *g, IrNode *n)
{
    if (!rank_in(g, n, 0, "an input [B, ...] of rank 2 or more", 2, MP_MAX_RANK))
        return false;
    const Shape *x = sh(n, 0);
    Shape r = {.rank = 2, .d = {x->d[0], 1}};
    for (int i = 1; i < x->rank; i++)
        if (__builtin_mul_overflow(r.d[1], x->d[i], &r.d[1]))
            r.d[1] = INT64_MAX;   /* too many: set_shape reports it */
    pass_type(n);
    return set_shape(g, n, &r);
}

/* ---- structural ops: chunk, slice, concat, expand, arange ------------------
 * Copies, not views (class none): they pass their input's type through.
 * Sema normalises axes and bounds and reports the user's mistakes in the
 * words of the call; these rules check the attributes again. */

/* axis ia[0] of input 0, in [0, rank) */
static bool axis_in(IrGraph *g, IrNode *n, const Shape *x)
{
    if (n->ia[0] >= 0 && n->ia[0] < x->rank)
        return true;
    diag_error(n->loc, "%s axis %lld is out of range for %s", name_of(n), (long long)n->ia[0], str(g, x));
    return false;
}

/* [start, end) along axis of x: x's shape with that axis end - start long */
static bool span_of(IrGraph *g, IrNode *n, const Shape *x, int64_t start, int64_t end, Shape *out)
{
    if (!axis_in(g, n, x))
        return false;
    int64_t len = x->d[n->ia[0]];
    if (start < 0 || start >= end || end > len) {
        diag_error(n->loc, "%s [%lld, %lld) along axis %lld is empty or outside 0..%lld of %s",
                   name_of(n), (long long)start, (long long)end, (long long)n->ia[0],
                   (long long)len, str(g, x));
        return false;
    }
    *out = *x;
    out->d[n->ia[0]] = end - start;
    return true;
}

/* ia[1] equal parts along axis ia[0]; this node is part ia[2]. */
bool shape_CHUNK(IrGraph *g, IrNode *n)
{
    const Shape *x = sh(n, 0);
    int64_t parts = n->ia[1], part = n->ia[2];
    Shape r;
    if (!axis_in(g, n, x))
        return false;
    if (parts < 1 || x->d[n->ia[0]] % parts != 0 || part < 0 || part >= parts) {
        diag_error(n->loc, "chunk of %s into %lld parts along axis %lld: %lld is not divisible by %lld",
                   str(g, x), (long long)parts, (long long)n->ia[0], (long long)x->d[n->ia[0]],
                   (long long)parts);
        return false;
    }
    int64_t len = x->d[n->ia[0]] / parts;
    if (!span_of(g, n, x, part * len, (part + 1) * len, &r))
        return false;
    pass_type(n);
    return set_shape(g, n, &r);
}

bool shape_SLICE(IrGraph *g, IrNode *n)
{
    Shape r;
    if (!span_of(g, n, sh(n, 0), n->ia[1], n->ia[2], &r))
        return false;
    pass_type(n);
    return set_shape(g, n, &r);
}

/* Every input of one rank and type kind; all axes but ia[0] equal. */
bool shape_CONCAT(IrGraph *g, IrNode *n)
{
    if (!nin_is(n, 1, 1 << 20))
        return false;
    const Shape *a = sh(n, 0);
    if (!axis_in(g, n, a))
        return false;
    Shape r = *a;
    r.d[n->ia[0]] = 0;
    for (int i = 0; i < n->nin; i++) {
        const Shape *b = sh(n, i);
        bool fits = b->rank == a->rank;
        for (int d = 0; fits && d < a->rank; d++)
            fits = d == n->ia[0] || b->d[d] == a->d[d];
        if (!fits) {
            diag_error(n->loc, "concat along axis %lld needs the other axes equal, got %s and %s",
                       (long long)n->ia[0], str(g, a), str(g, b));
            return false;
        }
        DType ta = n->in[0]->type, tb = n->in[i]->type;
        if (is_int(ta) != is_int(tb) || (is_int(ta) && ta != tb)) {
            diag_error(n->loc, "concat needs operands of one type, got %s and %s: cast them first",
                       ta ? dt_name(ta) : "float", tb ? dt_name(tb) : "float");
            return false;
        }
        if (__builtin_add_overflow(r.d[n->ia[0]], b->d[n->ia[0]], &r.d[n->ia[0]]))
            r.d[n->ia[0]] = INT64_MAX;   /* too many: set_shape reports it */
    }
    pass_type(n);
    return set_shape(g, n, &r);
}

/* x to n->shape as torch.expand: x's axes align with the last ones of the
 * result; each is kept (-1 or its size) or, being 1, repeated. */
bool shape_EXPAND(IrGraph *g, IrNode *n)
{
    const Shape *x = sh(n, 0);
    Shape to = n->shape;
    bool ok = to.rank >= x->rank;
    for (int d = 0; ok && d < to.rank; d++) {
        int xd = d - (to.rank - x->rank);
        if (xd < 0)
            ok = to.d[d] >= 1;
        else if (to.d[d] == -1)
            to.d[d] = x->d[xd];
        else
            ok = to.d[d] >= 1 && (x->d[xd] == to.d[d] || x->d[xd] == 1);
    }
    if (!ok) {
        diag_error(n->loc, "expand of %s to %s: each axis must keep its size (or -1) or be 1 "
                   "(repeated); new axes go first", str(g, x), str(g, &n->shape));
        return false;
    }
    pass_type(n);
    return set_shape(g, n, &to);
}

bool shape_ARANGE(IrGraph *g, IrNode *n)
{
    if (n->ia[0] < 1 || n->ia[0] > INT32_MAX) {
        diag_error(n->loc, "arange needs a length in 1..%d, got %lld", INT32_MAX, (long long)n->ia[0]);
        return false;
    }
    fix_type(n, DT_I32);
    return set_shape(g, n, &(Shape){1, {n->ia[0]}});
}

/* randn, rand: the shape sema gave (its dimensions checked there), f32 */
static bool shape_random(IrGraph *g, IrNode *n)
{
    fix_type(n, DT_F32);
    Shape s = n->shape;
    return set_shape(g, n, &s);
}
bool shape_RANDN(IrGraph *g, IrNode *n) { return shape_random(g, n); }
bool shape_RAND(IrGraph *g, IrNode *n) { return shape_random(g, n); }

/* ---- pooling ----------------------------------------------------------------- */

static bool pool(IrGraph *g, IrNode *n)
{
    Shape r;
    if (n->ia[2] > n->ia[0] / 2 && n->ia[0] >= 1) {
        diag_error(n->loc, "%s padding must be at most half the kernel, got padding %lld with "
                   "kernel %lld", name_of(n), (long long)n->ia[2], (long long)n->ia[0]);
        return false;
    }
    return float_in(n, 0) && rank_in(g, n, 0, nchw, 4, 4) &&
           window(g, n, sh(n, 0), n->ia[0], n->ia[1], n->ia[2], &r) && set_shape(g, n, &r);
}

bool shape_MAX_POOL2D(IrGraph *g, IrNode *n) { return pool(g, n); }
bool shape_AVG_POOL2D(IrGraph *g, IrNode *n) { return pool(g, n); }

bool shape_GLOBAL_AVG_POOL(IrGraph *g, IrNode *n)
{
    if (!float_in(n, 0) || !rank_in(g, n, 0, nchw, 4, 4))
        return false;
    Shape r = {.rank = 2, .d = {sh(n, 0)->d[0], sh(n, 0)->d[1]}};
    return set_shape(g, n, &r);
}

/* ---- embedding, reductions, normalisation --------------------------------------- */

/* (ids i32 [...], weight [vocab, dim]) -> [..., dim], a float */
bool shape_EMBEDDING(IrGraph *g, IrNode *n)
{
    if (!is_int(n->in[0]->type)) {
        diag_error(n->loc, "embedding needs integer ids (i32, u16 or u8), got %s",
                   n->in[0]->type ? dt_name(n->in[0]->type) : "a float tensor");
        return false;
    }
    if (!rank_in(g, n, 0, "ids of rank below 8", 0, MP_MAX_RANK - 1) ||
        !rank_in(g, n, 1, "a weight [vocab, dim]", 2, 2))
        return false;
    Shape r = *sh(n, 0);
    r.d[r.rank++] = sh(n, 1)->d[1];
    return set_shape(g, n, &r);
}

static bool axis_ok(IrGraph *g, IrNode *n, int64_t axis)
{
    if (axis >= 0 && axis < sh(n, 0)->rank)
        return true;
    diag_error(n->loc, "%s axis %lld is out of range for %s", name_of(n), (long long)axis,
               str(g, sh(n, 0)));
    return false;
}

/* n's shape: its input's without axis ia[0] (checked) */
static bool drop_axis(IrGraph *g, IrNode *n)
{
    const Shape *x = sh(n, 0);
    if (!axis_ok(g, n, n->ia[0]))
        return false;
    Shape r = {.rank = x->rank - 1};
    for (int i = 0, j = 0; i < x->rank; i++)
        if (i != n->ia[0])
            r.d[j++] = x->d[i];
    return set_shape(g, n, &r);
}

/* ia[0] = axis, removed from the shape; -1 = every axis: a scalar. */
static bool reduce(IrGraph *g, IrNode *n)
{
    if (!float_in(n, 0))
        return false;
    if (n->ia[0] == -1)
        return set_shape(g, n, &(Shape){0});
    return drop_axis(g, n);
}

bool shape_SUM(IrGraph *g, IrNode *n) { return reduce(g, n); }
bool shape_MEAN(IrGraph *g, IrNode *n) { return reduce(g, n); }

static bool softmax(IrGraph *g, IrNode *n)
{
    return float_in(n, 0) && axis_ok(g, n, n->ia[0]) && set_shape(g, n, sh(n, 0));
}

bool shape_SOFTMAX(IrGraph *g, IrNode *n) { return softmax(g, n); }
bool shape_LOG_SOFTMAX(IrGraph *g, IrNode *n) { return softmax(g, n); }

/* Inputs first..n->nin-1 must all be vectors [c]. */
static bool vectors_of(IrGraph *g, IrNode *n, int first, int64_t c)
{
    for (int i = first; i < n->nin; i++)
        if (sh(n, i)->rank != 1 || sh(n, i)->d[0] != c) {
            diag_error(n->loc, "%s needs parameters [%lld] for input %s, got %s", name_of(n),
                       (long long)c, str(g, sh(n, 0)), str(g, sh(n, i)));
            return false;
        }
    return true;
}

static bool eps_ok(IrNode *n, double eps)
{
    if (eps > 0)
        return true;
    diag_error(n->loc, "%s needs eps > 0, got %g", name_of(n), eps);
    return false;
}

/* (x [..., D], weight [D], bias [D]); fa[0] = eps */
bool shape_LAYER_NORM(IrGraph *g, IrNode *n)
{
    if (!nin_is(n, 2, 3) || !all_float(n) || !rank_in(g, n, 0, "an input [..., D]", 1, MP_MAX_RANK) || !eps_ok(n, n->fa[0]))
        return false;
    const Shape *x = sh(n, 0);
    return vectors_of(g, n, 1, x->d[x->rank - 1]) && set_shape(g, n, x);
}

static const char bn_layout[] = "an input [N, C, H, W] or [B, C]";

/* (x [N, C, H, W] or [B, C], weight, bias, running_mean, running_var [C]);
 * fa[0] = momentum, fa[1] = eps */
bool shape_BATCH_NORM(IrGraph *g, IrNode *n)
{
    if (!all_float(n) || !rank_in(g, n, 0, bn_layout, 2, 4) || !eps_ok(n, n->fa[1]))
        return false;
    if (sh(n, 0)->rank == 3)
        return shape_expect_rank(g, n->loc, "batch_norm", bn_layout, sh(n, 0), 2, 2);
    if (!(n->fa[0] >= 0 && n->fa[0] <= 1)) {
        diag_error(n->loc, "batch_norm momentum must be in [0, 1], got %g", n->fa[0]);
        return false;
    }
    return vectors_of(g, n, 1, sh(n, 0)->d[1]) && set_shape(g, n, sh(n, 0));
}

/* ---- losses and metrics ---------------------------------------------------------- */

/* (logits [..., C] float, labels i32 [...]) -> f32 scalar */
static bool class_loss(IrGraph *g, IrNode *n)
{
    if (!float_in(n, 0) || !rank_in(g, n, 0, "logits [..., C]", 1, MP_MAX_RANK))
        return false;
    DType lt = n->in[1]->type;
    if (!is_int(lt)) {
        diag_error(n->loc, "%s needs integer labels (i32, u16 or u8), got %s", name_of(n),
                   lt ? dt_name(lt) : "a float tensor");
        return false;
    }
    Shape want = with_last(sh(n, 0), -1);
    if (!shape_eq(&want, sh(n, 1))) {
        diag_error(n->loc, "%s labels %s do not match logits %s", name_of(n), str(g, sh(n, 1)),
                   str(g, sh(n, 0)));
        return false;
    }
    fix_type(n, DT_F32);
    return set_shape(g, n, &(Shape){0});
}

bool shape_CROSS_ENTROPY(IrGraph *g, IrNode *n) { return class_loss(g, n); }
bool shape_ACCURACY(IrGraph *g, IrNode *n) { return class_loss(g, n); }

bool shape_MSE(IrGraph *g, IrNode *n)
{
    if (!all_float(n) || !same_shape(g, n, 0, 1))
        return false;
    fix_type(n, DT_F32);
    return set_shape(g, n, &(Shape){0});
}

/* ---- backward rows ------------------------------------------------------------------ */

/* Result shaped like the forward node's i-th input; dy shaped like the
 * forward node's output. */
static bool like_fwd_in(IrGraph *g, IrNode *n, int i)
{
    const Shape *s = fwd_in(n, i);
    if (!s)
        return false;
    if (!shape_eq(sh(n, 0), &n->grad_of->shape)) {
        diag_error(n->loc, "%s: gradient %s does not match output %s", name_of(n),
                   str(g, sh(n, 0)), str(g, &n->grad_of->shape));
        return false;
    }
    return set_shape(g, n, s);
}

/* (dy, x or y): both of one shape, which is the result's. */
static bool pointwise_grad(IrGraph *g, IrNode *n)
{
    return same_shape(g, n, 0, 1) && set_shape(g, n, sh(n, 0));
}

/* dy reduced to n->shape (set by autodiff), which must broadcast to dy. */
bool shape_SUM_TO(IrGraph *g, IrNode *n)
{
    const Shape *to = &n->shape, *dy = sh(n, 0);
    bool ok = to->rank <= dy->rank;
    for (int i = 0; ok && i < to->rank; i++) {
        int64_t t = to->d[i], d = dy->d[dy->rank - to->rank + i];
        ok = t == d || t == 1;
    }
    if (!ok) {
        diag_error(n->loc, "sum_to cannot reduce %s to %s", str(g, dy), str(g, to));
        return false;
    }
    Shape keep = *to;
    return set_shape(g, n, &keep);
}

/* dy of slice / chunk placed into zeros shaped like the forward input;
 * ia[] = (axis, start, end) as SLICE's. */
bool shape_SLICE_GRAD(IrGraph *g, IrNode *n)
{
    const Shape *x = fwd_in(n, 0);
    Shape w;
    if (!x || !span_of(g, n, x, n->ia[1], n->ia[2], &w))
        return false;
    if (!shape_eq(&w, sh(n, 0))) {
        diag_error(n->loc, "slice_grad: gradient %s does not fit the window %s of %s", str(g, sh(n, 0)),
                   str(g, &w), str(g, x));
        return false;
    }
    return set_shape(g, n, x);
}

/* dy of sum/mean back to n->shape; ia[0] = the axis reduced, or -1. */
bool shape_REDUCE_GRAD(IrGraph *g, IrNode *n)
{
    Shape to = n->shape, want = {0};
    if (n->ia[0] >= to.rank || n->ia[0] < -1) {
        diag_error(n->loc, "reduce_grad axis %lld is out of range for %s", (long long)n->ia[0], str(g, &to));
        return false;
    }
    if (n->ia[0] >= 0)
        for (int i = 0; i < to.rank; i++)
            if (i != n->ia[0])
                want.d[want.rank++] = to.d[i];
    if (!shape_eq(&want, sh(n, 0))) {
        diag_error(n->loc, "reduce_grad of %s to %s along axis %lld: shapes do not fit", str(g, sh(n, 0)),
                   str(g, &to), (long long)n->ia[0]);
        return false;
    }
    return set_shape(g, n, &to);
}

/* a[..., K]ᵀ b[..., N] -> [K, N], the leading dims of both flattened. */
bool shape_MATMUL_TN(IrGraph *g, IrNode *n)
{
    if (!rank_in(g, n, 0, "a[..., K]", 1, MP_MAX_RANK) || !rank_in(g, n, 1, "b[..., N]", 1, MP_MAX_RANK))
        return false;
    const Shape *a = sh(n, 0), *b = sh(n, 1);
    int64_t na, nb, k = a->d[a->rank - 1], nn = b->d[b->rank - 1];
    if (!shape_numel_checked(a, &na) || !shape_numel_checked(b, &nb) || k == 0 || nn == 0 ||
        na / k != nb / nn) {
        diag_error(n->loc, "matmul_tn needs operands with the same leading elements, got %s and %s",
                   str(g, a), str(g, b));
        return false;
    }
    Shape r = {.rank = 2, .d = {k, nn}};
    return set_shape(g, n, &r);
}

bool shape_RELU_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_GELU_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_TANH_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_SIGMOID_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_SILU_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_SQRT_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_RSQRT_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_SOFTMAX_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_LOG_SOFTMAX_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_MAX_POOL2D_GRAD(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 0); }

bool shape_DROPOUT_GRAD(IrGraph *g, IrNode *n) { return set_shape(g, n, sh(n, 0)); }
bool shape_CONV2D_DX(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 0); }
bool shape_CONV2D_DW(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 1); }
bool shape_AVG_POOL2D_GRAD(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 0); }
bool shape_GLOBAL_AVG_POOL_GRAD(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 0); }
bool shape_EMBEDDING_DW(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 1); }
bool shape_LAYER_NORM_DX(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 0); }
bool shape_LAYER_NORM_DW(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 1); }
bool shape_BATCH_NORM_DX(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 0); }
bool shape_BATCH_NORM_DW(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 1); }

/* dq, dk, dv side by side: [B, H, T + 2T', D] (ir.h IrAttn's glay). */
bool shape_ATTENTION_GRAD(IrGraph *g, IrNode *n)
{
    if (!fwd_in(n, 1) || !like_fwd_in(g, n, 0))
        return false;
    Shape r = ir_attention_grad_shape(n->grad_of);
    return set_shape(g, n, &r);
}

/* dy over all axes but 1 -> [C] (conv and batch-norm bias gradients). */
bool shape_CHANNEL_SUM(IrGraph *g, IrNode *n)
{
    if (!rank_in(g, n, 0, "a gradient [N, C, ...]", 2, MP_MAX_RANK))
        return false;
    Shape r = {.rank = 1, .d = {sh(n, 0)->d[1]}};
    return set_shape(g, n, &r);
}

/* (dl scalar, x, ...) -> x's shape: the loss gradients. */
static bool loss_grad(IrGraph *g, IrNode *n)
{
    if (sh(n, 0)->rank != 0) {
        diag_error(n->loc, "%s needs a scalar loss gradient, got %s", name_of(n), str(g, sh(n, 0)));
        return false;
    }
    return set_shape(g, n, sh(n, 1));
}

bool shape_CROSS_ENTROPY_GRAD(IrGraph *g, IrNode *n) { return loss_grad(g, n); }
bool shape_MSE_GRAD(IrGraph *g, IrNode *n) { return loss_grad(g, n); }

/* ---- loss scaling and the optimizer -------------------------------------------- */

bool shape_LOSS_SCALE(IrGraph *g, IrNode *n)
{
    if (sh(n, 0)->rank != 0) {
        diag_error(n->loc, "the loss must be a scalar, got %s", str(g, sh(n, 0)));
        return false;
    }
    n->type = DT_F32;
    return set_shape(g, n, sh(n, 0));
}

/* Over every parameter gradient, in place; the result is a flag (scalar). */
static bool over_grads(IrGraph *g, IrNode *n)
{
    n->type = DT_F32;
    return set_shape(g, n, &(Shape){0});
}

bool shape_UNSCALE(IrGraph *g, IrNode *n) { return over_grads(g, n); }
bool shape_CLIP_GRAD_NORM(IrGraph *g, IrNode *n) { return over_grads(g, n); }

/* (param, grad) of one shape; updates the param in place. */
static bool step(IrGraph *g, IrNode *n)
{
    if (!same_shape(g, n, 0, 1))
        return false;
    n->type = DT_F32;
    return set_shape(g, n, sh(n, 0));
}

bool shape_SGD(IrGraph *g, IrNode *n) { return step(g, n); }
bool shape_ADAM(IrGraph *g, IrNode *n) { return step(g, n); }
bool shape_ADAMW(IrGraph *g, IrNode *n) { return step(g, n); }
bool shape_RMSPROP(IrGraph *g, IrNode *n) { return step(g, n); }

/* ---- elementwise, norm and rope additions ---------------------------------------- */

bool shape_ABS(IrGraph *g, IrNode *n) { return unary(g, n); }
bool shape_SIN(IrGraph *g, IrNode *n) { return unary(g, n); }
bool shape_COS(IrGraph *g, IrNode *n) { return unary(g, n); }
bool shape_MAXIMUM(IrGraph *g, IrNode *n) { return binary(g, n); }
bool shape_MINIMUM(IrGraph *g, IrNode *n) { return binary(g, n); }
bool shape_POW(IrGraph *g, IrNode *n) { return unary(g, n); }

/* fa[0] = lo, fa[1] = hi */
bool shape_CLAMP(IrGraph *g, IrNode *n)
{
    if (!(n->fa[0] <= n->fa[1])) {
        diag_error(n->loc, "clamp needs lo <= hi, got lo = %g and hi = %g", n->fa[0], n->fa[1]);
        return false;
    }
    return unary(g, n);
}

/* (x [..., D], weight [D]); fa[0] = eps */
bool shape_RMS_NORM(IrGraph *g, IrNode *n)
{
    if (!all_float(n) || !rank_in(g, n, 0, "an input [..., D]", 1, MP_MAX_RANK) || !eps_ok(n, n->fa[0]))
        return false;
    const Shape *x = sh(n, 0);
    return vectors_of(g, n, 1, x->d[x->rank - 1]) && set_shape(g, n, x);
}

/* x [..., D] with D even; ia[0] = the position axis, not the last; ia[1] =
 * style (0 interleaved, 1 half); fa[0] = theta > 0 */
bool shape_ROPE(IrGraph *g, IrNode *n)
{
    const Shape *x = sh(n, 0);
    if (!float_in(n, 0) || !rank_in(g, n, 0, "an input [..., T, ..., D] of rank 2 or more", 2, MP_MAX_RANK))
        return false;
    if (x->d[x->rank - 1] % 2 != 0) {
        diag_error(n->loc, "rope needs an even last axis (pairs of features), got %s", str(g, x));
        return false;
    }
    if (n->ia[0] < 0 || n->ia[0] >= x->rank - 1) {
        diag_error(n->loc, "rope position axis %lld must be one of the axes before the last of %s",
                   (long long)n->ia[0], str(g, x));
        return false;
    }
    if (!(n->fa[0] > 0)) {
        diag_error(n->loc, "rope needs theta > 0, got %g", n->fa[0]);
        return false;
    }
    return set_shape(g, n, x);
}

/* ---- selection, comparison, masks ------------------------------------------------ */

/* Comparisons take any operands (ids == 0 too) and make a u8 0/1 mask. */
static bool compare(IrGraph *g, IrNode *n)
{
    fix_type(n, DT_U8);
    return broadcast(g, n, sh(n, 0), sh(n, 1));
}
bool shape_GT(IrGraph *g, IrNode *n) { return compare(g, n); }
bool shape_LT(IrGraph *g, IrNode *n) { return compare(g, n); }
bool shape_GE(IrGraph *g, IrNode *n) { return compare(g, n); }
bool shape_LE(IrGraph *g, IrNode *n) { return compare(g, n); }
bool shape_EQ(IrGraph *g, IrNode *n) { return compare(g, n); }
bool shape_NE(IrGraph *g, IrNode *n) { return compare(g, n); }

/* (cond, a, b): the three broadcast together; a and b as binary's operands
 * (an integer one is promoted when the other is a float tensor; both
 * integer is an integer result, both constants an f32 one). */
bool shape_WHERE(IrGraph *g, IrNode *n)
{
    if (!broadcast(g, n, sh(n, 1), sh(n, 2)))
        return false;
    for (int i = 1; i < 3 && !has_float_tensor(n, 1); i++)
        if (n->in[i]->op != OP_CONST)
            fix_type(n, n->in[i]->type);
    Shape ab = n->shape;
    return broadcast(g, n, &ab, sh(n, 0));
}

bool shape_DETACH(IrGraph *g, IrNode *n)
{
    pass_type(n);
    return set_shape(g, n, sh(n, 0));
}

/* n->shape set by sema: every dimension >= 1 */
bool shape_FULL(IrGraph *g, IrNode *n)
{
    Shape s = n->shape;
    for (int i = 0; i < s.rank; i++)
        if (s.d[i] < 1) {
            diag_error(n->loc, "%s needs dimensions >= 1, got %s", name_of(n), str(g, &s));
            return false;
        }
    fix_type(n, DT_F32);
    return set_shape(g, n, &s);
}

/* max, min (float), argmax, argmin (any input, i32): ia[0] = the axis */
bool shape_MAX(IrGraph *g, IrNode *n) { return float_in(n, 0) && drop_axis(g, n); }
bool shape_MIN(IrGraph *g, IrNode *n) { return float_in(n, 0) && drop_axis(g, n); }

static bool arg_extremum(IrGraph *g, IrNode *n)
{
    fix_type(n, DT_I32);
    return drop_axis(g, n);
}
bool shape_ARGMAX(IrGraph *g, IrNode *n) { return arg_extremum(g, n); }
bool shape_ARGMIN(IrGraph *g, IrNode *n) { return arg_extremum(g, n); }

/* Recurrent layers: (gi [B, T, G H], w_hh [G H, H] [, b_hh [G H]]) -> the
 * state [B, T, W H], G gates (GRU 3, LSTM 4), W values a step keeps (GRU
 * 5: h r z n and W_hn h + b_hn; LSTM 6: h c i f g o). */
static bool recurrent(IrGraph *g, IrNode *n, int gates, int keep)
{
    if (!nin_is(n, 2, 3) || !all_float(n) || !rank_in(g, n, 0, "gates [B, T, G]", 3, 3) ||
        !rank_in(g, n, 1, "a weight [G, H]", 2, 2))
        return false;
    const Shape *x = sh(n, 0), *w = sh(n, 1);
    int64_t h = w->d[1];
    if (w->d[0] != gates * h || x->d[2] != gates * h ||
        (n->nin == 3 && (sh(n, 2)->rank != 1 || sh(n, 2)->d[0] != gates * h))) {
        diag_error(n->loc, "%s needs gates [B, T, %d H], w_hh [%d H, H] and b_hh [%d H], got %s, %s%s%s",
                   name_of(n), gates, gates, gates, str(g, x), str(g, w), n->nin == 3 ? ", " : "",
                   n->nin == 3 ? str(g, sh(n, 2)) : "");
        return false;
    }
    Shape r = {3, {x->d[0], x->d[1], keep * h}};
    return set_shape(g, n, &r);
}
bool shape_GRU(IrGraph *g, IrNode *n) { return recurrent(g, n, 3, 5); }
bool shape_LSTM(IrGraph *g, IrNode *n) { return recurrent(g, n, 4, 6); }

/* (dy, x): x's shape, dy that of the reduction */
bool shape_EXTREMUM_GRAD(IrGraph *g, IrNode *n)
{
    IrNode r = *n->grad_of;
    r.in = (IrNode *[]){n->in[1]};
    if (!reduce(g, &r) || !shape_eq(&r.shape, sh(n, 0))) {
        diag_error(n->loc, "extremum_grad: gradient %s does not fit %s", str(g, sh(n, 0)), str(g, sh(n, 1)));
        return false;
    }
    return set_shape(g, n, sh(n, 1));
}

bool shape_WHERE_DA(IrGraph *g, IrNode *n) { return broadcast(g, n, sh(n, 0), sh(n, 1)); }
bool shape_WHERE_DB(IrGraph *g, IrNode *n) { return broadcast(g, n, sh(n, 0), sh(n, 1)); }

bool shape_ABS_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_SIN_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_COS_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_CLAMP_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_POW_GRAD(IrGraph *g, IrNode *n) { return pointwise_grad(g, n); }
bool shape_MAXIMUM_MASK(IrGraph *g, IrNode *n) { return broadcast(g, n, sh(n, 0), sh(n, 1)); }
bool shape_RMS_NORM_DX(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 0); }
bool shape_RMS_NORM_DW(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 1); }
bool shape_ROPE_GRAD(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 0); }

/* ---- routing and indexing: topk, one_hot, gather, cumsum ------------------------------- */

/* x [..., len, ...] -> i32 [..., k, ...]: ia[0] = axis, ia[1] = k in [1, len] */
bool shape_TOPK(IrGraph *g, IrNode *n)
{
    if (!axis_ok(g, n, n->ia[0]))
        return false;
    Shape r = *sh(n, 0);
    int64_t len = r.d[n->ia[0]];
    if (n->ia[1] < 1 || n->ia[1] > len) {
        diag_error(n->loc, "topk k = %lld is out of range for axis %lld of %s (1 to %lld)",
                   (long long)n->ia[1], (long long)n->ia[0], str(g, &r), (long long)len);
        return false;
    }
    r.d[n->ia[0]] = n->ia[1];
    fix_type(n, DT_I32);
    return set_shape(g, n, &r);
}

/* ids of any integer type [...] -> u8 [..., ia[0]] */
bool shape_ONE_HOT(IrGraph *g, IrNode *n)
{
    if (!is_int(n->in[0]->type)) {
        diag_error(n->loc, "one_hot needs integer ids (i32, u16 or u8), got %s",
                   n->in[0]->type ? dt_name(n->in[0]->type) : "a float tensor");
        return false;
    }
    if (!rank_in(g, n, 0, "ids of rank below 8", 0, MP_MAX_RANK - 1))
        return false;
    if (n->ia[0] < 1) {
        diag_error(n->loc, "one_hot needs at least 1 class, got %lld", (long long)n->ia[0]);
        return false;
    }
    Shape r = *sh(n, 0);
    r.d[r.rank++] = n->ia[0];
    fix_type(n, DT_U8);
    return set_shape(g, n, &r);
}

/* (x, index): torch.gather's rule -- the same rank, index no longer than x
 * on every axis but ia[0], integer; the result has index's shape */
bool shape_GATHER(IrGraph *g, IrNode *n)
{
    const Shape *x = sh(n, 0), *ix = sh(n, 1);
    if (!is_int(n->in[1]->type)) {
        diag_error(n->loc, "gather needs an integer index (i32, u16 or u8), got %s",
                   n->in[1]->type ? dt_name(n->in[1]->type) : "a float tensor");
        return false;
    }
    if (!axis_ok(g, n, n->ia[0]))
        return false;
    bool fits = ix->rank == x->rank;
    for (int i = 0; fits && i < x->rank; i++)
        fits = i == n->ia[0] || ix->d[i] <= x->d[i];
    if (!fits) {
        diag_error(n->loc, "gather index %s does not fit %s along axis %lld: it needs the same "
                   "rank and no larger size on the other axes", str(g, ix), str(g, x),
                   (long long)n->ia[0]);
        return false;
    }
    pass_type(n);
    return set_shape(g, n, ix);
}

bool shape_CUMSUM(IrGraph *g, IrNode *n)
{
    return float_in(n, 0) && axis_ok(g, n, n->ia[0]) && set_shape(g, n, sh(n, 0));
}

/* (dy, index) -> the gathered x's shape; dy shaped like index */
bool shape_GATHER_GRAD(IrGraph *g, IrNode *n)
{
    const Shape *x = fwd_in(n, 0);
    if (!x || !same_shape(g, n, 0, 1))
        return false;
    return set_shape(g, n, x);
}
/* (dstate, state, w_hh) -> flat [B T G + G H + G]: d gi, dW_hh, db_hh. */
static bool recurrent_grad(IrGraph *g, IrNode *n)
{
    const Shape *x = fwd_in(n, 0), *w = fwd_in(n, 1);
    if (!x || !w)
        return false;
    if (!shape_eq(sh(n, 0), &n->grad_of->shape) || !shape_eq(sh(n, 1), &n->grad_of->shape)) {
        diag_error(n->loc, "%s: gradient %s does not match the state %s", name_of(n),
                   str(g, sh(n, 0)), str(g, &n->grad_of->shape));
        return false;
    }
    Shape r = {1, {shape_numel(x) + shape_numel(w) + w->d[0]}};
    return set_shape(g, n, &r);
}
bool shape_GRU_GRAD(IrGraph *g, IrNode *n) { return recurrent_grad(g, n); }
bool shape_LSTM_GRAD(IrGraph *g, IrNode *n) { return recurrent_grad(g, n); }
/* ---- image operations (LANGUAGE.md "Convolution, padding, resampling") ------------ */

/* (x [N, Cin, H, W], weight [Cin, c / groups, kh, kw] [, bias [c]]) -> [N, c,
 * (H - 1) s - 2 p + kh + op, ...], nn.ConvTranspose2d's sizes. */
bool shape_CONV_TRANSPOSE2D(IrGraph *g, IrNode *n)
{
    if (!nin_is(n, 2, 3) || !all_float(n) || !rank_in(g, n, 0, nchw, 4, 4) ||
        !rank_in(g, n, 1, "a weight [Cin, c / groups, kh, kw]", 4, 4))
        return false;
    const Shape *x = sh(n, 0), *w = sh(n, 1);
    int64_t G = n->ia[6], co = w->d[1] * G;
    if (G < 1 || x->d[1] % G || w->d[0] != x->d[1]) {
        diag_error(n->loc, "conv_transpose2d weight %s does not fit input %s with groups %lld: needs "
                   "[%lld, c / groups, kh, kw]", str(g, w), str(g, x), (long long)G, (long long)x->d[1]);
        return false;
    }
    if (n->nin == 3 && (sh(n, 2)->rank != 1 || sh(n, 2)->d[0] != co)) {
        diag_error(n->loc, "conv_transpose2d bias must be [%lld], got %s", (long long)co, str(g, sh(n, 2)));
        return false;
    }
    Shape r = *x;
    r.d[1] = co;
    for (int i = 0; i < 2; i++) {
        int64_t k = w->d[2 + i], s = n->ia[i], p = n->ia[2 + i], op = n->ia[4 + i], o;
        if (s < 1 || p < 0 || op < 0 || op >= s) {
            diag_error(n->loc, "conv_transpose2d needs stride >= 1, padding >= 0 and 0 <= "
                       "output_padding < stride, got stride %lld, padding %lld, output_padding %lld",
                       (long long)s, (long long)p, (long long)op);
            return false;
        }
        if (__builtin_mul_overflow(x->d[2 + i] - 1, s, &o) || __builtin_add_overflow(o, k + op, &o) ||
            o - 2 * p < 1) {
            diag_error(n->loc, "conv_transpose2d of input %s with kernel %lld x %lld, stride %lld and "
                       "padding %lld has no output", str(g, x), (long long)w->d[2], (long long)w->d[3],
                       (long long)s, (long long)p);
            return false;
        }
        r.d[2 + i] = o - 2 * p;
    }
    return set_shape(g, n, &r);
}

/* F.pad's list ia[0..7] (last axis first, before / after); a crop may not
 * leave an axis empty. Reflect, replicate and circular pad the last 1 to 3
 * axes of a tensor with at least one more (a batch axis, as F.pad), by no
 * negative amount; reflect's pads are < the axis, circular's <= it. */
bool shape_PAD(IrGraph *g, IrNode *n)
{
    static const char *const modes[] = {"constant", "reflect", "replicate", "circular"};
    Shape r = *sh(n, 0);
    int mode = pad_mode(n), axes = 0;
    for (int k = 0; k < 4; k++)
        if (n->ia[2 * k] || n->ia[2 * k + 1])
            axes = k + 1;
    if (mode && (axes > 3 || r.rank < axes + 1 || !float_in(n, 0))) {
        diag_error(n->loc, "pad mode \"%s\" pads the last 1 to 3 axes of a float tensor with at least one "
                   "axis before them (as F.pad), got %d axes of %s", modes[mode], axes, str(g, sh(n, 0)));
        return false;
    }
    for (int k = 0; k < 4; k++) {
        if (!n->ia[2 * k] && !n->ia[2 * k + 1])
            continue;
        int a = r.rank - 1 - k;
        for (int e = 0; mode && a >= 0 && e < 2; e++) {
            int64_t p = n->ia[2 * k + e], d = r.d[a];
            const char *need = p < 0 ? "no negative pads (crop in mode \"constant\")"
                             : mode == 1 && p >= d ? "pads smaller than the axis"
                             : mode == 3 && p > d ? "pads no larger than the axis" : NULL;
            if (need) {
                diag_error(n->loc, "pad mode \"%s\" takes %s: %lld on axis %d of %s", modes[mode], need,
                           (long long)p, a, str(g, sh(n, 0)));
                return false;
            }
        }
        if (a < 0) {
            diag_error(n->loc, "pad's list of %d entries pads %d axes, but %s has %d", 2 * k + 2, k + 1,
                       str(g, sh(n, 0)), r.rank);
            return false;
        }
        int64_t d = r.d[a] + n->ia[2 * k] + n->ia[2 * k + 1];
        if (d < 1) {
            diag_error(n->loc, "pad leaves axis %d of %s with %lld elements", a, str(g, sh(n, 0)),
                       (long long)d);
            return false;
        }
        r.d[a] = d;
    }
    return set_shape(g, n, &r);
}

/* NCHW x [N, C, H, W] -> [N, C, H sh, W sw] */
bool shape_UPSAMPLE(IrGraph *g, IrNode *n)
{
    if (!float_in(n, 0) || !rank_in(g, n, 0, nchw, 4, 4))
        return false;
    Shape r = *sh(n, 0);
    for (int i = 0; i < 2; i++)
        if (n->ia[i] < 1 || __builtin_mul_overflow(r.d[2 + i], n->ia[i], &r.d[2 + i])) {
            diag_error(n->loc, "upsample needs a scale >= 1 that keeps %s's size in range, got %lld",
                       str(g, sh(n, 0)), (long long)n->ia[i]);
            return false;
        }
    return set_shape(g, n, &r);
}

bool shape_CONV_TRANSPOSE2D_DX(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 0); }
bool shape_CONV_TRANSPOSE2D_DW(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 1); }
bool shape_UPSAMPLE_GRAD(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 0); }
bool shape_PAD_GRAD(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 0); }

/* (x [N, C, ...], weight [C], bias [C]); groups ia[0] divides C */
bool shape_GROUP_NORM(IrGraph *g, IrNode *n)
{
    if (!all_float(n) || !rank_in(g, n, 0, "an input [N, C, ...]", 2, MP_MAX_RANK))
        return false;
    int64_t C = sh(n, 0)->d[1];
    if (n->ia[0] < 1 || C % n->ia[0]) {
        diag_error(n->loc, "group_norm groups = %lld must divide the channels %lld of %s",
                   (long long)n->ia[0], (long long)C, str(g, sh(n, 0)));
        return false;
    }
    for (int i = 1; i < 3; i++)
        if (sh(n, i)->rank != 1 || sh(n, i)->d[0] != C) {
            diag_error(n->loc, "group_norm %s must be [%lld], got %s", i == 1 ? "weight" : "bias",
                       (long long)C, str(g, sh(n, i)));
            return false;
        }
    return set_shape(g, n, sh(n, 0));
}

bool shape_GROUP_NORM_DX(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 0); }
bool shape_GROUP_NORM_DW(IrGraph *g, IrNode *n) { return like_fwd_in(g, n, 1); }
