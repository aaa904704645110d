/* test_sema.c - semantic analysis on real source text.
 *
 * Each test parses a model with the real front end and lowers it with
 * sema_lower(): parameter naming (the spec's own examples), overrides,
 * constant folding and its overflow checks, the train block and its
 * defaults, the examples/ models, and every error path, each with the
 * wording a user sees. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "sema_harness.h"

/* ---- the spec's model and its naming ------------------------------------- */

static const char mnist_mlp[] =
    "model mnist_mlp\n"
    "const B = 128\n"
    "input image: u8[B, 784]\n"
    "input label: i32[B]\n"
    "x      = f32(image) / 255\n"
    "h      = relu(linear(x, 512))\n"
    "logits: f32 = linear(h, 10)\n"
    "loss   = cross_entropy(logits, label)\n"
    "metric accuracy = accuracy(logits, label)\n"
    "train {\n"
    "  optimizer  = adam(lr = 1e-3)\n"
    "  precision  = mixed_float16\n"
    "  loss_scale = dynamic(init = 32768, growth = 2, backoff = 0.5, interval = 2000)\n"
    "  steps      = 5000\n"
    "  minimize loss\n"
    "}\n";

static void spec_model(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(mnist_mlp);
    assert_string_equal(g->model, "mnist_mlp");
    assert_int_equal(g->batch, 128);
    assert_int_equal(g->ninputs, 2);
    assert_int_equal(g->inputs[0].type, DT_U8);
    assert_int_equal(g->inputs[1].classes, 10);
    assert_int_equal(g->inputs[0].classes, 0);
    assert_int_equal(g->nparams, 4);
    expect_param(g, "h.weight", 2, 512, 784);
    expect_param(g, "h.bias", 1, 512, 0);
    expect_param(g, "logits.weight", 2, 10, 512);
    expect_param(g, "logits.bias", 1, 10, 0);
    IrParam *w = param(g, "h.weight");
    assert_int_equal(w->init, INIT_GLOROT_UNIFORM);
    assert_int_equal(w->fan_in, 784);
    assert_int_equal(w->fan_out, 512);
    assert_true(w->trainable);
    assert_int_equal(param(g, "h.bias")->init, INIT_ZEROS);
    /* x = f32(image) / 255: a user cast, then div by a constant */
    IrNode *x = named(g, "x");
    assert_int_equal(x->op, OP_DIV);
    assert_int_equal(x->in[0]->op, OP_CAST);
    assert_int_equal(x->in[0]->type, DT_F32);
    assert_int_equal(x->in[0]->override, DT_F32);
    assert_int_equal(x->in[1]->op, OP_CONST);
    assert_true(x->in[1]->fa[0] == 255);
    assert_int_equal(named(g, "h")->op, OP_RELU);
    IrNode *logits = named(g, "logits");
    assert_int_equal(logits->op, OP_LINEAR);
    assert_int_equal(logits->override, DT_F32);
    assert_int_equal(named(g, "h")->override, DT_NONE);
    assert_int_equal(g->loss->op, OP_CROSS_ENTROPY);
    assert_ptr_equal(g->loss, named(g, "loss"));
    assert_int_equal(g->nmetrics, 1);
    assert_string_equal(g->metrics[0].name, "accuracy");
    assert_int_equal(g->metrics[0].node->op, OP_ACCURACY);
    assert_int_equal(g->train.steps, 5000);
    assert_int_equal(g->train.ls, LS_DYNAMIC);
    assert_true(g->train.ls_set);
    /* every node's inputs come before it, ids are indices */
    for (int i = 0; i < g->nnodes; i++) {
        assert_int_equal(g->nodes[i]->id, i);
        for (int k = 0; k < g->nodes[i]->nin; k++)
            assert_true(g->nodes[i]->in[k]->id < i);
    }
}

static void block_naming(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(HEAD "const D = 8\n"
                          "block mlp(x, d) {\n"
                          "  h = gelu(linear(x, 4 * d))\n"
                          "  return linear(h, d, name = \"proj\")\n"
                          "}\n"
                          "z = mlp(x, D)\n" LOSS TRAIN);
    expect_param(g, "z.h.weight", 2, 32, 8);
    expect_param(g, "z.h.bias", 1, 32, 0);
    expect_param(g, "z.proj.weight", 2, 8, 32);
    expect_param(g, "z.proj.bias", 1, 8, 0);
    assert_int_equal(named(g, "z.h")->op, OP_GELU);
    assert_int_equal(named(g, "z")->op, OP_LINEAR);
    /* the spec's own example: y = mlp(x, D) declares y.h.weight ... */
    g = lower_ok(HEAD "const D = 8\n"
                 "block mlp(x, d) {\n"
                 "  h = gelu(linear(x, 4 * d))\n"
                 "  return linear(h, d, name = \"proj\")\n"
                 "}\n"
                 "y2 = mlp(x, D)\n"
                 "z = mlp(y2, D, name = \"y\")\n" LOSS TRAIN);
    param(g, "y.h.weight");
    param(g, "y.proj.bias");
    param(g, "y2.h.weight");
}

static void repeat_naming(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(HEAD "const D = 8\nconst L = 2\n"
                          "block mlp(x, d) {\n"
                          "  h = gelu(linear(x, 4 * d))\n"
                          "  return linear(h, d, name = \"proj\")\n"
                          "}\n"
                          "z = x\n"
                          "repeat L as layers {\n"
                          "  z = z + mlp(layer_norm(z, name = \"ln\"), D, name = \"mlp\")\n"
                          "}\n" LOSS TRAIN);
    expect_param(g, "layers.0.ln.weight", 1, 8, 0);
    assert_int_equal(param(g, "layers.0.ln.weight")->init, INIT_ONES);
    assert_int_equal(param(g, "layers.0.ln.bias")->init, INIT_ZEROS);
    param(g, "layers.0.mlp.h.weight");
    param(g, "layers.0.mlp.proj.bias");
    param(g, "layers.1.ln.weight");
    expect_param(g, "layers.1.mlp.proj.bias", 1, 8, 0);
    assert_null(ir_find_param(g, "layers.2.ln.weight"));
    /* unrolled: the second copy reads the first copy's z */
    IrNode *z1 = named(g, "layers.1.z"), *z0 = named(g, "layers.0.z");
    assert_int_equal(z1->op, OP_ADD);
    assert_ptr_equal(z1->in[0], z0);
    assert_int_equal(z0->in[0]->op, OP_INPUT);
    /* params declared by `param` inside a repeat: one per copy */
    g = lower_ok(HEAD "z = x\nrepeat 3 as blk {\n  param w: [8, 8] = he_normal()\n  z = z @ w\n}\n" LOSS TRAIN);
    param(g, "blk.0.w");
    expect_param(g, "blk.2.w", 2, 8, 8);
    assert_int_equal(param(g, "blk.2.w")->init, INIT_HE_NORMAL);
    assert_int_equal(param(g, "blk.2.w")->fan_in, 8);
}

static void layers(void **state)
{
    (void)state;
    IrGraph *g = lower_ok("model cnn\ninput img: u8[4, 3, 8, 8]\ninput y: i32[4]\n"
                          "a = f32(img)\n"
                          "c = conv2d(a, 6, 3, stride = 2, padding = 1)\n"
                          "n = batch_norm(c, momentum = 0.2)\n"
                          "p = max_pool2d(relu(n), 2)\n"
                          "q = avg_pool2d(p, 2, stride = 1)\n"
                          "r = global_avg_pool(p)\n"
                          "e = dropout(r, 0.25)\n"
                          "loss = cross_entropy(linear(e, 3, bias = false, init = normal(0.5)), y)\n"
                          "metric qs = mean(q)\n" TRAIN);
    expect_param(g, "c.weight", 4, 6, 3);
    assert_int_equal(param(g, "c.weight")->shape.d[2], 3);
    assert_int_equal(param(g, "c.weight")->fan_in, 27);
    assert_int_equal(param(g, "c.weight")->fan_out, 54);
    expect_param(g, "c.bias", 1, 6, 0);
    IrNode *c = named(g, "c");
    int64_t geo[8] = {2, 2, 1, 1, 1, 1, 1, 0};   /* strides, padding, dilations, groups, after */
    assert_memory_equal(c->ia, geo, sizeof geo);
    assert_int_equal(named(g, "q")->ia[2], 0);                /* no padding by default */
    assert_int_equal(c->shape.d[2], 4);
    expect_param(g, "n.weight", 1, 6, 0);
    assert_int_equal(param(g, "n.weight")->init, INIT_ONES);
    assert_true(param(g, "n.weight")->trainable);
    assert_false(param(g, "n.running_mean")->trainable);
    assert_false(param(g, "n.running_var")->trainable);
    assert_int_equal(param(g, "n.running_var")->init, INIT_ONES);
    assert_true(named(g, "n")->fa[0] == 0.2);
    assert_true(named(g, "n")->fa[1] == 1e-5);
    IrNode *p = named(g, "p");
    assert_int_equal(p->ia[0], 2);
    assert_int_equal(p->ia[1], 2);      /* stride defaults to the kernel */
    assert_int_equal(named(g, "q")->ia[1], 1);
    assert_int_equal(named(g, "r")->shape.rank, 2);
    assert_true(named(g, "e")->fa[0] == 0.25);
    IrParam *w = param(g, "loss.weight");
    assert_int_equal(w->init, INIT_NORMAL);
    assert_true(w->a == 0.5);
    assert_null(ir_find_param(g, "loss.bias"));

    g = lower_ok("model lm\ninput t: i32[2, 5]\ninput y: i32[2, 5]\n"
                 "e = embedding(t, 11, 4)\n"
                 "loss = cross_entropy(linear(e, 11, name = \"head\"), y)\n" TRAIN);
    expect_param(g, "e.weight", 2, 11, 4);
    assert_int_equal(named(g, "e")->shape.rank, 3);
    assert_int_equal(g->inputs[1].classes, 11);
    assert_int_equal(g->inputs[0].classes, 11);   /* ids index the table */
}

