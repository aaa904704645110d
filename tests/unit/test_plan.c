/* test_plan.c - `--dump-plan` on the hand-built MLP (prec_graphs.h): the
 * JSON parses (a small strict checker below) and has PRECISION.md's keys
 * and values, the text table's columns line up, the dot graph is
 * well-formed. The real examples are checked through ./mpcc by
 * tests/t_plan_rules.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "plan.h"
#include "prec.h"
#include "prec_graphs.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

static Arena arena;

static int setup(void **state)
{
    arena_init(&arena);
    return 0;
}

static int teardown(void **state)
{
    arena_free(&arena);
    return 0;
}

static Mlp planned_mlp(Policy p)
{
    Mlp m = build_mlp(&arena, p);
    prec_forward(m.g);
    fake_backward(&m);
    prec_finish(m.g);
    return m;
}

static char *dump(const IrGraph *g, PlanFormat fmt)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    plan_dump(f, g, fmt);
    long len = ftell(f);
    rewind(f);
    char *s = arena_alloc(&arena, (size_t)len + 1);
    assert_int_equal(fread(s, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    return s;
}

/* ---- a strict JSON checker (RFC 8259 grammar, no semantics) ----------- */

static const char *json_value(const char *p);

static const char *ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
        p++;
    return p;
}

static const char *json_string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    for (; *p != '"'; p++) {
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!isxdigit((unsigned char)p[i]))
                        return NULL;
                p += 4;
            } else if (!strchr("\"\\/bfnrt", *p) || !*p)
                return NULL;
        }
    }
    return p + 1;
}

static const char *json_number(const char *p)
{
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (isdigit((unsigned char)*p))
        while (isdigit((unsigned char)*p))
            p++;
    else
        return NULL;
    if (*p == '.') {
        if (!isdigit((unsigned char)*++p))
            return NULL;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return NULL;
        while (isdigit((unsigned char)*p))
            p++;
    }
    return p;
}

static const char *json_seq(const char *p, char close, bool object)
{
    p = ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (object) {
            p = json_string(ws(p));
            if (!p || *(p = ws(p)) != ':')
                return NULL;
            p++;
        }
        p = json_value(p);
        if (!p)
            return NULL;
        p = ws(p);
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
    }
}

static const char *json_value(const char *p)
{
    p = ws(p);
    if (*p == '{')
        return json_seq(p, '}', true);
    if (*p == '[')
        return json_seq(p, ']', false);
    if (*p == '"')
        return json_string(p);
    for (const char *const *lit = (const char *const[]){"true", "false", "null", NULL}; *lit; lit++)
        if (strncmp(p, *lit, strlen(*lit)) == 0)
            return p + strlen(*lit);
    return json_number(p);
}

static bool json_valid(const char *s)
{
    const char *end = json_value(s);
    return end && *ws(end) == 0;
}

static void test_json_checker(void **state)
{
    assert_true(json_valid("{\"a\": [1, -2.5e3, true, null, \"x\\\"y\\u00e9\"], \"b\": {}}\n"));
    assert_false(json_valid("{\"a\": 1,}"));
    assert_false(json_valid("{\"a\": nan}"));
    assert_false(json_valid("{\"a\": \"x\ny\"}"));
    assert_false(json_valid("[1] 2"));
    assert_false(json_valid("{\"a\" 1}"));
}

/* ---- json ---------------------------------------------------------------- */

