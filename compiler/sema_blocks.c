/* sema_blocks.c - blocks, tuple assignments and `for` loops (sema_int.h).
 *
 * A block is expanded at each call: a fresh scope holding the arguments,
 * its parameters named under the call's name ("enc." for `enc(x)` in
 * `h = enc(x)`), or under no name level with `name = ""`. A block may
 * have the name of a built-in operation: it is then used at every call of
 * that name (noted once, at the block). `return mu, logvar` gives several
 * values, bound only by a tuple assignment of as many names. Parameters
 * may have defaults; a string or a list argument is passed on as written.
 *
 * The prelude (compiler/prelude.mp, embedded) is parsed first: its blocks
 * are operations written in the language, shadowed by a model's block of
 * the same name; an expansion called from the model is put at the call
 * (prelude_call: messages, locations, unnamed temporaries).
 *
 * `for i in A .. B { ... }` unrolls its body with i a constant; it adds no
 * name level, so a layer declared in every iteration under one name is one
 * set of parameters (sema_shared_param), its gradient the sum over the
 * iterations, as a recurrent cell's.
 *
 * Invariants: blocks are collected and checked for cycles before any
 * expansion; a multi-value block is expanded only under the tuple
 * assignment that binds its values (c->unpack), which leaves them in
 * c->parts. */
#include "sema_int.h"

#include <limits.h>
#include <string.h>

const Block *sema_find_block(Ctx *c, const char *name)
{
    for (int i = 0; i < c->nblocks; i++)
        if (strcmp(c->blocks[i].s->name, name) == 0)
            return &c->blocks[i];
    return NULL;
}

/* What a block call changes in the context, restored when it returns. */
typedef struct Frame {
    Scope *scope;
    const char *prefix, *target;
    bool target_taken, in_return, returned;
    Val ret;
    IrNode **rets;
    int nrets, iter, repeat_base;
} Frame;

static Frame enter(Ctx *c)
{
    Frame f = {c->scope, c->prefix, c->target, c->target_taken, c->in_return, c->returned,
               c->ret, c->rets, c->nrets, c->iter, c->repeat_base};
    c->depth++;
    c->ret = vnone;
    c->rets = NULL;
    c->nrets = 0;
    c->returned = false;
    c->iter = 0;
    c->repeat_base = INT_MAX;
    return f;
}

static void leave(Ctx *c, const Frame *f)
{
    c->depth--;
    c->scope = f->scope;
    c->prefix = f->prefix;
    c->target = f->target;
    c->target_taken = f->target_taken;
    c->in_return = f->in_return;
    c->returned = f->returned;
    c->ret = f->ret;
    c->rets = f->rets;
    c->nrets = f->nrets;
    c->iter = f->iter;
    c->repeat_base = f->repeat_base;
}

/* A block of several values is called only as a tuple assignment's value,
 * with as many names. */
static bool values_fit(Ctx *c, const Expr *e, const Block *b)
{
    const char *name = b->s->name;
    if (b->nrets > 1 && c->unpack != e) {
        diag_error(e->loc, "block '%s' returns %d values: bind them with a tuple assignment, "
                   "e.g. 'a, b = %s(...)'", name, b->nrets, name);
        return false;
    }
    if (c->unpack == e && b->nrets != c->nparts) {
        diag_error(e->loc, "block '%s' returns %d value%s, but the tuple assignment has %d names",
                   name, b->nrets, b->nrets == 1 ? "" : "s", c->nparts);
        diag_note(b->s->body[b->s->nbody - 1]->loc, "the block returns here");
        return false;
    }
    return true;
}

static Val expand(Ctx *c, const Expr *e, Block *b, const Args *a);

/* A prelude block called from the user's model: its nodes and messages
 * are put at the user's call (file:line:col), its temporaries are unnamed
 * (the plan shows them as "[softplus]"), so nothing stores them and the
 * fusion pass sees one chain. */
static Val prelude_call(Ctx *c, const Expr *e, Block *b, const Args *a)
{
    int first = c->g->nnodes;
    const char *what = arena_printf(c->a, "in '%s', a block of the prelude", b->s->name);
    c->prelude_call = e;
    c->prelude_errs = diag_error_count();
    diag_redirect(c->prelude, e->loc, what);
    Val r = expand(c, e, b, a);
    diag_redirect(NULL, e->loc, NULL);
    c->prelude_call = NULL;
    for (int i = first; i < c->g->nnodes; i++) {
        IrNode *n = c->g->nodes[i];
        if (n->loc.file != c->prelude)
            continue;          /* an argument's own node, made at the user's call */
        n->loc = e->loc;
        n->name = NULL;
        n->prelude = b->s->name;
    }
    return r;
}

