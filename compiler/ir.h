/* ir.h - the graph IR: one list of nodes in execution order.
 *
 * Pipeline (docs/DESIGN.md):
 *   sema.c      AST -> forward nodes (shapes set, types of data and casts
 *               written by the user set, float types otherwise DT_NONE)
 *   prec.c      prec_forward(): compute type, class, rule of every forward
 *               node; inserts CAST nodes (one per value and type)
 *   autodiff.c  ad_backward(): appends the backward nodes
 *   prec.c      prec_finish(): loss scaling and optimizer nodes, checks
 *   memplan.c   memplan_fold_casts() (before fusion), memplan_build()
 *               (after it): the memory plan, g->mem
 *   plan.c      --dump-plan; emit_*.c code generators
 *
 * Invariants: a node's inputs come before it in g->nodes; node->id is its
 * index there (ir_renumber() restores this after insertions); every node
 * has a SrcLoc (backward and optimizer nodes take their forward node's). */
#ifndef MPCC_IR_H
#define MPCC_IR_H

#include "arena.h"
#include "diag.h"
#include <stdbool.h>
#include <stdint.h>

/* Value types. The first five match the language's TypeName values. */
typedef enum {
    DT_NONE = 0,
    DT_F32, DT_F16, DT_BF16, DT_I32, DT_U8, DT_U16,
} DType;

const char *dt_name(DType t);          /* "f32", "f16", "bf16", "i32", "u8", "none" */
int         dt_size(DType t);          /* bytes per element */
bool        dt_is_float(DType t);

#define MP_MAX_RANK 8
typedef struct Shape {
    int rank;                          /* 0 = scalar */
    int64_t d[MP_MAX_RANK];
} Shape;

int64_t shape_numel(const Shape *s);
bool    shape_eq(const Shape *a, const Shape *b);
char   *shape_str(Arena *a, const Shape *s);   /* "[128, 784]" */

typedef enum { PH_FORWARD, PH_BACKWARD, PH_OPTIMIZER } Phase;

/* Precision classes (PRECISION.md) and the rule that decided a node. */
typedef enum { CL_NONE, CL_LOWP, CL_FP32, CL_FOLLOW } PrecClass;
typedef enum { RULE_CLASS, RULE_LIST, RULE_OVERRIDE, RULE_CAST } PrecRule;

/* The operations: see ops.def for every row and what its attributes mean. */
typedef enum {
#define OP(id, name, nin, cls, kind) OP_##id,
#include "ops.def"
#undef OP
    OP__COUNT
} IrOp;

/* A group of nodes that the plan's page and `--dump-plan=dot --collapse`
 * (plan_html.c) draw as one box: a `repeat` (all its copies), one copy of
 * it, or one block call. sema enters and leaves them; a node belongs to
 * the innermost one open when it was made (NULL: the model's top level). */
typedef enum { SC_REPEAT, SC_COPY, SC_BLOCK } ScopeKind;
typedef struct IrScope IrScope;
struct IrScope {
    ScopeKind kind;
    const char *name;       /* repeat: "transformer.h"; block: its layer name
                               ("attn"), or the block's name when unnamed */
    const char *block;      /* block calls: the block's name */
    int copy;               /* SC_COPY: 0, 1, ... */
    int count;              /* SC_REPEAT: copies */
    int id;                 /* 1, 2, ... in the order entered */
    const IrScope *parent;
};

