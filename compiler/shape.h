/* shape.h - shape checks shared by the shape rules and semantic analysis.
 *
 * The shape rules themselves (`shape_<ID>`, one per row of ops.def) are
 * reached through op_info[op].shape (ops.h). The helpers here let sema.c
 * check an operand before it can build the node -- e.g. conv2d needs the
 * input's channel count to declare its weight -- with the same wording the
 * rules use. All arithmetic on dimensions is checked: an overflow is a
 * user error ("too many elements"), never undefined behaviour. */
#ifndef MPCC_SHAPE_H
#define MPCC_SHAPE_H

#include "ir.h"

/* Largest element count of any tensor: its size in bytes (8 per element at
 * most) must fit in an int64_t, so every later product of it is safe. */
#define SHAPE_MAX_NUMEL (INT64_MAX / 8)

/* Element count of s in *out; false if it exceeds SHAPE_MAX_NUMEL. */
bool shape_numel_checked(const Shape *s, int64_t *out);

/* Checks that s has a rank in [lo, hi]; otherwise reports at `at`:
 * "<op> needs <layout>, got <s>", e.g. "conv2d needs NCHW input
 * [N, C, H, W], got [128, 784]". */
bool shape_expect_rank(IrGraph *g, SrcLoc at, const char *op, const char *layout,
                       const Shape *s, int lo, int hi);

/* Checks that t is a float type (or DT_NONE: a float the precision pass
 * chooses). Otherwise reports "<op> needs a float tensor, got u8: cast it
 * first, e.g. f32(<name>)". */
bool shape_expect_float(SrcLoc at, const char *op, DType t, const char *name);

/* The op as messages name it: "'+'" for the infix operators, else its name. */
const char *shape_op_name(IrOp op);

#endif
