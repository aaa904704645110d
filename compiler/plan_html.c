/* plan_html.c - the plan as a page (`--dump-plan=html`) and as a collapsed
 * picture (`--dump-plan=dot --collapse`): PRECISION.md, "Additions: the
 * plan as a page".
 *
 * The page is templates/plan.html.in (its style and script inline,
 * embedded in mpcc at build time) with the plan's data pasted where the
 * template's line `@@PLAN@@` stands, as three JSON script elements:
 *   plan    the json plan, byte for byte what --dump-plan=json prints, so
 *           the page's colours and cast marks are the json's, node for node;
 *   groups  the groups (ir.h, IrScope) a node belongs to, the text plan
 *           (the page shows a node's row of it on hover);
 *   cost    cost.c's json when --gpu is given, else null.
 * The script lays the graph out itself (a layered layout, docs/DESIGN.md
 * says why not Graphviz) and redraws it when a box opens or closes.
 *
 * The collapsed dot draws each outermost group of each phase as one box
 * ("transformer.h x12") and the nodes outside any group as --dump-plan=dot
 * does; an edge between boxes stands for all the edges between their
 * nodes, dashed when one of them reads through a cast. */
#include "plan.h"
#include "cost.h"
#include "emit.h"
#include "ops.h"

#include <stdlib.h>
#include <string.h>

/* JSON text inside <script>: "<" only ever stands in a string there, and
 * \u003c keeps "</script>" in a name from ending the element. */
static void script_json(FILE *out, const char *json)
{
    for (const char *p = json; *p; p++)
        if (*p == '<')
            fputs("\\u003c", out);
        else
            fputc(*p, out);
}

/* What a printer writes to a FILE, caught as one string (free it). */
typedef struct Capture {
    FILE *f;
    char *buf;
    size_t len;
} Capture;

static FILE *capture(Capture *c)
{
    c->f = open_memstream(&c->buf, &c->len);
    MP_ASSERT(c->f != NULL);
    return c->f;
}

static char *captured(Capture *c)
{
    MP_ASSERT(fclose(c->f) == 0);
    return c->buf;
}

static const char *const scope_kind[] = {"repeat", "copy", "block"};

static void html_groups(FILE *out, const IrGraph *g)
{
    const IrScope **scopes = arena_alloc(g->arena, sizeof *scopes * (size_t)(g->nscopes + 1));
    for (int i = 0; i < g->nnodes; i++)       /* every scope that holds a node, and its parents */
        for (const IrScope *s = g->nodes[i]->scope; s && !scopes[s->id]; s = s->parent)
            scopes[s->id] = s;
    fputs("{\"scopes\": [", out);
    bool first = true;
    for (int id = 1; id <= g->nscopes; id++) {
        const IrScope *s = scopes[id];
        if (!s)
            continue;
        fprintf(out, "%s\n  {\"id\": %d, \"kind\": \"%s\", \"name\": ", first ? "" : ",", id,
                scope_kind[s->kind]);
        plan_json_string(out, s->name);
        fputs(", \"block\": ", out);
        plan_json_string(out, s->block);
        fprintf(out, ", \"copy\": %d, \"count\": %d, \"parent\": %d}", s->copy, s->count,
                s->parent ? s->parent->id : 0);
        first = false;
    }
    fputs("],\n \"node_scope\": [", out);
    for (int i = 0; i < g->nnodes; i++)
        fprintf(out, "%s%d", i ? ", " : "", g->nodes[i]->scope ? g->nodes[i]->scope->id : 0);
    fputs("],\n \"text\": ", out);
    Capture c;
    plan_dump(capture(&c), g, PLAN_TEXT);
    char *text = captured(&c);
    plan_json_string(out, text);
    free(text);
    fputs("}", out);
}

static void script(FILE *out, const char *id, char *json)
{
    fprintf(out, "<script id=\"%s\" type=\"application/json\">\n", id);
    script_json(out, json ? json : "null");
    fputs("\n</script>\n", out);
    free(json);
}

void plan_dump_html(FILE *out, const IrGraph *g, const CostDevice *dev)
{
    const char *t = NULL;
    for (int i = 0; i < mp_template_count && !t; i++)
        if (!strcmp(mp_template_names[i], "plan.html.in"))
            t = mp_template_texts[i];
    MP_ASSERT(t != NULL);
    const char *slot = strstr(t, "@@PLAN@@\n");
    MP_ASSERT(slot != NULL);
    fwrite(t, 1, (size_t)(slot - t), out);
    Capture c;
    plan_dump(capture(&c), g, PLAN_JSON);
    script(out, "plan", captured(&c));
    html_groups(capture(&c), g);
    script(out, "groups", captured(&c));
    if (dev)
        cost_dump(capture(&c), g, dev, true);
    script(out, "cost", dev ? captured(&c) : NULL);
    fputs(slot + strlen("@@PLAN@@\n"), out);
}
