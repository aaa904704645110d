/* emit_cuda_ops.c - one emitter per row of ops.def for the CUDA target:
 * each writes the one launcher call (runtime/mp_cuda_ops.h) that carries
 * out its node on the GPU. The arguments are those of the C target's call
 * (emit_c_ops.c: outputs, inputs, sizes, attributes), except that the
 * storage types become template arguments, <Y, X, ...> in the order of the
 * tensors, so each kernel is compiled for exactly its types. Inside the
 * generated functions `r` is the MpCuRun of the call (training, micro-batch,
 * step header). */
#include "emit_common.h"
#include "fuse.h"
#include "ops.h"

#include <stdio.h>
#include <string.h>

#define N(n) ((long long)shape_numel(&(n)->shape))
#define IN(k) (n->in[k])

static const char *ty(const IrNode *v) { return !v || v->op == OP_CONST ? "MP_F32" : mpdt(v->type); }

/* "<MP_F16, MP_F32>": the storage types of up to four tensors (NULL: none,
 * typed f32 as the C target's NULL arguments). */
static const char *tl(Emit *e, int k, const IrNode *a, const IrNode *b, const IrNode *c, const IrNode *d)
{
    const IrNode *v[4] = {a, b, c, d};
    char buf[80] = "<";
    for (int i = 0; i < k; i++)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? ", " : "", ty(v[i]));
    strcat(buf, ">");
    return arena_strdup(e->a, buf);
}

#define T1(a) tl(e, 1, a, NULL, NULL, NULL)
#define T2(a, b) tl(e, 2, a, b, NULL, NULL)
#define T3(a, b, c) tl(e, 3, a, b, c, NULL)
#define T4(a, b, c, d) tl(e, 4, a, b, c, d)
#define C(v) cname(e, v)
/* "ids, MP_U16": integer data (ids, labels) and its type, a run-time argument */
#define IDS(v) arena_printf(e->a, "%s, %s", cname(e, v), ty(v))

/* "MpCuDims{2, {128, 784}}" */
static const char *dims(Emit *e, const IrNode *v)
{
    if (v->shape.rank == 0)
        return "MpCuDims{0, {1}}";
    return arena_printf(e->a, "MpCuDims{%d, {%s}}", v->shape.rank, dims_list(e, &v->shape));
}

/* ---- leaves: no work of their own ------------------------------------------ */
void emit_cuda_INPUT(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_cuda_PARAM(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_cuda_CONST(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_cuda_CAST(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_cast%s(%s, %s, %lld);\n", T2(n, IN(0)), C(n), C(IN(0)), N(n));
}

/* ---- elementwise ------------------------------------------------------------- */
static void binary(Emit *e, const IrNode *n, const char *k)
{
    em(e, "    mp_cu_%s%s(%s, %s,\n              %s, %s,\n              %s, %s);\n", k,
       T3(n, IN(0), IN(1)), C(n), dims(e, n), C(IN(0)), dims(e, IN(0)), C(IN(1)), dims(e, IN(1)));
}
void emit_cuda_ADD(Emit *e, const IrNode *n) { binary(e, n, "add"); }
void emit_cuda_SUB(Emit *e, const IrNode *n) { binary(e, n, "sub"); }
void emit_cuda_MUL(Emit *e, const IrNode *n) { binary(e, n, "mul"); }
void emit_cuda_DIV(Emit *e, const IrNode *n) { binary(e, n, "div"); }

static void unary(Emit *e, const IrNode *n, const char *k)
{
    em(e, "    mp_cu_%s%s(%s, %s, %lld);\n", k, T2(n, IN(0)), C(n), C(IN(0)), N(n));
}
void emit_cuda_NEG(Emit *e, const IrNode *n) { unary(e, n, "neg"); }
void emit_cuda_RELU(Emit *e, const IrNode *n) { unary(e, n, "relu"); }
void emit_cuda_GELU(Emit *e, const IrNode *n) { unary(e, n, n->ia[0] ? "gelu_tanh" : "gelu"); }
void emit_cuda_TANH(Emit *e, const IrNode *n) { unary(e, n, "tanh"); }
void emit_cuda_SIGMOID(Emit *e, const IrNode *n) { unary(e, n, "sigmoid"); }
void emit_cuda_SILU(Emit *e, const IrNode *n) { unary(e, n, "silu"); }
void emit_cuda_EXP(Emit *e, const IrNode *n) { unary(e, n, "exp"); }
void emit_cuda_LOG(Emit *e, const IrNode *n) { unary(e, n, "log"); }
void emit_cuda_SQRT(Emit *e, const IrNode *n) { unary(e, n, "sqrt"); }
void emit_cuda_RSQRT(Emit *e, const IrNode *n) { unary(e, n, "rsqrt"); }

static void unary_grad(Emit *e, const IrNode *n, const char *k)
{
    em(e, "    mp_cu_%s%s(%s, %s, %s, %lld);\n", k, T3(n, IN(0), IN(1)), C(n), C(IN(0)), C(IN(1)), N(n));
}
void emit_cuda_RELU_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "relu_grad"); }
void emit_cuda_GELU_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, n->ia[0] ? "gelu_tanh_grad" : "gelu_grad"); }
void emit_cuda_TANH_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "tanh_grad"); }
void emit_cuda_SIGMOID_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "sigmoid_grad"); }
void emit_cuda_SILU_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "silu_grad"); }
void emit_cuda_SQRT_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "sqrt_grad"); }
void emit_cuda_RSQRT_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "rsqrt_grad"); }

