/* test_parse.c - the scanner and parser (grammar/, compiler/ast.c).
 *
 * Programs are parsed from strings; trees are checked through ast_dump()
 * (an S-expression per statement) or their fields, errors through the
 * diag text they print. The hostile inputs check that the front end gives
 * an error, never crashes (run under `make asan` too) and does work linear
 * in the input, counted in the bytes its arena hands out (LINEAR_BYTES, and
 * twice the input allocates at most twice as much): a count, the same on
 * any machine, where a time would depend on the machine's speed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "ast.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct Run {
    Arena arena;
    SrcFile file;
    Ast *ast;
    char *dump, *errs;   /* malloc'd */
    int nerr;
} Run;

/* The most a parse of n bytes may allocate: the input's copy and some
 * bytes a byte (hostile inputs stay near 2n; a long line of arguments,
 * which builds a node per argument, is checked by its growth instead). */
#define LINEAR_BYTES(n) (8 * (size_t)(n) + 65536)

/* Parse n bytes of text (they may hold NULs) as the file "t.mp". */
static Run *parse_n(const char *text, size_t n)
{
    Run *r = calloc(1, sizeof *r);
    arena_init(&r->arena);
    char *copy = arena_alloc(&r->arena, n + 1);
    memcpy(copy, text, n);
    r->file = (SrcFile){"t.mp", copy, (long)n};
    size_t elen, dlen;
    FILE *e = open_memstream(&r->errs, &elen);
    diag_init(e);
    r->ast = ast_parse(&r->arena, &r->file);
    r->nerr = diag_error_count();
    fclose(e);
    diag_init(stderr);
    FILE *d = open_memstream(&r->dump, &dlen);
    ast_dump(d, r->ast);
    fclose(d);
    return r;
}

static Run *parse(const char *text) { return parse_n(text, strlen(text)); }

static void done(Run *r)
{
    arena_free(&r->arena);
    free(r->dump);
    free(r->errs);
    free(r);
}

/* The dump of a program that must parse without errors. */
static void check_tree(const char *text, const char *want)
{
    Run *r = parse(text);
    if (r->nerr)
        fprintf(stderr, "unexpected errors:\n%s", r->errs);
    assert_int_equal(r->nerr, 0);
    assert_string_equal(r->dump, want);
    done(r);
}

/* A program with errors: the first error message contains `want`. */
static void check_error(const char *text, const char *want)
{
    Run *r = parse(text);
    if (!strstr(r->errs, want))
        fprintf(stderr, "wanted '%s' in:\n%s", want, r->errs);
    assert_true(r->nerr >= 1);
    assert_non_null(strstr(r->errs, want));
    done(r);
}

/* The value of `x = EXPR` in a one-model program, dumped. */
static void check_expr(const char *expr, const char *want)
{
    char text[512], tree[512];
    snprintf(text, sizeof text, "model m\nx = %s\n", expr);
    snprintf(tree, sizeof tree, "(model m)\n(= x %s)\n", want);
    check_tree(text, tree);
}

static void test_whole_model(void **state)
{
    (void)state;
    check_tree("# mnist_mlp.mp: a comment first\n"
               "model mnist_mlp\n"
               "\n"
               "const B = 128\n"
               "input image: u8[B, 784]   # fed each step\n"
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
               "}\n",
               "(model mnist_mlp)\n"
               "(const B 128)\n"
               "(input image u8 [B 784])\n"
               "(input label i32 [B])\n"
               "(= x (/ (call f32 image) 255))\n"
               "(= h (call relu (call linear x 512)))\n"
               "(= logits f32 (call linear h 10))\n"
               "(= loss (call cross_entropy logits label))\n"
               "(metric accuracy (call accuracy logits label))\n"
               "(train\n"
               "  (optimizer (call adam lr=1e-3))\n"
               "  (precision mixed_float16)\n"
               "  (loss_scale (call dynamic init=32768 growth=2 backoff=0.5 interval=2000))\n"
               "  (steps 5000)\n"
               "  (minimize loss))\n");
}

