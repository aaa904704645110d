/* emit_fused.h - the code of a fusion group (fuse.h) for both targets.
 *
 * A group is written where its last node stands, as one pass over its
 * elements: every external input loaded once, each member computed in
 * f32 by fuse_expr() and rounded to its storage type, the stored members
 * written. The C program runs it as one chunked loop (each member a tight
 * loop over a chunk on the stack, so the compiler vectorises it as it does
 * the unfused kernels; gelu, tanh, sigmoid, silu, exp and their gradients
 * call the unfused kernels' chunk functions, mp_v* of mp_vmath.h, and each
 * rounding is mp_round_n over the chunk). A group headed by a product
 * (fuse_is_product) runs in the C program as the GEMM's epilogue: a file-
 * scope mp_epi<k> and its context MpEpi<k>, set as MpGemm.epi / epi_ctx.
 * The CUDA program runs such a product as itself (cuBLAS), then the
 * rest of the group. The CUDA program runs a group as one `each` kernel whose
 * functor, MpFused<group>, is defined at file scope before the model's
 * functions (CUDA refuses local types as kernel template arguments). */
#ifndef MPCC_EMIT_FUSED_H
#define MPCC_EMIT_FUSED_H

#include "emit_common.h"

/* What a target writes after a stored member: checks, --predict, outputs. */
typedef void EmitAfterFn(Emit *e, const IrNode *n);

/* n is the last node of its group: writes the group. */
void emit_fused_c(Emit *e, const IrNode *n, EmitAfterFn *after);
void emit_fused_cuda(Emit *e, const IrNode *n, EmitAfterFn *after);
/* The epilogue functions (MpGemm.epi) of the C program's product groups. */
void emit_fused_c_epilogues(Emit *e);
/* The MpGemm of product n (fuse_is_product) storing into y, as C text. */
const char *emit_c_gemm_of(Emit *e, const IrNode *n, const IrNode *y);
/* grad += n's product (matmul_tn, emit_acc_product), as C text. */
void emit_c_matmul_tn_acc(Emit *e, const IrNode *n, const char *grad);
void emit_c_embedding_dw_acc(Emit *e, const IrNode *n, const char *grad);
/* The functors of every group of the CUDA program. */
void emit_fused_cuda_functors(Emit *e);

#endif
