/* ast.h - the syntax tree the parser builds (grammar/parser.y).
 *
 * The tree is exactly what was written: no names are resolved, no constants
 * folded, blocks not expanded (sema.c does all that). Every node carries the
 * SrcLoc of its first token (for calls and binary operators: the operator or
 * callee, whichever the error messages should point at -- see below).
 * Lists are arena arrays with a count. All memory comes from the Arena
 * passed to ast_parse(). */
#ifndef MPCC_AST_H
#define MPCC_AST_H

#include "arena.h"
#include "diag.h"
#include <stdbool.h>

typedef enum {
    TY_NONE = 0,
    TY_F32, TY_F16, TY_BF16, TY_I32, TY_U8, TY_U16,
} TypeName;                      /* the type names of the language (values = DType's) */

typedef struct Expr Expr;
typedef struct Stmt Stmt;

typedef enum {
    EX_NUM,      /* 128, 1e-3: num, is_int, text                           */
    EX_STR,      /* "proj": str                                            */
    EX_NAME,     /* x, h.weight, true: name (dotted names kept whole)      */
    EX_BINARY,   /* a OP b: op is one of + - * / % @ < >, 'P' for **, 'D' for
                    // and the AST_LE.. codes for <= >= == !=               */
    EX_NEG,      /* -a: lhs                                                */
    EX_CALL,     /* f(args..., key = value...): name, args, kwargs.
                    A cast f32(x) is a call whose name is the type name.  */
    EX_LIST,     /* [a, b, c]: args                                        */
} ExprKind;

/* EX_BINARY's two-character comparisons (one-character ops are themselves) */
enum { AST_LE = 'l', AST_GE = 'g', AST_EQ = 'e', AST_NE = 'n' };

/* An EX_BINARY op as written: "+", "**", "<=" */
const char *ast_op_text(int op);

typedef struct Kwarg {
    const char *key;
    SrcLoc key_loc;
    Expr *value;
} Kwarg;

struct Expr {
    ExprKind kind;
    SrcLoc loc;          /* EX_BINARY: the operator; EX_CALL: the callee name;
                            else the first token. len covers that token. */
    SrcLoc span;         /* the whole expression, for underlines */
    int height;          /* levels of the tree from here down (a leaf: 1);
                            at most AST_MAX_HEIGHT, so passes may recurse */
    /* EX_NUM */
    double num;
    bool is_int;         /* written without '.', 'e' or 'E'; fits in int64 */
    long long ival;      /* value when is_int */
    const char *text;    /* as written, for messages */
    /* EX_STR, EX_NAME, EX_CALL */
    const char *name;    /* EX_STR: the string without quotes */
    /* EX_BINARY, EX_NEG */
    int op;
    Expr *lhs, *rhs;
    /* EX_CALL, EX_LIST */
    Expr **args;
    int nargs;
    Kwarg *kwargs;
    int nkwargs;
};

typedef enum {
    ST_MODEL,     /* model NAME                                  */
    ST_CONST,     /* const NAME = value                           */
    ST_INPUT,     /* input NAME: type[dims]                       */
    ST_PARAM,     /* param NAME: [dims] = value (an EX_CALL init) */
    ST_ASSIGN,    /* NAME = value, NAME: type = value             */
    ST_METRIC,    /* metric NAME = value                          */
    ST_PRECISION, /* precision type { body }                      */
    ST_BLOCK,     /* block NAME(params) { body }                  */
    ST_RETURN,    /* return value                                 */
    ST_REPEAT,    /* repeat count as NAME { body }                */
    ST_TRAIN,     /* train { items }                              */
    ST_BUFFER,    /* buffer NAME: [dims] = value (an EX_CALL init) */
    ST_UNPACK,    /* a, b, c = value: name = "a", params = the names */
    ST_FOR,       /* for NAME in A .. B { body }: values = {A, B}  */
} StmtKind;

/* One line of a train block: `key = value`, or `minimize NAME` (key is
 * "minimize", value an EX_NAME). */
typedef struct TrainItem {
    const char *key;
    SrcLoc loc;
    Expr *value;
} TrainItem;

struct Stmt {
    StmtKind kind;
    SrcLoc loc;           /* the statement's first token */
    const char *name;     /* MODEL, CONST, INPUT, PARAM, BUFFER, ASSIGN, METRIC,
                             BLOCK, REPEAT (the `as` name, maybe dotted), FOR (its
                             variable) */
    SrcLoc name_loc;
    TypeName type;        /* INPUT, PARAM and BUFFER (always f32), typed ASSIGN, PRECISION;
                             TY_NONE for an untyped ASSIGN */
    SrcLoc type_loc;
    Expr *value;          /* CONST, PARAM / BUFFER init, ASSIGN, METRIC, RETURN
                             (its first value), REPEAT count, FOR start */
    Expr **values;        /* RETURN: every value (`return mu, logvar`); FOR: A, B */
    int nvalues;
    bool window;          /* INPUT: `input x: u16[B, W] window` */
    SrcLoc window_loc;
    Expr **dims;          /* INPUT, PARAM, BUFFER */
    int ndims;
    const char **params;  /* BLOCK formal parameter names; UNPACK targets */
    SrcLoc *param_locs;
    Expr **param_defs;    /* BLOCK: each parameter's default value, or NULL */
    int nparams;
    Stmt **body;          /* PRECISION, BLOCK, REPEAT, FOR */
    int nbody;
    TrainItem *items;     /* TRAIN */
    int nitems;
};

typedef struct Ast {
    const SrcFile *file;
    Stmt **stmts;
    int nstmts;
} Ast;

/* Parse a whole file. Syntax errors go through diag_error() (parsing goes
 * on after each, up to the diag limit); the returned tree holds whatever
 * parsed. Never crashes or hangs, whatever the bytes: NUL bytes, non-ASCII,
 * over-long tokens, nesting deeper than AST_MAX_DEPTH and expressions
 * taller than AST_MAX_HEIGHT are errors. The checks the grammar cannot
 * make are made here too: `model NAME` first and once; model, input,
 * block and train only at the top level; return only inside a block. */
#define AST_MAX_DEPTH 256
#define AST_MAX_HEIGHT 1024     /* levels of one expression tree (a + b + ...) */
Ast *ast_parse(Arena *a, const SrcFile *file);

/* Read a file into a SrcFile (NULL and a usage error when unreadable). */
SrcFile *ast_read_file(Arena *a, const char *path);

const char *ast_type_name(TypeName t);      /* "f32", ... */
void ast_dump(FILE *out, const Ast *ast);   /* S-expression form, for tests */

#endif