/* Expands block b at the call e: a fresh scope holding the arguments, the
 * parameters named under the call's name (none with name = ""). */
Val sema_call_block(Ctx *c, const Expr *e, Block *b)
{
    const Stmt *bs = b->s;
    if (b->bad || !values_fit(c, e, b))
        return verr;
    if (c->depth >= SEMA_MAX_DEPTH) {
        diag_error(e->loc, "blocks are nested more than %d calls deep", SEMA_MAX_DEPTH);
        return verr;
    }
    ArgSpec spec[MAX_ARGS + 1] = {{0}};
    if (bs->nparams >= MAX_ARGS) {
        diag_error(bs->loc, "block '%s' has %d parameters, at most %d are allowed", bs->name,
                   bs->nparams, MAX_ARGS - 1);
        b->bad = true;
        return verr;
    }
    for (int i = 0; i < bs->nparams; i++)   /* a default is filled in below */
        spec[i] = (ArgSpec){bs->params[i], A_VALUE, bs->param_defs[i] ? ARG_ABSENT : ARG_REQ, 0};
    if (e->nargs > bs->nparams) {   /* `name` is only ever a keyword */
        const char *sig = sema_signature(c, bs->name, spec);
        diag_error(e->args[bs->nparams]->loc, "block %s takes %d argument%s, got %d", sig,
                   bs->nparams, bs->nparams == 1 ? "" : "s", e->nargs);
        return verr;
    }
    spec[bs->nparams] = (ArgSpec){"name", A_STR, ARG_HIDDEN, 0};
    Args a;
    if (!sema_bind_args(c, e, bs->name, spec, &a))
        return verr;
    for (int i = 0; i < bs->nparams; i++)
        if (!a.e[i]) {
            a.e[i] = bs->param_defs[i];
            a.v[i] = sema_block_arg(c, a.e[i]);
            if (a.v[i].k == V_ERR)
                return verr;
        }
    if (b->prelude && !c->prelude_call)
        return prelude_call(c, e, b, &a);
    return expand(c, e, b, &a);
}

/* The body of block b at the call e, its arguments bound in a. */
static Val expand(Ctx *c, const Expr *e, Block *b, const Args *args)
{
    const Stmt *bs = b->s;
    Args a = *args;
    const Expr *name_arg = a.e[bs->nparams];
    bool flat = name_arg && !name_arg->name[0];      /* name = "": no name level */
    if (name_arg && !flat && !b->has_params) {
        diag_error(name_arg->loc, "block '%s' declares no parameters: name = \"...\" names nothing",
                   bs->name);
        return verr;
    }
    const char *layer = b->has_params && !flat ? sema_layer_name(c, e, name_arg) : "";
    if (!layer)
        return verr;

    Frame saved = enter(c);
    Scope *sc = &c->frames[c->depth];
    *sc = (Scope){sc->syms, 0, sc->cap, b->prelude ? NULL : c->top, b};  /* the prelude sees
                                                                  none of the model's names */
    c->scope = sc;
    if (*layer)
        c->prefix = arena_printf(c->a, "%s%s.", c->prefix, layer);
    for (int i = 0; i < bs->nparams; i++)
        sema_bind(c, bs->params[i], SYM_VALUE, a.v[i], bs->param_locs[i]);
    int errs = diag_error_count();
    ir_scope_enter(c->g, SC_BLOCK, *layer ? arena_printf(c->a, "%.*s", (int)strlen(c->prefix) - 1,
                   c->prefix) : bs->name, bs->name, 0, 0);
    sema_run_body(c, bs->body, bs->nbody);
    ir_scope_leave(c->g);
    Val r = c->ret;
    if (diag_error_count() > errs)
        b->bad = true;             /* one report per mistake, not per call */
    else if (b->nrets > 1 && c->nrets == b->nrets)
        memcpy(c->parts, c->rets, sizeof *c->parts * (size_t)b->nrets);
    leave(c, &saved);
    if (r.k == V_NONE) {       /* a bad block was reported where it went wrong */
        if (!b->bad)
            diag_error(e->loc, "block '%s' returns no value", bs->name);
        return verr;
    }
    return r;
}
/* a, b, c = chunk(x, 3) or = f(x) where block f returns three values:
 * each name bound to its part. Parts without a name of their own (chunk's)
 * are named after the targets. */
