/* test_autodiff.c - the structure of the backward graph ad_backward() makes.
 *
 * Each test builds a forward graph by hand, typed as prec_forward() would
 * type it (shape, type, compute, CAST nodes), runs ad_backward() and checks
 * which backward nodes appear, their inputs, attributes, shapes, types and
 * compute types, and that ad_check() finds every invariant kept. Then
 * every model of examples/ and tests/gradcheck/ goes through the real
 * front end and precision pass under each policy and must pass ad_check().
 * The numbers themselves are checked end to end by tests/t_gradcheck.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "ast.h"
#include "autodiff.h"
#include "ops.h"
#include "prec.h"
#include "sema.h"

#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static Arena arena;
static IrGraph *g;
static int line;

static int setup(void **state)
{
    (void)state;
    arena_init(&arena);
    g = ir_new(&arena);
    line = 1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    arena_free(&arena);
    return 0;
}

/* ---- building typed forward graphs ---------------------------------------- */

static SrcLoc here(void) { return (SrcLoc){NULL, line++, 1, 1}; }

static Shape shp(int rank, ...)
{
    Shape s = {.rank = rank};
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++)
        s.d[i] = va_arg(ap, int);
    va_end(ap);
    return s;
}
#define S0 shp(0)
#define S1(a) shp(1, a)
#define S2(a, b) shp(2, a, b)
#define S3(a, b, c) shp(3, a, b, c)
#define S4(a, b, c, d) shp(4, a, b, c, d)

static IrNode *param(const char *name, Shape s) { return ir_add_param(g, name, here(), s)->node; }
static IrNode *input(const char *name, DType t, Shape s) { return ir_add_input(g, name, here(), t, s)->node; }
static IrParam *P(IrNode *n) { return &g->params[n->ia[0]]; }

static IrNode *set(IrNode *n, Shape s, DType t, DType compute)
{
    n->shape = s;
    n->type = t;
    n->compute = compute;
    return n;
}

/* op(in...) with its output shape and type; computes in its output type. */
static IrNode *node(IrOp op, Shape s, DType t, int nin, IrNode **in)
{
    return set(ir_add(g, op, here(), nin, in), s, t, t);
}
#define NODE(op, s, t, ...) \
    node(op, s, t, (int)(sizeof((IrNode *[]){__VA_ARGS__}) / sizeof(IrNode *)), (IrNode *[]){__VA_ARGS__})

static IrNode *cast(IrNode *x, DType t) { return NODE(OP_CAST, x->shape, t, x); }

static IrNode *constant(double v)
{
    IrNode *c = set(ir_add(g, OP_CONST, here(), 0, NULL), S0, DT_F32, DT_NONE);
    c->fa[0] = v;
    return c;
}

/* loss = sum(x) over everything, f32 */
static IrNode *sum_all(IrNode *x)
{
    IrNode *s = NODE(OP_SUM, S0, DT_F32, x);
    s->ia[0] = -1;
    return s;
}

static void backward(IrNode *loss)
{
    g->loss = loss;
    ad_backward(g);
    assert_true(ad_check(g));
}

/* ---- finding backward nodes ------------------------------------------------ */

static int count_bwd(IrOp op, const IrNode *of)
{
    int k = 0;
    for (int i = 0; i < g->nnodes; i++)
        k += g->nodes[i]->phase == PH_BACKWARD && g->nodes[i]->op == op &&
             (!of || g->nodes[i]->grad_of == of);
    return k;
}

static int count_of(const IrNode *of)
{
    int k = 0;
    for (int i = 0; i < g->nnodes; i++)
        k += g->nodes[i]->phase == PH_BACKWARD && g->nodes[i]->grad_of == of;
    return k;
}

/* The only backward node `op` made for `of`. */
static IrNode *bwd(IrOp op, const IrNode *of)
{
    assert_int_equal(count_bwd(op, of), 1);
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->phase == PH_BACKWARD && g->nodes[i]->op == op && g->nodes[i]->grad_of == of)
            return g->nodes[i];
    return NULL;
}

static void assert_shape(const IrNode *n, Shape s) { assert_true(shape_eq(&n->shape, &s)); }

static void assert_node(const IrNode *n, IrOp op, Shape s, DType t, DType compute)
{
    assert_non_null(n);
    assert_int_equal(n->op, op);
    assert_int_equal(n->phase, PH_BACKWARD);
    assert_shape(n, s);
    assert_int_equal(n->type, t);
    assert_int_equal(n->compute, compute);
}

static void assert_inputs(const IrNode *n, int nin, ...)
{
    assert_int_equal(n->nin, nin);
    va_list ap;
    va_start(ap, nin);
    for (int i = 0; i < nin; i++)
        assert_ptr_equal(n->in[i], va_arg(ap, IrNode *));
    va_end(ap);
}

/* The gradient of the loss = sum(x) arriving at x: EXPAND(seed). */
static IrNode *dy_of_sum(IrNode *s) { return bwd(OP_REDUCE_GRAD, s); }

/* ---- the seed and the reductions -------------------------------------------- */

static void test_seed_and_sum(void **state)
{
    (void)state;
    IrNode *w = param("w", S2(4, 6));
    IrNode *loss = sum_all(w);
    backward(loss);
    IrNode *s = g->loss_scale;
    assert_node(s, OP_LOSS_SCALE, S0, DT_F32, DT_F32);
    assert_inputs(s, 1, loss);
    assert_ptr_equal(s->grad_of, loss);
    assert_int_equal(s->id, 2);         /* right after the forward nodes */
    IrNode *e = dy_of_sum(loss);
    assert_node(e, OP_REDUCE_GRAD, S2(4, 6), DT_F32, DT_F32);
    assert_inputs(e, 1, s);
    assert_int_equal(e->ia[0], -1);
    assert_true(e->fa[0] == 1.0);
    assert_ptr_equal(P(w)->grad, e);
    assert_int_equal(e->loc.line, loss->loc.line);
    assert_int_equal(g->nnodes, 4);
}

static void test_mean_over_axis(void **state)
{
    (void)state;
    IrNode *w = param("w", S2(4, 6));
    IrNode *m = NODE(OP_MEAN, S1(4), DT_F32, w);
    m->ia[0] = 1;
    backward(sum_all(m));
    IrNode *e = bwd(OP_REDUCE_GRAD, m);
    assert_node(e, OP_REDUCE_GRAD, S2(4, 6), DT_F32, DT_F32);
    assert_int_equal(e->ia[0], 1);
    assert_true(e->fa[0] == 1.0 / 6);
    assert_ptr_equal(P(w)->grad, e);
}

