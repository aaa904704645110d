/* test_ops.c - the op table (ops.def) is complete and consistent.
 *
 * Table-driven over every row: names unique, ops_lookup finds exactly the
 * FWD rows, every row has a shape rule, every FWD row a gradient, and each
 * FWD op's precision class is the one LANGUAGE.md's table gives it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "ops.h"

#include <string.h>

static void names_unique(void **state)
{
    (void)state;
    for (int i = 0; i < OP__COUNT; i++) {
        assert_non_null(op_info[i].name);
        assert_true(strlen(op_info[i].name) > 0);
        for (int j = 0; j < i; j++)
            if (strcmp(op_info[i].name, op_info[j].name) == 0)
                fail_msg("ops %d and %d are both named '%s'", i, j, op_info[i].name);
    }
}

static void every_row_has_a_shape_rule(void **state)
{
    (void)state;
    for (int i = 0; i < OP__COUNT; i++)
        if (!op_info[i].shape)
            fail_msg("op '%s' has no shape rule", op_info[i].name);
}

static void fwd_rows_have_gradients_and_classes(void **state)
{
    (void)state;
    int nfwd = 0;
    for (int i = 0; i < OP__COUNT; i++) {
        const OpInfo *o = &op_info[i];
        assert_true(o->cls >= CL_NONE && o->cls <= CL_FOLLOW);
        assert_true(o->kind >= OPK_DATA && o->kind <= OPK_STEP);
        assert_true(o->nin >= -1 && o->nin <= 5);
        if (o->kind == OPK_FWD) {
            nfwd++;
            if (!o->grad)
                fail_msg("FWD op '%s' has no gradient", o->name);
        }
        if (o->kind == OPK_BWD || o->kind == OPK_STEP)
            assert_null(o->grad);
    }
    assert_true(nfwd >= 30);
}

static void lookup_finds_exactly_fwd_ops(void **state)
{
    (void)state;
    for (int i = 0; i < OP__COUNT; i++) {
        int found = ops_lookup(op_info[i].name);
        if (op_info[i].kind == OPK_FWD)
            assert_int_equal(found, i);
        else
            assert_int_equal(found, -1);
    }
    assert_int_equal(ops_lookup("rleu"), -1);
    assert_int_equal(ops_lookup(""), -1);
    assert_int_equal(ops_lookup("RELU"), -1);
}

/* LANGUAGE.md's table of built-in operations, class by class. */
static const struct {
    const char *name;
    PrecClass cls;
} spec_classes[] = {
    {"matmul", CL_LOWP}, {"linear", CL_LOWP}, {"conv2d", CL_LOWP}, {"embedding", CL_LOWP},
    {"attention", CL_LOWP},
    {"add", CL_FOLLOW}, {"sub", CL_FOLLOW}, {"mul", CL_FOLLOW}, {"div", CL_FOLLOW},
    {"neg", CL_FOLLOW}, {"relu", CL_FOLLOW}, {"gelu", CL_FOLLOW}, {"tanh", CL_FOLLOW},
    {"sigmoid", CL_FOLLOW}, {"silu", CL_FOLLOW}, {"dropout", CL_FOLLOW},
    {"max_pool2d", CL_FOLLOW}, {"avg_pool2d", CL_FOLLOW}, {"global_avg_pool", CL_FOLLOW},
    {"reshape", CL_NONE}, {"transpose", CL_NONE}, {"flatten", CL_NONE},
    {"chunk", CL_NONE}, {"slice", CL_NONE}, {"concat", CL_NONE}, {"expand", CL_NONE},
    {"arange", CL_NONE},
    {"exp", CL_FP32}, {"log", CL_FP32}, {"sqrt", CL_FP32}, {"rsqrt", CL_FP32}, {"sum", CL_FP32},
    {"mean", CL_FP32}, {"softmax", CL_FP32}, {"log_softmax", CL_FP32}, {"layer_norm", CL_FP32},
    {"batch_norm", CL_FP32}, {"cross_entropy", CL_FP32}, {"mse", CL_FP32}, {"accuracy", CL_FP32},
    /* "Additions for real architectures" */
    {"abs", CL_FOLLOW}, {"sin", CL_FOLLOW}, {"cos", CL_FOLLOW}, {"maximum", CL_FOLLOW},
    {"minimum", CL_FOLLOW}, {"clamp", CL_FOLLOW}, {"pow", CL_FP32}, {"rms_norm", CL_FP32},
    {"rope", CL_FOLLOW},
    /* "Randomness" (randn_like and rand_like are randn and rand nodes) */
    {"randn", CL_FOLLOW}, {"rand", CL_FOLLOW},
    /* "Selection, comparison, masks"; zeros / ones / full */
    {"gt", CL_FOLLOW}, {"lt", CL_FOLLOW}, {"ge", CL_FOLLOW}, {"le", CL_FOLLOW}, {"eq", CL_FOLLOW},
    {"ne", CL_FOLLOW}, {"where", CL_FOLLOW}, {"detach", CL_NONE}, {"full", CL_NONE},
    {"max", CL_FP32}, {"min", CL_FP32}, {"argmax", CL_NONE}, {"argmin", CL_NONE},
    /* routing and indexing */
    {"topk", CL_FOLLOW}, {"one_hot", CL_NONE}, {"gather", CL_NONE}, {"cumsum", CL_FP32},
    /* recurrent layers: their products lowp, the cells f32 inside the op */
    {"gru", CL_LOWP}, {"lstm", CL_LOWP},
    /* "Convolution, padding, resampling" */
    {"conv_transpose2d", CL_LOWP}, {"pad", CL_NONE}, {"upsample", CL_FOLLOW},
    {"group_norm", CL_FP32},
};

static void classes_match_the_spec(void **state)
{
    (void)state;
    int n = (int)(sizeof spec_classes / sizeof spec_classes[0]);
    for (int i = 0; i < n; i++) {
        int op = ops_lookup(spec_classes[i].name);
        if (op < 0)
            fail_msg("the language's operation '%s' is not a FWD row", spec_classes[i].name);
        if (op_info[op].cls != spec_classes[i].cls)
            fail_msg("'%s' has class %d, LANGUAGE.md says %d", spec_classes[i].name, op_info[op].cls,
                     spec_classes[i].cls);
    }
    /* and every FWD row is one of the language's operations */
    int nfwd = 0;
    for (int i = 0; i < OP__COUNT; i++)
        nfwd += op_info[i].kind == OPK_FWD;
    assert_int_equal(nfwd, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_unique),
        cmocka_unit_test(every_row_has_a_shape_rule),
        cmocka_unit_test(fwd_rows_have_gradients_and_classes),
        cmocka_unit_test(lookup_finds_exactly_fwd_ops),
        cmocka_unit_test(classes_match_the_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