typedef struct IrNode IrNode;
struct IrNode {
    int id;                 /* index in g->nodes */
    IrOp op;
    Phase phase;
    SrcLoc loc;             /* the model source this node comes from */
    const char *name;       /* value name: statement target ("h"), parameter
                               name ("h.weight"), or NULL for temporaries */
    const char *prelude;    /* the prelude block (softplus, ...) that made it */
    IrNode **in;            /* inputs, nin of them */
    int nin;
    Shape shape;            /* output shape */
    DType type;             /* output (storage) type */
    DType compute;          /* type the arithmetic is rounded to (prec.c) */
    DType override;         /* typed assignment / precision region, or DT_NONE */
    PrecClass cls;          /* class actually applied (after fp16_ops/fp32_ops) */
    PrecRule rule;
    int64_t ia[MP_MAX_RANK];/* integer attributes, per op (ops.def) */
    double fa[4];           /* real attributes, per op (ops.def) */
    IrNode *grad_of;        /* backward nodes: the forward node differentiated */
    bool hoisted;           /* CAST of a parameter: done once per optimizer
                               step, not per micro-batch */
    bool attention_part;    /* reserved for target-specific fusion */
    int rep, copy;          /* made by copy (iteration) `copy` of the model's
                               rep-th outermost `repeat` or `for` loop
                               (1-based, ir_loop_add; 0: none); casts
                               take their anchor's, backward nodes their
                               grad_of's: the emitters' loops (emit_loop.c) */
    const IrScope *scope;   /* the group that made it (casts take their
                               anchor's, backward nodes their grad_of's,
                               optimizer steps their parameter's) */
    int fused;              /* fuse.c: fusion group (1, 2, ...), 0 = none;
                               a group runs as one pass where its last
                               node stands */
    bool fused_internal;    /* in a group and read only there: kept in a
                               register, never stored */
    struct IrNode *fused_first, *fused_last;  /* the group's first and last
                               members (fuse_last()), set with `fused` */
    struct IrNode *recomputes; /* recompute.c: the forward node this copy (a
                               backward node) computes again */
    int fp8[2];             /* mixed_float8 (prec.c): the scale slot (1-based,
                               g->fp8_slots) input 0 / 1 of a product is
                               quantised with; 0: read as it is */
};

/* ---- the model's declarations ---------------------------------------- */

typedef enum {
    INIT_ZEROS, INIT_ONES, INIT_CONSTANT,      /* a = value            */
    INIT_NORMAL,                               /* a = std              */
    INIT_UNIFORM,                              /* a = lo, b = hi       */
    INIT_GLOROT_UNIFORM, INIT_HE_NORMAL,       /* from fan_in/fan_out  */
    /* torch.nn.init's (LANGUAGE.md "Optimizers and initialisers"):
     * he_uniform (a = 1: fan_out, as he_normal's a), glorot_normal,
     * trunc_normal (a = std, b = lo, c = hi: redrawn outside [lo, hi]),
     * torch_uniform: U(±1/√fan_in), torch_default() of Linear and Conv */
    INIT_HE_UNIFORM, INIT_GLOROT_NORMAL, INIT_TRUNC_NORMAL, INIT_TORCH_UNIFORM,
} InitKind;

typedef struct IrParam {
    const char *name;       /* checkpoint name, "layers.0.ln.weight" */
    SrcLoc loc;
    Shape shape;
    InitKind init;
    double a, b;
    double c;               /* trunc_normal's hi */
    int64_t fan_in, fan_out;
    bool trainable;         /* false: batch-norm running_mean / running_var,
                               a `buffer` */
    bool buffer;            /* declared with `buffer` (never trained) */
    bool no_decay;          /* matched by the optimizer's no_decay: weight
                               decay 0 (a torch parameter group) */
    IrNode *node;           /* the OP_PARAM node (f32 master weight) */
    IrNode *grad;           /* set by autodiff: the f32 gradient, or NULL if
                               the loss does not depend on it */
} IrParam;

typedef struct IrInput {
    const char *name;
    SrcLoc loc;
    DType type;
    Shape shape;            /* d[0] is the batch */
    int64_t classes;        /* > 0: class labels, must lie in [0, classes) */
    bool window;            /* `window`: rows are windows of one stream */
    IrNode *node;
    bool has_ignore;        /* cross_entropy's ignore_index: labels equal to */
    int64_t ignore;         /* `ignore` are exempt from the range check      */
} IrInput;

typedef struct IrMetric {
    const char *name;
    SrcLoc loc;
    IrNode *node;           /* scalar f32 */
} IrMetric;

typedef enum { POLICY_FLOAT32, POLICY_MIXED_F16, POLICY_MIXED_BF16, POLICY_MIXED_F8 } Policy;
typedef enum { FP8_DELAYED, FP8_CURRENT } Fp8Recipe;
typedef enum { FP8_E4M3, FP8_E5M2 } Fp8Format;     /* = runtime/mp_fp8.h's MpFp8Fmt */

/* mixed_float8: one per-tensor scale (PRECISION.md "Additions: TF32 and
 * FP8"): in which format, for which product, and the value quantised with
 * it: input k of `reader`, the first product that reads it (read through
 * the product, so that later passes that rewrite inputs, like
 * memplan_fold_casts(), keep it right). */
