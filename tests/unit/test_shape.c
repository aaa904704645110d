/* test_shape.c - every shape rule of shape.c on hand-built IR nodes.
 *
 * Each rule is run on inputs that fit (the result shape and type are
 * checked) and on inputs that do not (the rule must return false and report
 * one error with the expected wording; nothing may crash). Dimensions near
 * the int64 limits check that overflow is reported, not undefined. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "ops.h"
#include "shape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static Arena arena;
static IrGraph *g;
static char *msgs;
static size_t msgs_len;
static FILE *msgf;

static int setup(void **state)
{
    (void)state;
    arena_init(&arena);
    g = ir_new(&arena);
    msgf = open_memstream(&msgs, &msgs_len);
    diag_init(msgf);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    fclose(msgf);
    free(msgs);
    arena_free(&arena);
    return 0;
}

static Shape shp(int rank, ...)
{
    Shape s = {.rank = rank};
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++)
        s.d[i] = va_arg(ap, int64_t);
    va_end(ap);
    return s;
}
#define S(...) shp(__VA_ARGS__)
#define L(x) ((int64_t)(x))

/* A value of the given shape: an input of type t (DT_NONE: a float that
 * the precision pass has not typed yet, made as a RELU of nothing). */
static IrNode *val(DType t, Shape s)
{
    IrNode *n = ir_add(g, OP_CONST, (SrcLoc){0}, 0, NULL);
    n->shape = s;
    n->type = t;
    n->name = "v";
    return n;
}
static IrNode *fl(Shape s) { return val(DT_NONE, s); }

static IrNode *mk(IrOp op, int nin, ...)
{
    IrNode *in[8];
    va_list ap;
    va_start(ap, nin);
    for (int i = 0; i < nin; i++)
        in[i] = va_arg(ap, IrNode *);
    va_end(ap);
    return ir_add(g, op, (SrcLoc){0}, nin, in);
}

static bool run(IrNode *n) { return op_info[n->op].shape(g, n); }

static void expect_shape(IrNode *n, Shape want)
{
    int before = diag_error_count();
    if (!run(n)) {
        fflush(msgf);
        fail_msg("rule of %s failed: %s", op_info[n->op].name, msgs);
    }
    assert_int_equal(diag_error_count(), before);
    if (!shape_eq(&n->shape, &want))
        fail_msg("%s gave %s, expected %s", op_info[n->op].name, shape_str(&arena, &n->shape),
                 shape_str(&arena, &want));
}

/* The rule fails with exactly one new error containing `text`. */
static void expect_error(IrNode *n, const char *text)
{
    fflush(msgf);
    size_t start = msgs_len;
    int before = diag_error_count();
    assert_false(run(n));
    assert_int_equal(diag_error_count(), before + 1);
    fflush(msgf);
    if (!strstr(msgs + start, text))
        fail_msg("expected an error containing \"%s\", got \"%s\"", text, msgs + start);
}

/* chunk, slice, concat, expand, arange; rank 8 through each */
static IrNode *attrs(IrNode *n, int64_t a, int64_t b, int64_t c)
{
    n->ia[0] = a, n->ia[1] = b, n->ia[2] = c;
    return n;
}

static void structural(void **state)
{
    (void)state;
    IrNode *x = val(DT_U16, S(3, L(2), L(12), L(5)));
    IrNode *c = attrs(mk(OP_CHUNK, 1, x), 1, 3, 2);
    expect_shape(c, S(3, L(2), L(4), L(5)));
    assert_int_equal(c->type, DT_U16);
    expect_error(attrs(mk(OP_CHUNK, 1, x), 2, 3, 0), "chunk of [2, 12, 5] into 3 parts along axis 2: 5 is not divisible by 3");
    expect_error(attrs(mk(OP_CHUNK, 1, x), 3, 3, 0), "chunk axis 3 is out of range for [2, 12, 5]");
    expect_shape(attrs(mk(OP_SLICE, 1, x), 1, 11, 12), S(3, L(2), L(1), L(5)));
    expect_error(attrs(mk(OP_SLICE, 1, x), 1, 4, 4), "slice [4, 4) along axis 1 is empty or outside 0..12");
    expect_error(attrs(mk(OP_SLICE, 1, x), 1, 0, 13), "outside 0..12");

    IrNode *in[3] = {fl(S(2, L(3), L(1))), fl(S(2, L(3), L(4))), fl(S(2, L(3), L(2)))};
    IrNode *cat = attrs(ir_add(g, OP_CONCAT, (SrcLoc){0}, 3, in), 1, 0, 0);
    expect_shape(cat, S(2, L(3), L(7)));
    cat = attrs(ir_add(g, OP_CONCAT, (SrcLoc){0}, 3, in), 0, 0, 0);
    expect_error(cat, "concat along axis 0 needs the other axes equal, got [3, 1] and [3, 4]");
    IrNode *mixed[2] = {val(DT_I32, S(1, L(3))), val(DT_U8, S(1, L(3)))};
    expect_error(attrs(ir_add(g, OP_CONCAT, (SrcLoc){0}, 2, mixed), 0, 0, 0),
                 "concat needs operands of one type, got i32 and u8");

    IrNode *e = mk(OP_EXPAND, 1, fl(S(2, L(1), L(4))));
    e->shape = S(4, L(2), L(3), L(5), L(-1));
    expect_shape(e, S(4, L(2), L(3), L(5), L(4)));
    expect_shape(e, S(4, L(2), L(3), L(5), L(4)));     /* run again: the same */
    e = mk(OP_EXPAND, 1, fl(S(2, L(2), L(4))));
    e->shape = S(2, L(3), L(4));
    expect_error(e, "expand of [2, 4] to [3, 4]");
    e = mk(OP_EXPAND, 1, fl(S(2, L(1), L(4))));
    e->shape = S(1, L(4));
    expect_error(e, "new axes go first");

    IrNode *a = attrs(mk(OP_ARANGE, 0), 7, 0, 0);
    expect_shape(a, S(1, L(7)));
    assert_int_equal(a->type, DT_I32);
    expect_error(attrs(mk(OP_ARANGE, 0), 0, 0, 0), "arange needs a length in 1..");

    /* rank 8: the most a tensor has */
    Shape r8 = S(8, L(2), L(1), L(3), L(1), L(2), L(1), L(2), L(4));
    IrNode *big = fl(r8);
    expect_shape(attrs(mk(OP_SLICE, 1, big), 7, 1, 3), S(8, L(2), L(1), L(3), L(1), L(2), L(1), L(2), L(2)));
    expect_shape(attrs(mk(OP_CHUNK, 1, big), 0, 2, 1), S(8, L(1), L(1), L(3), L(1), L(2), L(1), L(2), L(4)));
    e = mk(OP_EXPAND, 1, big);
    e->shape = S(8, L(2), L(5), L(3), L(5), L(2), L(5), L(2), L(4));
    expect_shape(e, e->shape);
    IrNode *sum = mk(OP_ADD, 2, big, fl(S(8, L(1), L(6), L(1), L(7), L(1), L(2), L(1), L(1))));
    expect_shape(sum, S(8, L(2), L(6), L(3), L(7), L(2), L(2), L(2), L(4)));
    IrNode *t = mk(OP_TRANSPOSE, 1, big);
    for (int i = 0; i < 8; i++)
        t->ia[i] = 7 - i;
    expect_shape(t, S(8, L(4), L(2), L(1), L(2), L(1), L(3), L(1), L(2)));
}