static void test_statements(void **state)
{
    (void)state;
    check_tree("model m\n"
               "param w: [784, 10] = normal(0.01)\n"
               "param s: [] = zeros()\n"
               "param enc.w: [2] = ones()\n"
               "precision f32 { y = a }\n"
               "block mlp(x, d) {\n"
               "  h = gelu(linear(x, 4 * d))\n"
               "  return linear(h, d, name = \"proj\")\n"
               "}\n"
               "block nothing() {\n}\n"
               "repeat L as layers {\n"
               "  x = x + mlp(layer_norm(x, name = \"ln\"), D, name = \"mlp\")\n"
               "  precision bf16 {\n"
               "    z: f16 = h.weight\n"
               "  }\n"
               "}\n"
               "train { minimize loss }\n",
               "(model m)\n"
               "(param w [784 10] (call normal 0.01))\n"
               "(param s [] (call zeros))\n"
               "(param enc.w [2] (call ones))\n"
               "(precision f32\n"
               "  (= y a))\n"
               "(block mlp (x d)\n"
               "  (= h (call gelu (call linear x (* 4 d))))\n"
               "  (return (call linear h d name=\"proj\")))\n"
               "(block nothing ())\n"
               "(repeat L layers\n"
               "  (= x (+ x (call mlp (call layer_norm x name=\"ln\") D name=\"mlp\")))\n"
               "  (precision bf16\n"
               "    (= z f16 h.weight)))\n"
               "(train\n"
               "  (minimize loss))\n");
}

/* a, b, c = value: the targets in order; lists as call arguments */
static void test_tuple_assignment(void **state)
{
    (void)state;
    check_tree("model m\nq, k, v = chunk(x, 3, axis = -1)\nh = concat([a, b], 1)\n",
               "(model m)\n"
               "(= (q k v) (call chunk x 3 axis=(- 1)))\n"
               "(= h (call concat [a b] 1))\n");
    check_error("model m\na, b, a = chunk(x, 3)\n", "t.mp:2:7: error: target 'a' is named twice");
    check_error("model m\na, = chunk(x, 1)\n", "t.mp:2:4: error: expected a name, found '='");
    check_error("model m\na, b.c = chunk(x, 2)\n", "expected a plain name, found 'b.c'");
}

/* for loops (their range with or without spaces around '..'), several
 * return values, and // and % at the level of * and / */
static void test_for_and_returns(void **state)
{
    (void)state;
    check_tree("model m\nblock f(t) {\n  return t, t * 2\n}\nfor i in 0..3 {\n  h = f(h)\n}\n"
               "for j in -1 .. N+1 {\n}\nfor k in A..B {\n  x = a // b % c * d\n}\n",
               "(model m)\n"
               "(block f (t)\n  (return t (* t 2)))\n"
               "(for i 0 3\n  (= h (call f h)))\n"
               "(for j (- 1) (+ N 1))\n"
               "(for k A B\n  (= x (* (% (// a b) c) d)))\n");
    check_expr("a + b // c", "(+ a (// b c))");
    check_expr("-7 % 3 ** 2", "(% (- 7) (** 3 2))");
    check_error("model m\nfor i 0 .. 3 {\n}\n", "t.mp:2:7: error: expected 'in', found '0'");
    check_error("model m\nfor i in 0 3 {\n}\n", "t.mp:2:12: error: expected an operator or '..', found '3'");
    check_error("model m\nblock f(t) {\n  return t,\n}\n", "expected an expression, found end of line");
    check_error("model m\nx = 1..2\n", "expected an operator or end of line, found '..'");
    check_error("model m\nfor in in 0 .. 1 {\n}\n", "expected a name, found 'in'");
}

static void test_precedence(void **state)
{
    (void)state;
    check_expr("a + b * c", "(+ a (* b c))");
    check_expr("a - b - c", "(- (- a b) c)");
    check_expr("a / b * c", "(* (/ a b) c)");
    check_expr("a * b @ c", "(* a (@ b c))");
    check_expr("a @ b * c", "(* (@ a b) c)");
    check_expr("a @ b @ c", "(@ (@ a b) c)");
    check_expr("-a @ b", "(@ (- a) b)");
    check_expr("a @ -b", "(@ a (- b))");
    check_expr("2 ** 3 ** 2", "(** 2 (** 3 2))");
    check_expr("-2 ** 2", "(- (** 2 2))");
    check_expr("2 ** -1", "(** 2 (- 1))");
    check_expr("- - a", "(- (- a))");
    check_expr("a - -b", "(- a (- b))");
    check_expr("(a + b) * c", "(* (+ a b) c)");
    check_expr("4 * D / H", "(/ (* 4 D) H)");
    check_expr("2**15", "(** 2 15)");
}

