/* test_sema_blocks.c - blocks that shadow built-ins, `name = ""`, blocks
 * of several values, the functions and operators of constants, and `for`
 * loops with shared layers (sema_blocks.c, sema_const.c), on real source
 * text with the wording a user sees. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "sema_harness.h"

#include <math.h>

#define TRAIN "train {\n  optimizer = adam(lr = 1e-3)\n  minimize loss\n}\n"

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static bool is_type_name(const char *name)
{
    for (int t = TY_F32; t <= TY_U16; t++)
        if (strcmp(ast_type_name((TypeName)t), name) == 0)
            return true;
    return false;
}

static bool is_builtin(const char *name)
{
    for (int i = 0; sema_builtin_name(i); i++)
        if (strcmp(sema_builtin_name(i), name) == 0)
            return true;
    return false;
}

/* A block named like `name`, called, must be what the call runs; the
 * compiler notes the shadowing once, and only of a real built-in. */
static void shadow_one(const char *name)
{
    char src[1024];
    snprintf(src, sizeof src,
             "model m\ninput x: f32[4, 8]\ninput y: f32[4, 8]\nparam w: [8, 8] = normal(0.1)\n"
             "block %s(t) {\n  return t * 2\n}\n"
             "z = %s(x @ w)\nq = %s(z)\nloss = %s(q - y)\n" TRAIN,
             name, name, name, strcmp(name, "sum") ? "sum" : "mean");
    IrGraph *g = lower_policy(src, -1);
    if (!g)
        fail_msg("a block named '%s' does not compile:\n%s", name, msgs);
    if (named(g, "z")->op != OP_MUL || named(g, "q")->op != OP_MUL)
        fail_msg("a call of '%s' did not run the block", name);
    char note[256];
    snprintf(note, sizeof note, "t.mp:5:7: note: block '%s' shadows the built-in operation '%s'", name,
             name);
    int want = is_builtin(name);
    if (count(msgs, note) != want || count(msgs, "note:") != want)
        fail_msg("block '%s': expected the note %d time(s), got:\n%s", name, want, msgs);
}

/* Every operation a model may call, and every forward op of the table (so
 * that ops added later are covered without touching this test). */
static void blocks_shadow_builtins(void **state)
{
    (void)state;
    int n = 0;
    for (int i = 0; sema_builtin_name(i); i++)
        if (!is_type_name(sema_builtin_name(i)))
            shadow_one(sema_builtin_name(i)), n++;
    for (int op = 0; op < OP__COUNT; op++)
        if (op_info[op].kind == OPK_FWD && !is_builtin(op_info[op].name))
            shadow_one(op_info[op].name), n++;
    assert_true(n > 40);
    /* a shadowing block with parameters: a layer name comes from the target */
    IrGraph *g = lower_ok("model m\ninput x: f32[4, 8]\ninput y: f32[4, 3]\n"
                          "block linear(t, n) {\n  return relu(t) @ w\n}\n"
                          "param w: [8, 3] = zeros()\nloss = mse(x @ w, y)\n" TRAIN);
    assert_non_null(g);
    lower_err("model m\ninput x: f32[4, 8]\ninput y: f32[4, 3]\n"
              "block linear(t, n) {\n  param w: [8, 3] = zeros()\n  return t @ w\n}\n"
              "block linear(t) {\n  return t\n}\nloss = mse(linear(x, 3), y)\n" TRAIN,
              "block 'linear' is defined twice");
}

/* name = "": the block's parameters are named as if its body were
 * written at the call (nn.ModuleList layers inside a repeat). */
static void block_without_name_level(void **state)
{
    (void)state;
    IrGraph *g = lower_ok("model m\ninput x: f32[4, 8]\ninput y: f32[4, 8]\n"
                          "block layer(t) {\n  fc = linear(t, 8)\n  return relu(fc)\n}\n"
                          "h = x\nrepeat 2 as layers {\n  h = layer(h, name = \"\")\n}\n"
                          "u = layer(h, name = \"top\")\nloss = mse(u, y)\n" TRAIN);
    param(g, "layers.0.fc.weight");
    param(g, "layers.1.fc.bias");
    param(g, "top.fc.weight");
    assert_int_equal(g->nparams, 6);
    /* a block without parameters may be called with name = "" too */
    lower_ok("model m\ninput x: f32[4, 8]\ninput y: f32[4, 8]\nblock f(t) {\n  return relu(t)\n}\n"
             "loss = mse(linear(f(x, name = \"\"), 8, name = \"o\"), y)\n" TRAIN);
    lower_err("model m\ninput x: f32[4, 8]\ninput y: f32[4, 8]\n"
              "block layer(t) {\n  fc = linear(t, 8)\n  return fc\n}\n"
              "a = layer(x, name = \"\")\nb = layer(a, name = \"\")\nloss = mse(b, y)\n" TRAIN,
              "parameter 'fc.weight' is declared twice");
}

