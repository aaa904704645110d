/* sema_int.h - what the files of semantic analysis share (not an API).
 *
 * sema.c holds the walk (names, constants, built-in operations, the train
 * block); sema_blocks.c blocks, tuple assignments and `for` loops;
 * sema_const.c the functions of constant expressions (log(10000), ...).
 * They share the context and values below; the few functions one calls in
 * another carry the sema_ prefix. */
#ifndef MPCC_SEMA_INT_H
#define MPCC_SEMA_INT_H

#include "sema.h"

#include <stdint.h>

#define SEMA_MAX_NODES  1000000   /* operations in the expanded model */
#define SEMA_MAX_REPEAT 100000    /* copies one `repeat` may make */
#define SEMA_MAX_DEPTH  64        /* nested block calls */
#define MAX_ARGS        12

/* ---- values ------------------------------------------------------------ */

/* V_EXPR: a string or a list given to a block's parameter, passed on as
 * written to the operations that read it (`reduction`, `axis = [2, 3]`). */
typedef enum { V_ERR, V_NONE, V_INT, V_REAL, V_BOOL, V_TENSOR, V_EXPR } ValKind;

typedef struct Val {
    ValKind k;
    int64_t i;          /* V_INT, V_BOOL */
    double r;           /* V_INT (as a double too), V_REAL */
    IrNode *t;          /* V_TENSOR */
    const Expr *x;      /* V_EXPR: an EX_STR or EX_LIST */
} Val;

static const Val verr = {V_ERR, 0, 0, NULL, NULL};
static const Val vnone = {V_NONE, 0, 0, NULL, NULL};
static inline Val vint(int64_t i) { return (Val){V_INT, i, (double)i, NULL, NULL}; }
static inline Val vreal(double r) { return (Val){V_REAL, 0, r, NULL, NULL}; }
static inline Val vbool(bool b) { return (Val){V_BOOL, b, b, NULL, NULL}; }
static inline Val vtensor(IrNode *t) { return (Val){V_TENSOR, 0, 0, t, NULL}; }
static inline bool is_num(Val v) { return v.k == V_INT || v.k == V_REAL; }
static inline bool is_int_type(DType t) { return t == DT_I32 || t == DT_U8 || t == DT_U16; }

/* ---- scopes, blocks, the context -------------------------------------------- */

typedef enum { SYM_CONST, SYM_INPUT, SYM_PARAM, SYM_VALUE, SYM_METRIC, SYM_BUFFER } SymKind;
static const char *const sym_kind_name[] = {"constant", "input", "parameter", "value", "metric", "buffer"};
static const char *const sym_kind_a[] = {"a constant", "an input", "a parameter", "a value", "a metric",
                                         "a buffer"};

typedef struct Sym {
    const char *name;
    SymKind kind;
    Val v;
    SrcLoc loc;
    int iter;           /* the repeat copy that defined it (0: none) */
} Sym;

typedef struct Block {
    const Stmt *s;
    int nrets;          /* values its `return` gives (`return mu, logvar`: 2) */
    bool has_params;    /* declares parameters, itself or through its calls */
    int state;          /* cycle search: 0 unseen, 1 on the path, 2 done */
    bool bad;           /* in a cycle, or its expansion reported errors */
    bool prelude;       /* from compiler/prelude.mp (a user's block shadows it) */
} Block;

typedef struct Scope {
    Sym *syms;
    int n, cap;
    struct Scope *parent;   /* a block's: the model's scope (constants only) */
    const Block *block;     /* the block being expanded; NULL at the top */
} Scope;

/* Open-addressing set of parameter names -> index in g->params. */
typedef struct NameSet {
    const char **keys;
    int *vals;
    size_t cap, n;
} NameSet;

