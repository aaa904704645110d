/* test_prec.c - the precision-assignment pass on hand-built graphs
 * (prec_graphs.h): classes and rules, precedence, casts, policies, loss
 * scaling defaults, the optimizer phase, memory accounting, warnings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "prec.h"
#include "prec_graphs.h"

#include <stdio.h>
#include <stdlib.h>

static Arena arena;

static int setup(void **state)
{
    arena_init(&arena);
    diag_init(stderr);
    return 0;
}

static int teardown(void **state)
{
    arena_free(&arena);
    return 0;
}

/* Every node's inputs come before it and ids are indices. */
static void assert_ordered(const IrGraph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        assert_int_equal(g->nodes[i]->id, i);
        for (int k = 0; k < g->nodes[i]->nin; k++)
            assert_true(g->nodes[i]->in[k]->id < i);
    }
}

static int casts_of(const IrGraph *g, const IrNode *src, DType t)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i]->op == OP_CAST && g->nodes[i]->in[0] == src && g->nodes[i]->type == t;
    return n;
}

static void test_mlp_mixed_f16(void **state)
{
    Mlp m = build_mlp(&arena, POLICY_MIXED_F16);
    prec_forward(m.g);
    assert_ordered(m.g);
    assert_int_equal(m.g->lowp, DT_F16);
    /* user cast: as written */
    assert_int_equal(m.ucast->rule, RULE_CAST);
    assert_int_equal(m.ucast->type, DT_F32);
    /* x = f32(image) / 255: follow, f32 (the constant does not widen) */
    assert_int_equal(m.x->cls, CL_FOLLOW);
    assert_int_equal(m.x->rule, RULE_CLASS);
    assert_int_equal(m.x->type, DT_F32);
    /* linear: lowp by class, every input an f16 cast */
    assert_int_equal(m.lin1->cls, CL_LOWP);
    assert_int_equal(m.lin1->rule, RULE_CLASS);
    assert_int_equal(m.lin1->compute, DT_F16);
    for (int k = 0; k < 3; k++) {
        assert_int_equal(m.lin1->in[k]->op, OP_CAST);
        assert_int_equal(m.lin1->in[k]->type, DT_F16);
        assert_int_equal(m.lin1->in[k]->rule, RULE_CAST);
    }
    assert_true(m.lin1->in[1]->hoisted);
    assert_true(m.lin1->in[2]->hoisted);
    assert_false(m.lin1->in[0]->hoisted);
    /* the hoisted cast sits right after its parameter */
    assert_ptr_equal(m.g->nodes[m.w1->id + 1], m.lin1->in[1]);
    assert_ptr_equal(m.g->nodes[m.b1->id + 1], m.lin1->in[2]);
    /* relu follows its f16 input */
    assert_int_equal(m.h->cls, CL_FOLLOW);
    assert_int_equal(m.h->type, DT_F16);
    /* logits: f32: the override beats the class; h cast up */
    assert_int_equal(m.logits->rule, RULE_OVERRIDE);
    assert_int_equal(m.logits->cls, CL_FP32);
    assert_int_equal(m.logits->compute, DT_F32);
    assert_int_equal(m.logits->type, DT_F32);
    assert_int_equal(m.logits->in[0]->op, OP_CAST);
    assert_ptr_equal(m.logits->in[0]->in[0], m.h);
    assert_int_equal(m.logits->in[0]->type, DT_F32);
    /* logits' parameters are read only by an f32 op: no f16 copy */
    assert_ptr_equal(m.logits->in[1], m.w2);
    assert_ptr_equal(m.logits->in[2], m.b2);
    assert_int_equal(casts_of(m.g, m.w2, DT_F16), 0);
    assert_int_equal(casts_of(m.g, m.b2, DT_F16), 0);
    /* the loss and metric: fp32, f32 out; labels stay i32 */
    assert_int_equal(m.loss->cls, CL_FP32);
    assert_int_equal(m.loss->type, DT_F32);
    assert_ptr_equal(m.loss->in[1], m.label);
    assert_int_equal(m.label->type, DT_I32);
    assert_int_equal(m.acc->type, DT_F32);
    /* 5 casts: the user's, x, h.weight, h.bias, h */
    assert_int_equal(count_op(m.g, OP_CAST), 5);
    assert_int_equal(m.g->train.ls, LS_DYNAMIC);
}

