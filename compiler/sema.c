/* sema.c - semantic analysis: the syntax tree of one model -> the forward
 * IrGraph (LANGUAGE.md is the contract).
 *
 * One walk over the statements in order, evaluating each expression to a
 * Val: a folded constant (int64 with overflow checks, or a real), a bool,
 * or a tensor (an IrNode whose shape rule has run). Blocks are expanded at
 * each call and `repeat` bodies unrolled, so the graph has no calls or
 * loops left. Parameters are declared where a layer is called, named
 * `prefix + layer name + "." + leaf` (prefix: "y." inside a block call y,
 * "layers.0." inside copy 0 of `repeat ... as layers`).
 *
 * Invariants:
 * - every node sema makes has had its shape rule run; a node whose rule
 *   failed is never an input of another (its Val is V_ERR);
 * - a V_ERR value has already been reported: whatever uses it stays quiet,
 *   so one mistake gives one message;
 * - the override (typed assignment, precision region) in force when a
 *   forward node is made is written on it, innermost winning;
 * - expansion is bounded: no block calls itself (checked before any
 *   expansion), nesting depth and node count are capped with an error.
 * Any error makes sema_lower() return NULL; it goes on after each one (up
 * to the diag limit) to report as many as it can.
 *
 * This file holds the walk, names, constants, the built-in operations and
 * the train block; blocks, tuple assignments and `for` loops live in
 * sema_blocks.c, the functions of constants in sema_const.c, and what they
 * share in sema_int.h. */
#include "sema_int.h"
#include "ops.h"
#include "recompute.h"
#include "shape.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>


static const char *fmt_real(Ctx *c, double r)
{
    char *s = arena_printf(c->a, "%.10g", r);
    if (!strpbrk(s, ".eEn"))          /* "2" -> "2.0": say it is a real */
        s = arena_printf(c->a, "%s.0", s);
    return s;
}

static const char *describe(Ctx *c, Val v)
{
    if (v.k == V_INT)
        return arena_printf(c->a, "%lld", (long long)v.i);
    if (v.k == V_REAL)
        return fmt_real(c, v.r);
    if (v.k == V_BOOL)
        return v.i ? "true" : "false";
    if (v.k == V_TENSOR)
        return arena_printf(c->a, "a tensor %s", shape_str(c->a, &v.t->shape));
    if (v.k == V_EXPR)
        return v.x->kind == EX_STR ? arena_printf(c->a, "the string \"%s\"", v.x->name) : "a list";
    return "nothing";
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static int nameset_get(const NameSet *s, const char *key)
{
    if (!s->cap)
        return -1;
    for (size_t i = hash_str(key) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (!s->keys[i])
            return -1;
        if (strcmp(s->keys[i], key) == 0)
            return s->vals[i];
    }
}

static void nameset_put(Arena *a, NameSet *s, const char *key, int val)
{
    if (2 * (s->n + 1) > s->cap) {
        NameSet big = {arena_alloc(a, sizeof(char *) * (s->cap ? 2 * s->cap : 64)),
                       arena_alloc(a, sizeof(int) * (s->cap ? 2 * s->cap : 64)),
                       s->cap ? 2 * s->cap : 64, 0};
        for (size_t i = 0; i < s->cap; i++)
            if (s->keys[i])
                nameset_put(a, &big, s->keys[i], s->vals[i]);
        *s = big;
    }
    size_t i = hash_str(key) & (s->cap - 1);
    while (s->keys[i])
        i = (i + 1) & (s->cap - 1);
    s->keys[i] = key;
    s->vals[i] = val;
    s->n++;
}

static bool swapped_pair(const char *a, const char *b)
{
    size_t n = strlen(a), i = 0;
    if (n != strlen(b) || n < 2)
        return false;
    while (i < n && a[i] == b[i])
        i++;
    return i + 1 < n && a[i] == b[i + 1] && a[i + 1] == b[i] && strcmp(a + i + 2, b + i + 2) == 0;
}

static bool shares_a_letter(const char *a, const char *b)
{
    for (; *a; a++)
        for (const char *p = b; *p; p++)
            if ((*a | 32) == (*p | 32))
                return true;
    return false;
}

/* "did you mean": diag_suggest's edit distance, plus two typos it does not
 * count as one: swapped neighbours ('rleu' for 'relu'), and it never offers
 * a name with no letter in common ('B' for 'h'). */
static const char *suggest(Ctx *c, const char *name, const char *const *cands, int n)
{
    const char **near = arena_alloc(c->a, sizeof *near * (size_t)(n + 1));
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (swapped_pair(name, cands[i]))
            return cands[i];
        if (shares_a_letter(name, cands[i]))
            near[m++] = cands[i];
    }
    return diag_suggest(name, near, m);
}

static Sym *find_local(Scope *sc, const char *name)
{
    for (int i = 0; i < sc->n; i++)
        if (strcmp(sc->syms[i].name, name) == 0)
            return &sc->syms[i];
    return NULL;
}

static Sym *bind(Ctx *c, const char *name, SymKind kind, Val v, SrcLoc loc)
{
    Scope *sc = c->scope;
    Sym *s = find_local(sc, name);
    if (!s) {
        if (sc->n == sc->cap) {
            int cap = sc->cap ? 2 * sc->cap : 32;
            sc->syms = arena_grow(c->a, sc->syms, (size_t)sc->n, (size_t)cap, sizeof *sc->syms);
            sc->cap = cap;
        }
        s = &sc->syms[sc->n++];
    }
    *s = (Sym){name, kind, v, loc, c->iter};
    return s;
}

/* ---- nodes -------------------------------------------------------------------- */

static IrNode *node(Ctx *c, IrOp op, SrcLoc loc, int nin, IrNode *const *in)
{
    if (c->g->nnodes >= SEMA_MAX_NODES) {
        if (!c->stop)
            diag_error(loc, "the model expands to more than %d operations: is a repeat count "
                       "or a block too large?", SEMA_MAX_NODES);
        c->stop = true;
        return NULL;
    }
    return ir_add(c->g, op, loc, nin, in);
}

/* Runs n's shape rule and, on success, writes the override in force on it
 * (integer-valued views are never computed in a float type). */
static Val finish(Ctx *c, IrNode *n)
{
    if (!n || !op_info[n->op].shape(c->g, n))
        return verr;
    if (op_info[n->op].kind == OPK_FWD && !is_int_type(n->type))
        n->override = c->override;
    return vtensor(n);
}

static Val op1(Ctx *c, IrOp op, SrcLoc loc, IrNode *x)
{
    return finish(c, node(c, op, loc, 1, &x));
}

static Val const_node(Ctx *c, SrcLoc loc, double v)
{
    IrNode *n = node(c, OP_CONST, loc, 0, NULL);
    if (n)
        n->fa[0] = v;
    return finish(c, n);
}

/* ---- expressions ---------------------------------------------------------------- */

static Val eval(Ctx *c, const Expr *e);
static Val call(Ctx *c, const Expr *e);

/* x // y and x % y as Python computes them: the quotient rounded down,
 * the remainder taking the divisor's sign; integers stay integers. */
static Val fold_floor_div(Ctx *c, const Expr *e, Val x, Val y)
{
    if (y.r == 0) {
        diag_error(e->loc, "%s by zero in a constant expression", e->op == '%' ? "modulo" : "division");
        return verr;
    }
    if (x.k == V_INT && y.k == V_INT) {
        if (x.i == INT64_MIN && y.i == -1)
            return e->op == '%' ? vint(0) : (diag_error(e->loc, "integer overflow in a constant "
                                                        "expression: the result does not fit in 64 bits"),
                                             verr);
        int64_t q = x.i / y.i, r = x.i % y.i;
        if (r != 0 && (r < 0) != (y.i < 0))
            q--, r += y.i;
        return vint(e->op == '%' ? r : q);
    }
    double q = floor(x.r / y.r), r = fmod(x.r, y.r);
    if (r != 0 && (r < 0) != (y.r < 0))
        r += y.r;
    return vreal(e->op == '%' ? r : q);
}

/* Checked integer arithmetic on constants; reals where either side is one. */
static Val fold(Ctx *c, const Expr *e, Val x, Val y)
{
    int64_t r = 0;
    bool ints = x.k == V_INT && y.k == V_INT, ovf = false;
    double fr = 0;
    switch (e->op) {   /* the constant operators, not a table of ops */
    case '+': ovf = ints && __builtin_add_overflow(x.i, y.i, &r); fr = x.r + y.r; break;
    case '-': ovf = ints && __builtin_sub_overflow(x.i, y.i, &r); fr = x.r - y.r; break;
    case '*': ovf = ints && __builtin_mul_overflow(x.i, y.i, &r); fr = x.r * y.r; break;
    case '/':
        if (y.r == 0) {
            diag_error(e->loc, "division by zero in a constant expression");
            return verr;
        }
        if (ints && !(x.i == INT64_MIN && y.i == -1) && x.i % y.i == 0)
            return vint(x.i / y.i);
        return vreal(x.r / y.r);
    case 'D':
    case '%':
        return fold_floor_div(c, e, x, y);
    case 'P':
        if (ints && y.i >= 0) {
            r = 1;
            for (int64_t k = 0; k < y.i && !ovf; k++)
                ovf = __builtin_mul_overflow(r, x.i, &r);
            if (x.i == 0 || x.i == 1 || y.i == 0)
                ovf = false, r = y.i == 0 ? 1 : x.i;
            else if (x.i == -1)
                ovf = false, r = y.i % 2 ? -1 : 1;
        } else
            ints = false;
        fr = pow(x.r, y.r);
        break;
    default:
        diag_error(e->loc, "'@' needs two tensors, got %s and %s", describe(c, x), describe(c, y));
        return verr;
    }
    if (ovf) {
        diag_error(e->loc, "integer overflow in a constant expression: the result does not fit "
                   "in 64 bits");
        return verr;
    }
    if (ints)
        return vint(r);
    if (!isfinite(fr)) {
        diag_error(e->loc, "constant expression overflows (the result is not a finite number)");
        return verr;
    }
    return vreal(fr);
}

static const IrOp binop_of[128] = {['+'] = OP_ADD, ['-'] = OP_SUB, ['*'] = OP_MUL,
                                   ['/'] = OP_DIV, ['@'] = OP_MATMUL, ['<'] = OP_LT,
                                   ['>'] = OP_GT, [AST_LE] = OP_LE, [AST_GE] = OP_GE,
                                   [AST_EQ] = OP_EQ, [AST_NE] = OP_NE};

static bool is_compare(int op)
{
    return op == '<' || op == '>' || op == AST_LE || op == AST_GE || op == AST_EQ || op == AST_NE;
}

/* A comparison of two constants: 1 or 0 (integers compared exactly). */
static Val fold_compare(int op, Val x, Val y)
{
    bool ints = x.k == V_INT && y.k == V_INT;
    int s = ints ? (x.i > y.i) - (x.i < y.i) : (x.r > y.r) - (x.r < y.r);
    bool nan = !ints && (x.r != x.r || y.r != y.r);
    bool r = op == '<' ? s < 0 : op == '>' ? s > 0 : op == AST_LE ? s <= 0 : op == AST_GE ? s >= 0
           : op == AST_EQ ? s == 0 : s != 0;
    return vint(nan ? op == AST_NE : r);
}

static bool need_operand(Ctx *c, const Expr *e, Val v, const char *what)
{
    if (v.k == V_ERR)
        return false;
    if (v.k == V_TENSOR || is_num(v))
        return true;
    diag_error(e->loc, "%s needs numbers or tensors, got %s", what, describe(c, v));
    return false;
}

static Val eval_binary(Ctx *c, const Expr *e)
{
    Val x = eval(c, e->lhs), y = eval(c, e->rhs);
    if (x.k == V_BOOL)          /* true and false count as 1 and 0, as in Python */
        x = vint(x.i);
    if (y.k == V_BOOL)
        y = vint(y.i);
    const char *what = e->op == 'P' ? "'**'" : e->op == 'D' ? "'//'" : e->op == '%' ? "'%'"
                                                                  : shape_op_name(binop_of[e->op]);
    bool okx = need_operand(c, e->lhs, x, what), oky = need_operand(c, e->rhs, y, what);
    if (!okx || !oky)
        return verr;
    if (is_num(x) && is_num(y))
        return is_compare(e->op) ? fold_compare(e->op, x, y) : fold(c, e, x, y);
    if (e->op == 'P') {
        diag_error(e->loc, "'**' works on constants only, got %s ** %s: for a tensor write x * x",
                   describe(c, x), describe(c, y));
        return verr;
    }
    if (e->op == 'D' || e->op == '%') {
        diag_error(e->loc, "'%s' works on constants only, got %s %s %s", e->op == 'D' ? "//" : "%",
                   describe(c, x), e->op == 'D' ? "//" : "%", describe(c, y));
        return verr;
    }
    if (e->op == '@' && (is_num(x) || is_num(y))) {
        diag_error(e->loc, "'@' needs two tensors, got %s and %s", describe(c, x), describe(c, y));
        return verr;
    }
    if (is_num(x))
        x = const_node(c, e->lhs->loc, x.r);
    if (is_num(y))
        y = const_node(c, e->rhs->loc, y.r);
    if (x.k != V_TENSOR || y.k != V_TENSOR)
        return verr;
    IrNode *in[2] = {x.t, y.t};
    return finish(c, node(c, binop_of[e->op], e->loc, 2, in));
}

static Val eval_neg(Ctx *c, const Expr *e)
{
    Val x = eval(c, e->lhs);
    if (!need_operand(c, e->lhs, x, "unary '-'"))
        return verr;
    if (x.k == V_INT) {
        if (x.i == INT64_MIN) {
            diag_error(e->loc, "integer overflow in a constant expression: the result does not "
                       "fit in 64 bits");
            return verr;
        }
        return vint(-x.i);
    }
    if (x.k == V_REAL)
        return vreal(-x.r);
    return op1(c, OP_NEG, e->loc, x.t);
}

/* Candidate names for "did you mean": every name visible from here. */
static const char **visible_names(Ctx *c, int *n)
{
    int cap = c->scope->n + c->top->n + 2;
    const char **v = arena_alloc(c->a, sizeof *v * (size_t)cap);
    *n = 0;
    for (Scope *sc = c->scope; sc; sc = sc->parent)
        for (int i = 0; i < sc->n; i++)
            if (sc == c->scope || sc->syms[i].kind == SYM_CONST)
                v[(*n)++] = sc->syms[i].name;
    v[(*n)++] = "true";
    v[(*n)++] = "false";
    return v;
}

/* The statement defining `name` later in the current body, if any. */
static const Stmt *defined_later(const Stmt *const *body, int n, const char *name, SrcLoc use)
{
    for (int i = 0; i < n; i++) {
        const Stmt *s = body[i];
        bool defines = s->name && s->kind != ST_MODEL && s->kind != ST_BLOCK &&
                       s->kind != ST_REPEAT && s->kind != ST_FOR && strcmp(s->name, name) == 0;
        if (defines && (s->loc.line > use.line || (s->loc.line == use.line && s->loc.col > use.col)))
            return s;
        const Stmt *in = s->kind == ST_PRECISION || s->kind == ST_REPEAT || s->kind == ST_FOR
                             ? defined_later((const Stmt *const *)s->body, s->nbody, name, use)
                             : NULL;
        if (in)
            return in;
    }
    return NULL;
}

static const struct Builtin *find_builtin(const char *name);

static void unknown_name(Ctx *c, const Expr *e)
{
    const Stmt *body = c->scope->block ? c->scope->block->s : NULL;
    const Stmt *later = body ? defined_later((const Stmt *const *)body->body, body->nbody, e->name, e->loc)
                             : defined_later((const Stmt *const *)c->ast->stmts, c->ast->nstmts,
                                             e->name, e->loc);
    if (later) {
        diag_error(e->loc, "'%s' is used before its definition", e->name);
        diag_note(later->name_loc.file ? later->name_loc : later->loc, "'%s' is defined here", e->name);
        return;
    }
    if (find_builtin(e->name) || sema_find_block(c, e->name)) {
        diag_error(e->loc, "'%s' is an operation, not a value: call it, e.g. %s(x)", e->name, e->name);
        return;
    }
    Sym *outer = c->scope->parent ? find_local(c->top, e->name) : NULL;
    if (outer) {
        diag_error(e->loc, "the %s '%s' is not visible inside block '%s': pass it as an argument",
                   sym_kind_name[outer->kind], e->name, c->scope->block->s->name);
        return;
    }
    int n;
    const char **cands = visible_names(c, &n);
    const char *best = suggest(c, e->name, cands, n);
    if (best)
        diag_error(e->loc, "unknown name '%s', did you mean '%s'?", e->name, best);
    else
        diag_error(e->loc, "unknown name '%s'", e->name);
}

/* h.weight: a parameter, by its name under the current prefix. */
static Val eval_param_ref(Ctx *c, const Expr *e)
{
    const char *full = arena_printf(c->a, "%s%s", c->prefix, e->name);
    int i = nameset_get(&c->params, full);
    if (i >= 0)
        return vtensor(c->g->params[i].node);
    const char **cands = arena_alloc(c->a, sizeof *cands * (size_t)(c->g->nparams + 1));
    size_t plen = strlen(c->prefix);
    int n = 0;
    for (int k = 0; k < c->g->nparams; k++)
        if (strncmp(c->g->params[k].name, c->prefix, plen) == 0)
            cands[n++] = c->g->params[k].name + plen;
    const char *best = suggest(c, e->name, cands, n);
    if (best)
        diag_error(e->loc, "unknown parameter '%s', did you mean '%s'?", full, best);
    else
        diag_error(e->loc, "unknown parameter '%s' (dotted names refer to parameters declared "
                   "before this line)", full);
    return verr;
}

static Val eval_name(Ctx *c, const Expr *e)
{
    if (strchr(e->name, '.'))
        return eval_param_ref(c, e);
    Sym *s = find_local(c->scope, e->name);
    if (!s && c->scope->parent) {
        s = find_local(c->top, e->name);
        if (s && s->kind != SYM_CONST)
            s = NULL;
    }
    if (s)
        return s->v;
    if (strcmp(e->name, "true") == 0 || strcmp(e->name, "false") == 0)
        return vbool(e->name[0] == 't');
    unknown_name(c, e);
    return verr;
}

static Val eval_num(Ctx *c, const Expr *e)
{
    (void)c;
    return e->is_int ? vint(e->ival) : vreal(e->num);
}

static Val eval_str(Ctx *c, const Expr *e)
{
    (void)c;
    diag_error(e->loc, "a string is only allowed as a 'name = \"...\"' argument");
    return verr;
}

static Val eval_list(Ctx *c, const Expr *e)
{
    (void)c;
    diag_error(e->loc, "a list [...] is only allowed as an argument of reshape, transpose, "
               "expand, concat, stack, fp16_ops or fp32_ops");
    return verr;
}

typedef Val EvalFn(Ctx *c, const Expr *e);
static EvalFn *const eval_of[] = {
    [EX_NUM] = eval_num, [EX_STR] = eval_str, [EX_NAME] = eval_name, [EX_BINARY] = eval_binary,
    [EX_NEG] = eval_neg, [EX_CALL] = call, [EX_LIST] = eval_list,
};

static Val eval(Ctx *c, const Expr *e)
{
    if (c->stop || diag_too_many())
        return verr;
    return eval_of[e->kind](c, e);
}

/* ---- constants ------------------------------------------------------------------ */

static bool get_int(Ctx *c, const Expr *e, Val v, const char *what, int64_t lo, int64_t *out)
{
    if (v.k == V_ERR)
        return false;
    if (v.k != V_INT) {
        diag_error(e->loc, "%s must be an integer, got %s", what, describe(c, v));
        return false;
    }
    if (v.i < lo) {
        diag_error(e->loc, "%s must be >= %lld, got %lld", what, (long long)lo, (long long)v.i);
        return false;
    }
    *out = v.i;
    return true;
}

static bool get_real(Ctx *c, const Expr *e, Val v, const char *what, double *out)
{
    if (v.k == V_ERR)
        return false;
    if (!is_num(v)) {
        diag_error(e->loc, "%s must be a number, got %s", what, describe(c, v));
        return false;
    }
    *out = v.r;
    return true;
}

/* A shape written as a list of constant expressions: every dimension an
 * integer >= 1, and the element count within bounds. */
