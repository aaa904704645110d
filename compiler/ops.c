/* ops.c - the info table of ops.def, and name lookup.
 *
 * Every row names its shape rule shape_<ID> (shape.c) and, for ops that are
 * differentiated, its gradient grad_<ID> (autodiff.c): a missing function is
 * a link error, so no op can lack its rules. BWD and STEP rows have no
 * gradient (mpcc does not take second derivatives). */
#include "ops.h"

#include <string.h>

#define OP(id, name, nin, cls, kind) ShapeFn shape_##id;
#include "ops.def"
#undef OP
#define GRAD_DATA(id) grad_##id
#define GRAD_FWD(id)  grad_##id
#define GRAD_BWD(id)  NULL
#define GRAD_STEP(id) NULL
#define DECL_DATA(id) GradFn grad_##id;
#define DECL_FWD(id)  GradFn grad_##id;
#define DECL_BWD(id)
#define DECL_STEP(id)
#define OP(id, name, nin, cls, kind) DECL_##kind(id)
#include "ops.def"
#undef OP

const OpInfo op_info[OP__COUNT] = {
#define OP(id, name, nin, cls, kind) \
    [OP_##id] = {name, nin, CL_##cls, OPK_##kind, shape_##id, GRAD_##kind(id)},
#include "ops.def"
#undef OP
};

int ops_lookup(const char *name)
{
    for (int i = 0; i < OP__COUNT; i++)
        if (op_info[i].kind == OPK_FWD && strcmp(op_info[i].name, name) == 0)
            return i;
    return -1;
}

bool ops_is_loss(IrOp op)
{
    static const bool loss[OP__COUNT] = {[OP_CROSS_ENTROPY] = true, [OP_MSE] = true};
    return op >= 0 && op < OP__COUNT && loss[op];
}
