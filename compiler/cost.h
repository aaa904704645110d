/* cost.h - `mpcc --dump-plan=cost --gpu NAME` (PRECISION.md, "Additions:
 * the cost of a step, before running it"): every op of one training step
 * with its FLOPs, the bytes it reads and writes and its roofline time on a
 * device of the table in cost.c, then the step's totals, the ten costliest
 * ops' share, the predicted step time and MFU. */
#ifndef MPCC_COST_H
#define MPCC_COST_H

#include "ir.h"
#include <stdbool.h>
#include <stdio.h>

/* One device of the table (cost.c): peak dense rates in FLOP/s by compute
 * type, memory bandwidth in bytes/s, the cost of one kernel launch. */
typedef struct CostDevice {
    const char *key;               /* as --gpu names it: "h100" */
    const char *name;              /* "NVIDIA H100 SXM5 80GB" */
    double f32;                    /* CUDA cores (or the CPU's vector units) */
    double tf32, f16, bf16, fp8;   /* Tensor Cores; 0: none */
    double bandwidth;
    double launch;                 /* seconds per kernel launch */
} CostDevice;

/* The device --gpu names (h100, h200, a100, l4, cpu), or NULL. "cpu" is
 * the machine mpcc runs on, from its cores and vector width. */
const CostDevice *cost_device(const char *key);

/* The keys cost_device knows, for messages: "h100, h200, a100, l4 or cpu". */
const char *cost_device_keys(void);

/* What one node of the graph costs each time it runs. */
typedef struct CostOp {
    double flops;                  /* multiply and add: 2 FLOPs */
    double work;                   /* FLOPs the kernels run, where not flops (0):
                                      attention's tiles and recomputation */
    double rd, wr;                 /* bytes read, written */
    int launches;                  /* kernels (0: a view, or inside a fused group) */
    DType unit;                    /* the rate it runs at: DT_F16 / DT_BF16 Tensor
                                      Cores, DT_F32 CUDA cores */
    bool product;                  /* a product (Tensor Cores where lowp) */
    bool tf32;                     /* an f32 product on TF32 Tensor Cores (prec_tf32) */
} CostOp;

/* n's cost (flops 0 and no launch for nodes that are no work: inputs,
 * parameters, constants, views). */
CostOp cost_op(const IrGraph *g, const IrNode *n);

/* The report: text for people, json for tools. */
void cost_dump(FILE *out, const IrGraph *g, const CostDevice *dev, bool json);

#endif