static void test_loss_f16_gets_f16_seed(void **state)
{
    (void)state;
    IrNode *w = param("w", S1(3));
    IrNode *w16 = cast(w, DT_F16);
    IrNode *loss = NODE(OP_SUM, S0, DT_F16, w16);
    loss->ia[0] = -1;
    backward(loss);
    IrNode *c = bwd(OP_CAST, loss);
    assert_node(c, OP_CAST, S0, DT_F16, DT_F16);
    assert_inputs(c, 1, g->loss_scale);
    assert_node(bwd(OP_REDUCE_GRAD, loss), OP_REDUCE_GRAD, S1(3), DT_F16, DT_F16);
    assert_node(P(w)->grad, OP_CAST, S1(3), DT_F32, DT_F16);
    assert_ptr_equal(P(w)->grad->grad_of, w16);
}

static void test_non_scalar_loss_is_an_error(void **state)
{
    (void)state;
    IrNode *w = param("w", S1(3));
    int before = diag_error_count();
    g->loss = NODE(OP_RELU, S1(3), DT_F32, w);
    ad_backward(g);
    assert_int_equal(diag_error_count(), before + 1);
    assert_null(P(w)->grad);
}

/* ---- elementwise arithmetic and broadcasting ---------------------------------- */

static void test_add_broadcast_reduces(void **state)
{
    (void)state;
    IrNode *a = param("a", S2(4, 6)), *b = param("b", S1(6));
    IrNode *y = NODE(OP_ADD, S2(4, 6), DT_F32, a, b);
    backward(sum_all(y));
    IrNode *dy = dy_of_sum(g->loss);
    assert_ptr_equal(P(a)->grad, dy);             /* same shape: passed on */
    IrNode *db = bwd(OP_SUM_TO, y);
    assert_node(db, OP_SUM_TO, S1(6), DT_F32, DT_F32);
    assert_inputs(db, 1, dy);
    assert_ptr_equal(P(b)->grad, db);
    assert_int_equal(count_of(y), 1);
}

static void test_sub_negates_then_reduces(void **state)
{
    (void)state;
    IrNode *a = param("a", S2(4, 6)), *b = param("b", S2(4, 1));
    IrNode *y = NODE(OP_SUB, S2(4, 6), DT_F32, a, b);
    backward(sum_all(y));
    IrNode *dy = dy_of_sum(g->loss);
    assert_ptr_equal(P(a)->grad, dy);
    IrNode *neg = bwd(OP_NEG, y);
    assert_node(neg, OP_NEG, S2(4, 6), DT_F32, DT_F32);
    assert_inputs(neg, 1, dy);
    IrNode *db = bwd(OP_SUM_TO, y);
    assert_node(db, OP_SUM_TO, S2(4, 1), DT_F32, DT_F32);
    assert_inputs(db, 1, neg);
    assert_ptr_equal(P(b)->grad, db);
}

static void test_mul_by_const_and_neg(void **state)
{
    (void)state;
    IrNode *a = param("a", S2(2, 3));
    IrNode *k = constant(2.5);
    IrNode *y = NODE(OP_MUL, S2(2, 3), DT_F32, a, k);
    IrNode *z = NODE(OP_NEG, S2(2, 3), DT_F32, y);
    backward(sum_all(z));
    IrNode *dz = bwd(OP_NEG, z);
    assert_inputs(dz, 1, dy_of_sum(g->loss));
    IrNode *da = bwd(OP_MUL, y);
    assert_node(da, OP_MUL, S2(2, 3), DT_F32, DT_F32);
    assert_inputs(da, 2, dz, k);
    assert_ptr_equal(P(a)->grad, da);
    assert_int_equal(count_of(k), 0);
    assert_int_equal(count_of(y), 1);            /* nothing for the constant */
}

static void test_div_both_sides(void **state)
{
    (void)state;
    IrNode *a = param("a", S2(4, 6)), *c = param("c", S2(4, 1));
    IrNode *y = NODE(OP_DIV, S2(4, 6), DT_F32, a, c);
    backward(sum_all(y));
    IrNode *dy = dy_of_sum(g->loss);
    assert_int_equal(count_bwd(OP_DIV, y), 2);
    IrNode *da = P(a)->grad;
    assert_node(da, OP_DIV, S2(4, 6), DT_F32, DT_F32);
    assert_inputs(da, 2, dy, c);
    IrNode *dc = P(c)->grad;                     /* SUM_TO(NEG(MUL(DIV(dy, c), y))) */
    assert_node(dc, OP_SUM_TO, S2(4, 1), DT_F32, DT_F32);
    IrNode *neg = dc->in[0], *mul = neg->in[0], *q = mul->in[0];
    assert_int_equal(neg->op, OP_NEG);
    assert_int_equal(mul->op, OP_MUL);
    assert_ptr_equal(mul->in[1], y);
    assert_node(q, OP_DIV, S2(4, 6), DT_F32, DT_F32);
    assert_inputs(q, 2, dy, c);
}

/* A follow op mixing f16 and f32 computes in f32; the f16 side's gradient
 * is stored f16, the f32 side's f32. */
static void test_follow_mixed_types(void **state)
{
    (void)state;
    IrNode *x = param("x", S2(4, 6)), *b = param("b", S1(6));
    IrNode *x16 = cast(x, DT_F16);
    IrNode *y = NODE(OP_ADD, S2(4, 6), DT_F32, x16, b);
    backward(sum_all(y));
    IrNode *dy = dy_of_sum(g->loss);
    IrNode *dx16 = bwd(OP_CAST, y);
    assert_node(dx16, OP_CAST, S2(4, 6), DT_F16, DT_F32);
    assert_inputs(dx16, 1, dy);
    assert_node(P(x)->grad, OP_CAST, S2(4, 6), DT_F32, DT_F16);
    assert_inputs(P(x)->grad, 1, dx16);
    assert_node(P(b)->grad, OP_SUM_TO, S1(6), DT_F32, DT_F32);
}

/* A product over the broadcast shape is kept in the output's type (f32)
 * and rounded to the f16 input's type once, by SUM_TO. */
