/* ast.c - reading a model file, running the parser, and the checks on the
 * tree that the grammar cannot make; ast_dump() for tests and --dump-ast.
 *
 * The scanner and parser (grammar/lexer.l, grammar/parser.y) share one
 * Parser state, defined in parser.y; this file only drives them.
 * Invariants: ast_parse() returns a tree (maybe partial) for any bytes;
 * every problem is reported through diag; the checks here run only on a
 * tree that parsed without errors, so they never add a cascade. */
#include "ast.h"
#include "parser.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILE_SIZE (64L << 20)

SrcFile *ast_read_file(Arena *a, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        diag_usage("cannot read '%s': %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf && !ferror(f) && n <= (size_t)MAX_FILE_SIZE) {
        if (n == cap) {
            char *more = realloc(buf, 2 * cap + 1);
            if (!more)
                break;
            buf = more;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (!buf)
        diag_fatal_oom();
    int err = ferror(f) ? errno : 0;
    fclose(f);
    SrcFile *file = NULL;
    if (err)
        diag_usage("cannot read '%s': %s", path, strerror(err));
    else if (n > (size_t)MAX_FILE_SIZE)
        diag_usage("cannot read '%s': larger than %ld MiB, the most a model file may be", path,
                   MAX_FILE_SIZE >> 20);
    else {
        file = arena_alloc(a, sizeof *file);
        file->path = arena_strdup(a, path);
        file->text = arena_strndup(a, buf, n);
        file->len = (long)n;
    }
    free(buf);
    return file;
}

static const char *const stmt_keyword[] = {
    [ST_MODEL] = "model", [ST_CONST] = "const", [ST_INPUT] = "input",
    [ST_PARAM] = "param", [ST_ASSIGN] = NULL, [ST_METRIC] = "metric",
    [ST_PRECISION] = "precision", [ST_BLOCK] = "block", [ST_RETURN] = "return",
    [ST_REPEAT] = "repeat", [ST_TRAIN] = "train", [ST_BUFFER] = "buffer",
    [ST_UNPACK] = NULL, [ST_FOR] = "for",
};

/* What a statement starts with, for messages: its keyword or its target. */
static const char *stmt_word(const Stmt *s)
{
    return stmt_keyword[s->kind] ? stmt_keyword[s->kind] : s->name;
}

static bool top_level_only(StmtKind k)
{
    return k == ST_MODEL || k == ST_INPUT || k == ST_TRAIN || k == ST_BLOCK;
}

/* model, input, train and block belong at the top level; return inside a
 * block (maybe within its precision or repeat). `in` is the innermost
 * statement around, `in_block` whether a block is around at all. */
static void check_places(Stmt **ss, int n, const Stmt *in, bool in_block)
{
    for (int i = 0; i < n; i++) {
        const Stmt *s = ss[i];
        if (in && top_level_only(s->kind))
            diag_error(s->loc, "'%s' must be at the top level, not inside '%s' (line %d)",
                       stmt_keyword[s->kind], stmt_keyword[in->kind], in->loc.line);
        else if (s->kind == ST_RETURN && !in_block)
            diag_error(s->loc, "'return' outside a block (only a block returns a value)");
        check_places(s->body, s->nbody, s, in_block || s->kind == ST_BLOCK);
    }
}

/* `model NAME` first, and once. */
static void check_model(const Ast *ast, SrcLoc end)
{
    if (ast->nstmts == 0) {
        diag_error(end, "expected 'model NAME' as the first statement, found end of file");
        return;
    }
    const Stmt *first = ast->stmts[0];
    if (first->kind != ST_MODEL)
        diag_error(first->loc, "expected 'model NAME' as the first statement, found '%s'",
                   stmt_word(first));
    for (int i = 1; i < ast->nstmts; i++)
        if (ast->stmts[i]->kind == ST_MODEL && first->kind == ST_MODEL) {
            diag_error(ast->stmts[i]->loc, "a second 'model' statement (a file holds one model)");
            diag_note(first->loc, "the model is named here");
        }
}

Ast *ast_parse(Arena *a, const SrcFile *file)
{
    Parser *p = arena_alloc(a, sizeof *p);
    p->arena = a;
    p->file = file;
    int errors = diag_error_count();
    lex_begin(p);
    int rc = yyparse(p);
    lex_end(p);
    if (rc != 0 && diag_error_count() == errors)
        diag_internal(__FILE__, __LINE__, "the parser stopped without a message");
    Ast *ast = arena_alloc(a, sizeof *ast);
    ast->file = file;
    ast->stmts = p->stmts.v;
    ast->nstmts = p->stmts.n;
    if (diag_error_count() == errors) {
        check_places(ast->stmts, ast->nstmts, NULL, false);
        check_model(ast, (SrcLoc){file, p->line, p->col, 1});
    }
    return ast;
}

const char *ast_type_name(TypeName t)
{
    static const char *const names[] = {
        [TY_NONE] = "none", [TY_F32] = "f32", [TY_F16] = "f16",
        [TY_BF16] = "bf16", [TY_I32] = "i32", [TY_U8] = "u8",
        [TY_U16] = "u16",
    };
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

/* ---- ast_dump: S-expressions, one statement per line ------------------ */

static void dump_expr(FILE *o, const Expr *e);

const char *ast_op_text(int op)
{
    static const char one[][2] = {"+", "-", "*", "/", "%", "@", "<", ">"};
    switch (op) {
    case 'P': return "**";
    case 'D': return "//";
    case AST_LE: return "<=";
    case AST_GE: return ">=";
    case AST_EQ: return "==";
    case AST_NE: return "!=";
    default: break;
    }
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        if (one[i][0] == op)
            return one[i];
    return "?";
}

static void dump_list(FILE *o, Expr **es, int n)
{
    for (int i = 0; i < n; i++) {
        fputc(' ', o);
        dump_expr(o, es[i]);
    }
}

/* [a b c] */
static void dump_brackets(FILE *o, Expr **es, int n)
{
    fputc('[', o);
    for (int i = 0; i < n; i++) {
        if (i)
            fputc(' ', o);
        dump_expr(o, es[i]);
    }
    fputc(']', o);
}

static void dump_expr(FILE *o, const Expr *e)
{
    switch (e->kind) {
    case EX_NUM: fputs(e->text, o); break;
    case EX_STR: fprintf(o, "\"%s\"", e->name); break;
    case EX_NAME: fputs(e->name, o); break;
    case EX_NEG:
        fputs("(- ", o);
        dump_expr(o, e->lhs);
        fputc(')', o);
        break;
    case EX_BINARY:
        fprintf(o, "(%s ", ast_op_text(e->op));
        dump_expr(o, e->lhs);
        fputc(' ', o);
        dump_expr(o, e->rhs);
        fputc(')', o);
        break;
    case EX_CALL:
        fprintf(o, "(call %s", e->name);
        dump_list(o, e->args, e->nargs);
        for (int i = 0; i < e->nkwargs; i++) {
            fprintf(o, " %s=", e->kwargs[i].key);
            dump_expr(o, e->kwargs[i].value);
        }
        fputc(')', o);
        break;
    case EX_LIST:
        dump_brackets(o, e->args, e->nargs);
        break;
    }
}

static void dump_stmt(FILE *o, const Stmt *s, int indent);

static void dump_body(FILE *o, const Stmt *s, int indent)
{
    for (int i = 0; i < s->nbody; i++) {
        fprintf(o, "\n%*s", indent + 2, "");
        dump_stmt(o, s->body[i], indent + 2);
    }
    for (int i = 0; i < s->nitems; i++) {
        fprintf(o, "\n%*s(%s ", indent + 2, "", s->items[i].key);
        dump_expr(o, s->items[i].value);
        fputc(')', o);
    }
}

/* (KEYWORD [NAME] [TYPE] [DIMS] [VALUE] [BODY]) */
static void dump_stmt(FILE *o, const Stmt *s, int indent)
{
    fprintf(o, "(%s", s->kind == ST_ASSIGN || s->kind == ST_UNPACK ? "=" : stmt_keyword[s->kind]);
    if (s->kind == ST_BLOCK || s->kind == ST_UNPACK) {
        if (s->kind == ST_BLOCK)
            fprintf(o, " %s", s->name);
        fputs(" (", o);
        for (int i = 0; i < s->nparams; i++)
            fprintf(o, "%s%s", i ? " " : "", s->params[i]);
        fputc(')', o);
    } else if (s->name && s->kind != ST_REPEAT)
        fprintf(o, " %s", s->name);
    if (s->type != TY_NONE && s->kind != ST_PARAM && s->kind != ST_BUFFER)
        fprintf(o, " %s", ast_type_name(s->type));
    if (s->kind == ST_INPUT || s->kind == ST_PARAM || s->kind == ST_BUFFER) {
        fputc(' ', o);
        dump_brackets(o, s->dims, s->ndims);
    }
    if (s->window)
        fputs(" window", o);
    for (int i = 0; i < (s->nvalues ? s->nvalues : s->value != NULL); i++) {
        fputc(' ', o);
        dump_expr(o, s->nvalues ? s->values[i] : s->value);
    }
    if (s->kind == ST_REPEAT)
        fprintf(o, " %s", s->name);
    dump_body(o, s, indent);
    fputc(')', o);
}

void ast_dump(FILE *out, const Ast *ast)
{
    for (int i = 0; i < ast->nstmts; i++) {
        dump_stmt(out, ast->stmts[i], 0);
        fputc('\n', out);
    }
}
