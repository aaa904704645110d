/* parser.y - the grammar of the .mp language (../shared/spec/LANGUAGE.md).
 *
 * A pure bison parser over the reentrant flex scanner of lexer.l; all its
 * state lives in the Parser (below), nothing in globals. It builds the Ast
 * of ast.h exactly as written (sema.c resolves names and folds constants).
 *
 * Statements end at NEWLINE tokens; the scanner sends none inside ( ) or
 * [ ], and one before end of file, so every statement ends with one.
 * Precedence is in the layering of the expression rules:
 *     ** (right)  >  unary -  >  @  >  * / // %  >  + -
 * Errors: a custom reporter says "expected X, found Y", with Lua's hint
 * "(to close '(' at line 3)" when the bracket was opened on another line.
 * Recovery is at statement level: `lines: lines error NEWLINE` skips to the
 * end of the statement; a '{' thrown away by the recovery makes the scanner
 * skip its whole body (see the %destructor), so that one bad block header
 * gives one error, not one per line of the block; an error on a line below
 * an open '(' drops that bracket (lex_drop_brackets), so that one missing
 * ')' does not swallow the rest of the file.
 * Invariants: %expect 0; the scanner bounds nesting at AST_MAX_DEPTH, so
 * the parser stack (YYMAXDEPTH) can never run out on any input; the
 * actions bound an expression's height at AST_MAX_HEIGHT. */
%require "3.8"
%define api.pure full
%define api.location.type {SrcLoc}
%define parse.error custom
%define parse.lac full
%locations
%expect 0
%param {Parser *p}

%code requires {
#include "ast.h"

/* A growable arena array. */
typedef struct Vec {
    void *v;
    int n, cap;
} Vec;

/* Call arguments while they are parsed. */
typedef struct ArgVec {
    Vec args, kwargs;
} ArgVec;

/* One open bracket: ( [ or {, what opened it, and the unary-minus / '**'
 * operators still waiting for their operand inside it. */
typedef struct Bracket {
    char ch;
    const char *what;   /* "(" "[" "{" or the keyword of a { }: "block" ... */
    SrcLoc loc;
    int chain;
} Bracket;

/* The state of one parse, shared by the scanner, the parser and ast.c. */
typedef struct Parser {
    Arena *arena;
    const SrcFile *file;
    void *scanner;
    /* scanner position */
    int line, col;
    long off;
    long tok_off;            /* the last token (the parser's lookahead) */
    int tok_len;
    long cand_off;           /* the token being scanned (maybe swallowed) */
    int cand_len;
    Bracket cand_before;
    bool cand_has_before;
    int prev;                /* kind of the last token sent to the parser */
    int stmt_first;          /* first token of the current statement */
    bool at_stmt_start;
    /* brackets: depth entries; nest = depth + all chains (bounded) */
    Bracket stack[AST_MAX_DEPTH];
    int depth, nest;
    int top_chain;           /* chain outside any bracket */
    Bracket open_before;     /* innermost bracket before the lookahead */
    bool has_open_before;
    int skip_level;          /* > 0: skipping a '{' body the parser threw away */
    bool eof_newline, stopped;
    int bad_line;            /* line of the last lexical error */
    /* the result */
    Vec stmts;
} Parser;

int yyparse(Parser *p);

/* lexer.l */
void lex_begin(Parser *p);
void lex_end(Parser *p);
void lex_drop_brackets(Parser *p);   /* after an error on a later line */
}

%union {
    Expr *expr;
    Stmt *stmt;
    const char *str;
    TypeName ty;
    Vec vec;
    ArgVec av;
    TrainItem item;
    int num;
}