static void test_broadcast_product_rounds_once(void **state)
{
    (void)state;
    IrNode *x = param("x", S2(4, 6)), *s = param("s", S1(6));
    IrNode *s16 = cast(s, DT_F16);
    IrNode *y = NODE(OP_MUL, S2(4, 6), DT_F32, x, s16);
    backward(sum_all(y));
    IrNode *ds16 = bwd(OP_SUM_TO, y);
    assert_node(ds16, OP_SUM_TO, S1(6), DT_F16, DT_F32);
    IrNode *prod = ds16->in[0];
    assert_node(prod, OP_MUL, S2(4, 6), DT_F32, DT_F32);
    assert_ptr_equal(prod->in[1], x);
    assert_node(P(s)->grad, OP_CAST, S1(6), DT_F32, DT_F16);
}

/* ---- fan-out ----------------------------------------------------------------- */

static void test_fan_out_sums_in_arrival_order(void **state)
{
    (void)state;
    IrNode *w = param("w", S1(5));
    IrNode *sq = NODE(OP_MUL, S1(5), DT_F32, w, w);
    IrNode *r = NODE(OP_RELU, S1(5), DT_F32, w);
    IrNode *y = NODE(OP_ADD, S1(5), DT_F32, sq, r);
    backward(sum_all(y));
    IrNode *drelu = bwd(OP_RELU_GRAD, r);
    assert_int_equal(count_bwd(OP_MUL, sq), 2);
    assert_int_equal(count_bwd(OP_ADD, w), 2);
    IrNode *sum = P(w)->grad;                    /* ((relu' + mul0) + mul1) */
    assert_node(sum, OP_ADD, S1(5), DT_F32, DT_F32);
    assert_ptr_equal(sum->grad_of, w);
    IrNode *first = sum->in[0];
    assert_int_equal(first->op, OP_ADD);
    assert_ptr_equal(first->in[0], drelu);       /* relu comes later: arrives first */
    assert_int_equal(first->in[1]->op, OP_MUL);
    assert_ptr_equal(first->in[1]->in[1], w);
    assert_int_equal(sum->in[1]->op, OP_MUL);
}

/* A working copy used twice sums its f16 gradients in f16, then one cast
 * brings the sum to the f32 master weight. */
static void test_fan_out_of_f16_copy(void **state)
{
    (void)state;
    IrNode *w = param("w", S2(3, 3)), *x = input("x", DT_F16, S2(2, 3));
    IrNode *w16 = cast(w, DT_F16);
    w16->hoisted = true;
    IrNode *h = NODE(OP_MATMUL, S2(2, 3), DT_F16, x, w16);
    IrNode *y = NODE(OP_MATMUL, S2(2, 3), DT_F16, h, w16);
    backward(sum_all(cast(y, DT_F32)));
    IrNode *acc = bwd(OP_ADD, w16);
    assert_node(acc, OP_ADD, S2(3, 3), DT_F16, DT_F16);
    assert_int_equal(acc->in[0]->op, OP_MATMUL_TN);
    assert_ptr_equal(acc->in[0]->grad_of, y);
    assert_ptr_equal(acc->in[1]->grad_of, h);
    IrNode *dw = P(w)->grad;
    assert_node(dw, OP_CAST, S2(3, 3), DT_F32, DT_F16);
    assert_inputs(dw, 1, acc);
    assert_false(dw->hoisted);
    assert_int_equal(count_of(x), 0);
    assert_int_equal(count_bwd(OP_MATMUL, h), 0); /* x is data: no dx */
}

/* ---- matrix products ---------------------------------------------------------- */

static void test_matmul_leading_dims(void **state)
{
    (void)state;
    IrNode *a = param("a", S3(4, 2, 5)), *b = param("b", S2(5, 3));
    IrNode *y = NODE(OP_MATMUL, S3(4, 2, 3), DT_F32, a, b);
    backward(sum_all(y));
    IrNode *dy = dy_of_sum(g->loss);
    IrNode *da = bwd(OP_MATMUL, y);
    assert_node(da, OP_MATMUL, S3(4, 2, 5), DT_F32, DT_F32);
    assert_inputs(da, 2, dy, b);
    assert_int_equal(da->ia[0], 0);
    assert_int_equal(da->ia[1], 1);
    IrNode *db = bwd(OP_MATMUL_TN, y);
    assert_node(db, OP_MATMUL_TN, S2(5, 3), DT_F32, DT_F32);
    assert_inputs(db, 2, a, dy);
}

static void test_matmul_batched(void **state)
{
    (void)state;
    IrNode *a = param("a", S3(4, 2, 3)), *b = param("b", S3(4, 3, 2));
    IrNode *y = NODE(OP_MATMUL, S3(4, 2, 2), DT_F32, a, b);
    backward(sum_all(y));
    IrNode *dy = dy_of_sum(g->loss);
    assert_int_equal(count_bwd(OP_MATMUL, y), 2);
    IrNode *da = P(a)->grad, *db = P(b)->grad;
    assert_node(da, OP_MATMUL, S3(4, 2, 3), DT_F32, DT_F32);
    assert_inputs(da, 2, dy, b);
    assert_true(da->ia[0] == 0 && da->ia[1] == 1);
    assert_node(db, OP_MATMUL, S3(4, 3, 2), DT_F32, DT_F32);
    assert_inputs(db, 2, a, dy);
    assert_true(db->ia[0] == 1 && db->ia[1] == 0);
}

/* y = a @ bᵀ with a [M, K], b [N, K]: da = dy b, db = dyᵀ a. */
static void test_matmul_transposed_b(void **state)
{
    (void)state;
    IrNode *a = param("a", S2(2, 5)), *b = param("b", S2(3, 5));
    IrNode *y = NODE(OP_MATMUL, S2(2, 3), DT_F32, a, b);
    y->ia[1] = 1;
    backward(sum_all(y));
    IrNode *dy = dy_of_sum(g->loss);
    assert_node(P(a)->grad, OP_MATMUL, S2(2, 5), DT_F32, DT_F32);
    assert_inputs(P(a)->grad, 2, dy, b);
    assert_true(P(a)->grad->ia[0] == 0 && P(a)->grad->ia[1] == 0);
    assert_node(P(b)->grad, OP_MATMUL_TN, S2(3, 5), DT_F32, DT_F32);
    assert_inputs(P(b)->grad, 2, dy, a);
}