/* ---- leaves ------------------------------------------------------------ */

static void leaves(void **state)
{
    (void)state;
    IrInput *in = ir_add_input(g, "image", (SrcLoc){0}, DT_U8, S(2, L(128), L(784)));
    expect_shape(in->node, S(2, L(128), L(784)));
    assert_int_equal(in->node->type, DT_U8);
    IrParam *p = ir_add_param(g, "w", (SrcLoc){0}, S(2, L(784), L(10)));
    expect_shape(p->node, S(2, L(784), L(10)));
    assert_int_equal(p->node->type, DT_F32);
    IrNode *c = ir_add(g, OP_CONST, (SrcLoc){0}, 0, NULL);
    expect_shape(c, S(0));
    IrNode *cast = mk(OP_CAST, 1, in->node);
    cast->type = DT_F32;
    expect_shape(cast, S(2, L(128), L(784)));
    assert_int_equal(cast->type, DT_F32);
}

/* ---- elementwise ---------------------------------------------------------- */

static void broadcasting(void **state)
{
    (void)state;
    IrOp ops[] = {OP_ADD, OP_SUB, OP_MUL, OP_DIV};
    for (int i = 0; i < 4; i++) {
        expect_shape(mk(ops[i], 2, fl(S(2, L(128), L(512))), fl(S(1, L(512)))), S(2, L(128), L(512)));
        expect_shape(mk(ops[i], 2, fl(S(0)), fl(S(3, L(2), L(1), L(4)))), S(3, L(2), L(1), L(4)));
        expect_shape(mk(ops[i], 2, fl(S(3, L(2), L(1), L(4))), fl(S(2, L(3), L(1)))), S(3, L(2), L(3), L(4)));
        expect_error(mk(ops[i], 2, fl(S(2, L(128), L(512))), fl(S(1, L(10)))),
                     "cannot broadcast [128, 512] with [10]");
    }
}

static void integer_arithmetic_needs_a_cast(void **state)
{
    (void)state;
    IrNode *img = val(DT_U8, S(2, L(128), L(784)));
    img->name = "image";
    expect_error(mk(OP_DIV, 2, img, fl(S(0))),
                 "'/' needs a float tensor, got u8: cast it first, e.g. f32(image)");
    expect_error(mk(OP_ADD, 2, fl(S(0)), val(DT_I32, S(1, L(3)))), "'+' needs a float tensor, got i32");
    expect_error(mk(OP_RELU, 1, val(DT_I32, S(1, L(3)))), "relu needs a float tensor, got i32");
    expect_error(mk(OP_NEG, 1, val(DT_U8, S(1, L(3)))), "unary '-' needs a float tensor");
}

/* A value computed by the model (not a constant) of type t. */
static IrNode *computed(DType t, Shape s)
{
    IrNode *n = ir_add(g, OP_RELU, (SrcLoc){0}, 0, NULL);
    n->shape = s;
    n->type = t;
    n->name = "h";
    return n;
}

/* A mask or integer tensor next to a float tensor is promoted (torch);
 * integers with only constants still ask for a cast. */
static void integers_promote_next_to_a_float_tensor(void **state)
{
    (void)state;
    IrNode *m = mk(OP_MUL, 2, computed(DT_U8, S(2, L(4), L(10))), computed(DT_NONE, S(1, L(10))));
    expect_shape(m, S(2, L(4), L(10)));
    assert_int_equal(m->type, DT_NONE);
    expect_shape(mk(OP_DIV, 2, computed(DT_F16, S(1, L(3))), computed(DT_I32, S(1, L(3)))), S(1, L(3)));
    expect_error(mk(OP_MUL, 2, computed(DT_U8, S(1, L(3))), fl(S(0))), "'*' needs a float tensor, got u8");
    expect_error(mk(OP_ADD, 2, fl(S(0)), computed(DT_I32, S(1, L(3)))), "'+' needs a float tensor, got i32");
}

/* comparisons: any operands, broadcast, a u8 mask; where: three broadcast,
 * integer sides keep their type; full: its dims */
static void selection(void **state)
{
    (void)state;
    static const IrOp cmp[] = {OP_GT, OP_LT, OP_GE, OP_LE, OP_EQ, OP_NE};
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
        IrNode *c = mk(cmp[i], 2, computed(DT_I32, S(2, L(4), L(1))), fl(S(0)));
        expect_shape(c, S(2, L(4), L(1)));
        assert_int_equal(c->type, DT_U8);
        expect_shape(mk(cmp[i], 2, computed(DT_NONE, S(2, L(4), L(1))), computed(DT_F16, S(1, L(6)))),
                     S(2, L(4), L(6)));
    }
    expect_error(mk(OP_GE, 2, computed(DT_NONE, S(1, L(4))), computed(DT_NONE, S(1, L(6)))),
                 "'>=' cannot broadcast [4] with [6]");
    IrNode *w = mk(OP_WHERE, 3, computed(DT_U8, S(2, L(4), L(1))), computed(DT_NONE, S(1, L(6))), fl(S(0)));
    expect_shape(w, S(2, L(4), L(6)));
    assert_int_equal(w->type, DT_NONE);
    w = mk(OP_WHERE, 3, computed(DT_U8, S(3, L(2), L(1), L(1))), computed(DT_I32, S(1, L(6))), fl(S(0)));
    expect_shape(w, S(3, L(2), L(1), L(6)));
    assert_int_equal(w->type, DT_I32);
    expect_error(mk(OP_WHERE, 3, computed(DT_U8, S(1, L(5))), computed(DT_NONE, S(1, L(6))), fl(S(0))),
                 "where cannot broadcast [6] with [5]");
    IrNode *f = mk(OP_FULL, 0);
    f->shape = S(2, L(3), L(7));
    expect_shape(f, S(2, L(3), L(7)));
    assert_int_equal(f->type, DT_F32);
    f = mk(OP_FULL, 0);
    f->shape = S(2, L(3), L(0));
    expect_error(f, "full needs dimensions >= 1, got [3, 0]");
    IrNode *x = mk(OP_MAX, 1, computed(DT_NONE, S(3, L(2), L(4), L(5))));
    x->ia[0] = 1;
    expect_shape(x, S(2, L(2), L(5)));
    x = mk(OP_MIN, 1, computed(DT_NONE, S(1, L(4))));
    x->ia[0] = -1;
    expect_error(x, "min axis -1 is out of range for [4]");
    expect_error(mk(OP_MAX, 1, computed(DT_I32, S(1, L(4)))), "max needs a float tensor, got i32");
    x = mk(OP_ARGMIN, 1, computed(DT_U8, S(2, L(4), L(3))));
    x->ia[0] = 1;
    expect_shape(x, S(1, L(4)));
    assert_int_equal(x->type, DT_I32);
    IrNode *d = mk(OP_DETACH, 1, computed(DT_BF16, S(1, L(5))));
    expect_shape(d, S(1, L(5)));
    assert_int_equal(d->type, DT_BF16);
}