static void views_and_axes(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(HEAD "a = reshape(x, [2, -1, 4])\n"
                          "b = transpose(a, [-1, 0, 1])\n"
                          "c = softmax(b)\n"
                          "d = log_softmax(b, axis = 0)\n"
                          "e = sum(c, -2)\n"
                          "f = mean(d)\n"
                          "z = flatten(b)\n" LOSS TRAIN);
    IrNode *a = named(g, "a");
    assert_int_equal(a->shape.rank, 3);
    assert_int_equal(a->shape.d[1], 4);   /* inferred */
    IrNode *b = named(g, "b");
    assert_int_equal(b->ia[0], 2);
    assert_int_equal(b->ia[1], 0);
    assert_int_equal(b->ia[2], 1);
    assert_int_equal(named(g, "c")->ia[0], 2);
    assert_int_equal(named(g, "d")->ia[0], 0);
    assert_int_equal(named(g, "e")->ia[0], 1);
    assert_int_equal(named(g, "f")->ia[0], -1);
    assert_int_equal(named(g, "f")->shape.rank, 0);
    assert_int_equal(named(g, "z")->shape.d[1], 8);
}

/* chunk, slice, concat, expand, arange: attributes normalised (axes and
 * Python indices from the end), parts named after their targets, every
 * argument by keyword too. */
static void structural_ops(void **state)
{
    (void)state;
    IrGraph *g = lower_ok("model m\nconst B = 4\ninput x: f32[B, 12]\ninput y: i32[B]\n"
                          "input seq: i32[B, 9]\n"
                          "q, k, v = chunk(x = x, n = 3)\n"
                          "s = slice(q, 1, -3, -1)\n"
                          "t = slice(x = k, axis = -1, start = 0, end = 4)\n"
                          "c = concat(tensors = [s, t, v], axis = 1)\n"
                          "e = expand(reshape(c, [B, 1, 10]), dims = [2, B, 3, -1])\n"
                          "p = arange(n = 3)\n"
                          "w = embedding(p, 3, 10, name = \"wpe\")\n"
                          "ids = slice(seq, 1, 0, -1)\n"
                          "tok = embedding(ids, 50, 10, name = \"wte\")\n"
                          "z = flatten(sum(e + w, 0)) + sum(flatten(tok))\n" LOSS TRAIN);
    for (int i = 0; i < 3; i++) {
        IrNode *part = named(g, (const char *[]){"q", "k", "v"}[i]);
        assert_int_equal(part->op, OP_CHUNK);
        assert_int_equal(part->ia[0], 1);
        assert_int_equal(part->ia[1], 3);
        assert_int_equal(part->ia[2], i);
        assert_int_equal(part->shape.d[1], 4);
    }
    IrNode *sl = named(g, "s");
    assert_int_equal(sl->ia[1], 1);
    assert_int_equal(sl->ia[2], 3);
    assert_int_equal(sl->shape.d[1], 2);
    assert_int_equal(named(g, "t")->ia[0], 1);
    IrNode *c = named(g, "c");
    assert_int_equal(c->nin, 3);
    assert_int_equal(c->shape.d[1], 10);
    IrNode *e = named(g, "e");
    assert_int_equal(e->shape.rank, 4);
    assert_int_equal(e->shape.d[0], 2);
    assert_int_equal(e->shape.d[2], 3);
    assert_int_equal(e->shape.d[3], 10);
    IrNode *p = named(g, "p");
    assert_int_equal(p->op, OP_ARANGE);
    assert_int_equal(p->type, DT_I32);
    assert_int_equal(p->shape.d[0], 3);
    /* ids sliced from an input keep its class bound; computed ids have none */
    assert_int_equal(g->inputs[2].classes, 50);
    /* a block's keyword arguments; chunk inside a block and a repeat */
    lower_ok(HEAD "block half(t, axis) {\n  a, b = chunk(t, 2, axis)\n  return a * b\n}\n"
             "h = x\nrepeat 2 as layers {\n  h = concat([half(axis = -1, t = h), half(h, 1)], axis = 1)\n}\n"
             "z = h\n" LOSS TRAIN);
    /* a chunk inside a block called in another chunk's arguments */
    lower_ok(HEAD "block glu(t) {\n  a, b = chunk(t, 2)\n  return a * sigmoid(b)\n}\n"
             "u, w = chunk(glu(concat([x, x], 1)), 2)\nz = u + w\n" LOSS TRAIN);
    lower_err(HEAD "q, k = chunk(linear(x, 8), 2)\nz = q\n" LOSS TRAIN,
              "linear declares parameters and needs a name");
    lower_err(HEAD "z = relu(y = x)\n" LOSS TRAIN, "unknown argument 'y' of relu(x)");
    lower_err(HEAD "z = arange(3, n = 3)\n" LOSS TRAIN, "argument 'n' of arange is given twice");
    lower_err(HEAD "z = embedding(slice(y, 0, 0, 2), 3, 8)\nw = embedding(y, 5, 8, name = \"e\")\n" LOSS TRAIN,
              "'y' is used with 5 classes here but 3 classes before");
}

/* randn, rand and the _like forms: nodes with no inputs, of the list's or
 * the argument's shape, f32 (or a typed statement's float type). */
static void random_ops(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(HEAD "a = randn([B, 8])\nb = rand(dims = [2, B, 8])\n"
                          "c = randn_like(x)\nd = rand_like(x = y)\ne: f16 = randn([8])\n"
                          "z = a + sum(b, 0) + c * f32(e) + expand(reshape(d, [B, 1]), [B, 8])\n" LOSS TRAIN);
    const char *names[] = {"a", "b", "c", "d"};
    IrOp ops[] = {OP_RANDN, OP_RAND, OP_RANDN, OP_RAND};
    for (int i = 0; i < 4; i++) {
        IrNode *n = named(g, names[i]);
        assert_int_equal(n->op, ops[i]);
        assert_int_equal(n->nin, 0);
        assert_int_equal(n->type, DT_F32);
        assert_int_equal(n->shape.d[n->shape.rank - 1], i == 3 ? 4 : 8);
    }
    assert_int_equal(named(g, "b")->shape.rank, 3);
    assert_int_equal(named(g, "e")->override, DT_F16);
    lower_err(HEAD "z = randn(8)\n" LOSS TRAIN, "argument 'dims' of randn must be a list");
    lower_err(HEAD "z = rand([B, 0])\n" LOSS TRAIN, "a dimension of rand must be >= 1, got 0");
    lower_err(HEAD "z = randn_like(3)\n" LOSS TRAIN, "argument 'x' of randn_like must be a tensor, got 3");
}

/* ---- overrides --------------------------------------------------------------- */