/* y = aᵀ @ b with a [K, M], b [K, N]: da = b dyᵀ, db = a dy. */
static void test_matmul_transposed_a(void **state)
{
    (void)state;
    IrNode *a = param("a", S2(5, 2)), *b = param("b", S2(5, 3));
    IrNode *y = NODE(OP_MATMUL, S2(2, 3), DT_F32, a, b);
    y->ia[0] = 1;
    backward(sum_all(y));
    IrNode *dy = dy_of_sum(g->loss);
    assert_node(P(a)->grad, OP_MATMUL, S2(5, 2), DT_F32, DT_F32);
    assert_inputs(P(a)->grad, 2, b, dy);
    assert_true(P(a)->grad->ia[0] == 0 && P(a)->grad->ia[1] == 1);
    assert_node(P(b)->grad, OP_MATMUL, S2(5, 3), DT_F32, DT_F32);
    assert_inputs(P(b)->grad, 2, a, dy);
    assert_true(P(b)->grad->ia[0] == 0 && P(b)->grad->ia[1] == 0);
}

/* The mixed_float16 MLP head: casts in, linear in f16, logits cast to f32,
 * cross-entropy in f32, accuracy as a metric. */
static void test_linear_mixed_f16(void **state)
{
    (void)state;
    IrNode *x = input("x", DT_F32, S3(8, 2, 4)), *labels = input("labels", DT_I32, S2(8, 2));
    IrNode *w = param("h.weight", S2(3, 4)), *b = param("h.bias", S1(3));
    IrNode *x16 = cast(x, DT_F16), *w16 = cast(w, DT_F16), *b16 = cast(b, DT_F16);
    w16->hoisted = b16->hoisted = true;
    IrNode *h = NODE(OP_LINEAR, S3(8, 2, 3), DT_F16, x16, w16, b16);
    h->cls = CL_LOWP;
    IrNode *logits = cast(h, DT_F32);
    IrNode *loss = NODE(OP_CROSS_ENTROPY, S0, DT_F32, logits, labels);
    IrNode *acc = NODE(OP_ACCURACY, S0, DT_F32, logits, labels);
    ir_add_metric(g, "accuracy", acc->loc, acc);
    backward(loss);

    IrNode *dl = bwd(OP_CROSS_ENTROPY_GRAD, loss);
    assert_node(dl, OP_CROSS_ENTROPY_GRAD, S3(8, 2, 3), DT_F32, DT_F32);
    assert_inputs(dl, 4, g->loss_scale, logits, labels, loss);   /* the loss: its rows' statistics */
    assert_true(loss->ia[2] == 1);
    IrNode *dh = bwd(OP_CAST, logits);
    assert_node(dh, OP_CAST, S3(8, 2, 3), DT_F16, DT_F32);
    assert_inputs(dh, 1, dl);
    IrNode *dw = bwd(OP_MATMUL_TN, h);
    assert_node(dw, OP_MATMUL_TN, S2(3, 4), DT_F16, DT_F16);
    assert_inputs(dw, 2, dh, x16);
    assert_int_equal(dw->cls, CL_LOWP);
    IrNode *db = bwd(OP_SUM_TO, h);
    assert_node(db, OP_SUM_TO, S1(3), DT_F16, DT_F16);
    assert_inputs(db, 1, dh);
    assert_int_equal(count_bwd(OP_MATMUL, h), 0);   /* x is data */
    assert_node(P(w)->grad, OP_CAST, S2(3, 4), DT_F32, DT_F16);
    assert_inputs(P(w)->grad, 1, dw);
    assert_node(P(b)->grad, OP_CAST, S1(3), DT_F32, DT_F16);
    assert_int_equal(count_of(acc), 0);
    assert_int_equal(count_of(x16), 0);
    assert_int_equal(g->nnodes, 11 + 7);
}

static void test_linear_dx_without_bias(void **state)
{
    (void)state;
    IrNode *x = param("x", S2(8, 4)), *w = param("w", S2(3, 4));
    IrNode *h = NODE(OP_LINEAR, S2(8, 3), DT_F32, x, w);
    backward(sum_all(h));
    IrNode *dx = P(x)->grad;
    assert_node(dx, OP_MATMUL, S2(8, 4), DT_F32, DT_F32);
    assert_inputs(dx, 2, dy_of_sum(g->loss), w);
    assert_true(dx->ia[0] == 0 && dx->ia[1] == 0);
    assert_int_equal(count_of(h), 2);
}

static void test_conv2d(void **state)
{
    (void)state;
    IrNode *x = param("x", S4(2, 3, 8, 8)), *w = param("c.weight", S4(4, 3, 3, 3));
    IrNode *b = param("c.bias", S1(4));
    IrNode *y = NODE(OP_CONV2D, S4(2, 4, 4, 4), DT_F32, x, w, b);
    y->ia[0] = 2, y->ia[1] = 1;
    backward(sum_all(y));
    IrNode *dy = dy_of_sum(g->loss);
    IrNode *dx = P(x)->grad, *dw = P(w)->grad, *db = P(b)->grad;
    assert_node(dx, OP_CONV2D_DX, S4(2, 3, 8, 8), DT_F32, DT_F32);
    assert_inputs(dx, 2, dy, w);
    assert_node(dw, OP_CONV2D_DW, S4(4, 3, 3, 3), DT_F32, DT_F32);
    assert_inputs(dw, 2, dy, x);
    assert_true(dx->ia[0] == 2 && dx->ia[1] == 1 && dw->ia[0] == 2 && dw->ia[1] == 1);
    assert_node(db, OP_CHANNEL_SUM, S1(4), DT_F32, DT_F32);
    assert_inputs(db, 1, dy);
}

/* ---- one-input ops -------------------------------------------------------------- */

/* Each activation's gradient node and whether it reads x or the output y. */
static void test_activations(void **state)
{
    (void)state;
    static const struct { IrOp op, grad; bool from_y; } acts[] = {
        {OP_RELU, OP_RELU_GRAD, false},   {OP_GELU, OP_GELU_GRAD, false},
        {OP_SILU, OP_SILU_GRAD, false},   {OP_TANH, OP_TANH_GRAD, true},
        {OP_SIGMOID, OP_SIGMOID_GRAD, true}, {OP_EXP, OP_MUL, true},
        {OP_LOG, OP_DIV, false},          {OP_SQRT, OP_SQRT_GRAD, true},
        {OP_RSQRT, OP_RSQRT_GRAD, true},   {OP_ABS, OP_ABS_GRAD, false},
        {OP_SIN, OP_SIN_GRAD, false},     {OP_COS, OP_COS_GRAD, false},
        {OP_CLAMP, OP_CLAMP_GRAD, false}, {OP_POW, OP_POW_GRAD, false},
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        teardown(state), setup(state);
        IrNode *w = param("w", S2(2, 5));
        IrNode *w16 = cast(w, DT_F16);
        IrNode *y = NODE(acts[i].op, S2(2, 5), DT_F16, w16), *y32 = cast(y, DT_F32);
        backward(sum_all(y32));
        IrNode *d = bwd(acts[i].grad, y);
        assert_node(d, acts[i].grad, S2(2, 5), DT_F16, DT_F16);
        assert_inputs(d, 2, bwd(OP_CAST, y32), acts[i].from_y ? y : w16);
        assert_ptr_equal(P(w)->grad->in[0], d);
    }
}

