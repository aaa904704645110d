/* plan.h - `mpcc --dump-plan`: the precision plan for people (text), tools
 * (json, keys of PRECISION.md) and pictures (dot, Graphviz). */
#ifndef MPCC_PLAN_H
#define MPCC_PLAN_H

#include "ir.h"
#include <stdio.h>

typedef enum { PLAN_TEXT, PLAN_JSON, PLAN_DOT } PlanFormat;

void plan_dump(FILE *out, const IrGraph *g, PlanFormat fmt);

/* s as a JSON string (null for NULL), escaped; for cost.c's json too. */
void plan_json_string(FILE *out, const char *s);

#endif