static void test_float32_has_no_lowp_cast(void **state)
{
    Mlp m = build_mlp(&arena, POLICY_FLOAT32);
    prec_forward(m.g);
    assert_int_equal(m.g->lowp, DT_F32);
    for (int i = 0; i < m.g->nnodes; i++) {
        const IrNode *n = m.g->nodes[i];
        assert_false(prec_is_lowp(n->type));
        assert_false(prec_is_lowp(n->compute));
    }
    assert_int_equal(count_op(m.g, OP_CAST), 1);       /* the user's */
    assert_int_equal(m.lin1->compute, DT_F32);
    assert_int_equal(m.lin1->cls, CL_LOWP);            /* the class, lowp = f32 */
    assert_int_equal(m.g->train.ls, LS_NONE);
}

static void test_bf16_has_no_loss_scaling(void **state)
{
    Mlp m = build_mlp(&arena, POLICY_MIXED_BF16);
    prec_forward(m.g);
    assert_int_equal(m.lin1->compute, DT_BF16);
    assert_int_equal(m.lin1->in[1]->type, DT_BF16);
    assert_int_equal(m.g->train.ls, LS_NONE);
    fake_backward(&m);
    prec_finish(m.g);
    assert_int_equal(count_op(m.g, OP_UNSCALE), 0);
    assert_int_equal(count_op(m.g, OP_ADAM), 4);
}

static void test_loss_scale_as_written(void **state)
{
    Mlp m = build_mlp(&arena, POLICY_MIXED_BF16);
    m.g->train.ls = LS_STATIC;
    m.g->train.ls_set = true;
    prec_forward(m.g);
    assert_int_equal(m.g->train.ls, LS_STATIC);
    Mlp f = build_mlp(&arena, POLICY_MIXED_F16);
    f.g->train.ls = LS_NONE;
    f.g->train.ls_set = true;
    prec_forward(f.g);
    assert_int_equal(f.g->train.ls, LS_NONE);
}

static void test_finish_optimizer(void **state)
{
    Mlp m = build_mlp(&arena, POLICY_MIXED_F16);
    m.g->train.clip = 1.0;
    m.g->train.opt = OPT_SGD;
    prec_forward(m.g);
    fake_backward(&m);
    int before = m.g->nnodes;
    prec_finish(m.g);
    assert_ordered(m.g);
    IrGraph *g = m.g;
    assert_int_equal(g->nnodes, before + 1 + 1 + 4);
    IrNode *un = g->nodes[before], *clip = g->nodes[before + 1];
    assert_int_equal(un->op, OP_UNSCALE);
    assert_int_equal(un->nin, 4);
    assert_int_equal(clip->op, OP_CLIP_GRAD_NORM);
    assert_true(clip->fa[0] == 1.0);
    for (int i = 0; i < 4; i++) {
        IrNode *s = g->nodes[before + 2 + i];
        assert_int_equal(s->op, OP_SGD);
        assert_int_equal(s->phase, PH_OPTIMIZER);
        assert_int_equal(s->ia[0], i);
        assert_ptr_equal(s->in[0], g->params[i].node);
        assert_ptr_equal(s->in[1], g->params[i].grad);
        assert_ptr_equal(un->in[i], g->params[i].grad);
        assert_int_equal(g->params[i].grad->type, DT_F32);
    }
}

static void test_untrainable_param_has_no_step(void **state)
{
    Mlp m = build_mlp(&arena, POLICY_MIXED_F16);
    prec_forward(m.g);
    fake_backward(&m);
    m.g->params[3].trainable = false;
    m.g->params[3].grad = NULL;
    prec_finish(m.g);
    assert_int_equal(count_op(m.g, OP_ADAM), 3);
    assert_int_equal(m.g->nodes[m.g->nnodes - 4]->nin, 3);    /* the unscale */
}

/* One cast per value and type, reused by later consumers; a parameter
 * read by an f16 and an f32 op has exactly one f16 copy. */
static void test_one_cast_per_value(void **state)
{
    IrGraph *g = ir_new(&arena);
    IrNode *x = ir_add_input(g, "x", at_line(1), DT_F32, shp(2, 4, 8))->node;
    IrNode *w = param_n(g, "w", 2, shp(2, 8, 8));
    IrNode *a = op_n(g, OP_MATMUL, 3, shp(2, 4, 8), 2, x, w, NULL);
    IrNode *b = op_n(g, OP_MATMUL, 4, shp(2, 4, 8), 2, x, w, NULL);
    IrNode *c = op_n(g, OP_MATMUL, 5, shp(2, 4, 8), 2, x, w, NULL);
    c->override = DT_F32;
    prec_forward(g);
    assert_ordered(g);
    assert_ptr_equal(a->in[0], b->in[0]);
    assert_ptr_equal(a->in[1], b->in[1]);
    assert_int_equal(casts_of(g, x, DT_F16), 1);
    assert_int_equal(casts_of(g, w, DT_F16), 1);
    assert_ptr_equal(c->in[0], x);
    assert_ptr_equal(c->in[1], w);
    assert_int_equal(count_op(g, OP_CAST), 2);
    /* x's cast carries its first consumer's line; w's its own */
    assert_int_equal(a->in[0]->loc.line, 3);
    assert_int_equal(a->in[1]->loc.line, 2);
}