static void unary_ops_keep_shape(void **state)
{
    (void)state;
    IrOp ops[] = {OP_NEG, OP_RELU, OP_GELU, OP_TANH, OP_SIGMOID, OP_SILU,
                  OP_EXP, OP_LOG, OP_SQRT, OP_RSQRT, OP_ABS, OP_SIN, OP_COS, OP_POW};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        expect_shape(mk(ops[i], 1, fl(S(3, L(2), L(3), L(4)))), S(3, L(2), L(3), L(4)));
    IrNode *d = mk(OP_DROPOUT, 1, fl(S(1, L(5))));
    d->fa[0] = 0.5;
    expect_shape(d, S(1, L(5)));
    d = mk(OP_DROPOUT, 1, fl(S(1, L(5))));
    d->fa[0] = 1.0;
    expect_error(d, "dropout probability must be in [0, 1), got 1");
}

/* ---- products ---------------------------------------------------------------- */

static void matmul(void **state)
{
    (void)state;
    expect_shape(mk(OP_MATMUL, 2, fl(S(2, L(128), L(784))), fl(S(2, L(784), L(10)))), S(2, L(128), L(10)));
    expect_shape(mk(OP_MATMUL, 2, fl(S(3, L(4), L(128), L(784))), fl(S(2, L(784), L(10)))),
                 S(3, L(4), L(128), L(10)));
    expect_shape(mk(OP_MATMUL, 2, fl(S(3, L(4), L(5), L(6))), fl(S(3, L(4), L(6), L(7)))),
                 S(3, L(4), L(5), L(7)));
    expect_error(mk(OP_MATMUL, 2, fl(S(2, L(128), L(784))), fl(S(2, L(512), L(10)))),
                 "'@' needs matching inner dimensions, got [128, 784] @ [512, 10]");
    expect_error(mk(OP_MATMUL, 2, fl(S(3, L(4), L(5), L(6))), fl(S(3, L(3), L(6), L(7)))),
                 "'@' needs equal batch dimensions, got [4, 5, 6] @ [3, 6, 7]");
    expect_error(mk(OP_MATMUL, 2, fl(S(1, L(5))), fl(S(2, L(5), L(7)))), "'@' needs matrices");
    /* transpose flags on the last two axes (autodiff's use) */
    IrNode *t = mk(OP_MATMUL, 2, fl(S(2, L(128), L(10))), fl(S(2, L(784), L(10))));
    t->ia[1] = 1;
    expect_shape(t, S(2, L(128), L(784)));
    t = mk(OP_MATMUL, 2, fl(S(2, L(128), L(784))), fl(S(2, L(128), L(10))));
    t->ia[0] = 1;
    expect_shape(t, S(2, L(784), L(10)));
    expect_error(mk(OP_MATMUL, 2, val(DT_I32, S(2, L(2), L(2))), fl(S(2, L(2), L(2)))),
                 "'@' needs a float tensor, got i32");
}

static void linear(void **state)
{
    (void)state;
    IrNode *x = fl(S(3, L(4), L(7), L(784))), *w = fl(S(2, L(512), L(784))), *b = fl(S(1, L(512)));
    expect_shape(mk(OP_LINEAR, 3, x, w, b), S(3, L(4), L(7), L(512)));
    expect_shape(mk(OP_LINEAR, 2, x, w), S(3, L(4), L(7), L(512)));
    expect_error(mk(OP_LINEAR, 2, fl(S(2, L(4), L(100))), w), "linear weight [512, 784] needs inputs [..., 784], got [4, 100]");
    expect_error(mk(OP_LINEAR, 3, x, w, fl(S(1, L(3)))), "linear bias must be [512], got [3]");
    expect_error(mk(OP_LINEAR, 2, fl(S(0)), w), "linear needs an input [..., K], got []");
    expect_error(mk(OP_LINEAR, 1, x), "linear takes 2 to 3 operands, got 1");
}

/* ia[] as ops.def: strides, padding before, dilations, groups, after */
static IrNode *conv_g(Shape x, Shape w, int64_t stride, int64_t pad, int64_t dil, int64_t groups)
{
    IrNode *n = mk(OP_CONV2D, 2, fl(x), fl(w));
    int64_t a[8] = {stride, stride, pad, pad, dil, dil, groups, 0};
    memcpy(n->ia, a, sizeof a);
    return n;
}

static IrNode *conv(Shape x, Shape w, int64_t stride, int64_t pad)
{
    return conv_g(x, w, stride, pad, 1, 1);
}

