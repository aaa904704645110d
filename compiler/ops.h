/* ops.h - facts about each operation, from the table in ops.def. */
#ifndef MPCC_OPS_H
#define MPCC_OPS_H

#include "ir.h"

typedef enum { OPK_DATA, OPK_FWD, OPK_BWD, OPK_STEP } OpKind;

/* Shape rule: sets n->shape (and n->type where the op decides it, e.g.
 * integer outputs); reports a user error with diag_error(n->loc, ...) and
 * returns false when the inputs do not fit. Defined in shape.c. */
typedef bool ShapeFn(IrGraph *g, IrNode *n);

/* Gradient rule: appends the nodes computing the gradients of n's inputs
 * given dy (the gradient of n's output) and stores them in dx[i] (NULL for
 * an input with no gradient). Defined in autodiff.c; NULL for ops that are
 * not differentiated (BWD and STEP rows, metrics, integer-valued ops). */
typedef void GradFn(IrGraph *g, IrNode *n, IrNode *dy, IrNode **dx);

typedef struct OpInfo {
    const char *name;
    int nin;
    PrecClass cls;
    OpKind kind;
    ShapeFn *shape;
    GradFn *grad;
} OpInfo;

extern const OpInfo op_info[OP__COUNT];

/* The op whose language name is `name`, or -1. Only FWD ops are named. */
int ops_lookup(const char *name);

/* A loss operation (cross_entropy, mse): a scalar computed from one
 * prediction, the value --predict writes by default. */
bool ops_is_loss(IrOp op);

#endif
