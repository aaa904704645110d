/* emit_c_ops.c - one emitter per row of ops.def for the C target: each
 * writes the one runtime kernel call (runtime/mp_kernels*.h) that carries
 * out its node, with sizes taken from the node's shapes. Kernel argument
 * order: outputs, inputs, sizes, attributes (see mp_kernels.h). */
#include "emit_common.h"
#include "emit_fused.h"
#include "fuse.h"
#include "ops.h"

#include <stdio.h>
#include <string.h>

#define N(n) ((long long)shape_numel(&(n)->shape))
#define IN(k) (n->in[k])

/* "v7_h, MP_F16": a tensor argument. Constants are f32 scalars. */
static const char *arg(Emit *e, const IrNode *v)
{
    return arena_printf(e->a, "%s, %s", cname(e, v), v->op == OP_CONST ? "MP_F32" : mpdt(v->type));
}

/* "2, (const int64_t[]){128, 784}": a rank and shape for broadcasting kernels. */
static const char *rank_shape(Emit *e, const IrNode *v)
{
    if (v->shape.rank == 0)
        return "0, (const int64_t[]){1}";
    return arena_printf(e->a, "%d, (const int64_t[]){%s}", v->shape.rank, dims_list(e, &v->shape));
}

/* ---- leaves: the runtime owns their storage ---------------------------- */
void emit_c_INPUT(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_c_PARAM(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_c_CONST(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_c_CAST(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_cast(%s, %s, %lld);\n", arg(e, n), arg(e, IN(0)), N(n));
}

/* ---- elementwise ------------------------------------------------------- */
static void binary(Emit *e, const IrNode *n, const char *k)
{
    em(e, "    mp_k_%s(%s, %s,\n              %s, %s,\n              %s, %s);\n", k, arg(e, n),
       rank_shape(e, n), arg(e, IN(0)), rank_shape(e, IN(0)), arg(e, IN(1)), rank_shape(e, IN(1)));
}
void emit_c_ADD(Emit *e, const IrNode *n) { binary(e, n, "add"); }
void emit_c_SUB(Emit *e, const IrNode *n) { binary(e, n, "sub"); }
void emit_c_MUL(Emit *e, const IrNode *n) { binary(e, n, "mul"); }
void emit_c_DIV(Emit *e, const IrNode *n) { binary(e, n, "div"); }

static void unary(Emit *e, const IrNode *n, const char *k)
{
    em(e, "    mp_k_%s(%s, %s, %lld);\n", k, arg(e, n), arg(e, IN(0)), N(n));
}
void emit_c_NEG(Emit *e, const IrNode *n) { unary(e, n, "neg"); }
void emit_c_RELU(Emit *e, const IrNode *n) { unary(e, n, "relu"); }
void emit_c_GELU(Emit *e, const IrNode *n) { unary(e, n, n->ia[0] ? "gelu_tanh" : "gelu"); }
void emit_c_TANH(Emit *e, const IrNode *n) { unary(e, n, "tanh"); }
void emit_c_SIGMOID(Emit *e, const IrNode *n) { unary(e, n, "sigmoid"); }
void emit_c_SILU(Emit *e, const IrNode *n) { unary(e, n, "silu"); }
void emit_c_EXP(Emit *e, const IrNode *n) { unary(e, n, "exp"); }
void emit_c_LOG(Emit *e, const IrNode *n) { unary(e, n, "log"); }
void emit_c_SQRT(Emit *e, const IrNode *n) { unary(e, n, "sqrt"); }
void emit_c_RSQRT(Emit *e, const IrNode *n) { unary(e, n, "rsqrt"); }

static void unary_grad(Emit *e, const IrNode *n, const char *k)
{
    em(e, "    mp_k_%s(%s, %s, %s, %lld);\n", k, arg(e, n), arg(e, IN(0)), arg(e, IN(1)), N(n));
}
void emit_c_RELU_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "relu_grad"); }
void emit_c_GELU_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, n->ia[0] ? "gelu_tanh_grad" : "gelu_grad"); }
void emit_c_TANH_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "tanh_grad"); }
void emit_c_SIGMOID_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "sigmoid_grad"); }
void emit_c_SILU_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "silu_grad"); }
void emit_c_SQRT_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "sqrt_grad"); }
void emit_c_RSQRT_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "rsqrt_grad"); }

/* The mask depends on (seed, step, micro-batch, forward node): backward
 * regenerates it, and evaluation (not training) passes values through. */