static void conv2d(void **state)
{
    (void)state;
    expect_shape(conv(S(4, L(8), L(1), L(28), L(28)), S(4, L(16), L(1), L(3), L(3)), 1, 1),
                 S(4, L(8), L(16), L(28), L(28)));
    expect_shape(conv(S(4, L(8), L(3), L(32), L(32)), S(4, L(6), L(3), L(5), L(5)), 2, 0),
                 S(4, L(8), L(6), L(14), L(14)));   /* floor((32 - 5) / 2) + 1 */
    expect_shape(conv(S(4, L(1), L(1), L(5), L(7)), S(4, L(2), L(1), L(5), L(5)), 1, 0),
                 S(4, L(1), L(2), L(1), L(3)));
    expect_error(conv(S(2, L(128), L(784)), S(4, L(16), L(1), L(3), L(3)), 1, 0),
                 "conv2d needs NCHW input [N, C, H, W], got [128, 784]");
    expect_error(conv(S(4, L(8), L(3), L(28), L(28)), S(4, L(16), L(1), L(3), L(3)), 1, 0),
                 "conv2d weight [16, 1, 3, 3] does not fit input [8, 3, 28, 28]");
    expect_error(conv(S(4, L(8), L(1), L(2), L(2)), S(4, L(16), L(1), L(3), L(3)), 1, 0),
                 "conv2d kernel 3 x 3 (dilation 1 x 1) does not fit input [8, 1, 2, 2]");
    /* groups: weight [c, C / groups, k, k]; dilation widens the window */
    expect_shape(conv_g(S(4, L(2), L(6), L(9), L(9)), S(4, L(12), L(2), L(3), L(3)), 1, 1, 1, 3),
                 S(4, L(2), L(12), L(9), L(9)));
    expect_shape(conv_g(S(4, L(2), L(6), L(9), L(9)), S(4, L(6), L(1), L(3), L(3)), 2, 0, 2, 6),
                 S(4, L(2), L(6), L(3), L(3)));   /* (9 - 5) / 2 + 1 */
    expect_error(conv_g(S(4, L(2), L(6), L(9), L(9)), S(4, L(6), L(1), L(3), L(3)), 1, 0, 1, 4),
                 "conv2d groups 4 must divide the input channels 6 and the output channels 6");
    expect_error(conv_g(S(4, L(2), L(6), L(9), L(9)), S(4, L(6), L(6), L(3), L(3)), 1, 0, 1, 2),
                 "needs [c, 3, kh, kw]");
    expect_error(conv_g(S(4, L(2), L(6), L(4), L(9)), S(4, L(6), L(1), L(3), L(3)), 1, 0, 2, 6),
                 "does not fit");
    expect_error(conv_g(S(4, L(2), L(6), L(9), L(9)), S(4, L(6), L(1), L(3), L(3)), 1, 0, 0, 6),
                 "dilation >= 1");
    /* torch's "same" for k = 4: 1 before, 2 after (ia[7] = 2 eh + ew) */
    IrNode *same = conv(S(4, L(2), L(1), L(7), L(6)), S(4, L(3), L(1), L(4), L(2)), 1, 0);
    same->ia[2] = 1, same->ia[7] = 3;
    expect_shape(same, S(4, L(2), L(3), L(7), L(6)));
    expect_error(conv(S(4, L(8), L(1), L(8), L(8)), S(4, L(16), L(1), L(3), L(3)), 0, 0),
                 "stride >= 1");
    expect_error(conv(S(4, L(8), L(1), L(8), L(8)), S(4, L(16), L(1), L(3), L(3)), 1, -1),
                 "padding >= 0");
    /* padding so large that 2p + H overflows */
    expect_error(conv(S(4, L(8), L(1), L(8), L(8)), S(4, L(16), L(1), L(3), L(3)), 1, INT64_MAX / 2),
                 "does not fit");
    IrNode *n = mk(OP_CONV2D, 3, fl(S(4, L(8), L(1), L(8), L(8))), fl(S(4, L(16), L(1), L(3), L(3))),
                   fl(S(1, L(4))));
    n->ia[0] = n->ia[1] = n->ia[4] = n->ia[5] = n->ia[6] = 1;
    expect_error(n, "conv2d bias must be [16], got [4]");
}

static IrNode *attn(Shape q, Shape k, Shape v, bool causal)
{
    IrNode *n = mk(OP_ATTENTION, 3, fl(q), fl(k), fl(v));
    n->ia[0] = causal;
    return n;
}

static void attention(void **state)
{
    (void)state;
    Shape q = S(4, L(2), L(4), L(64), L(16)), kv = S(4, L(2), L(4), L(32), L(16));
    expect_shape(attn(q, q, q, true), q);
    expect_shape(attn(q, kv, kv, false), q);
    expect_error(attn(q, kv, kv, true), "causal attention needs q and k of the same length, got 64 and 32");
    expect_error(attn(q, kv, S(4, L(2), L(4), L(31), L(16)), false), "attention needs q [B, H, T, D]");
    expect_error(attn(q, S(4, L(2), L(4), L(64), L(8)), S(4, L(2), L(4), L(64), L(8)), false),
                 "attention needs q [B, H, T, D] and k, v [B, H, T', D]");
    expect_error(attn(S(3, L(2), L(64), L(16)), q, q, false), "attention needs q, k, v [B, H, T, D], got [2, 64, 16]");
}

/* ---- views --------------------------------------------------------------------- */

static IrNode *reshape(IrNode *x, Shape to)
{
    IrNode *n = mk(OP_RESHAPE, 1, x);
    n->shape = to;
    return n;
}

static void views(void **state)
{
    (void)state;
    IrNode *x = val(DT_I32, S(2, L(128), L(784)));
    IrNode *r = reshape(x, S(3, L(128), L(28), L(28)));
    expect_shape(r, S(3, L(128), L(28), L(28)));
    assert_int_equal(r->type, DT_I32);   /* views pass the type through */
    expect_shape(reshape(x, S(3, L(-1), L(28), L(28))), S(3, L(128), L(28), L(28)));
    expect_shape(reshape(x, S(1, L(-1))), S(1, L(100352)));
    expect_error(reshape(x, S(2, L(128), L(700))),
                 "reshape of [128, 784] (100352 elements) to [128, 700] (89600 elements): element counts differ");
    expect_error(reshape(x, S(2, L(-1), L(700))), "100352 is not a multiple of 700");
    expect_error(reshape(x, S(2, L(-1), L(-1))), "one -1 to infer");
    expect_error(reshape(x, S(2, L(0), L(784))), "dimensions must be >= 1");
    expect_error(reshape(x, S(3, INT64_MAX / 2, L(4), L(4))), "too many");

    IrNode *t = mk(OP_TRANSPOSE, 1, fl(S(3, L(2), L(3), L(4))));
    t->ia[0] = 2, t->ia[1] = 0, t->ia[2] = 1;
    expect_shape(t, S(3, L(4), L(2), L(3)));
    t = mk(OP_TRANSPOSE, 1, fl(S(3, L(2), L(3), L(4))));
    t->ia[0] = 0, t->ia[1] = 0, t->ia[2] = 1;
    expect_error(t, "transpose of [2, 3, 4] needs a permutation of 0..2");
    t = mk(OP_TRANSPOSE, 1, fl(S(2, L(2), L(3))));
    t->ia[0] = 5, t->ia[1] = 0;
    expect_error(t, "needs a permutation of 0..1");

    IrNode *f = mk(OP_FLATTEN, 1, val(DT_U8, S(4, L(8), L(1), L(28), L(28))));
    expect_shape(f, S(2, L(8), L(784)));
    assert_int_equal(f->type, DT_U8);
    expect_error(mk(OP_FLATTEN, 1, fl(S(1, L(8)))), "flatten needs an input [B, ...] of rank 2 or more, got [8]");
    expect_error(mk(OP_FLATTEN, 1, fl(S(4, L(2), INT64_MAX / 4, L(4), L(4)))), "too many elements");
}