void sema_st_unpack(Ctx *c, const Stmt *s)
{
    const Expr *v = s->value;
    bool block = v->kind == EX_CALL && sema_find_block(c, v->name);
    if (!block && (v->kind != EX_CALL ||
                   (strcmp(v->name, "chunk") != 0 && strcmp(v->name, "topk") != 0 &&
                    strcmp(v->name, "gru") != 0 && strcmp(v->name, "lstm") != 0))) {
        diag_error(v->loc, "a tuple assignment needs chunk(x, n), topk, gru, lstm or a block that "
                   "returns several values; this expression makes one");
        return;
    }
    IrNode *parts[64];
    if (s->nparams > (int)(sizeof parts / sizeof parts[0])) {
        diag_error(s->loc, "a tuple assignment binds at most %d names, got %d",
                   (int)(sizeof parts / sizeof parts[0]), s->nparams);
        return;
    }
    const Expr *outer = c->unpack;     /* a block called in an outer chunk's arguments */
    IrNode **outer_parts = c->parts;
    int outer_n = c->nparts;
    c->unpack = v;
    c->parts = parts;
    c->nparts = s->nparams;
    Val r = sema_statement_value(c, s, NULL, DT_NONE);
    c->unpack = outer;
    c->parts = outer_parts;
    c->nparts = outer_n;
    for (int i = 0; i < s->nparams; i++) {
        Val p = r.k == V_TENSOR ? vtensor(parts[i]) : verr;
        if (p.k == V_TENSOR && !p.t->name)
            p.t->name = arena_printf(c->a, "%s%s", c->prefix, s->params[i]);
        if (sema_may_define(c, s->params[i], SYM_VALUE, s->param_locs[i]))
            sema_bind(c, s->params[i], SYM_VALUE, p, s->param_locs[i]);
    }
}

void sema_st_block(Ctx *c, const Stmt *s)
{
    if (c->nest != 1)
        diag_error(s->loc, "block '%s' must be defined at the top level", s->name);
}

/* return v, or return a, b, ...: several values are tensors (a tuple
 * assignment binds them), left in c->rets. */
void sema_st_return(Ctx *c, const Stmt *s)
{
    if (c->scope == c->top) {
        diag_error(s->loc, "'return' outside a block");
        return;
    }
    c->returned = true;
    if (s->nvalues < 2) {
        c->ret = sema_statement_value(c, s, NULL, DT_NONE);
        return;
    }
    c->rets = arena_alloc(c->a, sizeof *c->rets * (size_t)s->nvalues);
    for (int i = 0; i < s->nvalues; i++) {
        Stmt one = *s;
        one.value = s->values[i];
        Val v = sema_statement_value(c, &one, NULL, DT_NONE);
        if (v.k != V_TENSOR && v.k != V_ERR)
            diag_error(s->values[i]->loc, "the values of 'return a, b' must be tensors, got %s",
                       sema_describe(c, v));
        if (v.k != V_TENSOR) {
            c->ret = verr;
            return;
        }
        c->rets[i] = v.t;
    }
    c->nrets = s->nvalues;
    c->ret = vtensor(c->rets[0]);
}

/* ---- blocks: collected first, checked for cycles ------------------------------------------------ */

static bool expr_has_params(Ctx *c, const Expr *e, Block *from);

/* Does the body declare parameters (directly or through calls)? Reports a
 * block that calls itself, with the cycle, and marks it bad. */
static bool body_has_params(Ctx *c, Stmt *const *body, int n, Block *from)
{
    bool has = false;
    for (int i = 0; i < n; i++) {
        const Stmt *s = body[i];
        has |= s->kind == ST_PARAM || s->kind == ST_BUFFER;
        if (s->value)
            has |= expr_has_params(c, s->value, from);
        for (int v = 1; v < s->nvalues; v++)
            has |= expr_has_params(c, s->values[v], from);
        for (int d = 0; d < s->ndims; d++)
            has |= expr_has_params(c, s->dims[d], from);
        if (s->nbody)
            has |= body_has_params(c, s->body, s->nbody, from);
    }
    return has;
}