static const char vae[] =
    "model vae\ninput x: f32[4, 8]\ninput y: f32[4, 2]\n"
    "block encode(t) {\n  h = relu(linear(t, 6, name = \"fc1\"))\n"
    "  mu = linear(h, 2, name = \"fc21\")\n  return mu, linear(h, 2, name = \"fc22\")\n}\n";

static const char *vae_src(void)
{
    static char src[1024];
    snprintf(src, sizeof src, "%smu, logvar = encode(x, name = \"\")\n"
             "loss = mse(mu + logvar, y)\n" TRAIN, vae);
    return src;
}

/* return mu, logvar; mu, logvar = encode(x) */
static void blocks_of_several_values(void **state)
{
    (void)state;
    IrGraph *g = lower_ok(vae_src());
    IrNode *loss = named(g, "loss");
    IrNode *mu = named(g, "mu"), *lv = named(g, "logvar");
    assert_int_equal(mu->op, OP_LINEAR);
    assert_ptr_equal(mu->in[1], param(g, "fc21.weight")->node);
    assert_ptr_equal(lv->in[1], param(g, "fc22.weight")->node);
    assert_int_equal(loss->op, OP_MSE);
    /* under a name, and nested in another block's tuple assignment */
    g = lower_ok("model vae\ninput x: f32[4, 8]\ninput y: f32[4, 2]\n"
                 "block two(t) {\n  a, b = chunk(linear(t, 4, name = \"fc\"), 2)\n  return b, a\n}\n"
                 "block outer(t) {\n  p, q = two(t, name = \"in\")\n  return q - p\n}\n"
                 "d = outer(x)\nloss = mse(d, y)\n" TRAIN);
    param(g, "d.in.fc.weight");
}

static const Case several_value_errors[] = {
    {"model m\ninput x: f32[4, 8]\nblock f(t) {\n  return t, t\n}\nz = f(x) + x\n",
     "t.mp:6:5: error: block 'f' returns 2 values: bind them with a tuple assignment, e.g. 'a, b = f(...)'"},
    {"model m\ninput x: f32[4, 8]\nblock f(t) {\n  return t, t\n}\na, b, c = f(x)\n",
     "t.mp:6:11: error: block 'f' returns 2 values, but the tuple assignment has 3 names"},
    {"model m\ninput x: f32[4, 8]\nblock f(t) {\n  return t\n}\na, b = f(x)\n",
     "block 'f' returns 1 value, but the tuple assignment has 2 names"},
    {"model m\ninput x: f32[4, 8]\nblock f(t) {\n  return t, 3\n}\na, b = f(x)\n",
     "the values of 'return a, b' must be tensors, got 3"},
    {"model m\ninput x: f32[4, 8]\na, b = relu(x)\n",
     "a tuple assignment needs chunk(x, n), topk, gru, lstm or a block that returns several values"},
    {"model m\ninput x: f32[4, 8]\nblock f(t) {\n  return linear(t, 2, name = \"a\"), t\n}\na, b = f(x)\n",
     "f declares parameters and needs a name: a tuple assignment has no one target"},
};

static void several_values_errors(void **state)
{
    (void)state;
    RUN(several_value_errors);
}