static void test_dropout_copies_attrs(void **state)
{
    (void)state;
    IrNode *w = param("w", S2(2, 5));
    IrNode *y = NODE(OP_DROPOUT, S2(2, 5), DT_F32, w);
    y->fa[0] = 0.25;
    backward(sum_all(y));
    IrNode *d = P(w)->grad;
    assert_node(d, OP_DROPOUT_GRAD, S2(2, 5), DT_F32, DT_F32);
    assert_inputs(d, 1, dy_of_sum(g->loss));
    assert_true(d->fa[0] == 0.25);
    assert_ptr_equal(d->grad_of, y);             /* the mask is the forward node's */
}

static void test_views(void **state)
{
    (void)state;
    IrNode *w = param("w", S3(2, 3, 4));
    IrNode *t = NODE(OP_TRANSPOSE, S3(3, 4, 2), DT_F32, w);
    t->ia[0] = 1, t->ia[1] = 2, t->ia[2] = 0;
    IrNode *f = NODE(OP_FLATTEN, S2(3, 8), DT_F32, t);
    IrNode *r = NODE(OP_RESHAPE, S1(24), DT_F32, f);
    backward(sum_all(r));
    IrNode *dr = bwd(OP_RESHAPE, r), *df = bwd(OP_RESHAPE, f), *dt = bwd(OP_TRANSPOSE, t);
    assert_node(dr, OP_RESHAPE, S2(3, 8), DT_F32, DT_F32);
    assert_node(df, OP_RESHAPE, S3(3, 4, 2), DT_F32, DT_F32);
    assert_inputs(df, 1, dr);
    assert_node(dt, OP_TRANSPOSE, S3(2, 3, 4), DT_F32, DT_F32);
    assert_inputs(dt, 1, df);
    assert_true(dt->ia[0] == 2 && dt->ia[1] == 0 && dt->ia[2] == 1);
    assert_ptr_equal(P(w)->grad, dt);
}

/* All parts of a chunk used: x's gradient is one concat of theirs. One part
 * unused: each used part's gradient is zero-padded (slice_grad) and summed. */
static IrNode *part(IrNode *x, Shape s, int64_t axis, int64_t n, int64_t k)
{
    IrNode *p = NODE(OP_CHUNK, s, DT_F32, x);
    p->ia[0] = axis, p->ia[1] = n, p->ia[2] = k;
    return p;
}

static void test_chunk_parts(void **state)
{
    (void)state;
    IrNode *w = param("w", S2(2, 6));
    IrNode *q = part(w, S2(2, 2), 1, 3, 0), *k = part(w, S2(2, 2), 1, 3, 1), *v = part(w, S2(2, 2), 1, 3, 2);
    IrNode *a = NODE(OP_MUL, S2(2, 2), DT_F32, q, k);
    backward(sum_all(NODE(OP_ADD, S2(2, 2), DT_F32, a, v)));
    IrNode *cat = bwd(OP_CONCAT, v);
    assert_node(cat, OP_CONCAT, S2(2, 6), DT_F32, DT_F32);
    assert_int_equal(cat->nin, 3);
    assert_int_equal(cat->ia[0], 1);
    assert_int_equal(count_bwd(OP_SLICE_GRAD, NULL), 0);
    assert_ptr_equal(P(w)->grad, cat);
}

static void test_chunk_part_unused(void **state)
{
    (void)state;
    IrNode *w = param("w", S2(2, 6));
    IrNode *q = part(w, S2(2, 3), 1, 2, 0);
    part(w, S2(2, 3), 1, 2, 1);
    backward(sum_all(q));
    IrNode *d = bwd(OP_SLICE_GRAD, q);
    assert_node(d, OP_SLICE_GRAD, S2(2, 6), DT_F32, DT_F32);
    assert_true(d->ia[0] == 1 && d->ia[1] == 0 && d->ia[2] == 3);
    assert_int_equal(count_bwd(OP_CONCAT, NULL), 0);
}

static void test_pools(void **state)
{
    (void)state;
    IrNode *x = param("x", S4(2, 3, 8, 8));
    IrNode *m = NODE(OP_MAX_POOL2D, S4(2, 3, 4, 4), DT_F32, x);
    m->ia[0] = 2, m->ia[1] = 2;
    IrNode *a = NODE(OP_AVG_POOL2D, S4(2, 3, 3, 3), DT_F32, m);
    a->ia[0] = 2, a->ia[1] = 1;
    IrNode *p = NODE(OP_GLOBAL_AVG_POOL, S2(2, 3), DT_F32, a);
    backward(sum_all(p));
    IrNode *dp = bwd(OP_GLOBAL_AVG_POOL_GRAD, p);
    assert_node(dp, OP_GLOBAL_AVG_POOL_GRAD, S4(2, 3, 3, 3), DT_F32, DT_F32);
    IrNode *da = bwd(OP_AVG_POOL2D_GRAD, a);
    assert_node(da, OP_AVG_POOL2D_GRAD, S4(2, 3, 4, 4), DT_F32, DT_F32);
    assert_inputs(da, 1, dp);
    assert_true(da->ia[0] == 2 && da->ia[1] == 1);
    IrNode *dm = bwd(OP_MAX_POOL2D_GRAD, m);
    assert_node(dm, OP_MAX_POOL2D_GRAD, S4(2, 3, 8, 8), DT_F32, DT_F32);
    assert_inputs(dm, 2, da, x);
    assert_true(dm->ia[0] == 2 && dm->ia[1] == 2);
}