static void dropout(Emit *e, const IrNode *n, const IrNode *fwd, const char *k)
{
    em(e, "    mp_k_%s(%s, %s, %lld, run->training ? (float)%.9g : 0.0f,\n"
          "              run->seed, run->step, run->micro, %d);\n",
       k, arg(e, n), arg(e, IN(0)), N(n), fwd->fa[0], fwd->id);
}
void emit_c_DROPOUT(Emit *e, const IrNode *n) { dropout(e, n, n, "dropout"); }
void emit_c_DROPOUT_GRAD(Emit *e, const IrNode *n) { dropout(e, n, n->grad_of, "dropout_grad"); }

/* ---- views ---------------------------------------------------------------- */
void emit_c_RESHAPE(Emit *e, const IrNode *n) { (void)e; (void)n; /* shares its input's buffer */ }
void emit_c_FLATTEN(Emit *e, const IrNode *n) { (void)e; (void)n; /* shares its input's buffer */ }
void emit_c_TRANSPOSE(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0);
    char perm[MP_MAX_RANK * 24 + 1] = "";
    for (int i = 0; i < x->shape.rank; i++)
        snprintf(perm + strlen(perm), sizeof perm - strlen(perm), "%s%d", i ? ", " : "", (int)n->ia[i]);
    em(e, "    mp_k_transpose(%s, %s, %d, (const int64_t[]){%s}, (const int64_t[]){%s});\n", arg(e, n),
       arg(e, x), x->shape.rank, dims_list(e, &x->shape), perm);
}

/* ---- structural ops: chunk, slice, concat, expand, arange ------------------ */
static void slice(Emit *e, const IrNode *n)
{
    EmitWindow w = emit_window_of(n);
    em(e, "    mp_k_slice(%s, %s, %lld, %lld, %lld, %s, %lld);\n", arg(e, n), arg(e, IN(0)), w.outer,
       w.big, w.inner, emit_int_arg(e, w.start), w.len);
}
void emit_c_CHUNK(Emit *e, const IrNode *n)
{
    if (e->mp->kind[n->id] == BUF_ALIAS)   /* attention reads it in place: ir_chunk_view */
        em(e, "    /* a view of %s: attention reads it in place */\n", cname(e, n->in[0]));
    else
        slice(e, n);
}
void emit_c_SLICE(Emit *e, const IrNode *n) { slice(e, n); }

void emit_c_SLICE_GRAD(Emit *e, const IrNode *n)
{
    EmitWindow w = emit_window_of(n);
    em(e, "    mp_k_place(%s, %s, %lld, %lld, %lld, %s, %lld, 1);\n", arg(e, n), arg(e, IN(0)), w.outer,
       w.big, w.inner, emit_int_arg(e, w.start), w.len);
}

void emit_c_CONCAT(Emit *e, const IrNode *n)
{
    int64_t at = 0;
    for (int k = 0; k < n->nin; k++) {
        int64_t len = IN(k)->shape.d[n->ia[0]];
        EmitWindow w = emit_window(n, n->ia[0], at, len);
        em(e, "    mp_k_place(%s, %s, %lld, %lld, %lld, %lld, %lld, 0);\n", arg(e, n), arg(e, IN(k)),
           w.outer, w.big, w.inner, w.start, w.len);
        at += len;
    }
}

void emit_c_EXPAND(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_broadcast(%s, %s,\n                   %s, %s);\n", arg(e, n), rank_shape(e, n),
       arg(e, IN(0)), rank_shape(e, IN(0)));
}

void emit_c_ARANGE(Emit *e, const IrNode *n) { em(e, "    mp_k_arange(%s, %lld);\n", arg(e, n), N(n)); }

/* ---- products ------------------------------------------------------------- */
void emit_c_MATMUL(Emit *e, const IrNode *n)
{
    ProductDims d = fuse_matmul_dims(n);
    em(e, "    mp_k_matmul(%s, %s, %s, %lld, %lld, %lld, %lld, %d, %d, %lld, %lld);\n", arg(e, n),
       arg(e, IN(0)), arg(e, IN(1)), d.batch, d.m, d.n, d.k, d.ta, d.tb, d.sa, d.sb);
}

/* "a, adt, b, bdt, R, K, N": the operands and sizes of matmul_tn n. */
static const char *matmul_tn_args(Emit *e, const IrNode *n)
{
    const IrNode *a = IN(0), *b = IN(1);
    long long k = emit_dim(a, -1);
    return arena_printf(e->a, "%s, %s, %lld, %lld, %lld", arg(e, a), arg(e, b), N(a) / k, k,
                        emit_dim(b, -1));
}

void emit_c_MATMUL_TN(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_matmul_tn(%s, %s, 0.0f);\n", arg(e, n), matmul_tn_args(e, n));
}

void emit_c_matmul_tn_acc(Emit *e, const IrNode *n, const char *grad)
{
    em(e, "    mp_k_matmul_tn_acc(%s, %s, %s); /* into the gradient */\n", grad, mpdt(n->type),
       matmul_tn_args(e, n));
}