typedef struct Fp8Slot {
    Fp8Format fmt;
    char role;              /* 'x', 'w' (forward inputs), 'g' (dy, backward) */
    const struct IrNode *reader;
    int k;
    const struct IrNode *product;  /* the forward product it belongs to */
} Fp8Slot;
typedef enum { OPT_SGD, OPT_ADAM, OPT_ADAMW, OPT_RMSPROP } OptKind;   /* = MP_OPT_* */
typedef enum { LS_NONE, LS_STATIC, LS_DYNAMIC } LossScaleKind;
typedef enum { SCHED_CONSTANT, SCHED_COSINE, SCHED_LINEAR } SchedKind;
typedef enum { WARMUP_TORCH, WARMUP_NANOGPT } WarmupStyle;   /* = MP_WARMUP_* */

typedef struct TrainCfg {
    OptKind opt;
    double lr, momentum, beta1, beta2, eps, weight_decay;
    bool nesterov;
    double dampening;       /* sgd's */
    double alpha;           /* rmsprop's */
    bool centered;          /* rmsprop's */
    Policy policy;
    bool policy_set;        /* written in the train block (or --precision) */
    LossScaleKind ls;
    bool ls_set;            /* written in the train block */
    double ls_init, ls_growth, ls_backoff;
    int64_t ls_interval;
    SchedKind sched;
    double warmup, sched_min;
    WarmupStyle warmup_style;
    double clip;            /* 0 = off */
    int64_t accumulate, steps, seed;
    int64_t memory_budget;  /* bytes, 0 = none (recompute.h) */
    SrcLoc memory_budget_loc;
    bool tf32;              /* float32_matmul = "tf32": f32 products on TF32 operands */
    const char **fp16_ops, **fp32_ops;   /* op names, as written */
    int nfp16_ops, nfp32_ops;
    Fp8Recipe fp8;          /* mixed_float8's scaling: delayed (default) or current */
    int64_t fp8_history, fp8_margin;     /* amax_history (delayed), margin */
    bool fp8_set;           /* `fp8 = ...` written */
    const char **fp8_ops;   /* products quantised whatever their operands */
    int nfp8_ops;
    SrcLoc loc;             /* the train block */
} TrainCfg;

/* pad's mode (fa[1]): 0 constant, 1 reflect, 2 replicate, 3 circular (MP_PAD_*) */
static inline int pad_mode(const IrNode *n) { return (int)n->fa[1]; }

/* Optimizer state buffers per parameter (the runtime's mp_optim_slots). */
int opt_slots(const TrainCfg *t);

/* An attention node the CUDA program runs on Tensor Cores
 * (runtime/mp_cuda_ops.h: mp_cu_fa_takes): f16 / bf16 products, heads up
 * to 64 (dropout or not). */
bool ir_attention_tc(const IrNode *n);

/* An attention's dimensions, whatever its layouts (ops.def ATTENTION's
 * ia[3], ia[4]: q, k, v and y [B, H, T, D], or [B, T, H, D] where sema's
 * fold_attention_layouts took the transposes around it into the op), and
 * where its ATTENTION_GRAD puts dq, dk and dv (glay):
 *   IR_GLAY_BHTD  [B, H, T + 2T', D]: per head dq, dk, dv (q, k, v [B, H, T, D])
 *   IR_GLAY_BTHD  [B, T + 2T', H, D]: per sample dq, dk, dv rows
 *   IR_GLAY_BT3HD [B, T, 3, H, D]: per position its dq, dk, dv rows (T = T'),
 *                 which is the layout of the [B, T, 3 H D] tensor a chunk
 *                 into q, k, v came from: the gradient of the chunk, with
 *                 no copy (autodiff.c join_attention). */
enum { IR_GLAY_BHTD, IR_GLAY_BTHD, IR_GLAY_BT3HD };
typedef struct IrAttn {
    int64_t B, H, T, Tk, D;
    bool qkv_bthd, y_bthd;
    int glay;
} IrAttn;
IrAttn ir_attention(const IrNode *f);   /* f: the ATTENTION node */
Shape ir_attention_grad_shape(const IrNode *f);   /* its ATTENTION_GRAD's */

/* Row statistics a forward node leaves after its output, in its own
 * buffer, for its backward (ia[2] = 1, set by autodiff; the CUDA program
 * writes and reads them, the C program leaves them unwritten):
 *   attention on Tensor Cores: each row's log-sum-exp, f32 [B H T];
 *   cross_entropy: each row's max and sum of exp, f32 [rows, 2].
 * ir_stats_at: bytes from the output to them (the output's bytes rounded
 * up to 16), 0: none; ir_stats_bytes: their bytes. */
int64_t ir_stats_at(const IrNode *n);
int64_t ir_stats_bytes(const IrNode *n);

