/* prec_graphs.h - hand-built graphs for test_prec.c and test_plan.c.
 *
 * They stand in for what sema.c and autodiff.c make (those phases have
 * their own tests): shapes are set by hand, float values are left DT_NONE
 * for prec_forward(), and fake_backward() appends the backward nodes the
 * way ad_backward() is specified to (autodiff.h), for the small MLP only.
 * Static functions: each test program includes this once. */
#ifndef PREC_GRAPHS_H
#define PREC_GRAPHS_H

#include "ir.h"
#include "ops.h"

#include <string.h>

static const SrcFile test_file = {"t.mp", "", 0};

static SrcLoc at_line(int line) { return (SrcLoc){&test_file, line, 1, 1}; }

static Shape shp(int rank, int64_t a, int64_t b)
{
    Shape s = {rank, {a, b}};
    return s;
}

/* A node of a forward op, its shape given, its type left to prec.c. */
static IrNode *op_n(IrGraph *g, IrOp op, int line, Shape s, int nin, IrNode *a, IrNode *b,
                    IrNode *c)
{
    IrNode *in[3] = {a, b, c};
    IrNode *n = ir_add(g, op, at_line(line), nin, in);
    n->shape = s;
    return n;
}

static IrNode *const_n(IrGraph *g, int line, double v)
{
    IrNode *n = ir_add(g, OP_CONST, at_line(line), 0, NULL);
    n->fa[0] = v;
    n->shape = shp(0, 0, 0);
    return n;
}

static IrNode *user_cast_n(IrGraph *g, int line, IrNode *x, DType t)
{
    IrNode *n = ir_add1(g, OP_CAST, at_line(line), x);
    n->shape = x->shape;
    n->type = n->override = t;
    return n;
}

static IrNode *param_n(IrGraph *g, const char *name, int line, Shape s)
{
    return ir_add_param(g, name, at_line(line), s)->node;
}

/* The network of LANGUAGE.md's first example, with a batch of 4:
 *   1 image: u8[4, 6]    2 label: i32[4]
 *   3 x      = f32(image) / 255
 *   4 h      = relu(linear(x, 3))
 *   5 logits: f32 = linear(h, 2)
 *   6 loss   = cross_entropy(logits, label)
 *   7 metric accuracy = accuracy(logits, label)            */
typedef struct Mlp {
    IrGraph *g;
    IrNode *image, *label, *ucast, *x, *w1, *b1, *lin1, *h, *w2, *b2, *logits, *loss, *acc;
} Mlp;

static Mlp build_mlp(Arena *a, Policy policy)
{
    Mlp m;
    IrGraph *g = m.g = ir_new(a);
    g->model = "mlp";
    g->model_loc = at_line(1);
    g->train.policy = policy;
    g->train.loc = at_line(9);
    g->batch = 4;
    m.image = ir_add_input(g, "image", at_line(1), DT_U8, shp(2, 4, 6))->node;
    m.label = ir_add_input(g, "label", at_line(2), DT_I32, shp(1, 4, 0))->node;
    g->inputs[1].classes = 2;
    m.ucast = user_cast_n(g, 3, m.image, DT_F32);
    m.x = op_n(g, OP_DIV, 3, shp(2, 4, 6), 2, m.ucast, const_n(g, 3, 255), NULL);
    m.x->name = "x";
    m.w1 = param_n(g, "h.weight", 4, shp(2, 3, 6));
    m.b1 = param_n(g, "h.bias", 4, shp(1, 3, 0));
    m.lin1 = op_n(g, OP_LINEAR, 4, shp(2, 4, 3), 3, m.x, m.w1, m.b1);
    m.h = op_n(g, OP_RELU, 4, shp(2, 4, 3), 1, m.lin1, NULL, NULL);
    m.h->name = "h";
    m.w2 = param_n(g, "logits.weight", 5, shp(2, 2, 3));
    m.b2 = param_n(g, "logits.bias", 5, shp(1, 2, 0));
    m.logits = op_n(g, OP_LINEAR, 5, shp(2, 4, 2), 3, m.h, m.w2, m.b2);
    m.logits->name = "logits";
    m.w2->override = m.b2->override = m.logits->override = DT_F32;
    m.loss = op_n(g, OP_CROSS_ENTROPY, 6, shp(0, 0, 0), 2, m.logits, m.label, NULL);
    m.loss->name = "loss";
    m.acc = op_n(g, OP_ACCURACY, 7, shp(0, 0, 0), 2, m.logits, m.label, NULL);
    m.acc->name = "accuracy";
    ir_add_metric(g, "accuracy", at_line(7), m.acc);
    g->loss = m.loss;
    return m;
}