/* A user cast seeds the cache: an inserted cast of the same value to the
 * same type reuses it. */
static void test_user_cast_reused(void **state)
{
    IrGraph *g = ir_new(&arena);
    IrNode *x = ir_add_input(g, "x", at_line(1), DT_F32, shp(2, 4, 8))->node;
    IrNode *xh = user_cast_n(g, 2, x, DT_F16);
    IrNode *r = op_n(g, OP_RELU, 2, shp(2, 4, 8), 1, xh, NULL, NULL);
    IrNode *w = param_n(g, "w", 3, shp(2, 8, 8));
    IrNode *y = op_n(g, OP_MATMUL, 3, shp(2, 4, 8), 2, x, w, NULL);
    prec_forward(g);
    assert_int_equal(r->type, DT_F16);
    assert_ptr_equal(y->in[0], xh);
    assert_int_equal(count_op(g, OP_CAST), 2);
}

static void test_follow_widest(void **state)
{
    IrGraph *g = ir_new(&arena);
    IrNode *h = ir_add_input(g, "h", at_line(1), DT_F16, shp(1, 8, 0))->node;
    IrNode *f = ir_add_input(g, "f", at_line(1), DT_F32, shp(1, 8, 0))->node;
    IrNode *bf = ir_add_input(g, "bf", at_line(1), DT_BF16, shp(1, 8, 0))->node;
    IrNode *hf = op_n(g, OP_ADD, 2, shp(1, 8, 0), 2, h, f, NULL);
    IrNode *hb = op_n(g, OP_MUL, 3, shp(1, 8, 0), 2, h, bf, NULL);
    IrNode *hc = op_n(g, OP_MUL, 4, shp(1, 8, 0), 2, h, const_n(g, 4, 0.5), NULL);
    IrNode *bb = op_n(g, OP_SUB, 5, shp(1, 8, 0), 2, bf, bf, NULL);
    prec_forward(g);
    assert_int_equal(hf->type, DT_F32);
    assert_int_equal(hb->type, DT_F32);
    assert_int_equal(hc->type, DT_F16);
    assert_int_equal(bb->type, DT_BF16);
    assert_int_equal(count_op(g, OP_CAST), 0);        /* follow never casts */
}

static void test_views_and_integers(void **state)
{
    IrGraph *g = ir_new(&arena);
    IrNode *ids = ir_add_input(g, "ids", at_line(1), DT_I32, shp(2, 4, 5))->node;
    IrNode *flat = op_n(g, OP_RESHAPE, 2, shp(1, 20, 0), 1, ids, NULL, NULL);
    IrNode *w = param_n(g, "emb.weight", 3, shp(2, 100, 8));
    IrNode *e = op_n(g, OP_EMBEDDING, 3, shp(2, 20, 8), 2, flat, w, NULL);
    IrNode *t = op_n(g, OP_TRANSPOSE, 4, shp(2, 8, 20), 1, e, NULL, NULL);
    IrNode *t32 = op_n(g, OP_TRANSPOSE, 5, shp(2, 20, 8), 1, t, NULL, NULL);
    t32->override = DT_F32;
    prec_forward(g);
    assert_int_equal(flat->type, DT_I32);
    assert_int_equal(flat->cls, CL_NONE);
    assert_ptr_equal(e->in[0], flat);                 /* ids never cast */
    assert_int_equal(e->type, DT_F16);
    assert_int_equal(e->in[1]->type, DT_F16);
    assert_int_equal(t->type, DT_F16);
    assert_int_equal(t->cls, CL_NONE);
    assert_ptr_equal(t->in[0], e);
    assert_int_equal(t32->type, DT_F32);              /* the override casts a view */
    assert_int_equal(t32->in[0]->op, OP_CAST);
}