/* comparisons bind below + and - (Python's order) and do not chain */
static void test_comparisons(void **state)
{
    (void)state;
    check_expr("a + b > c * d", "(> (+ a b) (* c d))");
    check_expr("a < -1", "(< a (- 1))");
    check_expr("a >= b", "(>= a b)");
    check_expr("a <= b @ c", "(<= a (@ b c))");
    check_expr("a == b - 1", "(== a (- b 1))");
    check_expr("a != 0", "(!= a 0)");
    check_expr("(a > b) * c", "(* (> a b) c)");
    check_expr("f(x > 0, k = a == b)", "(call f (> x 0) k=(== a b))");
    check_error("model m\ny = a < b < c\n", "t.mp:2:11: error: comparisons do not chain: compare twice and combine the masks");
    check_error("model m\ny = a = = b\n", "t.mp:2:7: error: expected an operator or end of line, found '='");
}

static void test_literals(void **state)
{
    (void)state;
    check_expr("[a, b,]", "[a b]");
    check_expr("[]", "[]");
    check_expr("reshape(x, [B, -1])", "(call reshape x [B (- 1)])");
    check_expr("f(a, b, k = 1, j = \"s\",)", "(call f a b k=1 j=\"s\")");
    check_expr("f()", "(call f)");
    check_expr("bf16(x) + f16(y) + i32(z) + u8(w)",
               "(+ (+ (+ (call bf16 x) (call f16 y)) (call i32 z)) (call u8 w))");
    check_expr("layers.0.mlp.h.weight", "layers.0.mlp.h.weight");
    check_expr("true", "true");
    check_expr("1e-3 + .5 + 0.5 + 1. + 2E+2", "(+ (+ (+ (+ 1e-3 .5) 0.5) 1.) 2E+2)");

    Run *r = parse("model m\nx = 9223372036854775807 + 1e-3\n");
    assert_int_equal(r->nerr, 0);
    const Expr *e = r->ast->stmts[1]->value;
    assert_true(e->lhs->is_int);
    assert_true(e->lhs->ival == 9223372036854775807LL);
    assert_false(e->rhs->is_int);
    assert_true(e->rhs->num == 1e-3);
    assert_string_equal(e->rhs->text, "1e-3");
    done(r);
}

static void test_newlines(void **state)
{
    (void)state;
    /* newlines inside ( ) and [ ] do not end a statement; blank lines,
     * comments and CRLF anywhere; '}' on the last line or its own */
    check_tree("\n\n# c\nmodel m # c\n\n"
               "x = f(a,   # c\n"
               "      b,\n"
               "\n"
               "      k = [1,\n"
               "           2])\r\n"
               "precision f32 {   # c\n"
               "\n"
               "  y = 1 # c\n"
               "  # c\n"
               "  z = 2 }\n"
               "precision f16 {\r\n y = 1\r\n}\r\n"
               "train {\n\n steps = 1\n\n}",
               "(model m)\n"
               "(= x (call f a b k=[1 2]))\n"
               "(precision f32\n"
               "  (= y 1)\n"
               "  (= z 2))\n"
               "(precision f16\n"
               "  (= y 1))\n"
               "(train\n"
               "  (steps 1))\n");
    check_tree("model m", "(model m)\n");                /* no final newline */
    check_tree("model m\nblock f()\n\n  # c\n{\n return 1\n}\ntrain\n{ steps = 1 }\n",
               "(model m)\n(block f ()\n  (return 1))\n(train\n  (steps 1))\n");
    check_error("model m\nx = 1 y = 2\n", "expected an operator or end of line, found 'y'");
}

