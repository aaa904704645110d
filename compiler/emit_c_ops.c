/* emit_c_ops.c - SCAFFOLD: the per-op C emitters, written once the kernel API lands. */
#include "emit_common.h"
#include "diag.h"
#define OP(id, name, nin, cls, kind) \
    void emit_c_##id(Emit *e, const IrNode *n) { (void)e; (void)n; diag_internal(__FILE__, __LINE__, "C emitter of " #id " not written yet"); }
#include "ops.def"
#undef OP