/* fp32_ops / fp16_ops move an op; an override beats the list. */
static void test_lists_and_precedence(void **state)
{
    static const char *fp16[] = {"softmax"};
    static const char *fp32[] = {"relu"};
    IrGraph *g = ir_new(&arena);
    g->train.fp16_ops = fp16;
    g->train.nfp16_ops = 1;
    g->train.fp32_ops = fp32;
    g->train.nfp32_ops = 1;
    IrNode *x = ir_add_input(g, "x", at_line(1), DT_F16, shp(2, 4, 8))->node;
    IrNode *r = op_n(g, OP_RELU, 2, shp(2, 4, 8), 1, x, NULL, NULL);
    IrNode *s = op_n(g, OP_SOFTMAX, 3, shp(2, 4, 8), 1, r, NULL, NULL);
    IrNode *s32 = op_n(g, OP_SOFTMAX, 4, shp(2, 4, 8), 1, r, NULL, NULL);
    s32->override = DT_F32;
    IrNode *lsm = op_n(g, OP_LOG_SOFTMAX, 5, shp(2, 4, 8), 1, x, NULL, NULL);
    FILE *quiet = tmpfile();
    diag_init(quiet);
    prec_forward(g);
    diag_init(stderr);
    fclose(quiet);
    assert_int_equal(r->rule, RULE_LIST);
    assert_int_equal(r->cls, CL_FP32);
    assert_int_equal(r->type, DT_F32);
    assert_int_equal(r->in[0]->op, OP_CAST);
    assert_int_equal(s->rule, RULE_LIST);
    assert_int_equal(s->cls, CL_LOWP);
    assert_int_equal(s->compute, DT_F16);
    assert_int_equal(s32->rule, RULE_OVERRIDE);
    assert_int_equal(s32->compute, DT_F32);
    assert_ptr_equal(s32->in[0], r);                  /* already f32 */
    assert_int_equal(lsm->rule, RULE_CLASS);
    assert_int_equal(lsm->cls, CL_FP32);
    assert_int_equal(lsm->compute, DT_F32);
}

