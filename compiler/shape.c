/* shape.c - SCAFFOLD: replaced by the real shape rules (one per ops.def row). */
#include "ops.h"
#define OP(id, name, nin, cls, kind) \
    bool shape_##id(IrGraph *g, IrNode *n) { (void)g; (void)n; diag_internal(__FILE__, __LINE__, "shape rule of " #id " not written yet"); }
#include "ops.def"
#undef OP
