/* sema.h - semantic analysis: AST -> forward IR.
 *
 * Resolves names (suggesting the nearest known one on a miss), folds
 * constants (integer arithmetic checked for overflow), expands blocks and
 * `repeat` with the spec's parameter naming, declares parameters with their
 * initialisers, calls the shape rule of every node it makes, and reads the
 * train block into g->train. Errors go through diag_error() and analysis
 * goes on; returns NULL if there was any error.
 *
 * Also fills what later phases rely on: n->override on the forward nodes of
 * typed assignments and precision regions (and on user casts), n->name on
 * the node holding each statement's value, IrInput.classes for inputs read
 * as class labels or embedding ids, batch-norm running statistics and
 * `buffer`s as non-trainable parameters, IrParam.no_decay from the
 * optimizer's no_decay patterns, IrInput.window, and the train block's
 * defaults (loss scale dynamic under mixed_float16, none otherwise; adamw
 * weight decay 0.01). Names of saved tensors are torch module paths
 * ("transformer.h.0.mlp.c_fc.weight"): malformed ones, and a name that is
 * both a tensor and a module, are errors.
 * Expansion is bounded (at most 1,000,000 operations, repeat counts up to
 * 100,000, block calls 64 deep): a model past a bound gets an error. */
#ifndef MPCC_SEMA_H
#define MPCC_SEMA_H

#include "ast.h"
#include "ir.h"

/* policy_override: DT_NONE-like -1 for none, else a Policy (--precision). */
IrGraph *sema_lower(Arena *a, const Ast *ast, int policy_override);

/* The built-in operations a model calls, by index (NULL past the last):
 * a block may take one of these names and is then used in its place. */
const char *sema_builtin_name(int i);

#endif