/* The mask depends on (seed, step, micro-batch, forward node), the step
 * read on the device from the step's header. */
static void dropout(Emit *e, const IrNode *n, const IrNode *fwd, const char *k)
{
    em(e, "    mp_cu_%s%s(%s, %s, %lld, r->training ? (float)%.9g : 0.0f,\n"
          "              r->seed, r->hdr, r->micro, %d);\n",
       k, T2(n, IN(0)), C(n), C(IN(0)), N(n), fwd->fa[0], fwd->id);
}
void emit_cuda_DROPOUT(Emit *e, const IrNode *n) { dropout(e, n, n, "dropout"); }
void emit_cuda_DROPOUT_GRAD(Emit *e, const IrNode *n) { dropout(e, n, n->grad_of, "dropout_grad"); }

/* ---- views --------------------------------------------------------------------- */
void emit_cuda_RESHAPE(Emit *e, const IrNode *n) { (void)e; (void)n; /* shares its input's buffer */ }
void emit_cuda_FLATTEN(Emit *e, const IrNode *n) { (void)e; (void)n; /* shares its input's buffer */ }
void emit_cuda_TRANSPOSE(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0);
    char perm[MP_MAX_RANK * 24 + 1] = "";
    for (int i = 0; i < x->shape.rank; i++)
        snprintf(perm + strlen(perm), sizeof perm - strlen(perm), "%s%d", i ? ", " : "", (int)n->ia[i]);
    em(e, "    mp_cu_transpose%s(%s, %s, %s, MpCuDims{%d, {%s}});\n", T2(n, x), C(n), C(x), dims(e, x),
       x->shape.rank, perm);
}

/* ---- structural ops: chunk, slice, concat, expand, arange ------------------ */
static void slice(Emit *e, const IrNode *n)
{
    EmitWindow w = emit_window_of(n);
    em(e, "    mp_cu_slice%s(%s, %s, %lld, %lld, %lld, %s, %lld);\n", T2(n, IN(0)), C(n), C(IN(0)),
       w.outer, w.big, w.inner, emit_int_arg(e, w.start), w.len);
}
void emit_cuda_CHUNK(Emit *e, const IrNode *n)
{
    if (e->mp->kind[n->id] == BUF_ALIAS)   /* attention reads it in place: ir_chunk_view */
        em(e, "    /* a view of %s: attention reads it in place */\n", cname(e, n->in[0]));
    else
        slice(e, n);
}
void emit_cuda_SLICE(Emit *e, const IrNode *n) { slice(e, n); }

void emit_cuda_SLICE_GRAD(Emit *e, const IrNode *n)
{
    EmitWindow w = emit_window_of(n);
    em(e, "    mp_cu_place%s(%s, %s, %lld, %lld, %lld, %s, %lld, 1);\n", T2(n, IN(0)), C(n), C(IN(0)),
       w.outer, w.big, w.inner, emit_int_arg(e, w.start), w.len);
}

void emit_cuda_CONCAT(Emit *e, const IrNode *n)
{
    int64_t at = 0;
    for (int k = 0; k < n->nin; k++) {
        int64_t len = IN(k)->shape.d[n->ia[0]];
        EmitWindow w = emit_window(n, n->ia[0], at, len);
        em(e, "    mp_cu_place%s(%s, %s, %lld, %lld, %lld, %lld, %lld, 0);\n", T2(n, IN(k)), C(n),
           C(IN(k)), w.outer, w.big, w.inner, w.start, w.len);
        at += len;
    }
}

void emit_cuda_EXPAND(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_broadcast%s(%s, %s, %s, %s);\n", T2(n, IN(0)), C(n), dims(e, n), C(IN(0)),
       dims(e, IN(0)));
}

void emit_cuda_ARANGE(Emit *e, const IrNode *n) { em(e, "    mp_cu_arange%s(%s, %lld);\n", T1(n), C(n), N(n)); }

/* ---- products ----------------------------------------------------------------------- */
void emit_cuda_MATMUL(Emit *e, const IrNode *n)
{
    const IrNode *a = IN(0), *b = IN(1);
    ProductDims d = fuse_matmul_dims(n);
    em(e, "    mp_cu_matmul%s(%s, %s, %s, %lld, %lld, %lld, %lld, %d, %d, %lld, %lld);\n",
       T3(n, a, b), C(n), C(a), C(b), d.batch, d.m, d.n, d.k, d.ta, d.tb, d.sa, d.sb);
}

