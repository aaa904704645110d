/* sema.h - semantic analysis: AST -> forward IR.
 *
 * Resolves names (suggesting the nearest known one on a miss), folds
 * constants (integer arithmetic checked for overflow), expands blocks and
 * `repeat` with the spec's parameter naming, declares parameters with their
 * initialisers, calls the shape rule of every node it makes, and reads the
 * train block into g->train. Errors go through diag_error() and analysis
 * goes on; returns NULL if there was any error. */
#ifndef MPCC_SEMA_H
#define MPCC_SEMA_H

#include "ast.h"
#include "ir.h"

/* policy_override: DT_NONE-like -1 for none, else a Policy (--precision). */
IrGraph *sema_lower(Arena *a, const Ast *ast, int policy_override);

#endif
