/* prec.h - the precision-assignment pass (PRECISION.md).
 *
 * prec_forward(): for every forward node, class (after fp16_ops/fp32_ops),
 * rule, compute type and output type; CAST nodes inserted where a value's
 * type differs from what its consumer needs, one per value and type;
 * parameter casts marked hoisted. Also checks the risky choices and warns.
 *
 * prec_finish(): after autodiff: the UNSCALE node over every parameter
 * gradient (when the policy scales the loss), CLIP_GRAD_NORM when asked,
 * one optimizer node per trainable parameter; phase PH_OPTIMIZER. Also
 * resolves the default loss scale (dynamic for mixed_float16, none
 * otherwise) when the train block did not set one. The decisions where
 * PRECISION.md is silent are listed at the top of prec.c. */
#ifndef MPCC_PREC_H
#define MPCC_PREC_H

#include "ir.h"

void prec_forward(IrGraph *g);
void prec_finish(IrGraph *g);

/* Activation memory: bytes of the distinct forward values read by the
 * backward pass (not parameters' master weights, not CONST scalars), under
 * the plan's types (lowp working copies included; a value a backward
 * product reads quantised counts its e4m3 copy, one byte an element,
 * besides any other read of it) and under float32 for
 * the same graph (float values at 4 bytes, a float-to-float cast counted
 * as its source, so a working copy of a parameter counts nothing). */
typedef struct PrecMemory {
    int64_t bytes, bytes_f32;
} PrecMemory;
PrecMemory prec_memory(const IrGraph *g);

const char *prec_policy_name(Policy p);   /* "mixed_float16" */
const char *prec_fp8_name(Fp8Format f);   /* "e4m3" */
const char *prec_fp8_recipe_name(Fp8Recipe r); /* "delayed" */
const IrNode *prec_fp8_of(const Fp8Slot *s); /* the value a scale slot quantises */
const char *prec_class_name(PrecClass c); /* "lowp" */
const char *prec_rule_name(PrecRule r);   /* "class" */
const char *prec_ls_name(LossScaleKind k); /* "dynamic" */
bool prec_is_lowp(DType t);               /* f16 or bf16 */

/* float32_matmul = "tf32": whether n is a product that computes in f32 on
 * the GEMM of both targets (matmul, linear, their weight gradient, conv2d
 * and conv_transpose2d but depthwise, gru, lstm, forward and backward), so
 * its operands are rounded to TF32. Attention's products and depthwise
 * convolutions run on kernels of their own and stay f32. */
bool prec_tf32(const IrGraph *g, const IrNode *n);
/* What the plan shows as n's compute type: "tf32" where prec_tf32, else
 * the name of type t (the plan's shown compute type of n). */
const char *prec_compute_name(const IrGraph *g, const IrNode *n, DType t);

#endif