void emit_c_LINEAR(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0), *w = IN(1);
    long long k = emit_dim(x, -1);
    em(e, "    mp_k_linear(%s, %s, %s, %s, %lld, %lld, %lld);\n", arg(e, n), arg(e, x), arg(e, w),
       n->nin > 2 ? arg(e, IN(2)) : "NULL, MP_F32", N(x) / k, emit_dim(w, 0), k);
}

const char *emit_c_gemm_of(Emit *e, const IrNode *n, const IrNode *y)
{
    if (n->op == OP_MATMUL) {
        ProductDims d = fuse_matmul_dims(n);
        MP_ASSERT(d.batch == 1);
        return arena_printf(e->a, "mp_gemm_matmul(%s, %s, %s, %lld, %lld, %lld, %d, %d)", arg(e, y),
                            arg(e, IN(0)), arg(e, IN(1)), d.m, d.n, d.k, d.ta, d.tb);
    }
    const IrNode *x = IN(0), *w = IN(1);
    long long k = emit_dim(x, -1);
    return arena_printf(e->a, "mp_gemm_linear(%s, %s, %s, %s, %lld, %lld, %lld)", arg(e, y), arg(e, x),
                        arg(e, w), n->nin > 2 ? arg(e, IN(2)) : "NULL, MP_F32", N(x) / k, emit_dim(w, 0), k);
}

/* ---- convolution and pooling ---------------------------------------------- */
void emit_c_CONV2D(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_conv2d(%s, %s, %s, %s,\n                %s);\n", arg(e, n), arg(e, IN(0)), arg(e, IN(1)),
       n->nin > 2 ? arg(e, IN(2)) : "NULL, MP_F32", emit_conv(e, n));
}

void emit_c_CONV2D_DX(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_conv2d_dx(%s, %s, %s,\n                   %s);\n", arg(e, n), arg(e, IN(0)),
       arg(e, IN(1)), emit_conv(e, n->grad_of));
}

void emit_c_CONV2D_DW(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_conv2d_dw(%s, %s, %s,\n                   %s, 0.0f);\n", arg(e, n), arg(e, IN(0)),
       arg(e, IN(1)), emit_conv(e, n->grad_of));
}

void emit_c_CHANNEL_SUM(Emit *e, const IrNode *n)
{
    long long b, c, s;
    emit_ncs(IN(0), &b, &c, &s);
    em(e, "    mp_k_channel_sum(%s, %s, %lld, %lld, %lld, 0.0f);\n", arg(e, n), arg(e, IN(0)), b, c, s);
}

static void pool(Emit *e, const IrNode *n, const char *k, const IrNode *x, const IrNode *f)
{
    em(e, "    mp_k_%s(%s, %s, %s, %s);\n", k, arg(e, n), arg(e, IN(0)), emit_nchw(e, x), emit_pool(e, f));
}
void emit_c_MAX_POOL2D(Emit *e, const IrNode *n) { pool(e, n, "max_pool2d", IN(0), n); }
void emit_c_AVG_POOL2D(Emit *e, const IrNode *n) { pool(e, n, "avg_pool2d", IN(0), n); }
void emit_c_AVG_POOL2D_GRAD(Emit *e, const IrNode *n) { pool(e, n, "avg_pool2d_grad", n, n->grad_of); }
void emit_c_MAX_POOL2D_GRAD(Emit *e, const IrNode *n)
{
    const IrNode *f = n->grad_of;
    em(e, "    mp_k_max_pool2d_grad(%s, %s, %s, %s, %s);\n", arg(e, n), arg(e, IN(0)), arg(e, IN(1)),
       emit_nchw(e, n), emit_pool(e, f));
}

void emit_c_GLOBAL_AVG_POOL(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0);
    em(e, "    mp_k_global_avg_pool(%s, %s, %lld, %lld, %lld);\n", arg(e, n), arg(e, x), emit_dim(x, 0),
       emit_dim(x, 1), emit_dim(x, 2) * emit_dim(x, 3));
}

void emit_c_GLOBAL_AVG_POOL_GRAD(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_global_avg_pool_grad(%s, %s, %lld, %lld, %lld);\n", arg(e, n), arg(e, IN(0)),
       emit_dim(n, 0), emit_dim(n, 1), emit_dim(n, 2) * emit_dim(n, 3));
}

/* ---- embedding --------------------------------------------------------------- */
void emit_c_EMBEDDING(Emit *e, const IrNode *n)
{
    const IrNode *w = IN(1);
    em(e, "    mp_k_embedding(%s, %s, %s, %lld, %lld, %lld);\n", arg(e, n), arg(e, IN(0)), arg(e, w),
       N(IN(0)), emit_dim(w, 0), emit_dim(w, 1));
}