/* Runs prec_forward with messages captured; returns them. */
static char *captured(IrGraph *g, int *nwarn, int *nerr)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    diag_init(f);                     /* also restarts the counts */
    prec_forward(g);
    *nwarn = diag_warning_count();
    *nerr = diag_error_count();
    diag_init(stderr);
    long len = ftell(f);
    rewind(f);
    char *s = arena_alloc(&arena, (size_t)len + 1);
    assert_int_equal(fread(s, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    return s;
}

static void test_warnings(void **state)
{
    static const char *fp16[] = {"softmax"};
    IrGraph *g = ir_new(&arena);
    g->train.fp16_ops = fp16;
    g->train.nfp16_ops = 1;
    IrNode *x = ir_add_input(g, "x", at_line(1), DT_F32, shp(2, 4, 8))->node;
    op_n(g, OP_SOFTMAX, 7, shp(2, 4, 8), 1, x, NULL, NULL);
    IrNode *mn = op_n(g, OP_MEAN, 8, shp(0, 0, 0), 1, x, NULL, NULL);
    mn->override = DT_F16;
    op_n(g, OP_EXP, 9, shp(2, 4, 8), 1, x, NULL, NULL);      /* class: no warning */
    int nw, ne;
    char *msg = captured(g, &nw, &ne);
    assert_int_equal(ne, 0);
    assert_int_equal(nw, 2);
    assert_non_null(strstr(msg, "t.mp:7:1: warning: 'softmax' computes in f16 because of fp16_ops: "
                                "f16 overflows above 65504; PyTorch, Keras and Paddle keep softmax in float32"));
    assert_non_null(strstr(msg, "t.mp:8:1: warning: 'mean' computes in f16 because of its 'f16'"));
    assert_null(strstr(msg, "'exp'"));
}

static void test_warning_bf16_and_float32(void **state)
{
    IrGraph *g = ir_new(&arena);
    g->train.policy = POLICY_MIXED_BF16;
    IrNode *x = ir_add_input(g, "x", at_line(1), DT_F32, shp(2, 4, 8))->node;
    IrNode *s = op_n(g, OP_SUM, 3, shp(0, 0, 0), 1, x, NULL, NULL);
    s->override = DT_BF16;
    int nw, ne;
    char *msg = captured(g, &nw, &ne);
    assert_int_equal(nw, 1);
    assert_non_null(strstr(msg, "'sum' computes in bf16"));

    static const char *fp16[] = {"linear"};
    Mlp m = build_mlp(&arena, POLICY_FLOAT32);
    m.g->train.fp16_ops = fp16;
    m.g->train.nfp16_ops = 1;
    msg = captured(m.g, &nw, &ne);
    assert_int_equal(ne, 0);
    assert_int_equal(nw, 1);
    assert_non_null(strstr(msg, "t.mp:9:1: warning: fp16_ops has no effect under precision float32"));
    assert_int_equal(m.lin1->compute, DT_F32);
    assert_int_equal(m.lin1->rule, RULE_LIST);
}

/* A loss forced to f16 by an op that is not itself risky still warns. */
static void test_warning_f16_loss(void **state)
{
    IrGraph *g = ir_new(&arena);
    IrNode *x = ir_add_input(g, "x", at_line(1), DT_F32, shp(1, 4, 0))->node;
    IrNode *s = op_n(g, OP_SUM, 2, shp(0, 0, 0), 1, x, NULL, NULL);
    IrNode *loss = op_n(g, OP_MUL, 3, shp(0, 0, 0), 2, s, const_n(g, 3, 0.5), NULL);
    loss->name = "loss";
    loss->override = DT_F16;
    g->loss = loss;
    int nw, ne;
    char *msg = captured(g, &nw, &ne);
    assert_int_equal(loss->type, DT_F16);
    assert_int_equal(nw, 1);
    assert_non_null(strstr(msg, "t.mp:3:1: warning: the minimized loss 'loss' is f16"));
}

/* Forward values read by fake_backward(), by hand:
 *   loss  f32 []     4 B       logits    f32 [4,2]  32 B
 *   label i32 [4]   16 B       h -> f32  f32 [4,3]  48 B (cast)
 *   lin1  f16 [4,3] 24 B       x -> f16  f16 [4,6]  48 B (cast)
 * mixed_float16: 172. Under float32 each cast counts as its source at
 * 4 bytes: h [4,3] 48, x [4,6] 96, lin1 48: 4 + 32 + 16 + 48 + 48 + 96. */
static void test_memory(void **state)
{
    Mlp m = build_mlp(&arena, POLICY_MIXED_F16);
    prec_forward(m.g);
    fake_backward(&m);
    prec_finish(m.g);
    PrecMemory mem = prec_memory(m.g);
    assert_int_equal(mem.bytes, 172);
    assert_int_equal(mem.bytes_f32, 244);

    Mlp f = build_mlp(&arena, POLICY_FLOAT32);
    prec_forward(f.g);
    fake_backward(&f);
    prec_finish(f.g);
    mem = prec_memory(f.g);
    /* float32: h and x are read directly: 4 + 32 + 16 + 48 (h) + 48 + 96 (x) */
    assert_int_equal(mem.bytes, 244);
    assert_int_equal(mem.bytes_f32, 244);
}

/* A lowp backward op handed an f32 value gets a cast (and the forward
 * casts are reused). */
static void test_backward_fixup(void **state)
{
    Mlp m = build_mlp(&arena, POLICY_MIXED_F16);
    prec_forward(m.g);
    fake_backward(&m);
    IrNode *dw = NULL;
    for (int i = 0; i < m.g->nnodes; i++)
        if (m.g->nodes[i]->op == OP_MATMUL_TN && m.g->nodes[i]->grad_of == m.lin1)
            dw = m.g->nodes[i];
    assert_non_null(dw);
    IrNode *xcast = dw->in[1];
    dw->in[1] = m.x;                  /* as if autodiff read the f32 value */
    int casts = count_op(m.g, OP_CAST);
    prec_finish(m.g);
    assert_ptr_equal(dw->in[1], xcast);
    assert_int_equal(count_op(m.g, OP_CAST), casts);
}

static void test_names(void **state)
{
    assert_string_equal(prec_policy_name(POLICY_MIXED_BF16), "mixed_bfloat16");
    assert_string_equal(prec_class_name(CL_FOLLOW), "follow");
    assert_string_equal(prec_class_name(CL_LOWP), "lowp");
    assert_string_equal(prec_rule_name(RULE_OVERRIDE), "override");
    assert_string_equal(prec_rule_name(RULE_CAST), "cast");
    assert_string_equal(prec_ls_name(LS_DYNAMIC), "dynamic");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mlp_mixed_f16, setup, teardown),
        cmocka_unit_test_setup_teardown(test_float32_has_no_lowp_cast, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bf16_has_no_loss_scaling, setup, teardown),
        cmocka_unit_test_setup_teardown(test_loss_scale_as_written, setup, teardown),
        cmocka_unit_test_setup_teardown(test_finish_optimizer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_untrainable_param_has_no_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_one_cast_per_value, setup, teardown),
        cmocka_unit_test_setup_teardown(test_user_cast_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_follow_widest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_views_and_integers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lists_and_precedence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warnings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warning_bf16_and_float32, setup, teardown),
        cmocka_unit_test_setup_teardown(test_warning_f16_loss, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backward_fixup, setup, teardown),
        cmocka_unit_test_setup_teardown(test_names, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
