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
 * the group reads it before that end.
 *
 * Epilogues: a product (fuse_is_product) may head a group, its members the
 * elementwise ops that consume it (bias add, activation, casts). The
 * product's value is rounded to its own type first, as the unfused store
 * rounds it, then the chain runs as in any group; it is stored only when
 * something outside the group reads it (the backward pass, say). */
#ifndef MPCC_FUSE_H
#define MPCC_FUSE_H

#include "ir.h"

/* A matrix product as the GEMM runs it: `batch` products of [m, k] @
 * [k, n], operand a's i-th starting sa elements after the (i-1)-th (0:
 * shared), likewise b; a batched a @ b with one b folds its batch into m. */
typedef struct ProductDims {
    long long batch, m, n, k, sa, sb;
    int ta, tb;
} ProductDims;

ProductDims fuse_matmul_dims(const IrNode *n);

/* n is a product whose output the GEMM writes in one call, row-major
 * [M, N] (linear, or a matmul of batch 1): it can head a fusion group
 * whose elementwise members run in the GEMM's store (MpGemm.epi, the C
 * program) or as one kernel right after it (the CUDA program). */
bool fuse_is_product(const IrNode *n);

/* Marks the fusion groups of g; returns how many. */
int fuse_graph(IrGraph *g);

/* The last (highest id) node of n's group, or n when n is in none. */
const IrNode *fuse_last(const IrGraph *g, const IrNode *n);

/* The per-element C expression of n with its inputs named by `in` (C
 * expressions of f32 values), as the unfused kernel computes it before
 * rounding to n->type; NULL when n cannot fuse. */
const char *fuse_expr(Arena *a, const IrNode *n, const char *const *in);

#endif