static void overrides(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(HEAD
                          "block twice(t) {\n  u = relu(t)\n  return u + u\n}\n"
                          "a = relu(x)\n"
                          "precision bf16 {\n"
                          "  b = tanh(a)\n"
                          "  c: f32 = sigmoid(b) * 2\n"
                          "  d = twice(c)\n"
                          "}\n"
                          "e: f16 = twice(d)\n"
                          "r = reshape(y, [2, 2])\n"
                          "precision f16 {\n  s = reshape(y, [4, 1])\n}\n"
                          "z = e\n" LOSS TRAIN);
    assert_int_equal(named(g, "a")->override, DT_NONE);
    assert_int_equal(named(g, "b")->override, DT_BF16);
    IrNode *c = named(g, "c");
    assert_int_equal(c->override, DT_F32);            /* typed assignment wins */
    assert_int_equal(c->in[0]->override, DT_F32);     /* sigmoid */
    assert_int_equal(c->in[1]->override, DT_NONE);    /* a CONST is no operation */
    assert_int_equal(named(g, "d")->override, DT_BF16);
    assert_int_equal(named(g, "d")->in[0]->override, DT_BF16);   /* the block's relu */
    assert_int_equal(named(g, "e")->override, DT_F16);
    assert_int_equal(named(g, "loss")->override, DT_NONE);
    assert_int_equal(named(g, "r")->type, DT_I32);
    assert_int_equal(named(g, "s")->override, DT_NONE);           /* integer views keep theirs */
    /* f32 of an f32 value is that value; bf16 of it a cast with its override */
    g = lower_ok(HEAD "a = f32(x)\nb = bf16(x)\nz = f32(b)\n" LOSS TRAIN);
    int casts = 0;
    for (int i = 0; i < g->nnodes; i++)
        casts += g->nodes[i]->op == OP_CAST;
    assert_int_equal(casts, 2);
    assert_int_equal(named(g, "b")->in[0]->op, OP_INPUT);
    assert_int_equal(named(g, "b")->op, OP_CAST);
    assert_int_equal(named(g, "b")->override, DT_BF16);
    assert_int_equal(named(g, "z")->type, DT_F32);
}

/* ---- constants -------------------------------------------------------------- */

static void constants(void **state)
{
    (void)state;
    IrGraph *g = lower_ok("model m\n"
                          "const A = 2 ** 3 * (5 - 1)\n"       /* 32 */
                          "const H = 4\n"
                          "const D = A / H\n"                  /* exact: integer 8 */
                          "const R = 7 / 2\n"                  /* 3.5 */
                          "const N = -(-3)\n"
                          "input x: f32[N, A]\n"
                          "input y: i32[N]\n"
                          "z = linear(x, D) * R + 2 * 3\n" LOSS TRAIN);
    assert_int_equal(g->inputs[0].shape.d[1], 32);
    assert_int_equal(g->batch, 3);
    IrNode *z = named(g, "z");
    assert_int_equal(z->shape.d[1], 8);
    assert_int_equal(z->in[1]->op, OP_CONST);   /* 2 * 3 folded */
    assert_true(z->in[1]->fa[0] == 6);
    assert_true(z->in[0]->in[1]->fa[0] == 3.5);
    assert_int_equal(z->in[0]->in[1]->shape.rank, 0);

    lower_err("model m\nconst D = 25 / 2\ninput x: f32[4, D]\n", "dimension must be an integer, got 12.5");
    lower_err("model m\nconst D = 2.0\ninput x: f32[4, D]\n", "dimension must be an integer, got 2.0");
    lower_err("model m\ninput x: f32[4, 0]\n", "dimension must be >= 1, got 0");
    lower_err("model m\ninput x: f32[4, 3 - 5]\n", "dimension must be >= 1, got -2");
    lower_err("model m\nconst D = 9223372036854775807 + 1\n", "integer overflow in a constant expression");
    lower_err("model m\nconst D = 3037000500 * 3037000500\n", "integer overflow");
    lower_err("model m\nconst D = -9223372036854775807 - 2\n", "integer overflow");
    lower_err("model m\nconst D = 2 ** 63\n", "integer overflow");
    lower_err("model m\nconst D = 1 / 0\n", "division by zero");
    lower_err("model m\nconst D = 1.5 / 0.0\n", "division by zero");
    lower_err("model m\nconst D = 10.0 ** 400\n", "not a finite number");
    lower_err("model m\ninput x: f32[4294967296, 4294967296, 4]\n", "has too many elements");
    lower_err("model m\ninput x: f32[4, 8]\nconst C = x\n", "const 'C' needs a number known at compile time");
    /* constant edge cases that are fine */
    g = lower_ok("model m\nconst P = 1 ** 100\nconst Q = (-1) ** 63 + 2\nconst Z = 0 ** 0\n"
                 "const M = -9223372036854775807 - 1\n"
                 "input x: f32[4, P + Q + Z]\ninput y: i32[4]\nz = x\n" LOSS TRAIN);
    assert_int_equal(g->inputs[0].shape.d[1], 3);
}

/* ---- the train block ------------------------------------------------------------ */

static void train_defaults(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(HEAD "z = x\n" LOSS TRAIN);
    TrainCfg *t = &g->train;
    assert_int_equal(t->opt, OPT_ADAM);
    assert_true(t->lr == 1e-3 && t->beta1 == 0.9 && t->beta2 == 0.999 && t->eps == 1e-8);
    assert_true(t->weight_decay == 0);
    assert_int_equal(t->policy, POLICY_MIXED_F16);
    assert_false(t->policy_set);
    assert_int_equal(t->ls, LS_DYNAMIC);
    assert_false(t->ls_set);
    assert_true(t->ls_init == 32768 && t->ls_growth == 2 && t->ls_backoff == 0.5);
    assert_int_equal(t->ls_interval, 2000);
    assert_int_equal(t->sched, SCHED_CONSTANT);
    assert_true(t->clip == 0);
    assert_int_equal(t->accumulate, 1);
    assert_int_equal(t->steps, 1000);
    assert_int_equal(t->seed, 0);
    assert_int_equal(t->nfp16_ops + t->nfp32_ops, 0);

    g = lower_ok(HEAD "z = x\n" LOSS "train {\n  optimizer = adamw(lr = 3e-4)\n"
                 "  precision = mixed_bfloat16\n  minimize loss\n}\n");
    assert_int_equal(g->train.opt, OPT_ADAMW);
    assert_true(g->train.weight_decay == 0.01);
    assert_int_equal(g->train.ls, LS_NONE);   /* no scaling for bf16 */
    assert_true(g->train.policy_set);

    /* rmsprop: torch's defaults, then every argument */
    g = lower_ok(HEAD "z = x\n" LOSS "train {\n  optimizer = rmsprop(lr = 0.01)\n  minimize loss\n}\n");
    assert_int_equal(g->train.opt, OPT_RMSPROP);
    assert_true(g->train.lr == 0.01 && g->train.alpha == 0.99 && g->train.eps == 1e-8);
    assert_true(g->train.momentum == 0 && g->train.weight_decay == 0 && !g->train.centered);
    assert_int_equal(opt_slots(&g->train), 1);
    g = lower_ok(HEAD "z = x\n" LOSS "train {\n  optimizer = rmsprop(lr = 0.01, alpha = 0.9, eps = 1e-6, "
                 "momentum = 0.5, centered = true, weight_decay = 0.1)\n  minimize loss\n}\n");
    assert_true(g->train.alpha == 0.9 && g->train.eps == 1e-6 && g->train.momentum == 0.5);
    assert_true(g->train.centered && g->train.weight_decay == 0.1);
    assert_int_equal(opt_slots(&g->train), 3);
    lower_err(HEAD "z = x\n" LOSS "train {\n  optimizer = rmsprop(lr = 0.01, alpha = 1.5)\n  minimize loss\n}\n",
              "rmsprop alpha must be in [0, 1], got 1.5");
    lower_err("model m\ninput x: f32[2, 3, 4, 4]\nz = upsample(x, 2, align_corners = true)\nloss = sum(z)\n"
              "train {\n  minimize loss\n}\n", "align_corners applies to mode = \"bilinear\" only");
    lower_err("model m\ninput x: f32[2, 3, 4, 4]\nz = pad(x, [1, 1], mode = \"mirror\")\nloss = sum(z)\n"
              "train {\n  minimize loss\n}\n", "unknown pad mode \"mirror\"");
    lower_err("model m\ninput x: f32[2, 3, 4, 4]\nz = pad(x, [1, 1], value = 2, mode = \"reflect\")\n"
              "loss = sum(z)\ntrain {\n  minimize loss\n}\n", "pad value applies to mode = \"constant\" only");
    lower_err("model m\ninput x: f32[2, 3, 4, 4]\nz = pad(x, [4, 1], mode = \"reflect\")\nloss = sum(z)\n"
              "train {\n  minimize loss\n}\n", "pad mode \"reflect\" takes pads smaller than the axis: 4");
    lower_err("model m\ninput x: f32[2, 3, 4, 4]\nz = pad(x, [5, 1], mode = \"circular\")\nloss = sum(z)\n"
              "train {\n  minimize loss\n}\n", "pads no larger than the axis: 5");
    lower_err("model m\ninput x: f32[2, 3, 4, 4]\nz = pad(x, [-1, 1], mode = \"replicate\")\nloss = sum(z)\n"
              "train {\n  minimize loss\n}\n", "takes no negative pads");
    lower_err("model m\ninput x: f32[4, 4]\nz = pad(x, [1, 1, 1, 1], mode = \"replicate\")\nloss = sum(z)\n"
              "train {\n  minimize loss\n}\n", "at least one axis before them");
    lower_err(HEAD "z = x\n" LOSS "train {\n  optimizer = rmsprop(alpha = 0.9)\n  minimize loss\n}\n",
              "lr");

    /* --precision overrides, and the loss-scale default follows it */
    g = lower_policy(HEAD "z = x\n" LOSS "train {\n  optimizer = sgd(0.1)\n"
                     "  precision = mixed_bfloat16\n  minimize loss\n}\n", POLICY_MIXED_F16);
    assert_non_null(g);
    assert_int_equal(g->train.policy, POLICY_MIXED_F16);
    assert_int_equal(g->train.ls, LS_DYNAMIC);
    g = lower_policy(HEAD "z = x\n" LOSS TRAIN, POLICY_FLOAT32);
    assert_non_null(g);
    assert_int_equal(g->train.policy, POLICY_FLOAT32);
    assert_true(g->train.policy_set);
    assert_int_equal(g->train.ls, LS_NONE);
    /* a written loss scale stays whatever the policy */
    g = lower_policy(HEAD "z = x\n" LOSS "train {\n  optimizer = sgd(0.1)\n  loss_scale = static(128)\n"
                     "  minimize loss\n}\n", POLICY_FLOAT32);
    assert_non_null(g);
    assert_int_equal(g->train.ls, LS_STATIC);
    assert_true(g->train.ls_init == 128);
    assert_true(g->train.ls_set);
}

