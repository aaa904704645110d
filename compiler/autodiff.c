/* autodiff.c - reverse-mode differentiation of the forward graph.
 *
 * ad_backward() walks the forward nodes from last to first and asks each
 * op's gradient rule grad_<ID> (one per DATA and FWD row of ops.def) for
 * the gradients of its inputs; the contributions to a value used several
 * times are summed with OP_ADD in the order they arrive.
 *
 * Which values get a gradient: a float value that depends on a trainable
 * parameter and that the loss depends on ("wanted"). Inputs, constants,
 * integers, non-trainable parameters and metrics get none, and no node is
 * made that the loss does not need.
 *
 * Invariants of every node made here (ad_check() verifies them):
 *   phase PH_BACKWARD; grad_of = the forward node differentiated; loc, cls
 *   and rule taken from grad_of; compute = grad_of->compute (PRECISION.md
 *   "Backward"), except the ADDs summing a value's contributions, which
 *   compute in the gradient's own type (f32 for a master weight);
 *   shape and type of the value whose gradient it is: grad_of's output or
 *   one of its inputs. The only other shapes: an elementwise product
 *   taken over the broadcast shape before SUM_TO reduces it, typed like
 *   grad_of's output so that the reduction reads unrounded terms; and
 *   attention's one ATTENTION_GRAD node with the SLICEs that take dq, dk
 *   and dv out of it (grad_ATTENTION).
 * Shapes are set here from the forward shapes; ad_check() also holds them
 * against the shape rules of shape.c. */
#include "autodiff.h"
#include "ops.h"

#include <stdio.h>
#include <string.h>

/* ---- making backward nodes ---------------------------------------------- */

/* A backward node of n: op(in...), shaped and typed as `s` and `t`. */
static IrNode *mk_st(IrGraph *g, IrNode *n, IrOp op, const Shape *s, DType t,
                     int nin, IrNode *const *in)
{
    IrNode *b = ir_add(g, op, n->loc, nin, in);
    b->phase = PH_BACKWARD;
    b->grad_of = n;
    b->compute = n->compute;
    b->cls = n->cls;
    b->rule = n->rule;
    b->shape = *s;
    b->type = t;
    return b;
}

/* The usual case: a gradient shaped and typed like the value `like`. */
static IrNode *mk(IrGraph *g, IrNode *n, IrOp op, const IrNode *like, int nin,
                  IrNode *const *in)
{
    return mk_st(g, n, op, &like->shape, like->type, nin, in);
}

#define NARGS(...) ((int)(sizeof((IrNode *[]){__VA_ARGS__}) / sizeof(IrNode *)))
/* MK(g, n, OP_X, like, a, b...): the node OP_X(a, b...) typed like `like`. */
#define MK(g, n, op, like, ...) mk(g, n, op, like, NARGS(__VA_ARGS__), (IrNode *[]){__VA_ARGS__})

static void copy_attrs(IrNode *dst, const IrNode *src)
{
    memcpy(dst->ia, src->ia, sizeof dst->ia);
    memcpy(dst->fa, src->fa, sizeof dst->fa);
}

/* NumPy broadcasting of two shapes (the forward shape rule checked them). */
static Shape bcast(const Shape *a, const Shape *b)
{
    Shape s = {0};
    s.rank = a->rank > b->rank ? a->rank : b->rank;
    for (int i = 0; i < s.rank; i++) {
        int ia = a->rank - s.rank + i, ib = b->rank - s.rank + i;
        int64_t da = ia >= 0 ? a->d[ia] : 1, db = ib >= 0 ? b->d[ib] : 1;
        s.d[i] = da == 1 ? db : da;
    }
    return s;
}

/* The elementwise part of input i's gradient, op(a [, b]) over `over`, the
 * shape of the broadcast operation. Typed like input i when no reduction
 * follows, else like n's output: SUM_TO then rounds once, to input i's type. */
static IrNode *part(IrGraph *g, IrNode *n, int i, const Shape *over, IrOp op,
                    IrNode *a, IrNode *b)
{
    const IrNode *x = n->in[i];
    DType t = shape_eq(over, &x->shape) ? x->type : n->type;
    IrNode *in[2] = {a, b};
    return mk_st(g, n, op, over, t, b ? 2 : 1, in);
}

/* v, brought to input i's shape (SUM_TO undoes a broadcast) and type. */
static IrNode *fit(IrGraph *g, IrNode *n, int i, IrNode *v)
{
    IrNode *x = n->in[i];
    if (!shape_eq(&v->shape, &x->shape))
        return MK(g, n, OP_SUM_TO, x, v);
    if (v->type != x->type)
        return MK(g, n, OP_CAST, x, v);
    return v;
}

/* Input i's gradient when it is op(a [, b]) elementwise over n's shape. */
static IrNode *elementwise(IrGraph *g, IrNode *n, int i, IrOp op, IrNode *a, IrNode *b)
{
    return fit(g, n, i, part(g, n, i, &n->shape, op, a, b));
}

/* ---- gradient rules, in the order of ops.def ------------------------------
 * On entry dx[i] is non-NULL (it is n->in[i]) exactly when input i wants a
 * gradient; a rule overwrites those and only those. Single-input rules are
 * only called when their input wants one. */

/* Leaves have no inputs: nothing to pass the gradient on to. */
void grad_INPUT(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }
void grad_PARAM(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }
void grad_CONST(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }

/* Each cast becomes a cast of the gradient back to the source type. */
void grad_CAST(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    dx[0] = MK(g, n, OP_CAST, n->in[0], dy);
}

void grad_ADD(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    for (int i = 0; i < 2; i++)
        if (dx[i])
            dx[i] = fit(g, n, i, dy);
}

void grad_SUB(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    if (dx[0])
        dx[0] = fit(g, n, 0, dy);
    if (dx[1])
        dx[1] = elementwise(g, n, 1, OP_NEG, dy, NULL);
}

/* d(a*b) = dy*b, dy*a */
void grad_MUL(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    for (int i = 0; i < 2; i++)
        if (dx[i])
            dx[i] = elementwise(g, n, i, OP_MUL, dy, n->in[1 - i]);
}

/* d(a/b) = dy/b, -(dy/b)*(a/b): divide first, so f16 does not overflow. */
void grad_DIV(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    IrNode *b = n->in[1];
    if (dx[0])
        dx[0] = elementwise(g, n, 0, OP_DIV, dy, b);
    if (dx[1]) {
        IrNode *q = part(g, n, 1, &n->shape, OP_DIV, dy, b);
        IrNode *p = part(g, n, 1, &n->shape, OP_MUL, q, n);
        dx[1] = elementwise(g, n, 1, OP_NEG, p, NULL);
    }
}

void grad_NEG(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    dx[0] = elementwise(g, n, 0, OP_NEG, dy, NULL);
}

/* y = A B with A = op(a), B = op(b) (ia[0], ia[1] transpose the last two
 * dims): dA = dy Bᵀ, dB = Aᵀ dy, and a transposed input takes the
 * transpose of its gradient. For b [K, N] under a [..., M, K], dB sums over
 * a's leading dims: MATMUL_TN flattens them. */
static IrNode *matmul(IrGraph *g, IrNode *n, const IrNode *like, IrNode *a, IrNode *b,
                      bool ta, bool tb)
{
    IrNode *m = MK(g, n, OP_MATMUL, like, a, b);
    m->ia[0] = ta, m->ia[1] = tb;
    return m;
}

void grad_MATMUL(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    IrNode *a = n->in[0], *b = n->in[1];
    bool ta = n->ia[0], tb = n->ia[1];
    bool tn = b->shape.rank == 2 && !ta;    /* Aᵀ as MATMUL_TN of a */
    MP_ASSERT(!ta || a->shape.rank == b->shape.rank);
    if (dx[0])      /* a = A: dy Bᵀ;  a = Aᵀ: B dyᵀ */
        dx[0] = ta ? matmul(g, n, a, b, dy, tb, true) : matmul(g, n, a, dy, b, false, !tb);
    if (!dx[1])
        return;
    if (tb)         /* b = Bᵀ: dyᵀ A */
        dx[1] = tn ? MK(g, n, OP_MATMUL_TN, b, dy, a) : matmul(g, n, b, dy, a, true, ta);
    else            /* b = B: Aᵀ dy */
        dx[1] = tn ? MK(g, n, OP_MATMUL_TN, b, a, dy) : matmul(g, n, b, a, dy, !ta, false);
}

/* y = x wᵀ + b: dx = dy w, dw = dyᵀ x (leading dims summed), db = Σ dy. */
void grad_LINEAR(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    if (dx[0])
        dx[0] = matmul(g, n, n->in[0], dy, n->in[1], false, false);
    if (dx[1])
        dx[1] = MK(g, n, OP_MATMUL_TN, n->in[1], dy, n->in[0]);
    if (n->nin > 2 && dx[2])
        dx[2] = MK(g, n, OP_SUM_TO, n->in[2], dy);
}

void grad_CONV2D(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    if (dx[0])
        copy_attrs(dx[0] = MK(g, n, OP_CONV2D_DX, n->in[0], dy, n->in[1]), n);
    if (dx[1])
        copy_attrs(dx[1] = MK(g, n, OP_CONV2D_DW, n->in[1], dy, n->in[0]), n);
    if (n->nin > 2 && dx[2])
        dx[2] = MK(g, n, OP_CHANNEL_SUM, n->in[2], dy);
}