/* ---- pooling --------------------------------------------------------------------- */

static IrNode *pool(IrOp op, Shape x, int64_t k, int64_t s)
{
    IrNode *n = mk(op, 1, fl(x));
    n->ia[0] = k;
    n->ia[1] = s;
    return n;
}

static void pooling(void **state)
{
    (void)state;
    IrOp ops[] = {OP_MAX_POOL2D, OP_AVG_POOL2D};
    for (int i = 0; i < 2; i++) {
        expect_shape(pool(ops[i], S(4, L(8), L(16), L(28), L(28)), 2, 2), S(4, L(8), L(16), L(14), L(14)));
        expect_shape(pool(ops[i], S(4, L(8), L(16), L(7), L(7)), 2, 2), S(4, L(8), L(16), L(3), L(3)));
        expect_shape(pool(ops[i], S(4, L(1), L(1), L(5), L(5)), 3, 1), S(4, L(1), L(1), L(3), L(3)));
        expect_error(pool(ops[i], S(4, L(8), L(16), L(1), L(1)), 2, 2), "kernel 2 does not fit input");
        expect_error(pool(ops[i], S(3, L(8), L(16), L(28)), 2, 2), "needs NCHW input [N, C, H, W], got [8, 16, 28]");
        expect_error(pool(ops[i], S(4, L(8), L(16), L(28), L(28)), 0, 2), "kernel >= 1");
    }
    expect_shape(mk(OP_GLOBAL_AVG_POOL, 1, fl(S(4, L(8), L(16), L(7), L(7)))), S(2, L(8), L(16)));
    expect_error(mk(OP_GLOBAL_AVG_POOL, 1, fl(S(2, L(8), L(16)))), "global_avg_pool needs NCHW input");
}

/* ---- embedding, reductions, norms ---------------------------------------------------- */

static void embedding(void **state)
{
    (void)state;
    IrNode *w = fl(S(2, L(65), L(64)));
    IrNode *e = mk(OP_EMBEDDING, 2, val(DT_I32, S(2, L(16), L(64))), w);
    expect_shape(e, S(3, L(16), L(64), L(64)));
    assert_int_equal(e->type, DT_NONE);   /* a float, typed by the precision pass */
    expect_error(mk(OP_EMBEDDING, 2, val(DT_F32, S(1, L(16))), w), "embedding needs integer ids (i32, u16 or u8), got f32");
    expect_error(mk(OP_EMBEDDING, 2, fl(S(1, L(16))), w), "embedding needs integer ids (i32, u16 or u8), got a float tensor");
    expect_error(mk(OP_EMBEDDING, 2, val(DT_I32, S(8, L(1), L(1), L(1), L(1), L(1), L(1), L(1), L(1))), w),
                 "embedding needs ids of rank below 8");
}

static IrNode *axis_op(IrOp op, Shape x, int64_t axis)
{
    IrNode *n = mk(op, 1, fl(x));
    n->ia[0] = axis;
    return n;
}

static void reductions(void **state)
{
    (void)state;
    IrOp ops[] = {OP_SUM, OP_MEAN};
    for (int i = 0; i < 2; i++) {
        expect_shape(axis_op(ops[i], S(3, L(2), L(3), L(4)), -1), S(0));
        expect_shape(axis_op(ops[i], S(3, L(2), L(3), L(4)), 1), S(2, L(2), L(4)));
        expect_shape(axis_op(ops[i], S(1, L(5)), 0), S(0));
        expect_error(axis_op(ops[i], S(2, L(2), L(3)), 2), "axis 2 is out of range for [2, 3]");
    }
    expect_shape(axis_op(OP_SOFTMAX, S(2, L(2), L(3)), 1), S(2, L(2), L(3)));
    expect_shape(axis_op(OP_LOG_SOFTMAX, S(2, L(2), L(3)), 0), S(2, L(2), L(3)));
    expect_error(axis_op(OP_SOFTMAX, S(2, L(2), L(3)), 3), "softmax axis 3 is out of range");
    expect_error(axis_op(OP_LOG_SOFTMAX, S(0), 0), "log_softmax axis 0 is out of range for []");
}

static void norms(void **state)
{
    (void)state;
    IrNode *ln = mk(OP_LAYER_NORM, 3, fl(S(3, L(2), L(5), L(64))), fl(S(1, L(64))), fl(S(1, L(64))));
    ln->fa[0] = 1e-5;
    expect_shape(ln, S(3, L(2), L(5), L(64)));
    ln = mk(OP_LAYER_NORM, 3, fl(S(2, L(2), L(32))), fl(S(1, L(64))), fl(S(1, L(64))));
    ln->fa[0] = 1e-5;
    expect_error(ln, "layer_norm needs parameters [32] for input [2, 32], got [64]");
    ln = mk(OP_LAYER_NORM, 3, fl(S(1, L(4))), fl(S(1, L(4))), fl(S(1, L(4))));
    expect_error(ln, "layer_norm needs eps > 0, got 0");

    Shape c = S(1, L(16));
    IrNode *bn = mk(OP_BATCH_NORM, 5, fl(S(4, L(8), L(16), L(7), L(7))), fl(c), fl(c), fl(c), fl(c));
    bn->fa[0] = 0.1, bn->fa[1] = 1e-5;
    expect_shape(bn, S(4, L(8), L(16), L(7), L(7)));
    bn = mk(OP_BATCH_NORM, 5, fl(S(2, L(8), L(16))), fl(c), fl(c), fl(c), fl(c));
    bn->fa[0] = 0.1, bn->fa[1] = 1e-5;
    expect_shape(bn, S(2, L(8), L(16)));
    bn = mk(OP_BATCH_NORM, 5, fl(S(3, L(8), L(16), L(3))), fl(c), fl(c), fl(c), fl(c));
    bn->fa[0] = 0.1, bn->fa[1] = 1e-5;
    expect_error(bn, "batch_norm needs an input [N, C, H, W] or [B, C], got [8, 16, 3]");
    bn = mk(OP_BATCH_NORM, 5, fl(S(2, L(8), L(32))), fl(c), fl(c), fl(c), fl(c));
    bn->fa[0] = 0.1, bn->fa[1] = 1e-5;
    expect_error(bn, "batch_norm needs parameters [32]");
    bn = mk(OP_BATCH_NORM, 5, fl(S(2, L(8), L(16))), fl(c), fl(c), fl(c), fl(c));
    bn->fa[0] = 1.5, bn->fa[1] = 1e-5;
    expect_error(bn, "momentum must be in [0, 1], got 1.5");
}