static void test_embedding_weight_only(void **state)
{
    (void)state;
    IrNode *ids = input("ids", DT_I32, S2(2, 5)), *w = param("e.weight", S2(10, 4));
    IrNode *w16 = cast(w, DT_F16);
    IrNode *e = NODE(OP_EMBEDDING, S3(2, 5, 4), DT_F16, ids, w16), *e32 = cast(e, DT_F32);
    backward(sum_all(e32));
    IrNode *dw = bwd(OP_EMBEDDING_DW, e);
    assert_node(dw, OP_EMBEDDING_DW, S2(10, 4), DT_F16, DT_F16);
    assert_inputs(dw, 2, bwd(OP_CAST, e32), ids);
    assert_int_equal(count_of(e), 1);
    assert_node(P(w)->grad, OP_CAST, S2(10, 4), DT_F32, DT_F16);
}

static void test_softmax_axis(void **state)
{
    (void)state;
    static const IrOp ops[2][2] = {{OP_SOFTMAX, OP_SOFTMAX_GRAD}, {OP_LOG_SOFTMAX, OP_LOG_SOFTMAX_GRAD}};
    for (int i = 0; i < 2; i++) {
        teardown(state), setup(state);
        IrNode *w = param("w", S2(4, 6));
        IrNode *y = NODE(ops[i][0], S2(4, 6), DT_F32, w);
        y->ia[0] = 1;
        backward(sum_all(y));
        IrNode *d = P(w)->grad;
        assert_node(d, ops[i][1], S2(4, 6), DT_F32, DT_F32);
        assert_inputs(d, 2, dy_of_sum(g->loss), y);
        assert_int_equal(d->ia[0], 1);
    }
}

/* ---- norms, losses, attention ----------------------------------------------------- */

static void test_layer_norm(void **state)
{
    (void)state;
    IrNode *x = param("x", S3(2, 3, 8)), *w = param("ln.weight", S1(8)), *b = param("ln.bias", S1(8));
    IrNode *y = NODE(OP_LAYER_NORM, S3(2, 3, 8), DT_F32, x, w, b);
    y->fa[0] = 1e-5;
    backward(sum_all(y));
    IrNode *dy = dy_of_sum(g->loss);
    IrNode *dx = P(x)->grad, *dw = P(w)->grad, *db = P(b)->grad;
    assert_node(dx, OP_LAYER_NORM_DX, S3(2, 3, 8), DT_F32, DT_F32);
    assert_inputs(dx, 3, dy, x, w);
    assert_node(dw, OP_LAYER_NORM_DW, S1(8), DT_F32, DT_F32);
    assert_inputs(dw, 2, dy, x);
    assert_true(dx->fa[0] == 1e-5 && dw->fa[0] == 1e-5);
    assert_node(db, OP_SUM_TO, S1(8), DT_F32, DT_F32);
    assert_inputs(db, 1, dy);
}

static void test_batch_norm_running_stats_ignored(void **state)
{
    (void)state;
    IrNode *x = param("x", S4(2, 3, 4, 4)), *w = param("bn.weight", S1(3));
    IrNode *b = param("bn.bias", S1(3));
    IrNode *rm = param("bn.running_mean", S1(3)), *rv = param("bn.running_var", S1(3));
    P(rm)->trainable = P(rv)->trainable = false;
    IrNode *y = NODE(OP_BATCH_NORM, S4(2, 3, 4, 4), DT_F32, x, w, b, rm, rv);
    y->fa[0] = 0.1, y->fa[1] = 1e-5;
    backward(sum_all(y));
    IrNode *dy = dy_of_sum(g->loss);
    IrNode *dx = P(x)->grad, *dw = P(w)->grad, *db = P(b)->grad;
    assert_node(dx, OP_BATCH_NORM_DX, S4(2, 3, 4, 4), DT_F32, DT_F32);
    assert_inputs(dx, 3, dy, x, w);
    assert_node(dw, OP_BATCH_NORM_DW, S1(3), DT_F32, DT_F32);
    assert_inputs(dw, 2, dy, x);
    assert_true(dx->fa[1] == 1e-5 && dw->fa[1] == 1e-5 && dx->fa[0] == 0.1);
    assert_node(db, OP_CHANNEL_SUM, S1(3), DT_F32, DT_F32);
    assert_null(P(rm)->grad);
    assert_null(P(rv)->grad);
    assert_int_equal(count_of(y), 3);
}

static void test_mse_target_data(void **state)
{
    (void)state;
    IrNode *p = param("p", S2(4, 6)), *t = input("t", DT_F32, S2(4, 6));
    IrNode *loss = NODE(OP_MSE, S0, DT_F32, p, t);
    backward(loss);
    IrNode *d = P(p)->grad;
    assert_node(d, OP_MSE_GRAD, S2(4, 6), DT_F32, DT_F32);
    assert_inputs(d, 3, g->loss_scale, p, t);
    assert_int_equal(count_of(loss), 2);         /* the seed and MSE_GRAD */
}

static void test_mse_trainable_broadcast_target(void **state)
{
    (void)state;
    IrNode *p = param("p", S2(4, 6)), *u = param("u", S1(6));
    IrNode *loss = NODE(OP_MSE, S0, DT_F32, p, u);
    backward(loss);
    IrNode *d = P(p)->grad;
    assert_node(d, OP_MSE_GRAD, S2(4, 6), DT_F32, DT_F32);
    IrNode *neg = bwd(OP_NEG, loss);
    assert_node(neg, OP_NEG, S2(4, 6), DT_F32, DT_F32);
    assert_inputs(neg, 1, d);
    assert_node(P(u)->grad, OP_SUM_TO, S1(6), DT_F32, DT_F32);
    assert_inputs(P(u)->grad, 1, neg);
}

/* The i-th SLICE of attention y's one gradient node (in the order made). */
static IrNode *attn_slice(const IrNode *y, int i)
{
    for (int j = 0; j < g->nnodes; j++)
        if (g->nodes[j]->op == OP_SLICE && g->nodes[j]->grad_of == y && i-- == 0)
            return g->nodes[j];
    return NULL;
}

/* One ATTENTION_GRAD node [B, H, T + 2T', D]; dq and dv its slices along
 * axis 2 (k, an input, wants none). */