void emit_c_EMBEDDING_DW(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_embedding_dw(%s, %s, %s, %lld, %lld, %lld);\n", arg(e, n), arg(e, IN(0)),
       arg(e, IN(1)), N(IN(1)), emit_dim(n, 0), emit_dim(n, 1));
}

void emit_c_embedding_dw_acc(Emit *e, const IrNode *n, const char *grad)
{
    em(e, "    mp_k_embedding_dw_acc(%s, %s, %s, %lld, %lld, %lld); /* into the gradient */\n", grad,
       arg(e, IN(0)), arg(e, IN(1)), N(IN(1)), emit_dim(n, 0), emit_dim(n, 1));
}

/* ---- reductions and softmax ---------------------------------------------------- */
static void reduce(Emit *e, const IrNode *n, const char *k, const IrNode *x, int64_t axis)
{
    long long o, l, i;
    emit_around_axis(x, axis, &o, &l, &i);
    em(e, "    mp_k_%s(%s, %s, %lld, %lld, %lld);\n", k, arg(e, n), arg(e, IN(0)), o, l, i);
}
void emit_c_SUM(Emit *e, const IrNode *n) { reduce(e, n, "sum", IN(0), n->ia[0]); }
void emit_c_MEAN(Emit *e, const IrNode *n) { reduce(e, n, "mean", IN(0), n->ia[0]); }
void emit_c_SOFTMAX(Emit *e, const IrNode *n) { reduce(e, n, "softmax", IN(0), n->ia[0]); }
void emit_c_LOG_SOFTMAX(Emit *e, const IrNode *n) { reduce(e, n, "log_softmax", IN(0), n->ia[0]); }

void emit_c_REDUCE_GRAD(Emit *e, const IrNode *n)
{
    long long o, l, i;
    emit_around_axis(n, n->ia[0], &o, &l, &i);
    em(e, "    mp_k_expand(%s, %s, %lld, %lld, %lld, (float)%.9g);\n", arg(e, n), arg(e, IN(0)), o, l, i,
       n->fa[0]);
}

void emit_c_SUM_TO(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_sum_to(%s, %s,\n                %s, %s, 0.0f);\n", arg(e, n), rank_shape(e, n),
       arg(e, IN(0)), rank_shape(e, IN(0)));
}

static void softmax_grad(Emit *e, const IrNode *n, const char *k)
{
    long long o, l, i;
    emit_around_axis(n, n->ia[0], &o, &l, &i);
    em(e, "    mp_k_%s(%s, %s, %s, %lld, %lld, %lld);\n", k, arg(e, n), arg(e, IN(0)), arg(e, IN(1)), o,
       l, i);
}
void emit_c_SOFTMAX_GRAD(Emit *e, const IrNode *n) { softmax_grad(e, n, "softmax_grad"); }
void emit_c_LOG_SOFTMAX_GRAD(Emit *e, const IrNode *n) { softmax_grad(e, n, "log_softmax_grad"); }

/* ---- norms --------------------------------------------------------------------- */
void emit_c_LAYER_NORM(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0);
    em(e, "    mp_k_layer_norm(%s, %s, %s, %s, %lld, %lld, (float)%.9g);\n", arg(e, n), arg(e, x),
       arg(e, IN(1)), n->nin > 2 ? arg(e, IN(2)) : "NULL, MP_F32", N(x) / emit_dim(x, -1), emit_dim(x, -1),
       n->fa[0]);
}

void emit_c_LAYER_NORM_DX(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(1);
    em(e, "    mp_k_layer_norm_dx(%s, %s, %s, %s, %lld, %lld, (float)%.9g);\n", arg(e, n), arg(e, IN(0)),
       arg(e, x), arg(e, IN(2)), N(x) / emit_dim(x, -1), emit_dim(x, -1), n->grad_of->fa[0]);
}

void emit_c_LAYER_NORM_DW(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(1);
    em(e, "    mp_k_layer_norm_dw(%s, %s, %s, %lld, %lld, (float)%.9g, 0.0f);\n", arg(e, n), arg(e, IN(0)),
       arg(e, x), N(x) / emit_dim(x, -1), emit_dim(x, -1), n->grad_of->fa[0]);
}

void emit_c_BATCH_NORM(Emit *e, const IrNode *n)
{
    long long b, c, s;
    emit_ncs(IN(0), &b, &c, &s);
    em(e, "    mp_k_batch_norm(%s, %s, %s, %s,\n                    %s, %s, %lld, %lld, %lld, (float)%.9g, (float)%.9g, "
          "run->training);\n",
       arg(e, n), arg(e, IN(0)), arg(e, IN(1)), arg(e, IN(2)), cname(e, IN(3)), cname(e, IN(4)), b, c,
       s, n->fa[0], n->fa[1]);
}