static void train_settings(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(HEAD "const S = 100\nz = x\n" LOSS
                          "train {\n"
                          "  optimizer = sgd(lr = 0.5, momentum = 0.9, nesterov = true, weight_decay = 1e-4)\n"
                          "  precision = float32\n"
                          "  loss_scale = none\n"
                          "  lr_schedule = cosine(warmup = 10, min = 1e-5)\n"
                          "  clip_grad_norm = 1.5\n"
                          "  accumulate = 4\n"
                          "  fp16_ops = [softmax, add]\n"
                          "  fp32_ops = [\"matmul\"]\n"
                          "  steps = S * 3\n"
                          "  seed = 42\n"
                          "  minimize loss\n"
                          "}\n");
    TrainCfg *t = &g->train;
    assert_int_equal(t->opt, OPT_SGD);
    assert_true(t->lr == 0.5 && t->momentum == 0.9 && t->nesterov && t->weight_decay == 1e-4);
    assert_int_equal(t->policy, POLICY_FLOAT32);
    assert_int_equal(t->ls, LS_NONE);
    assert_true(t->ls_set);
    assert_int_equal(t->sched, SCHED_COSINE);
    assert_true(t->warmup == 10 && t->sched_min == 1e-5);
    assert_true(t->clip == 1.5);
    assert_int_equal(t->accumulate, 4);
    assert_int_equal(t->nfp16_ops, 2);
    assert_string_equal(t->fp16_ops[1], "add");
    assert_int_equal(t->nfp32_ops, 1);
    assert_string_equal(t->fp32_ops[0], "matmul");
    assert_int_equal(t->steps, 300);
    assert_int_equal(t->seed, 42);

    g = lower_ok(HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  lr_schedule = linear(warmup = 5)\n"
                 "  loss_scale = dynamic\n  minimize loss\n}\n");
    assert_int_equal(g->train.sched, SCHED_LINEAR);
    assert_true(g->train.warmup == 5);
    assert_int_equal(g->train.ls, LS_DYNAMIC);
    assert_true(g->train.lr == 1e-3);
}

/* ---- names ------------------------------------------------------------------------ */

static void c_keywords_are_fine_names(void **state)
{
    (void)state;
    IrGraph *g = lower_ok("model int\ninput half: f32[4, 8]\ninput printf: i32[4]\n"
                          "main = linear(half, 3)\nwhile = relu(main)\n"
                          "loss = cross_entropy(while, printf)\n" TRAIN);
    assert_string_equal(g->model, "int");
    param(g, "main.weight");
}

static void rebinding(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(HEAD "z = relu(x)\nz = z + relu(z)\nz = z * 2\n" LOSS TRAIN);
    IrNode *z = named(g, "z");
    assert_int_equal(z->op, OP_MUL);
    assert_int_equal(z->in[0]->op, OP_ADD);
    assert_string_equal(z->in[0]->name, "z");
    /* aliasing a value does not rename it */
    g = lower_ok(HEAD "a = relu(x)\nz = a\n" LOSS TRAIN);
    assert_string_equal(named(g, "a")->name, "a");
}

static void examples_lower(void **state)
{
    (void)state;
    static const char *const files[] = {"examples/mnist_mlp.mp", "examples/mnist_cnn.mp",
                                        "examples/char_transformer.mp", "examples/digits_mlp.mp"};
    for (int i = 0; i < 4; i++) {
        capture_msgs();
        SrcFile *f = ast_read_file(&arena, files[i]);
        if (!f)
            fail_msg("cannot read %s (run from the repository root)", files[i]);
        Ast *ast = ast_parse(&arena, f);
        IrGraph *g = diag_error_count() ? NULL : sema_lower(&arena, ast, -1);
        fflush(msgf);
        if (!g)
            fail_msg("%s:\n%s", files[i], msgs);
    }
}

static void char_transformer_names(void **state)
{
    (void)state;
    capture_msgs();
    SrcFile *f = ast_read_file(&arena, "examples/char_transformer.mp");
    assert_non_null(f);
    IrGraph *g = sema_lower(&arena, ast_parse(&arena, f), -1);
    assert_non_null(g);
    expect_param(g, "tok.weight", 2, 65, 64);
    expect_param(g, "pos", 2, 64, 64);
    expect_param(g, "layers.0.attn.q.weight", 2, 64, 64);
    expect_param(g, "layers.1.mlp.fc.weight", 2, 256, 64);
    expect_param(g, "head.weight", 2, 65, 64);
    assert_int_equal(g->inputs[1].classes, 65);
    assert_int_equal(g->inputs[0].classes, 65);
    int att = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == OP_ATTENTION) {
            att++;
            assert_int_equal(g->nodes[i]->ia[0], 1);   /* causal */
            assert_int_equal(ir_attention(g->nodes[i]).H, 4);
            /* heads() and the transpose after it read and write in place
             * (fold_attention_layouts): y [B, T, H, D] */
            assert_int_equal(g->nodes[i]->ia[3], 1);
            assert_int_equal(g->nodes[i]->ia[4], 1);
            assert_int_equal(g->nodes[i]->shape.d[2], 4);
        }
    assert_int_equal(att, 2);
}

/* ---- LANGUAGE.md "Additions for real architectures": declarations, names ---- */

static void buffers_windows_u16(void **state)
{
    (void)state;
    IrGraph *g = lower_ok("model m\nconst B = 4\ninput x: f32[B, 8]\ninput seq: u16[B, 9] window\n"
                          "input ids: u16[B]\ninput y: i32[B]\nbuffer scale: [8] = constant(2)\n"
                          "block f(t) {\n  buffer s: [8] = ones()\n  return linear(t * s, 8, name = \"p\")\n}\n"
                          "z = f(x * scale, name = \"blk\")\n" LOSS TRAIN);
    IrParam *b = param(g, "scale");
    assert_false(b->trainable);
    assert_true(b->buffer);
    assert_int_equal(b->init, INIT_CONSTANT);
    assert_true(param(g, "blk.s")->buffer);
    assert_true(param(g, "blk.p.weight")->trainable);
    assert_false(param(g, "blk.p.weight")->buffer);
    assert_int_equal(g->inputs[1].type, DT_U16);
    assert_true(g->inputs[1].window);
    assert_false(g->inputs[0].window);
    assert_int_equal(g->inputs[2].type, DT_U16);
    /* the buffer is an input of the product, like a parameter */
    assert_int_equal(named(g, "scale")->op, OP_PARAM);
}