static bool eval_dims(Ctx *c, Expr *const *dims, int n, SrcLoc at, Shape *out)
{
    if (n > MP_MAX_RANK) {
        diag_error(dims[MP_MAX_RANK]->loc, "a shape has at most %d dimensions, got %d", MP_MAX_RANK, n);
        return false;
    }
    bool ok = true;
    *out = (Shape){.rank = n};
    for (int i = 0; i < n; i++) {
        Val v = eval(c, dims[i]);
        if (v.k == V_REAL) {
            diag_error(dims[i]->loc, "dimension must be an integer, got %s (use // for integer "
                       "division, floor() or ceil() to round)", fmt_real(c, v.r));
            ok = false;
        } else
            ok = get_int(c, dims[i], v, "dimension", 1, &out->d[i]) && ok;
    }
    int64_t count;
    if (ok && !shape_numel_checked(out, &count)) {
        diag_error(at, "shape %s has too many elements (at most %lld)", shape_str(c->a, out),
                   (long long)SHAPE_MAX_NUMEL);
        return false;
    }
    return ok;
}

/* ---- arguments of calls -------------------------------------------------------------- */


static int nspecs(const ArgSpec *spec)
{
    int n = 0;
    while (n < MAX_ARGS && spec[n].name)
        n++;
    return n;
}

static const char *signature(Ctx *c, const char *fn, const ArgSpec *spec)
{
    const char *s = arena_printf(c->a, "%s(", fn);
    for (int i = 0; i < nspecs(spec); i++) {
        const char *sep = i ? ", " : "";
        if (spec[i].need == ARG_HIDDEN)
            continue;
        if (spec[i].need != ARG_OPT)
            s = arena_printf(c->a, "%s%s%s", s, sep, spec[i].name);
        else if (spec[i].kind == A_BOOL)
            s = arena_printf(c->a, "%s%s%s = %s", s, sep, spec[i].name, spec[i].def ? "true" : "false");
        else
            s = arena_printf(c->a, "%s%s%s = %g", s, sep, spec[i].name, spec[i].def);
    }
    return arena_printf(c->a, "%s)", s);
}

/* One argument converted to what its slot takes; false after an error. */
static bool convert_arg(Ctx *c, const char *fn, const ArgSpec *sp, const Expr *e, Val *out)
{
    if (sp->need == ARG_ABSENT && (sp->kind == A_INT || sp->kind == A_REAL || sp->kind == A_TENSOR) &&
        e->kind == EX_NAME && strcmp(e->name, "none") == 0) {
        *out = vnone;          /* `ignore_index = none`: the same as absent */
        return true;
    }
    if ((sp->kind == A_AXES && e->kind == EX_LIST)
        || (sp->kind == A_PAIR && (e->kind == EX_LIST || e->kind == EX_STR))) {
        *out = vnone;          /* read by the op itself (axes, pair_arg) */
        return true;
    }
    if (sp->kind == A_VALUE && (e->kind == EX_STR || e->kind == EX_LIST)) {
        *out = sema_block_arg(c, e);   /* a block's parameter: passed on as written */
        return true;
    }
    if (sp->kind == A_STR || sp->kind == A_LIST || sp->kind == A_INIT) {
        bool fits = sp->kind == A_INIT ||
                    (sp->kind == A_STR ? e->kind == EX_STR : e->kind == EX_LIST);
        if (!fits)
            diag_error(e->loc, "argument '%s' of %s must be %s", sp->name, fn,
                       sp->kind == A_STR ? "a string, e.g. \"proj\"" : "a list, e.g. [B, -1]");
        *out = vnone;
        return fits;
    }
    Val v = eval(c, e);
    *out = v;
    if (v.k == V_ERR)
        return false;
    bool ok = sp->kind == A_TENSOR ? v.k == V_TENSOR
            : sp->kind == A_INT || sp->kind == A_AXES || sp->kind == A_PAIR ? v.k == V_INT
            : sp->kind == A_REAL   ? is_num(v)
            : sp->kind == A_BOOL   ? v.k == V_BOOL
            : sp->kind == A_VALUE  ? v.k != V_NONE
                                   : v.k == V_TENSOR || is_num(v);
    static const char *const want[] = {
        [A_TENSOR] = "a tensor", [A_INT] = "an integer", [A_REAL] = "a number",
        [A_BOOL] = "true or false", [A_ANY] = "a tensor or a number",
        [A_AXES] = "an integer or a list of integers",
        [A_PAIR] = "an integer or a pair [h, w]", [A_VALUE] = "a value",
    };
    if (!ok)
        diag_error(e->loc, "argument '%s' of %s must be %s, got %s", sp->name, fn, want[sp->kind],
                   describe(c, v));
    return ok;
}

/* A block's parameter bound to a string or a list (V_EXPR) stands for
 * that expression as written: `sum(x, axis)` with axis = [2, 3]. */
static const Expr *as_written(Ctx *c, const Expr *e)
{
    if (e->kind != EX_NAME)
        return e;
    Sym *s = find_local(c->scope, e->name);
    if (!s && c->scope->parent)
        s = find_local(c->top, e->name);
    return s && s->v.k == V_EXPR ? s->v.x : e;
}

/* Positional arguments, then key = value ones, matched against spec;
 * defaults filled in. `fn` names the callee in messages. */
static bool bind_args(Ctx *c, const Expr *callx, const char *fn, const ArgSpec *spec, Args *a)
{
    int ns = nspecs(spec);
    bool ok = true;
    memset(a, 0, sizeof *a);
    if (callx->nargs > ns) {
        diag_error(callx->args[ns]->loc, "%s takes at most %d argument%s, got %d: %s", fn, ns,
                   ns == 1 ? "" : "s", callx->nargs, signature(c, fn, spec));
        return false;
    }
    for (int i = 0; i < callx->nargs; i++) {
        a->e[i] = as_written(c, callx->args[i]);
        ok = convert_arg(c, fn, &spec[i], a->e[i], &a->v[i]) && ok;
    }
    for (int k = 0; k < callx->nkwargs; k++) {
        const Kwarg *kw = &callx->kwargs[k];
        int i = 0;
        while (i < ns && strcmp(spec[i].name, kw->key) != 0)
            i++;
        if (i == ns) {
            const char *names[MAX_ARGS];
            for (int j = 0; j < ns; j++)
                names[j] = spec[j].name;
            const char *best = suggest(c, kw->key, names, ns);
            if (best)
                diag_error(kw->key_loc, "unknown argument '%s' of %s, did you mean '%s'?", kw->key, fn, best);
            else
                diag_error(kw->key_loc, "unknown argument '%s' of %s", kw->key, signature(c, fn, spec));
            ok = false;
            continue;
        }
        if (a->e[i]) {
            diag_error(kw->key_loc, "argument '%s' of %s is given twice", kw->key, fn);
            ok = false;
            continue;
        }
        a->e[i] = as_written(c, kw->value);
        ok = convert_arg(c, fn, &spec[i], a->e[i], &a->v[i]) && ok;
    }
    for (int i = 0; i < ns; i++) {
        if (a->e[i] || spec[i].need >= ARG_ABSENT)
            continue;
        if (spec[i].need == ARG_REQ) {
            diag_error(callx->loc, "missing argument '%s' of %s", spec[i].name, signature(c, fn, spec));
            ok = false;
        } else if (spec[i].kind == A_BOOL)
            a->v[i] = vbool(spec[i].def != 0);
        else if (spec[i].kind == A_INT || spec[i].kind == A_PAIR)
            a->v[i] = vint((int64_t)spec[i].def);
        else
            a->v[i] = vreal(spec[i].def);
    }
    return ok;
}

/* ---- parameters and layer names --------------------------------------------------------- */

typedef struct Init {
    InitKind k;
    double a, b, c;
} Init;

typedef struct InitFn {
    const char *name;
    InitKind k;
    ArgSpec args[4];    /* ends with an empty spec */
} InitFn;

static const InitFn init_fns[] = {
    {"zeros", INIT_ZEROS, {{0}}},
    {"ones", INIT_ONES, {{0}}},
    {"constant", INIT_CONSTANT, {REQ("v", A_REAL)}},
    {"normal", INIT_NORMAL, {REQ("std", A_REAL)}},
    {"uniform", INIT_UNIFORM, {REQ("lo", A_REAL), REQ("hi", A_REAL)}},
    {"glorot_uniform", INIT_GLOROT_UNIFORM, {{0}}},
    {"he_normal", INIT_HE_NORMAL, {ABS("mode", A_STR)}},
    {"he_uniform", INIT_HE_UNIFORM, {ABS("mode", A_STR)}},
    {"glorot_normal", INIT_GLOROT_NORMAL, {{0}}},
    {"trunc_normal", INIT_TRUNC_NORMAL, {REQ("std", A_REAL), ABS("a", A_REAL), ABS("b", A_REAL)}},
    {"torch_default", INIT_TORCH_UNIFORM, {{0}}},
};
#define N_INIT_FNS ((int)(sizeof init_fns / sizeof init_fns[0]))

/* An initialiser: a call of one of init_fns (or its bare name when it
 * takes no arguments). */
static bool eval_init(Ctx *c, const Expr *e, Init *out)
{
    bool is_call = e->kind == EX_CALL;
    if (!is_call && e->kind != EX_NAME) {
        diag_error(e->loc, "an initialiser must be zeros(), ones(), constant(v), normal(std), "
                   "uniform(lo, hi), glorot_uniform(), glorot_normal(), he_normal(), he_uniform(), "
                   "trunc_normal(std) or torch_default()");
        return false;
    }
    const char *names[N_INIT_FNS];
    for (int i = 0; i < N_INIT_FNS; i++) {
        names[i] = init_fns[i].name;
        if (strcmp(e->name, names[i]) != 0)
            continue;
        const InitFn *f = &init_fns[i];
        Args a;
        if (!is_call && f->args[0].need == ARG_REQ) {
            diag_error(e->loc, "initialiser %s needs its arguments: %s", f->name,
                       signature(c, f->name, f->args));
            return false;
        }
        if (is_call && !bind_args(c, e, f->name, f->args, &a))
            return false;
        *out = (Init){f->k, is_call ? a.v[0].r : 0, is_call ? a.v[1].r : 0, 0};
        if ((f->k == INIT_HE_NORMAL || f->k == INIT_HE_UNIFORM) && is_call && a.e[0]) {
            const char *m = a.e[0]->name;    /* mode = "fan_in" (a = 0) | "fan_out" (a = 1) */
            if (strcmp(m, "fan_in") != 0 && strcmp(m, "fan_out") != 0) {
                diag_error(a.e[0]->loc, "%s's mode must be \"fan_in\" or \"fan_out\", got \"%s\"", f->name, m);
                return false;
            }
            out->a = strcmp(m, "fan_out") == 0;
        }
        if (f->k == INIT_TRUNC_NORMAL) {     /* std, lo = a (-2 std), hi = b (2 std) */
            double sd = a.v[0].r, lo = a.e[1] ? a.v[1].r : -2 * sd, hi = a.e[2] ? a.v[2].r : 2 * sd;
            if (!(sd > 0) || !(lo < hi) || !(lo <= 8 * sd && hi >= -8 * sd)) {
                diag_error(e->loc, "trunc_normal(std, a, b) needs std > 0 and a < b, within 8 std of 0 "
                           "(else almost nothing is drawn there), got %g, %g, %g", sd, lo, hi);
                return false;
            }
            *out = (Init){f->k, sd, lo, hi};
        }
        if (f->k == INIT_NORMAL && !(out->a >= 0)) {
            diag_error(e->loc, "normal(std) needs std >= 0, got %g", out->a);
            return false;
        }
        if (f->k == INIT_UNIFORM && !(out->a <= out->b)) {
            diag_error(e->loc, "uniform(lo, hi) needs lo <= hi, got %g and %g", out->a, out->b);
            return false;
        }
        return true;
    }
    const char *best = suggest(c, e->name, names, N_INIT_FNS);
    if (best)
        diag_error(e->loc, "unknown initialiser '%s', did you mean '%s'?", e->name, best);
    else
        diag_error(e->loc, "unknown initialiser '%s': expected zeros(), ones(), constant(v), "
                   "normal(std), uniform(lo, hi), glorot_uniform(), glorot_normal(), he_normal(), "
                   "he_uniform(), trunc_normal(std) or torch_default()", e->name);
    return false;
}

/* Declares one parameter (full name); NULL after an error. */
static IrNode *declare(Ctx *c, SrcLoc loc, const char *name, Shape s, Init init,
                       int64_t fan_in, int64_t fan_out)
{
    int old = nameset_get(&c->params, name);
    if (old >= c->share_from && old < c->share_to)      /* a for loop's shared layer */
        return sema_shared_param(c, loc, old, s);
    if (old >= 0) {
        diag_error(loc, "parameter '%s' is declared twice: give this layer another name, e.g. "
                   "name = \"...\"", name);
        diag_note(c->g->params[old].loc, "'%s' was first declared here", name);
        return NULL;
    }
    int64_t count;
    if (!shape_numel_checked(&s, &count)) {
        diag_error(loc, "parameter '%s' of shape %s has too many elements", name, shape_str(c->a, &s));
        return NULL;
    }
    if (c->stop || c->g->nnodes >= SEMA_MAX_NODES) {
        node(c, OP_PARAM, loc, 0, NULL);   /* reports the limit once */
        return NULL;
    }
    IrParam *p = ir_add_param(c->g, name, loc, s);
    p->init = init.k;
    p->a = init.a;
    p->b = init.b;
    p->c = init.c;
    p->fan_in = fan_in;
    p->fan_out = fan_out;
    nameset_put(c->a, &c->params, name, c->g->nparams - 1);
    return p->node;
}

/* A module path as torch writes one ("layer2.0.conv1", "transformer.h"):
 * parts joined by single dots, each an identifier or a number. Returns
 * what is wrong with `s`, or NULL. */