%code {
#include <string.h>

int lx_lex(YYSTYPE *lval, SrcLoc *lloc, void *scanner);
static int yylex(YYSTYPE *lval, SrcLoc *lloc, Parser *p) { return lx_lex(lval, lloc, p->scanner); }
static void yyerror(const SrcLoc *loc, Parser *p, const char *msg);

/* The rule's location is its first token's (statements point there). */
#define YYLLOC_DEFAULT(Cur, Rhs, N) ((Cur) = (N) ? YYRHSLOC(Rhs, 1) : YYRHSLOC(Rhs, 0))
#define YYMAXDEPTH 20000
#define SPAN_TO_EOL (1 << 20)

static void vec_push(Arena *a, Vec *v, const void *elem, size_t size);
static SrcLoc span_join(SrcLoc a, SrcLoc b);

static Expr *new_expr(Parser *p, ExprKind k, SrcLoc loc);
static void above(Parser *p, Expr *e, const Expr *child);
static Expr *binary(Parser *p, int op, SrcLoc at, Expr *l, Expr *r);
static Expr *call(Parser *p, const char *name, SrcLoc at, ArgVec *a, SrcLoc close);
static void add_arg(Parser *p, ArgVec *a, Expr *e, const Kwarg *kw);
static Stmt *new_stmt(Parser *p, StmtKind k, SrcLoc loc);
static void add_name(Parser *p, Vec *names, const char *name, SrcLoc at);
static void add_param(Parser *p, Vec *names, const char *name, SrcLoc at, Expr *def);
static void set_defaults(Parser *p, Stmt *s, const Vec *names);
static void plain(const char *name, SrcLoc at);
static Stmt *named(Parser *p, StmtKind k, SrcLoc loc, const char *name, SrcLoc name_loc);
static void set_body(Stmt *s, Vec *body);
static void set_values(Stmt *s, Vec *values);
static Stmt *unpack(Parser *p, Vec *names, const char *last, SrcLoc last_loc);
static void set_names(Parser *p, Stmt *s, const Vec *names, const char *what);
static void set_dims(Stmt *s, Vec *dims);
static void check_init(Expr *init);
static void check_item(Parser *p, Vec *items, const TrainItem *it);
}

%token END 0 "end of file"
%token NEWLINE "end of line"
%token <str> NAME "name"
%token <expr> NUMBER "number"
%token <expr> STRING "string"
%token <ty> TYPE "type"
%token MODEL "'model'" CONST "'const'" INPUT "'input'" PARAM "'param'"
%token METRIC "'metric'" TRAIN "'train'" MINIMIZE "'minimize'"
%token BLOCK "'block'" RETURN "'return'" REPEAT "'repeat'" AS "'as'"
%token PRECISION "'precision'" BUFFER "'buffer'" WINDOW "'window'"
%token POW "'**'"
%token FOR "'for'" IN "'in'" IDIV "'//'" DOTDOT "'..'"
%token EQ_OP "'=='" NE_OP "'!='" LE_OP "'<='" GE_OP "'>='"
%token BAD "invalid token"   /* the scanner reported it already */

%type <vec> lines body exprs list names opt_params params tlines tbody
%type <stmt> stmt
%type <expr> expr add mul mat unary power primary
%type <str> callee
%type <num> decl opt_window cmpop
%type <av> args arglist
%type <item> titem

%token <str> '{'                /* no value; typed only for its destructor */
%destructor { p->skip_level = p->depth; } '{'

%%

file: lines                     { p->stmts = $1; }
    ;

/* lines = { NEWLINE | stmt NEWLINE | error NEWLINE } */
lines: %empty                   { $$ = (Vec){0}; }
     | lines NEWLINE            { $$ = $1; }
     | lines stmt NEWLINE       { $$ = $1; vec_push(p->arena, &$$, &$2, sizeof $2); }
     | lines error NEWLINE      { $$ = $1; yyerrok; }
     ;

/* body = {NEWLINE} "{" lines [stmt] "}" ; the last statement may share
 * the '}' line, and the '{' may stand on a line of its own.
 * ($2 is "used" since '{' has a %destructor, which gives it a value) */
body: nls '{' lines '}'         { (void)$2; $$ = $3; }
    | nls '{' lines stmt '}'    { (void)$2; $$ = $3; vec_push(p->arena, &$$, &$4, sizeof $4); }
    | nls '{' lines error '}'   { (void)$2; $$ = $3; yyerrok; }
    ;
nls: %empty
   | nls NEWLINE
   ;

