/* fuse.h - the fusion pass: chains of elementwise nodes run as one pass
 * over memory (one loop in the C program, one `each` kernel in the CUDA
 * program), their intermediate values kept in registers.
 *
 * Runs after prec_finish(), shared by both targets and the plan dump. It
 * only marks nodes (IrNode.fused, IrNode.fused_internal); memplan.c gives
 * internal values no buffer and the emitters write a group where its last
 * node stands. Results are bit-identical with and without fusion: every
 * node's value is rounded to its storage type where the unfused kernel
 * stores it (fuse_expr() is the per-element math the unfused kernels use).
 *
 * What a group is: nodes of one phase with the same element count, each
 * elementwise with float storage (fuse_expr() != NULL), each input either
 * of that element count or a single element (a constant), and joined by a
 * value edge. A member's value is stored when anything outside the group
 * reads it (saved activations, the backward pass), when it is the loss, a
 * metric or a named value of the forward pass; otherwise it is internal.
 * Moving a member to the group's end is allowed only when nothing outside
 * the group reads it before that end. */
#ifndef MPCC_FUSE_H
#define MPCC_FUSE_H

#include "ir.h"

/* Marks the fusion groups of g; returns how many. */
int fuse_graph(IrGraph *g);

/* The last (highest id) node of n's group, or n when n is in none. */
const IrNode *fuse_last(const IrGraph *g, const IrNode *n);

/* The per-element C expression of n with its inputs named by `in` (C
 * expressions of f32 values), as the unfused kernel computes it before
 * rounding to n->type; NULL when n cannot fuse. */
const char *fuse_expr(Arena *a, const IrNode *n, const char *const *in);

#endif