void emit_c_BATCH_NORM_DX(Emit *e, const IrNode *n)
{
    long long b, c, s;
    emit_ncs(IN(1), &b, &c, &s);
    em(e, "    mp_k_batch_norm_dx(%s, %s, %s, %s, %lld, %lld, %lld, (float)%.9g);\n", arg(e, n), arg(e, IN(0)),
       arg(e, IN(1)), arg(e, IN(2)), b, c, s, n->grad_of->fa[1]);
}

void emit_c_BATCH_NORM_DW(Emit *e, const IrNode *n)
{
    long long b, c, s;
    emit_ncs(IN(1), &b, &c, &s);
    em(e, "    mp_k_batch_norm_dw(%s, %s, %s, %lld, %lld, %lld, (float)%.9g, 0.0f);\n", arg(e, n),
       arg(e, IN(0)), arg(e, IN(1)), b, c, s, n->grad_of->fa[1]);
}

/* ---- losses and metrics ------------------------------------------------------------ */
void emit_c_CROSS_ENTROPY(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0);
    em(e, "    mp_k_cross_entropy(%s, %s, %s, %s, %lld, %s);\n", arg(e, n), arg(e, x), arg(e, IN(1)),
       emit_real_rows(e, "run", N(IN(1))), emit_dim(x, -1), emit_ce_attrs(e, n));
}

void emit_c_CROSS_ENTROPY_GRAD(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(1);
    em(e, "    mp_k_cross_entropy_grad(%s, %s, %s, %s, %lld, %lld, %s);\n", arg(e, n), arg(e, IN(0)),
       arg(e, x), arg(e, IN(2)), N(IN(2)), emit_dim(x, -1), emit_ce_attrs(e, n->grad_of));
}

void emit_c_ACCURACY(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0);
    em(e, "    mp_k_accuracy(%s, %s, %s, %s, %lld);\n", arg(e, n), arg(e, x), arg(e, IN(1)),
       emit_real_rows(e, "run", N(IN(1))), emit_dim(x, -1));
}

void emit_c_MSE(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_mse(%s, %s, %s, %s);\n", arg(e, n), arg(e, IN(0)), arg(e, IN(1)),
       emit_real_rows(e, "run", N(IN(0))));
}

void emit_c_MSE_GRAD(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_mse_grad(%s, %s, %s, %s, %lld);\n", arg(e, n), arg(e, IN(0)), arg(e, IN(1)),
       arg(e, IN(2)), N(n));
}

/* ---- attention: q, y [B, H, T, D], k, v [B, H, T', D] (or [B, T, H, D]: MpAttnLays) ----------- */
/* mp_k_attention(y, q, k, v, BH, T, T', D, causal, cdt) and
 * mp_k_attention_grad(g, dy, q, k, v, ...): the same tail of arguments;
 * with a mask or a scale, mp_k_attention_opt / _grad_opt and the options
 * (MpAttnOpt) last. The mask is the last input (of nq + 1). */
static void attention(Emit *e, const IrNode *n, const char *k, const IrNode *f, int nq)
{
    IrAttn a = ir_attention(f);
    const char *opt = emit_attention_opt(e, n, f, f->nin > 3 ? IN(nq) : NULL, false);
    if (opt)
        em(e, "    {\n        const MpAttnOpt o = %s;\n", opt);
    em(e, "%smp_k_%s%s(%s, ", opt ? "        " : "    ", k, opt ? "_opt" : "", arg(e, n));
    for (int i = 0; i < nq; i++)
        em(e, "%s, ", arg(e, IN(i)));
    em(e, "\n                   %lld, %lld, %lld, %lld, %d, %s%s);\n", (long long)(a.B * a.H),
       (long long)a.T, (long long)a.Tk, (long long)a.D, (int)f->ia[0], mpdt(f->compute),
       opt ? ", &o" : "");
    if (opt)
        em(e, "    }\n");
}
void emit_c_ATTENTION(Emit *e, const IrNode *n) { attention(e, n, "attention", n, 3); }
void emit_c_ATTENTION_GRAD(Emit *e, const IrNode *n) { attention(e, n, "attention_grad", n->grad_of, 4); }