/* ---- losses and metrics ------------------------------------------------------------ */

static void losses(void **state)
{
    (void)state;
    IrOp ops[] = {OP_CROSS_ENTROPY, OP_ACCURACY};
    for (int i = 0; i < 2; i++) {
        IrNode *n = mk(ops[i], 2, fl(S(2, L(128), L(10))), val(DT_I32, S(1, L(128))));
        expect_shape(n, S(0));
        assert_int_equal(n->type, DT_F32);
        expect_shape(mk(ops[i], 2, fl(S(3, L(16), L(64), L(65))), val(DT_I32, S(2, L(16), L(64)))), S(0));
    }
    expect_error(mk(OP_CROSS_ENTROPY, 2, fl(S(2, L(128), L(10))), val(DT_F32, S(1, L(128)))),
                 "cross_entropy needs integer labels (i32, u16 or u8), got f32");
    expect_shape(mk(OP_CROSS_ENTROPY, 2, fl(S(2, L(128), L(10))), val(DT_U8, S(1, L(128)))), S(0));
    expect_shape(mk(OP_ACCURACY, 2, fl(S(2, L(128), L(10))), val(DT_U16, S(1, L(128)))), S(0));
    expect_error(mk(OP_CROSS_ENTROPY, 2, fl(S(2, L(128), L(10))), val(DT_I32, S(1, L(64)))),
                 "cross_entropy labels [64] do not match logits [128, 10]");
    expect_error(mk(OP_ACCURACY, 2, val(DT_I32, S(2, L(128), L(10))), val(DT_I32, S(1, L(128)))),
                 "accuracy needs a float tensor");
    IrNode *m = mk(OP_MSE, 2, fl(S(2, L(4), L(3))), fl(S(2, L(4), L(3))));
    expect_shape(m, S(0));
    assert_int_equal(m->type, DT_F32);
    expect_error(mk(OP_MSE, 2, fl(S(2, L(4), L(1))), fl(S(1, L(4)))),
                 "mse needs operands of the same shape, got [4, 1] and [4]");
}

/* A later pass may re-run a rule: a type it chose is kept. */
static void rules_keep_a_chosen_type(void **state)
{
    (void)state;
    IrNode *n = mk(OP_CROSS_ENTROPY, 2, fl(S(2, L(2), L(3))), val(DT_I32, S(1, L(2))));
    n->type = DT_F16;
    expect_shape(n, S(0));
    assert_int_equal(n->type, DT_F16);
}

/* ---- backward rows --------------------------------------------------------------------- */

