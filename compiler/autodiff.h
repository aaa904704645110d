/* autodiff.h - reverse-mode differentiation of the forward graph.
 *
 * ad_backward() appends, after the forward nodes, an OP_LOSS_SCALE node on
 * g->loss (stored in g->loss_scale) and then the backward nodes in reverse
 * order of the forward nodes, each with phase PH_BACKWARD, grad_of set, loc
 * taken from grad_of, compute = grad_of->compute and type = the type of the
 * value whose gradient it is. Gradients of a value used several times are
 * summed with OP_ADD. Sets IrParam.grad for every trainable parameter the
 * loss depends on. Runs after prec_forward(), so it differentiates the
 * casts too (the gradient of a CAST is a CAST back).
 *
 * Gradient rules (GradFn, ops.h): on entry dx[i] is non-NULL (it holds
 * n->in[i]) exactly when input i wants a gradient -- a float value that
 * depends on a trainable parameter and that the loss depends on -- and the
 * rule replaces those, and only those, with the nodes it appends. */
#ifndef MPCC_AUTODIFF_H
#define MPCC_AUTODIFF_H

#include "ir.h"

void ad_backward(IrGraph *g);

/* The invariants above, checked on every backward node and parameter
 * after ad_backward(), and that each backward node's shape is what its
 * op's shape rule (shape.c) computes on a copy. Prints each violation to
 * stderr; true when there is none. For tests. */
bool ad_check(IrGraph *g);

#endif