stmt: MODEL NAME                { $$ = named(p, ST_MODEL, @1, $2, @2); }
    | CONST NAME '=' expr       { $$ = named(p, ST_CONST, @1, $2, @2); $$->value = $4; }
    | INPUT NAME ':' TYPE '[' list ']' opt_window
        {
            $$ = named(p, ST_INPUT, @1, $2, @2);
            $$->type = $4;
            $$->type_loc = @4;
            $$->window = $8;
            $$->window_loc = @8;
            set_dims($$, &$6);
            if ($6.n == 0)
                diag_error(@7, "expected the input's dimensions (the batch first), found ']'");
        }
    | decl NAME ':' '[' list ']' '=' expr
        {
            $$ = named(p, $1, @1, $2, @2);
            $$->type = TY_F32;
            $$->type_loc = @4;
            set_dims($$, &$5);
            $$->value = $8;
            check_init($8);
        }
    | decl NAME ':' TYPE '[' list ']' '=' expr
        {
            $$ = named(p, $1, @1, $2, @2);
            $$->type = TY_F32;
            $$->type_loc = @4;
            set_dims($$, &$6);
            $$->value = $9;
            const char *kw = $1 == ST_PARAM ? "param" : "buffer";
            diag_error(@4, "a %s has no type: it is always kept in f32 (write '%s %s: [...] = ...')",
                       $1 == ST_PARAM ? "parameter" : "buffer", kw, $2);
        }
    | NAME '=' expr             { $$ = named(p, ST_ASSIGN, @1, $1, @1); $$->value = $3; }
    | NAME ':' TYPE '=' expr
        {
            $$ = named(p, ST_ASSIGN, @1, $1, @1);
            $$->type = $3;
            $$->type_loc = @3;
            $$->value = $5;
        }
    | METRIC NAME '=' expr      { $$ = named(p, ST_METRIC, @1, $2, @2); $$->value = $4; }
    | PRECISION TYPE body
        {
            $$ = new_stmt(p, ST_PRECISION, @1);
            $$->type = $2;
            $$->type_loc = @2;
            set_body($$, &$3);
        }
    | BLOCK NAME '(' opt_params ')' body
        {
            $$ = named(p, ST_BLOCK, @1, $2, @2);
            set_names(p, $$, &$4, "parameter");
            set_defaults(p, $$, &$4);
            set_body($$, &$6);
        }
    | RETURN exprs              { $$ = new_stmt(p, ST_RETURN, @1); set_values($$, &$2); }
    | FOR NAME IN expr DOTDOT expr body
        {
            $$ = named(p, ST_FOR, @1, $2, @2);
            Vec range = {0};
            vec_push(p->arena, &range, &$4, sizeof $4);
            vec_push(p->arena, &range, &$6, sizeof $6);
            set_values($$, &range);
            set_body($$, &$7);
        }
    | REPEAT expr AS NAME body
        {
            $$ = named(p, ST_REPEAT, @1, $4, @4);
            $$->value = $2;
            set_body($$, &$5);
        }
    | TRAIN tbody
        {
            $$ = new_stmt(p, ST_TRAIN, @1);
            $$->items = $2.v;
            $$->nitems = $2.n;
        }
    | names ',' NAME '=' expr   { $$ = unpack(p, &$1, $3, @3); $$->value = $5; }
    ;

/* decl = "param" | "buffer" (a tensor saved with the model, never trained) */
decl: PARAM                     { $$ = ST_PARAM; }
    | BUFFER                    { $$ = ST_BUFFER; }
    ;
/* opt_window = ["window"]: the input's rows are windows of one stream */
opt_window: %empty              { $$ = 0; }
          | WINDOW              { $$ = 1; }
          ;

/* block parameters, kept as Kwargs (name + location + default) while
 * parsing: `x` or `slope = 0.01` (defaults after the required ones) */
opt_params: %empty              { $$ = (Vec){0}; }
          | params              { $$ = $1; }
          | params ','          { $$ = $1; }
          ;