static const char *path_problem(Ctx *c, const char *s)
{
    if (!*s)
        return "it is empty";
    if (*s == '.')
        return "it starts with a dot";
    if (s[strlen(s) - 1] == '.')
        return "it ends with a dot";
    if (strstr(s, ".."))
        return "it has an empty part between two dots";
    for (const char *part = s; part; part = strchr(part, '.') ? strchr(part, '.') + 1 : NULL) {
        size_t len = strcspn(part, "."), digits = strspn(part, "0123456789"), word = 0;
        if (!(*part >= '0' && *part <= '9'))
            word = strspn(part, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789");
        if (digits != len && word != len)
            return arena_printf(c->a, "its part '%.*s' is neither an identifier nor a number",
                                (int)len, part);
    }
    return NULL;
}

/* Reports a bad module path written at `at`; true when it is fine. */
static bool check_path(Ctx *c, SrcLoc at, const char *what, const char *s)
{
    const char *why = path_problem(c, s);
    if (why)
        diag_error(at, "%s must be a module path (identifiers and numbers joined by dots, e.g. "
                   "\"layer2.0.conv1\"), got \"%s\": %s", what, s, why);
    return !why;
}

/* The name T of a parameterised call: its name = "..." argument, else the
 * statement's target (once per statement). NULL after an error. */
static const char *layer_name(Ctx *c, const Expr *callx, const Expr *name_arg)
{
    if (name_arg)
        return check_path(c, name_arg->loc, "a layer name", name_arg->name) ? name_arg->name : NULL;
    if (c->in_return) {
        diag_error(callx->loc, "%s in a 'return' declares parameters and needs a name: add "
                   "name = \"...\"", callx->name);
        return NULL;
    }
    if (c->unpack == callx) {
        diag_error(callx->loc, "%s declares parameters and needs a name: a tuple assignment has no "
                   "one target to name it after; add name = \"...\" (or name = \"\" for no name "
                   "level)", callx->name);
        return NULL;
    }
    if (!c->target || c->target_taken) {
        diag_error(callx->loc, "%s declares parameters and needs a name: only one unnamed layer "
                   "per statement takes the name of its target%s; add name = \"...\"",
                   callx->name, c->target ? arena_printf(c->a, " ('%s')", c->target) : "");
        return NULL;
    }
    c->target_taken = true;
    return c->target;
}

static const char *pname(Ctx *c, const char *layer, const char *leaf)
{
    return arena_printf(c->a, "%s%s.%s", c->prefix, layer, leaf);
}

/* weight and optional bias of a layer, from the init / bias_init args. */
typedef struct LayerArgs {
    const char *name;
    Init w, b;
} LayerArgs;

static const Init init_ones_ = {INIT_ONES, 0, 0, 0};

static bool layer_args(Ctx *c, const Expr *callx, const Args *a, int name_slot, Init wdef, Init bdef,
                       LayerArgs *out)
{
    out->w = wdef;
    out->b = bdef;
    bool ok = true;
    if (a->e[name_slot + 1])
        ok = eval_init(c, a->e[name_slot + 1], &out->w);
    if (a->e[name_slot + 2])
        ok = eval_init(c, a->e[name_slot + 2], &out->b) && ok;
    /* torch_default(): torch.nn's own for this layer. Linear and Conv:
     * U(±1/√fan_in), the bias with the weight's fan_in (declare's); an
     * Embedding N(0, 1); the norms ones and zeros */
    bool norm = strstr(callx->name, "norm") != NULL, emb = strcmp(callx->name, "embedding") == 0;
    if (out->w.k == INIT_TORCH_UNIFORM && (norm || emb))
        out->w = norm ? init_ones_ : (Init){INIT_NORMAL, 1, 0, 0};
    if (out->b.k == INIT_TORCH_UNIFORM && norm)
        out->b = (Init){INIT_ZEROS, 0, 0, 0};
    out->name = ok ? layer_name(c, callx, a->e[name_slot]) : NULL;
    return out->name != NULL;
}

static const Init init_glorot = {INIT_GLOROT_UNIFORM, 0, 0, 0};
static const Init init_zeros = {INIT_ZEROS, 0, 0, 0};
static const Init init_ones = {INIT_ONES, 0, 0, 0};

/* ---- built-in operations ------------------------------------------------------------------ */

typedef struct Builtin Builtin;
typedef Val Lower(Ctx *c, const Builtin *b, const Expr *callx, Args *a);

struct Builtin {
    const char *name;
    IrOp op;
    Lower *lower;
    bool layer;            /* declares parameters */
    ArgSpec args[MAX_ARGS];
};

#define LAYER_TAIL ABS("name", A_STR), ABS("init", A_INIT), ABS("bias_init", A_INIT)

static Val lower_unary(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    return op1(c, b->op, x->loc, a->v[0].t);
}

static Val cross_entropy_mean(Ctx *c, const Expr *x, Args *a);

static Val lower_binary(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    IrNode *in[2] = {a->v[0].t, a->v[1].t};
    return finish(c, node(c, b->op, x->loc, 2, in));
}

static Val lower_dropout(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    IrNode *n = node(c, OP_DROPOUT, x->loc, 1, &a->v[0].t);
    if (n)
        n->fa[0] = a->v[1].r;
    return finish(c, n);
}

/* An axis in [-rank, rank), normalised to [0, rank). */
static bool norm_axis(Ctx *c, const Expr *at, const char *fn, const Shape *s, int64_t axis, int64_t *out)
{
    if (axis < -s->rank || axis >= s->rank) {
        diag_error(at->loc, "%s axis %lld is out of range for %s (rank %d: axes %d to %d)", fn,
                   (long long)axis, shape_str(c->a, s), s->rank, -s->rank, s->rank - 1);
        return false;
    }
    *out = axis < 0 ? axis + s->rank : axis;
    return true;
}

/* sum / mean (axis absent: every axis), softmax / log_softmax */
static Val lower_axis(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    int64_t axis = -1;
    if (a->e[1] && !norm_axis(c, a->e[1], b->name, &a->v[0].t->shape, a->v[1].i, &axis))
        return verr;
    if (!a->e[1] && a->v[1].k == V_INT &&
        !norm_axis(c, x, b->name, &a->v[0].t->shape, a->v[1].i, &axis))
        return verr;
    IrNode *n = node(c, b->op, x->loc, 1, &a->v[0].t);
    if (n)
        n->ia[0] = axis;
    return finish(c, n);
}

static bool int_list(Ctx *c, const Expr *e, const char *fn, int64_t *out, int *n);

/* One reduction over the consecutive axes [axis, axis + span) of x: a
 * reshape (no copy) merges them into one first. */
static Val reduce_run(Ctx *c, IrOp op, SrcLoc loc, IrNode *x, int64_t axis, int64_t span)
{
    if (span > 1) {
        Shape m = {.rank = x->shape.rank - (int)span + 1};
        for (int i = 0, j = 0; i < x->shape.rank; i++) {
            if (i > axis && i < axis + span)
                m.d[j - 1] *= x->shape.d[i];
            else
                m.d[j++] = x->shape.d[i];
        }
        IrNode *r = node(c, OP_RESHAPE, loc, 1, &x);
        if (!r)
            return verr;
        r->shape = m;
        Val v = finish(c, r);
        if (v.k != V_TENSOR)
            return verr;
        x = v.t;
    }
    IrNode *n = node(c, op, loc, 1, &x);
    if (n)
        n->ia[0] = axis;
    return finish(c, n);
}

/* sum, mean, max, min: `axis` an integer or a list (absent: every axis,
 * sum and mean only), each run of consecutive axes one reduction, the last
 * run first; keepdim = true keeps the reduced axes as 1s (a reshape). */
static Val lower_reduce(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    IrNode *t = a->v[0].t;
    const Shape *s = &t->shape;
    int64_t ax[MP_MAX_RANK];
    int nax = 0;
    bool on[MP_MAX_RANK] = {false};
    if (!a->e[1]) {
        for (int i = 0; i < s->rank; i++)
            ax[nax++] = i;
    } else if (a->e[1]->kind == EX_LIST) {
        if (!int_list(c, a->e[1], b->name, ax, &nax))
            return verr;
        if (nax == 0) {
            diag_error(a->e[1]->loc, "%s needs at least one axis, got []", b->name);
            return verr;
        }
    } else {
        ax[nax++] = a->v[1].i;
    }
    for (int k = 0; k < nax; k++) {
        const Expr *at = a->e[1] && a->e[1]->kind == EX_LIST ? a->e[1]->args[k] : a->e[1] ? a->e[1] : x;
        if (!norm_axis(c, at, b->name, s, ax[k], &ax[k]))
            return verr;
        if (on[ax[k]]) {
            diag_error(at->loc, "%s axis %lld is given twice", b->name, (long long)ax[k]);
            return verr;
        }
        on[ax[k]] = true;
    }
    Val v = vtensor(t);
    if (!a->e[1] && (b->op == OP_SUM || b->op == OP_MEAN)) {
        IrNode *n = node(c, b->op, x->loc, 1, &t);        /* every axis: one pass */
        if (n)
            n->ia[0] = -1;
        v = finish(c, n);
    } else {
        for (int end = s->rank - 1; end >= 0 && v.k == V_TENSOR; end--) {
            if (!on[end])
                continue;
            int start = end;
            while (start > 0 && on[start - 1])
                start--;
            v = reduce_run(c, b->op, x->loc, v.t, start, end - start + 1);
            end = start;
        }
    }
    if (v.k != V_TENSOR || !a->v[2].i)
        return v;
    Shape keep = *s;
    for (int i = 0; i < s->rank; i++)
        if (on[i])
            keep.d[i] = 1;
    IrNode *r = node(c, OP_RESHAPE, x->loc, 1, &v.t);
    if (r)
        r->shape = keep;
    return finish(c, r);
}

/* argmax / argmin: one axis (default the last), i32 positions */
static Val lower_arg_extremum(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    int64_t axis;
    if (!norm_axis(c, a->e[1] ? a->e[1] : x, b->name, &a->v[0].t->shape, a->v[1].i, &axis))
        return verr;
    IrNode *n = node(c, b->op, x->loc, 1, &a->v[0].t);
    if (n)
        n->ia[0] = axis;
    return finish(c, n);
}

/* ---- routing and indexing: topk, one_hot, gather, cumsum ------------------- */

static Val set_classes(Ctx *c, const Expr *at, Val v, IrNode *ids, int64_t classes);

/* An op with one axis argument (argument `ai`, default the last) and one
 * input: n->ia[0] = the axis, normalised. */
static IrNode *axis_node(Ctx *c, const Builtin *b, IrOp op, const Expr *x, Args *a, int ai, IrNode *in)
{
    int64_t axis;
    if (!norm_axis(c, a->e[ai] ? a->e[ai] : x, b->name, &a->v[0].t->shape, a->v[ai].i, &axis))
        return NULL;
    IrNode *n = node(c, op, x->loc, 1, &in);
    if (n)
        n->ia[0] = axis;
    return n;
}

/* values, indices = topk(x, k, axis): only as the value of a tuple
 * assignment of two names (st_unpack). The indices are TOPK's i32
 * positions, the values gather(x, axis, indices). */
static Val lower_topk(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    if (c->unpack != x) {
        diag_error(x->loc, "topk makes two values: bind them with a tuple assignment, "
                   "e.g. 'values, indices = topk(x, 2)'");
        return verr;
    }
    if (c->nparts != 2) {
        diag_error(x->loc, "topk makes two values (values, indices), but the tuple assignment "
                   "has %d names", c->nparts);
        return verr;
    }
    IrNode *t = axis_node(c, b, OP_TOPK, x, a, 2, a->v[0].t);
    if (t)
        t->ia[1] = a->v[1].i;
    Val at = t ? finish(c, t) : verr;
    if (at.k != V_TENSOR)
        return verr;
    IrNode *in[2] = {a->v[0].t, at.t}, *gn = node(c, OP_GATHER, x->loc, 2, in);
    if (gn)
        gn->ia[0] = t->ia[0];
    Val v = finish(c, gn);
    if (v.k != V_TENSOR)
        return verr;
    c->parts[0] = v.t;
    c->parts[1] = at.t;
    return v;
}

/* one_hot(ids, n): ids read from data learn the bound n (set_classes) */
static Val lower_one_hot(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    IrNode *n = node(c, OP_ONE_HOT, x->loc, 1, &a->v[0].t);
    if (n)
        n->ia[0] = a->v[1].i;
    Val v = finish(c, n);
    return v.k == V_TENSOR ? set_classes(c, x, v, a->v[0].t, a->v[1].i) : v;
}

/* gather(x, axis, index), torch.gather; an index read from data learns the
 * bound x.d[axis] (set_classes) */
static Val lower_gather(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    int64_t axis;
    if (!norm_axis(c, a->e[1], b->name, &a->v[0].t->shape, a->v[1].i, &axis))
        return verr;
    IrNode *in[2] = {a->v[0].t, a->v[2].t}, *n = node(c, OP_GATHER, x->loc, 2, in);
    if (n)
        n->ia[0] = axis;
    Val v = finish(c, n);
    return v.k == V_TENSOR ? set_classes(c, x, v, in[1], in[0]->shape.d[axis]) : v;
}

/* cumsum(x, axis), torch.cumsum */
static Val lower_cumsum(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    IrNode *n = axis_node(c, b, OP_CUMSUM, x, a, 1, a->v[0].t);
    return n ? finish(c, n) : verr;
}

/* The integer list argument `e` ([B, -1, 64]); -1 allowed when `minus1`. */
static bool int_list(Ctx *c, const Expr *e, const char *fn, int64_t *out, int *n)
{
    if (e->nargs > MP_MAX_RANK) {
        diag_error(e->loc, "%s takes at most %d dimensions, got %d", fn, MP_MAX_RANK, e->nargs);
        return false;
    }
    bool ok = true;
    for (int i = 0; i < e->nargs; i++) {
        Val v = eval(c, e->args[i]);
        ok = get_int(c, e->args[i], v, arena_printf(c->a, "an entry of %s's list", fn), INT64_MIN,
                     &out[i]) && ok;
    }
    *n = e->nargs;
    return ok;
}

/* reshape(x, [dims]), expand(x, [dims]): the shape rule reads n->shape
 * (-1: reshape infers that axis, expand keeps it). */
static Val lower_to_shape(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    Shape to = {0};
    if (!int_list(c, a->e[1], b->name, to.d, &to.rank))
        return verr;
    IrNode *n = node(c, b->op, x->loc, 1, &a->v[0].t);
    if (n)
        n->shape = to;
    return finish(c, n);
}

static Val lower_transpose(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    int64_t perm[MP_MAX_RANK];
    int np;
    const Shape *s = &a->v[0].t->shape;
    if (!int_list(c, a->e[1], "transpose", perm, &np))
        return verr;
    if (np != s->rank) {
        diag_error(a->e[1]->loc, "transpose of %s needs a permutation of its %d axes, got %d",
                   shape_str(c->a, s), s->rank, np);
        return verr;
    }
    for (int i = 0; i < np; i++)
        if (!norm_axis(c, a->e[1]->args[i], "transpose", s, perm[i], &perm[i]))
            return verr;
    IrNode *n = node(c, OP_TRANSPOSE, x->loc, 1, &a->v[0].t);
    if (n)
        memcpy(n->ia, perm, sizeof perm[0] * (size_t)np);
    return finish(c, n);
}

static Val lower_pool(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    int64_t k = a->v[1].i, pad = a->v[3].i;
    if (pad > k / 2 && k >= 1) {           /* torch refuses it: a window of padding only */
        diag_error(a->e[3]->loc, "%s padding must be at most half the kernel (as torch), got "
                   "padding %lld with kernel %lld", b->name, (long long)pad, (long long)k);
        return verr;
    }
    IrNode *n = node(c, b->op, x->loc, 1, &a->v[0].t);
    if (n) {
        n->ia[0] = k;
        n->ia[1] = a->e[2] ? a->v[2].i : k;   /* stride defaults to the kernel */
        n->ia[2] = pad;
        n->ia[3] = b->op == OP_AVG_POOL2D && !a->v[4].i;   /* count_include_pad = false */
    }
    return finish(c, n);
}

/* attention(q, k, v, causal, mask, dropout, scale): the mask, where given,
 * is the fourth input (ops.def); dropout in [0, 1) */
static Val lower_attention(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    double p = a->v[5].r;
    if (!(p >= 0 && p < 1)) {
        diag_error(a->e[5]->loc, "attention's dropout probability must be in [0, 1), got %g", p);
        return verr;
    }
    IrNode *in[4] = {a->v[0].t, a->v[1].t, a->v[2].t, a->v[4].k == V_TENSOR ? a->v[4].t : NULL};
    IrNode *n = node(c, OP_ATTENTION, x->loc, in[3] ? 4 : 3, in);
    if (n) {
        n->ia[0] = a->v[3].i;
        n->ia[1] = is_num(a->v[6]);
        n->fa[0] = n->ia[1] ? a->v[6].r : 0;
        n->fa[1] = p;
    }
    return finish(c, n);
}

/* The data input behind a chain of views, or NULL. */
static IrInput *input_behind(Ctx *c, IrNode *n)
{
    while (n->op == OP_RESHAPE || n->op == OP_TRANSPOSE || n->op == OP_FLATTEN ||
           n->op == OP_CHUNK || n->op == OP_SLICE || n->op == OP_EXPAND)
        n = n->in[0];
    return n->op == OP_INPUT ? &c->g->inputs[n->ia[0]] : NULL;
}

/* Class labels and embedding ids read from data must lie in [0, classes):
 * the input they come from learns that bound, which the trainer checks on
 * the data before training (an id out of range would index past a table). */
static Val set_classes(Ctx *c, const Expr *at, Val v, IrNode *ids, int64_t classes)
{
    IrInput *in = v.k == V_TENSOR ? input_behind(c, ids) : NULL;
    if (in && in->classes && in->classes != classes) {
        diag_error(at->loc, "'%s' is used with %lld classes here but %lld classes before: its "
                   "values must lie in [0, classes) for every use", in->name, (long long)classes,
                   (long long)in->classes);
        return verr;
    }
    if (in)
        in->classes = classes;
    return v;
}

/* cross_entropy / accuracy: classes = the logits' last dimension. */
static Val lower_class_loss(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    Val v = lower_binary(c, b, x, a);
    const Shape *logits = &a->v[0].t->shape;
    return v.k == V_TENSOR ? set_classes(c, x, v, a->v[1].t, logits->d[logits->rank - 1]) : v;
}

static DType type_named(const char *name)
{
    for (DType t = DT_F32; t <= DT_U16; t++)
        if (strcmp(dt_name(t), name) == 0)
            return t;
    return DT_NONE;
}

static Val lower_cast(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    DType to = type_named(b->name);
    Val v = a->v[0];
    if (is_num(v))
        return v;              /* a constant has no type of its own */
    if (v.t->type == to)
        return v;
    IrNode *n = node(c, OP_CAST, x->loc, 1, &v.t);
    if (!n)
        return verr;
    n->type = to;
    n->override = to;          /* written by the user: the plan keeps it */
    return op_info[OP_CAST].shape(c->g, n) ? vtensor(n) : verr;
}

static Val bad_cast(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    diag_error(x->loc, "cannot cast to %s: only f32(x), f16(x) and bf16(x) exist (integer data "
               "comes from inputs)", b->name);
    return verr;
}

static bool positive(Ctx *c, const Expr *at, const char *what, int64_t v)
{
    if (v >= 1)
        return true;
    diag_error(at->loc, "%s must be >= 1, got %lld", what, (long long)v);
    return false;
}

/* A layer without a bias given bias_init (slot `at`): an error. */
static bool no_bias_init(const Args *a, int at, const char *fn)
{
    if (!a->e[at])
        return true;
    diag_error(a->e[at]->loc, "%s has no bias: bias_init does not apply", fn);
    return false;
}

/* linear(x, n, bias = true): weight [n, K], bias [n], as torch.nn.Linear. */
static Val lower_linear(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    IrNode *in = a->v[0].t;
    int64_t n = a->v[1].i;
    LayerArgs la;
    if (!positive(c, a->e[1], "linear output size", n) ||
        !shape_expect_rank(c->g, x->loc, "linear", "an input [..., K]", &in->shape, 1, MP_MAX_RANK) ||
        !layer_args(c, x, a, 3, init_glorot, init_zeros, &la))
        return verr;
    int64_t k = in->shape.d[in->shape.rank - 1];
    IrNode *ins[3] = {in, declare(c, x->loc, pname(c, la.name, "weight"),
                                  (Shape){2, {n, k}}, la.w, k, n), NULL};
    if (a->v[2].i)
        ins[2] = declare(c, x->loc, pname(c, la.name, "bias"), (Shape){1, {n}}, la.b, k, n);
    if (!ins[1] || (a->v[2].i && !ins[2]))
        return verr;
    return finish(c, node(c, OP_LINEAR, x->loc, a->v[2].i ? 3 : 2, ins));
}

/* Argument i of a convolution: an integer (both axes), a pair [h, w] where
 * `pairs`, or "same" / "valid" where `same` is not NULL ("same" sets *same,
 * "valid" is 0). Each
 * value must be at least `min`. */
static bool pair_arg(Ctx *c, const char *fn, const Args *a, int i, const char *what, bool pairs,
                     int64_t min, int64_t out[2], bool *same)
{
    const Expr *e = a->e[i];
    if (same)
        *same = false;
    if (e && e->kind == EX_STR) {
        if (same && strcmp(e->name, "same") == 0) {
            *same = true;
            return true;
        }
        if (same && strcmp(e->name, "valid") == 0) {   /* torch's name for no padding */
            out[0] = out[1] = 0;
            return true;
        }
        diag_error(e->loc, "%s of %s must be an integer%s%s, got \"%s\"", what, fn,
                   pairs ? " or a pair [h, w]" : "", same ? ", \"same\" or \"valid\"" : "", e->name);
        return false;
    }
    if (e && e->kind == EX_LIST) {
        if (!pairs || e->nargs != 2) {
            diag_error(e->loc, "%s of %s must be %s, got a list of %d", what, fn,
                       pairs ? "an integer or a pair [h, w]" : "an integer", e->nargs);
            return false;
        }
        for (int j = 0; j < 2; j++) {
            Val v = eval(c, e->args[j]);
            if (v.k == V_ERR)
                return false;
            if (v.k != V_INT) {
                diag_error(e->args[j]->loc, "%s of %s must be a pair of integers, got %s", what, fn,
                           describe(c, v));
                return false;
            }
            out[j] = v.i;
        }
    } else
        out[0] = out[1] = a->v[i].i;
    for (int j = 0; j < 2; j++)
        if (out[j] < min) {
            diag_error(e ? e->loc : a->e[0]->loc, "%s of %s must be >= %lld, got %lld", what, fn,
                       (long long)min, (long long)out[j]);
            return false;
        }
    return true;
}

/* A convolution's groups (argument 6) must divide both channel counts. */
static bool groups_divide(const Args *a, const char *fn, int64_t ci, int64_t co, int64_t G)
{
    if (ci % G == 0 && co % G == 0)
        return true;
    diag_error(a->e[6]->loc, "%s groups = %lld must divide the input channels (%lld) and the "
               "output channels (%lld)", fn, (long long)G, (long long)ci, (long long)co);
    return false;
}

/* conv2d(x, c, kernel, stride, padding, dilation, groups, bias): weight
 * [c, Cin / groups, kh, kw], as nn.Conv2d. conv1d: x [N, Cin, L] and weight
 * [c, Cin / groups, k] (nn.Conv1d) are viewed as conv2d's with a height of
 * one (reshapes: aliases, no copies), and so is its output. */
static Val lower_conv(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    bool two = strcmp(b->name, "conv2d") == 0, same;
    const char *fn = b->name;
    IrNode *in = a->v[0].t;
    int64_t co = a->v[1].i, G = a->v[6].i, k[2], s[2], p[2], d[2], rf, fi, fo;
    LayerArgs la;
    if (!positive(c, a->e[1], arena_printf(c->a, "%s output channels", fn), co) ||
        !pair_arg(c, fn, a, 2, "kernel", two, 1, k, NULL) ||
        !pair_arg(c, fn, a, 3, "stride", two, 1, s, NULL) ||
        !pair_arg(c, fn, a, 4, "padding", two, 0, p, &same) ||
        !pair_arg(c, fn, a, 5, "dilation", two, 1, d, NULL) ||
        !positive(c, a->e[6] ? a->e[6] : x, arena_printf(c->a, "%s groups", fn), G) ||
        !shape_expect_rank(c->g, x->loc, fn, two ? "NCHW input [N, C, H, W]" : "an input [N, C, L]",
                           &in->shape, two ? 4 : 3, two ? 4 : 3) ||
        !layer_args(c, x, a, 8, init_glorot, init_zeros, &la))
        return verr;
    int64_t ci = in->shape.d[1];
    if (!groups_divide(a, fn, ci, co, G))
        return verr;
    if (same && (s[0] != 1 || s[1] != 1)) {
        diag_error(a->e[4]->loc, "%s padding = \"same\" needs stride 1 (as torch), got stride %lld", fn,
                   (long long)(s[0] != 1 ? s[0] : s[1]));
        return verr;
    }
    if (!two)                  /* the height axis of the view */
        k[0] = s[0] = d[0] = 1, p[0] = 0;
    int64_t extra = 0;
    if (same)                  /* torch: d (k - 1) split, the odd one after */
        for (int i = 0; i < 2; i++) {
            int64_t total = d[i] * (k[i] - 1);
            p[i] = total / 2;
            extra = extra * 2 + total % 2;
        }
    if (__builtin_mul_overflow(k[0], k[1], &rf) || __builtin_mul_overflow(ci / G, rf, &fi) ||
        __builtin_mul_overflow(co, rf, &fo))
        fi = fo = INT64_MAX;   /* the weight's element count is refused below */
    Shape ws = two ? (Shape){4, {co, ci / G, k[0], k[1]}} : (Shape){3, {co, ci / G, k[1]}};
    IrNode *ins[3] = {in, declare(c, x->loc, pname(c, la.name, "weight"), ws, la.w, fi, fo), NULL};
    if (a->v[7].i)
        ins[2] = declare(c, x->loc, pname(c, la.name, "bias"), (Shape){1, {co}}, la.b, fi, fo);
    if (!ins[1] || (a->v[7].i && !ins[2]))
        return verr;
    if (!two) {                /* [N, C, L] -> [N, C, 1, L], [c, C/G, k] -> [c, C/G, 1, k] */
        for (int i = 0; i < 2; i++) {
            IrNode *v = node(c, OP_RESHAPE, x->loc, 1, &ins[i]);
            if (!v)
                return verr;
            const Shape *f = &ins[i]->shape;
            v->shape = (Shape){4, {f->d[0], f->d[1], 1, f->d[2]}};
            Val r = finish(c, v);
            if (r.k == V_ERR)
                return verr;
            ins[i] = r.t;
        }
    }
    IrNode *n = node(c, OP_CONV2D, x->loc, a->v[7].i ? 3 : 2, ins);
    if (n) {
        int64_t at[8] = {s[0], s[1], p[0], p[1], d[0], d[1], G, extra};
        memcpy(n->ia, at, sizeof at);
    }
    Val y = finish(c, n);
    if (two || y.k == V_ERR)
        return y;
    IrNode *v = node(c, OP_RESHAPE, x->loc, 1, &y.t);
    if (v)
        v->shape = (Shape){3, {y.t->shape.d[0], y.t->shape.d[1], y.t->shape.d[3]}};
    return finish(c, v);
}

/* embedding(ids, vocab, dim): weight [vocab, dim] (fans as torch's
 * xavier_uniform_ on that matrix: fan_in dim, fan_out vocab). */
static Val lower_embedding(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    int64_t vocab = a->v[1].i, dim = a->v[2].i;
    LayerArgs la;
    if (!positive(c, a->e[1], "embedding vocabulary size", vocab) ||
        !positive(c, a->e[2], "embedding dimension", dim) ||
        !layer_args(c, x, a, 3, init_glorot, init_zeros, &la) || !no_bias_init(a, 5, "embedding"))
        return verr;
    IrNode *in[2] = {a->v[0].t, declare(c, x->loc, pname(c, la.name, "weight"),
                                        (Shape){2, {vocab, dim}}, la.w, dim, vocab)};
    if (!in[1])
        return verr;
    return set_classes(c, x, finish(c, node(c, OP_EMBEDDING, x->loc, 2, in)), in[0], vocab);
}

/* layer_norm(x, eps, bias): weight [D] and (bias = true) bias [D] over the
 * last axis. */
static Val lower_layer_norm(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    IrNode *in = a->v[0].t;
    bool bias = a->v[2].i != 0;
    LayerArgs la;
    if (!shape_expect_rank(c->g, x->loc, "layer_norm", "an input [..., D]", &in->shape, 1, MP_MAX_RANK) ||
        (!bias && !no_bias_init(a, 5, "layer_norm(bias = false)")) ||
        !layer_args(c, x, a, 3, init_ones, init_zeros, &la))
        return verr;
    int64_t d = in->shape.d[in->shape.rank - 1];
    Shape s = {1, {d}};
    IrNode *ins[3] = {in, declare(c, x->loc, pname(c, la.name, "weight"), s, la.w, d, d), NULL};
    if (bias)
        ins[2] = declare(c, x->loc, pname(c, la.name, "bias"), s, la.b, d, d);
    if (!ins[1] || (bias && !ins[2]))
        return verr;
    IrNode *n = node(c, OP_LAYER_NORM, x->loc, bias ? 3 : 2, ins);
    if (n)
        n->fa[0] = a->v[1].r;
    return finish(c, n);
}

/* batch_norm(x, momentum, eps): weight, bias [C]; running_mean and
 * running_var [C] saved with the model but not trained. */
static Val lower_batch_norm(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    IrNode *in = a->v[0].t;
    LayerArgs la;
    if (!shape_expect_rank(c->g, x->loc, "batch_norm", "an input [N, C, H, W] or [B, C]",
                           &in->shape, 2, 4) ||
        (in->shape.rank == 3 &&
         !shape_expect_rank(c->g, x->loc, "batch_norm", "an input [N, C, H, W] or [B, C]",
                            &in->shape, 2, 2)) ||
        !layer_args(c, x, a, 3, init_ones, init_zeros, &la))
        return verr;
    int64_t ch = in->shape.d[1];
    Shape s = {1, {ch}};
    IrNode *ins[5] = {in, declare(c, x->loc, pname(c, la.name, "weight"), s, la.w, ch, ch),
                      declare(c, x->loc, pname(c, la.name, "bias"), s, la.b, ch, ch),
                      declare(c, x->loc, pname(c, la.name, "running_mean"), s, init_zeros, ch, ch),
                      declare(c, x->loc, pname(c, la.name, "running_var"), s, init_ones, ch, ch)};
    for (int i = 1; i < 5; i++)
        if (!ins[i])
            return verr;
    c->g->params[ins[3]->ia[0]].trainable = false;
    c->g->params[ins[4]->ia[0]].trainable = false;
    IrNode *n = node(c, OP_BATCH_NORM, x->loc, 5, ins);
    if (n)
        n->fa[0] = a->v[1].r, n->fa[1] = a->v[2].r;
    return finish(c, n);
}

/* ---- elementwise, norm, rope and loss additions -------------------------------------- */

/* A string argument (slot i) that must be one of `choices`: its index, the
 * default 0 when absent, -1 after an error. */
static int choice(Ctx *c, const Args *a, int i, const char *fn, const char *arg,
                  const char *const *choices, int n)
{
    if (!a->e[i])
        return 0;
    for (int k = 0; k < n; k++)
        if (strcmp(a->e[i]->name, choices[k]) == 0)
            return k;
    diag_error(a->e[i]->loc, "unknown %s %s \"%s\": expected \"%s\" or \"%s\"", fn, arg,
               a->e[i]->name, choices[0], choices[1]);
    return -1;
}

/* gelu(x, approximate = "none" | "tanh") */
static Val lower_gelu(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    static const char *const forms[] = {"none", "tanh"};
    int form = choice(c, a, 1, "gelu", "approximate", forms, 2);
    IrNode *n = form < 0 ? NULL : node(c, OP_GELU, x->loc, 1, &a->v[0].t);
    if (n)
        n->ia[0] = form;
    return finish(c, n);
}

/* maximum / minimum: a number operand becomes a constant (maximum(x, 0)) */
static Val lower_extremum(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    if (is_num(a->v[0]) && is_num(a->v[1])) {
        diag_error(x->loc, "%s needs a tensor operand, got two numbers", b->name);
        return verr;
    }
    for (int i = 0; i < 2; i++)
        if (is_num(a->v[i]))
            a->v[i] = const_node(c, a->e[i]->loc, a->v[i].k == V_INT ? (double)a->v[i].i : a->v[i].r);
    if (a->v[0].k != V_TENSOR || a->v[1].k != V_TENSOR)
        return verr;
    return lower_binary(c, b, x, a);
}

static Val lower_clamp(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    if (!(a->v[1].r <= a->v[2].r)) {
        diag_error(a->e[2]->loc, "clamp needs lo <= hi, got lo = %s and hi = %s",
                   fmt_real(c, a->v[1].r), fmt_real(c, a->v[2].r));
        return verr;
    }
    IrNode *n = node(c, OP_CLAMP, x->loc, 1, &a->v[0].t);
    if (n)
        n->fa[0] = a->v[1].r, n->fa[1] = a->v[2].r;
    return finish(c, n);
}

static Val lower_pow(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    IrNode *n = node(c, OP_POW, x->loc, 1, &a->v[0].t);
    if (n)
        n->fa[0] = a->v[1].r;
    return finish(c, n);
}

/* rope(x, axis, theta, style): axis the position axis, before the last. */
static Val lower_rope(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    static const char *const styles[] = {"interleaved", "half"};
    const Shape *s = &a->v[0].t->shape;
    int64_t axis;
    int style = choice(c, a, 3, "rope", "style", styles, 2);
    if (style < 0 || !norm_axis(c, a->e[1], "rope", s, a->v[1].i, &axis))
        return verr;
    if (axis == s->rank - 1) {
        diag_error(a->e[1]->loc, "rope position axis %lld is the feature axis of %s: the last "
                   "axis holds the rotated features, the positions lie along another",
                   (long long)a->v[1].i, shape_str(c->a, s));
        return verr;
    }
    IrNode *n = node(c, OP_ROPE, x->loc, 1, &a->v[0].t);
    if (n) {
        n->ia[0] = axis;
        n->ia[1] = style;
        n->fa[0] = a->v[2].r;
    }
    return finish(c, n);
}

/* rms_norm(x, eps): weight [D] (ones) over the last axis, as torch.nn.RMSNorm. */
static Val lower_rms_norm(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    IrNode *in = a->v[0].t;
    LayerArgs la;
    if (!shape_expect_rank(c->g, x->loc, "rms_norm", "an input [..., D]", &in->shape, 1, MP_MAX_RANK) ||
        !no_bias_init(a, 4, "rms_norm") || !layer_args(c, x, a, 2, init_ones, init_zeros, &la))
        return verr;
    int64_t d = in->shape.d[in->shape.rank - 1];
    IrNode *ins[2] = {in, declare(c, x->loc, pname(c, la.name, "weight"), (Shape){1, {d}}, la.w, d, d)};
    if (!ins[1])
        return verr;
    IrNode *n = node(c, OP_RMS_NORM, x->loc, 2, ins);
    if (n)
        n->fa[0] = a->v[1].r;
    return finish(c, n);
}

/* The labels' data input learns the ignored value: the trainer's range
 * check lets it through. One input, one ignored value. */
static Val set_ignore(Ctx *c, const Expr *at, Val v, IrNode *labels, int64_t ignore)
{
    IrInput *in = v.k == V_TENSOR ? input_behind(c, labels) : NULL;
    if (in && in->has_ignore && in->ignore != ignore) {
        diag_error(at->loc, "'%s' is used with ignore_index = %lld here but %lld before: one "
                   "ignored value per input", in->name, (long long)ignore, (long long)in->ignore);
        return verr;
    }
    if (in)
        in->has_ignore = true, in->ignore = ignore;
    return v;
}

/* s without axis `axis` */
static Shape without_axis(const Shape *s, int64_t axis)
{
    Shape r = {.rank = s->rank - 1};
    for (int i = 0, j = 0; i < s->rank; i++)
        if (i != axis)
            r.d[j++] = s->d[i];
    return r;
}

/* cross_entropy's `axis` (the class axis): logits with their classes
 * elsewhere than last get them moved last by one transpose, so the loss
 * kernels read each position's classes as one contiguous row; when the
 * labels fit axis 1 but the default is used, the error says so. */
static IrNode *classes_last(Ctx *c, const Expr *x, Args *a, int ai)
{
    IrNode *lg = a->v[0].t;
    const Shape *s = &lg->shape, *lab = &a->v[1].t->shape;
    int64_t axis;
    if (!norm_axis(c, a->e[ai] ? a->e[ai] : x, "cross_entropy", s, a->v[ai].i, &axis))
        return NULL;
    Shape last = without_axis(s, s->rank - 1), one = without_axis(s, 1);
    if (!a->e[ai] && s->rank >= 3 && !shape_eq(&last, lab) && shape_eq(&one, lab)) {
        diag_error(x->loc, "cross_entropy labels %s do not match logits %s with the classes on "
                   "the last axis (the default); for classes on axis 1 (torch's [B, C, ...] "
                   "layout), write axis = 1", shape_str(c->a, lab), shape_str(c->a, s));
        return NULL;
    }
    if (axis == s->rank - 1)
        return lg;
    Shape want = without_axis(s, axis);
    if (!shape_eq(&want, lab)) {
        diag_error(x->loc, "cross_entropy labels %s do not match logits %s with the classes on "
                   "axis %lld: they need the shape %s", shape_str(c->a, lab), shape_str(c->a, s),
                   (long long)axis, shape_str(c->a, &want));
        return NULL;
    }
    IrNode *t = node(c, OP_TRANSPOSE, x->loc, 1, &lg);
    if (t) {
        for (int i = 0, j = 0; i < s->rank; i++)
            if (i != axis)
                t->ia[j++] = i;
        t->ia[s->rank - 1] = axis;
    }
    Val v = finish(c, t);
    return v.k == V_TENSOR ? v.t : NULL;
}

/* ---- loss reductions: reduction = "mean" | "sum" (LANGUAGE.md "Losses") ---------------------- */

/* *sum: the reduction `e` (NULL: absent, the mean) is "sum". */
static bool sum_reduction(Ctx *c, const Expr *e, bool *sum)
{
    *sum = e && strcmp(e->name, "sum") == 0;
    if (!e || *sum || strcmp(e->name, "mean") == 0)
        return true;
    diag_error(e->loc, "reduction must be \"mean\" or \"sum\", got \"%s\"", e->name);
    return false;
}

/* numel(x, axis): how many elements of x the axes (an integer or a list;
 * absent: every axis) hold, an integer constant (var's count). */
static Val lower_numel(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    const Shape *s = &a->v[0].t->shape;
    int64_t ax[MP_MAX_RANK], n = 1;
    int nax = 0;
    if (a->e[1] && a->e[1]->kind == EX_LIST) {
        if (!int_list(c, a->e[1], b->name, ax, &nax))
            return verr;
    } else if (a->e[1]) {
        ax[nax++] = a->v[1].i;
    } else {
        for (int i = 0; i < s->rank; i++)
            ax[nax++] = i;
    }
    for (int k = 0; k < nax; k++) {
        if (!norm_axis(c, a->e[1] ? a->e[1] : x, b->name, s, ax[k], &ax[k]))
            return verr;
        n *= s->d[ax[k]];
    }
    return vint(n);
}

/* reduce(x, reduction = "mean"): the mean or the sum of every element,
 * how the prelude's losses (compiler/prelude.mp) apply their reduction. */
static Val lower_reduce_loss(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    bool sum;
    if (!sum_reduction(c, a->e[1], &sum))
        return verr;
    IrNode *n = node(c, sum ? OP_SUM : OP_MEAN, x->loc, 1, &a->v[0].t);
    if (n)
        n->ia[0] = -1;
    return finish(c, n);
}

/* A built-in loss's mean `v` (cross_entropy, mse: one kernel each) as the
 * sum torch's reduction = "sum" gives: times the number of terms, a
 * constant, or (`counted`, cross_entropy's ignore_index) the labels that
 * are not ignored. */
static Val loss_sum(Ctx *c, const Expr *x, Val v, double terms, IrNode *labels, const Val *ignore)
{
    if (v.k != V_TENSOR)
        return v;
    Val k = const_node(c, x->loc, ignore ? ignore->r : terms);
    if (k.k == V_TENSOR && ignore) {           /* sum(f32(labels != ignore)) */
        IrNode *ne[2] = {labels, k.t};
        k = finish(c, node(c, OP_NE, x->loc, 2, ne));
        IrNode *f = k.k == V_TENSOR ? node(c, OP_CAST, x->loc, 1, &k.t) : NULL;
        if (f)
            f->type = DT_F32;
        k = finish(c, f);
        IrNode *n = k.k == V_TENSOR ? node(c, OP_SUM, x->loc, 1, &k.t) : NULL;
        if (n)
            n->ia[0] = -1;
        k = finish(c, n);
    }
    if (k.k != V_TENSOR)
        return verr;
    IrNode *in[2] = {v.t, k.t};
    return finish(c, node(c, OP_MUL, x->loc, 2, in));
}

static Val lower_mse(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    bool sum;
    if (!sum_reduction(c, a->e[2], &sum))
        return verr;
    Val v = lower_binary(c, b, x, a);
    return sum && v.k == V_TENSOR ? loss_sum(c, x, v, (double)shape_numel(&v.t->in[0]->shape), NULL, NULL) : v;
}

/* cross_entropy(logits, labels, ignore_index, label_smoothing, axis, reduction), torch's. */
static Val lower_cross_entropy(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    bool sum;
    if (!sum_reduction(c, a->e[5], &sum))
        return verr;
    Val v = cross_entropy_mean(c, x, a);
    if (!sum || v.k != V_TENSOR)
        return v;
    bool ignore = a->e[2] && a->v[2].k == V_INT;
    return loss_sum(c, x, v, (double)shape_numel(&a->v[1].t->shape), a->v[1].t, ignore ? &a->v[2] : NULL);
}

static Val cross_entropy_mean(Ctx *c, const Expr *x, Args *a)
{
    double ls = a->v[3].r;
    bool ignore = a->e[2] && a->v[2].k == V_INT;
    if (!(ls >= 0 && ls <= 1)) {
        diag_error(a->e[3]->loc, "label_smoothing must be in [0, 1], got %s", fmt_real(c, ls));
        return verr;
    }
    IrNode *in[2] = {classes_last(c, x, a, 4), a->v[1].t};
    if (!in[0])
        return verr;
    IrNode *n = node(c, OP_CROSS_ENTROPY, x->loc, 2, in);
    if (n) {
        n->ia[0] = ignore;
        n->ia[1] = ignore ? a->v[2].i : 0;
        n->fa[0] = ls;
    }
    Val v = finish(c, n);
    const Shape *logits = &in[0]->shape;
    if (v.k == V_TENSOR)
        v = set_classes(c, x, v, in[1], logits->d[logits->rank - 1]);
    return ignore && v.k == V_TENSOR ? set_ignore(c, x, v, in[1], a->v[2].i) : v;
}

/* ---- structural ops: chunk, slice, concat, expand, arange ------------------ */

/* q, k, v = chunk(x, 3, axis): only as the value of a tuple assignment of
 * exactly n names (st_unpack); the parts are left in c->parts. */
static Val lower_chunk(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    int64_t n = a->v[1].i, axis;
    if (c->unpack != x) {
        diag_error(x->loc, "chunk makes several values: bind them with a tuple assignment, "
                   "e.g. 'q, k, v = chunk(x, 3)'");
        return verr;
    }
    if (n != c->nparts) {
        diag_error(a->e[1]->loc, "chunk into %lld parts is assigned to %d names", (long long)n,
                   c->nparts);
        return verr;
    }
    if (!norm_axis(c, a->e[2] ? a->e[2] : x, "chunk", &a->v[0].t->shape, a->v[2].i, &axis))
        return verr;
    for (int i = 0; i < c->nparts; i++) {
        IrNode *p = node(c, OP_CHUNK, x->loc, 1, &a->v[0].t);
        if (p)
            p->ia[0] = axis, p->ia[1] = n, p->ia[2] = i;
        Val v = finish(c, p);
        if (v.k != V_TENSOR)
            return verr;
        c->parts[i] = v.t;
    }
    return vtensor(c->parts[0]);
}

/* An index along an axis of size len, Python's way: negative from the end;
 * `hi` is the largest allowed (len - 1 for a start, len for an end). */
static bool py_index(Ctx *c, const Expr *at, const char *what, int64_t v, int64_t len, int64_t hi,
                     int64_t *out)
{
    *out = v < 0 ? v + len : v;
    if (*out >= 0 && *out <= hi)
        return true;
    diag_error(at->loc, "slice %s %lld is out of range for an axis of size %lld (%lld to %lld)", what,
               (long long)v, (long long)len, (long long)-len, (long long)hi);
    return false;
}

/* slice(x, axis, start, end): elements start..end-1 along axis. */
static Val lower_slice(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    const Shape *s = &a->v[0].t->shape;
    int64_t axis, start, end;
    if (!norm_axis(c, a->e[1], "slice", s, a->v[1].i, &axis))
        return verr;
    int64_t len = s->d[axis];
    if (!py_index(c, a->e[2], "start", a->v[2].i, len, len - 1, &start) ||
        !py_index(c, a->e[3], "end", a->v[3].i, len, len, &end))
        return verr;
    if (start >= end) {
        diag_error(x->loc, "slice of axis %lld from %lld to %lld is empty (start must come before end)",
                   (long long)axis, (long long)a->v[2].i, (long long)a->v[3].i);
        return verr;
    }
    IrNode *n = node(c, OP_SLICE, x->loc, 1, &a->v[0].t);
    if (n)
        n->ia[0] = axis, n->ia[1] = start, n->ia[2] = end;
    return finish(c, n);
}

/* The entries of fn's list argument [a, b, ...], tensors; NULL after an error. */
static IrNode **tensor_list(Ctx *c, const Expr *list, const char *fn)
{
    if (list->nargs == 0) {
        diag_error(list->loc, "%s needs at least one tensor in its list", fn);
        return NULL;
    }
    IrNode **in = arena_alloc(c->a, sizeof *in * (size_t)list->nargs);
    bool ok = true;
    for (int i = 0; i < list->nargs; i++) {
        Val v = eval(c, list->args[i]);
        if (v.k != V_TENSOR && v.k != V_ERR)
            diag_error(list->args[i]->loc, "an entry of %s's list must be a tensor, got %s", fn,
                       describe(c, v));
        ok = ok && v.k == V_TENSOR;
        in[i] = v.t;
    }
    return ok ? in : NULL;
}

/* concat([a, b, ...], axis): the list's entries are tensors. */
static Val lower_concat(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    const Expr *list = a->e[0];
    int64_t axis;
    IrNode **in = tensor_list(c, list, "concat");
    if (!in || !norm_axis(c, a->e[1] ? a->e[1] : x, "concat", &in[0]->shape, a->v[1].i, &axis))
        return verr;
    IrNode *n = node(c, OP_CONCAT, x->loc, list->nargs, in);
    if (n)
        n->ia[0] = axis;
    return finish(c, n);
}

/* x reshaped to `to` (a view: no copy where the layout allows). */
static Val reshaped(Ctx *c, SrcLoc loc, IrNode *x, Shape to)
{
    IrNode *n = node(c, OP_RESHAPE, loc, 1, &x);
    if (n)
        n->shape = to;
    return finish(c, n);
}

/* select(x, axis, i): index i of the axis, which is dropped -- a slice of
 * width one and a reshape (the gradient scatters back through both). */
static Val lower_select(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    const Shape *s = &a->v[0].t->shape;
    int64_t axis, i;
    if (!norm_axis(c, a->e[1], "select", s, a->v[1].i, &axis))
        return verr;
    int64_t len = s->d[axis];
    if (a->v[2].i < -len || a->v[2].i >= len) {
        diag_error(a->e[2]->loc, "select index %lld is out of range for an axis of size %lld (%lld to "
                   "%lld)", (long long)a->v[2].i, (long long)len, (long long)-len, (long long)len - 1);
        return verr;
    }
    i = a->v[2].i < 0 ? a->v[2].i + len : a->v[2].i;
    IrNode *n = node(c, OP_SLICE, x->loc, 1, &a->v[0].t);
    if (n)
        n->ia[0] = axis, n->ia[1] = i, n->ia[2] = i + 1;
    Val part = finish(c, n);
    if (part.k != V_TENSOR)
        return verr;
    Shape to = {.rank = s->rank - 1};
    for (int d = 0, k = 0; d < s->rank; d++)
        if (d != axis)
            to.d[k++] = s->d[d];
    return reshaped(c, x->loc, part.t, to);
}

/* stack([a, b, ...], axis): torch.stack -- each entry given a new axis of
 * size one, then concatenated along it. */
static Val lower_stack(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    const Expr *list = a->e[0];
    IrNode **in = tensor_list(c, list, "stack");
    if (!in)
        return verr;
    const Shape *s = &in[0]->shape;
    Shape out = {.rank = s->rank + 1};     /* the axis is one of the result's */
    int64_t axis;
    if (s->rank >= MP_MAX_RANK) {
        diag_error(x->loc, "stack of %s would have more than %d dimensions", shape_str(c->a, s),
                   MP_MAX_RANK);
        return verr;
    }
    if (!norm_axis(c, a->e[1] ? a->e[1] : x, "stack", &out, a->v[1].i, &axis))
        return verr;
    for (int i = 0; i < list->nargs; i++) {
        const Shape *si = &in[i]->shape;
        if (!shape_eq(si, s)) {
            diag_error(list->args[i]->loc, "stack needs tensors of one shape, got %s and %s",
                       shape_str(c->a, s), shape_str(c->a, si));
            return verr;
        }
        Shape to = {.rank = s->rank + 1};
        for (int d = 0, k = 0; d < to.rank; d++)
            to.d[d] = d == axis ? 1 : s->d[k++];
        Val v = reshaped(c, x->loc, in[i], to);
        if (v.k != V_TENSOR)
            return verr;
        in[i] = v.t;
    }
    IrNode *n = node(c, OP_CONCAT, x->loc, list->nargs, in);
    if (n)
        n->ia[0] = axis;
    return finish(c, n);
}

static Val lower_arange(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    if (!positive(c, a->e[0], "arange length", a->v[0].i))
        return verr;
    IrNode *n = node(c, OP_ARANGE, x->loc, 0, NULL);
    if (n)
        n->ia[0] = a->v[0].i;
    return finish(c, n);
}

/* randn([dims]), rand([dims]): a fresh draw of that shape every call of the
 * forward pass; randn_like(x), rand_like(x): of x's shape (x is not read,
 * so nothing, and no gradient, flows through it). */
static Val lower_random(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    Shape s = {0};
    if (a->v[0].k == V_TENSOR)
        s = a->v[0].t->shape;
    else if (!int_list(c, a->e[0], b->name, s.d, &s.rank))
        return verr;
    for (int i = 0; a->v[0].k != V_TENSOR && i < s.rank; i++)
        if (!positive(c, a->e[0]->args[i], arena_printf(c->a, "a dimension of %s", b->name), s.d[i]))
            return verr;
    IrNode *n = node(c, b->op, x->loc, 0, NULL);
    if (n)
        n->shape = s;
    return finish(c, n);
}

/* where(cond, a, b): a number for a or b is a constant (where(m, x, 0)) */
static Val lower_where(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    for (int i = 1; i < 3; i++)
        if (is_num(a->v[i]))
            a->v[i] = const_node(c, a->e[i]->loc, a->v[i].k == V_INT ? (double)a->v[i].i : a->v[i].r);
    if (a->v[1].k != V_TENSOR || a->v[2].k != V_TENSOR)
        return verr;
    IrNode *in[3] = {a->v[0].t, a->v[1].t, a->v[2].t};
    return finish(c, node(c, OP_WHERE, x->loc, 3, in));
}

/* masked_fill(x, mask, value) is where(mask, value, x): the mask must
 * broadcast to x's shape (torch), the result has x's shape. */
static Val lower_masked_fill(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    IrNode *v = a->v[0].t, *m = a->v[1].t;
    Val value = const_node(c, a->e[2]->loc, a->v[2].k == V_INT ? (double)a->v[2].i : a->v[2].r);
    if (value.k != V_TENSOR)
        return verr;
    IrNode *in[3] = {m, value.t, v};
    Val r = finish(c, node(c, OP_WHERE, x->loc, 3, in));
    if (r.k == V_TENSOR && !shape_eq(&r.t->shape, &v->shape)) {
        diag_error(a->e[1]->loc, "masked_fill needs a mask that broadcasts to x's shape %s, got %s",
                   shape_str(c->a, &v->shape), shape_str(c->a, &m->shape));
        return verr;
    }
    return r;
}

/* zeros(dims), ones(dims), full(dims, value): f32 tensors of one value */
static Val lower_full(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    Shape s;
    if (!eval_dims(c, a->e[0]->args, a->e[0]->nargs, a->e[0]->loc, &s))
        return verr;
    double v = b->name[0] == 'z' ? 0 : b->name[0] == 'o' ? 1
             : a->v[1].k == V_INT ? (double)a->v[1].i : a->v[1].r;
    IrNode *n = node(c, OP_FULL, x->loc, 0, NULL);
    if (n) {
        n->shape = s;
        n->fa[0] = v;
    }
    return finish(c, n);
}

/* ---- recurrent layers: gru, lstm ------------------------------------------ */

/* A slice [lo, hi) of x along axis (a copy). */
static IrNode *slice_of(Ctx *c, SrcLoc loc, IrNode *x, int axis, int64_t lo, int64_t hi)
{
    IrNode *n = node(c, OP_SLICE, loc, 1, &x);
    if (n)
        n->ia[0] = axis, n->ia[1] = lo, n->ia[2] = hi;
    Val v = finish(c, n);
    return v.k == V_TENSOR ? v.t : NULL;
}

/* Values [lo, lo + h) of the state's last step, [B, h], as [1, B, h]. */
static IrNode *final_state(Ctx *c, SrcLoc loc, IrNode *st, int64_t lo, int64_t h)
{
    const Shape *s = &st->shape;
    IrNode *last = slice_of(c, loc, st, 1, s->d[1] - 1, s->d[1]);
    IrNode *part = last ? slice_of(c, loc, last, 2, lo, lo + h) : NULL;
    Val v = part ? reshaped(c, loc, part, (Shape){3, {1, s->d[0], h}}) : verr;
    return v.k == V_TENSOR ? v.t : NULL;
}

/* out = gru(x, hidden, layers, bias) / lstm(...): nn.GRU / nn.LSTM with
 * batch_first, zero initial state. Per layer: parameters weight_ih_l<k>,
 * weight_hh_l<k>, bias_ih_l<k>, bias_hh_l<k> (torch's order, gates r z n /
 * i f g o, U(+-1/sqrt(hidden))); the input projection of all steps is one
 * linear, the recurrence one GRU / LSTM node; out is the state's h. In a
 * tuple assignment the final states [layers, B, hidden] follow (h; c). */
static Val lower_rnn(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    bool lstm = b->op == OP_LSTM;
    int gates = lstm ? 4 : 3, nret = lstm ? 3 : 2;
    IrNode *in = a->v[0].t;
    int64_t hid = a->v[1].i, layers = a->v[2].i;
    bool bias = a->v[3].i != 0;
    double k = hid > 0 ? 1.0 / sqrt((double)hid) : 0;
    const Init def = {INIT_UNIFORM, -k, k, 0};
    LayerArgs la;
    if (c->unpack == x && c->nparts != nret) {
        diag_error(x->loc, "%s makes %d values (out, h%s), but the tuple assignment has %d names",
                   b->name, nret, lstm ? ", c" : "", c->nparts);
        return verr;
    }
    if (!positive(c, a->e[1], "hidden size", hid) || !positive(c, a->e[2], "number of layers", layers) ||
        !shape_expect_rank(c->g, x->loc, b->name, "an input [B, T, I] (batch_first)", &in->shape, 3, 3) ||
        (!bias && !no_bias_init(a, 6, arena_printf(c->a, "%s(bias = false)", b->name))) ||
        !layer_args(c, x, a, 4, def, def, &la))
        return verr;
    IrNode *hs[64], *cs[64];
    if (layers > 64) {
        diag_error(a->e[2]->loc, "%s has at most 64 layers, got %lld", b->name, (long long)layers);
        return verr;
    }
    IrNode *out = in;
    for (int64_t l = 0; l < layers; l++) {
        int64_t isz = out->shape.d[2];
        const char *leaf[4] = {"weight_ih_l%lld", "weight_hh_l%lld", "bias_ih_l%lld", "bias_hh_l%lld"};
        IrNode *p[4] = {NULL, NULL, NULL, NULL};
        for (int i = 0; i < (bias ? 4 : 2); i++) {
            Shape s = i < 2 ? (Shape){2, {gates * hid, i == 0 ? isz : hid}} : (Shape){1, {gates * hid}};
            p[i] = declare(c, x->loc, pname(c, la.name, arena_printf(c->a, leaf[i], (long long)l)), s,
                           i < 2 ? la.w : la.b, s.d[s.rank - 1], gates * hid);
            if (!p[i])
                return verr;
        }
        IrNode *lin[3] = {out, p[0], p[2]};
        Val gi = finish(c, node(c, OP_LINEAR, x->loc, bias ? 3 : 2, lin));
        if (gi.k != V_TENSOR)
            return verr;
        IrNode *rin[3] = {gi.t, p[1], p[3]};
        Val st = finish(c, node(c, b->op, x->loc, bias ? 3 : 2, rin));
        if (st.k != V_TENSOR || !(out = slice_of(c, x->loc, st.t, 2, 0, hid)))
            return verr;
        if (c->unpack == x && (!(hs[l] = final_state(c, x->loc, st.t, 0, hid)) ||
                               (lstm && !(cs[l] = final_state(c, x->loc, st.t, hid, hid)))))
            return verr;
    }
    if (c->unpack == x) {
        for (int r = 1; r < nret; r++) {
            IrNode **parts = r == 1 ? hs : cs;
            Val v = vtensor(parts[0]);
            if (layers > 1) {
                IrNode *n = node(c, OP_CONCAT, x->loc, (int)layers, parts);
                if (n)
                    n->ia[0] = 0;
                v = finish(c, n);
            }
            if (v.k != V_TENSOR)
                return verr;
            c->parts[r] = v.t;
        }
        c->parts[0] = out;
    }
    return vtensor(out);
}

/* ---- image operations (LANGUAGE.md "Convolution, padding, resampling") ---- */

/* conv_transpose2d(x, c, kernel, stride, padding, output_padding, groups,
 * bias): weight [Cin, c / groups, kh, kw] and bias [c], as
 * nn.ConvTranspose2d (whose initialisers read fan_in from the weight's
 * axis 1: c / groups kh kw). */
static Val lower_conv_transpose(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    const char *fn = b->name;
    IrNode *in = a->v[0].t;
    int64_t co = a->v[1].i, G = a->v[6].i, k[2], s[2], p[2], op[2], rf, fi, fo;
    LayerArgs la;
    if (!positive(c, a->e[1], "conv_transpose2d output channels", co) ||
        !pair_arg(c, fn, a, 2, "kernel", true, 1, k, NULL) ||
        !pair_arg(c, fn, a, 3, "stride", true, 1, s, NULL) ||
        !pair_arg(c, fn, a, 4, "padding", true, 0, p, NULL) ||
        !pair_arg(c, fn, a, 5, "output_padding", true, 0, op, NULL) ||
        !positive(c, a->e[6] ? a->e[6] : x, "conv_transpose2d groups", G) ||
        !shape_expect_rank(c->g, x->loc, fn, "NCHW input [N, C, H, W]", &in->shape, 4, 4) ||
        !layer_args(c, x, a, 8, init_glorot, init_zeros, &la))
        return verr;
    int64_t ci = in->shape.d[1];
    if (!groups_divide(a, fn, ci, co, G))
        return verr;
    for (int i = 0; i < 2; i++)
        if (op[i] >= s[i]) {
            diag_error(a->e[5]->loc, "%s output_padding must be smaller than the stride (as torch), "
                       "got output_padding %lld with stride %lld", fn, (long long)op[i], (long long)s[i]);
            return verr;
        }
    if (__builtin_mul_overflow(k[0], k[1], &rf) || __builtin_mul_overflow(co / G, rf, &fi) ||
        __builtin_mul_overflow(ci, rf, &fo))
        fi = fo = INT64_MAX;   /* the weight's element count is refused below */
    IrNode *ins[3] = {in, declare(c, x->loc, pname(c, la.name, "weight"),
                                  (Shape){4, {ci, co / G, k[0], k[1]}}, la.w, fi, fo), NULL};
    if (a->v[7].i)
        ins[2] = declare(c, x->loc, pname(c, la.name, "bias"), (Shape){1, {co}}, la.b, fi, fo);
    if (!ins[1] || (a->v[7].i && !ins[2]))
        return verr;
    IrNode *n = node(c, OP_CONV_TRANSPOSE2D, x->loc, a->v[7].i ? 3 : 2, ins);
    if (n) {
        int64_t at[7] = {s[0], s[1], p[0], p[1], op[0], op[1], G};
        memcpy(n->ia, at, sizeof at);
    }
    return finish(c, n);
}

/* pad(x, [p...], value, mode): F.pad; the list (last axis first, before
 * and after) has an even length of at most 8 (the last 4 axes); mode
 * "constant" (value), "reflect", "replicate" or "circular" (shape_PAD
 * checks the sizes). */
static Val lower_pad(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    static const char *const modes[] = {"constant", "reflect", "replicate", "circular"};
    const Expr *l = a->e[1];
    int64_t p[MP_MAX_RANK] = {0};
    int np, mode = 0;
    for (; a->e[3] && mode < 4 && strcmp(a->e[3]->name, modes[mode]); mode++) {}
    if (mode == 4) {
        diag_error(a->e[3]->loc, "unknown pad mode \"%s\": expected \"constant\", \"reflect\", "
                   "\"replicate\" or \"circular\"", a->e[3]->name);
        return verr;
    }
    if (mode && a->e[2]) {
        diag_error(a->e[2]->loc, "pad value applies to mode = \"constant\" only (as F.pad)");
        return verr;
    }
    if (l->nargs % 2 || l->nargs > 8 || l->nargs == 0) {
        diag_error(l->loc, "pad needs a list of 2, 4, 6 or 8 sizes ([left, right, top, bottom, ...], "
                   "last axis first), got %d", l->nargs);
        return verr;
    }
    if (!int_list(c, l, "pad", p, &np))
        return verr;
    IrNode *n = node(c, OP_PAD, x->loc, 1, &a->v[0].t);
    if (n) {
        memcpy(n->ia, p, sizeof p);
        n->fa[0] = a->v[2].r;
        n->fa[1] = mode;
    }
    return finish(c, n);
}

/* group_norm(x, groups, eps): weight and bias [C] (nn.GroupNorm, affine) */
static Val lower_group_norm(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    IrNode *in = a->v[0].t;
    int64_t G = a->v[1].i;
    LayerArgs la;
    if (!positive(c, a->e[1], "group_norm groups", G) ||
        !shape_expect_rank(c->g, x->loc, "group_norm", "an input [N, C, ...]", &in->shape, 2,
                           MP_MAX_RANK) ||
        !layer_args(c, x, a, 3, init_ones, init_zeros, &la))
        return verr;
    int64_t ch = in->shape.d[1];
    if (ch % G) {
        diag_error(a->e[1]->loc, "group_norm groups = %lld must divide the channels (%lld)",
                   (long long)G, (long long)ch);
        return verr;
    }
    Shape s = {1, {ch}};
    IrNode *ins[3] = {in, declare(c, x->loc, pname(c, la.name, "weight"), s, la.w, ch, ch),
                      declare(c, x->loc, pname(c, la.name, "bias"), s, la.b, ch, ch)};
    if (!ins[1] || !ins[2])
        return verr;
    IrNode *n = node(c, OP_GROUP_NORM, x->loc, 3, ins);
    if (n) {
        n->ia[0] = G;
        n->fa[0] = a->v[2].r;
    }
    return finish(c, n);
}

/* upsample(x, scale, mode, align_corners): an integer scale or a pair
 * [h, w]; "nearest" or "bilinear", align_corners false (F.interpolate's
 * default) or true (bilinear only, as torch). ia[2]: 0 nearest, 1
 * bilinear, 2 bilinear with align_corners. */
static Val lower_upsample(Ctx *c, const Builtin *b, const Expr *x, Args *a)
{
    static const char *const modes[] = {"nearest", "bilinear"};
    int64_t s[2];
    if (!pair_arg(c, "upsample", a, 1, "scale", true, 1, s, NULL))
        return verr;
    int mode = choice(c, a, 2, "upsample", "mode", modes, 2);
    if (mode == 0 && a->e[3]) {
        diag_error(a->e[3]->loc, "upsample align_corners applies to mode = \"bilinear\" only "
                   "(as F.interpolate): leave it out for \"nearest\"");
        return verr;
    }
    if (mode == 1 && a->e[3] && a->v[3].i)
        mode = 2;
    IrNode *n = mode < 0 ? NULL : node(c, OP_UPSAMPLE, x->loc, 1, &a->v[0].t);
    if (n) {
        n->ia[0] = s[0];
        n->ia[1] = s[1];
        n->ia[2] = mode;
    }
    return finish(c, n);
}

#define T1(n)  {REQ(n, A_TENSOR)}
#define T2(n, m) {REQ(n, A_TENSOR), REQ(m, A_TENSOR)}

static const Builtin builtins[] = {
    {"linear", OP_LINEAR, lower_linear, true,
     {REQ("x", A_TENSOR), REQ("n", A_INT), OPT("bias", A_BOOL, 1), LAYER_TAIL}},
    {"conv2d", OP_CONV2D, lower_conv, true,
     {REQ("x", A_TENSOR), REQ("c", A_INT), REQ("kernel", A_PAIR), OPT("stride", A_PAIR, 1),
      OPT("padding", A_PAIR, 0), OPT("dilation", A_PAIR, 1), OPT("groups", A_INT, 1),
      OPT("bias", A_BOOL, 1), LAYER_TAIL}},
    {"conv1d", OP_CONV2D, lower_conv, true,
     {REQ("x", A_TENSOR), REQ("c", A_INT), REQ("kernel", A_PAIR), OPT("stride", A_PAIR, 1),
      OPT("padding", A_PAIR, 0), OPT("dilation", A_PAIR, 1), OPT("groups", A_INT, 1),
      OPT("bias", A_BOOL, 1), LAYER_TAIL}},
    {"embedding", OP_EMBEDDING, lower_embedding, true,
     {REQ("ids", A_TENSOR), REQ("vocab", A_INT), REQ("dim", A_INT), LAYER_TAIL}},
    {"layer_norm", OP_LAYER_NORM, lower_layer_norm, true,
     {REQ("x", A_TENSOR), OPT("eps", A_REAL, 1e-5), OPT("bias", A_BOOL, 1), LAYER_TAIL}},
    {"rms_norm", OP_RMS_NORM, lower_rms_norm, true,
     {REQ("x", A_TENSOR), OPT("eps", A_REAL, 1e-5), LAYER_TAIL}},
    {"batch_norm", OP_BATCH_NORM, lower_batch_norm, true,
     {REQ("x", A_TENSOR), OPT("momentum", A_REAL, 0.1), OPT("eps", A_REAL, 1e-5), LAYER_TAIL}},
    {"matmul", OP_MATMUL, lower_binary, false, T2("a", "b")},
    {"relu", OP_RELU, lower_unary, false, T1("x")},
    {"gelu", OP_GELU, lower_gelu, false, {REQ("x", A_TENSOR), ABS("approximate", A_STR)}},
    {"tanh", OP_TANH, lower_unary, false, T1("x")},
    {"sigmoid", OP_SIGMOID, lower_unary, false, T1("x")},
    {"silu", OP_SILU, lower_unary, false, T1("x")},
    {"exp", OP_EXP, lower_unary, false, T1("x")},
    {"log", OP_LOG, lower_unary, false, T1("x")},
    {"sqrt", OP_SQRT, lower_unary, false, T1("x")},
    {"rsqrt", OP_RSQRT, lower_unary, false, T1("x")},
    {"flatten", OP_FLATTEN, lower_unary, false, T1("x")},
    {"global_avg_pool", OP_GLOBAL_AVG_POOL, lower_unary, false, T1("x")},
    {"dropout", OP_DROPOUT, lower_dropout, false, {REQ("x", A_TENSOR), REQ("p", A_REAL)}},
    {"reshape", OP_RESHAPE, lower_to_shape, false, {REQ("x", A_TENSOR), REQ("dims", A_LIST)}},
    {"transpose", OP_TRANSPOSE, lower_transpose, false, {REQ("x", A_TENSOR), REQ("perm", A_LIST)}},
    {"chunk", OP_CHUNK, lower_chunk, false,
     {REQ("x", A_TENSOR), REQ("n", A_INT), OPT("axis", A_INT, -1)}},
    {"slice", OP_SLICE, lower_slice, false,
     {REQ("x", A_TENSOR), REQ("axis", A_INT), REQ("start", A_INT), REQ("end", A_INT)}},
    {"concat", OP_CONCAT, lower_concat, false, {REQ("tensors", A_LIST), OPT("axis", A_INT, 0)}},
    {"select", OP_SLICE, lower_select, false, {REQ("x", A_TENSOR), REQ("axis", A_INT), REQ("i", A_INT)}},
    {"stack", OP_CONCAT, lower_stack, false, {REQ("tensors", A_LIST), OPT("axis", A_INT, 0)}},
    {"expand", OP_EXPAND, lower_to_shape, false, {REQ("x", A_TENSOR), REQ("dims", A_LIST)}},
    {"arange", OP_ARANGE, lower_arange, false, {REQ("n", A_INT)}},
    {"randn", OP_RANDN, lower_random, false, {REQ("dims", A_LIST)}},
    {"rand", OP_RAND, lower_random, false, {REQ("dims", A_LIST)}},
    {"randn_like", OP_RANDN, lower_random, false, T1("x")},
    {"rand_like", OP_RAND, lower_random, false, T1("x")},
    {"max_pool2d", OP_MAX_POOL2D, lower_pool, false,
     {REQ("x", A_TENSOR), REQ("k", A_INT), ABS("stride", A_INT), OPT("padding", A_INT, 0)}},
    {"avg_pool2d", OP_AVG_POOL2D, lower_pool, false,
     {REQ("x", A_TENSOR), REQ("k", A_INT), ABS("stride", A_INT), OPT("padding", A_INT, 0),
      OPT("count_include_pad", A_BOOL, 1)}},
    {"sum", OP_SUM, lower_reduce, false,
     {REQ("x", A_TENSOR), ABS("axis", A_AXES), OPT("keepdim", A_BOOL, 0)}},
    {"mean", OP_MEAN, lower_reduce, false,
     {REQ("x", A_TENSOR), ABS("axis", A_AXES), OPT("keepdim", A_BOOL, 0)}},
    {"max", OP_MAX, lower_reduce, false,
     {REQ("x", A_TENSOR), REQ("axis", A_AXES), OPT("keepdim", A_BOOL, 0)}},
    {"min", OP_MIN, lower_reduce, false,
     {REQ("x", A_TENSOR), REQ("axis", A_AXES), OPT("keepdim", A_BOOL, 0)}},
    {"argmax", OP_ARGMAX, lower_arg_extremum, false, {REQ("x", A_TENSOR), OPT("axis", A_INT, -1)}},
    {"argmin", OP_ARGMIN, lower_arg_extremum, false, {REQ("x", A_TENSOR), OPT("axis", A_INT, -1)}},
    {"topk", OP_TOPK, lower_topk, false, {REQ("x", A_TENSOR), REQ("k", A_INT), OPT("axis", A_INT, -1)}},
    {"one_hot", OP_ONE_HOT, lower_one_hot, false, {REQ("ids", A_TENSOR), REQ("n", A_INT)}},
    {"gather", OP_GATHER, lower_gather, false,
     {REQ("x", A_TENSOR), REQ("axis", A_INT), REQ("index", A_TENSOR)}},
    {"cumsum", OP_CUMSUM, lower_cumsum, false, {REQ("x", A_TENSOR), REQ("axis", A_INT)}},
    {"softmax", OP_SOFTMAX, lower_axis, false, {REQ("x", A_TENSOR), OPT("axis", A_INT, -1)}},
    {"log_softmax", OP_LOG_SOFTMAX, lower_axis, false, {REQ("x", A_TENSOR), OPT("axis", A_INT, -1)}},
    {"cross_entropy", OP_CROSS_ENTROPY, lower_cross_entropy, false,
     {REQ("logits", A_TENSOR), REQ("labels", A_TENSOR), ABS("ignore_index", A_INT),
      OPT("label_smoothing", A_REAL, 0), OPT("axis", A_INT, -1), ABS("reduction", A_STR)}},
    {"accuracy", OP_ACCURACY, lower_class_loss, false, T2("logits", "labels")},
    {"mse", OP_MSE, lower_mse, false, {REQ("pred", A_TENSOR), REQ("target", A_TENSOR), ABS("reduction", A_STR)}},
    {"reduce", OP_SUM, lower_reduce_loss, false, {REQ("x", A_TENSOR), ABS("reduction", A_STR)}},
    {"numel", OP_SUM, lower_numel, false, {REQ("x", A_TENSOR), ABS("axis", A_AXES)}},
    {"attention", OP_ATTENTION, lower_attention, false,
     {REQ("q", A_TENSOR), REQ("k", A_TENSOR), REQ("v", A_TENSOR), OPT("causal", A_BOOL, 0),
      ABS("mask", A_TENSOR), OPT("dropout", A_REAL, 0), ABS("scale", A_REAL)}},
    {"abs", OP_ABS, lower_unary, false, T1("x")},
    {"sin", OP_SIN, lower_unary, false, T1("x")},
    {"cos", OP_COS, lower_unary, false, T1("x")},
    {"maximum", OP_MAXIMUM, lower_extremum, false, {REQ("a", A_ANY), REQ("b", A_ANY)}},
    {"minimum", OP_MINIMUM, lower_extremum, false, {REQ("a", A_ANY), REQ("b", A_ANY)}},
    {"clamp", OP_CLAMP, lower_clamp, false, {REQ("x", A_TENSOR), REQ("lo", A_REAL), REQ("hi", A_REAL)}},
    {"pow", OP_POW, lower_pow, false, {REQ("x", A_TENSOR), REQ("p", A_REAL)}},
    {"rope", OP_ROPE, lower_rope, false,
     {REQ("x", A_TENSOR), REQ("axis", A_INT), OPT("theta", A_REAL, 10000), ABS("style", A_STR)}},
    {"where", OP_WHERE, lower_where, false,
     {REQ("cond", A_TENSOR), REQ("a", A_ANY), REQ("b", A_ANY)}},
    {"masked_fill", OP_WHERE, lower_masked_fill, false,
     {REQ("x", A_TENSOR), REQ("mask", A_TENSOR), REQ("value", A_REAL)}},
    {"detach", OP_DETACH, lower_unary, false, T1("x")},
    {"zeros", OP_FULL, lower_full, false, {REQ("dims", A_LIST)}},
    {"ones", OP_FULL, lower_full, false, {REQ("dims", A_LIST)}},
    {"full", OP_FULL, lower_full, false, {REQ("dims", A_LIST), REQ("value", A_REAL)}},
    {"conv_transpose2d", OP_CONV_TRANSPOSE2D, lower_conv_transpose, true,
     {REQ("x", A_TENSOR), REQ("c", A_INT), REQ("kernel", A_PAIR), OPT("stride", A_PAIR, 1),
      OPT("padding", A_PAIR, 0), OPT("output_padding", A_PAIR, 0), OPT("groups", A_INT, 1),
      OPT("bias", A_BOOL, 1), LAYER_TAIL}},
    {"pad", OP_PAD, lower_pad, false,
     {REQ("x", A_TENSOR), REQ("p", A_LIST), OPT("value", A_REAL, 0), ABS("mode", A_STR)}},
    {"group_norm", OP_GROUP_NORM, lower_group_norm, true,
     {REQ("x", A_TENSOR), REQ("groups", A_INT), OPT("eps", A_REAL, 1e-5), LAYER_TAIL}},
    {"upsample", OP_UPSAMPLE, lower_upsample, false,
     {REQ("x", A_TENSOR), REQ("scale", A_PAIR), ABS("mode", A_STR), ABS("align_corners", A_BOOL)}},
    {"f32", OP_CAST, lower_cast, false, {REQ("x", A_ANY)}},
    {"f16", OP_CAST, lower_cast, false, {REQ("x", A_ANY)}},
    {"bf16", OP_CAST, lower_cast, false, {REQ("x", A_ANY)}},
    {"i32", OP_CAST, bad_cast, false, {REQ("x", A_ANY)}},
    {"u8", OP_CAST, bad_cast, false, {REQ("x", A_ANY)}},
    {"u16", OP_CAST, bad_cast, false, {REQ("x", A_ANY)}},
    {"gru", OP_GRU, lower_rnn, true,
     {REQ("x", A_TENSOR), REQ("hidden", A_INT), OPT("layers", A_INT, 1), OPT("bias", A_BOOL, 1),
      LAYER_TAIL}},
    {"lstm", OP_LSTM, lower_rnn, true,
     {REQ("x", A_TENSOR), REQ("hidden", A_INT), OPT("layers", A_INT, 1), OPT("bias", A_BOOL, 1),
      LAYER_TAIL}},
};
#define N_BUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

static const Builtin *find_builtin(const char *name)
{
    for (int i = 0; i < N_BUILTINS; i++)
        if (strcmp(builtins[i].name, name) == 0)
            return &builtins[i];
    return NULL;
}


/* ---- statements ----------------------------------------------------------------------------- */

static void run_body(Ctx *c, Stmt *const *body, int n);
static void train_block(Ctx *c, const Stmt *s);

static Val call(Ctx *c, const Expr *e)
{
    Block *blk = (Block *)sema_find_block(c, e->name);
    if (blk)
        return sema_call_block(c, e, blk);
    Val folded;
    if (sema_const_call(c, e, &folded))
        return folded;
    const Builtin *b = find_builtin(e->name);
    if (!b) {
        const char *cands[N_BUILTINS + 64];
        int n = 0;
        for (int i = 0; i < N_BUILTINS; i++)
            cands[n++] = builtins[i].name;
        for (int i = 0; i < c->nblocks && n < N_BUILTINS + 64; i++)
            cands[n++] = c->blocks[i].s->name;
        const char *best = suggest(c, e->name, cands, n);
        Sym *s = find_local(c->scope, e->name);
        if (s)
            diag_error(e->loc, "'%s' is %s, not an operation", e->name, sym_kind_a[s->kind]);
        else if (best)
            diag_error(e->loc, "unknown operation '%s', did you mean '%s'?", e->name, best);
        else
            diag_error(e->loc, "unknown operation '%s'", e->name);
        for (int i = 0; i < e->nargs; i++)   /* still check the arguments */
            eval(c, e->args[i]);
        return verr;
    }
    Args a;
    if (!bind_args(c, e, b->name, b->args, &a))
        return verr;
    return b->lower(c, b, e, &a);
}

/* Redefining a constant, input or parameter is an error, except in a new
 * copy of the repeat that defined it. Values may be rebound freely. */
static bool may_define(Ctx *c, const char *name, SymKind kind, SrcLoc at)
{
    Sym *old = find_local(c->scope, name);
    if (!old && c->scope->parent)
        old = find_local(c->top, name);
    if (!old || (kind == SYM_VALUE && old->kind == SYM_VALUE) ||
        (old->iter >= c->repeat_base && old->iter != c->iter && old->kind == kind))
        return true;
    if (kind == SYM_VALUE)
        diag_error(at, "'%s' is %s and cannot be rebound: only values can", name, sym_kind_a[old->kind]);
    else if (old->kind != kind)
        diag_error(at, "'%s' is already %s: %s needs a name of its own", name,
                   sym_kind_a[old->kind], sym_kind_a[kind]);
    else
        diag_error(at, "%s '%s' is defined twice", sym_kind_name[kind], name);
    diag_note(old->loc, "'%s' was defined here", name);
    return false;
}

static void st_model(Ctx *c, const Stmt *s)
{
    if (s != c->ast->stmts[0] || c->scope != c->top)
        diag_error(s->loc, "'model %s' must be the first statement of the file, and appear once", s->name);
}

static void st_const(Ctx *c, const Stmt *s)
{
    Val v = eval(c, s->value);
    if (v.k != V_ERR && !is_num(v)) {
        diag_error(s->value->loc, "const '%s' needs a number known at compile time, got %s", s->name,
                   describe(c, v));
        v = verr;
    }
    if (may_define(c, s->name, SYM_CONST, s->name_loc))
        bind(c, s->name, SYM_CONST, v, s->name_loc);
}

static bool at_top(Ctx *c, const Stmt *s, const char *what)
{
    if (c->scope == c->top)
        return true;
    diag_error(s->loc, "%s belongs at the top level of the model, not inside block '%s'", what,
               c->scope->block->s->name);
    return false;
}

/* input NAME: T[B, W] window: each batch row is W consecutive values of
 * one stream, so the shape is [B, W] (W >= 2: a window and its shift). */
static bool window_shape(Ctx *c, const Stmt *s, const Shape *sh)
{
    if (sh->rank != 2) {
        diag_error(s->window_loc, "a window input has the shape [B, W] (batch, window length), but "
                   "'%s' has %d dimension%s", s->name, sh->rank, sh->rank == 1 ? "" : "s");
        return false;
    }
    if (sh->d[1] < 2) {
        diag_error(s->dims[1]->loc, "a window input needs a window length W >= 2, got %lld",
                   (long long)sh->d[1]);
        return false;
    }
    return true;
}

static void st_input(Ctx *c, const Stmt *s)
{
    Shape sh;
    DType t = (DType)s->type;
    if (!at_top(c, s, "an input") || !eval_dims(c, s->dims, s->ndims, s->loc, &sh) ||
        !may_define(c, s->name, SYM_INPUT, s->name_loc))
        return;
    if (sh.rank == 0) {
        diag_error(s->type_loc, "input '%s' needs at least the batch dimension, e.g. %s[B, 784]",
                   s->name, dt_name(t));
        return;
    }
    if (c->g->ninputs && sh.d[0] != c->g->batch) {
        diag_error(s->dims[0]->loc, "input '%s' has batch %lld, but the inputs before it have batch "
                   "%lld: every input's first dimension is the batch", s->name, (long long)sh.d[0],
                   (long long)c->g->batch);
        diag_note(c->g->inputs[0].loc, "the first input is declared here");
        return;
    }
    if (s->window && !window_shape(c, s, &sh))
        return;
    c->g->batch = sh.d[0];
    IrInput *in = ir_add_input(c->g, s->name, s->name_loc, t, sh);
    in->window = s->window;
    bind(c, s->name, SYM_INPUT, vtensor(in->node), s->name_loc);
}

/* fan_in / fan_out of a plain `param`: as the right operand of x @ w, a
 * [.., K, N] tensor has fan_in K and fan_out N; a vector [N] has N both. */
static void plain_fans(const Shape *s, int64_t *fi, int64_t *fo)
{
    *fi = s->rank >= 2 ? s->d[s->rank - 2] : s->rank == 1 ? s->d[0] : 1;
    *fo = s->rank >= 1 ? s->d[s->rank - 1] : 1;
}

/* param and buffer: a tensor declared under the current prefix; a buffer
 * (torch's register_buffer) is saved and loaded like a parameter but has
 * no gradient and no optimizer state. */
static void st_param(Ctx *c, const Stmt *s)
{
    Shape sh;
    Init init;
    SymKind kind = s->kind == ST_BUFFER ? SYM_BUFFER : SYM_PARAM;
    bool ok = eval_dims(c, s->dims, s->ndims, s->loc, &sh);
    ok = eval_init(c, s->value, &init) && ok;
    ok = ok && check_path(c, s->name_loc, kind == SYM_BUFFER ? "a buffer name" : "a parameter name",
                          s->name);
    if (!ok || !may_define(c, s->name, kind, s->name_loc))
        return;
    int64_t fi, fo;
    plain_fans(&sh, &fi, &fo);
    IrNode *n = declare(c, s->name_loc, arena_printf(c->a, "%s%s", c->prefix, s->name), sh, init, fi, fo);
    if (n && kind == SYM_BUFFER) {
        c->g->params[n->ia[0]].trainable = false;
        c->g->params[n->ia[0]].buffer = true;
    }
    bind(c, s->name, kind, n ? vtensor(n) : verr, s->name_loc);
}

/* Lowers the expression of a statement whose target is `target`; names the
 * node that holds its value. */
static Val statement_value(Ctx *c, const Stmt *s, const char *target, DType override)
{
    int first = c->g->nnodes;
    DType saved = c->override;
    c->target = target;
    c->target_taken = false;
    c->in_return = s->kind == ST_RETURN;
    if (override)
        c->override = override;
    Val v = eval(c, s->value);
    c->override = saved;
    c->target = NULL;
    c->in_return = false;
    if (v.k == V_TENSOR && target && v.t->id >= first && !v.t->name)
        v.t->name = arena_printf(c->a, "%s%s", c->prefix, target);
    return v;
}

static DType float_type(Ctx *c, const Stmt *s, const char *what)
{
    DType t = (DType)s->type;
    if (dt_is_float(t))
        return t;
    diag_error(s->type_loc, "%s needs f32, f16 or bf16, got %s", what, dt_name(t));
    return DT_NONE;
}

static void st_assign(Ctx *c, const Stmt *s)
{
    DType t = s->type ? float_type(c, s, "a typed assignment") : DT_NONE;
    Val v = statement_value(c, s, s->name, t);
    if (v.k == V_NONE) {
        diag_error(s->value->loc, "'%s' is assigned nothing", s->name);
        v = verr;
    }
    if (may_define(c, s->name, SYM_VALUE, s->name_loc))
        bind(c, s->name, SYM_VALUE, v, s->name_loc);
}

static void st_metric(Ctx *c, const Stmt *s)
{
    if (!at_top(c, s, "a metric"))
        return;
    if (c->iter) {
        diag_error(s->loc, "a metric cannot be declared inside a repeat or a for loop (each copy would "
                   "declare it again)");
        return;
    }
    Val v = statement_value(c, s, s->name, DT_NONE);
    if (!may_define(c, s->name, SYM_METRIC, s->name_loc) || v.k == V_ERR)
        return;
    if (v.k != V_TENSOR || v.t->shape.rank != 0 || is_int_type(v.t->type)) {
        diag_error(s->value->loc, "metric '%s' must be a float scalar, got %s%s", s->name,
                   describe(c, v), v.k == V_TENSOR ? ": reduce it, e.g. mean(...)" : "");
        return;
    }
    ir_add_metric(c->g, s->name, s->name_loc, v.t);
    bind(c, s->name, SYM_METRIC, v, s->name_loc);
}

static void st_precision(Ctx *c, const Stmt *s)
{
    DType t = float_type(c, s, "a precision region");
    DType saved = c->override;
    if (t)
        c->override = t;
    run_body(c, s->body, s->nbody);
    c->override = saved;
}

/* The nodes of one copy of an outermost repeat or for loop, [from, nnodes),
 * carry its number and the copy's, so that the emitters can run copies as
 * a loop. */
void sema_tag_copy(Ctx *c, bool outer, int from, int copy)
{
    for (int k = from; outer && k < c->g->nnodes; k++) {
        c->g->nodes[k]->rep = c->nrepeats;
        c->g->nodes[k]->copy = copy;
    }
}

static void st_repeat(Ctx *c, const Stmt *s)
{
    int64_t n;
    if (!get_int(c, s->value, eval(c, s->value), "repeat count", 1, &n) ||
        !check_path(c, s->name_loc, "a repeat's name", s->name))
        return;
    if (n > SEMA_MAX_REPEAT) {
        diag_error(s->value->loc, "repeat count %lld is too large (at most %d)", (long long)n,
                   SEMA_MAX_REPEAT);
        return;
    }
    const char *prefix = c->prefix;
    int iter = c->iter, base = c->repeat_base;
    c->repeat_base = c->next_iter + 1;
    bool outer = !c->in_repeat;
    if (outer)
        c->nrepeats = ir_loop_add(c->g, NULL, 0);
    c->in_repeat = true;
    ir_scope_enter(c->g, SC_REPEAT, arena_printf(c->a, "%s%s", prefix, s->name), NULL, 0, (int)n);
    for (int64_t i = 0; i < n && !c->stop && !diag_too_many(); i++) {
        int errs = diag_error_count(), before = c->g->nnodes;
        c->iter = ++c->next_iter;
        c->prefix = arena_printf(c->a, "%s%s.%lld.", prefix, s->name, (long long)i);
        ir_scope_enter(c->g, SC_COPY, c->g->scope->name, NULL, (int)i, 0);
        run_body(c, s->body, s->nbody);
        ir_scope_leave(c->g);
        sema_tag_copy(c, outer, before, (int)i);
        if (diag_error_count() > errs)
            break;                 /* each copy would say the same */
        /* every copy makes as many nodes as the first: refuse a repeat too
         * large before expanding it, not after filling memory */
        int64_t per_copy = c->g->nnodes - before;
        if (i == 0 && per_copy > 0 && (n - 1) > (SEMA_MAX_NODES - c->g->nnodes) / per_copy) {
            diag_error(s->value->loc, "repeat %lld as %s would make about %lld operations (%lld per "
                       "copy); a model may have at most %d", (long long)n, s->name,
                       (long long)(n > INT64_MAX / per_copy ? INT64_MAX : n * per_copy),
                       (long long)per_copy, SEMA_MAX_NODES);
            break;
        }
    }
    ir_scope_leave(c->g);
    c->prefix = prefix;
    c->iter = iter;
    c->repeat_base = base;
    c->in_repeat = !outer;
}

static void st_train(Ctx *c, const Stmt *s)
{
    if (!at_top(c, s, "the train block"))
        return;
    if (c->train) {
        diag_error(s->loc, "a model has one train block");
        diag_note(c->train->loc, "the first one is here");
        return;
    }
    c->train = s;     /* read after the model: `minimize` names its final value */
}

typedef void StmtFn(Ctx *c, const Stmt *s);
static StmtFn *const stmt_of[] = {
    [ST_MODEL] = st_model, [ST_CONST] = st_const, [ST_INPUT] = st_input, [ST_PARAM] = st_param,
    [ST_ASSIGN] = st_assign, [ST_METRIC] = st_metric, [ST_PRECISION] = st_precision,
    [ST_BLOCK] = sema_st_block, [ST_RETURN] = sema_st_return, [ST_REPEAT] = st_repeat,
    [ST_TRAIN] = st_train, [ST_BUFFER] = st_param,
    [ST_UNPACK] = sema_st_unpack, [ST_FOR] = sema_st_for,
};

static void run_body(Ctx *c, Stmt *const *body, int n)
{
    c->nest++;
    for (int i = 0; i < n && !c->stop && !diag_too_many() && !c->returned; i++) {
        if (c->prelude_call && diag_error_count() > c->prelude_errs)
            break;             /* a prelude block called wrongly: one message */
        stmt_of[body[i]->kind](c, body[i]);
    }
    c->nest--;
}

/* ---- the train block -------------------------------------------------------------------------- */

typedef struct NamedSpec {
    const char *name;
    int kind;                  /* OptKind / LossScaleKind / SchedKind / Policy */
    ArgSpec args[8];           /* ends at an entry with no name */
} NamedSpec;

static const NamedSpec optimizers[] = {
    {"sgd", OPT_SGD, {REQ("lr", A_REAL), OPT("momentum", A_REAL, 0), OPT("nesterov", A_BOOL, 0),
                      OPT("weight_decay", A_REAL, 0), ABS("no_decay", A_LIST), OPT("dampening", A_REAL, 0)}},
    {"adam", OPT_ADAM, {OPT("lr", A_REAL, 1e-3), OPT("beta1", A_REAL, 0.9), OPT("beta2", A_REAL, 0.999),
                        OPT("eps", A_REAL, 1e-8), OPT("weight_decay", A_REAL, 0), ABS("no_decay", A_LIST)}},
    {"adamw", OPT_ADAMW, {OPT("lr", A_REAL, 1e-3), OPT("beta1", A_REAL, 0.9), OPT("beta2", A_REAL, 0.999),
                          OPT("eps", A_REAL, 1e-8), OPT("weight_decay", A_REAL, 0.01),
                          ABS("no_decay", A_LIST)}},
    {"rmsprop", OPT_RMSPROP, {REQ("lr", A_REAL), OPT("alpha", A_REAL, 0.99), OPT("eps", A_REAL, 1e-8),
                              OPT("momentum", A_REAL, 0), OPT("centered", A_BOOL, 0),
                              OPT("weight_decay", A_REAL, 0), ABS("no_decay", A_LIST)}},
    {0},
};
static const NamedSpec loss_scales[] = {
    {"dynamic", LS_DYNAMIC, {OPT("init", A_REAL, 32768), OPT("growth", A_REAL, 2),
                             OPT("backoff", A_REAL, 0.5), OPT("interval", A_INT, 2000)}},
    {"static", LS_STATIC, {REQ("v", A_REAL)}},
    {"none", LS_NONE, {{0}}},
    {0},
};
static const NamedSpec schedules[] = {
    {"constant", SCHED_CONSTANT, {{0}}},
    {"cosine", SCHED_COSINE, {OPT("warmup", A_INT, 0), OPT("min", A_REAL, 0), ABS("warmup_style", A_STR)}},
    {"linear", SCHED_LINEAR, {OPT("warmup", A_INT, 0), ABS("warmup_style", A_STR)}},
    {0},
};
static const NamedSpec policies[] = {
    {"float32", POLICY_FLOAT32, {{0}}},
    {"mixed_float16", POLICY_MIXED_F16, {{0}}},
    {"mixed_bfloat16", POLICY_MIXED_BF16, {{0}}},
    {"mixed_float8", POLICY_MIXED_F8, {{0}}},
    {0},
};
static const NamedSpec fp8_recipes[] = {
    {"delayed", FP8_DELAYED, {OPT("amax_history", A_INT, 16), OPT("margin", A_INT, 0)}},
    {"current", FP8_CURRENT, {OPT("margin", A_INT, 0)}},
    {0},
};

/* A value written as NAME or NAME(args) from `table`; NULL after an error. */
static const NamedSpec *named_value(Ctx *c, const TrainItem *it, const NamedSpec *table, Args *a)
{
    const Expr *e = it->value;
    const char *names[8];
    int n = 0;
    for (; table[n].name; n++)
        names[n] = table[n].name;
    const char *list = "";
    for (int i = 0; i < n; i++)
        list = arena_printf(c->a, "%s%s%s", list, i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    if (e->kind != EX_NAME && e->kind != EX_CALL) {
        diag_error(e->loc, "%s must be %s", it->key, list);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (strcmp(e->name, names[i]) != 0)
            continue;
        Expr bare = *e;           /* a bare name: the call with no arguments */
        if (e->kind == EX_NAME)
            bare.nargs = bare.nkwargs = 0;
        return bind_args(c, &bare, names[i], table[i].args, a) ? &table[i] : NULL;
    }
    const char *best = suggest(c, e->name, names, n);
    if (best)
        diag_error(e->loc, "unknown %s '%s', did you mean '%s'?", it->key, e->name, best);
    else
        diag_error(e->loc, "unknown %s '%s': expected %s", it->key, e->name, list);
    return NULL;
}

/* Checks v against lo (excluded when lo_open) and hi (excluded when
 * hi_open; INFINITY for none). */
static bool in_range(const TrainItem *it, const char *what, double v, double lo, bool lo_open,
                     double hi, bool hi_open)
{
    if ((lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi))
        return true;
    if (hi < INFINITY)
        diag_error(it->value->loc, "%s must be in %s%g, %g%s, got %g", what, lo_open ? "(" : "[", lo,
                   hi, hi_open ? ")" : "]", v);
    else
        diag_error(it->value->loc, "%s must be %s %g, got %g", what, lo_open ? ">" : ">=", lo, v);
    return false;
}

/* The expression written for argument `arg` of a train setting, or NULL
 * when it was not given. */
static const Expr *given(const NamedSpec *ns, const Args *a, const char *arg)
{
    for (int i = 0; i < nspecs(ns->args); i++)
        if (strcmp(ns->args[i].name, arg) == 0)
            return a->e[i];
    return NULL;
}

/* "adam lr": an argument of a train setting, for messages. */
static const char *arg_name(Ctx *c, const NamedSpec *ns, const char *arg)
{
    return arena_printf(c->a, "%s %s", ns->name, arg);
}

/* A glob: '*' matches any run of characters (dots included). */
static bool glob_match(const char *pat, const char *s)
{
    const char *star = NULL, *resume = NULL;
    while (*s) {
        if (*pat == '*') {
            star = ++pat;
            resume = s;
        } else if (*pat == *s) {
            pat++;
            s++;
        } else if (star) {
            pat = star;
            s = ++resume;
        } else
            return false;
    }
    while (*pat == '*')
        pat++;
    return !*pat;
}

/* Does no_decay pattern x (a glob string, or the word `vectors`: rank <= 1)
 * match parameter p? */
static bool decay_pattern_matches(const Expr *x, const IrParam *p)
{
    return x->kind == EX_STR ? glob_match(x->name, p->name) : p->shape.rank <= 1;
}

/* no_decay = [PATTERN, ...]: the trainable parameters that match get weight
 * decay 0, like a torch parameter group with weight_decay 0. A pattern that
 * matches nothing is probably a typo: a warning. */
static void no_decay(Ctx *c, const Expr *list)
{
    for (int i = 0; i < list->nargs; i++) {
        const Expr *x = list->args[i];
        if (x->kind != EX_STR && !(x->kind == EX_NAME && strcmp(x->name, "vectors") == 0)) {
            if (x->kind == EX_NAME)
                diag_error(x->loc, "unknown no_decay pattern '%s': write a name pattern as a string, "
                           "e.g. \"*.bias\", or the word vectors (every parameter of rank <= 1)", x->name);
            else
                diag_error(x->loc, "no_decay lists name patterns, e.g. [\"*.bias\", vectors]");
            continue;
        }
        int matched = 0;
        for (int k = 0; k < c->g->nparams; k++) {
            IrParam *p = &c->g->params[k];
            if (p->trainable && decay_pattern_matches(x, p)) {
                p->no_decay = true;
                matched++;
            }
        }
        if (!matched)
            diag_warning(x->span, "no_decay pattern %s%s%s matches no trainable parameter",
                         x->kind == EX_STR ? "\"" : "", x->name, x->kind == EX_STR ? "\"" : "");
    }
}

static void tk_optimizer(Ctx *c, const TrainItem *it)
{
    Args a;
    const NamedSpec *o = named_value(c, it, optimizers, &a);
    if (!o)
        return;
    TrainCfg *t = &c->g->train;
    t->opt = (OptKind)o->kind;
    t->lr = a.v[0].r;
    in_range(it, arg_name(c, o, "lr"), t->lr, 0, true, INFINITY, false);
    if (t->opt == OPT_SGD) {
        t->momentum = a.v[1].r;
        t->nesterov = a.v[2].i;
        t->weight_decay = a.v[3].r;
        in_range(it, arg_name(c, o, "momentum"), t->momentum, 0, false, INFINITY, false);
        if (t->nesterov && t->momentum <= 0)
            diag_error(it->value->loc, "sgd nesterov = true needs momentum > 0");
        t->dampening = a.v[5].r;
        in_range(it, arg_name(c, o, "dampening"), t->dampening, 0, false, 1, false);
        if (t->nesterov && t->dampening != 0)
            diag_error(it->value->loc, "sgd nesterov = true needs dampening = 0 (as torch)");
    } else if (t->opt == OPT_RMSPROP) {
        t->alpha = a.v[1].r;
        t->eps = a.v[2].r;
        t->momentum = a.v[3].r;
        t->centered = a.v[4].i;
        t->weight_decay = a.v[5].r;
        in_range(it, arg_name(c, o, "alpha"), t->alpha, 0, false, 1, false);
        in_range(it, arg_name(c, o, "eps"), t->eps, 0, true, INFINITY, false);
        in_range(it, arg_name(c, o, "momentum"), t->momentum, 0, false, INFINITY, false);
    } else {
        t->beta1 = a.v[1].r;
        t->beta2 = a.v[2].r;
        t->eps = a.v[3].r;
        t->weight_decay = a.v[4].r;
        in_range(it, arg_name(c, o, "beta1"), t->beta1, 0, false, 1, true);
        in_range(it, arg_name(c, o, "beta2"), t->beta2, 0, false, 1, true);
        in_range(it, arg_name(c, o, "eps"), t->eps, 0, true, INFINITY, false);
    }
    in_range(it, arg_name(c, o, "weight_decay"), t->weight_decay, 0, false, INFINITY, false);
    const Expr *nd = given(o, &a, "no_decay");
    if (nd)
        no_decay(c, nd);
}

static void tk_precision(Ctx *c, const TrainItem *it)
{
    Args a;
    const NamedSpec *p = named_value(c, it, policies, &a);
    if (p) {
        c->g->train.policy = (Policy)p->kind;
        c->g->train.policy_set = true;
    }
}

static void tk_loss_scale(Ctx *c, const TrainItem *it)
{
    Args a;
    const NamedSpec *ls = named_value(c, it, loss_scales, &a);
    if (!ls)
        return;
    TrainCfg *t = &c->g->train;
    t->ls = (LossScaleKind)ls->kind;
    t->ls_set = true;
    if (t->ls == LS_STATIC) {
        t->ls_init = a.v[0].r;
        in_range(it, arg_name(c, ls, "v"), t->ls_init, 0, true, INFINITY, false);
    } else if (t->ls == LS_DYNAMIC) {
        t->ls_init = a.v[0].r;
        t->ls_growth = a.v[1].r;
        t->ls_backoff = a.v[2].r;
        t->ls_interval = a.v[3].i;
        in_range(it, arg_name(c, ls, "init"), t->ls_init, 1, false, INFINITY, false);
        in_range(it, arg_name(c, ls, "growth"), t->ls_growth, 1, true, INFINITY, false);
        in_range(it, arg_name(c, ls, "backoff"), t->ls_backoff, 0, true, 1, true);
        in_range(it, arg_name(c, ls, "interval"), (double)t->ls_interval, 1, false, INFINITY, false);
    }
}

/* warmup_style = "torch" (lr*k/W for k <= W) or "nanogpt" (lr*k/(W+1),
 * nanoGPT's get_lr); mp_optim.h's mp_sched_lr does the arithmetic. */
static void warmup_style(Ctx *c, const Expr *e)
{
    static const char *const styles[] = {[WARMUP_TORCH] = "torch", [WARMUP_NANOGPT] = "nanogpt"};
    for (int i = 0; i < 2; i++)
        if (strcmp(e->name, styles[i]) == 0) {
            c->g->train.warmup_style = (WarmupStyle)i;
            return;
        }
    const char *best = suggest(c, e->name, styles, 2);
    for (int i = 0; i < 2; i++)
        if (strcasecmp(e->name, styles[i]) == 0)
            best = styles[i];              /* "nanoGPT" */
    diag_error(e->loc, "unknown warmup_style \"%s\"%s: expected \"torch\" or \"nanogpt\"", e->name,
               best ? arena_printf(c->a, " (did you mean \"%s\"?)", best) : "");
}

static void tk_schedule(Ctx *c, const TrainItem *it)
{
    Args a;
    const NamedSpec *s = named_value(c, it, schedules, &a);
    if (!s)
        return;
    TrainCfg *t = &c->g->train;
    t->sched = (SchedKind)s->kind;
    t->warmup = s->kind == SCHED_CONSTANT ? 0 : (double)a.v[0].i;
    t->sched_min = s->kind == SCHED_COSINE ? a.v[1].r : 0;
    in_range(it, arg_name(c, s, "warmup"), t->warmup, 0, false, INFINITY, false);
    in_range(it, arg_name(c, s, "min"), t->sched_min, 0, false, INFINITY, false);
    const Expr *style = given(s, &a, "warmup_style");
    if (style)
        warmup_style(c, style);
}

static bool train_int(Ctx *c, const TrainItem *it, int64_t lo, int64_t *out)
{
    return get_int(c, it->value, eval(c, it->value), it->key, lo, out);
}

static void tk_clip(Ctx *c, const TrainItem *it)
{
    double v;
    if (get_real(c, it->value, eval(c, it->value), "clip_grad_norm", &v) &&
        in_range(it, "clip_grad_norm", v, 0, true, INFINITY, false))
        c->g->train.clip = v;
}

/* memory_budget = "6GiB": recompute.h */
static void tk_memory_budget(Ctx *c, const TrainItem *it)
{
    const Expr *e = it->value;
    if (e->kind != EX_STR || !recompute_parse_size(e->name, &c->g->train.memory_budget)) {
        diag_error(e->loc, "memory_budget must be a size as a string: bytes, or with kB, MB, GB, KiB, "
                   "MiB or GiB, e.g. memory_budget = \"6GiB\"");
        return;
    }
    c->g->train.memory_budget_loc = e->loc;
}

/* float32_matmul = "ieee" | "tf32" (PRECISION.md, TF32 for float32 products) */
static void tk_float32_matmul(Ctx *c, const TrainItem *it)
{
    const Expr *e = it->value;
    if (e->kind == EX_STR && strcmp(e->name, "ieee") == 0)
        c->g->train.tf32 = false;
    else if (e->kind == EX_STR && strcmp(e->name, "tf32") == 0)
        c->g->train.tf32 = true;
    else if (e->kind == EX_STR)
        diag_error(e->loc, "unknown float32_matmul \"%s\", expected \"ieee\" or \"tf32\"", e->name);
    else
        diag_error(e->loc, "float32_matmul must be the string \"ieee\" or \"tf32\", e.g. "
                   "float32_matmul = \"tf32\"");
}

static void tk_accumulate(Ctx *c, const TrainItem *it) { train_int(c, it, 1, &c->g->train.accumulate); }
static void tk_steps(Ctx *c, const TrainItem *it) { train_int(c, it, 1, &c->g->train.steps); }
static void tk_seed(Ctx *c, const TrainItem *it) { train_int(c, it, 0, &c->g->train.seed); }

/* fp16_ops / fp32_ops: a list of operation names as the plan shows them. */
static void op_list(Ctx *c, const TrainItem *it, const char ***out, int *n)
{
    const Expr *e = it->value;
    if (e->kind != EX_LIST) {
        diag_error(e->loc, "%s must be a list of operation names, e.g. [softmax, add]", it->key);
        return;
    }
    const char **names = arena_alloc(c->a, sizeof *names * (size_t)(e->nargs + 1));
    *n = 0;
    for (int i = 0; i < e->nargs; i++) {
        const Expr *x = e->args[i];
        if (x->kind != EX_NAME && x->kind != EX_STR) {
            diag_error(x->loc, "%s must list operation names, e.g. [softmax, add]", it->key);
            continue;
        }
        if (ops_lookup(x->name) < 0) {
            const char *cands[OP__COUNT];
            int nc = 0;
            for (int k = 0; k < OP__COUNT; k++)
                if (op_info[k].kind == OPK_FWD)
                    cands[nc++] = op_info[k].name;
            const char *best = suggest(c, x->name, cands, nc);
            if (best)
                diag_error(x->loc, "unknown operation '%s' in %s, did you mean '%s'?", x->name, it->key, best);
            else
                diag_error(x->loc, "unknown operation '%s' in %s (infix operators are named add, "
                           "sub, mul, div, neg and matmul)", x->name, it->key);
            continue;
        }
        names[(*n)++] = x->name;
    }
    *out = names;
}

/* fp8 = delayed(amax_history, margin) | current(margin): mixed_float8's
 * scales (prec.c, runtime/mp_fp8.h). */
static void tk_fp8(Ctx *c, const TrainItem *it)
{
    Args a;
    const NamedSpec *r = named_value(c, it, fp8_recipes, &a);
    if (!r)
        return;
    TrainCfg *t = &c->g->train;
    t->fp8 = (Fp8Recipe)r->kind;
    t->fp8_set = true;
    if (t->fp8 == FP8_DELAYED) {
        t->fp8_history = a.v[0].i;
        in_range(it, arg_name(c, r, "amax_history"), (double)t->fp8_history, 1, false, 1024, false);
    }
    t->fp8_margin = a.v[t->fp8 == FP8_DELAYED ? 1 : 0].i;
    in_range(it, arg_name(c, r, "margin"), (double)t->fp8_margin, 0, false, 32, false);
}

/* fp8_ops: products (linear, matmul) quantised whatever their operands. */
static void tk_fp8_ops(Ctx *c, const TrainItem *it)
{
    TrainCfg *t = &c->g->train;
    op_list(c, it, &t->fp8_ops, &t->nfp8_ops);
    for (int i = 0; i < t->nfp8_ops; i++)
        if (strcmp(t->fp8_ops[i], "linear") != 0 && strcmp(t->fp8_ops[i], "matmul") != 0)
            diag_error(it->value->args[i]->loc, "fp8_ops lists products, linear or matmul; "
                       "'%s' is not one", t->fp8_ops[i]);
}

static void tk_fp16(Ctx *c, const TrainItem *it) { op_list(c, it, &c->g->train.fp16_ops, &c->g->train.nfp16_ops); }
static void tk_fp32(Ctx *c, const TrainItem *it) { op_list(c, it, &c->g->train.fp32_ops, &c->g->train.nfp32_ops); }

/* minimize NAME: a float scalar value that depends on a trainable parameter. */
static void tk_minimize(Ctx *c, const TrainItem *it)
{
    const Expr *e = it->value;
    if (e->kind != EX_NAME) {
        diag_error(e->loc, "minimize needs the name of a scalar value, e.g. minimize loss");
        return;
    }
    Sym *s = find_local(c->top, e->name);
    if (!s) {
        eval_name(c, e);      /* reports it, with a suggestion */
        return;
    }
    if (s->v.k == V_ERR)
        return;
    if (s->kind == SYM_METRIC) {
        diag_error(e->loc, "'%s' is a metric, which is never differentiated: minimize a loss value",
                   e->name);
        return;
    }
    if (s->v.k != V_TENSOR || s->v.t->shape.rank != 0 || is_int_type(s->v.t->type)) {
        diag_error(e->loc, "minimize needs a float scalar, but '%s' is %s%s", e->name, describe(c, s->v),
                   s->v.k == V_TENSOR && s->v.t->shape.rank ? ": reduce it, e.g. mean(...)" : "");
        return;
    }
    c->g->loss = s->v.t;
}

typedef struct TrainKey {
    const char *key;
    void (*fn)(Ctx *c, const TrainItem *it);
} TrainKey;

static const TrainKey train_keys[] = {
    {"optimizer", tk_optimizer}, {"precision", tk_precision}, {"loss_scale", tk_loss_scale},
    {"lr_schedule", tk_schedule}, {"clip_grad_norm", tk_clip}, {"accumulate", tk_accumulate},
    {"fp16_ops", tk_fp16}, {"fp32_ops", tk_fp32}, {"steps", tk_steps}, {"seed", tk_seed},
    {"memory_budget", tk_memory_budget}, {"fp8", tk_fp8}, {"fp8_ops", tk_fp8_ops},
    {"float32_matmul", tk_float32_matmul},
    {"minimize", tk_minimize},   /* minimize last */
};
#define N_TRAIN_KEYS ((int)(sizeof train_keys / sizeof train_keys[0]))

static void train_item(Ctx *c, const TrainItem *it, const TrainItem **seen)
{
    const char *names[N_TRAIN_KEYS];
    for (int k = 0; k < N_TRAIN_KEYS; k++) {
        names[k] = train_keys[k].key;
        if (strcmp(it->key, names[k]) != 0)
            continue;
        if (seen[k]) {
            diag_error(it->loc, "'%s' is given twice in the train block", it->key);
            diag_note(seen[k]->loc, "first given here");
            return;
        }
        seen[k] = it;
        train_keys[k].fn(c, it);
        return;
    }
    const char *best = suggest(c, it->key, names, N_TRAIN_KEYS);
    if (best)
        diag_error(it->loc, "unknown train setting '%s', did you mean '%s'?", it->key, best);
    else
        diag_error(it->loc, "unknown train setting '%s'", it->key);
}

/* An op in fp8_ops and in fp16_ops or fp32_ops contradicts itself (prec.c
 * warns when fp8 settings meet another policy: --precision may change it). */
static void check_fp8_ops(const TrainCfg *t, const TrainItem *fp8_ops)
{
    if (fp8_ops)
        for (int i = 0; i < t->nfp8_ops; i++) {
            bool in16 = false, in32 = false;
            for (int j = 0; j < t->nfp16_ops; j++)
                in16 |= strcmp(t->fp8_ops[i], t->fp16_ops[j]) == 0;
            for (int j = 0; j < t->nfp32_ops; j++)
                in32 |= strcmp(t->fp8_ops[i], t->fp32_ops[j]) == 0;
            if (in16 || in32)
                diag_error(fp8_ops->value->loc, "'%s' is in both fp8_ops and %s", t->fp8_ops[i],
                           in16 ? "fp16_ops" : "fp32_ops");
        }
}

/* Ops named in both fp16_ops and fp32_ops contradict each other. */
static void check_op_lists(const TrainCfg *t, const TrainItem *fp32)
{
    if (!fp32)
        return;
    SrcLoc at = fp32->value->loc;
    for (int i = 0; i < t->nfp16_ops; i++)
        for (int j = 0; j < t->nfp32_ops; j++)
            if (strcmp(t->fp16_ops[i], t->fp32_ops[j]) == 0)
                diag_error(at, "'%s' is in both fp16_ops and fp32_ops", t->fp16_ops[i]);
}

/* Schedules that cannot do what they look like they do: warnings, since the
 * program still runs (--lr and --steps may change the picture). */
static void check_schedule(const TrainCfg *t, const TrainItem *sched, const TrainItem *steps)
{
    if (!sched || t->sched == SCHED_CONSTANT || !(t->lr > 0) || t->warmup < 0 || t->sched_min < 0)
        return;                 /* nothing set, or values already reported as errors */
    SrcLoc at = sched->value->loc;
    if (t->sched == SCHED_COSINE && t->sched_min >= t->lr)
        diag_warning(at, "cosine's min = %g is not below the optimizer's lr = %g: the learning "
                     "rate %s instead of decaying", t->sched_min, t->lr,
                     t->sched_min > t->lr ? "rises" : "stays put");
    if (t->warmup >= (double)t->steps) {
        diag_warning(at, "warmup = %g is not below steps = %lld: the whole run is warmup, no "
                     "step is left for the %s decay", t->warmup, (long long)t->steps,
                     t->sched == SCHED_COSINE ? "cosine" : "linear");
        if (steps)
            diag_note(steps->loc, "steps given here");
    }
}

/* True when the loss depends on some trainable parameter. */
static bool loss_trains_something(IrGraph *g)
{
    bool *live = arena_alloc(g->arena, (size_t)g->nnodes + 1);
    live[g->loss->id] = true;
    for (int i = g->loss->id; i >= 0; i--) {
        IrNode *n = g->nodes[i];
        if (!live[i])
            continue;
        if (n->op == OP_PARAM && g->params[n->ia[0]].trainable)
            return true;
        for (int k = 0; k < n->nin; k++)
            live[n->in[k]->id] = true;
    }
    return false;
}

static void train_block(Ctx *c, const Stmt *s)
{
    TrainCfg *t = &c->g->train;
    if (!s) {
        diag_error(c->g->model_loc, "the model has no train block: add train { optimizer = "
                   "adam(lr = 1e-3)  minimize LOSS }");
        return;
    }
    t->loc = s->loc;
    const TrainItem *seen[N_TRAIN_KEYS] = {0};
    for (int i = 0; i < s->nitems && !diag_too_many(); i++)
        train_item(c, &s->items[i], seen);
    if (!seen[0])
        diag_error(s->loc, "the train block needs an optimizer, e.g. optimizer = adam(lr = 1e-3)");
    if (!seen[N_TRAIN_KEYS - 1])
        diag_error(s->loc, "the train block needs 'minimize NAME' (the scalar loss to minimise)");
    check_op_lists(t, seen[7]);   /* fp32_ops */
    check_fp8_ops(t, seen[12]);   /* fp8_ops */
    check_schedule(t, seen[3], seen[8]);   /* lr_schedule, steps */
    if (c->g->loss && !loss_trains_something(c->g))
        diag_error(seen[N_TRAIN_KEYS - 1]->value->loc, "'%s' does not depend on any trainable "
                   "parameter: nothing to train", seen[N_TRAIN_KEYS - 1]->value->name);
}

/* Settings that depend on others: the policy override, then the loss
 * scale's default (dynamic for mixed_float16, none otherwise). */
static void train_defaults(TrainCfg *t, int policy_override)
{
    if (policy_override >= 0) {
        t->policy = (Policy)policy_override;
        t->policy_set = true;
    }
    if (!t->ls_set)
        t->ls = t->policy == POLICY_MIXED_F16 ? LS_DYNAMIC : LS_NONE;
}

/* ---- names of saved tensors --------------------------------------------------------------- */

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const IrParam *const *)a)->name, (*(const IrParam *const *)b)->name);
}