/* const HIDDEN = 4 * D * 2 // 3, log, exp, sqrt, floor, ceil, min, max */
static void constant_functions(void **state)
{
    (void)state;
    IrGraph *g = lower_ok("model m\nconst D = 6\nconst HIDDEN = 4 * D * 2 // 3\n"   /* 16 */
                          "const A = -7 // 2 + -7 % 3 + 7 % -3\n"                   /* -4 + 2 - 2 */
                          "const F = floor(2.5) + ceil(0.25) + floor(-0.5)\n"       /* 2 + 1 - 1 */
                          "const M = max(2, 5, 3) - min(4, 1)\n"                    /* 4 */
                          "const L = log(exp(2)) * sqrt(16) // 1\n"                 /* 8.0 */
                          "const R = 7.5 // 2 + 7.5 % 2\n"                          /* 3.0 + 1.5 */
                          "const LOG_T = log(10000)\n"
                          "input x: f32[4, HIDDEN + A + F + M]\ninput y: f32[4, 1]\n"
                          "z = linear(x * R * LOG_T * L, 1)\nloss = mse(z, y)\n" TRAIN);
    assert_int_equal(g->inputs[0].shape.d[1], 16 - 4 + 2 + 4);
    IrNode *x = named(g, "z")->in[0];   /* ((x * R) * LOG_T) * L */
    assert_true(x->in[1]->fa[0] == 8.0);
    assert_true(x->in[0]->in[1]->fa[0] == log(10000.0));
    assert_true(x->in[0]->in[0]->in[1]->fa[0] == 4.5);
    /* integer-ness: floor and ceil give integers, // of integers too */
    lower_ok("model m\nconst D = 10\ninput x: f32[4, ceil(D / 4)]\ninput y: f32[4, D // 4]\n"
             "loss = mse(linear(x, 2), y)\n" TRAIN);
    /* functions of tensors are still operations on tensors */
    g = lower_ok("model m\ninput x: f32[4, 3]\ninput y: f32[4, 3]\n"
                 "loss = mse(log(exp(linear(x, 3))) + sqrt(abs(x)), y)\n" TRAIN);
    assert_int_equal(named(g, "loss")->in[0]->in[0]->op, OP_LOG);
}

static const Case constant_errors[] = {
    {"model m\nconst D = 4 * 6 * 2 / 5\ninput x: f32[4, D]\n",
     "dimension must be an integer, got 9.6 (use // for integer division, floor() or ceil() to round)"},
    {"model m\nconst D = 7 // 0\n", "t.mp:2:13: error: division by zero in a constant expression"},
    {"model m\nconst D = 7.5 % 0\n", "modulo by zero in a constant expression"},
    {"model m\nconst D = -9223372036854775807 - 1\nconst E = D // -1\n", "integer overflow"},
    {"model m\ninput x: f32[4, 8]\nz = x // 2\n", "'//' works on constants only, got a tensor [4, 8] // 2"},
    {"model m\ninput x: f32[4, 8]\nz = 3 % x\n", "'%' works on constants only, got 3 % a tensor [4, 8]"},
    {"model m\ninput x: f32[4, 8]\nz = floor(x)\n", "floor works on constants only (a number or a const)"},
    {"model m\nconst L = log(0)\n", "log(0) is not defined (math domain error)"},
    {"model m\nconst L = sqrt(-1)\n", "sqrt(-1) is not defined"},
    {"model m\nconst L = exp(1000)\n", "exp(1000) overflows"},
    {"model m\nconst L = floor(1e300)\n", "does not fit in a 64-bit integer"},
    {"model m\nconst L = max(3)\n", "max of constants takes two or more numbers, got 1"},
    {"model m\nconst L = log(2, 3)\n", "log of constants takes one number, got 2"},
};

static void constant_function_errors(void **state)
{
    (void)state;
    RUN(constant_errors);
}

/* How many nodes take n as an input. */
static int uses(const IrGraph *g, const IrNode *n)
{
    int k = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nodes[i]->nin; j++)
            k += g->nodes[i]->in[j] == n;
    return k;
}