params: NAME                    { $$ = (Vec){0}; add_name(p, &$$, $1, @1); }
      | NAME '=' expr           { $$ = (Vec){0}; add_param(p, &$$, $1, @1, $3); }
      | params ',' NAME         { $$ = $1; add_name(p, &$$, $3, @3); }
      | params ',' NAME '=' expr { $$ = $1; add_param(p, &$$, $3, @3, $5); }
      ;
names: NAME                     { $$ = (Vec){0}; add_name(p, &$$, $1, @1); }
     | names ',' NAME           { $$ = $1; add_name(p, &$$, $3, @3); }
     ;

/* tbody = "{" { titem NEWLINE } [titem] "}" */
tbody: nls '{' tlines '}'       { (void)$2; $$ = $3; }
     | nls '{' tlines titem '}' { (void)$2; $$ = $3; check_item(p, &$$, &$4); }
     | nls '{' tlines error '}' { (void)$2; $$ = $3; yyerrok; }
     ;
tlines: %empty                  { $$ = (Vec){0}; }
      | tlines NEWLINE          { $$ = $1; }
      | tlines titem NEWLINE    { $$ = $1; check_item(p, &$$, &$2); }
      | tlines error NEWLINE    { $$ = $1; yyerrok; }
      ;
titem: NAME '=' expr            { $$ = (TrainItem){$1, @1, $3}; }
     | PRECISION '=' expr       { $$ = (TrainItem){"precision", @1, $3}; }
     | MINIMIZE NAME
        {
            Expr *e = new_expr(p, EX_NAME, @2);
            e->name = $2;
            $$ = (TrainItem){"minimize", @1, e};
        }
     ;

/* expr = add [cmpop add]   (comparisons do not chain) */
expr: add
    | add cmpop add             { $$ = binary(p, $2, @2, $1, $3); }
    | add cmpop add cmpop add
        {
            diag_error(@4, "comparisons do not chain: compare twice and combine the masks, "
                       "e.g. f32(a < b) * f32(b < c)");
            $$ = binary(p, $2, @2, $1, $3);
        }
    ;
cmpop: '<'                      { $$ = '<'; }
     | '>'                      { $$ = '>'; }
     | LE_OP                    { $$ = AST_LE; }
     | GE_OP                    { $$ = AST_GE; }
     | EQ_OP                    { $$ = AST_EQ; }
     | NE_OP                    { $$ = AST_NE; }
     ;
/* add = mul { ("+" | "-") mul } */
add: mul
   | add '+' mul                { $$ = binary(p, '+', @2, $1, $3); }
   | add '-' mul                { $$ = binary(p, '-', @2, $1, $3); }
   ;
/* mul = mat { ("*" | "/" | "//" | "%") mat }   ('D' stands for "//") */
mul: mat
   | mul '*' mat                { $$ = binary(p, '*', @2, $1, $3); }
   | mul '/' mat                { $$ = binary(p, '/', @2, $1, $3); }
   | mul IDIV mat               { $$ = binary(p, 'D', @2, $1, $3); }
   | mul '%' mat                { $$ = binary(p, '%', @2, $1, $3); }
   ;
/* mat = unary { "@" unary } */
mat: unary
   | mat '@' unary              { $$ = binary(p, '@', @2, $1, $3); }
   ;
/* unary = "-" unary | power */
unary: power
     | '-' unary
        {
            $$ = new_expr(p, EX_NEG, @1);
            $$->lhs = $2;
            $$->span = span_join(@1, $2->span);
            above(p, $$, $2);
        }
     ;
/* power = primary ["**" unary]   (so 2 ** -1 works and -2 ** 2 is -(2 ** 2)) */
power: primary
     | primary POW unary        { $$ = binary(p, 'P', @2, $1, $3); }
     ;
/* primary = NUMBER | STRING | NAME | "(" expr ")" | "[" list "]"
 *         | (NAME | TYPE) "(" args ")" */