/* The declarations of LANGUAGE.md "Additions for real architectures". */
static void test_real_architectures(void **state)
{
    (void)state;
    check_tree("model m\n"
               "input seq: u16[B, T + 1] window\n"
               "input y: u16[B]\n"
               "buffer mask: [T, T] = ones()\n"
               "buffer h.scale: [4] = constant(2)\n"
               "repeat 2 as transformer.h {\n x = f(x)\n}\n",
               "(model m)\n"
               "(input seq u16 [B (+ T 1)] window)\n"
               "(input y u16 [B])\n"
               "(buffer mask [T T] (call ones))\n"
               "(buffer h.scale [4] (call constant 2))\n"
               "(repeat 2 transformer.h\n  (= x (call f x)))\n");
    /* names from a module path: numeric parts, dotted repeat names */
    check_tree("model m\nrepeat 2 as layer2.0 {\n x = f(x, name = \"layer2.0.conv1\")\n}\n",
               "(model m)\n(repeat 2 layer2.0\n  (= x (call f x name=\"layer2.0.conv1\")))\n");
    /* u16 is a type name everywhere a type goes */
    check_tree("model m\nx = u16(y)\n", "(model m)\n(= x (call u16 y))\n");
}

static void test_locations(void **state)
{
    (void)state;
    Run *r = parse("model m\n\tx = a + relu(b)  @ c\n");
    assert_int_equal(r->nerr, 0);
    const Stmt *s = r->ast->stmts[1];
    assert_int_equal(s->loc.line, 2);
    assert_int_equal(s->loc.col, 2);
    assert_int_equal(s->name_loc.len, 1);
    const Expr *add = s->value;                  /* a + (relu(b) @ c) */
    assert_int_equal(add->kind, EX_BINARY);
    assert_int_equal(add->op, '+');
    assert_int_equal(add->loc.col, 8);           /* the operator */
    assert_int_equal(add->loc.len, 1);
    assert_int_equal(add->span.col, 6);          /* a ... c */
    assert_int_equal(add->span.len, 16);
    const Expr *mm = add->rhs;
    assert_int_equal(mm->op, '@');
    assert_int_equal(mm->loc.col, 19);
    const Expr *call = mm->lhs;
    assert_int_equal(call->kind, EX_CALL);
    assert_string_equal(call->name, "relu");
    assert_int_equal(call->loc.col, 10);         /* the callee */
    assert_int_equal(call->loc.len, 4);
    assert_int_equal(call->span.len, 7);         /* relu(b) */
    assert_true(call->loc.file == &r->file);
    assert_int_equal(add->height, 4);
    done(r);

    r = parse("model m\ntrain {\n  steps = 3\n  minimize loss\n}\nblock f(a, bb) {\n return a\n}\n");
    assert_int_equal(r->nerr, 0);
    const Stmt *t = r->ast->stmts[1];
    assert_int_equal(t->nitems, 2);
    assert_string_equal(t->items[1].key, "minimize");
    assert_int_equal(t->items[1].loc.line, 4);
    assert_int_equal(t->items[1].value->kind, EX_NAME);
    assert_int_equal(t->items[1].value->loc.col, 12);
    const Stmt *b = r->ast->stmts[2];
    assert_int_equal(b->nparams, 2);
    assert_string_equal(b->params[1], "bb");
    assert_int_equal(b->param_locs[1].col, 12);
    assert_int_equal(b->param_locs[1].len, 2);
    done(r);
}