static void test_attention(void **state)
{
    (void)state;
    IrNode *q = param("q", S4(2, 2, 5, 4)), *k = input("k", DT_F16, S4(2, 2, 5, 4));
    IrNode *v = param("v", S4(2, 2, 5, 4));
    IrNode *q16 = cast(q, DT_F16), *v16 = cast(v, DT_F16);
    IrNode *y = NODE(OP_ATTENTION, S4(2, 2, 5, 4), DT_F16, q16, k, v16);
    y->ia[0] = 1;
    IrNode *y32 = cast(y, DT_F32);
    backward(sum_all(y32));
    IrNode *dy = bwd(OP_CAST, y32), *all = bwd(OP_ATTENTION_GRAD, y);
    assert_node(all, OP_ATTENTION_GRAD, S4(2, 2, 15, 4), DT_F16, DT_F16);
    assert_inputs(all, 5, dy, q16, k, v16, y);   /* f16, D 4: y and its log-sum-exp kept */
    assert_true(all->ia[0] == 1 && y->ia[2] == 1);
    assert_int_equal(count_bwd(OP_SLICE, y), 2);
    IrNode *dq = attn_slice(y, 0), *dv = attn_slice(y, 1);
    assert_node(dq, OP_SLICE, S4(2, 2, 5, 4), DT_F16, DT_F16);
    assert_node(dv, OP_SLICE, S4(2, 2, 5, 4), DT_F16, DT_F16);
    assert_inputs(dq, 1, all);
    assert_true(dq->ia[0] == 2 && dq->ia[1] == 0 && dq->ia[2] == 5);
    assert_true(dv->ia[0] == 2 && dv->ia[1] == 10 && dv->ia[2] == 15);
    assert_node(P(q)->grad, OP_CAST, S4(2, 2, 5, 4), DT_F32, DT_F16);
}

/* q, k, v of different types and lengths: the gradient node is f32, each
 * slice cast once to its input's type. */
static void test_attention_cross(void **state)
{
    (void)state;
    IrNode *q = param("q", S4(1, 2, 3, 4)), *k = param("k", S4(1, 2, 6, 4));
    IrNode *v = param("v", S4(1, 2, 6, 4)), *k16 = cast(k, DT_F16);
    IrNode *y = NODE(OP_ATTENTION, S4(1, 2, 3, 4), DT_F32, q, k16, v);
    backward(sum_all(y));
    IrNode *all = bwd(OP_ATTENTION_GRAD, y);
    assert_node(all, OP_ATTENTION_GRAD, S4(1, 2, 15, 4), DT_F32, DT_F32);
    assert_int_equal(all->nin, 4);   /* f32: the tiles keep nothing from the forward */
    assert_true(y->ia[2] == 0);
    assert_int_equal(count_bwd(OP_SLICE, y), 3);
    IrNode *dk = attn_slice(y, 1), *dv = attn_slice(y, 2);
    assert_node(dk, OP_SLICE, S4(1, 2, 6, 4), DT_F32, DT_F32);
    assert_true(dk->ia[1] == 3 && dk->ia[2] == 9 && dv->ia[1] == 9 && dv->ia[2] == 15);
    assert_node(bwd(OP_CAST, y), OP_CAST, S4(1, 2, 6, 4), DT_F16, DT_F32);
    assert_inputs(bwd(OP_CAST, y), 1, dk);
    assert_ptr_equal(P(v)->grad, dv);
}

/* ---- what gets no gradient ------------------------------------------------------------ */

static void test_only_loss_dependencies(void **state)
{
    (void)state;
    IrNode *w = param("w", S1(3)), *m = param("m", S1(3));
    param("unused", S1(2));
    IrNode *x = input("x", DT_F32, S1(3));
    IrNode *y = NODE(OP_MUL, S1(3), DT_F32, x, w);
    IrNode *side = NODE(OP_EXP, S1(3), DT_F32, y);   /* not in the loss */
    IrNode *metric = sum_all(NODE(OP_MUL, S1(3), DT_F32, side, m));
    ir_add_metric(g, "side", metric->loc, metric);
    backward(sum_all(y));
    assert_non_null(P(w)->grad);
    assert_null(P(m)->grad);
    assert_null(g->params[2].grad);
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->phase == PH_BACKWARD && n->op != OP_LOSS_SCALE)
            assert_true(n->grad_of == y || n->grad_of == g->loss);
    }
    assert_int_equal(count_bwd(OP_MUL, y), 1);      /* dw only: x is data */
}

static void test_integer_values_have_no_gradient(void **state)
{
    (void)state;
    IrNode *w = param("w", S1(4)), *n = input("n", DT_I32, S1(4));
    IrNode *nf = cast(n, DT_F32);
    IrNode *y = NODE(OP_MUL, S1(4), DT_F32, nf, w);
    backward(sum_all(y));
    assert_int_equal(count_of(nf), 0);
    assert_int_equal(count_of(y), 1);
    assert_non_null(P(w)->grad);
}

static void test_accuracy_in_the_loss_is_an_error(void **state)
{
    (void)state;
    IrNode *w = param("w", S2(4, 3)), *labels = input("labels", DT_I32, S1(4));
    IrNode *acc = NODE(OP_ACCURACY, S0, DT_F32, w, labels);
    IrNode *loss = NODE(OP_ADD, S0, DT_F32, NODE(OP_CROSS_ENTROPY, S0, DT_F32, w, labels), acc);
    int before = diag_error_count();
    g->loss = loss;
    ad_backward(g);
    assert_int_equal(diag_error_count(), before + 1);
    assert_int_equal(count_of(acc), 0);
    assert_node(P(w)->grad, OP_CROSS_ENTROPY_GRAD, S2(4, 3), DT_F32, DT_F32);
}

static void test_no_trainable_dependency(void **state)
{
    (void)state;
    IrNode *x = input("x", DT_F32, S1(3));
    IrNode *rm = param("rm", S1(3));
    P(rm)->trainable = false;
    backward(sum_all(NODE(OP_MUL, S1(3), DT_F32, x, rm)));
    assert_non_null(g->loss_scale);
    assert_int_equal(g->nnodes, 5);               /* the seed only */
    assert_null(P(rm)->grad);
}

static int quiet_stderr(void)
{
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    close(null);
    return saved;
}

static void restore_stderr(int saved)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

/* ---- ad_check itself -------------------------------------------------------------------- */