void emit_cuda_MATMUL_TN(Emit *e, const IrNode *n)
{
    const IrNode *a = IN(0), *b = IN(1);
    long long k = emit_dim(a, -1);
    em(e, "    mp_cu_matmul_tn%s(%s, %s, %s, %lld, %lld, %lld, 0.0f);\n", T3(n, a, b), C(n), C(a), C(b),
       N(a) / k, k, emit_dim(b, -1));
}

void emit_cuda_LINEAR(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0), *w = IN(1), *b = n->nin > 2 ? IN(2) : NULL;
    long long k = emit_dim(x, -1);
    em(e, "    mp_cu_linear%s(%s, %s, %s, %s, %lld, %lld, %lld);\n", T4(n, x, w, b), C(n), C(x), C(w),
       b ? C(b) : "NULL", N(x) / k, emit_dim(w, 0), k);
}

/* ---- convolution and pooling ----------------------------------------------------------- */
void emit_cuda_CONV2D(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0), *w = IN(1), *b = n->nin > 2 ? IN(2) : NULL;
    em(e, "    mp_cu_conv2d%s(%s, %s, %s, %s,\n                %s);\n", T4(n, x, w, b), C(n), C(x), C(w),
       b ? C(b) : "NULL", emit_conv(e, n));
}

void emit_cuda_CONV2D_DX(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_conv2d_dx%s(%s, %s, %s,\n                   %s);\n", T3(n, IN(0), IN(1)), C(n),
       C(IN(0)), C(IN(1)), emit_conv(e, n->grad_of));
}

void emit_cuda_CONV2D_DW(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_conv2d_dw%s(%s, %s, %s,\n                   %s, 0.0f);\n", T3(n, IN(0), IN(1)), C(n),
       C(IN(0)), C(IN(1)), emit_conv(e, n->grad_of));
}

void emit_cuda_CHANNEL_SUM(Emit *e, const IrNode *n)
{
    long long b, c, s;
    emit_ncs(IN(0), &b, &c, &s);
    em(e, "    mp_cu_channel_sum%s(%s, %s, %lld, %lld, %lld, 0.0f);\n", T2(n, IN(0)), C(n), C(IN(0)), b, c,
       s);
}

static void pool(Emit *e, const IrNode *n, const char *k, const IrNode *x, const IrNode *f)
{
    em(e, "    mp_cu_%s%s(%s, %s, %s, %s);\n", k, T2(n, IN(0)), C(n), C(IN(0)), emit_nchw(e, x),
       emit_pool(e, f));
}
void emit_cuda_MAX_POOL2D(Emit *e, const IrNode *n) { pool(e, n, "max_pool2d", IN(0), n); }
void emit_cuda_AVG_POOL2D(Emit *e, const IrNode *n) { pool(e, n, "avg_pool2d", IN(0), n); }
void emit_cuda_AVG_POOL2D_GRAD(Emit *e, const IrNode *n) { pool(e, n, "avg_pool2d_grad", n, n->grad_of); }
void emit_cuda_MAX_POOL2D_GRAD(Emit *e, const IrNode *n)
{
    const IrNode *f = n->grad_of;
    em(e, "    mp_cu_max_pool2d_grad%s(%s, %s, %s, %s, %s);\n", T3(n, IN(0), IN(1)), C(n), C(IN(0)),
       C(IN(1)), emit_nchw(e, n), emit_pool(e, f));
}

void emit_cuda_GLOBAL_AVG_POOL(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0);
    em(e, "    mp_cu_global_avg_pool%s(%s, %s, %lld, %lld, %lld);\n", T2(n, x), C(n), C(x), emit_dim(x, 0),
       emit_dim(x, 1), emit_dim(x, 2) * emit_dim(x, 3));
}

void emit_cuda_GLOBAL_AVG_POOL_GRAD(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_global_avg_pool_grad%s(%s, %s, %lld, %lld, %lld);\n", T2(n, IN(0)), C(n), C(IN(0)),
       emit_dim(n, 0), emit_dim(n, 1), emit_dim(n, 2) * emit_dim(n, 3));
}

/* ---- embedding ------------------------------------------------------------------------------ */
void emit_cuda_EMBEDDING(Emit *e, const IrNode *n)
{
    const IrNode *w = IN(1);
    em(e, "    mp_cu_embedding%s(%s, %s, %s, %lld, %lld, %lld);\n", T2(n, w), C(n), IDS(IN(0)), C(w),
       N(IN(0)), emit_dim(w, 0), emit_dim(w, 1));
}

void emit_cuda_EMBEDDING_DW(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_embedding_dw%s(%s, %s, %s, %lld, %lld, %lld);\n", T2(n, IN(0)), C(n),
       C(IN(0)), IDS(IN(1)), N(IN(1)), emit_dim(n, 0), emit_dim(n, 1));
}