static void visit_block(Ctx *c, Block *b);

static bool expr_has_params(Ctx *c, const Expr *e, Block *from)
{
    bool has = false;
    if (e->kind == EX_CALL) {
        const struct Builtin *bi = sema_find_builtin(e->name);
        Block *callee = (Block *)sema_find_block(c, e->name);
        has = !callee && bi && sema_builtin_layer(bi);
        if (callee && callee->state == 1) {
            /* the cycle is the visit path from callee on: show it */
            int i = c->npath - 1;
            while (c->path[i] != callee)
                i--;
            const char *cycle = callee->s->name;
            for (int k = i + 1; k < c->npath; k++)
                cycle = arena_printf(c->a, "%s -> %s", cycle, c->path[k]->s->name);
            diag_error(e->loc, "block '%s' calls itself (%s -> %s): a block cannot call itself, "
                       "directly or not", callee->s->name, cycle, callee->s->name);
            for (; i < c->npath; i++)
                c->path[i]->bad = true;
        } else if (callee) {
            visit_block(c, callee);
            has |= callee->has_params;
            from->bad |= callee->bad;
        }
    }
    if (e->lhs)
        has |= expr_has_params(c, e->lhs, from);
    if (e->rhs)
        has |= expr_has_params(c, e->rhs, from);
    for (int i = 0; i < e->nargs; i++)
        has |= expr_has_params(c, e->args[i], from);
    for (int i = 0; i < e->nkwargs; i++)
        has |= expr_has_params(c, e->kwargs[i].value, from);
    return has;
}

static void visit_block(Ctx *c, Block *b)
{
    if (b->state)
        return;
    b->state = 1;
    c->path[c->npath++] = b;
    b->has_params = body_has_params(c, b->s->body, b->s->nbody, b);
    c->npath--;
    b->state = 2;
}

/* 'return' is the last statement of a block's own body, nowhere else. */
static bool check_returns(Stmt *const *body, int n, bool block_body)
{
    bool ok = true;
    for (int i = 0; i < n; i++) {
        const Stmt *s = body[i];
        if (s->kind == ST_RETURN && (!block_body || i != n - 1)) {
            diag_error(s->loc, block_body ? "'return' must be the last statement of its block"
                                          : "'return' belongs directly in a block's body, as its "
                                            "last statement");
            ok = false;
        }
        if (s->kind == ST_PRECISION || s->kind == ST_REPEAT || s->kind == ST_FOR)
            ok = check_returns(s->body, s->nbody, false) && ok;
    }
    return ok;
}

static void collect(Ctx *c, const Ast *ast, bool prelude)
{
    for (int i = 0; i < ast->nstmts; i++) {
        const Stmt *s = ast->stmts[i];
        if (s->kind != ST_BLOCK)
            continue;
        Block *old = (Block *)sema_find_block(c, s->name);
        if (old && !old->prelude) {
            diag_error(s->name_loc, "block '%s' is defined twice", s->name);
            diag_note(old->s->name_loc, "the first definition is here");
            continue;
        }
        if (old || sema_find_builtin(s->name))  /* models keep compiling as built-ins are added */
            diag_note(s->name_loc, "block '%s' shadows the built-in operation '%s'", s->name, s->name);
        /* duplicate parameter names are reported by the parser */
        bool ok = check_returns(s->body, s->nbody, true);
        const Stmt *last = s->nbody ? s->body[s->nbody - 1] : NULL;
        int nrets = last && last->kind == ST_RETURN && last->nvalues > 1 ? last->nvalues : 1;
        Block b = {.s = s, .nrets = nrets, .bad = !ok, .prelude = prelude};
        if (old)
            *old = b;           /* the user's block takes the prelude's place */
        else
            c->blocks[c->nblocks++] = b;
    }
}

/* The prelude (compiler/prelude.mp, embedded at build time): operations
 * written in the language, parsed before the model as its blocks. */
extern const int mp_prelude_count;
extern const char *const mp_prelude_names[], *const mp_prelude_texts[];