/* A saved tensor's name may not also be the module path of another
 * ("h" and "h.weight"): no torch module can hold both, and the checkpoint
 * would not load into one. Sorted by name, the tensors under "h." follow
 * "h" directly (no character of a name sorts below '.'). */
static void check_name_clashes(Ctx *c)
{
    int n = c->g->nparams;
    const IrParam **ps = arena_alloc(c->a, sizeof *ps * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        ps[i] = &c->g->params[i];
    qsort(ps, (size_t)n, sizeof *ps, by_name);
    for (int i = 0; i + 1 < n; i++) {
        size_t len = strlen(ps[i]->name);
        if (strncmp(ps[i]->name, ps[i + 1]->name, len) != 0 || ps[i + 1]->name[len] != '.')
            continue;
        const IrParam *later = ps[i]->node->id > ps[i + 1]->node->id ? ps[i] : ps[i + 1];
        const IrParam *first = later == ps[i] ? ps[i + 1] : ps[i];
        diag_error(later->loc, "'%s' would be both a tensor and the module holding '%s': give one "
                   "of them another name", ps[i]->name, ps[i + 1]->name);
        diag_note(first->loc, "'%s' is declared here", first->name);
    }
}

/* ---- entry ----------------------------------------------------------------------------------- */

static bool model_header(Ctx *c)
{
    const Ast *ast = c->ast;
    SrcLoc start = {ast->file, 1, 1, 1};
    for (int i = 0; i < ast->nstmts; i++)
        if (ast->stmts[i]->kind == ST_MODEL) {   /* st_model() says if it is not first */
            c->g->model = ast->stmts[i]->name;
            c->g->model_loc = ast->stmts[i]->name_loc;
            return true;
        }
    diag_error(ast->nstmts ? ast->stmts[0]->loc : start,
               "a model file starts with 'model NAME', e.g. model mnist_mlp");
    c->g->model = "model";
    c->g->model_loc = ast->nstmts ? ast->stmts[0]->loc : start;
    return false;
}

/* A transpose of the last two axes (the others in place) read by a product
 * becomes the product's transpose flag (ops.def MATMUL: ia[0], ia[1]): the
 * product reads the operand as it is stored, and its gradients are made
 * from the flags (autodiff.c grad_MATMUL), so neither pass copies it. GPT-2's
 * tied lm_head `x @ transpose(wte, [1, 0])` is the case: the table is read
 * in place forward, and its gradient is one matmul_tn, not the transpose
 * of one. A transposed a needs b of its rank (the gradient's rule), and a
 * transpose under another precision override than the product's keeps its
 * own rounding. A transpose that nothing else reads and no name keeps is
 * then dropped. */
static bool swaps_last_two(const IrNode *t)
{
    int r = t->shape.rank;
    if (t->op != OP_TRANSPOSE || r < 2 || t->ia[r - 1] != r - 2 || t->ia[r - 2] != r - 1)
        return false;
    for (int i = 0; i < r - 2; i++)
        if (t->ia[i] != i)
            return false;
    return true;
}

/* Which nodes something reads: an input of a node, the loss, a metric. */
static bool *reads(IrGraph *g)
{
    bool *read = arena_alloc(g->arena, sizeof *read * (size_t)(g->nnodes + 1));
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; k < g->nodes[i]->nin; k++)
            read[g->nodes[i]->in[k]->id] = true;
    for (int m = 0; m < g->nmetrics; m++)
        read[g->metrics[m].node->id] = true;
    if (g->loss)
        read[g->loss->id] = true;
    return read;
}