/* ---- reductions and softmax ------------------------------------------------------------------- */
static void reduce(Emit *e, const IrNode *n, const char *k, const IrNode *x, int64_t axis)
{
    long long o, l, i;
    emit_around_axis(x, axis, &o, &l, &i);
    em(e, "    mp_cu_%s%s(%s, %s, %lld, %lld, %lld);\n", k, T2(n, x), C(n), C(x), o, l, i);
}
void emit_cuda_SUM(Emit *e, const IrNode *n) { reduce(e, n, "sum", IN(0), n->ia[0]); }
void emit_cuda_MEAN(Emit *e, const IrNode *n) { reduce(e, n, "mean", IN(0), n->ia[0]); }
void emit_cuda_SOFTMAX(Emit *e, const IrNode *n) { reduce(e, n, "softmax", IN(0), n->ia[0]); }
void emit_cuda_LOG_SOFTMAX(Emit *e, const IrNode *n) { reduce(e, n, "log_softmax", IN(0), n->ia[0]); }

void emit_cuda_REDUCE_GRAD(Emit *e, const IrNode *n)
{
    long long o, l, i;
    emit_around_axis(n, n->ia[0], &o, &l, &i);
    em(e, "    mp_cu_expand%s(%s, %s, %lld, %lld, %lld, (float)%.9g);\n", T2(n, IN(0)), C(n), C(IN(0)), o,
       l, i, n->fa[0]);
}

void emit_cuda_SUM_TO(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_sum_to%s(%s, %s,\n                %s, %s, 0.0f);\n", T2(n, IN(0)), C(n), dims(e, n),
       C(IN(0)), dims(e, IN(0)));
}

static void softmax_grad(Emit *e, const IrNode *n, const char *k)
{
    long long o, l, i;
    emit_around_axis(n, n->ia[0], &o, &l, &i);
    em(e, "    mp_cu_%s%s(%s, %s, %s, %lld, %lld, %lld);\n", k, T3(n, IN(0), IN(1)), C(n), C(IN(0)),
       C(IN(1)), o, l, i);
}
void emit_cuda_SOFTMAX_GRAD(Emit *e, const IrNode *n) { softmax_grad(e, n, "softmax_grad"); }
void emit_cuda_LOG_SOFTMAX_GRAD(Emit *e, const IrNode *n) { softmax_grad(e, n, "log_softmax_grad"); }

/* ---- norms ------------------------------------------------------------------------------------ */
void emit_cuda_LAYER_NORM(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0);
    const IrNode *b = n->nin > 2 ? IN(2) : NULL;
    em(e, "    mp_cu_layer_norm%s(%s, %s, %s, %s, %lld, %lld, (float)%.9g);\n",
       T4(n, x, IN(1), b), C(n), C(x), C(IN(1)), b ? C(b) : "NULL", N(x) / emit_dim(x, -1), emit_dim(x, -1),
       n->fa[0]);
}

void emit_cuda_LAYER_NORM_DX(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(1);
    em(e, "    mp_cu_layer_norm_dx%s(%s, %s, %s, %s, %lld, %lld, (float)%.9g);\n",
       T4(n, IN(0), x, IN(2)), C(n), C(IN(0)), C(x), C(IN(2)), N(x) / emit_dim(x, -1), emit_dim(x, -1),
       n->grad_of->fa[0]);
}

void emit_cuda_LAYER_NORM_DW(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(1);
    em(e, "    mp_cu_layer_norm_dw%s(%s, %s, %s, %lld, %lld, (float)%.9g, 0.0f);\n", T3(n, IN(0), x),
       C(n), C(IN(0)), C(x), N(x) / emit_dim(x, -1), emit_dim(x, -1), n->grad_of->fa[0]);
}

void emit_cuda_BATCH_NORM(Emit *e, const IrNode *n)
{
    long long b, c, s;
    emit_ncs(IN(0), &b, &c, &s);
    em(e, "    mp_cu_batch_norm%s(%s, %s, %s, %s,\n                    %s, %s, %lld, %lld, %lld, "
          "(float)%.9g, (float)%.9g, r->training);\n",
       T4(n, IN(0), IN(1), IN(2)), C(n), C(IN(0)), C(IN(1)), C(IN(2)), C(IN(3)), C(IN(4)), b, c, s,
       n->fa[0], n->fa[1]);
}

void emit_cuda_BATCH_NORM_DX(Emit *e, const IrNode *n)
{
    long long b, c, s;
    emit_ncs(IN(1), &b, &c, &s);
    em(e, "    mp_cu_batch_norm_dx%s(%s, %s, %s, %s, %lld, %lld, %lld, (float)%.9g);\n",
       T4(n, IN(0), IN(1), IN(2)), C(n), C(IN(0)), C(IN(1)), C(IN(2)), b, c, s, n->grad_of->fa[1]);
}

