/* test_fuse.c - the fusion pass's rules on hand-built graphs: a chain
 * becomes one group, values read only inside it are internal (no buffer
 * in memplan), a value read outside is stored, a member is never moved
 * past a reader outside its group, broadcasting inputs other than single
 * elements do not fuse, groups of one node are none, a product heads the
 * group of its consumers, and the per-element expressions are the kernels'. End to end (bit-identical training): see
 * tests/t_fuse.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fuse.h"
#include "memplan.h"

#include <string.h>

static Arena arena;

static int setup(void **state)
{
    arena_init(&arena);
    return 0;
}

static int teardown(void **state)
{
    arena_free(&arena);
    return 0;
}

static Shape shape2(int64_t a, int64_t b) { return (Shape){2, {a, b}}; }

static IrNode *node(IrGraph *g, IrOp op, DType t, Shape s, IrNode *a, IrNode *b)
{
    IrNode *in[2] = {a, b};
    IrNode *n = ir_add(g, op, (SrcLoc){0}, b ? 2 : a ? 1 : 0, in);
    n->type = n->compute = t;
    n->shape = s;
    return n;
}

/* x -> relu -> exp -> neg (the loss's input): one group, two internal */
static void test_chain(void **state)
{
    IrGraph *g = ir_new(&arena);
    IrNode *x = node(g, OP_INPUT, DT_F32, shape2(4, 8), NULL, NULL);
    IrNode *a = node(g, OP_RELU, DT_F16, shape2(4, 8), x, NULL);
    IrNode *b = node(g, OP_EXP, DT_F32, shape2(4, 8), a, NULL);
    IrNode *c = node(g, OP_NEG, DT_F32, shape2(4, 8), b, NULL);
    IrNode *loss = node(g, OP_SUM, DT_F32, (Shape){0}, c, NULL);
    loss->ia[0] = -1;
    g->loss = loss;
    assert_int_equal(fuse_graph(g), 1);
    assert_int_equal(x->fused, 0);
    assert_int_equal(a->fused, 1);
    assert_int_equal(b->fused, 1);
    assert_int_equal(c->fused, 1);
    assert_int_equal(loss->fused, 0);
    assert_true(a->fused_internal);
    assert_true(b->fused_internal);
    assert_false(c->fused_internal);        /* the sum reads it */
    assert_ptr_equal(fuse_last(g, a), c);
    MemPlan *mp = memplan_build(&arena, g);
    assert_int_equal(mp->kind[a->id], BUF_NONE);
    assert_int_equal(mp->kind[b->id], BUF_NONE);
    assert_int_equal(mp->kind[c->id], BUF_ARENA);
}

/* a = relu(x) is read by a product before b = exp(a): b cannot move a's
 * computation past the product, so no group; read after: a group, a stored */
static void test_reader_outside(void **state)
{
    for (int after = 0; after <= 1; after++) {
        IrGraph *g = ir_new(&arena);
        IrNode *x = node(g, OP_INPUT, DT_F32, shape2(4, 4), NULL, NULL);
        IrNode *a = node(g, OP_RELU, DT_F32, shape2(4, 4), x, NULL);
        IrNode *m = NULL, *b;
        if (!after)
            m = node(g, OP_MATMUL, DT_F32, shape2(4, 4), a, x);
        b = node(g, OP_EXP, DT_F32, shape2(4, 4), a, NULL);
        if (after)
            m = node(g, OP_MATMUL, DT_F32, shape2(4, 4), a, b);
        g->loss = node(g, OP_SUM, DT_F32, (Shape){0}, m, NULL);
        g->loss->ia[0] = -1;
        assert_int_equal(fuse_graph(g), after);
        assert_int_equal(a->fused, after);
        assert_int_equal(b->fused, after);
        assert_false(a->fused_internal);
        assert_false(b->fused_internal);
    }
}

/* x + bias[8] broadcasts a row: not fusable (only single elements are);
 * x * 2 (a constant) is */
static void test_broadcast(void **state)
{
    IrGraph *g = ir_new(&arena);
    IrNode *x = node(g, OP_INPUT, DT_F32, shape2(4, 8), NULL, NULL);
    IrNode *bias = node(g, OP_INPUT, DT_F32, (Shape){1, {8}}, NULL, NULL);
    IrNode *two = node(g, OP_CONST, DT_F32, (Shape){0}, NULL, NULL);
    IrNode *s = node(g, OP_ADD, DT_F32, shape2(4, 8), x, bias);
    IrNode *r = node(g, OP_RELU, DT_F32, shape2(4, 8), s, NULL);
    IrNode *m = node(g, OP_MUL, DT_F32, shape2(4, 8), r, two);
    g->loss = node(g, OP_SUM, DT_F32, (Shape){0}, m, NULL);
    g->loss->ia[0] = -1;
    assert_int_equal(fuse_graph(g), 1);
    assert_int_equal(s->fused, 0);
    assert_int_equal(r->fused, 1);
    assert_int_equal(m->fused, 1);
    assert_true(r->fused_internal);
}