/* ---- loss scaling and the optimizer ---------------------------------------------------- */
/* The backward pass starts from d(loss) = S / accumulate, set by the runtime. */
void emit_c_LOSS_SCALE(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_fill(%s, run->seed_grad, 1);\n", arg(e, n));
}
/* Carried out by the runtime (mp_train.h) on the flat gradient buffer. */
void emit_c_UNSCALE(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_c_CLIP_GRAD_NORM(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_c_SGD(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_c_ADAM(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_c_ADAMW(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_c_RMSPROP(Emit *e, const IrNode *n) { (void)e; (void)n; }

/* ---- elementwise, norm and rope additions --------------------------------------------- */
void emit_c_ABS(Emit *e, const IrNode *n) { unary(e, n, "abs"); }
void emit_c_SIN(Emit *e, const IrNode *n) { unary(e, n, "sin"); }
void emit_c_COS(Emit *e, const IrNode *n) { unary(e, n, "cos"); }
void emit_c_ABS_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "abs_grad"); }
void emit_c_SIN_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "sin_grad"); }
void emit_c_COS_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "cos_grad"); }
void emit_c_MAXIMUM(Emit *e, const IrNode *n) { binary(e, n, "maximum"); }
void emit_c_MINIMUM(Emit *e, const IrNode *n) { binary(e, n, "minimum"); }
void emit_c_MAXIMUM_MASK(Emit *e, const IrNode *n) { binary(e, n, "maximum_mask"); }

/* clamp, pow and their gradients: the attributes of the forward node f */
static void with_attrs(Emit *e, const IrNode *n, const char *k, const IrNode *f, int nattr)
{
    em(e, "    mp_k_%s(%s, %s, ", k, arg(e, n), arg(e, IN(0)));
    if (n->nin > 1)
        em(e, "%s, ", arg(e, IN(1)));
    em(e, "%lld", N(n));
    for (int i = 0; i < nattr; i++)
        em(e, ", (float)%.9g", f->fa[i]);
    em(e, ");\n");
}
void emit_c_CLAMP(Emit *e, const IrNode *n) { with_attrs(e, n, "clamp", n, 2); }
void emit_c_CLAMP_GRAD(Emit *e, const IrNode *n) { with_attrs(e, n, "clamp_grad", n->grad_of, 2); }
void emit_c_POW(Emit *e, const IrNode *n) { with_attrs(e, n, "pow", n, 1); }
void emit_c_POW_GRAD(Emit *e, const IrNode *n) { with_attrs(e, n, "pow_grad", n->grad_of, 1); }

void emit_c_RMS_NORM(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0);
    em(e, "    mp_k_rms_norm(%s, %s, %s, %lld, %lld, (float)%.9g);\n", arg(e, n), arg(e, x), arg(e, IN(1)),
       N(x) / emit_dim(x, -1), emit_dim(x, -1), n->fa[0]);
}

void emit_c_RMS_NORM_DX(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(1);
    em(e, "    mp_k_rms_norm_dx(%s, %s, %s, %s, %lld, %lld, (float)%.9g);\n", arg(e, n), arg(e, IN(0)),
       arg(e, x), arg(e, IN(2)), N(x) / emit_dim(x, -1), emit_dim(x, -1), n->grad_of->fa[0]);
}

void emit_c_RMS_NORM_DW(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(1);
    em(e, "    mp_k_rms_norm_dw(%s, %s, %s, %lld, %lld, (float)%.9g, 0.0f);\n", arg(e, n), arg(e, IN(0)),
       arg(e, x), N(x) / emit_dim(x, -1), emit_dim(x, -1), n->grad_of->fa[0]);
}

/* x viewed as [outer, positions, inner] around the position axis */
static void rope(Emit *e, const IrNode *n, const IrNode *f, float sign)
{
    long long o, l, i;
    emit_around_axis(n, f->ia[0], &o, &l, &i);
    em(e, "    mp_k_rope(%s, %s, %lld, %lld, %lld, %lld, (float)%.9g, %d, %.1ff);\n", arg(e, n),
       arg(e, IN(0)), o, l, i, emit_dim(n, -1), f->fa[0], (int)f->ia[1], sign);
}
void emit_c_ROPE(Emit *e, const IrNode *n) { rope(e, n, n, 1.0f); }
void emit_c_ROPE_GRAD(Emit *e, const IrNode *n) { rope(e, n, n->grad_of, -1.0f); }

/* ---- randomness: randn, rand ---------------------------------------------- */
/* The values depend on (seed, step, micro-batch, node) and the index, as
 * dropout's mask; evaluation and --predict run with micro-batch -1 - batch
 * (runtime/mp_infer.h), so they draw too, from their own stream. */
static void random_values(Emit *e, const IrNode *n, const char *k)
{
    em(e, "    mp_k_%s(%s, %lld, run->seed, run->step, run->micro, %d);\n", k, arg(e, n), N(n), n->id);
}
void emit_c_RANDN(Emit *e, const IrNode *n) { random_values(e, n, "randn"); }
void emit_c_RAND(Emit *e, const IrNode *n) { random_values(e, n, "rand"); }