void emit_cuda_BATCH_NORM_DW(Emit *e, const IrNode *n)
{
    long long b, c, s;
    emit_ncs(IN(1), &b, &c, &s);
    em(e, "    mp_cu_batch_norm_dw%s(%s, %s, %s, %lld, %lld, %lld, (float)%.9g, 0.0f);\n",
       T3(n, IN(0), IN(1)), C(n), C(IN(0)), C(IN(1)), b, c, s, n->grad_of->fa[1]);
}

/* ---- losses and metrics ------------------------------------------------------------------------ */
/* each row's max and sum of exp after the loss (ir_stats_at): the
 * forward writes them, the gradient (its fourth input the forward) reads
 * them, or NULL */
static const char *ce_stats(Emit *e, const IrNode *f, bool in)
{
    if (!ir_stats_at(f))
        return "NULL";
    return arena_printf(e->a, in ? "(const float *)((const char *)%s + %lld)" : "(float *)((char *)%s + %lld)",
                        C(f), (long long)ir_stats_at(f));
}

void emit_cuda_CROSS_ENTROPY(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0);
    em(e, "    mp_cu_cross_entropy%s(%s, %s, %s, %s, %lld, %s, %s);\n", T2(n, x), C(n), C(x), IDS(IN(1)),
       emit_real_rows(e, "r->run", N(IN(1))), emit_dim(x, -1), emit_ce_attrs(e, n), ce_stats(e, n, false));
}

void emit_cuda_CROSS_ENTROPY_GRAD(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(1);
    em(e, "    mp_cu_cross_entropy_grad%s(%s, %s, %s, %s, %lld, %lld, %s, %s);\n", T3(n, IN(0), x), C(n),
       C(IN(0)), C(x), IDS(IN(2)), N(IN(2)), emit_dim(x, -1), emit_ce_attrs(e, n->grad_of),
       ce_stats(e, IN(3), true));
}

void emit_cuda_ACCURACY(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0);
    em(e, "    mp_cu_accuracy%s(%s, %s, %s, %s, %lld);\n", T2(n, x), C(n), C(x), IDS(IN(1)),
       emit_real_rows(e, "r->run", N(IN(1))), emit_dim(x, -1));
}

void emit_cuda_MSE(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_mse%s(%s, %s, %s, %s);\n", T3(n, IN(0), IN(1)), C(n), C(IN(0)), C(IN(1)),
       emit_real_rows(e, "r->run", N(IN(0))));
}

void emit_cuda_MSE_GRAD(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_mse_grad%s(%s, %s, %s, %s, %lld);\n", T4(n, IN(0), IN(1), IN(2)), C(n), C(IN(0)),
       C(IN(1)), C(IN(2)), N(n));
}

/* ---- attention: q, y [B, H, T, D], k, v [B, H, T', D] (or [B, T, H, D]: MpAttnLays) ---------------------- */
/* nq tensor inputs, then the mask (if any): the options (MpAttnOpt) last */
static void attention(Emit *e, const IrNode *n, const char *k, const IrNode *f, int nq)
{
    IrAttn a = ir_attention(f);
    const char *opt = emit_attention_opt(e, n, f, f->nin > 3 ? IN(nq) : NULL, true);
    if (opt)
        em(e, "    {\n        const MpAttnOpt o = %s;\n", opt);
    em(e, "%smp_cu_%s<%s", opt ? "        " : "    ", k, ty(n));
    for (int i = 0; i < nq; i++)
        em(e, ", %s", ty(IN(i)));
    em(e, ">(%s, ", C(n));
    for (int i = 0; i < nq; i++)
        em(e, "%s, ", C(IN(i)));
    /* the rows' log-sum-exp after y (ir_stats_at): the forward writes
     * them, the backward reads them and y (its last input) */
    const IrNode *y = !ir_stats_at(f) ? NULL : n == f ? n : IN(n->nin - 1);
    long long lse = y ? (long long)ir_stats_at(y) : 0;
    em(e, "\n                   %lld, %lld, %lld, %lld, %d, %s%s", (long long)(a.B * a.H),
       (long long)a.T, (long long)a.Tk, (long long)a.D, (int)f->ia[0], mpdt(f->compute),
       opt ? ", &o" : lse ? ", NULL" : "");
    if (lse && n == f)
        em(e, ",\n                   (float *)((char *)%s + %lld)", C(n), lse);
    else if (lse)
        em(e, ",\n                   %s, %s, (const float *)((const char *)%s + %lld)", C(y),
           mpdt(y->type), C(y), lse);
    em(e, ");\n");
    if (opt)
        em(e, "    }\n");
}
void emit_cuda_ATTENTION(Emit *e, const IrNode *n) { attention(e, n, "attention", n, 3); }
void emit_cuda_ATTENTION_GRAD(Emit *e, const IrNode *n) { attention(e, n, "attention_grad", n->grad_of, 4); }