static void backward_rows(void **state)
{
    (void)state;
    /* conv2d and its gradients */
    IrNode *x = fl(S(4, L(8), L(1), L(28), L(28))), *w = fl(S(4, L(16), L(1), L(3), L(3)));
    IrNode *cv = mk(OP_CONV2D, 2, x, w);
    int64_t geo[8] = {1, 1, 1, 1, 1, 1, 1, 0};
    memcpy(cv->ia, geo, sizeof geo);
    expect_shape(cv, S(4, L(8), L(16), L(28), L(28)));
    IrNode *dy = fl(cv->shape);
    IrNode *dx = mk(OP_CONV2D_DX, 2, dy, w);
    dx->grad_of = cv;
    expect_shape(dx, x->shape);
    IrNode *dw = mk(OP_CONV2D_DW, 2, dy, x);
    dw->grad_of = cv;
    expect_shape(dw, w->shape);
    expect_shape(mk(OP_CHANNEL_SUM, 1, dy), S(1, L(16)));
    expect_error(mk(OP_CHANNEL_SUM, 1, fl(S(1, L(3)))), "channel_sum needs a gradient [N, C, ...]");
    IrNode *bad = mk(OP_CONV2D_DX, 2, fl(S(2, L(1), L(1))), w);
    bad->grad_of = cv;
    expect_error(bad, "gradient [1, 1] does not match output [8, 16, 28, 28]");
    expect_error(mk(OP_CONV2D_DW, 2, dy, x), "not tied to the forward node");

    /* sum_to and expand */
    IrNode *st = mk(OP_SUM_TO, 1, fl(S(2, L(128), L(512))));
    st->shape = S(1, L(512));
    expect_shape(st, S(1, L(512)));
    st = mk(OP_SUM_TO, 1, fl(S(3, L(2), L(3), L(4))));
    st->shape = S(3, L(2), L(1), L(4));
    expect_shape(st, S(3, L(2), L(1), L(4)));
    st = mk(OP_SUM_TO, 1, fl(S(2, L(128), L(512))));
    st->shape = S(1, L(10));
    expect_error(st, "sum_to cannot reduce [128, 512] to [10]");
    IrNode *ex = mk(OP_REDUCE_GRAD, 1, fl(S(0)));
    ex->shape = S(2, L(3), L(4));
    ex->ia[0] = -1;
    expect_shape(ex, S(2, L(3), L(4)));
    ex = mk(OP_REDUCE_GRAD, 1, fl(S(1, L(4))));
    ex->shape = S(2, L(3), L(4));
    ex->ia[0] = 0;
    expect_shape(ex, S(2, L(3), L(4)));
    ex = mk(OP_REDUCE_GRAD, 1, fl(S(1, L(3))));
    ex->shape = S(2, L(3), L(4));
    ex->ia[0] = 0;
    expect_error(ex, "shapes do not fit");

    /* matmul_tn: leading dims flattened */
    expect_shape(mk(OP_MATMUL_TN, 2, fl(S(3, L(4), L(5), L(784))), fl(S(2, L(20), L(10)))), S(2, L(784), L(10)));
    expect_error(mk(OP_MATMUL_TN, 2, fl(S(2, L(4), L(784))), fl(S(2, L(5), L(10)))), "same leading elements");

    /* pointwise gradients */
    IrOp pw[] = {OP_RELU_GRAD, OP_GELU_GRAD, OP_TANH_GRAD, OP_SIGMOID_GRAD, OP_SILU_GRAD,
                 OP_SQRT_GRAD, OP_RSQRT_GRAD, OP_SOFTMAX_GRAD, OP_LOG_SOFTMAX_GRAD};
    for (size_t i = 0; i < sizeof pw / sizeof pw[0]; i++) {
        expect_shape(mk(pw[i], 2, fl(S(2, L(2), L(3))), fl(S(2, L(2), L(3)))), S(2, L(2), L(3)));
        expect_error(mk(pw[i], 2, fl(S(2, L(2), L(3))), fl(S(1, L(3)))), "same shape");
    }
    expect_shape(mk(OP_DROPOUT_GRAD, 1, fl(S(1, L(7)))), S(1, L(7)));

    /* pooling, embedding, norms, attention: shaped like the forward inputs */
    IrNode *p = mk(OP_MAX_POOL2D, 1, fl(S(4, L(8), L(16), L(28), L(28))));
    p->ia[0] = p->ia[1] = 2;
    expect_shape(p, S(4, L(8), L(16), L(14), L(14)));
    IrOp pg[] = {OP_AVG_POOL2D_GRAD};
    IrNode *pgn = mk(pg[0], 1, fl(p->shape));
    pgn->grad_of = p;
    expect_shape(pgn, S(4, L(8), L(16), L(28), L(28)));
    IrNode *mpg = mk(OP_MAX_POOL2D_GRAD, 2, fl(p->shape), p->in[0]);
    mpg->grad_of = p;
    expect_shape(mpg, S(4, L(8), L(16), L(28), L(28)));
    IrNode *gp = mk(OP_GLOBAL_AVG_POOL, 1, fl(S(4, L(8), L(16), L(7), L(7))));
    expect_shape(gp, S(2, L(8), L(16)));
    IrNode *gpg = mk(OP_GLOBAL_AVG_POOL_GRAD, 1, fl(gp->shape));
    gpg->grad_of = gp;
    expect_shape(gpg, S(4, L(8), L(16), L(7), L(7)));

    IrNode *ids = val(DT_I32, S(2, L(16), L(64))), *ew = fl(S(2, L(65), L(32)));
    IrNode *emb = mk(OP_EMBEDDING, 2, ids, ew);
    expect_shape(emb, S(3, L(16), L(64), L(32)));
    IrNode *edw = mk(OP_EMBEDDING_DW, 2, fl(emb->shape), ids);
    edw->grad_of = emb;
    expect_shape(edw, S(2, L(65), L(32)));

    IrNode *ln = mk(OP_LAYER_NORM, 3, fl(S(2, L(4), L(8))), fl(S(1, L(8))), fl(S(1, L(8))));
    ln->fa[0] = 1e-5;
    expect_shape(ln, S(2, L(4), L(8)));
    IrNode *lndx = mk(OP_LAYER_NORM_DX, 3, fl(ln->shape), ln->in[0], ln->in[1]);
    lndx->grad_of = ln;
    expect_shape(lndx, S(2, L(4), L(8)));
    IrNode *lndw = mk(OP_LAYER_NORM_DW, 2, fl(ln->shape), ln->in[0]);
    lndw->grad_of = ln;
    expect_shape(lndw, S(1, L(8)));

    Shape c = S(1, L(16));
    IrNode *bn = mk(OP_BATCH_NORM, 5, fl(S(2, L(8), L(16))), fl(c), fl(c), fl(c), fl(c));
    bn->fa[0] = 0.1, bn->fa[1] = 1e-5;
    expect_shape(bn, S(2, L(8), L(16)));
    IrNode *bdx = mk(OP_BATCH_NORM_DX, 3, fl(bn->shape), bn->in[0], bn->in[1]);
    bdx->grad_of = bn;
    expect_shape(bdx, S(2, L(8), L(16)));
    IrNode *bdw = mk(OP_BATCH_NORM_DW, 2, fl(bn->shape), bn->in[0]);
    bdw->grad_of = bn;
    expect_shape(bdw, c);

    Shape q = S(4, L(2), L(4), L(8), L(16)), kv = S(4, L(2), L(4), L(6), L(16));
    IrNode *at = mk(OP_ATTENTION, 3, fl(q), fl(kv), fl(kv));
    expect_shape(at, q);
    IrNode *ag = mk(OP_ATTENTION_GRAD, 4, fl(q), at->in[0], at->in[1], at->in[2]);
    ag->grad_of = at;
    expect_shape(ag, S(4, L(2), L(4), L(8 + 2 * 6), L(16)));    /* dq, dk, dv of a head */
    IrNode *agbad = mk(OP_ATTENTION_GRAD, 4, fl(kv), at->in[0], at->in[1], at->in[2]);
    agbad->grad_of = at;
    expect_error(agbad, "does not match output");

    /* loss gradients */
    IrNode *ce = mk(OP_CROSS_ENTROPY_GRAD, 3, fl(S(0)), fl(S(2, L(4), L(10))), val(DT_I32, S(1, L(4))));
    expect_shape(ce, S(2, L(4), L(10)));
    expect_shape(mk(OP_MSE_GRAD, 3, fl(S(0)), fl(S(2, L(4), L(3))), fl(S(2, L(4), L(3)))), S(2, L(4), L(3)));
    expect_error(mk(OP_MSE_GRAD, 3, fl(S(1, L(2))), fl(S(1, L(2))), fl(S(1, L(2)))),
                 "needs a scalar loss gradient, got [2]");
}

/* ---- loss scaling and the optimizer ----------------------------------------------------- */

static void step_rows(void **state)
{
    (void)state;
    IrNode *ls = mk(OP_LOSS_SCALE, 1, fl(S(0)));
    expect_shape(ls, S(0));
    assert_int_equal(ls->type, DT_F32);
    expect_error(mk(OP_LOSS_SCALE, 1, fl(S(1, L(3)))), "the loss must be a scalar, got [3]");
    IrNode *g1 = fl(S(2, L(3), L(4))), *g2 = fl(S(1, L(4)));
    expect_shape(mk(OP_UNSCALE, 2, g1, g2), S(0));
    IrNode *clip = mk(OP_CLIP_GRAD_NORM, 2, g1, g2);
    clip->fa[0] = 1;
    expect_shape(clip, S(0));
    IrOp opt[] = {OP_SGD, OP_ADAM, OP_ADAMW};
    for (int i = 0; i < 3; i++) {
        expect_shape(mk(opt[i], 2, fl(S(2, L(3), L(4))), g1), S(2, L(3), L(4)));
        expect_error(mk(opt[i], 2, fl(S(2, L(3), L(4))), g2), "same shape");
    }
}

/* ---- overflow --------------------------------------------------------------------------- */

static void overflow_is_an_error(void **state)
{
    (void)state;
    int64_t n;
    Shape big = S(3, INT64_MAX / 4, L(4), L(4));
    assert_false(shape_numel_checked(&big, &n));
    Shape neg = S(2, L(-3), L(4));
    assert_false(shape_numel_checked(&neg, &n));
    Shape ok = S(2, L(3), L(4));
    assert_true(shape_numel_checked(&ok, &n));
    assert_int_equal(n, 12);
    /* a broadcast whose result is too large to address */
    expect_error(mk(OP_ADD, 2, fl(S(2, INT64_MAX / 16, L(1))), fl(S(2, L(1), L(1024)))),
                 "too many elements");
    /* matmul whose output is too large */
    expect_error(mk(OP_MATMUL, 2, fl(S(2, L(1) << 40, L(4))), fl(S(2, L(4), L(1) << 40))),
                 "too many elements");
    /* an embedding of huge dim */
    expect_error(mk(OP_EMBEDDING, 2, val(DT_I32, S(2, L(1) << 31, L(1) << 31)), fl(S(2, L(2), L(1) << 31))),
                 "too many elements");
}