static void test_json_keys(void **state)
{
    Mlp m = planned_mlp(POLICY_MIXED_F16);
    char *s = dump(m.g, PLAN_JSON);
    assert_true(json_valid(s));
    assert_non_null(strstr(s, "{\"model\": \"mlp\", \"policy\": \"mixed_float16\""));
    assert_non_null(strstr(s, "\"loss_scale\": {\"kind\": \"dynamic\", \"init\": 32768, "
                              "\"growth\": 2, \"backoff\": 0.5, \"interval\": 2000}"));
    assert_non_null(strstr(s, "{\"name\": \"h.weight\", \"shape\": [3, 6], \"master\": \"f32\", "
                              "\"copies\": [\"f16\"]"));
    assert_non_null(strstr(s, "{\"name\": \"logits.weight\", \"shape\": [2, 3], \"master\": \"f32\", "
                              "\"copies\": []"));
    /* the first linear, as PRECISION.md's example shows a node */
    char *want = arena_printf(&arena,
        "{\"id\": %d, \"phase\": \"forward\", \"line\": 4, \"name\": null, \"op\": \"linear\", "
        "\"class\": \"lowp\", \"rule\": \"class\", \"compute\": \"f16\", \"inputs\": "
        "[{\"from\": %d, \"type\": \"f16\", \"cast\": true}, {\"from\": %d, \"type\": \"f16\", "
        "\"cast\": true}, {\"from\": %d, \"type\": \"f16\", \"cast\": true}], "
        "\"shape\": [4, 3], \"type\": \"f16\"}", m.lin1->id, m.lin1->in[0]->id,
        m.lin1->in[1]->id, m.lin1->in[2]->id);
    assert_non_null(strstr(s, want));
    assert_non_null(strstr(s, "\"op\": \"cast\", \"class\": \"none\", \"rule\": \"cast\""));
    assert_non_null(strstr(s, "\"rule\": \"override\", \"compute\": \"f32\""));
    assert_non_null(strstr(s, "\"phase\": \"backward\""));
    assert_non_null(strstr(s, "\"phase\": \"optimizer\""));
    assert_non_null(strstr(s, "\"op\": \"unscale\""));
    /* by hand: lowp = linear, relu, relu_grad, matmul_tn, sum_to; f32 =
     * div, linear, cross_entropy, accuracy + 4 of the backward; casts: 5
     * forward (2 hoisted), 3 backward */
    assert_non_null(strstr(s, "\"summary\": {\"lowp_ops\": 5, \"f32_ops\": 8, \"casts\": 8, "
                              "\"hoisted_casts\": 2, \"activation_bytes\": 172, "
                              "\"activation_bytes_f32\": 244}"));
}

static void test_json_policies(void **state)
{
    Mlp m = planned_mlp(POLICY_MIXED_BF16);
    char *s = dump(m.g, PLAN_JSON);
    assert_true(json_valid(s));
    assert_non_null(strstr(s, "\"loss_scale\": {\"kind\": \"none\"}"));
    assert_non_null(strstr(s, "\"copies\": [\"bf16\"]"));
    assert_null(strstr(s, "\"unscale\""));
    assert_int_equal(count_op(m.g, OP_UNSCALE), 0);
    m = planned_mlp(POLICY_FLOAT32);
    s = dump(m.g, PLAN_JSON);
    assert_true(json_valid(s));
    assert_null(strstr(s, "\"f16\""));
    assert_null(strstr(s, "\"bf16\""));
    m = build_mlp(&arena, POLICY_MIXED_F16);
    m.g->train.ls = LS_STATIC;
    m.g->train.ls_set = true;
    m.g->train.ls_init = 128;
    prec_forward(m.g);
    s = dump(m.g, PLAN_JSON);
    assert_non_null(strstr(s, "\"loss_scale\": {\"kind\": \"static\", \"init\": 128}"));
}

static void test_json_escapes(void **state)
{
    Mlp m = build_mlp(&arena, POLICY_MIXED_F16);
    m.g->model = "odd \"name\" \\ with\ttab";
    m.x->name = "x\n";
    m.g->train.clip = 0.1;
    prec_forward(m.g);
    char *s = dump(m.g, PLAN_JSON);
    assert_true(json_valid(s));
    assert_non_null(strstr(s, "\"odd \\\"name\\\" \\\\ with\\u0009tab\""));
    assert_non_null(strstr(s, "\"clip_grad_norm\": 0.1,"));   /* shortest round trip */
}

/* ---- text ---------------------------------------------------------------- */

/* Every row of every phase table has its compute type where the header
 * says "compute", and its class under "class". */
static void check_columns(const char *s)
{
    int tables = 0;
    for (const char *hdr = strstr(s, "\n  id  "); hdr; hdr = strstr(hdr + 1, "\n  id  ")) {
        tables++;
        const char *line = hdr + 1;
        size_t at_cls = (size_t)(strstr(line, "class") - line);
        size_t at_cmp = (size_t)(strstr(line, "compute") - line);
        int rows = 0;
        for (line = strchr(line, '\n') + 1; *line && *line != '\n'; line = strchr(line, '\n') + 1) {
            const char *c = line + at_cmp;
            assert_true(strncmp(c, "f32 ", 4) == 0 || strncmp(c, "f16 ", 4) == 0 ||
                        strncmp(c, "i32 ", 4) == 0 || strncmp(c, "u8 ", 3) == 0);
            c = line + at_cls;
            assert_true(strncmp(c, "lowp", 4) == 0 || strncmp(c, "fp32", 4) == 0 ||
                        strncmp(c, "follow", 6) == 0 || strncmp(c, "none", 4) == 0);
            rows++;
        }
        assert_true(rows > 0);
    }
    assert_int_equal(tables, 3);
}