/* An outermost repeat or for loop (ir_loop_add): a for loop's NAME and
 * its first value (copy k is NAME = from + k); var NULL for a repeat. */
typedef struct IrLoop {
    const char *var;
    int64_t from;
} IrLoop;

typedef struct IrGraph {
    Arena *arena;
    const char *model;
    SrcLoc model_loc;
    IrNode **nodes;
    int nnodes, cap;
    IrParam *params;
    int nparams, params_cap;
    IrInput *inputs;
    int ninputs, inputs_cap;
    IrMetric *metrics;
    int nmetrics, metrics_cap;
    IrNode *loss;           /* the scalar of `minimize` */
    TrainCfg train;
    int64_t batch;          /* the first dimension of the inputs */
    DType lowp;             /* set by prec.c from train.policy */
    Fp8Slot *fp8_slots;     /* mixed_float8's scale slots, IrNode.fp8 - 1 */
    int nfp8_slots;
    IrNode *loss_scale;     /* OP_LOSS_SCALE, the seed of the backward pass */
    IrScope *scope;         /* the group open now (sema) */
    int nscopes;
    IrLoop *loops;          /* per outermost repeat or for loop (IrNode.rep - 1) */
    int nloops, loops_cap;
    bool fused;             /* fuse.c ran: the emitters may also fold a weight
                               gradient's product into its accumulation */
    struct MemPlan *mem;    /* memplan.c's phase (after fusion): where each
                               value lives; the plan and the emitters read it */
    /* insertions not yet placed in nodes[] (ir_insert_before/after): each
     * goes before (or after) its anchor node, in insertion order */
    IrNode **pend;
    int *pend_anchor;       /* anchor's id; -(id + 1) when after it */
    int npend, pend_cap;
} IrGraph;

/* A chunk that is a view of its input, not a copy (memplan.c: a BUF_ALIAS
 * at an offset): one along the last axis of a value a kernel wrote, each of
 * whose readers is a reshape read only as q, k or v by attentions in the
 * [B, T, H, D] layout (IrAttn.qkv_bthd) and their gradients. Attention
 * reads its rows where they lie, S = the input's last dimension apart
 * (MpAttnLays), so GPT-2's q, k, v = chunk(c_attn(x), 3) costs no copy.
 * ir_view_stride: for such a chunk or a reshape of one, S; else 0. */
bool ir_chunk_view(const IrGraph *g, const IrNode *c);
int64_t ir_view_stride(const IrGraph *g, const IrNode *v);

IrGraph *ir_new(Arena *a);
/* Append a node at the end of the list. Inputs are copied. */
IrNode  *ir_add(IrGraph *g, IrOp op, SrcLoc loc, int nin, IrNode *const *in);
IrNode  *ir_add1(IrGraph *g, IrOp op, SrcLoc loc, IrNode *a);
IrNode  *ir_add2(IrGraph *g, IrOp op, SrcLoc loc, IrNode *a, IrNode *b);
/* Insert a node just before `before` / just after `after` and the nodes
 * inserted after it earlier (prec.c: casts). The insertion is deferred: the
 * node joins g->nodes, and ids are renumbered, at the next ir_renumber(), so
 * inserting k nodes into n costs O(n + k), not O(n k). Until then the new
 * node has id -1 and the other nodes keep theirs. */
IrNode  *ir_insert_before(IrGraph *g, IrNode *before, IrOp op, SrcLoc loc,
                          int nin, IrNode *const *in);
IrNode  *ir_insert_after(IrGraph *g, IrNode *after, IrOp op, SrcLoc loc,
                         int nin, IrNode *const *in);
void     ir_renumber(IrGraph *g);
/* Open a group inside the one open now (the nodes made until it is left
 * belong to it), and leave it. */
IrScope *ir_scope_enter(IrGraph *g, ScopeKind kind, const char *name, const char *block,
                        int copy, int count);
void     ir_scope_leave(IrGraph *g);
/* Record the next outermost repeat (var NULL) or for loop (var its NAME,
 * from its first value): IrNode.rep of its nodes is its number, returned. */
int      ir_loop_add(IrGraph *g, const char *var, int64_t from);
IrParam *ir_add_param(IrGraph *g, const char *name, SrcLoc loc, Shape shape);
IrInput *ir_add_input(IrGraph *g, const char *name, SrcLoc loc, DType t, Shape shape);
IrMetric *ir_add_metric(IrGraph *g, const char *name, SrcLoc loc, IrNode *n);
IrParam *ir_find_param(IrGraph *g, const char *name);

#endif