static void module_paths(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(HEAD "z = linear(x, 8, name = \"layer2.0.conv1\")\n"
                          "repeat 2 as transformer.h {\n  z = linear(z, 8, name = \"mlp.c_fc\")\n}\n"
                          "repeat 1 as stage.3 {\n  z = linear(z, 8, name = \"0\")\n}\n" LOSS TRAIN);
    expect_param(g, "layer2.0.conv1.weight", 2, 8, 8);
    expect_param(g, "transformer.h.0.mlp.c_fc.weight", 2, 8, 8);
    expect_param(g, "transformer.h.1.mlp.c_fc.bias", 1, 8, 0);
    expect_param(g, "stage.3.0.0.weight", 2, 8, 8);
    /* a numeric part in a parameter reference (torch's Sequential index) */
    g = lower_ok(HEAD "s = linear(x, 8, name = \"seq.0\")\nz = x @ transpose(seq.0.weight, [1, 0])\n" LOSS TRAIN);
    /* (the transpose a product reads is its transpose flag: fold_transposes) */
    assert_ptr_equal(named(g, "z")->in[1], param(g, "seq.0.weight")->node);
    assert_true(named(g, "z")->ia[1]);
}

#define NO_DECAY_MODEL HEAD "z = layer_norm(linear(x, 8, name = \"fc\"), name = \"ln_f\")\n" \
    "buffer mask: [8] = ones()\nz = z * mask\n" LOSS
#define OPTIM(o) "train {\n  optimizer = " o "\n  minimize loss\n}\n"

static void no_decay_groups(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(NO_DECAY_MODEL OPTIM("adamw(weight_decay = 0.1, no_decay = [vectors])"));
    assert_false(param(g, "fc.weight")->no_decay);
    assert_true(param(g, "fc.bias")->no_decay);
    assert_true(param(g, "ln_f.weight")->no_decay);
    assert_false(param(g, "out.weight")->no_decay);
    assert_false(param(g, "mask")->no_decay);        /* a buffer is in no group */
    assert_int_equal(diag_warning_count(), 0);
    g = lower_ok(NO_DECAY_MODEL OPTIM("sgd(0.1, weight_decay = 0.1, no_decay = [\"*.bias\", \"ln_*\"])"));
    assert_true(param(g, "fc.bias")->no_decay);
    assert_true(param(g, "out.bias")->no_decay);
    assert_true(param(g, "ln_f.weight")->no_decay);
    assert_false(param(g, "fc.weight")->no_decay);
    /* '*' crosses dots; a pattern must match the whole name */
    g = lower_ok(NO_DECAY_MODEL OPTIM("adam(no_decay = [\"*t.w*\", \"fc\"])"));
    assert_true(param(g, "out.weight")->no_decay);
    assert_false(param(g, "fc.weight")->no_decay);
    assert_int_equal(diag_warning_count(), 1);       /* "fc" matches nothing */
    assert_non_null(strstr(msgs, "t.mp:10:41: warning: no_decay pattern \"fc\" matches no trainable parameter"));
    g = lower_ok(NO_DECAY_MODEL OPTIM("adamw"));
    assert_false(param(g, "fc.bias")->no_decay);
}

static void warmup_styles(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n"
                          "  lr_schedule = cosine(warmup = 3, warmup_style = \"nanogpt\")\n  minimize loss\n}\n");
    assert_int_equal(g->train.warmup_style, WARMUP_NANOGPT);
    assert_int_equal(g->train.sched, SCHED_COSINE);
    g = lower_ok(HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n"
                 "  lr_schedule = linear(3, warmup_style = \"torch\")\n  minimize loss\n}\n");
    assert_int_equal(g->train.warmup_style, WARMUP_TORCH);
    g = lower_ok(HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n"
                 "  lr_schedule = linear(warmup = 3)\n  minimize loss\n}\n");
    assert_int_equal(g->train.warmup_style, WARMUP_TORCH);
}

/* ---- errors --------------------------------------------------------------------------- */

static const Case name_errors[] = {
    {HEAD "hh = relu(x)\nz = relu(h)\n" LOSS TRAIN, "t.mp:6:10: error: unknown name 'h', did you mean 'hh'?"},
    {HEAD "z = rleu(x)\n" LOSS TRAIN, "unknown operation 'rleu', did you mean 'relu'?"},
    {HEAD "z = frobnicate(x)\n" LOSS TRAIN, "unknown operation 'frobnicate'"},
    {HEAD "z = linear(x, 4, biass = false)\n" LOSS TRAIN, "unknown argument 'biass' of linear, did you mean 'bias'?"},
    {HEAD "z = linear(x, 4, n = 3)\n" LOSS TRAIN, "argument 'n' of linear is given twice"},
    {HEAD "z = linear(x)\n" LOSS TRAIN, "missing argument 'n' of linear(x, n, bias = true, name, init, bias_init)"},
    {HEAD "z = relu(x, 1)\n" LOSS TRAIN, "relu takes at most 1 argument, got 2"},
    {HEAD "z = relu(3)\n" LOSS TRAIN, "argument 'x' of relu must be a tensor, got 3"},
    {HEAD "z = linear(x, 2.5)\n" LOSS TRAIN, "argument 'n' of linear must be an integer, got 2.5"},
    {HEAD "z = linear(x, 4, bias = 1)\n" LOSS TRAIN, "argument 'bias' of linear must be true or false"},
    {HEAD "z = linear(x, 4, name = proj)\n" LOSS TRAIN, "argument 'name' of linear must be a string, e.g. \"proj\""},
    {HEAD "z = linear(x, 4, name = \"a b\")\n" LOSS TRAIN, "got \"a b\": its part 'a b' is neither an identifier nor a number"},
    {HEAD "z = reshape(x, 4)\n" LOSS TRAIN, "argument 'dims' of reshape must be a list"},
    {HEAD "z = relu\n" LOSS TRAIN, "'relu' is an operation, not a value"},
    {HEAD "z = x(3)\n" LOSS TRAIN, "'x' is an input, not an operation"},
    {HEAD "loss = cross_entropy(z, y)\nz = linear(x, 3)\n" TRAIN, "'z' is used before its definition"},
    {HEAD "z = h.weight\n" LOSS TRAIN, "unknown parameter 'h.weight'"},
    {HEAD "h = linear(x, 8)\nz = h.wieght\n" LOSS TRAIN, "unknown parameter 'h.wieght', did you mean 'h.weight'?"},
    {HEAD "z = \"s\"\n" LOSS TRAIN, "a string is only allowed as a 'name = \"...\"' argument"},
    {HEAD "z = [1, 2]\n" LOSS TRAIN, "a list [...] is only allowed"},
    {HEAD "z = x\n" LOSS TRAIN "loss = 3\n", "minimize needs a float scalar, but 'loss' is 3"},
    {HEAD "z = i32(x)\n" LOSS TRAIN, "cannot cast to i32"},
};