/* Whether n is the value of its name that --predict --output reads: the
 * first node that carries it, parameters, inputs, constants and a cast
 * named as what it casts aside (emit_common.c find_values). */
static bool is_named_value(const IrGraph *g, const IrNode *n)
{
    if (!n->name)
        return false;
    for (int i = 0; i < n->id; i++) {
        const IrNode *m = g->nodes[i];
        bool copy = m->op == OP_CAST && m->in[0]->name && !strcmp(m->in[0]->name, m->name);
        if (m->name && !strcmp(m->name, n->name) && m->op != OP_PARAM && m->op != OP_INPUT &&
            m->op != OP_CONST && !copy)
            return false;
    }
    return true;
}

/* Drops the transposes nothing reads any more, but those that are their
 * name's value. */
static void drop_unread_transposes(IrGraph *g)
{
    bool *read = reads(g);
    int kept = 0;
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->op != OP_TRANSPOSE || read[i] || is_named_value(g, n))
            g->nodes[kept++] = n;
    }
    g->nnodes = kept;
    ir_renumber(g);
}

static void fold_transposes(IrGraph *g)
{
    bool folded = false;
    ir_renumber(g);
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->op != OP_MATMUL)
            continue;
        for (int k = 0; k < 2; k++) {
            IrNode *t = n->in[k];
            if (!swaps_last_two(t) || t->override != n->override ||
                (k == 0 && t->shape.rank != n->in[1]->shape.rank))
                continue;
            n->in[k] = t->in[0];
            n->ia[k] = !n->ia[k];
            folded = true;
        }
    }
    if (folded)
        drop_unread_transposes(g);
}