static const Ast *parse_prelude(Ctx *c)
{
    SrcFile *f = arena_alloc(c->a, sizeof *f);
    f->path = "compiler/prelude.mp";
    f->text = mp_prelude_texts[0];
    f->len = (long)strlen(f->text);
    c->prelude = f;
    int errs = diag_error_count();
    const Ast *ast = ast_parse(c->a, f);
    MP_ASSERT(diag_error_count() == errs);   /* t_prelude parses it on every build */
    return ast;
}

void sema_collect_blocks(Ctx *c)
{
    const Ast *ast = c->ast, *pre = parse_prelude(c);
    size_t n = (size_t)(ast->nstmts + pre->nstmts + 1);
    c->blocks = arena_alloc(c->a, sizeof *c->blocks * n);
    c->path = arena_alloc(c->a, sizeof *c->path * n);
    collect(c, pre, true);
    collect(c, ast, false);
    for (int i = 0; i < c->nblocks; i++)
        visit_block(c, &c->blocks[i]);
}

/* A block's argument: a string or a list is passed on as written (V_EXPR);
 * anything else is evaluated. */
Val sema_block_arg(Ctx *c, const Expr *e)
{
    if (e->kind == EX_STR || e->kind == EX_LIST)
        return (Val){V_EXPR, .x = e};
    return sema_eval(c, e);
}

/* ---- for loops ---------------------------------------------------------------------------------- */

/* Parameter `index` declared again in a later iteration of a for loop:
 * the same tensor, if the shape agrees. */
IrNode *sema_shared_param(Ctx *c, SrcLoc loc, int index, Shape s)
{
    const IrParam *p = &c->g->params[index];
    if (!shape_eq(&p->shape, &s)) {
        diag_error(loc, "parameter '%s' is shared by every iteration of the for loop, but here it "
                   "has shape %s where an earlier iteration gave it %s", p->name,
                   shape_str(c->a, &s), shape_str(c->a, &p->shape));
        diag_note(p->loc, "'%s' was first declared here", p->name);
        return NULL;
    }
    return p->node;
}

static bool loop_bound(Ctx *c, const Expr *e, const char *what, int64_t *out)
{
    return sema_get_int(c, e, sema_eval(c, e), what, INT64_MIN, out);
}

/* for NAME in A .. B { body }: the body once for each NAME in A .. B-1,
 * NAME a constant there. Redefinitions are allowed across iterations (as
 * across a repeat's copies); parameters of the same name are shared. */
void sema_st_for(Ctx *c, const Stmt *s)
{
    int64_t lo, hi;
    bool ok = loop_bound(c, s->values[0], "a for loop's start", &lo);
    if (!loop_bound(c, s->values[1], "a for loop's end", &hi) || !ok)
        return;
    if (hi > lo && (uint64_t)hi - (uint64_t)lo > SEMA_MAX_REPEAT) {
        diag_error(s->values[1]->loc, "for loop over %llu values is too long (at most %d)",
                   (unsigned long long)((uint64_t)hi - (uint64_t)lo), SEMA_MAX_REPEAT);
        return;
    }
    int iter = c->iter, base = c->repeat_base, from = c->share_from, to = c->share_to;
    c->repeat_base = c->next_iter + 1;
    if (!c->for_depth++)
        c->share_from = c->g->nparams;
    bool outer = !c->in_repeat;    /* its iterations may run as a loop (emit_loop.c) */
    if (outer)
        c->nrepeats = ir_loop_add(c->g, s->name, lo);
    c->in_repeat = true;
    Scope *sc = c->scope;
    for (int64_t i = lo; i < hi && !c->stop && !diag_too_many(); i++) {
        int errs = diag_error_count(), before = c->g->nnodes;
        c->iter = ++c->next_iter;
        c->share_to = c->g->nparams;
        if (!sema_may_define(c, s->name, SYM_CONST, s->name_loc))
            break;
        sema_bind(c, s->name, SYM_CONST, vint(i), s->name_loc);
        sema_run_body(c, s->body, s->nbody);
        sema_tag_copy(c, outer, before, (int)(i - lo));
        if (diag_error_count() > errs)
            break;                 /* each iteration would say the same */
    }
    Sym *var = sema_find_local(sc, s->name);      /* NAME is the loop's own */
    if (var && var->kind == SYM_CONST && var->iter >= c->repeat_base)
        *var = sc->syms[--sc->n];
    c->for_depth--;
    c->in_repeat = !outer;
    c->iter = iter;
    c->repeat_base = base;
    c->share_from = from;
    c->share_to = to;
}
