/* recompute.h - the memory phase: fusion, then the memory plan (memplan.h),
 * choosing under a budget which forward values the backward pass reads
 * from memory (kept) and which it recomputes from kept ones.
 *
 * Runs after memplan_fold_casts() and before the emitters (docs/DESIGN.md).
 * Without a budget nothing is recomputed. With one, the forward values the
 * backward pass reads are put in classes (a value, or the same value of
 * every copy of a `repeat`), ordered by the FLOPs their recomputation adds
 * per byte it frees (views and elementwise ops first, products last); each
 * class in turn is tried: a copy of each of its values (and of views of
 * them) is placed before the first backward node that reads it, that node
 * and the later readers read the copy, and the class stays recomputed when
 * the arena shrinks. The search stops when the budget is met. Copies run
 * the same kernels on the same values, so the results are bit-identical;
 * random ops (dropout, rand, randn, attention with dropout) and batch_norm
 * (running statistics) are always kept. Every trial is fused and planned as the program will be. */
#ifndef MPCC_RECOMPUTE_H
#define MPCC_RECOMPUTE_H

#include "ir.h"
#include <stdbool.h>

/* "6GiB", "4.5GB", "512MiB", "1000000": bytes (kB/MB/GB powers of 1000,
 * KiB/MiB/GiB of 1024); false when s is none of these or not positive. */
bool recompute_parse_size(const char *s, int64_t *out);

/* Fusion (when `fuse`) and the memory plan (g->mem), meeting `budget` bytes
 * (0: none) for memplan_step_bytes(). False after reporting an error at
 * `at` (exit 1) that names the smallest budget the search reaches. */
bool recompute_plan(IrGraph *g, int64_t budget, SrcLoc at, bool fuse);

/* The FLOPs of one step (cost.c's, forward and backward), and in *added
 * those of the recomputing copies among them. */
double recompute_flops(const IrGraph *g, double *added);

#endif