static const Case definition_errors[] = {
    {HEAD "const x = 3\nz = x\n" LOSS TRAIN, "'x' is already an input: a constant needs a name of its own"},
    {HEAD "const C = 1\nconst C = 2\nz = x\n" LOSS TRAIN, "constant 'C' is defined twice"},
    {HEAD "param w: [8, 8] = zeros()\nparam w: [8, 8] = zeros()\nz = x @ w\n" LOSS TRAIN, "parameter 'w' is defined twice"},
    {HEAD "B = relu(x)\nz = x\n" LOSS TRAIN, "'B' is a constant and cannot be rebound: only values can"},
    {HEAD "x = relu(x)\nz = x\n" LOSS TRAIN, "'x' is an input and cannot be rebound"},
    {HEAD "h = linear(x, 8)\nh = linear(h, 8)\nz = h\n" LOSS TRAIN, "parameter 'h.weight' is declared twice"},
    {HEAD "z = linear(linear(x, 5), 3)\n" LOSS TRAIN, "linear declares parameters and needs a name: only one unnamed layer per statement takes the name of its target ('z')"},
    {HEAD "block f(t) {\n  return linear(t, 3)\n}\nz = f(x)\n" LOSS TRAIN, "linear in a 'return' declares parameters and needs a name"},
    {HEAD "block f(t) {\n  u = relu(t)\n}\nz = f(x)\n" LOSS TRAIN, "block 'f' returns no value"},
    {HEAD "block f(t) {\n  return relu(x)\n}\nz = f(x)\n" LOSS TRAIN, "the input 'x' is not visible inside block 'f': pass it as an argument"},
    {HEAD "block f(t) {\n  return relu(t)\n}\nz = f(x, name = \"g\")\n" LOSS TRAIN, "block 'f' declares no parameters: name = \"...\" names nothing"},
    {HEAD "block f(t) {\n  return relu(t)\n}\nz = f(x, 3)\n" LOSS TRAIN, "block f(t) takes 1 argument, got 2"},
    {HEAD "block f(t) {\n  return t\n}\nblock f(t) {\n  return t\n}\nz = x\n" LOSS TRAIN, "block 'f' is defined twice"},
    {HEAD "block f(t) {\n  return f(t)\n}\nz = f(x)\n" LOSS TRAIN, "block 'f' calls itself (f -> f)"},
    {HEAD "block a(t) {\n  return b(t)\n}\nblock b(t) {\n  return c(t)\n}\nblock c(t) {\n  return a(t)\n}\n"
          "z = a(x)\n" LOSS TRAIN, "block 'a' calls itself (a -> b -> c -> a)"},
    {HEAD "metric m = relu(x)\nz = x\n" LOSS TRAIN, "metric 'm' must be a float scalar, got a tensor [4, 8]: reduce it"},
    {HEAD "z = x\nrepeat 2 as r {\n  metric m = mean(z)\n}\n" LOSS TRAIN, "a metric cannot be declared inside a repeat"},
    {"model m\ninput x: f32[4, 8]\ninput y: i32[5]\nz = x\n" LOSS TRAIN, "input 'y' has batch 5, but the inputs before it have batch 4"},
    {HEAD "z: i32 = x\n" LOSS TRAIN, "a typed assignment needs f32, f16 or bf16, got i32"},
    {HEAD "precision u8 {\n  z = x\n}\n" LOSS TRAIN, "a precision region needs f32, f16 or bf16, got u8"},
    {"model m\nconst B = 4\nz = 3\nloss = z\n" TRAIN, "the model declares no input"},
    {HEAD "z = x\nrepeat 0 as r {\n  z = relu(z)\n}\n" LOSS TRAIN, "repeat count must be >= 1, got 0"},
    {HEAD "z = x\nrepeat 1000000000 as r {\n  z = relu(z)\n}\n" LOSS TRAIN, "repeat count 1000000000 is too large (at most 100000)"},
    {HEAD "z = x\nrepeat 100000 as r {\n  z = relu(z) + z * z - z / z + sigmoid(z) * tanh(z) - exp(z) * z\n}\n" LOSS TRAIN,
     "repeat 100000 as r would make about 1200000 operations (12 per copy); a model may have at most 1000000"},
    {HEAD "param w: [8, 3] = frobnicate()\nz = x @ w\n" LOSS TRAIN, "unknown initialiser 'frobnicate'"},
    {HEAD "param w: [8, 3] = glorot_unifrom()\nz = x @ w\n" LOSS TRAIN, "unknown initialiser 'glorot_unifrom', did you mean 'glorot_uniform'?"},
    {HEAD "param w: [8, 3] = uniform(1, 0)\nz = x @ w\n" LOSS TRAIN, "uniform(lo, hi) needs lo <= hi"},
    {HEAD "param w: [8, 3] = normal(-1)\nz = x @ w\n" LOSS TRAIN, "normal(std) needs std >= 0"},
    {HEAD "z = embedding(y, 10, 4, bias_init = zeros())\n" LOSS TRAIN, "embedding has no bias"},
};

static const Case shape_errors[] = {
    {HEAD "param w: [7, 3] = zeros()\nz = x @ w\n" LOSS TRAIN, "t.mp:6:7: error: '@' needs matching inner dimensions, got [4, 8] @ [7, 3]"},
    {HEAD "param b: [3] = zeros()\nz = linear(x, 5) + b\n" LOSS TRAIN, "cannot broadcast [4, 5] with [3]"},
    {HEAD "z = reshape(x, [B, 7])\n" LOSS TRAIN, "reshape of [4, 8] (32 elements) to [4, 7] (28 elements): element counts differ"},
    {HEAD "z = conv2d(x, 4, 3)\n" LOSS TRAIN, "conv2d needs NCHW input [N, C, H, W], got [4, 8]"},
    {HEAD "z = conv2d(reshape(x, [B, 2, 2, 2]), 4, 1, groups = 3)\n" LOSS TRAIN,
     "t.mp:5:53: error: conv2d groups = 3 must divide the input channels (2) and the output channels (4)"},
    {HEAD "z = conv2d(reshape(x, [B, 2, 2, 2]), 3, 1, groups = 2)\n" LOSS TRAIN,
     "conv2d groups = 2 must divide the input channels (2) and the output channels (3)"},
    {HEAD "z = conv2d(reshape(x, [B, 2, 2, 2]), 4, 1, stride = 2, padding = \"same\")\n" LOSS TRAIN,
     "t.mp:5:66: error: conv2d padding = \"same\" needs stride 1 (as torch), got stride 2"},
    {HEAD "z = conv2d(reshape(x, [B, 2, 2, 2]), 4, [1, 1, 1])\n" LOSS TRAIN,
     "t.mp:5:41: error: kernel of conv2d must be an integer or a pair [h, w], got a list of 3"},
    {HEAD "z = conv2d(reshape(x, [B, 2, 2, 2]), 4, 1, padding = \"full\")\n" LOSS TRAIN,
     "padding of conv2d must be an integer or a pair [h, w], \"same\" or \"valid\", got \"full\""},
    {HEAD "z = conv2d(reshape(x, [B, 2, 2, 2]), 4, 1, dilation = [1, 0])\n" LOSS TRAIN,
     "dilation of conv2d must be >= 1, got 0"},
    {HEAD "z = conv2d(reshape(x, [B, 2, 2, 2]), 4, [1, 1.5])\n" LOSS TRAIN,
     "kernel of conv2d must be a pair of integers, got 1.5"},
    {HEAD "z = conv2d(reshape(x, [B, 2, 2, 2]), 4, 3, dilation = 2)\n" LOSS TRAIN,
     "conv2d kernel 3 x 3 (dilation 2 x 2) does not fit input [4, 2, 2, 2] with its padding"},
    {HEAD "z = conv1d(reshape(x, [B, 2, 4]), 4, [3, 1])\n" LOSS TRAIN,
     "kernel of conv1d must be an integer, got a list of 2"},
    {HEAD "z = conv1d(x, 4, 3)\n" LOSS TRAIN, "conv1d needs an input [N, C, L], got [4, 8]"},
    {HEAD "z = max_pool2d(reshape(x, [B, 2, 2, 2]), 2, padding = 2)\n" LOSS TRAIN,
     "t.mp:5:55: error: max_pool2d padding must be at most half the kernel (as torch), got padding 2 with kernel 2"},
    {HEAD "z = x\nloss = cross_entropy(linear(z, 3), x)\n" TRAIN, "cross_entropy needs integer labels (i32, u16 or u8), got f32"},
    {"model m\ninput x: f32[128, 8]\ninput y: i32[128, 2]\nz = x\nloss = cross_entropy(linear(z, 10), reshape(y, [64, 4]))\n" TRAIN,
     "cross_entropy labels [64, 4] do not match logits [128, 10]"},
    {HEAD "z = y / 2\n" LOSS TRAIN, "'/' needs a float tensor, got i32: cast it first, e.g. f32(y)"},
    {HEAD "z = x ** 2\n" LOSS TRAIN, "'**' works on constants only"},
    {HEAD "z = x @ 2\n" LOSS TRAIN, "'@' needs two tensors, got a tensor [4, 8] and 2"},
    {HEAD "z = sum(x, 2)\n" LOSS TRAIN, "sum axis 2 is out of range for [4, 8] (rank 2: axes -2 to 1)"},
    {HEAD "z = transpose(x, [0])\n" LOSS TRAIN, "transpose of [4, 8] needs a permutation of its 2 axes, got 1"},
    {HEAD "z = dropout(x, 1.5)\n" LOSS TRAIN, "dropout probability must be in [0, 1), got 1.5"},
    {HEAD "z = linear(x, 0)\n" LOSS TRAIN, "linear output size must be >= 1, got 0"},
    {HEAD "z = batch_norm(reshape(x, [4, 2, 4]))\n" LOSS TRAIN, "batch_norm needs an input [N, C, H, W] or [B, C], got [4, 2, 4]"},
    {HEAD "z = attention(x, x, x)\n" LOSS TRAIN, "attention needs q, k, v [B, H, T, D], got [4, 8]"},
    {HEAD "z = embedding(x, 10, 4)\n" LOSS TRAIN, "embedding needs integer ids (i32, u16 or u8), got f32"},
    {"model m\ninput x: f32[4, 8]\ninput y: i32[4]\nz = x\nloss = cross_entropy(linear(z, 3), y)\n"
     "metric a = accuracy(linear(z, 5, name = \"o\"), y)\n" TRAIN, "'y' is used with 5 classes here but 3 classes before"},
};