primary: NUMBER
       | STRING
       | NAME                   { $$ = new_expr(p, EX_NAME, @1); $$->name = $1; }
       | '(' expr ')'           { $$ = $2; $$->span = span_join(@1, @3); }
       | '[' list ']'
        {
            $$ = new_expr(p, EX_LIST, @1);
            $$->args = $2.v;
            $$->nargs = $2.n;
            $$->span = span_join(@1, @3);
            for (int i = 0; i < $$->nargs; i++)
                above(p, $$, $$->args[i]);
        }
       | callee '(' args ')'    { $$ = call(p, $1, @1, &$3, @4); }
       ;
callee: NAME
      | TYPE                    { $$ = ast_type_name($1); }
      ;

/* list = [expr {"," expr} [","]] */
list: %empty                    { $$ = (Vec){0}; }
    | exprs
    | exprs ','
    ;
exprs: expr                     { $$ = (Vec){0}; vec_push(p->arena, &$$, &$1, sizeof $1); }
     | exprs ',' expr           { $$ = $1; vec_push(p->arena, &$$, &$3, sizeof $3); }
     ;

/* args = [arg {"," arg} [","]] ; arg = expr | NAME "=" expr */
args: %empty                    { $$ = (ArgVec){{0}, {0}}; }
    | arglist
    | arglist ','
    ;
arglist: expr                   { $$ = (ArgVec){{0}, {0}}; add_arg(p, &$$, $1, NULL); }
       | NAME '=' expr
        {
            $$ = (ArgVec){{0}, {0}};
            Kwarg k = {$1, @1, $3};
            add_arg(p, &$$, NULL, &k);
        }
       | arglist ',' expr       { $$ = $1; add_arg(p, &$$, $3, NULL); }
       | arglist ',' NAME '=' expr
        {
            $$ = $1;
            Kwarg k = {$3, @3, $5};
            add_arg(p, &$$, NULL, &k);
        }
       ;

%%

static void vec_push(Arena *a, Vec *v, const void *elem, size_t size)
{
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        v->v = arena_grow(a, v->v, (size_t)v->n, (size_t)cap, size);
        v->cap = cap;
    }
    memcpy((char *)v->v + (size_t)v->n * size, elem, size);
    v->n++;
}

/* From the start of a to the end of b; a span over several lines covers
 * the rest of its first line (diag clips it there). */
static SrcLoc span_join(SrcLoc a, SrcLoc b)
{
    if (b.line == a.line && b.col + b.len > a.col)
        a.len = b.col + b.len - a.col;
    else if (b.line > a.line)
        a.len = SPAN_TO_EOL;
    return a;
}

static Expr *new_expr(Parser *p, ExprKind k, SrcLoc loc)
{
    Expr *e = arena_alloc(p->arena, sizeof *e);
    e->kind = k;
    e->loc = e->span = loc;
    e->height = 1;
    return e;
}

/* e sits above child: keep the tree's height bounded (the scanner bounds
 * brackets; this catches a + b + c + ... chains a recursive pass would
 * choke on). Past the bound: one error, and the scanner ends the input. */
static void above(Parser *p, Expr *e, const Expr *child)
{
    if (!child || child->height < e->height)
        return;
    e->height = child->height + 1;
    if (e->height > AST_MAX_HEIGHT && !p->stopped) {
        diag_error(e->loc, "expression nested too deeply (more than %d levels); split it into several statements",
                   AST_MAX_HEIGHT);
        p->stopped = true;
    }
}

static Expr *binary(Parser *p, int op, SrcLoc at, Expr *l, Expr *r)
{
    Expr *e = new_expr(p, EX_BINARY, at);
    e->op = op;
    e->lhs = l;
    e->rhs = r;
    e->span = span_join(l->span, r->span);
    above(p, e, l);
    above(p, e, r);
    return e;
}

static Expr *call(Parser *p, const char *name, SrcLoc at, ArgVec *a, SrcLoc close)
{
    Expr *e = new_expr(p, EX_CALL, at);
    e->name = name;
    e->args = a->args.v;
    e->nargs = a->args.n;
    e->kwargs = a->kwargs.v;
    e->nkwargs = a->kwargs.n;
    e->span = span_join(at, close);
    for (int i = 0; i < e->nargs; i++)
        above(p, e, e->args[i]);
    for (int i = 0; i < e->nkwargs; i++)
        above(p, e, e->kwargs[i].value);
    return e;
}

