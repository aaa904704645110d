/* memplan.h - where each value of one training step lives.
 *
 * One arena per program, cut into buffers by liveness: the step runs the
 * hoisted casts (working copies), then the forward and backward nodes in
 * g->nodes order; a value's buffer is live from the node that makes it to
 * the last node that reads it (hoisted casts: the whole step). Buffers whose
 * live ranges do not overlap share bytes (greedy by size, as TFLite's
 * arena planner). Views that keep the layout (reshape, flatten) share their
 * input's buffer, and so does a chunk that attention reads in place
 * (ir_chunk_view), at an offset into it. The loss and metrics live to the
 * end of the step (the runtime reads them then). Parameters, inputs and
 * constants have no arena buffer: the runtime owns them. Both code
 * generators use this plan, so the C and CUDA programs have the same
 * memory layout. */
#ifndef MPCC_MEMPLAN_H
#define MPCC_MEMPLAN_H

#include "ir.h"

#define MEMPLAN_ALIGN 256          /* bytes; enough for any vector load */

typedef enum {
    BUF_ARENA,                     /* offset[] into the arena */
    BUF_ALIAS,                     /* shares root[]'s buffer (a view) */
    BUF_PARAM,                     /* the parameter's f32 master weights */
    BUF_INPUT,                     /* the input's batch buffer */
    BUF_CONST,                     /* a scalar constant */
    BUF_NONE,                      /* optimizer nodes: no value */
} BufKind;

/* What an arena buffer holds, for the plan's summary. */
typedef enum {
    MEM_WORK,                      /* working copies of parameters (hoisted casts) */
    MEM_ACT,                       /* forward values (activations) */
    MEM_GRAD,                      /* backward values (gradients) */
    MEM__KINDS
} MemKind;

MemKind memplan_kind(const IrNode *n);
extern const char *const memplan_kind_name[MEM__KINDS];

typedef struct MemPlan {
    BufKind *kind;                 /* per node id */
    int64_t *offset;               /* BUF_ARENA: byte offset */
    int *root;                     /* the node whose storage this one uses */
    int64_t *view_off;             /* BUF_ALIAS: bytes from root's start (a chunk view's) */
    int *last_use;                 /* index of the last node reading it */
    int64_t arena_bytes;           /* size of the one arena */
    int64_t naive_bytes;           /* sum of all buffers without sharing */
    /* The step's peak: the most bytes live at once (the arena holds them
     * and the gaps sharing leaves), where (a node index) and by kind. */
    int64_t peak_bytes;
    int peak_at;
    int64_t peak_kind[MEM__KINDS];
    /* The runtime's flat f32 buffers (each parameter rounded up to 16
     * floats, as mp_train.h lays them out): parameters, gradients (as many
     * bytes), optimizer state (its slots). */
    int64_t param_bytes, state_bytes;
    int64_t budget;                /* recompute.h: the budget met (0: none) */
} MemPlan;

/* What one training step allocates: parameters, gradients, optimizer state
 * and the arena (the figure a budget bounds). */
int64_t memplan_step_bytes(const MemPlan *mp);

/* A product heading a fusion group gets a buffer even where the group
 * keeps it in registers: the CUDA program's cuBLAS writes it there, and
 * both targets keep one memory plan (the C program leaves it unwritten). */
MemPlan *memplan_build(Arena *a, const IrGraph *g);
int64_t  memplan_bytes(const IrNode *n);   /* numel x element size (and the
                                              rows' statistics after it: ir_stats_at) */

/* Before fusion: a cast the plan inserted whose every reader converts while
 * it loads (layer_norm, rms_norm, cross_entropy and their gradients read
 * f16 / bf16 directly) is removed, its readers read its input; a narrowing
 * cast that is the one reader of cross_entropy's gradient (computed in f32,
 * rounded where it stores) is removed, the kernel stores that type itself. Bit-identical: the same conversions, in
 * registers instead of through a buffer. Returns how many were removed. */
int      memplan_fold_casts(IrGraph *g);

#endif