static const Case real_arch_errors[] = {
    {HEAD "input s: u16[B] window\nz = x\n" LOSS TRAIN, "t.mp:5:17: error: a window input has the shape [B, W] (batch, window length), but 's' has 1 dimension"},
    {HEAD "input s: u16[B, 2, 3] window\nz = x\n" LOSS TRAIN, "but 's' has 3 dimensions"},
    {HEAD "input s: u16[B, 1] window\nz = x\n" LOSS TRAIN, "t.mp:5:17: error: a window input needs a window length W >= 2, got 1"},
    {HEAD "z = u16(x)\n" LOSS TRAIN, "cannot cast to u16"},
    {HEAD "z = linear(x, 4, name = \"a..b\")\n" LOSS TRAIN, "got \"a..b\": it has an empty part between two dots"},
    {HEAD "z = linear(x, 4, name = \"a.\")\n" LOSS TRAIN, "got \"a.\": it ends with a dot"},
    {HEAD "z = linear(x, 4, name = \".a\")\n" LOSS TRAIN, "got \".a\": it starts with a dot"},
    {HEAD "z = linear(x, 4, name = \"\")\n" LOSS TRAIN, "got \"\": it is empty"},
    {HEAD "z = linear(x, 4, name = \"a.0x\")\n" LOSS TRAIN, "its part '0x' is neither an identifier nor a number"},
    {HEAD "z = x\nrepeat 2 as h.0x {\n  z = relu(z)\n}\n" LOSS TRAIN, "t.mp:6:13: error: a repeat's name must be a module path"},
    {HEAD "param h: [8] = zeros()\nz = x * h\ng = linear(x, 8, name = \"h\")\n" LOSS TRAIN,
     "t.mp:7:5: error: 'h' would be both a tensor and the module holding 'h.bias'"},
    {HEAD "buffer out.weight.s: [8] = zeros()\nz = x\n" LOSS TRAIN, "'out.weight' would be both a tensor and the module holding 'out.weight.s'"},
    {HEAD "buffer s: [8] = zeros()\nbuffer s: [8] = ones()\nz = x\n" LOSS TRAIN, "buffer 's' is defined twice"},
    {HEAD "buffer s: [8] = zeros()\ns = x\nz = x\n" LOSS TRAIN, "'s' is a buffer and cannot be rebound"},
    {HEAD "buffer s: [8] = ones()\nz = x * s\nloss = mean(z)\n" TRAIN, "'loss' does not depend on any trainable parameter"},
    {HEAD "z = x\n" LOSS OPTIM("adamw(no_decay = [biases])"), "t.mp:8:33: error: unknown no_decay pattern 'biases': write a name pattern as a string"},
    {HEAD "z = x\n" LOSS OPTIM("adamw(no_decay = [3])"), "no_decay lists name patterns, e.g. [\"*.bias\", vectors]"},
    {HEAD "z = x\n" LOSS OPTIM("adamw(no_decay = vectors)"), "argument 'no_decay' of adamw must be a list"},
    {HEAD "z = x\n" LOSS OPTIM("sgd(1, no_decay = \"*.bias\")"), "argument 'no_decay' of sgd must be a list"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  lr_schedule = cosine(warmup = 2, warmup_style = \"nanogtp\")\n  minimize loss\n}\n",
     "t.mp:9:51: error: unknown warmup_style \"nanogtp\" (did you mean \"nanogpt\"?): expected \"torch\" or \"nanogpt\""},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  lr_schedule = linear(warmup_style = nanogpt)\n  minimize loss\n}\n",
     "argument 'warmup_style' of linear must be a string"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  lr_schedule = constant(warmup_style = \"torch\")\n  minimize loss\n}\n",
     "unknown argument 'warmup_style' of constant"},
};

static const Case train_errors[] = {
    {HEAD "z = x\n" LOSS, "the model has no train block"},
    {HEAD "z = x\n" LOSS "train {\n  minimize loss\n}\n", "the train block needs an optimizer"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n}\n", "the train block needs 'minimize NAME'"},
    {HEAD "z = x\n" LOSS "train {\n  optimizr = adam\n  minimize loss\n}\n", "unknown train setting 'optimizr', did you mean 'optimizer'?"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adamm(lr = 1)\n  minimize loss\n}\n", "unknown optimizer 'adamm', did you mean 'adam'?"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = sgd\n  minimize loss\n}\n", "missing argument 'lr' of sgd("},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = sgd(-1)\n  minimize loss\n}\n", "sgd lr must be > 0, got -1"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = sgd(1, nesterov = true)\n  minimize loss\n}\n", "nesterov = true needs momentum > 0"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam(beta2 = 1)\n  minimize loss\n}\n", "adam beta2 must be in [0, 1), got 1"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  precision = mixed_float17\n  minimize loss\n}\n", "unknown precision 'mixed_float17', did you mean 'mixed_float16'?"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  precision = 3\n  minimize loss\n}\n", "precision must be float32, mixed_float16, mixed_bfloat16 or mixed_float8"},
    /* mixed_float8's keys (PRECISION.md "Additions: TF32 and FP8") */
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  fp8 = delayd\n  minimize loss\n}\n", "unknown fp8 'delayd', did you mean 'delayed'?"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  fp8 = delayed(amax_history = 0)\n  minimize loss\n}\n", "delayed amax_history must be in [1, 1024], got 0"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  fp8 = current(margin = -1)\n  minimize loss\n}\n", "current margin must be in [0, 32], got -1"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  fp8 = current(amax_history = 4)\n  minimize loss\n}\n", "amax_history"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  fp8_ops = [relu]\n  minimize loss\n}\n", "fp8_ops lists products, linear or matmul; 'relu' is not one"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  fp8_ops = [matmul]\n  fp32_ops = [matmul]\n  minimize loss\n}\n", "'matmul' is in both fp8_ops and fp32_ops"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  loss_scale = dynamic(init = 0.5)\n  minimize loss\n}\n", "dynamic init must be >= 1, got 0.5"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  loss_scale = dynamic(backoff = 2)\n  minimize loss\n}\n", "dynamic backoff must be in (0, 1), got 2"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  loss_scale = static\n  minimize loss\n}\n", "missing argument 'v' of static(v)"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  lr_schedule = cosine(warmup = -1)\n  minimize loss\n}\n", "cosine warmup must be >= 0, got -1"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  lr_schedule = exponential\n  minimize loss\n}\n", "unknown lr_schedule 'exponential': expected constant, cosine or linear"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  steps = 0\n  minimize loss\n}\n", "steps must be >= 1, got 0"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  accumulate = 2.5\n  minimize loss\n}\n", "accumulate must be an integer, got 2.5"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  seed = -1\n  minimize loss\n}\n", "seed must be >= 0, got -1"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  clip_grad_norm = 0\n  minimize loss\n}\n", "clip_grad_norm must be > 0, got 0"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  fp16_ops = [softmx]\n  minimize loss\n}\n", "unknown operation 'softmx' in fp16_ops, did you mean 'softmax'?"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  fp16_ops = softmax\n  minimize loss\n}\n", "fp16_ops must be a list of operation names"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  fp16_ops = [add]\n  fp32_ops = [add]\n  minimize loss\n}\n", "'add' is in both fp16_ops and fp32_ops"},
    {HEAD "z = x\n" LOSS "metric a = accuracy(linear(z, 3, name = \"o2\"), y)\ntrain {\n  optimizer = adam\n  minimize a\n}\n", "'a' is a metric, which is never differentiated"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  minimize z\n}\n", "minimize needs a float scalar, but 'z' is a tensor [4, 8]: reduce it"},
    {HEAD "z = x\n" LOSS "train {\n  optimizer = adam\n  minimize lss\n}\n", "unknown name 'lss', did you mean 'loss'?"},
    {HEAD "z = x\nloss = mean(x)\ntrain {\n  optimizer = adam\n  minimize loss\n}\n", "'loss' does not depend on any trainable parameter"},
};