/* Positional arguments come first; a keyword is given once. */
static void add_arg(Parser *p, ArgVec *a, Expr *e, const Kwarg *kw)
{
    if (e) {
        if (a->kwargs.n)
            diag_error(e->span, "positional argument after keyword argument '%s'",
                       ((Kwarg *)a->kwargs.v)[a->kwargs.n - 1].key);
        vec_push(p->arena, &a->args, &e, sizeof e);
        return;
    }
    plain(kw->key, kw->key_loc);
    for (int i = 0; i < a->kwargs.n; i++) {
        const Kwarg *old = &((Kwarg *)a->kwargs.v)[i];
        if (strcmp(old->key, kw->key) == 0) {
            diag_error(kw->key_loc, "keyword argument '%s' given twice", kw->key);
            diag_note(old->key_loc, "'%s' was first given here", kw->key);
            return;
        }
    }
    vec_push(p->arena, &a->kwargs, kw, sizeof *kw);
}

static Stmt *new_stmt(Parser *p, StmtKind k, SrcLoc loc)
{
    Stmt *s = arena_alloc(p->arena, sizeof *s);
    s->kind = k;
    s->loc = loc;
    return s;
}

/* A name being declared is plain: dotted names refer to parameters (a
 * `param` or `buffer` may be declared under one, like a checkpoint's
 * tensor, and `repeat ... as transformer.h` names a module path). */
static void plain(const char *name, SrcLoc at)
{
    if (strchr(name, '.'))
        diag_error(at, "expected a plain name, found '%s' (dotted names refer to parameters)", name);
}

static Stmt *named(Parser *p, StmtKind k, SrcLoc loc, const char *name, SrcLoc name_loc)
{
    if (k != ST_PARAM && k != ST_BUFFER && k != ST_REPEAT)
        plain(name, name_loc);
    Stmt *s = new_stmt(p, k, loc);
    s->name = name;
    s->name_loc = name_loc;
    return s;
}

/* A block's formal parameter or a tuple assignment's target: plain. */
static void add_name(Parser *p, Vec *names, const char *name, SrcLoc at)
{
    plain(name, at);
    Kwarg k = {name, at, NULL};
    vec_push(p->arena, names, &k, sizeof k);
}

/* A block parameter with a default value: `slope = 0.01`. Once one has a
 * default, every later one needs one too (as in Python). */
static void add_param(Parser *p, Vec *names, const char *name, SrcLoc at, Expr *def)
{
    add_name(p, names, name, at);
    ((Kwarg *)names->v)[names->n - 1].value = def;
}

/* s->param_defs from the list (NULL: required), which must be after the
 * required parameters. Runs after set_names (a name given twice is
 * dropped there, and its default with it). */
static void set_defaults(Parser *p, Stmt *s, const Vec *names)
{
    const Kwarg *k = names->v;
    s->param_defs = arena_alloc(p->arena, (size_t)(names->n ? names->n : 1) * sizeof(Expr *));
    bool seen = false;
    for (int i = 0, j = 0; i < names->n && j < s->nparams; i++) {
        if (strcmp(k[i].key, s->params[j]) != 0 || k[i].key_loc.col != s->param_locs[j].col
            || k[i].key_loc.line != s->param_locs[j].line)
            continue;
        if (!k[i].value && seen)
            diag_error(k[i].key_loc, "parameter '%s' needs a default value: it follows one "
                       "that has one", k[i].key);
        seen |= k[i].value != NULL;
        s->param_defs[j++] = k[i].value;
    }
}

/* s->params from the list, each name once (`what` names them in errors). */
static void set_names(Parser *p, Stmt *s, const Vec *names, const char *what)
{
    const Kwarg *k = names->v;
    s->params = arena_alloc(p->arena, (size_t)names->n * sizeof(char *));
    s->param_locs = arena_alloc(p->arena, (size_t)names->n * sizeof(SrcLoc));
    for (int i = 0; i < names->n; i++) {
        bool twice = false;
        for (int j = 0; j < s->nparams && !twice; j++)
            twice = strcmp(s->params[j], k[i].key) == 0;
        if (twice) {
            diag_error(k[i].key_loc, "%s '%s' is named twice", what, k[i].key);
            continue;
        }
        s->params[s->nparams] = k[i].key;
        s->param_locs[s->nparams++] = k[i].key_loc;
    }
}