/* A backward node as ad_backward() makes it: class, rule and compute of
 * the forward node it differentiates (casts back included). */
static IrNode *bwd_n(IrGraph *g, IrOp op, IrNode *of, Shape s, DType t, int nin, IrNode *a,
                     IrNode *b, IrNode *c)
{
    IrNode *in[3] = {a, b, c};
    IrNode *n = ir_add(g, op, of->loc, nin, in);
    n->phase = PH_BACKWARD;
    n->grad_of = of;
    n->shape = s;
    n->type = t;
    n->compute = of->compute;
    n->cls = of->cls;
    n->rule = of->rule;
    return n;
}

/* The backward pass of the MLP after prec_forward(), as autodiff would
 * write it. Reads these forward values: loss, logits, label, the f32 cast
 * of h, the linear output, the f16 cast of x (see test_memory). */
static void fake_backward(Mlp *m)
{
    IrGraph *g = m->g;
    IrNode *ls = ir_add1(g, OP_LOSS_SCALE, m->loss->loc, m->loss);
    ls->phase = PH_BACKWARD;
    ls->grad_of = m->loss;
    ls->type = ls->compute = DT_F32;
    g->loss_scale = ls;
    IrNode *hcast = m->logits->in[0], *xcast = m->lin1->in[0];
    IrNode *dlog = bwd_n(g, OP_CROSS_ENTROPY_GRAD, m->loss, m->logits->shape, DT_F32, 3, ls,
                         m->logits, m->label);
    IrNode *dh32 = bwd_n(g, OP_MATMUL, m->logits, hcast->shape, DT_F32, 2, dlog, m->w2, NULL);
    g->params[3].grad = bwd_n(g, OP_SUM_TO, m->logits, m->b2->shape, DT_F32, 1, dlog, NULL, NULL);
    g->params[2].grad = bwd_n(g, OP_MATMUL_TN, m->logits, m->w2->shape, DT_F32, 2, dlog, hcast, NULL);
    IrNode *dh = hcast->op != OP_CAST ? dh32
               : bwd_n(g, OP_CAST, hcast, m->h->shape, m->h->type, 1, dh32, NULL, NULL);
    IrNode *dlin = bwd_n(g, OP_RELU_GRAD, m->h, m->lin1->shape, m->lin1->type, 2, dh, m->lin1, NULL);
    IrNode *dw = bwd_n(g, OP_MATMUL_TN, m->lin1, m->w1->shape, g->lowp, 2, dlin, xcast, NULL);
    IrNode *db = bwd_n(g, OP_SUM_TO, m->lin1, m->b1->shape, g->lowp, 1, dlin, NULL, NULL);
    IrNode *wcast = m->lin1->in[1], *bcast = m->lin1->in[2];
    g->params[0].grad = wcast->op != OP_CAST ? dw
                      : bwd_n(g, OP_CAST, wcast, m->w1->shape, DT_F32, 1, dw, NULL, NULL);
    g->params[1].grad = bcast->op != OP_CAST ? db
                      : bwd_n(g, OP_CAST, bcast, m->b1->shape, DT_F32, 1, db, NULL, NULL);
    ir_renumber(g);
}

static int count_op(const IrGraph *g, IrOp op)
{
    int n = 0;
    for (int i = 0; i < g->nnodes; i++)
        n += g->nodes[i]->op == op;
    return n;
}

#endif