static void test_syntax_errors(void **state)
{
    (void)state;
    check_error("model m\nx = f(a, b\ny = 2\n", "t.mp:3:1: error: expected ')' (to close '(' at line 2), found 'y'");
    check_error("model m\nx = (1 + 2]\n", "t.mp:2:11: error: expected an operator or ')', found ']'");
    check_error("model m\nx = f(a, [1, 2)\n", "t.mp:2:15: error: expected ']', found ')'");
    check_error("model m\nblock f(a b) {\n}\n", "expected ')', found 'b'");
    check_error("model m\nx = f(a,, b)\n", "expected an expression or ')', found ','");
    check_error("model m\nparam w: f32[3] = zeros()\n", "a parameter has no type");
    check_error("model m\nx = f32 * y\n", "expected '(', found '*'");
    check_error("model m\nh.weight = 1\n", "expected a plain name, found 'h.weight' (dotted names");
    check_error("model m\nx = f(a.b = 1)\n", "expected a plain name, found 'a.b'");
    check_error("model m\nblock f(x, x) {\n}\n", "parameter 'x' is named twice");
    check_error("model m\nbuffer w: f32[3] = zeros()\n", "a buffer has no type");
    check_error("model m\nbuffer = 1\n", "expected a name, found '='");
    check_error("model m\nwindow = 1\n", "expected a statement, found 'window'");
    check_error("model m\ninput s: u16[4, 8] windows\n", "expected end of line or 'window', found 'windows'");
    check_error("model m\ninput s: u16[4, 8] window window\n", "expected end of line, found 'window'");
    check_error("model m\nblock f(x) {\n  y = 1\n",
                "t.mp:3:8: error: expected '}' (to close 'block' at line 2), found end of file");
    check_error("model m\nblock f(x)\n{\n  y = 1\n",
                "t.mp:4:8: error: expected '}' (to close 'block' at line 3), found end of file");
    check_error("model m\nrepeat 2 as r {\n 1 + 2\n}\n", "t.mp:3:2: error: expected a statement or '}', found '1'");
    check_error("model m\ntrain {\n 3\n}\n", "expected a train setting or '}', found '3'");
    check_error("model m\nrepeat 3 {\n}\n", "expected an operator or 'as', found '{'");
    check_error("model m\nx = \n", "expected an expression, found end of line");
    check_error("model m\ninput x f32[3]\n", "expected ':', found 'f32'");
    check_error("model m\ninput x: f32[]\n", "expected the input's dimensions");
    check_error("model m\nprecision f64 { }\n", "expected a type (f32, f16, bf16, i32, u8 or u16), found 'f64'");
    check_error("model m\nparam w: [3] = zeros\n", "found 'zeros' (write 'zeros()' to call it)");
    check_error("model m\nparam w: [3] = 0.5\n", "expected an initializer call");
    check_error("model m\nq = f(a=1, 2)\n", "positional argument after keyword argument 'a'");
    check_error("model m\nq = f(a=1, a=2)\n", "keyword argument 'a' given twice");
    check_error("model m\ntrain {\n steps = 1\n steps = 2\n}\n", "'steps' is set twice");
    check_error("model m\ntrain {\n minimize\n}\n", "expected a name, found end of line");
    check_error("model m\nx = a;\n", "unexpected character ';' (statements end at the end of a line)");
    check_error("model m\n}\n", "expected a statement, found '}'");
    check_error("model m\nmodel n\n", "a second 'model' statement");
    check_error("const B = 1\n", "expected 'model NAME' as the first statement, found 'const'");
    check_error("model m\nblock f() {\n  input x: f32[1]\n}\n",
                "'input' must be at the top level, not inside 'block' (line 2)");
    check_error("model m\nrepeat 2 as r {\n  train { minimize x }\n}\n", "'train' must be at the top level");
    check_error("model m\nreturn x\n", "'return' outside a block");
    check_error("model m\nrepeat 2 as r { return x }\n", "'return' outside a block");
    check_error("model m\nx = 12abc\n", "malformed number '12abc'");
    check_error("model m\nx = 1 +\n", "t.mp:2:8: error: expected an expression, found end of line");
}

/* Error recovery: every bad statement reported, and each once. */
static void test_recovery(void **state)
{
    (void)state;
    Run *r = parse("model m\n"
                   "x = a b\n"                    /* 1 */
                   "block f(x y) {\n"             /* 2: its body is skipped */
                   "  z = = 1\n"
                   "}\n"
                   "y = 1 +\n"                    /* 3 */
                   "w = f(1,\n"                   /* 4: multi-line statement */
                   "      2 3)\n"
                   "ok = 1\n"
                   "v = g(1\n"                    /* 5: never closed */
                   "u = $ $ $\n"                  /* 6: once, the line is skipped */
                   "t = 2 +\n");                  /* 7 */
    if (r->nerr != 7)
        fprintf(stderr, "%s", r->errs);
    assert_int_equal(r->nerr, 7);
    assert_non_null(strstr(r->errs, "t.mp:11:5: error: unexpected character '$'"));
    assert_non_null(strstr(r->errs, "t.mp:8:9: error: expected ')' (to close '(' at line 7), found '3'"));
    assert_non_null(strstr(r->errs, "t.mp:11:1: error: expected ')' (to close '(' at line 10), found 'u'"));
    assert_non_null(strstr(r->errs, "t.mp:12:8: error: expected an expression"));
    assert_null(strstr(r->errs, "t.mp:4:"));
    /* the good statements after the errors are in the tree */
    assert_non_null(strstr(r->dump, "(= ok 1)"));
    done(r);
}

