/* emit_common.h - what the C and CUDA code generators share: the output
 * stream, the names given to values in generated code, source comments. */
#ifndef MPCC_EMIT_COMMON_H
#define MPCC_EMIT_COMMON_H

#include "ir.h"
#include "memplan.h"
#include <stdbool.h>
#include <stdio.h>

typedef struct LoopBody LoopBody;

typedef struct Emit {
    FILE *out;
    const IrGraph *g;
    Arena *a;                  /* scratch for this emission */
    Arena scratch;
    MemPlan *mp;
    const char **names;        /* per node id: its C identifier */
    int *value_ix;             /* per node id: index in mp_values, or -1 */
    int nvalues;
    int *grad_param;           /* per node id: emit_grad_param(), made lazily */
    int *work_n;               /* per parameter: its hoisted casts (emit_work_copy) */
    const IrNode **work_last;  /* per parameter: the last of them */
    int *read_in_step;         /* per node id: how many reads of it the step's
                                  (non-optimizer) nodes make */
    const IrNode **reader;     /* per node id: the last node of the step reading it */
    /* repeat and for loops (emit_loop.c) */
    bool loops;                /* run isomorphic copies (iterations) as loops */
    const char *loop_params;   /* a body function's first parameter: "MpRun *run" */
    const char *loop_args;     /* ... and what the pass passes: "run" */
    const char *loop_cast_args;/* ... what cast_params passes ("NULL": it has no run) */
    const char *grad_fmt;      /* a parameter's gradient: "mp_params[%d].grad" */
    LoopBody *body;            /* while a body is rendered */
    bool *global;              /* per node id: named outside loop bodies */
    FILE *fns;                 /* the body functions and their tables */
    char *fns_text;
    size_t fns_len;
    int nloops;
    int *fused_functor;        /* per fusion group: its MpFused<k> (emit_fused.c) */
    const char **fused_texts;  /* the distinct functor bodies, k = 1, 2, ... */
    int nfused_texts;
    bool *fp8_seen;            /* mixed_float8 (emit_c.c, emit_cuda.c): a product reading the scale slot
                                  (IrNode.fp8 - 1) has been written: its amax is taken */
} Emit;

typedef void EmitFn(Emit *e, const IrNode *n);