/* a lone elementwise node is no group; a cast to an integer type never fuses */
static void test_no_group(void **state)
{
    IrGraph *g = ir_new(&arena);
    IrNode *x = node(g, OP_INPUT, DT_F32, shape2(2, 2), NULL, NULL);
    IrNode *a = node(g, OP_RELU, DT_F32, shape2(2, 2), x, NULL);
    IrNode *c = node(g, OP_CAST, DT_I32, shape2(2, 2), a, NULL);
    g->loss = node(g, OP_SUM, DT_F32, (Shape){0}, c, NULL);
    assert_int_equal(fuse_graph(g), 0);
    assert_int_equal(a->fused, 0);
    assert_int_equal(c->fused, 0);
}

/* a product heads the group of the ops that consume it (an epilogue): kept
 * in registers when only the group reads it, but given a buffer all the
 * same (the CUDA program's cuBLAS writes it; one memory plan for both
 * targets); a batched product (several GEMM calls) heads nothing */
static void test_product_head(void **state)
{
    for (int batched = 0; batched <= 1; batched++) {
        IrGraph *g = ir_new(&arena);
        Shape s = batched ? (Shape){3, {2, 4, 4}} : shape2(4, 4);
        IrNode *x = node(g, OP_INPUT, DT_F32, s, NULL, NULL);
        IrNode *w = node(g, OP_INPUT, DT_F32, s, NULL, NULL);
        IrNode *m = node(g, OP_MATMUL, DT_F16, s, x, w);
        IrNode *r = node(g, OP_RELU, DT_F16, s, m, NULL);
        IrNode *c = node(g, OP_CAST, DT_F32, s, r, NULL);
        g->loss = node(g, OP_SUM, DT_F32, (Shape){0}, c, NULL);
        g->loss->ia[0] = -1;
        assert_int_equal(fuse_is_product(m), !batched);
        assert_int_equal(fuse_graph(g), 1);
        assert_int_equal(m->fused, batched ? 0 : 1);
        assert_int_equal(r->fused, 1);
        assert_int_equal(c->fused, 1);
        assert_ptr_equal(fuse_last(g, r), c);
        if (batched)
            continue;
        assert_ptr_equal(m->fused_first, m);
        assert_true(m->fused_internal);
        assert_true(r->fused_internal);
        MemPlan *mp = memplan_build(&arena, g);
        assert_int_equal(mp->kind[m->id], BUF_ARENA);
        assert_int_equal(mp->kind[r->id], BUF_NONE);
    }
}

/* the expressions are those of the kernels, attributes as the emitters
 * print them */
static void test_expr(void **state)
{
    IrGraph *g = ir_new(&arena);
    const char *in[2] = {"a", "b"};
    IrNode *x = node(g, OP_INPUT, DT_F32, shape2(2, 2), NULL, NULL);
    IrNode *ge = node(g, OP_GELU, DT_F32, shape2(2, 2), x, NULL);
    assert_string_equal(fuse_expr(&arena, ge, in), "mp_gelu(a)");
    ge->ia[0] = 1;
    assert_string_equal(fuse_expr(&arena, ge, in), "mp_gelu_tanh(a)");
    IrNode *cl = node(g, OP_CLAMP, DT_F32, shape2(2, 2), x, NULL);
    cl->fa[0] = -1;
    cl->fa[1] = 0.5;
    assert_string_equal(fuse_expr(&arena, cl, in), "mp_clamp(a, (float)-1, (float)0.5)");
    IrNode *d = node(g, OP_DIV, DT_F32, shape2(2, 2), x, x);
    assert_string_equal(fuse_expr(&arena, d, in), "a / b");
    IrNode *sm = node(g, OP_SOFTMAX, DT_F32, shape2(2, 2), x, NULL);
    assert_null(fuse_expr(&arena, sm, in));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader_outside, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broadcast, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_group, setup, teardown),
        cmocka_unit_test_setup_teardown(test_product_head, setup, teardown),
        cmocka_unit_test_setup_teardown(test_expr, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