static void test_too_many_errors(void **state)
{
    (void)state;
    char text[4096] = "model m\n";
    for (int i = 0; i < 50; i++)
        strcat(text, "x = = 1\n");
    Run *r = parse(text);
    assert_int_equal(r->nerr, DIAG_MAX_ERRORS);
    assert_non_null(strstr(r->errs, "error: too many errors, stopping\n"));
    assert_null(strstr(r->errs, "t.mp:22:"));
    done(r);
}

/* ---- hostile input ---------------------------------------------------- */

static void check_hostile(const char *text, size_t n, const char *want)
{
    Run *r = parse_n(text, n);
    if (!strstr(r->errs, want))
        fprintf(stderr, "wanted '%s' in:\n%s", want, r->errs);
    assert_true(r->nerr >= 1);
    assert_non_null(strstr(r->errs, want));
    assert_true(r->arena.used <= LINEAR_BYTES(n));
    done(r);
}

/* head + n copies of unit + tail */
static char *repeat_text(const char *head, const char *unit, int n, const char *tail)
{
    size_t h = strlen(head), u = strlen(unit), t = strlen(tail);
    char *s = malloc(h + u * (size_t)n + t + 1);
    memcpy(s, head, h);
    char *at = s + h;
    for (int i = 0; i < n; i++, at += u)
        memcpy(at, unit, u);
    memcpy(at, tail, t + 1);
    return s;
}

/* "model m\nx = " + n copies of `unit` + tail */
static char *repeated(const char *unit, int n, const char *tail)
{
    return repeat_text("model m\nx = ", unit, n, tail);
}

static void test_hostile_bytes(void **state)
{
    (void)state;
    check_hostile("", 0, "t.mp:1:1: error: expected 'model NAME' as the first statement, found end of file");
    check_hostile("\n\n# only a comment\n", 18, "found end of file");
    check_hostile("model m\nx = a\0b\n", 16, "t.mp:2:6: error: unexpected byte 0x00 (a NUL byte");
    check_hostile("model m\nw = \xc3\xa9t\xc3\xa9\n", 16, "t.mp:2:5: error: unexpected byte 0xC3");
    check_hostile("model m\nw = \"\xc3\xa9\"\n", 16, "unexpected byte 0xC3 in a string");
    check_hostile("model m\nx = \"abc\n", 17, "t.mp:2:5: error: unterminated string");
    check_hostile("model m\nx = \"abc", 16, "unterminated string");
    check_hostile("model m\nx = \x7f\x01\n", 14, "unexpected byte 0x7F (a control character)");
    check_hostile("model m\nx = 99999999999999999999\n", 33, "integer 99999999999999999999 is too large");
    check_hostile("model m\nx = 1e999\n", 18, "number 1e999 is too large (not finite");

    /* a UTF-8 byte order mark at the start is skipped */
    Run *bom = parse("\xEF\xBB\xBFmodel m\n");
    assert_int_equal(bom->nerr, 0);
    assert_int_equal(bom->ast->stmts[0]->loc.col, 4);
    done(bom);

    /* comments may hold anything but a newline */
    Run *r = parse_n("model m # \xc3\xa9\0\x01\n", 15);
    assert_int_equal(r->nerr, 0);
    done(r);

    /* random bytes: errors (at most the limit), no crash */
    srand(42);
    char junk[65536];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)(rand() & 0xff);
    r = parse_n(junk, sizeof junk);
    assert_true(r->nerr >= 1 && r->nerr <= DIAG_MAX_ERRORS);
    assert_true(r->arena.used <= LINEAR_BYTES(sizeof junk));
    done(r);

    char *zeros = calloc(1, 1 << 20);             /* a file of NULs: linear time */
    check_hostile(zeros, 1 << 20, "unexpected byte 0x00");
    free(zeros);
}

static void test_hostile_sizes(void **state)
{
    (void)state;
    char *s = repeated("a", 100000, " + 1\n");     /* a 100000-character name */
    check_hostile(s, strlen(s), "is too long (100000 characters, at most 255)");
    free(s);
    s = repeated("9", 100000, "\n");
    check_hostile(s, strlen(s), "is too large");
    free(s);

    /* a long line: clipped around the column in messages */
    s = repeat_text("model m\nx = f(", "a, ", 200000, "a) $\n");
    Run *r = parse(s);
    assert_int_equal(r->nerr, 1);
    assert_non_null(strstr(r->errs, "t.mp:2:600010: error: unexpected character '$'\n"
                                    "    ... a, a, a, a, a, a, a, a, a, a, a, a, a) $\n"
                                    "                                               ^\n"));
    /* a node per argument: half the arguments, at most half the bytes */
    char *half = repeat_text("model m\nx = f(", "a, ", 100000, "a) $\n");
    Run *rh = parse(half);
    assert_int_equal(rh->nerr, 1);
    assert_true(r->arena.used <= 2 * rh->arena.used + 65536);
    done(rh);
    free(half);
    done(r);
    free(s);

    /* 255 names of 255 characters: fine */
    r = parse("model m\nx = aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n");
    assert_int_equal(r->nerr, 0);
    done(r);
}