/* ---- loss scaling and the optimizer ----------------------------------------------------------- */
/* d(loss) = S / accumulate: from the device's loss-scale state in a step. */
void emit_cuda_LOSS_SCALE(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_loss_seed(%s, r);\n", C(n));
}
/* Carried out by the runtime (mp_cuda_step.h) on the flat gradient buffer. */
void emit_cuda_UNSCALE(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_cuda_CLIP_GRAD_NORM(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_cuda_SGD(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_cuda_ADAM(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_cuda_ADAMW(Emit *e, const IrNode *n) { (void)e; (void)n; }
void emit_cuda_RMSPROP(Emit *e, const IrNode *n) { (void)e; (void)n; }

/* ---- elementwise, norm and rope additions ------------------------------------------------------ */
void emit_cuda_ABS(Emit *e, const IrNode *n) { unary(e, n, "abs"); }
void emit_cuda_SIN(Emit *e, const IrNode *n) { unary(e, n, "sin"); }
void emit_cuda_COS(Emit *e, const IrNode *n) { unary(e, n, "cos"); }
void emit_cuda_ABS_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "abs_grad"); }
void emit_cuda_SIN_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "sin_grad"); }
void emit_cuda_COS_GRAD(Emit *e, const IrNode *n) { unary_grad(e, n, "cos_grad"); }
void emit_cuda_MAXIMUM(Emit *e, const IrNode *n) { binary(e, n, "maximum"); }
void emit_cuda_MINIMUM(Emit *e, const IrNode *n) { binary(e, n, "minimum"); }
void emit_cuda_MAXIMUM_MASK(Emit *e, const IrNode *n) { binary(e, n, "maximum_mask"); }

/* clamp, pow and their gradients: the attributes of the forward node f */
static void with_attrs(Emit *e, const IrNode *n, const char *k, const IrNode *f, int nattr)
{
    if (n->nin > 1)
        em(e, "    mp_cu_%s%s(%s, %s, %s, %lld", k, T3(n, IN(0), IN(1)), C(n), C(IN(0)), C(IN(1)), N(n));
    else
        em(e, "    mp_cu_%s%s(%s, %s, %lld", k, T2(n, IN(0)), C(n), C(IN(0)), N(n));
    for (int i = 0; i < nattr; i++)
        em(e, ", (float)%.9g", f->fa[i]);
    em(e, ");\n");
}
void emit_cuda_CLAMP(Emit *e, const IrNode *n) { with_attrs(e, n, "clamp", n, 2); }
void emit_cuda_CLAMP_GRAD(Emit *e, const IrNode *n) { with_attrs(e, n, "clamp_grad", n->grad_of, 2); }
void emit_cuda_POW(Emit *e, const IrNode *n) { with_attrs(e, n, "pow", n, 1); }
void emit_cuda_POW_GRAD(Emit *e, const IrNode *n) { with_attrs(e, n, "pow_grad", n->grad_of, 1); }

void emit_cuda_RMS_NORM(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0);
    em(e, "    mp_cu_rms_norm%s(%s, %s, %s, %lld, %lld, (float)%.9g);\n", T3(n, x, IN(1)), C(n), C(x),
       C(IN(1)), N(x) / emit_dim(x, -1), emit_dim(x, -1), n->fa[0]);
}

void emit_cuda_RMS_NORM_DX(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(1);
    em(e, "    mp_cu_rms_norm_dx%s(%s, %s, %s, %s, %lld, %lld, (float)%.9g);\n", T4(n, IN(0), x, IN(2)),
       C(n), C(IN(0)), C(x), C(IN(2)), N(x) / emit_dim(x, -1), emit_dim(x, -1), n->grad_of->fa[0]);
}

void emit_cuda_RMS_NORM_DW(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(1);
    em(e, "    mp_cu_rms_norm_dw%s(%s, %s, %s, %lld, %lld, (float)%.9g, 0.0f);\n", T3(n, IN(0), x), C(n),
       C(IN(0)), C(x), N(x) / emit_dim(x, -1), emit_dim(x, -1), n->grad_of->fa[0]);
}

/* x viewed as [outer, positions, inner] around the position axis */
static void rope(Emit *e, const IrNode *n, const IrNode *f, float sign)
{
    long long o, l, i;
    emit_around_axis(n, f->ia[0], &o, &l, &i);
    em(e, "    mp_cu_rope%s(%s, %s, %lld, %lld, %lld, %lld, (float)%.9g, %d, %.1ff);\n", T2(n, IN(0)),
       C(n), C(IN(0)), o, l, i, emit_dim(n, -1), f->fa[0], (int)f->ia[1], sign);
}
void emit_cuda_ROPE(Emit *e, const IrNode *n) { rope(e, n, n, 1.0f); }
void emit_cuda_ROPE_GRAD(Emit *e, const IrNode *n) { rope(e, n, n->grad_of, -1.0f); }

