/* plan.h - `mpcc --dump-plan`: the precision plan for people (text), tools
 * (json, keys of PRECISION.md), pictures (dot, Graphviz) and a page (html:
 * plan_html.c). */
#ifndef MPCC_PLAN_H
#define MPCC_PLAN_H

#include "ir.h"
#include <stdio.h>

/* PLAN_DOT_COLLAPSED: --dump-plan=dot --collapse, each outermost repeat
 * and block call of each phase one box. */
typedef enum { PLAN_TEXT, PLAN_JSON, PLAN_DOT, PLAN_DOT_COLLAPSED, PLAN_HTML } PlanFormat;

void plan_dump(FILE *out, const IrGraph *g, PlanFormat fmt);

/* The page of `--dump-plan=html` (plan_html.c); dev: --gpu's device, whose
 * cost the summary shows, or NULL. */
struct CostDevice;
void plan_dump_html(FILE *out, const IrGraph *g, const struct CostDevice *dev);

/* A group's name for people: "transformer.h ×12", "transformer.h.3",
 * "transformer.h.3.attn: causal_self_attention" (the page's script says
 * the same, naming a group inside another from there: "attn: ..."). */
const char *plan_scope_label(Arena *a, const IrScope *s);

/* s as a JSON string (null for NULL), escaped; for cost.c's json too. */
void plan_json_string(FILE *out, const char *s);

#endif
