/* sema.c - SCAFFOLD: replaced by the real semantic analysis. */
#include "sema.h"
IrGraph *sema_lower(Arena *a, const Ast *ast, int policy_override) { (void)a; (void)ast; (void)policy_override; diag_internal(__FILE__, __LINE__, "sema not written yet"); }