void emit_begin(Emit *e, FILE *out, const IrGraph *g);
bool emit_end(Emit *e);                       /* false on a write error */
void em(Emit *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

const char *cname(Emit *e, const IrNode *n);  /* v7_h, v31_d_h_weight */
const char *emit_base_name(Emit *e, const IrNode *n);  /* the same, never a loop's slot */
const char *ctype(DType t);                   /* float, uint16_t, int32_t, uint8_t */
const char *mpdt(DType t);                    /* MP_F32 ... */
const char *describe(Emit *e, const IrNode *n);     /* "h: linear, model.mp:9" */
const char *source_comment(Emit *e, const IrNode *n); /* "model.mp:9: h = relu(...)" */
const char *where(Emit *e, const IrNode *n);  /* "model.mp:9: h", C-string safe */
const char *dims_init(Emit *e, const Shape *s); /* "{128, 784}" */
const char *dims_list(Emit *e, const Shape *s); /* "128, 784" */
bool *needed_by(Emit *e, const IrNode *root); /* per node id: root depends on it */
/* The parameter whose gradient n is, or -1. */
int emit_grad_param(Emit *e, const IrNode *n);
/* A cast of a lowp gradient to f32 that only the optimizer reads: both
 * targets add its source straight into the f32 gradient buffer (the
 * widening is exact), so the f32 copy is never written. */
bool emit_folded_cast(Emit *e, const IrNode *n);
/* With fusion on (IrGraph.fused), a weight's gradient product (matmul_tn)
 * that only its parameter's gradient accumulation reads (its own, or that
 * of a folded cast): the C program's GEMM adds it into the f32 gradient in
 * its store (mp_k_matmul_tn_acc), rounded to its type first, and never
 * writes its own buffer. The parameter, or -1. */
int emit_acc_product(Emit *e, const IrNode *n);
/* A parameter's f32 gradient made of parts that add themselves into its
 * gradient buffer, on the C target with fusion on or off alike: an f32
 * embedding_dw that is the whole gradient, or the two parts (each an f32
 * matmul_tn or embedding_dw, read once) of the one add that is (a tied
 * table: GPT-2's wte). emit_grad_part(): the parameter n is such a part
 * of, or -1; emit_grad_sum(): n is that add, which then runs nothing. */
int emit_grad_part(Emit *e, const IrNode *n);
bool emit_grad_sum(Emit *e, const IrNode *n);
/* Parameter p's lowp working copy, which the optimizer's pass writes as it
 * updates the value (both targets): the one hoisted cast of it when it lies
 * in the arena, else NULL, with *dt the runtime's MP_WORK_OTHER (several
 * copies, or one elsewhere) or MP_F32 (none). */
const IrNode *emit_work_copy(Emit *e, int p, const char **dt);

/* Sizes of a node's tensors as the kernels of both targets take them. */
long long emit_dim(const IrNode *v, int i);   /* dimension i, negative from the end */
/* The options of attention f as an MpAttnOpt initialiser (n: f or its
 * gradient, the node emitted, whose q, k, v its layouts describe; mask:
 * its mask as n reads it; cuda: the CUDA program's run state for
 * dropout's generator), or NULL when it has none. */
const char *emit_attention_opt(Emit *e, const IrNode *n, const IrNode *f, const IrNode *mask, bool cuda);
/* x viewed as [outer, len, inner] around `axis` (-1: everything) */
void emit_around_axis(const IrNode *x, int64_t axis, long long *outer, long long *len, long long *inner);
/* chunk, slice, slice_grad, concat: the big tensor (sliced, or placed
 * into) as [outer, big, inner] around the axis; the window's start, len */
typedef struct EmitWindow { long long outer, big, inner, start, len; } EmitWindow;
EmitWindow emit_window(const IrNode *big, int64_t axis, int64_t start, int64_t len);
EmitWindow emit_window_of(const IrNode *n);   /* of a chunk, slice, slice_grad */
/* [N, C, rest]: batch norm and channel sums, NCHW or [B, C] */
void emit_ncs(const IrNode *x, long long *n0, long long *c, long long *s);
const char *emit_nchw(Emit *e, const IrNode *x);   /* "N, C, H, W" */
/* "N, mp_conv_of(C, H, W, F, kh, kw, ...)": the batch and geometry of the
 * convolution node f (CONV2D), for its kernels and its gradients' */
const char *emit_conv(Emit *e, const IrNode *f);
/* the same for conv_transpose2d node f: its adjoint conv2d (y -> x) */
const char *emit_conv_transpose(Emit *e, const IrNode *f);
/* "outer, xs, ys, before, value" of a pad node (mp_k_pad's arguments);
 * "..., before, mode" for the other modes (mp_k_pad_mode's, _grad's) */
const char *emit_pad(Emit *e, const IrNode *n);
/* "P, H, W, sh, sw, mode" of an upsample node */
const char *emit_upsample(Emit *e, const IrNode *f);
/* "N, C, S, G, eps" of a group_norm node */
const char *emit_group_norm(Emit *e, const IrNode *f);
/* "k, stride, padding" of the pooling node f, and for avg_pool2d ", incl"
 * (count_include_pad) */
const char *emit_pool(Emit *e, const IrNode *f);

/* The nodes one generated function runs, in order, each given to `node`:
 * PASS_CAST_PARAMS the hoisted casts (the parameters' working copies);
 * PASS_FORWARD the forward nodes that compute, those that only metrics need
 * wrapped in `if (!TRAINING) { }`; PASS_BACKWARD the backward nodes. With
 * e->loops, isomorphic repeat copies and for iterations become a loop over
 * a body function (emit_loop.c). */
typedef enum { PASS_CAST_PARAMS, PASS_FORWARD, PASS_BACKWARD } EmitPass;
typedef void EmitNodeFn(Emit *e, const IrNode *n, int *line);
void emit_pass(Emit *e, EmitPass pass, EmitNodeFn *node, const char *training);

/* ---- repeat and for loops (emit_loop.c) --------------------------------
 * emit_model_code() writes the model's functions: passes() (the target's
 * cast_params / forward / backward functions, each made with emit_pass)
 * is rendered first, into a buffer, so that decls() can declare only the
 * values that code names (emit_declared: a value that only loop bodies use
 * lives in their tables, not in a variable of its own); then come at_fn
 * (the target's mp_loop_at(): int64_t -> pointer, arena offset << 2,
 * parameter << 2 | 1, its gradient << 2 | 2) and the loop bodies, then the
 * buffered functions. What a node's code names goes through these, so that
 * a body can take it from its copy's tables: */
const char *loop_name(Emit *e, const IrNode *n, const char *name); /* cname() */
const char *emit_pgrad(Emit *e, int p);                   /* a parameter's gradient buffer */
const char *emit_where_arg(Emit *e, const IrNode *n);     /* "\"model.mp:9 (h)\"" or w[3] */
const char *emit_value_arg(Emit *e, int ix);              /* an mp_values index */
/* An integer argument that may differ per copy (the start of a slice: a
 * for loop's select(x, 1, t)): its digits, or in a body the copy's at[k]
 * (the same value in every copy: its digits). */
const char *emit_int_arg(Emit *e, long long v);
bool emit_declared(Emit *e, const IrNode *n);
void emit_model_code(Emit *e, void (*passes)(Emit *), void (*decls)(Emit *), const char *at_fn);
/* The model's source line as a comment, when it is not *line already. */
void emit_source_line(Emit *e, const IrNode *n, int *line, const char *lead);

/* The named values of the model (mp_values, --predict --output NAME): each
 * statement target computed by the forward pass, once per name (its first
 * node; the lowp working copies of a value are not values of their own).
 * emit_value: n's index in mp_values, or -1. emit_output: the default
 * output when the loss is one loss operation (ops_is_loss), the first
 * named value on its first-input chain; otherwise -1 (no default). */
int emit_value(Emit *e, const IrNode *n);
/* The --predict copy of value n (emit_value >= 0), as the C or CUDA
 * program makes it; an attention's y stored [B, T, H, D] whose value is
 * [B, H, T, D] (emit_keep_bthd: ops.def ATTENTION ia[5]) swapped back. */
const char *emit_keep(Emit *e, const IrNode *n, bool cuda);
/* Where a view (BUF_ALIAS) starts: its root's name, at the offset of a
 * chunk attention reads in place (memplan.h view_off). */
const char *emit_view_base(Emit *e, const IrNode *n);
bool emit_keep_bthd(const IrNode *n);
int emit_output(Emit *e);
/* The rows (elements) of loss/metric input x the kernel averages over:
 * "mp_real_rows(RUN, n, B)", fewer in a padded evaluation batch. */
const char *emit_real_rows(Emit *e, const char *run, long long n);

/* The skeleton of a generated program: templates/NAME (train.c.in,
 * train.cu.in, embedded at build time) with its slots filled. The template
 * language: `@@NAME@@` is replaced by slot NAME's text, or what its fn
 * writes; a slot alone on its line replaces the line, its newline too; a
 * line starting `@@#` is the template's own comment and is dropped. A slot
 * the template names but the emitter lacks is an internal error. MODEL,
 * SOURCE, POLICY, VERSION, RUNTIME and DESCRIPTORS are filled here for
 * every template; a target passes its own slots. */
typedef struct EmitSlot {
    const char *name;
    const char *text;               /* or NULL: */
    void (*fn)(Emit *e);
} EmitSlot;
void emit_template(Emit *e, const char *name, const EmitSlot *slots, int nslots);

/* Parts of the generated program that both targets write alike. */
void emit_runtime(Emit *e, int count, const char *const *names, const char *const *texts);
void emit_descriptors(Emit *e);                /* mp_inputs, mp_params, mp_metric_names, mp_values */
/* MpModel mp_model = {...}; hooks: its function fields onwards, as C text */
void emit_model_struct(Emit *e, const char *hooks);
void emit_fp8_state(Emit *e);                  /* mixed_float8: mp_fp8, the scales' state */

/* cross_entropy's last call arguments: ignored label, label smoothing */
const char *emit_ce_attrs(Emit *e, const IrNode *f);

#endif