/* ---- randomness: randn, rand ---------------------------------------------- */
/* As the C target's call; the step read on the device from the step's header. */
static void random_values(Emit *e, const IrNode *n, const char *k)
{
    em(e, "    mp_cu_%s%s(%s, %lld, r->seed, r->hdr, r->micro, %d);\n", k, T1(n), C(n), N(n), n->id);
}
void emit_cuda_RANDN(Emit *e, const IrNode *n) { random_values(e, n, "randn"); }
void emit_cuda_RAND(Emit *e, const IrNode *n) { random_values(e, n, "rand"); }

/* ---- selection, comparison, masks ------------------------------------------------------ */
void emit_cuda_GT(Emit *e, const IrNode *n) { binary(e, n, "gt"); }
void emit_cuda_LT(Emit *e, const IrNode *n) { binary(e, n, "lt"); }
void emit_cuda_GE(Emit *e, const IrNode *n) { binary(e, n, "ge"); }
void emit_cuda_LE(Emit *e, const IrNode *n) { binary(e, n, "le"); }
void emit_cuda_EQ(Emit *e, const IrNode *n) { binary(e, n, "eq"); }
void emit_cuda_NE(Emit *e, const IrNode *n) { binary(e, n, "ne"); }
void emit_cuda_WHERE_DA(Emit *e, const IrNode *n) { binary(e, n, "where_da"); }
void emit_cuda_WHERE_DB(Emit *e, const IrNode *n) { binary(e, n, "where_db"); }

void emit_cuda_WHERE(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_where%s(%s, %s,\n              %s, %s,\n              %s, %s,\n              %s, %s);\n",
       T4(n, IN(0), IN(1), IN(2)), C(n), dims(e, n), C(IN(0)), dims(e, IN(0)), C(IN(1)),
       dims(e, IN(1)), C(IN(2)), dims(e, IN(2)));
}

void emit_cuda_DETACH(Emit *e, const IrNode *n) { (void)e; (void)n; /* shares its input's buffer */ }
void emit_cuda_FULL(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_fill%s(%s, (float)%.9g, %lld);\n", T1(n), C(n), n->fa[0], N(n));
}

/* max, min, argmax, argmin and max / min's gradient, as the C target's */
static void extremum(Emit *e, const IrNode *n, const char *k, const IrNode *f, int sign, int index)
{
    long long o, l, i;
    emit_around_axis(f->in[0], f->ia[0], &o, &l, &i);
    if (n->nin > 1)
        em(e, "    mp_cu_%s%s(%s, %s, %s, ", k, T3(n, IN(0), IN(1)), C(n), C(IN(0)), C(IN(1)));
    else
        em(e, "    mp_cu_%s%s(%s, %s, ", k, T2(n, IN(0)), C(n), C(IN(0)));
    em(e, "%lld, %lld, %lld, %d%s);\n", o, l, i, sign, index < 0 ? "" : index ? ", 1" : ", 0");
}
void emit_cuda_MAX(Emit *e, const IrNode *n) { extremum(e, n, "extremum", n, 1, 0); }
void emit_cuda_MIN(Emit *e, const IrNode *n) { extremum(e, n, "extremum", n, -1, 0); }
void emit_cuda_ARGMAX(Emit *e, const IrNode *n) { extremum(e, n, "extremum", n, 1, 1); }
void emit_cuda_ARGMIN(Emit *e, const IrNode *n) { extremum(e, n, "extremum", n, -1, 1); }
void emit_cuda_EXTREMUM_GRAD(Emit *e, const IrNode *n)
{
    extremum(e, n, "extremum_grad", n->grad_of, n->grad_of->op == OP_MAX ? 1 : -1, -1);
}

/* ---- routing and indexing: topk, one_hot, gather, cumsum, as the C target's ---------- */
void emit_cuda_TOPK(Emit *e, const IrNode *n)
{
    long long o, l, i;
    emit_around_axis(IN(0), n->ia[0], &o, &l, &i);
    em(e, "    mp_cu_topk%s(%s, %s, %lld, %lld, %lld, %lld);\n", T1(IN(0)), C(n), C(IN(0)), o, l, i,
       (long long)n->ia[1]);
}

void emit_cuda_ONE_HOT(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_one_hot%s(%s, %s, %lld, %lld);\n", T1(n), C(n), IDS(IN(0)), N(IN(0)), (long long)n->ia[0]);
}

void emit_cuda_GATHER(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_gather_index%s(%s, %s, %s, %s, %s, %d);\n", T2(n, IN(0)), C(n), C(IN(0)), IDS(IN(1)),
       dims(e, IN(0)), dims(e, IN(1)), (int)n->ia[0]);
}

void emit_cuda_GATHER_GRAD(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_gather_index_grad%s(%s, %s, %s, %s, %s, %d);\n", T2(n, IN(0)), C(n), C(IN(0)), IDS(IN(1)),
       dims(e, n), dims(e, IN(1)), (int)n->ia[0]);
}

