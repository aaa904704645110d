/* emit_c.c - SCAFFOLD: replaced by the real C code generator. */
#include "emit.h"
bool emit_c(FILE *out, const IrGraph *g) { (void)out; (void)g; diag_internal(__FILE__, __LINE__, "C target not written yet"); }
const char *emit_c_name(Arena *a, const char *model_name) { (void)a; return model_name; }
