/* sema_harness.h - lowering models from source text in cmocka tests
 * (test_sema.c, test_sema_blocks.c): lower_ok() and lower_err() run the
 * real parser and sema_lower(), the messages kept in `msgs`. */
#ifndef MPCC_SEMA_HARNESS_H
#define MPCC_SEMA_HARNESS_H

#include "ast.h"
#include "ops.h"
#include "sema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static Arena arena;
static char *msgs;
static size_t msgs_len;
static FILE *msgf;

static inline int setup(void **state)
{
    (void)state;
    arena_init(&arena);
    return 0;
}

static inline int teardown(void **state)
{
    (void)state;
    if (msgf)
        fclose(msgf);
    free(msgs);
    msgf = NULL;
    msgs = NULL;
    arena_free(&arena);
    return 0;
}

/* From here on, messages land in `msgs` (the last ones dropped). */
static inline void capture_msgs(void)
{
    if (msgf)
        fclose(msgf);
    free(msgs);
    msgs = NULL;
    msgf = open_memstream(&msgs, &msgs_len);
    diag_init(msgf);
}

/* Parses and lowers src; messages land in `msgs`. */
static inline IrGraph *lower_policy(const char *src, int policy)
{
    capture_msgs();
    SrcFile *f = arena_alloc(&arena, sizeof *f);
    f->path = "t.mp";
    f->text = src;
    f->len = (long)strlen(src);
    Ast *ast = ast_parse(&arena, f);
    if (diag_error_count()) {
        fflush(msgf);
        fail_msg("the test's model does not parse:\n%s", msgs);
    }
    IrGraph *g = sema_lower(&arena, ast, policy);
    fflush(msgf);
    return g;
}

static inline IrGraph *lower_ok(const char *src)
{
    IrGraph *g = lower_policy(src, -1);
    if (!g)
        fail_msg("unexpected errors:\n%s", msgs);
    assert_int_equal(diag_error_count(), 0);
    return g;
}

static inline void lower_err(const char *src, const char *text)
{
    IrGraph *g = lower_policy(src, -1);
    if (g)
        fail_msg("expected an error containing \"%s\", got none", text);
    if (!strstr(msgs, text))
        fail_msg("expected an error containing \"%s\", got:\n%s", text, msgs);
}

#define HEAD "model m\nconst B = 4\ninput x: f32[B, 8]\ninput y: i32[B]\n"
#define TRAIN "train {\n  optimizer = adam(lr = 1e-3)\n  minimize loss\n}\n"
#define LOSS "loss = cross_entropy(linear(z, 3, name = \"out\"), y)\n"

static inline IrParam *param(IrGraph *g, const char *name)
{
    IrParam *p = ir_find_param(g, name);
    if (!p)
        fail_msg("no parameter '%s'", name);
    return p;
}

static inline void expect_param(IrGraph *g, const char *name, int rank, int64_t d0, int64_t d1)
{
    IrParam *p = param(g, name);
    assert_int_equal(p->shape.rank, rank);
    assert_int_equal(p->shape.d[0], d0);
    if (rank > 1)
        assert_int_equal(p->shape.d[1], d1);
}

/* The last node made for a named value. */
static inline IrNode *named(IrGraph *g, const char *name)
{
    for (int i = g->nnodes - 1; i >= 0; i--)
        if (g->nodes[i]->name && strcmp(g->nodes[i]->name, name) == 0)
            return g->nodes[i];
    fail_msg("no node named '%s'", name);
    return NULL;
}

typedef struct Case {
    const char *src, *want;
} Case;

static inline void run_cases(const Case *cases, int n)
{
    for (int i = 0; i < n; i++)
        lower_err(cases[i].src, cases[i].want);
}
#define RUN(cases) run_cases(cases, (int)(sizeof cases / sizeof cases[0]))

#endif