/* ---- selection, comparison, masks ------------------------------------------------------ */
void emit_c_GT(Emit *e, const IrNode *n) { binary(e, n, "gt"); }
void emit_c_LT(Emit *e, const IrNode *n) { binary(e, n, "lt"); }
void emit_c_GE(Emit *e, const IrNode *n) { binary(e, n, "ge"); }
void emit_c_LE(Emit *e, const IrNode *n) { binary(e, n, "le"); }
void emit_c_EQ(Emit *e, const IrNode *n) { binary(e, n, "eq"); }
void emit_c_NE(Emit *e, const IrNode *n) { binary(e, n, "ne"); }
void emit_c_WHERE_DA(Emit *e, const IrNode *n) { binary(e, n, "where_da"); }
void emit_c_WHERE_DB(Emit *e, const IrNode *n) { binary(e, n, "where_db"); }

void emit_c_WHERE(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_where(%s, %s,\n               %s, %s,\n               %s, %s,\n               %s, %s);\n",
       arg(e, n), rank_shape(e, n), arg(e, IN(0)), rank_shape(e, IN(0)), arg(e, IN(1)),
       rank_shape(e, IN(1)), arg(e, IN(2)), rank_shape(e, IN(2)));
}

void emit_c_DETACH(Emit *e, const IrNode *n) { (void)e; (void)n; /* shares its input's buffer */ }
void emit_c_FULL(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_fill(%s, (float)%.9g, %lld);\n", arg(e, n), n->fa[0], N(n));
}

/* max, min, argmax, argmin and max / min's gradient: x viewed as [outer,
 * len, inner] around the axis; sign 1 finds the first maximum, -1 the
 * first minimum; index 1 stores its position instead of its value */
static void extremum(Emit *e, const IrNode *n, const char *k, const IrNode *f, int sign, int index)
{
    long long o, l, i;
    emit_around_axis(f->in[0], f->ia[0], &o, &l, &i);
    em(e, "    mp_k_%s(%s, ", k, arg(e, n));
    for (int j = 0; j < n->nin; j++)
        em(e, "%s, ", arg(e, IN(j)));
    em(e, "%lld, %lld, %lld, %d%s);\n", o, l, i, sign, index < 0 ? "" : index ? ", 1" : ", 0");
}
void emit_c_MAX(Emit *e, const IrNode *n) { extremum(e, n, "extremum", n, 1, 0); }
void emit_c_MIN(Emit *e, const IrNode *n) { extremum(e, n, "extremum", n, -1, 0); }
void emit_c_ARGMAX(Emit *e, const IrNode *n) { extremum(e, n, "extremum", n, 1, 1); }
void emit_c_ARGMIN(Emit *e, const IrNode *n) { extremum(e, n, "extremum", n, -1, 1); }
void emit_c_EXTREMUM_GRAD(Emit *e, const IrNode *n)
{
    extremum(e, n, "extremum_grad", n->grad_of, n->grad_of->op == OP_MAX ? 1 : -1, -1);
}

/* ---- routing and indexing: topk, one_hot, gather, cumsum ------------------------ */
void emit_c_TOPK(Emit *e, const IrNode *n)
{
    long long o, l, i;
    emit_around_axis(IN(0), n->ia[0], &o, &l, &i);
    em(e, "    mp_k_topk(%s, %s, %lld, %lld, %lld, %lld);\n", cname(e, n), arg(e, IN(0)), o, l, i,
       (long long)n->ia[1]);
}

void emit_c_ONE_HOT(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_one_hot(%s, %s, %lld, %lld);\n", arg(e, n), arg(e, IN(0)), N(IN(0)), (long long)n->ia[0]);
}

/* (x or dx, index): both shapes, x's first; the rank is the index's */
static const char *gather_shapes(Emit *e, const IrNode *x, const IrNode *index, int64_t axis)
{
    return arena_printf(e->a, "%d, (const int64_t[]){%s}, (const int64_t[]){%s}, %d", index->shape.rank,
                        dims_list(e, &x->shape), dims_list(e, &index->shape), (int)axis);
}

void emit_c_GATHER(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_gather(%s, %s, %s, %s);\n", arg(e, n), arg(e, IN(0)), arg(e, IN(1)),
       gather_shapes(e, IN(0), IN(1), n->ia[0]));
}

void emit_c_GATHER_GRAD(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_gather_grad(%s, %s, %s, %s);\n", arg(e, n), arg(e, IN(0)), arg(e, IN(1)),
       gather_shapes(e, n, IN(1), n->ia[0]));
}