static void test_check_catches_violations(void **state)
{
    (void)state;
    IrNode *a = param("a", S2(4, 6)), *b = param("b", S1(6));
    IrNode *y = NODE(OP_MUL, S2(4, 6), DT_F32, a, b);
    backward(sum_all(y));
    IrNode *db = P(b)->grad;
    int saved = quiet_stderr();
    db->loc.line++;
    bool loc_ok = ad_check(g);
    db->loc.line--;
    db->type = DT_F16;
    bool type_ok = ad_check(g);
    db->type = DT_F32;
    db->compute = DT_F16;
    bool compute_ok = ad_check(g);
    db->compute = DT_F32;
    P(b)->grad = NULL;
    bool grad_ok = ad_check(g);
    P(b)->grad = db;
    restore_stderr(saved);
    assert_false(loc_ok);
    assert_false(type_ok);
    assert_false(compute_ok);
    assert_false(grad_ok);
    assert_true(ad_check(g));
}

/* ---- the real pipeline on every model ------------------------------------------------ */

/* sema -> prec_forward -> ad_backward, as mpcc runs them; NULL on errors. */
static IrGraph *compile(const char *path, Policy policy)
{
    int before = diag_error_count();
    SrcFile *f = ast_read_file(&arena, path);
    if (!f)
        return NULL;
    IrGraph *pg = sema_lower(&arena, ast_parse(&arena, f), (int)policy);
    if (!pg || diag_error_count() != before)
        return NULL;
    prec_forward(pg);
    ad_backward(pg);
    return diag_error_count() == before ? pg : NULL;
}

/* Every backward node and parameter of every model keeps the invariants,
 * and each shape rule agrees with the shapes autodiff set. */
static void test_every_model(void **state)
{
    (void)state;
    static const Policy policies[] = {POLICY_FLOAT32, POLICY_MIXED_F16, POLICY_MIXED_BF16};
    glob_t gl;
    assert_int_equal(glob("examples/*.mp", 0, NULL, &gl), 0);
    assert_int_equal(glob("tests/gradcheck/*.mp", GLOB_APPEND, NULL, &gl), 0);
    assert_true(gl.gl_pathc >= 10);
    for (size_t i = 0; i < gl.gl_pathc; i++)
        for (int p = 0; p < 3; p++) {
            IrGraph *pg = compile(gl.gl_pathv[i], policies[p]);
            if (!pg || !ad_check(pg))
                fail_msg("%s under policy %d", gl.gl_pathv[i], p);
            int grads = 0;
            for (int k = 0; k < pg->nparams; k++)
                grads += pg->params[k].grad != NULL;
            assert_true(grads > 0);
        }
    globfree(&gl);
}

/* ---- elementwise, norm and rope additions ------------------------------------- */

/* maximum / minimum: dy times a mask of the broadcast shape, which SUM_TO
 * brings back to a broadcast operand; minimum swaps the mask's operands. */
static void test_maximum_minimum_masks(void **state)
{
    for (int max = 0; max < 2; max++) {
        teardown(state), setup(state);
        IrNode *w = param("w", S2(2, 5)), *v = param("v", S1(5));
        IrNode *y = NODE(max ? OP_MAXIMUM : OP_MINIMUM, S2(2, 5), DT_F32, w, v);
        backward(sum_all(y));
        IrNode *dy = dy_of_sum(g->loss), *dw = P(w)->grad, *dv = P(v)->grad;
        assert_node(dw, OP_MUL, S2(2, 5), DT_F32, DT_F32);
        assert_int_equal(dw->in[1]->op, OP_MAXIMUM_MASK);
        assert_inputs(dw->in[1], 2, max ? w : v, max ? v : w);
        assert_ptr_equal(dw->in[0], dy);
        assert_node(dv, OP_SUM_TO, S1(5), DT_F32, DT_F32);
        assert_int_equal(dv->in[0]->op, OP_MUL);
        assert_inputs(dv->in[0]->in[1], 2, max ? v : w, max ? w : v);
    }
}

static void test_rms_norm_and_rope(void **state)
{
    (void)state;
    IrNode *x = param("x", S2(3, 8)), *w = param("w", S1(8));
    IrNode *n = NODE(OP_RMS_NORM, S2(3, 8), DT_F32, x, w);
    n->fa[0] = 0.25;
    IrNode *r = NODE(OP_ROPE, S2(3, 8), DT_F32, n);
    r->ia[0] = 0, r->ia[1] = 1, r->fa[0] = 500;
    backward(sum_all(r));
    IrNode *dr = bwd(OP_ROPE_GRAD, r);
    assert_inputs(dr, 1, dy_of_sum(g->loss));
    assert_true(dr->ia[1] == 1 && dr->fa[0] == 500);
    IrNode *dx = P(x)->grad, *dw = P(w)->grad;
    assert_node(dx, OP_RMS_NORM_DX, S2(3, 8), DT_F32, DT_F32);
    assert_inputs(dx, 3, dr, x, w);
    assert_node(dw, OP_RMS_NORM_DW, S1(8), DT_F32, DT_F32);
    assert_inputs(dw, 2, dr, x);
    assert_true(dx->fa[0] == 0.25 && dw->fa[0] == 0.25);
}

int main(void)
{
    diag_init(fopen("/dev/null", "w"));     /* the expected user errors */
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_seed_and_sum),
        T(test_mean_over_axis),
        T(test_loss_f16_gets_f16_seed),
        T(test_non_scalar_loss_is_an_error),
        T(test_add_broadcast_reduces),
        T(test_sub_negates_then_reduces),
        T(test_mul_by_const_and_neg),
        T(test_div_both_sides),
        T(test_follow_mixed_types),
        T(test_broadcast_product_rounds_once),
        T(test_fan_out_sums_in_arrival_order),
        T(test_fan_out_of_f16_copy),
        T(test_matmul_leading_dims),
        T(test_matmul_batched),
        T(test_matmul_transposed_b),
        T(test_matmul_transposed_a),
        T(test_linear_mixed_f16),
        T(test_linear_dx_without_bias),
        T(test_conv2d),
        T(test_chunk_parts),
        T(test_chunk_part_unused),
        T(test_activations),
        T(test_dropout_copies_attrs),
        T(test_views),
        T(test_pools),
        T(test_embedding_weight_only),
        T(test_softmax_axis),
        T(test_layer_norm),
        T(test_batch_norm_running_stats_ignored),
        T(test_mse_target_data),
        T(test_mse_trainable_broadcast_target),
        T(test_attention),
        T(test_attention_cross),
        T(test_only_loss_dependencies),
        T(test_integer_values_have_no_gradient),
        T(test_accuracy_in_the_loss_is_an_error),
        T(test_no_trainable_dependency),
        T(test_check_catches_violations),
        T(test_every_model),
        T(test_maximum_minimum_masks),
        T(test_rms_norm_and_rope),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