/* a, b, c = ...: the targets, each plain and once (kept as block
 * parameters are); the statement is named by, and located at, the first. */
static Stmt *unpack(Parser *p, Vec *names, const char *last, SrcLoc last_loc)
{
    add_name(p, names, last, last_loc);
    const Kwarg *k = names->v;
    Stmt *s = named(p, ST_UNPACK, k[0].key_loc, k[0].key, k[0].key_loc);
    set_names(p, s, names, "target");
    return s;
}

static void set_body(Stmt *s, Vec *body)
{
    s->body = body->v;
    s->nbody = body->n;
}

/* return's values (value: the first), or for's range [A, B] */
static void set_values(Stmt *s, Vec *values)
{
    s->values = values->v;
    s->nvalues = values->n;
    s->value = s->values[0];
}

static void set_dims(Stmt *s, Vec *dims)
{
    s->dims = dims->v;
    s->ndims = dims->n;
}

/* A parameter's initialiser is a call: zeros(), normal(0.02), ... */
static void check_init(Expr *init)
{
    if (init->kind == EX_CALL)
        return;
    if (init->kind == EX_NAME)
        diag_error(init->span, "expected an initializer call, found '%s' (write '%s()' to call it)",
                   init->name, init->name);
    else
        diag_error(init->span, "expected an initializer call such as zeros() or normal(0.02)");
}

/* A train block sets each key once. */
static void check_item(Parser *p, Vec *items, const TrainItem *it)
{
    if (strcmp(it->key, "minimize") != 0)
        plain(it->key, it->loc);
    for (int i = 0; i < items->n; i++) {
        const TrainItem *old = &((TrainItem *)items->v)[i];
        if (strcmp(old->key, it->key) == 0) {
            diag_error(it->loc, "'%s' is set twice in the train block", it->key);
            diag_note(old->loc, "'%s' was first set here", it->key);
            return;
        }
    }
    vec_push(p->arena, items, it, sizeof *it);
}

/* ---- syntax errors ------------------------------------------------------ */

/* Only reached if the parser stack overflows, which the scanner's nesting
 * bound is there to prevent; never silent all the same. */
static void yyerror(const SrcLoc *loc, Parser *p, const char *msg)
{
    diag_error(*loc, "nested too deeply (%s)", msg);
    p->stopped = true;
}

/* How a token kind is named in "expected ..." */
static const char *expected_name(yysymbol_kind_t k)
{
    switch (k) {
    case YYSYMBOL_NAME: return "a name";
    case YYSYMBOL_NUMBER: return "a number";
    case YYSYMBOL_STRING: return "a string";
    case YYSYMBOL_TYPE: return "a type (f32, f16, bf16, i32, u8 or u16)";
    default: return yysymbol_name(k);
    }
}

/* How the lookahead is named in "found ..." */
static void found_name(const yypcontext_t *ctx, Parser *p, char *buf, size_t n)
{
    yysymbol_kind_t k = yypcontext_token(ctx);
    if (k == YYSYMBOL_YYEOF || k == YYSYMBOL_NEWLINE) {
        snprintf(buf, n, "%s", yysymbol_name(k));
        return;
    }
    int len = p->tok_len;
    const char *dots = "";
    if (len > 40) {
        len = 37;
        dots = "...";
    }
    snprintf(buf, n, "'%.*s%s'", len, p->file->text + p->tok_off, dots);
}

typedef struct Group {
    int key;                    /* the group is used when this is expected */
    const char *say;
    int members[24];            /* token codes: NAME, '(' ..., then -1 */
} Group;

