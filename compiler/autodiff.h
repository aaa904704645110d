/* autodiff.h - reverse-mode differentiation of the forward graph.
 *
 * ad_backward() appends, after the forward nodes, an OP_LOSS_SCALE node on
 * g->loss (stored in g->loss_scale) and then the backward nodes in reverse
 * order of the forward nodes, each with phase PH_BACKWARD, grad_of set, loc
 * taken from grad_of, compute = grad_of->compute and type = the type of the
 * value whose gradient it is. Gradients of a value used several times are
 * summed with OP_ADD. Sets IrParam.grad for every trainable parameter the
 * loss depends on. Runs after prec_forward(), so it differentiates the
 * casts too (the gradient of a CAST is a CAST back). */
#ifndef MPCC_AUTODIFF_H
#define MPCC_AUTODIFF_H

#include "ir.h"

void ad_backward(IrGraph *g);

#endif