void emit_cuda_CUMSUM(Emit *e, const IrNode *n)
{
    long long o, l, i;
    emit_around_axis(IN(0), n->ia[0], &o, &l, &i);
    em(e, "    mp_cu_cumsum%s(%s, %s, %lld, %lld, %lld, %d);\n", T2(n, IN(0)), C(n), C(IN(0)), o, l, i,
       (int)n->ia[1]);
}
/* ---- recurrent layers: mp_cu_gru / mp_cu_lstm<S, GI, W, B>(s, gi, w_hh, b_hh, B, T, H)
 * and their gradients <O, DS, S, W>(o, dstate, state, w_hh, B, T, H) ------------------- */
static void recurrent(Emit *e, const IrNode *n, const char *k)
{
    const IrNode *x = IN(0), *w = IN(1), *b = n->nin > 2 ? IN(2) : NULL;
    em(e, "    mp_cu_%s%s(%s, %s, %s, %s, %lld, %lld, %lld);\n", k, T4(n, x, w, b), C(n), C(x), C(w),
       b ? C(b) : "NULL", emit_dim(x, 0), emit_dim(x, 1), emit_dim(w, -1));
}
static void recurrent_grad(Emit *e, const IrNode *n, const char *k)
{
    const IrNode *st = IN(1);
    em(e, "    mp_cu_%s%s(%s, %s, %s, %s, %lld, %lld, %lld);\n", k, T4(n, IN(0), st, IN(2)), C(n),
       C(IN(0)), C(st), C(IN(2)), emit_dim(st, 0), emit_dim(st, 1), emit_dim(IN(2), -1));
}
void emit_cuda_GRU(Emit *e, const IrNode *n) { recurrent(e, n, "gru"); }
void emit_cuda_LSTM(Emit *e, const IrNode *n) { recurrent(e, n, "lstm"); }
void emit_cuda_GRU_GRAD(Emit *e, const IrNode *n) { recurrent_grad(e, n, "gru_grad"); }
void emit_cuda_LSTM_GRAD(Emit *e, const IrNode *n) { recurrent_grad(e, n, "lstm_grad"); }
/* ---- image operations ------------------------------------------------------------ */
void emit_cuda_CONV_TRANSPOSE2D(Emit *e, const IrNode *n)
{
    const IrNode *x = IN(0), *w = IN(1), *b = n->nin > 2 ? IN(2) : NULL;
    em(e, "    mp_cu_conv_transpose2d%s(%s, %s, %s, %s,\n                %s);\n", T4(n, x, w, b), C(n), C(x),
       C(w), b ? C(b) : "NULL", emit_conv_transpose(e, n));
}

/* (dy, weight): the conv2d of dy, whose adjoint the forward is */
void emit_cuda_CONV_TRANSPOSE2D_DX(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_conv2d%s(%s, %s, %s, NULL,\n                %s);\n", T4(n, IN(0), IN(1), NULL), C(n),
       C(IN(0)), C(IN(1)), emit_conv_transpose(e, n->grad_of));
}

/* (dy, x): that conv2d's weight gradient, x in the place of its dy */
void emit_cuda_CONV_TRANSPOSE2D_DW(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_conv2d_dw%s(%s, %s, %s,\n                   %s, 0.0f);\n", T3(n, IN(1), IN(0)), C(n),
       C(IN(1)), C(IN(0)), emit_conv_transpose(e, n->grad_of));
}

void emit_cuda_PAD(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_pad%s%s(%s, %s, %s);\n", pad_mode(n) ? "_mode" : "", T2(n, IN(0)), C(n), C(IN(0)),
       emit_pad(e, n));
}

void emit_cuda_PAD_GRAD(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_pad_grad%s(%s, %s, %s);\n", T2(n, IN(0)), C(n), C(IN(0)), emit_pad(e, n->grad_of));
}

void emit_cuda_UPSAMPLE(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_upsample%s(%s, %s, %s);\n", T2(n, IN(0)), C(n), C(IN(0)), emit_upsample(e, n));
}

void emit_cuda_UPSAMPLE_GRAD(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_upsample_grad%s(%s, %s, %s);\n", T2(n, IN(0)), C(n), C(IN(0)),
       emit_upsample(e, n->grad_of));
}

void emit_cuda_GROUP_NORM(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_group_norm%s(%s, %s, %s, %s, %s);\n", T4(n, IN(0), IN(1), IN(2)), C(n), C(IN(0)),
       C(IN(1)), C(IN(2)), emit_group_norm(e, n));
}

void emit_cuda_GROUP_NORM_DX(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_group_norm_dx%s(%s, %s, %s, %s, %s);\n", T4(n, IN(0), IN(1), IN(2)), C(n),
       C(IN(0)), C(IN(1)), C(IN(2)), emit_group_norm(e, n->grad_of));
}

void emit_cuda_GROUP_NORM_DW(Emit *e, const IrNode *n)
{
    em(e, "    mp_cu_group_norm_dw%s(%s, %s, %s, %s, 0.0f);\n", T3(n, IN(0), IN(1)), C(n), C(IN(0)),
       C(IN(1)), emit_group_norm(e, n->grad_of));
}
