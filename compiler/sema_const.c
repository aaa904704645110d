/* sema_const.c - the functions of constant expressions (sema_int.h).
 *
 * `const HIDDEN = 4 * D * 2 // 3`, `const LOG_T = log(10000)`: log, exp,
 * sqrt, floor, ceil, min and max of constants fold at compile time, as
 * Python's math module computes them: floor and ceil give integers, min
 * and max keep an integer when every argument is one, the others give
 * reals. A call folds only when every argument is a constant expression
 * (decided without evaluating it, so that nothing is lowered twice);
 * otherwise it is an operation on tensors (log(x), max(x, axis)), and
 * floor and ceil, which have none, say that they take constants. */
#include "sema_int.h"

#include <math.h>
#include <string.h>

typedef enum { CF_LOG, CF_EXP, CF_SQRT, CF_FLOOR, CF_CEIL, CF_MIN, CF_MAX } ConstFn;

static const struct {
    const char *name;
    ConstFn fn;
    int nargs;              /* -1: two or more */
    bool tensor_op;         /* also an operation on tensors */
} const_fns[] = {
    {"log", CF_LOG, 1, true},     {"exp", CF_EXP, 1, true},   {"sqrt", CF_SQRT, 1, true},
    {"floor", CF_FLOOR, 1, false}, {"ceil", CF_CEIL, 1, false},
    {"min", CF_MIN, -1, true},    {"max", CF_MAX, -1, true},
};
#define N_CONST_FNS ((int)(sizeof const_fns / sizeof const_fns[0]))

static int const_fn(const char *name)
{
    for (int i = 0; i < N_CONST_FNS; i++)
        if (strcmp(const_fns[i].name, name) == 0)
            return i;
    return -1;
}

/* Is e made of numbers, constants and these functions only? */
static bool is_const_expr(Ctx *c, const Expr *e)
{
    switch (e->kind) {
    case EX_NUM:
        return true;
    case EX_NAME: {
        Sym *s = sema_find_local(c->scope, e->name);
        if (!s && c->scope->parent)
            s = sema_find_local(c->top, e->name);
        return s && (s->v.k == V_INT || s->v.k == V_REAL);
    }
    case EX_BINARY:
        return e->op != '@' && is_const_expr(c, e->lhs) && is_const_expr(c, e->rhs);
    case EX_NEG:
        return is_const_expr(c, e->lhs);
    case EX_CALL:
        if (const_fn(e->name) < 0 || sema_find_block(c, e->name) || e->nkwargs)
            return false;
        for (int i = 0; i < e->nargs; i++)
            if (!is_const_expr(c, e->args[i]))
                return false;
        return true;
    default:
        return false;
    }
}

/* An integer from floor / ceil of r, if it fits. */
static Val to_int(const Expr *e, double r)
{
    if (!(r >= -9.2e18 && r <= 9.2e18)) {
        diag_error(e->loc, "%s(...) = %g does not fit in a 64-bit integer", e->name, r);
        return verr;
    }
    return vint((int64_t)r);
}

static Val fold_call(Ctx *c, const Expr *e, ConstFn fn, const Val *v)
{
    double x = v[0].r;
    switch (fn) {
    case CF_LOG:
    case CF_SQRT:
        if (x < 0 || (fn == CF_LOG && x == 0)) {
            diag_error(e->loc, "%s(%s) is not defined (math domain error)", e->name,
                       sema_describe(c, v[0]));
            return verr;
        }
        return vreal(fn == CF_LOG ? log(x) : sqrt(x));
    case CF_EXP:
        if (!isfinite(exp(x))) {
            diag_error(e->loc, "exp(%s) overflows (the result is not a finite number)",
                       sema_describe(c, v[0]));
            return verr;
        }
        return vreal(exp(x));
    case CF_FLOOR:
        return v[0].k == V_INT ? v[0] : to_int(e, floor(x));
    case CF_CEIL:
        return v[0].k == V_INT ? v[0] : to_int(e, ceil(x));
    case CF_MIN:
    case CF_MAX: {
        Val best = v[0];        /* the first of equal ones, as Python's */
        for (int i = 1; i < e->nargs; i++)
            if (fn == CF_MIN ? v[i].r < best.r : v[i].r > best.r)
                best = v[i];
        return best;
    }
    }
    return verr;
}

bool sema_const_call(Ctx *c, const Expr *e, Val *out)
{
    int f = const_fn(e->name);
    if (f < 0)
        return false;
    if (!is_const_expr(c, e)) {
        if (const_fns[f].tensor_op)
            return false;
        diag_error(e->loc, "%s works on constants only (a number or a const), e.g. %s(D / 3)",
                   e->name, e->name);
        *out = verr;
        return true;
    }
    int want = const_fns[f].nargs;
    if (want > 0 ? e->nargs != want : e->nargs < 2) {
        diag_error(e->loc, "%s of constants takes %s, got %d", e->name,
                   want == 1 ? "one number" : "two or more numbers", e->nargs);
        *out = verr;
        return true;
    }
    Val v[64];
    if (e->nargs > 64) {
        diag_error(e->loc, "%s takes at most 64 numbers, got %d", e->name, e->nargs);
        *out = verr;
        return true;
    }
    for (int i = 0; i < e->nargs; i++) {
        v[i] = sema_eval(c, e->args[i]);
        if (v[i].k == V_ERR) {
            *out = verr;
            return true;
        }
    }
    *out = fold_call(c, e, const_fns[f].fn, v);
    return true;
}