static void test_text(void **state)
{
    Mlp m = planned_mlp(POLICY_MIXED_F16);
    char *s = dump(m.g, PLAN_TEXT);
    assert_non_null(strstr(s, "precision plan of model mlp (t.mp)\n"));
    assert_non_null(strstr(s, "policy mixed_float16: lowp type f16"));
    assert_non_null(strstr(s, "\nforward pass ("));
    assert_non_null(strstr(s, "\nbackward pass ("));
    assert_non_null(strstr(s, "\noptimizer pass ("));
    assert_non_null(strstr(s, "id  line  name"));
    assert_non_null(strstr(s, "compute  output"));
    assert_non_null(strstr(s, "[4, 3] f16"));
    assert_non_null(strstr(s, "  none    user      f32      [4, 6] f32  #0 u8\n"));
    assert_non_null(strstr(s, arena_printf(&arena, "#%d f16*", m.lin1->in[0]->id)));
    assert_non_null(strstr(s, "\nloss scaling: dynamic (policy mixed_float16)\n"));
    assert_non_null(strstr(s, "S = S x 0.5"));
    assert_non_null(strstr(s, "after 2000 good steps in a row S = S x 2"));
    assert_non_null(strstr(s, arena_printf(&arena, "f16 (#%d)", m.lin1->in[1]->id)));
    assert_non_null(strstr(s, "logits.weight  [2, 3]  f32     none\n"));
    assert_non_null(strstr(s, "operations   5 in f16, 8 in f32; 8 casts (2 hoisted"));
    assert_non_null(strstr(s, "172 bytes (172 B) kept for the backward pass under mixed_float16"));
    check_columns(s);
    /* the forward table fits in 120 columns for this model */
    const char *end = strstr(s, "\nbackward pass");
    for (const char *l = s; l < end; l = strchr(l, '\n') + 1)
        assert_true(strchr(l, '\n') - l <= 120);
}

static void test_text_no_scaling(void **state)
{
    Mlp m = planned_mlp(POLICY_MIXED_BF16);
    char *s = dump(m.g, PLAN_TEXT);
    assert_non_null(strstr(s, "loss scaling: none (policy mixed_bfloat16)\n  S = 1"));
}

/* ---- dot ----------------------------------------------------------------- */

static void test_dot(void **state)
{
    Mlp m = planned_mlp(POLICY_MIXED_F16);
    m.g->model = "a \"b\"";
    char *s = dump(m.g, PLAN_DOT);
    assert_true(strncmp(s, "digraph \"a \\\"b\\\"\" {\n", 19) == 0);
    assert_true(strcmp(s + strlen(s) - 2, "}\n") == 0);
    int depth = 0, edges = 0, inputs = 0;
    bool in_str = false;
    for (const char *p = s; *p; p++) {
        if (in_str && *p == '\\')
            p++;
        else if (*p == '"')
            in_str = !in_str;
        else if (!in_str && *p == '{')
            depth++;
        else if (!in_str && *p == '}')
            assert_true(--depth >= 0);
    }
    assert_false(in_str);
    assert_int_equal(depth, 0);
    for (int i = 0; i < m.g->nnodes; i++) {
        const IrNode *n = m.g->nodes[i];
        assert_non_null(strstr(s, arena_printf(&arena, "    n%d [label=", i)));
        for (int k = 0; k < n->nin; k++) {
            const char *e = strstr(s, arena_printf(&arena, "  n%d -> n%d [xlabel=\"%s\"];\n",
                                                   n->in[k]->id, i, dt_name(n->in[k]->type)));
            /* an optimizer step is drawn reading its gradient only */
            if (n->phase == PH_OPTIMIZER && n->in[k]->op == OP_PARAM)
                assert_null(e);
            else {
                assert_non_null(e);
                inputs++;
            }
        }
    }
    for (const char *p = strstr(s, " -> "); p; p = strstr(p + 1, " -> "))
        edges++;
    assert_int_equal(edges, inputs);
    assert_non_null(strstr(s, "subgraph cluster_forward {"));
    assert_non_null(strstr(s, "subgraph cluster_backward {"));
    assert_non_null(strstr(s, "subgraph cluster_optimizer {"));
    assert_non_null(strstr(s, arena_printf(&arena, "n%d [label=\"#%d cast\\nh.weight\\n[3, 6] f16\", "
                                           "fillcolor=\"#fdae6b\", shape=diamond]",
                                           m.lin1->in[1]->id, m.lin1->in[1]->id)));
}

int main(void)
{
    diag_init(stderr);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_checker),
        cmocka_unit_test_setup_teardown(test_json_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_policies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_escapes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_no_scaling, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dot, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