/* The transposes [0, 2, 1, 3] around an attention, which make the model's
 * [B, T, H, D] the op's [B, H, T, D] and back, become the op's layouts
 * (ops.def ATTENTION ia[3], ia[4]): it reads q, k and v and writes y where
 * they lie, through strides (runtime MpAttnLays), and its gradient comes
 * out in the same layout (ir.h IrAttn's glay: for a chunk of one [B, T,
 * 3 H D] product into q, k, v, the chunk's gradient itself: autodiff's
 * concat of the three becomes a reshape). On both targets, no copy moves
 * q, k, v, y, dy or their gradients around the op.
 *   q, k, v: all three such transposes under the op's precision override,
 *     or none is folded.
 *   y: when the op's only reader is such a transpose. y keeps the value of
 *     its name for --predict --output: the op takes the transpose's name
 *     where only that is a value; where the op's own is, --predict writes
 *     it as [B, H, T, D] (ia[5]); where both are, y is not folded. */
static bool swaps_1_2(const IrNode *t, const IrNode *n)
{
    return t->op == OP_TRANSPOSE && t->shape.rank == 4 && t->ia[0] == 0 && t->ia[1] == 2 &&
           t->ia[2] == 1 && t->ia[3] == 3 && t->override == n->override;
}

static void fold_attention_layouts(IrGraph *g)
{
    bool folded = false;
    ir_renumber(g);
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->op != OP_ATTENTION)
            continue;
        if (swaps_1_2(n->in[0], n) && swaps_1_2(n->in[1], n) && swaps_1_2(n->in[2], n)) {
            for (int k = 0; k < 3; k++)
                n->in[k] = n->in[k]->in[0];
            n->ia[3] = 1;
            folded = true;
        }
        IrNode *t = NULL;
        int readers = 0;
        for (int j = i + 1; j < g->nnodes; j++)
            for (int k = 0; k < g->nodes[j]->nin; k++)
                if (g->nodes[j]->in[k] == n)
                    readers++, t = g->nodes[j];
        bool kept = readers != 1 || g->loss == n || g->loss == t;
        for (int m = 0; m < g->nmetrics; m++)
            kept |= g->metrics[m].node == n || g->metrics[m].node == t;
        if (kept || !swaps_1_2(t, n))
            continue;
        bool nv = is_named_value(g, n), tv = is_named_value(g, t);
        if (nv && tv)
            continue;
        n->ia[4] = 1;
        n->ia[5] = nv;
        n->shape = t->shape;
        if (tv)
            n->name = t->name;
        for (int j = t->id + 1; j < g->nnodes; j++)
            for (int k = 0; k < g->nodes[j]->nin; k++)
                if (g->nodes[j]->in[k] == t)
                    g->nodes[j]->in[k] = n;
        t->name = NULL;   /* unread now: dropped below */
        folded = true;
    }
    if (folded)
        drop_unread_transposes(g);
}