typedef struct Ctx {
    Arena *a;
    IrGraph *g;
    const Ast *ast;
    Scope *top, *scope;
    Block *blocks;
    int nblocks;
    NameSet params;
    const char *prefix;     /* parameter-name prefix: "", "y.", "layers.0." */
    DType override;         /* typed assignment or precision region */
    /* the statement being lowered */
    const char *target;     /* its target name, or NULL */
    bool target_taken;      /* an unnamed layer already took the target */
    bool in_return;
    const Expr *unpack;     /* a tuple assignment's call (chunk or a block), */
    IrNode **parts;         /* whose parts are left here, nparts of them */
    int nparts;
    Val ret;                /* a block's `return` value (the first of several) */
    IrNode **rets;          /* `return a, b`: every value, nrets of them */
    int nrets;
    bool returned;
    /* repeat copies: redefinitions are allowed across copies only */
    int iter, repeat_base, next_iter;
    int nrepeats;       /* the outermost repeat or for loop being expanded,
                           or the last one (IrNode.rep, ir_loop_add) */
    bool in_repeat;     /* inside a repeat or a for loop */
    /* for loops: a parameter declared again under its name in a later
     * iteration is shared: those of index [share_from, share_to) */
    int share_from, share_to;
    int for_depth;          /* for loops around the statement */
    int depth;              /* nested block calls */
    Scope frames[SEMA_MAX_DEPTH + 1];   /* a block call's scope at each depth,
                                           its table reused by the next call
                                           at that depth (millions of calls
                                           must not each allocate one) */
    int nest;               /* nested statement lists (1: the model's own) */
    Block **path;           /* cycle search: the blocks being visited */
    int npath;
    bool stop;              /* node limit reached: make nothing more */
    const Stmt *train;
    const SrcFile *prelude;     /* compiler/prelude.mp's text, parsed first */
    const Expr *prelude_call;   /* the user's call being expanded by a prelude
                                   block (its nodes and messages are put there) */
    int prelude_errs;           /* errors before it: its expansion stops at one more */
} Ctx;

/* ---- arguments of calls -------------------------------------------------------------- */

typedef enum {
    A_TENSOR,   /* a tensor                                      */
    A_INT,      /* an integer constant                           */
    A_REAL,     /* a number                                      */
    A_BOOL,     /* true / false                                  */
    A_STR,      /* "..."                                         */
    A_LIST,     /* [...]: read by the op itself                  */
    A_INIT,     /* zeros(), normal(0.02), ...: read by the layer */
    A_ANY,      /* a tensor or a number (casts, block arguments) */
    A_AXES,     /* an integer constant or a list: reductions' axis */
    A_PAIR,     /* an integer, or [h, w] or "same": read by the op */
    A_VALUE,    /* a block's argument: any of the above (a string or a
                   list as written: V_EXPR)                      */
} ArgKind;

/* required / has a default / may be absent / may be absent and is not
 * shown in signatures (a block's `name`) */
enum { ARG_REQ, ARG_OPT, ARG_ABSENT, ARG_HIDDEN };

typedef struct ArgSpec {
    const char *name;
    ArgKind kind;
    int need;
    double def;
} ArgSpec;

#define REQ(n, k)    {n, k, ARG_REQ, 0}
#define OPT(n, k, d) {n, k, ARG_OPT, d}
#define ABS(n, k)    {n, k, ARG_ABSENT, 0}

typedef struct Args {
    Val v[MAX_ARGS];
    const Expr *e[MAX_ARGS];    /* as written; NULL where defaulted */
} Args;

struct Builtin;

/* sema.c */
Val sema_eval(Ctx *c, const Expr *e);
const char *sema_describe(Ctx *c, Val v);
const char *sema_fmt_real(Ctx *c, double r);
Sym *sema_find_local(Scope *sc, const char *name);
Sym *sema_bind(Ctx *c, const char *name, SymKind kind, Val v, SrcLoc loc);
bool sema_may_define(Ctx *c, const char *name, SymKind kind, SrcLoc at);
bool sema_get_int(Ctx *c, const Expr *e, Val v, const char *what, int64_t lo, int64_t *out);
bool sema_bind_args(Ctx *c, const Expr *callx, const char *fn, const ArgSpec *spec, Args *a);
const char *sema_signature(Ctx *c, const char *fn, const ArgSpec *spec);
const char *sema_layer_name(Ctx *c, const Expr *callx, const Expr *name_arg);
Val sema_statement_value(Ctx *c, const Stmt *s, const char *target, DType override);
void sema_run_body(Ctx *c, Stmt *const *body, int n);
void sema_tag_copy(Ctx *c, bool outer, int from, int copy);
const struct Builtin *sema_find_builtin(const char *name);
bool sema_builtin_layer(const struct Builtin *b);     /* declares parameters */

/* sema_blocks.c */
const Block *sema_find_block(Ctx *c, const char *name);
Val sema_call_block(Ctx *c, const Expr *e, Block *b);
Val sema_block_arg(Ctx *c, const Expr *e);
void sema_collect_blocks(Ctx *c);
void sema_st_block(Ctx *c, const Stmt *s);
void sema_st_return(Ctx *c, const Stmt *s);
void sema_st_unpack(Ctx *c, const Stmt *s);
void sema_st_for(Ctx *c, const Stmt *s);
IrNode *sema_shared_param(Ctx *c, SrcLoc loc, int index, Shape s);

/* sema_const.c: f(args) folded when f is a function of constants (log,
 * exp, sqrt, floor, ceil, min, max) and every argument is a constant;
 * false when the call is not one (then it is an operation on tensors). */
bool sema_const_call(Ctx *c, const Expr *e, Val *out);

#endif
