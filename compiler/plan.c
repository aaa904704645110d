/* plan.c - SCAFFOLD: replaced by the real plan dump. */
#include "plan.h"
void plan_dump(FILE *out, const IrGraph *g, PlanFormat fmt) { (void)out; (void)g; (void)fmt; diag_internal(__FILE__, __LINE__, "plan not written yet"); }