/* conv2d's groups, dilation, pairs, "same"; conv1d as conv2d of height 1 */
static void convolutions(void **state)
{
    (void)state;
    IrGraph *g = lower_ok("model cnn\ninput img: f32[2, 4, 9, 8]\ninput s: f32[2, 6, 10]\ninput y: i32[2]\n"
                          "a = conv2d(img, 8, 3, padding = 1, groups = 4, bias = false, name = \"dw\")\n"
                          "b = conv2d(a, 8, [2, 3], stride = [1, 2], padding = [0, 1], dilation = [2, 1], groups = 2)\n"
                          "c = conv2d(img, 4, 4, padding = \"same\", dilation = [1, 2], name = \"same\")\n"
                          "d = conv1d(s, 3, 3, stride = 2, dilation = 2, groups = 3, name = \"seq\")\n"
                          "z = concat([reshape(b, [2, -1]), reshape(c, [2, -1]), reshape(d, [2, -1])], axis = 1)\n"
                          "mp = max_pool2d(img, 3, 2, padding = 1)\n"
                          "ap = avg_pool2d(img, 3, 2, padding = 1, count_include_pad = false)\n"
                          "metric pools = mean(mp) + mean(ap)\n"
                          "loss = cross_entropy(linear(z, 3), y)\n" TRAIN);
    expect_param(g, "dw.weight", 4, 8, 1);
    IrNode *mp = named(g, "mp"), *ap = named(g, "ap");
    assert_int_equal(mp->ia[2], 1);
    assert_int_equal(mp->ia[3], 0);
    assert_int_equal(mp->shape.d[2], 5);                     /* (9 + 2 - 3) / 2 + 1 */
    assert_int_equal(ap->ia[3], 1);                          /* count_include_pad = false */
    assert_int_equal(param(g, "dw.weight")->fan_in, 9);      /* Cin / groups kh kw */
    IrNode *a = named(g, "a"), *b = named(g, "b"), *c = named(g, "c"), *d = named(g, "d");
    assert_int_equal(a->ia[6], 4);
    assert_int_equal(a->shape.d[2], 9);
    int64_t bgeo[8] = {1, 2, 0, 1, 2, 1, 2, 0};
    assert_memory_equal(b->ia, bgeo, sizeof bgeo);
    assert_int_equal(b->shape.d[2], 7);                      /* 9 - 2 (2 - 1) */
    assert_int_equal(b->shape.d[3], 4);                      /* (8 + 2 - 3) / 2 + 1 */
    expect_param(g, "b.weight", 4, 8, 4);
    assert_int_equal(param(g, "b.weight")->shape.d[2], 2);
    /* "same", k 4: rows 1 before, 2 after; columns (dilation 2) 3 and 3 */
    int64_t cgeo[8] = {1, 1, 1, 3, 1, 2, 1, 2};
    assert_memory_equal(c->ia, cgeo, sizeof cgeo);
    assert_int_equal(c->shape.d[2], 9);
    assert_int_equal(c->shape.d[3], 8);
    /* conv1d: weight [c, Cin / groups, k] as nn.Conv1d, output [N, c, L'] */
    expect_param(g, "seq.weight", 3, 3, 2);
    assert_int_equal(param(g, "seq.weight")->shape.d[2], 3);
    assert_int_equal(d->op, OP_RESHAPE);
    assert_int_equal(d->shape.rank, 3);
    assert_int_equal(d->shape.d[2], 3);                      /* (10 - 4 - 1) / 2 + 1 */
    assert_int_equal(d->in[0]->op, OP_CONV2D);
}

static void errors_names(void **state) { (void)state; RUN(name_errors); }
static void errors_definitions(void **state) { (void)state; RUN(definition_errors); }
static void errors_shapes(void **state) { (void)state; RUN(shape_errors); }
static void errors_train(void **state) { (void)state; RUN(train_errors); }
static void errors_real_arch(void **state) { (void)state; RUN(real_arch_errors); }

/* One mistake, one message; several mistakes, all reported. */
static void errors_are_counted_once_and_all_reported(void **state)
{
    (void)state;
    lower_err(HEAD "z = relu(hh)\nw = z + z\nv = linear(w, 3)\n" LOSS TRAIN, "unknown name 'hh'");
    assert_int_equal(diag_error_count(), 1);
    lower_err(HEAD "a = relu(q1)\nb = relu(q2)\nc = relu(q3)\nz = x\n" LOSS TRAIN, "q3");
    assert_int_equal(diag_error_count(), 3);
    /* a block with a mistake, called three times: reported once */
    lower_err(HEAD "block f(t) {\n  return relu(qq)\n}\na = f(x)\nb = f(x)\nc = f(x)\nz = x\n" LOSS TRAIN, "qq");
    assert_int_equal(diag_error_count(), 1);
    /* a repeat with a mistake: reported once, not per copy */
    lower_err(HEAD "z = x\nrepeat 50 as r {\n  z = relu(qq)\n}\n" LOSS TRAIN, "qq");
    assert_int_equal(diag_error_count(), 1);
    /* more than the limit: stops at DIAG_MAX_ERRORS */
    char src[4096] = HEAD;
    for (int i = 0; i < 40; i++)
        snprintf(src + strlen(src), sizeof src - strlen(src), "a%d = relu(nope%d)\n", i, i);
    strcat(src, "z = x\n" LOSS TRAIN);
    lower_err(src, "nope0");
    assert_int_equal(diag_error_count(), DIAG_MAX_ERRORS);
}

/* Blocks nested many levels (no recursion) expand; the node limit holds. */
static void expansion_limits(void **state)
{
    (void)state;
    char src[8192] = HEAD "block g0(t) {\n  return t + t\n}\n";
    for (int i = 1; i < 25; i++)
        snprintf(src + strlen(src), sizeof src - strlen(src),
                 "block g%d(t) {\n  return g%d(g%d(t))\n}\n", i, i - 1, i - 1);
    strcat(src, "z = g24(x)\n" LOSS TRAIN);   /* 2^24 additions */
    lower_err(src, "the model expands to more than 1000000 operations");
}

/* ---- elementwise, norm, rope and loss additions ----------------------------------- */

static void additions(void **state)
{
    (void)state;
    IrGraph *g = lower_ok("model llama\ninput t: u8[2, 6]\ninput y: u8[2, 6]\n"
                          "e = embedding(t, 11, 8)\n"
                          "n = rms_norm(e, eps = 1e-6)\n"
                          "l = layer_norm(n, bias = false)\n"
                          "q = rope(reshape(l, [2, 6, 2, 4]), -3, theta = 500, style = \"half\")\n"
                          "r = rope(q, axis = 1)\n"
                          "a = gelu(reshape(r, [2, 6, 8]), approximate = \"tanh\")\n"
                          "b = clamp(maximum(a, 0), -1, 2) + pow(abs(a), 1.5) + minimum(sin(a), cos(a))\n"
                          "loss = cross_entropy(linear(b, 11, name = \"head\"), y, ignore_index = 3, "
                          "label_smoothing = 0.1)\n"
                          "metric acc = accuracy(linear(b, 11, name = \"head2\"), y)\n" TRAIN);
    expect_param(g, "n.weight", 1, 8, 0);
    assert_int_equal(param(g, "n.weight")->init, INIT_ONES);
    assert_null(ir_find_param(g, "n.bias"));
    assert_true(named(g, "n")->fa[0] == 1e-6);
    expect_param(g, "l.weight", 1, 8, 0);
    assert_null(ir_find_param(g, "l.bias"));
    assert_int_equal(named(g, "l")->nin, 2);
    IrNode *q = named(g, "q"), *r = named(g, "r");
    assert_true(q->ia[0] == 1 && q->ia[1] == 1 && q->fa[0] == 500);
    assert_true(r->ia[0] == 1 && r->ia[1] == 0 && r->fa[0] == 10000);
    assert_int_equal(named(g, "a")->ia[0], 1);
    IrNode *loss = named(g, "loss");
    assert_int_equal(loss->op, OP_CROSS_ENTROPY);
    assert_true(loss->ia[0] == 1 && loss->ia[1] == 3 && loss->fa[0] == 0.1);
    assert_int_equal(g->inputs[1].classes, 11);
    assert_true(g->inputs[1].has_ignore && g->inputs[1].ignore == 3);
    assert_false(g->inputs[0].has_ignore);

    g = lower_ok(HEAD "z = gelu(x)\nloss = cross_entropy(linear(z, 3), y, ignore_index = none)\n" TRAIN);
    assert_int_equal(named(g, "z")->ia[0], 0);
    assert_int_equal(named(g, "loss")->ia[0], 0);
    assert_false(g->inputs[1].has_ignore);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(spec_model), T(block_naming), T(repeat_naming), T(layers), T(views_and_axes), T(structural_ops), T(random_ops),
        T(overrides), T(constants), T(train_defaults), T(train_settings),
        T(c_keywords_are_fine_names), T(rebinding), T(examples_lower), T(char_transformer_names),
        T(buffers_windows_u16), T(module_paths), T(no_decay_groups), T(warmup_styles),
        T(convolutions), T(errors_names), T(errors_definitions), T(errors_shapes), T(errors_train), T(errors_real_arch),
        T(errors_are_counted_once_and_all_reported), T(expansion_limits), T(additions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