IrGraph *sema_lower(Arena *a, const Ast *ast, int policy_override)
{
    int errs = diag_error_count();
    Scope top = {0};
    Ctx c = {.a = a, .g = ir_new(a), .ast = ast, .top = &top, .scope = &top, .prefix = "",
             .repeat_base = INT_MAX};
    model_header(&c);
    sema_collect_blocks(&c);
    run_body(&c, ast->stmts, ast->nstmts);
    if (!c.stop && !diag_too_many())
        check_name_clashes(&c);
    if (!c.stop && !diag_too_many()) {
        if (c.g->ninputs == 0)
            diag_error(c.g->model_loc, "the model declares no input: add one, e.g. input image: "
                       "u8[B, 784]");
        train_block(&c, c.train);
    }
    train_defaults(&c.g->train, policy_override);
    if (diag_error_count() > errs)
        return NULL;
    fold_transposes(c.g);
    fold_attention_layouts(c.g);
    return c.g;
}

/* ---- what sema_blocks.c and sema_const.c use (sema_int.h) ------------------------------------ */

Val sema_eval(Ctx *c, const Expr *e) { return eval(c, e); }
const char *sema_describe(Ctx *c, Val v) { return describe(c, v); }
const char *sema_fmt_real(Ctx *c, double r) { return fmt_real(c, r); }
Sym *sema_find_local(Scope *sc, const char *name) { return find_local(sc, name); }
Sym *sema_bind(Ctx *c, const char *name, SymKind kind, Val v, SrcLoc loc) { return bind(c, name, kind, v, loc); }
bool sema_may_define(Ctx *c, const char *name, SymKind kind, SrcLoc at) { return may_define(c, name, kind, at); }
void sema_run_body(Ctx *c, Stmt *const *body, int n) { run_body(c, body, n); }
const struct Builtin *sema_find_builtin(const char *name) { return find_builtin(name); }
bool sema_builtin_layer(const struct Builtin *b) { return b->layer; }

bool sema_get_int(Ctx *c, const Expr *e, Val v, const char *what, int64_t lo, int64_t *out)
{
    return get_int(c, e, v, what, lo, out);
}

bool sema_bind_args(Ctx *c, const Expr *callx, const char *fn, const ArgSpec *spec, Args *a)
{
    return bind_args(c, callx, fn, spec, a);
}

const char *sema_signature(Ctx *c, const char *fn, const ArgSpec *spec) { return signature(c, fn, spec); }

const char *sema_layer_name(Ctx *c, const Expr *callx, const Expr *name_arg)
{
    return layer_name(c, callx, name_arg);
}

Val sema_statement_value(Ctx *c, const Stmt *s, const char *target, DType override)
{
    return statement_value(c, s, target, override);
}

const char *sema_builtin_name(int i) { return i >= 0 && i < N_BUILTINS ? builtins[i].name : NULL; }