/* Activations: from the input x, or from the output y where that is cheaper. */
void grad_RELU(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)    { dx[0] = MK(g, n, OP_RELU_GRAD, n->in[0], dy, n->in[0]); }
void grad_GELU(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    copy_attrs(dx[0] = MK(g, n, OP_GELU_GRAD, n->in[0], dy, n->in[0]), n);   /* ia[0]: the form */
}
void grad_TANH(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)    { dx[0] = MK(g, n, OP_TANH_GRAD, n->in[0], dy, n); }
void grad_SIGMOID(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { dx[0] = MK(g, n, OP_SIGMOID_GRAD, n->in[0], dy, n); }
void grad_SILU(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)    { dx[0] = MK(g, n, OP_SILU_GRAD, n->in[0], dy, n->in[0]); }

/* The mask is regenerated from the forward node's (seed, step, id). */
void grad_DROPOUT(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    copy_attrs(dx[0] = MK(g, n, OP_DROPOUT_GRAD, n->in[0], dy), n);
}

/* Views: the gradient takes the inverse view. */
void grad_RESHAPE(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { dx[0] = MK(g, n, OP_RESHAPE, n->in[0], dy); }
void grad_FLATTEN(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { dx[0] = MK(g, n, OP_RESHAPE, n->in[0], dy); }

void grad_TRANSPOSE(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    IrNode *t = MK(g, n, OP_TRANSPOSE, n->in[0], dy);
    for (int i = 0; i < n->shape.rank; i++)
        t->ia[n->ia[i]] = i;
    dx[0] = t;
}

/* ---- structural ops: chunk, slice, concat, expand, arange ------------------
 * A slice's gradient is dy placed into zeros (a chunk is the slice of its
 * part); concat hands each input its slice of dy; expand sums back over
 * the repeated axes (sum_to); arange is an integer constant. */
static void slice_grad(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx, int64_t start, int64_t end)
{
    IrNode *p = MK(g, n, OP_SLICE_GRAD, n->in[0], dy);
    p->ia[0] = n->ia[0];
    p->ia[1] = start;
    p->ia[2] = end;
    dx[0] = p;
}

void grad_CHUNK(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    int64_t len = n->shape.d[n->ia[0]];
    slice_grad(g, n, dy, dx, n->ia[2] * len, (n->ia[2] + 1) * len);
}

void grad_SLICE(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { slice_grad(g, n, dy, dx, n->ia[1], n->ia[2]); }

void grad_CONCAT(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    int64_t at = 0, axis = n->ia[0];
    for (int i = 0; i < n->nin; i++) {
        int64_t len = n->in[i]->shape.d[axis];
        if (dx[i]) {
            IrNode *s = MK(g, n, OP_SLICE, n->in[i], dy);
            s->ia[0] = axis;
            s->ia[1] = at;
            s->ia[2] = at + len;
            dx[i] = s;
        }
        at += len;
    }
}

void grad_EXPAND(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { dx[0] = fit(g, n, 0, dy); }
void grad_ARANGE(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }

void grad_MAX_POOL2D(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    copy_attrs(dx[0] = MK(g, n, OP_MAX_POOL2D_GRAD, n->in[0], dy, n->in[0]), n);
}

void grad_AVG_POOL2D(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    copy_attrs(dx[0] = MK(g, n, OP_AVG_POOL2D_GRAD, n->in[0], dy), n);
}

void grad_GLOBAL_AVG_POOL(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    dx[0] = MK(g, n, OP_GLOBAL_AVG_POOL_GRAD, n->in[0], dy);
}

/* The ids are integers: only the table has a gradient. */
void grad_EMBEDDING(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    if (dx[1])
        dx[1] = MK(g, n, OP_EMBEDDING_DW, n->in[1], dy, n->in[0]);
}

void grad_EXP(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)   { dx[0] = MK(g, n, OP_MUL, n->in[0], dy, n); }
void grad_LOG(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)   { dx[0] = MK(g, n, OP_DIV, n->in[0], dy, n->in[0]); }
void grad_SQRT(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)  { dx[0] = MK(g, n, OP_SQRT_GRAD, n->in[0], dy, n); }
void grad_RSQRT(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { dx[0] = MK(g, n, OP_RSQRT_GRAD, n->in[0], dy, n); }

/* sum and mean: dy spread back over the reduced axis (or over everything). */
static void reduction(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx, bool mean)
{
    const Shape *s = &n->in[0]->shape;
    int64_t axis = n->ia[0];
    int64_t count = axis < 0 ? shape_numel(s) : s->d[axis];
    IrNode *e = MK(g, n, OP_REDUCE_GRAD, n->in[0], dy);
    e->ia[0] = axis;
    e->fa[0] = mean ? 1.0 / (double)count : 1.0;
    dx[0] = e;
}

void grad_SUM(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)  { reduction(g, n, dy, dx, false); }
void grad_MEAN(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { reduction(g, n, dy, dx, true); }

void grad_SOFTMAX(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    copy_attrs(dx[0] = MK(g, n, OP_SOFTMAX_GRAD, n->in[0], dy, n), n);
}

void grad_LOG_SOFTMAX(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    copy_attrs(dx[0] = MK(g, n, OP_LOG_SOFTMAX_GRAD, n->in[0], dy, n), n);
}

/* Norms (x, weight, bias, ...): DX(dy, x, weight), DW(dy, x) -- the kernels
 * recompute the statistics from x -- and the bias reduced by `bias_op`. */
static void norm(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx, IrOp dx_op, IrOp dw_op,
                 IrOp bias_op)
{
    IrNode *x = n->in[0];
    if (dx[0])
        copy_attrs(dx[0] = MK(g, n, dx_op, x, dy, x, n->in[1]), n);
    if (dx[1])
        copy_attrs(dx[1] = MK(g, n, dw_op, n->in[1], dy, x), n);
    if (n->nin > 2 && dx[2])
        dx[2] = MK(g, n, bias_op, n->in[2], dy);
}

/* Over the last axis: the bias sums over all the others. */
void grad_LAYER_NORM(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    norm(g, n, dy, dx, OP_LAYER_NORM_DX, OP_LAYER_NORM_DW, OP_SUM_TO);
}

/* Per channel (axis 1). The running statistics (inputs 3, 4) are not
 * trainable, so they never want a gradient. */
void grad_BATCH_NORM(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    norm(g, n, dy, dx, OP_BATCH_NORM_DX, OP_BATCH_NORM_DW, OP_CHANNEL_SUM);
}

void grad_CROSS_ENTROPY(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    if (!dx[0])
        return;
    n->ia[2] = 1;   /* the rows' max and sum of exp kept for the gradient (ir_stats_at) */
    copy_attrs(dx[0] = MK(g, n, OP_CROSS_ENTROPY_GRAD, n->in[0], dy, n->in[0], n->in[1], n), n);
}

/* MSE_GRAD is d pred over the broadcast shape; d target is its negation. */
void grad_MSE(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    Shape over = bcast(&n->in[0]->shape, &n->in[1]->shape);
    IrNode *in[3] = {dy, n->in[0], n->in[1]};
    const IrNode *x = n->in[dx[0] ? 0 : 1];
    DType t = shape_eq(&over, &x->shape) ? x->type : n->type;
    IrNode *d = mk_st(g, n, OP_MSE_GRAD, &over, t, 3, in);
    if (dx[0])
        dx[0] = fit(g, n, 0, d);
    if (dx[1])
        dx[1] = fit(g, n, 1, part(g, n, 1, &over, OP_NEG, d, NULL));
}

/* The type of attention's one backward node: q, k and v's type, or f32
 * when they differ, so that each gradient is rounded once, to its input's. */
static DType attention_grad_type(const IrNode *n)
{
    DType t = n->in[0]->type;
    return n->in[1]->type == t && n->in[2]->type == t ? t : DT_F32;
}

/* One ATTENTION_GRAD node derives dq, dk and dv from one recomputation of
 * the probabilities (ops.def); each wanted gradient is its SLICE along
 * axis 2, cast to its input's type where that differs. The mask gets no
 * gradient: a float mask that depends on a trainable parameter is an
 * error, not a silent zero. */
void grad_ATTENTION(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    if (n->nin == 4 && dx[3]) {
        diag_error(n->loc, "attention's float mask depends on a trainable parameter, and a "
                   "mask gets no gradient; compute it from inputs, buffers or constants "
                   "(a u8 mask, or an additive bias that is not learned)");
        dx[3] = NULL;
    }
    IrAttn at = ir_attention(n);
    Shape s = ir_attention_grad_shape(n);
    /* (dy, q, k, v [, mask] [, y]): on Tensor Cores the backward reads the
     * forward's y and the rows' log-sum-exp kept after it (ir_stats_at) */
    IrNode *in[6] = {dy, n->in[0], n->in[1], n->in[2], n->nin == 4 ? n->in[3] : NULL};
    int nin = n->nin + 1;
    if (ir_attention_tc(n)) {
        n->ia[2] = 1;
        in[nin++] = n;
    }
    IrNode *all = mk_st(g, n, OP_ATTENTION_GRAD, &s, attention_grad_type(n), nin, in);
    all->ia[0] = n->ia[0];
    all->ia[1] = n->ia[1];
    all->fa[0] = n->fa[0];
    all->fa[1] = n->fa[1];   /* dropout: its bits drawn again from the forward node's id */
    /* each gradient's window: along T + 2T' (axis 2, or 1 for [B, T + 2T',
     * H, D]), or along the 3 of [B, T, 3, H, D], reshaped to its input's
     * shape */
    bool t3 = at.glay == IR_GLAY_BT3HD;
    int64_t tq = at.T, tk = at.Tk;
    const int64_t start[4] = {0, t3 ? 1 : tq, t3 ? 2 : tq + tk, t3 ? 3 : tq + 2 * tk};
    for (int i = 0; i < 3; i++) {
        if (!dx[i])
            continue;
        Shape ps = s;
        int axis = at.glay == IR_GLAY_BHTD ? 2 : at.glay == IR_GLAY_BTHD ? 1 : 2;
        ps.d[axis] = start[i + 1] - start[i];
        IrNode *p = mk_st(g, n, OP_SLICE, &ps, all->type, 1, &all);
        p->ia[0] = axis;
        p->ia[1] = start[i];
        p->ia[2] = start[i + 1];
        if (t3)
            p = mk_st(g, n, OP_RESHAPE, &n->in[i]->shape, all->type, 1, &p);
        dx[i] = fit(g, n, i, p);
    }
}

/* A metric: reaching it from the loss is the user's mistake. */
void grad_ACCURACY(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    diag_error(n->loc, "accuracy is not differentiable; use it as a metric");
    dx[0] = dx[1] = NULL;
}

/* ---- elementwise, norm and rope additions --------------------------------- */

void grad_ABS(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { dx[0] = MK(g, n, OP_ABS_GRAD, n->in[0], dy, n->in[0]); }
void grad_SIN(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { dx[0] = MK(g, n, OP_SIN_GRAD, n->in[0], dy, n->in[0]); }
void grad_COS(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { dx[0] = MK(g, n, OP_COS_GRAD, n->in[0], dy, n->in[0]); }

/* maximum / minimum: dy times a mask over the broadcast shape, 1/2 at ties
 * (torch). mask(a, b) is 1 where a > b, so minimum's masks swap operands. */
static void extremum(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx, bool max)
{
    for (int i = 0; i < 2; i++) {
        if (!dx[i])
            continue;
        bool first = (i == 0) == max;
        IrNode *ab[2] = {n->in[first ? 0 : 1], n->in[first ? 1 : 0]};
        IrNode *m = mk_st(g, n, OP_MAXIMUM_MASK, &n->shape, n->type, 2, ab);
        dx[i] = elementwise(g, n, i, OP_MUL, dy, m);
    }
}

void grad_MAXIMUM(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { extremum(g, n, dy, dx, true); }
void grad_MINIMUM(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { extremum(g, n, dy, dx, false); }

void grad_CLAMP(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    copy_attrs(dx[0] = MK(g, n, OP_CLAMP_GRAD, n->in[0], dy, n->in[0]), n);
}

void grad_POW(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    copy_attrs(dx[0] = MK(g, n, OP_POW_GRAD, n->in[0], dy, n->in[0]), n);
}

/* (x, weight): DX(dy, x, weight) and DW(dy, x) recompute 1/rms from x. */
void grad_RMS_NORM(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    norm(g, n, dy, dx, OP_RMS_NORM_DX, OP_RMS_NORM_DW, OP_SUM_TO);
}

void grad_ROPE(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    copy_attrs(dx[0] = MK(g, n, OP_ROPE_GRAD, n->in[0], dy), n);
}

/* randn, rand: no inputs, so no gradient; what they are combined with gets
 * its gradient through that op (z = mu + sigma * eps). */
void grad_RANDN(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }
void grad_RAND(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }

/* ---- selection, comparison, masks ------------------------------------------
 * A comparison's mask is an integer: never wanted, no gradient. where hands
 * dy to the side each element came from (over the broadcast shape, then
 * SUM_TO); detach cuts the graph (wanted_values never passes through it). */
void grad_GT(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }
void grad_LT(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }
void grad_GE(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }
void grad_LE(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }
void grad_EQ(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }
void grad_NE(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }

void grad_WHERE(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    static const IrOp side[3] = {OP__COUNT, OP_WHERE_DA, OP_WHERE_DB};
    MP_ASSERT(!dx[0]);
    for (int i = 1; i < 3; i++)
        if (dx[i])
            dx[i] = elementwise(g, n, i, side[i], dy, n->in[0]);
}

void grad_DETACH(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }
void grad_ARGMAX(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }
void grad_ARGMIN(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }

/* max / min along an axis: dy to the element chosen (the first extreme,
 * as torch.max(dim)), found again from x */
void grad_MAX(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { dx[0] = MK(g, n, OP_EXTREMUM_GRAD, n->in[0], dy, n->in[0]); }
void grad_MIN(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { dx[0] = MK(g, n, OP_EXTREMUM_GRAD, n->in[0], dy, n->in[0]); }
void grad_FULL(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }

/* routing and indexing: topk's positions and one_hot's mask are integers
 * (topk's values are a gather); gather scatters dy back to where it read;
 * cumsum's gradient is the cumulative sum of dy from the other end */
void grad_TOPK(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }
void grad_ONE_HOT(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { }
void grad_GATHER(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    if (dx[0]) {
        dx[0] = MK(g, n, OP_GATHER_GRAD, n->in[0], dy, n->in[1]);
        copy_attrs(dx[0], n);
    }
}
void grad_CUMSUM(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    dx[0] = MK(g, n, OP_CUMSUM, n->in[0], dy);
    copy_attrs(dx[0], n);
    dx[0]->ia[1] = !n->ia[1];
}

/* ---- the driver ---------------------------------------------------------- */

typedef struct Ad {
    IrGraph *g;
    int nfwd;           /* forward nodes: g->nodes[0 .. nfwd) */
    bool *wanted;       /* per forward node: its gradient is made */
    IrNode **grad;      /* per forward node: its gradient so far */
} Ad;

/* A gradient can reach n's inputs through n: a float value, not a detach
 * (a comparison's mask, an argmax, detach(x) stop it). */
static bool passes_gradient(const IrNode *n)
{
    return dt_is_float(n->type) && n->op != OP_DETACH;
}

/* Float values that depend on a trainable parameter (forward sweep) and
 * that the loss depends on through float values (backward sweep). */
static bool *wanted_values(const IrGraph *g, int nfwd)
{
    bool *needs = arena_alloc(g->arena, (size_t)nfwd + 1);
    bool *dep = arena_alloc(g->arena, (size_t)nfwd + 1);
    for (int i = 0; i < g->nparams; i++)
        needs[g->params[i].node->id] = g->params[i].trainable;
    for (int i = 0; i < nfwd; i++) {
        IrNode *n = g->nodes[i];
        for (int j = 0; j < n->nin; j++)
            needs[i] |= needs[n->in[j]->id];
        needs[i] &= passes_gradient(n);
    }
    dep[g->loss->id] = true;
    for (int i = nfwd - 1; i >= 0; i--)
        for (int j = 0; dep[i] && passes_gradient(g->nodes[i]) && j < g->nodes[i]->nin; j++)
            dep[g->nodes[i]->in[j]->id] = true;
    for (int i = 0; i < nfwd; i++)
        needs[i] &= dep[i];
    return needs;
}

/* Add the contribution d to v's gradient. The sum rounds to the
 * gradient's own type: f32 for a master weight. */
static void accumulate(Ad *ad, IrNode *v, IrNode *d)
{
    MP_ASSERT(shape_eq(&d->shape, &v->shape) && d->type == v->type);
    IrNode **slot = &ad->grad[v->id];
    if (*slot) {
        d = MK(ad->g, v, OP_ADD, v, *slot, d);
        d->compute = v->type;
    }
    *slot = d;
}

static void differentiate(Ad *ad, IrNode *n)
{
    IrNode **dx = arena_alloc(ad->g->arena, sizeof *dx * (size_t)(n->nin + 1));
    for (int i = 0; i < n->nin; i++)
        dx[i] = ad->wanted[n->in[i]->id] ? n->in[i] : NULL;
    op_info[n->op].grad(ad->g, n, ad->grad[n->id], dx);
    for (int i = 0; i < n->nin; i++) {
        if (!ad->wanted[n->in[i]->id]) {
            MP_ASSERT(dx[i] == NULL);
            continue;
        }
        if (dx[i] == n->in[i])
            diag_internal(__FILE__, __LINE__, "a gradient rule left an input's gradient unset");
        if (dx[i])
            accumulate(ad, n->in[i], dx[i]);
    }
}

/* The node G whose consecutive slices along one axis, in order and
 * covering it, the parts' gradients dys are (through reshapes), when the
 * concat of those along `axis` into x's shape is G's elements in G's
 * order: G's axes before the sliced one hold as many elements as x's
 * before `axis`, so the parts interleave alike (an attention's [B, T, 3,
 * H, D] gradient of a chunk into q, k, v: ir.h IrAttn's glay). NULL when
 * they are not. */
static IrNode *concat_is_reshape(IrNode *const *dys, int64_t parts, const IrNode *x, int64_t axis)
{
    IrNode *G = NULL;
    int64_t b = -1, at = 0, outer = 1, gouter = 1;
    for (int64_t k = 0; k < parts; k++) {
        IrNode *p = dys[k];
        while (p->op == OP_RESHAPE)
            p = p->in[0];
        if (p->op != OP_SLICE || dys[k]->type != x->type || (G && (p->in[0] != G || p->ia[0] != b)))
            return NULL;
        G = p->in[0], b = p->ia[0];
        if (p->ia[1] != at)
            return NULL;
        at = p->ia[2];
    }
    if (!G || at != G->shape.d[b] || G->type != x->type)
        return NULL;
    for (int64_t i = 0; i < axis; i++)
        outer *= x->shape.d[i];
    for (int64_t i = 0; i < b; i++)
        gouter *= G->shape.d[i];
    return outer == gouter ? G : NULL;
}

/* The parts of one chunk are consecutive nodes, made before any of their
 * uses, so when the pass reaches the last part every part's gradient is
 * complete. When each has one, x's gradient is their concat: one copy
 * instead of a zero-padded slice_grad per part and the sums of those, and
 * no copy where the concat is a reshape of what the parts were sliced
 * from (concat_is_reshape; the slices are then dropped: drop_unread).
 * Returns false (each part is then differentiated alone) otherwise. */
static bool join_chunk(Ad *ad, IrNode *n)
{
    int64_t parts = n->ia[1];
    int last = n->id, first = last - (int)parts + 1;
    if (n->op != OP_CHUNK || n->ia[2] != parts - 1 || first < 0 || !ad->wanted[n->in[0]->id])
        return false;
    IrNode **dys = arena_alloc(ad->g->arena, sizeof *dys * (size_t)parts);
    for (int k = 0; k < parts; k++) {
        IrNode *p = ad->g->nodes[first + k];
        if (p->op != OP_CHUNK || p->in[0] != n->in[0] || p->ia[0] != n->ia[0] || p->ia[2] != k ||
            !ad->grad[p->id])
            return false;
        dys[k] = ad->grad[p->id];
    }
    IrNode *whole = concat_is_reshape(dys, parts, n->in[0], n->ia[0]), *cat;
    if (whole) {
        cat = mk(ad->g, n, OP_RESHAPE, n->in[0], 1, &whole);
    } else {
        cat = mk(ad->g, n, OP_CONCAT, n->in[0], (int)parts, dys);
        cat->ia[0] = n->ia[0];
    }
    for (int k = 0; k < parts; k++)
        ad->grad[first + k] = NULL;
    accumulate(ad, n->in[0], cat);
    return true;
}

/* d loss = S: the loss scale, the seed of the backward pass. */
static IrNode *seed(IrGraph *g)
{
    IrNode *loss = g->loss;
    IrNode *s = ir_add1(g, OP_LOSS_SCALE, loss->loc, loss);
    s->phase = PH_BACKWARD;
    s->grad_of = loss;
    s->type = s->compute = DT_F32;
    s->rule = RULE_CLASS;
    g->loss_scale = s;
    return s;
}

/* Drops the backward slices and reshapes nothing reads (those a concat
 * that became a reshape left: join_chunk), last reader first. */
static void drop_unread(IrGraph *g, int nfwd)
{
    int *reads = arena_alloc(g->arena, sizeof *reads * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i]->nin; k++)
            reads[g->nodes[i]->in[k]->id]++;
    for (int i = 0; i < g->nparams; i++)
        if (g->params[i].grad)
            reads[g->params[i].grad->id]++;
    bool any = false, *drop = arena_alloc(g->arena, (size_t)g->nnodes + 1);
    for (int i = g->nnodes - 1; i >= nfwd; i--) {
        IrNode *n = g->nodes[i];
        if ((n->op != OP_SLICE && n->op != OP_RESHAPE) || reads[i])
            continue;
        drop[i] = any = true;
        reads[n->in[0]->id]--;
    }
    if (!any)
        return;
    int kept = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (!drop[i])
            g->nodes[kept++] = g->nodes[i];
    g->nnodes = kept;
    ir_renumber(g);
}

void ad_backward(IrGraph *g)
{
    MP_ASSERT(g->loss != NULL && g->loss_scale == NULL);
    ir_renumber(g);
    IrNode *loss = g->loss;
    if (loss->shape.rank != 0) {
        diag_error(loss->loc, "minimize needs a scalar loss, got shape %s",
                   shape_str(g->arena, &loss->shape));
        return;
    }
    Ad ad = {g, g->nnodes, NULL, NULL};
    ad.wanted = wanted_values(g, ad.nfwd);
    ad.grad = arena_alloc(g->arena, sizeof *ad.grad * (size_t)(ad.nfwd + 1));
    IrNode *s = seed(g);
    if (ad.wanted[loss->id])    /* a loss typed f16 gets d loss in f16 */
        ad.grad[loss->id] = loss->type == DT_F32 ? s : MK(g, loss, OP_CAST, loss, s);
    for (int i = ad.nfwd - 1; i >= 0; i--) {
        int from = g->nnodes;
        if (ad.grad[i] && !join_chunk(&ad, g->nodes[i]))
            differentiate(&ad, g->nodes[i]);
        /* the backward of a repeat copy's node belongs to that copy, sums
         * into the gradients of its inputs included (emit_loop.c) */
        for (int k = from; k < g->nnodes; k++) {
            g->nodes[k]->rep = g->nodes[i]->rep;
            g->nodes[k]->copy = g->nodes[i]->copy;
            g->nodes[k]->scope = g->nodes[i]->scope;
        }
    }
    for (int i = 0; i < g->nparams; i++) {
        IrParam *p = &g->params[i];
        p->grad = ad.wanted[p->node->id] ? ad.grad[p->node->id] : NULL;
        MP_ASSERT(!p->grad || p->grad->type == DT_F32);
    }
    drop_unread(g, ad.nfwd);
}

/* ---- the consistency check (tests) ---------------------------------------- */

static int complain(const IrNode *n, const char *what)
{
    fprintf(stderr, "ad_check: node %d (%s of %d): %s\n", n->id, op_info[n->op].name,
            n->grad_of ? n->grad_of->id : -1, what);
    return 1;
}

/* Recurrent layers: one GRU_GRAD / LSTM_GRAD node runs the steps backwards
 * (from dstate, the state and w_hh) and yields d gi, dW_hh and db_hh side
 * by side in one flat value (ops.def); each wanted gradient is its SLICE,
 * reshaped to its input's shape and cast to its type where that differs. */
static void grad_recurrent(IrGraph *g, IrNode *n, IrOp op, IrNode *dy, IrNode **dx)
{
    IrNode *in[3] = {dy, n, n->in[1]};
    Shape s = {1, {0}};
    for (int i = 0; i < 3; i++)
        s.d[0] += i < 2 ? shape_numel(&n->in[i]->shape) : n->in[1]->shape.d[0];
    IrNode *all = mk_st(g, n, op, &s, n->compute, 3, in);
    int64_t at = 0;
    for (int i = 0; i < n->nin; i++) {
        const Shape *xs = &n->in[i]->shape;
        int64_t len = shape_numel(xs);
        if (dx[i]) {
            Shape ps = {1, {len}};
            IrNode *p = mk_st(g, n, OP_SLICE, &ps, all->type, 1, &all);
            p->ia[0] = 0;
            p->ia[1] = at;
            p->ia[2] = at + len;
            if (xs->rank != 1)
                p = mk_st(g, n, OP_RESHAPE, xs, all->type, 1, &p);
            dx[i] = fit(g, n, i, p);
        }
        at += len;
    }
}
void grad_GRU(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { grad_recurrent(g, n, OP_GRU_GRAD, dy, dx); }
void grad_LSTM(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx) { grad_recurrent(g, n, OP_LSTM_GRAD, dy, dx); }

static bool same_loc(SrcLoc a, SrcLoc b)
{
    return a.file == b.file && a.line == b.line && a.col == b.col;
}

static bool is_value(const IrNode *n, const Shape *s, DType t)
{
    return shape_eq(&n->shape, s) && n->type == t;
}

/* Shaped and typed like grad_of's output or one of its inputs, or an
 * elementwise product over the broadcast of its inputs before SUM_TO. */
static bool shape_type_ok(const IrNode *n)
{
    const IrNode *f = n->grad_of;
    if (is_value(f, &n->shape, n->type))
        return true;
    if (f->op == OP_ATTENTION &&
        (n->op == OP_ATTENTION_GRAD || n->op == OP_SLICE || n->op == OP_RESHAPE))
        return n->type == attention_grad_type(f);   /* checked against the rule */
    if ((f->op == OP_GRU || f->op == OP_LSTM) &&
        (n->op == OP_GRU_GRAD || n->op == OP_LSTM_GRAD || n->op == OP_SLICE || n->op == OP_RESHAPE))
        return n->type == f->compute;               /* the flat gradients and their parts */
    for (int i = 0; i < f->nin; i++)
        if (is_value(f->in[i], &n->shape, n->type))
            return true;
    if (f->nin < 2 || f->nin > 3 || n->type != f->type)
        return false;
    Shape over = bcast(&f->in[0]->shape, &f->in[1]->shape);
    if (f->nin == 3)                        /* where */
        over = bcast(&over, &f->in[2]->shape);
    return shape_eq(&n->shape, &over);
}

/* The shape rule of n's op, run on a copy, must agree with n's shape. */
static bool rule_agrees(IrGraph *g, const IrNode *n)
{
    IrNode copy = *n;
    return op_info[n->op].shape(g, &copy) && shape_eq(&copy.shape, &n->shape);
}

static int check_node(IrGraph *g, const IrNode *n)
{
    const IrNode *f = n->grad_of;
    int bad = 0;
    if (!f || f->phase != PH_FORWARD || f->id >= n->id)
        return complain(n, "grad_of is not an earlier forward node");
    for (int i = 0; i < n->nin; i++)
        if (n->in[i]->id >= n->id)
            bad += complain(n, "reads a later node");
    if (!same_loc(n->loc, f->loc))
        bad += complain(n, "loc differs from grad_of's");
    if (n->op == OP_LOSS_SCALE)
        return bad + (f == g->loss && g->loss_scale == n && n->shape.rank == 0 &&
                              n->type == DT_F32 ? 0 : complain(n, "not the f32 seed of the loss"));
    if (n->cls != f->cls || n->rule != f->rule)
        bad += complain(n, "class or rule differs from grad_of's");
    if (n->op == OP_ADD ? n->compute != n->type || !is_value(f, &n->shape, n->type)
                        : n->compute != f->compute)
        bad += complain(n, "compute type is not grad_of's (or, summing, its own)");
    if (!shape_type_ok(n))
        bad += complain(n, "shape or type is not that of a value it differentiates");
    if (!rule_agrees(g, n))
        bad += complain(n, "the op's shape rule disagrees with its shape");
    return bad;
}

/* Every trainable parameter the loss depends on has an f32 gradient of its
 * shape; every other parameter has none. */
static int check_params(IrGraph *g)
{
    bool *dep = arena_alloc(g->arena, (size_t)g->nnodes + 1);
    dep[g->loss->id] = true;
    for (int i = g->loss->id; i >= 0; i--)
        for (int j = 0; dep[i] && passes_gradient(g->nodes[i]) && j < g->nodes[i]->nin; j++)
            dep[g->nodes[i]->in[j]->id] = true;
    int bad = 0;
    for (int i = 0; i < g->nparams; i++) {
        const IrParam *p = &g->params[i];
        bool want = p->trainable && dep[p->node->id];
        if (!want && p->grad)
            bad += complain(p->node, "a gradient for a parameter that needs none");
        else if (want && !(p->grad && p->grad->phase == PH_BACKWARD &&
                           is_value(p->grad, &p->shape, DT_F32)))
            bad += complain(p->node, "no f32 gradient of the parameter's shape");
    }
    return bad;
}

bool ad_check(IrGraph *g)
{
    int bad = g->loss_scale ? 0 : complain(g->loss, "no loss scale");
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i]->id != i)
            bad += complain(g->nodes[i], "id is not its index");
        else if (g->nodes[i]->phase == PH_BACKWARD)
            bad += check_node(g, g->nodes[i]);
    }
    return bad + check_params(g) == 0;
}

/* ---- image operations ------------------------------------------------------------ */

/* conv_transpose2d is the adjoint of a conv2d from its output to its input:
 * dx is that conv2d of dy, dw its weight gradient with the roles of x and dy
 * exchanged, the bias a channel sum. */
void grad_CONV_TRANSPOSE2D(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    if (dx[0])
        copy_attrs(dx[0] = MK(g, n, OP_CONV_TRANSPOSE2D_DX, n->in[0], dy, n->in[1]), n);
    if (dx[1])
        copy_attrs(dx[1] = MK(g, n, OP_CONV_TRANSPOSE2D_DW, n->in[1], dy, n->in[0]), n);
    if (n->nin > 2 && dx[2])
        dx[2] = MK(g, n, OP_CHANNEL_SUM, n->in[2], dy);
}

/* pad's gradient is the opposite pad of dy: what was padded is cropped,
 * what was cropped comes back as zeros. In the other modes an input may
 * be read by several outputs: PAD_GRAD sums them. */
void grad_PAD(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    if (pad_mode(n)) {
        copy_attrs(dx[0] = MK(g, n, OP_PAD_GRAD, n->in[0], dy), n);
        return;
    }
    IrNode *p = MK(g, n, OP_PAD, n->in[0], dy);
    for (int i = 0; i < 8; i++)
        p->ia[i] = -n->ia[i];
    dx[0] = p;
}

void grad_UPSAMPLE(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    copy_attrs(dx[0] = MK(g, n, OP_UPSAMPLE_GRAD, n->in[0], dy), n);
}

/* Per (sample, group) statistics, per channel affine: the bias sums over
 * all axes but the channels'. */
void grad_GROUP_NORM(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx)
{
    norm(g, n, dy, dx, OP_GROUP_NORM_DX, OP_GROUP_NORM_DW, OP_CHANNEL_SUM);
}