/* ---- elementwise, norm and rope additions ------------------------------------------- */

static void additions(void **state)
{
    (void)state;
    IrNode *m = mk(OP_MAXIMUM, 2, fl(S(2, L(4), L(1))), fl(S(1, L(6))));
    expect_shape(m, S(2, L(4), L(6)));
    expect_error(mk(OP_MINIMUM, 2, fl(S(1, L(4))), fl(S(1, L(6)))), "minimum cannot broadcast [4] with [6]");
    expect_shape(mk(OP_MAXIMUM_MASK, 2, fl(S(2, L(4), L(1))), fl(S(1, L(6)))), S(2, L(4), L(6)));
    IrNode *c = mk(OP_CLAMP, 1, fl(S(1, L(5))));
    c->fa[0] = -1, c->fa[1] = 1;
    expect_shape(c, S(1, L(5)));
    c = mk(OP_CLAMP, 1, fl(S(1, L(5))));
    c->fa[0] = 2, c->fa[1] = 1;
    expect_error(c, "clamp needs lo <= hi, got lo = 2 and hi = 1");

    IrNode *r = mk(OP_RMS_NORM, 2, fl(S(2, L(3), L(8))), fl(S(1, L(8))));
    r->fa[0] = 1e-5;
    expect_shape(r, S(2, L(3), L(8)));
    r = mk(OP_RMS_NORM, 2, fl(S(2, L(3), L(8))), fl(S(1, L(4))));
    r->fa[0] = 1e-5;
    expect_error(r, "rms_norm needs parameters [8] for input [3, 8], got [4]");
    IrNode *ln = mk(OP_LAYER_NORM, 2, fl(S(2, L(3), L(8))), fl(S(1, L(8))));
    ln->fa[0] = 1e-5;
    expect_shape(ln, S(2, L(3), L(8)));

    IrNode *q = mk(OP_ROPE, 1, fl(S(4, L(2), L(5), L(3), L(8))));
    q->ia[0] = 1, q->fa[0] = 10000;
    expect_shape(q, S(4, L(2), L(5), L(3), L(8)));
    q = mk(OP_ROPE, 1, fl(S(3, L(2), L(5), L(7))));
    q->ia[0] = 1, q->fa[0] = 10000;
    expect_error(q, "rope needs an even last axis (pairs of features), got [2, 5, 7]");
    q = mk(OP_ROPE, 1, fl(S(3, L(2), L(5), L(8))));
    q->ia[0] = 2, q->fa[0] = 10000;
    expect_error(q, "rope position axis 2 must be one of the axes before the last");
    q = mk(OP_ROPE, 1, val(DT_I32, S(2, L(5), L(8))));
    q->ia[0] = 0, q->fa[0] = 10000;
    expect_error(q, "rope needs a float tensor, got i32");
}

static void addition_gradients(void **state)
{
    (void)state;
    IrOp pw[] = {OP_ABS_GRAD, OP_SIN_GRAD, OP_COS_GRAD, OP_CLAMP_GRAD, OP_POW_GRAD};
    for (size_t i = 0; i < sizeof pw / sizeof pw[0]; i++) {
        expect_shape(mk(pw[i], 2, fl(S(2, L(2), L(3))), fl(S(2, L(2), L(3)))), S(2, L(2), L(3)));
        expect_error(mk(pw[i], 2, fl(S(2, L(2), L(3))), fl(S(1, L(3)))), "same shape");
    }
    IrNode *r = mk(OP_RMS_NORM, 2, fl(S(2, L(4), L(8))), fl(S(1, L(8))));
    r->fa[0] = 1e-5;
    expect_shape(r, S(2, L(4), L(8)));
    IrNode *dx = mk(OP_RMS_NORM_DX, 3, fl(r->shape), r->in[0], r->in[1]);
    dx->grad_of = r;
    expect_shape(dx, S(2, L(4), L(8)));
    IrNode *dw = mk(OP_RMS_NORM_DW, 2, fl(r->shape), r->in[0]);
    dw->grad_of = r;
    expect_shape(dw, S(1, L(8)));
    IrNode *q = mk(OP_ROPE, 1, fl(S(3, L(2), L(5), L(8))));
    q->ia[0] = 1, q->fa[0] = 10000;
    expect_shape(q, S(3, L(2), L(5), L(8)));
    IrNode *qg = mk(OP_ROPE_GRAD, 1, fl(q->shape));
    qg->grad_of = q;
    expect_shape(qg, S(3, L(2), L(5), L(8)));
    qg = mk(OP_ROPE_GRAD, 1, fl(S(1, L(8))));
    qg->grad_of = q;
    expect_error(qg, "does not match output");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(leaves, setup, teardown),
        cmocka_unit_test_setup_teardown(broadcasting, setup, teardown),
        cmocka_unit_test_setup_teardown(integer_arithmetic_needs_a_cast, setup, teardown),
        cmocka_unit_test_setup_teardown(unary_ops_keep_shape, setup, teardown),
        cmocka_unit_test_setup_teardown(matmul, setup, teardown),
        cmocka_unit_test_setup_teardown(linear, setup, teardown),
        cmocka_unit_test_setup_teardown(conv2d, setup, teardown),
        cmocka_unit_test_setup_teardown(attention, setup, teardown),
        cmocka_unit_test_setup_teardown(views, setup, teardown),
        cmocka_unit_test_setup_teardown(structural, setup, teardown),
        cmocka_unit_test_setup_teardown(pooling, setup, teardown),
        cmocka_unit_test_setup_teardown(embedding, setup, teardown),
        cmocka_unit_test_setup_teardown(reductions, setup, teardown),
        cmocka_unit_test_setup_teardown(norms, setup, teardown),
        cmocka_unit_test_setup_teardown(losses, setup, teardown),
        cmocka_unit_test_setup_teardown(rules_keep_a_chosen_type, setup, teardown),
        cmocka_unit_test_setup_teardown(backward_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(step_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(overflow_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(additions, setup, teardown),
        cmocka_unit_test_setup_teardown(integers_promote_next_to_a_float_tensor, setup, teardown),
        cmocka_unit_test_setup_teardown(selection, setup, teardown),
        cmocka_unit_test_setup_teardown(addition_gradients, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