/* for t in 0 .. T: unrolled, t a constant, no name level: one shared cell */
static void for_loops_share_layers(void **state)
{
    (void)state;
    IrGraph *g = lower_ok("model rnn\nconst T = 3\ninput x: f32[4, T, 5]\ninput y: f32[4, T, 6]\n"
                 "h = linear(select(x, 1, 0), 6, name = \"h0\")\n"
                 "for t in 0..T {\n"
                 "  h = tanh(linear(h, 6, name = \"cell\") + linear(select(x, 1, t), 6, name = \"inp\"))\n"
                 "  o = h * t\n"
                 "}\n"
                 "for t in 1 .. 2 {\n  h = h + t\n}\n"
                 "s = stack([h, h, o], axis = 1)\n"
                 "loss = mse(s, y)\n" TRAIN);
    assert_int_equal(g->nparams, 6);
    assert_int_equal(uses(g, param(g, "cell.weight")->node), 3);
    assert_int_equal(uses(g, param(g, "inp.bias")->node), 3);
    IrNode *s = named(g, "s");
    assert_int_equal(s->op, OP_CONCAT);
    assert_int_equal(s->ia[0], 1);
    assert_int_equal(s->shape.rank, 3);
    assert_int_equal(s->shape.d[1], 3);
    /* nested loops share across both; a repeat inside gives a name level */
    g = lower_ok("model rnn\ninput x: f32[4, 6]\ninput y: f32[4, 6]\nh = x\n"
                 "for a in 0 .. 2 {\n  for b in -1 .. 1 {\n    h = linear(h, 6, name = \"c\") * (a + b)\n  }\n"
                 "  repeat 2 as r {\n    h = linear(h, 6, name = \"d\")\n  }\n}\n"
                 "loss = mse(h, y)\n" TRAIN);
    assert_int_equal(g->nparams, 6);
    assert_int_equal(uses(g, param(g, "c.weight")->node), 4);
    assert_int_equal(uses(g, param(g, "r.1.d.weight")->node), 2);
    /* select: negative index and axis, shape dropped; an empty range runs nothing */
    g = lower_ok("model m\ninput x: f32[4, 3, 5]\ninput y: f32[4, 3]\n"
                 "for i in 2 .. 2 {\n  x = x\n}\n"
                 "z = select(x, -1, -2)\nloss = mse(linear(z, 3), y)\n" TRAIN);
    IrNode *z = named(g, "z");
    assert_int_equal(z->op, OP_RESHAPE);
    assert_int_equal(z->in[0]->op, OP_SLICE);
    assert_true(z->in[0]->ia[0] == 2 && z->in[0]->ia[1] == 3 && z->in[0]->ia[2] == 4);
    assert_int_equal(z->shape.rank, 2);
}

static const Case for_errors[] = {
    {"model m\ninput x: f32[4, 5]\nfor i in 1 .. 3 {\n  h = linear(x, i, name = \"c\")\n}\n",
     "t.mp:4:7: error: parameter 'c.weight' is shared by every iteration of the for loop, but here it "
     "has shape [2, 5] where an earlier iteration gave it [1, 5]"},
    {"model m\ninput x: f32[4, 5]\nfor i in 0 .. 3 {\n  a = linear(x, 5, name = \"c\")\n"
     "  b = linear(x, 5, name = \"c\")\n}\n", "parameter 'c.weight' is declared twice"},
    {"model m\ninput x: f32[4, 5]\nfor i in 0 .. 2.5 {\n  a = x\n}\n",
     "t.mp:3:15: error: a for loop's end must be an integer, got 2.5"},
    {"model m\ninput x: f32[4, 5]\nfor i in x .. 2 {\n  a = x\n}\n",
     "a for loop's start must be an integer, got a tensor [4, 5]"},
    {"model m\ninput x: f32[4, 5]\nconst i = 2\nfor i in 0 .. 2 {\n  a = x\n}\n",
     "constant 'i' is defined twice"},
    {"model m\ninput x: f32[4, 5]\nfor i in 0 .. 2 {\n  i = relu(x)\n}\n",
     "'i' is a constant and cannot be rebound"},
    {"model m\ninput x: f32[4, 5]\nfor i in 0 .. 200000 {\n  a = x\n}\n",
     "for loop over 200000 values is too long (at most 100000)"},
    {"model m\ninput x: f32[4, 5]\nfor i in 0 .. 2 {\n  a = relu(qq)\n}\n", "unknown name 'qq'"},
    {"model m\ninput x: f32[4, 5]\nz = select(x, 1, 5)\n",
     "select index 5 is out of range for an axis of size 5 (-5 to 4)"},
    {"model m\ninput x: f32[4, 5]\nz = stack([x, select(x, 1, 0)])\n",
     "stack needs tensors of one shape, got [4, 5] and [4]"},
    {"model m\ninput x: f32[4, 5]\nz = stack([x, x], 3)\n", "stack axis 3 is out of range"},
    {"model m\ninput x: f32[4, 5]\nz = stack([x, 2])\n", "an entry of stack's list must be a tensor, got 2"},
};

static void for_loop_errors(void **state)
{
    (void)state;
    RUN(for_errors);
    /* the loop's mistake is said once, not per iteration */
    lower_err("model m\ninput x: f32[4, 5]\nfor i in 0 .. 9 {\n  a = relu(qq)\n}\n"
              "loss = mse(linear(x, 5, name = \"o\"), x)\n" TRAIN, "qq");
    assert_int_equal(diag_error_count(), 1);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(blocks_shadow_builtins), T(block_without_name_level), T(blocks_of_several_values),
        T(several_values_errors), T(constant_functions), T(constant_function_errors),
        T(for_loops_share_layers), T(for_loop_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