void emit_c_CUMSUM(Emit *e, const IrNode *n)
{
    long long o, l, i;
    emit_around_axis(IN(0), n->ia[0], &o, &l, &i);
    em(e, "    mp_k_cumsum(%s, %s, %lld, %lld, %lld, %d);\n", arg(e, n), arg(e, IN(0)), o, l, i, (int)n->ia[1]);
}
/* ---- recurrent layers: mp_k_gru / mp_k_lstm(s, gi, w_hh, b_hh, B, T, H) and their
 * gradients (o, dstate, state, w_hh, B, T, H), runtime/mp_kernels_nn.h ---------------- */
static void recurrent(Emit *e, const IrNode *n, const char *k)
{
    const IrNode *x = IN(0);
    long long h = emit_dim(IN(1), -1);
    em(e, "    mp_k_%s(%s, %s, %s, %s, %lld, %lld, %lld);\n", k, arg(e, n), arg(e, x), arg(e, IN(1)),
       n->nin > 2 ? arg(e, IN(2)) : "NULL, MP_F32", emit_dim(x, 0), emit_dim(x, 1), h);
}
static void recurrent_grad(Emit *e, const IrNode *n, const char *k)
{
    const IrNode *st = IN(1);
    long long h = emit_dim(IN(2), -1);
    em(e, "    mp_k_%s(%s, %s, %s, %s, %lld, %lld, %lld);\n", k, arg(e, n), arg(e, IN(0)), arg(e, st),
       arg(e, IN(2)), emit_dim(st, 0), emit_dim(st, 1), h);
}
void emit_c_GRU(Emit *e, const IrNode *n) { recurrent(e, n, "gru"); }
void emit_c_LSTM(Emit *e, const IrNode *n) { recurrent(e, n, "lstm"); }
void emit_c_GRU_GRAD(Emit *e, const IrNode *n) { recurrent_grad(e, n, "gru_grad"); }
void emit_c_LSTM_GRAD(Emit *e, const IrNode *n) { recurrent_grad(e, n, "lstm_grad"); }
/* ---- image operations ------------------------------------------------------------ */
void emit_c_CONV_TRANSPOSE2D(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_conv_transpose2d(%s, %s, %s, %s,\n                %s);\n", arg(e, n), arg(e, IN(0)),
       arg(e, IN(1)), n->nin > 2 ? arg(e, IN(2)) : "NULL, MP_F32", emit_conv_transpose(e, n));
}

/* (dy, weight): the conv2d of dy, whose adjoint the forward is */
void emit_c_CONV_TRANSPOSE2D_DX(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_conv2d(%s, %s, %s, NULL, MP_F32,\n                %s);\n", arg(e, n), arg(e, IN(0)),
       arg(e, IN(1)), emit_conv_transpose(e, n->grad_of));
}

/* (dy, x): that conv2d's weight gradient, x in the place of its dy */
void emit_c_CONV_TRANSPOSE2D_DW(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_conv2d_dw(%s, %s, %s,\n                   %s, 0.0f);\n", arg(e, n), arg(e, IN(1)),
       arg(e, IN(0)), emit_conv_transpose(e, n->grad_of));
}

void emit_c_PAD(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_pad%s(%s, %s, %s);\n", pad_mode(n) ? "_mode" : "", arg(e, n), arg(e, IN(0)),
       emit_pad(e, n));
}

void emit_c_PAD_GRAD(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_pad_grad(%s, %s, %s);\n", arg(e, n), arg(e, IN(0)), emit_pad(e, n->grad_of));
}

void emit_c_UPSAMPLE(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_upsample(%s, %s, %s);\n", arg(e, n), arg(e, IN(0)), emit_upsample(e, n));
}

void emit_c_UPSAMPLE_GRAD(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_upsample_grad(%s, %s, %s);\n", arg(e, n), arg(e, IN(0)), emit_upsample(e, n->grad_of));
}

void emit_c_GROUP_NORM(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_group_norm(%s, %s, %s, %s, %s);\n", arg(e, n), arg(e, IN(0)), arg(e, IN(1)),
       arg(e, IN(2)), emit_group_norm(e, n));
}

void emit_c_GROUP_NORM_DX(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_group_norm_dx(%s, %s, %s, %s, %s);\n", arg(e, n), arg(e, IN(0)), arg(e, IN(1)),
       arg(e, IN(2)), emit_group_norm(e, n->grad_of));
}

void emit_c_GROUP_NORM_DW(Emit *e, const IrNode *n)
{
    em(e, "    mp_k_group_norm_dw(%s, %s, %s, %s, 0.0f);\n", arg(e, n), arg(e, IN(0)), arg(e, IN(1)),
       emit_group_norm(e, n->grad_of));
}