static const Group groups[] = {
    /* where a statement may start, an empty line or the end may come too */
    {MODEL, "a statement", {MODEL, CONST, INPUT, PARAM, BUFFER, METRIC, PRECISION, BLOCK, RETURN,
                            REPEAT, FOR, TRAIN, NAME, NEWLINE, END, -1}},
    {MINIMIZE, "a train setting", {MINIMIZE, PRECISION, NAME, NEWLINE, -1}},
    {NUMBER, "an expression", {NUMBER, STRING, NAME, TYPE, '(', '[', '-', -1}},
    /* '(' and '[' too: "a (" can go on as a call, but saying so is noise */
    {'*', "an operator", {'+', '-', '*', '/', '@', POW, IDIV, '%', '<', '>', LE_OP, GE_OP, EQ_OP,
                          NE_OP, '(', '[', -1}},
};

/* The phrases of "expected A, B or C": groups of tokens said in one
 * phrase ("an expression"), then single tokens. Returns how many. */
static int expected_parts(const yysymbol_kind_t *exp, int n, const char **parts)
{
    bool used[YYNTOKENS] = {0};
    int np = 0;
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        bool on = false;
        for (int i = 0; i < n; i++)
            on |= exp[i] == YYTRANSLATE(groups[g].key) && !used[exp[i]];
        if (!on)
            continue;
        parts[np++] = groups[g].say;
        for (int m = 0; groups[g].members[m] != -1; m++)
            used[YYTRANSLATE(groups[g].members[m])] = true;
    }
    for (int i = 0; i < n; i++)
        if (!used[exp[i]])
            parts[np++] = expected_name(exp[i]);
    return np;
}

static bool has(const yysymbol_kind_t *exp, int n, int tok)
{
    for (int i = 0; i < n; i++)
        if (exp[i] == YYTRANSLATE(tok))
            return true;
    return false;
}

/* "expected ...": the closer of the innermost open bracket alone when it
 * is the likely fix (Lua's "')' expected"), with "(to close '(' at line
 * 3)" when that bracket opened on another line; else every phrase. A '}'
 * is the likely fix only at end of file: elsewhere it is "end of line". */
static void say_expected(const yypcontext_t *ctx, Parser *p, const yysymbol_kind_t *exp, int n,
                         char *buf, size_t size)
{
    const char *parts[YYNTOKENS + 4];
    int np = expected_parts(exp, n, parts);
    const Bracket *b = p->has_open_before ? &p->open_before : NULL;
    int closer = !b ? 0 : b->ch == '(' ? ')' : b->ch == '[' ? ']' : '}';
    if (closer && !has(exp, n, closer))
        closer = 0;
    bool eof = yypcontext_token(ctx) == YYSYMBOL_YYEOF;
    if (closer == '}' ? eof : closer && np > 2 && !has(exp, n, NUMBER)) {
        np = 1;
        parts[0] = yysymbol_name(YYTRANSLATE(closer));
    }
    size_t at = (size_t)snprintf(buf, size, "expected ");
    for (int i = 0; i < np && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s", i == 0 ? "" : i == np - 1 ? " or " : ", ",
                               parts[i]);
    if (closer && (np == 1 || closer != '}') && at < size &&
        b->loc.line != yypcontext_location(ctx)->line)
        snprintf(buf + at, size - at, " (to close '%s' at line %d)", b->what, b->loc.line);
}

static int yyreport_syntax_error(const yypcontext_t *ctx, Parser *p)
{
    const SrcLoc *at = yypcontext_location(ctx);
    if (p->stopped || yypcontext_token(ctx) == YYSYMBOL_BAD)
        return 0;                          /* already said */
    yysymbol_kind_t exp[YYNTOKENS];
    int n = yypcontext_expected_tokens(ctx, exp, YYNTOKENS);
    char want[512], found[64];
    found_name(ctx, p, found, sizeof found);
    if (n <= 0) {
        diag_error(*at, "unexpected %s", found);
    } else {
        say_expected(ctx, p, exp, n, want, sizeof want);
        diag_error(*at, "%s, found %s", want, found);
    }
    if (p->has_open_before && p->open_before.loc.line < at->line)
        lex_drop_brackets(p);
    return 0;
}