static void test_hostile_nesting(void **state)
{
    (void)state;
    const char *units[] = {"(", "[", "-", "-(", "f(", "2 ** ", "- 2 ** "};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        char *s = repeated(units[i], 300000, "1\n");
        Run *r = parse(s);
        assert_int_equal(r->nerr, 1);
        assert_non_null(strstr(r->errs, "error: nested too deeply (more than 256 levels)"));
        assert_true(r->arena.used <= LINEAR_BYTES(strlen(s)));
        done(r);
        free(s);
    }
    char *s = repeat_text("model m\n", "precision f32 {\n", 300000, "");
    check_hostile(s, strlen(s), "t.mp:258:15: error: nested too deeply (more than 256 levels)");
    free(s);

    /* exactly at the limit parses: 255 parens (plus the statement level) */
    s = repeated("(", 250, "1");
    char *t = malloc(strlen(s) + 300);
    strcpy(t, s);
    for (int i = 0; i < 250; i++)
        strcat(t, ")");
    strcat(t, "\n");
    Run *r = parse(t);
    assert_int_equal(r->nerr, 0);
    done(r);
    free(s);
    free(t);

    /* the count of pending '-' and '**' ends with each statement */
    s = repeat_text("model m\nblock f() {\n", "  return -2 ** -1\n", 1000, "}\n");
    r = parse(s);
    assert_int_equal(r->nerr, 0);
    done(r);
    free(s);

    /* a long + chain is bounded by AST_MAX_HEIGHT */
    s = repeated("a + ", 100000, "a\n");
    check_hostile(s, strlen(s), "expression nested too deeply (more than 1024 levels)");
    free(s);
    s = repeated("a + ", 1000, "a\n");
    r = parse(s);
    assert_int_equal(r->nerr, 0);
    assert_int_equal(r->ast->stmts[1]->value->height, 1001);
    done(r);
    free(s);
}

static void test_read_file(void **state)
{
    (void)state;
    Arena a;
    arena_init(&a);
    char *msg;
    size_t len;
    FILE *e = open_memstream(&msg, &len);
    diag_init(e);
    assert_null(ast_read_file(&a, "no/such/file.mp"));
    assert_null(ast_read_file(&a, "."));
    char path[] = "/tmp/mpcc_test_parse_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "model m\0x", 9), 9);
    SrcFile *f = ast_read_file(&a, path);
    assert_non_null(f);
    assert_int_equal(f->len, 9);
    assert_memory_equal(f->text, "model m\0x", 10);
    assert_int_equal(ftruncate(fd, (64L << 20) + 1), 0);   /* sparse: quick */
    assert_null(ast_read_file(&a, path));
    close(fd);
    unlink(path);
    fclose(e);
    diag_init(stderr);
    assert_non_null(strstr(msg, "mpcc: cannot read 'no/such/file.mp': No such file or directory\n"));
    assert_non_null(strstr(msg, "mpcc: cannot read '.': Is a directory\n"));
    assert_non_null(strstr(msg, "larger than 64 MiB"));
    free(msg);
    arena_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_model),
        cmocka_unit_test(test_statements),
        cmocka_unit_test(test_tuple_assignment),
        cmocka_unit_test(test_for_and_returns),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_comparisons),
        cmocka_unit_test(test_literals),
        cmocka_unit_test(test_newlines),
        cmocka_unit_test(test_real_architectures),
        cmocka_unit_test(test_locations),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_recovery),
        cmocka_unit_test(test_too_many_errors),
        cmocka_unit_test(test_hostile_bytes),
        cmocka_unit_test(test_hostile_sizes),
        cmocka_unit_test(test_hostile_nesting),
        cmocka_unit_test(test_read_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
