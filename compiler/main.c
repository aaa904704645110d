/* main.c - mpcc's command line (TRAINER.md "mpcc's command line").
 *
 *   mpcc MODEL.mp [-o FILE] [--target cuda|c] [--precision POLICY]
 *                 [--dump-plan[=text|json|dot|html|cost|cost-json]] [--collapse]
 *                 [--gpu NAME]
 *                 [--fuse | --no-fuse] [--no-loop] [--memory-budget SIZE]
 *                 [--float32-matmul ieee|tf32]
 *                 [--version] [--help]
 *
 * Runs the phases of docs/DESIGN.md in order and stops after the first
 * phase that reported errors. The output file is written by
 * runtime/mp_out.h: to a temporary name beside it, renamed into place only
 * when everything succeeded (an error never leaves a file behind); only a
 * regular file is replaced, never the model itself. Exit codes: diag.h. */
#include "ast.h"
#include "autodiff.h"
#include "diag.h"
#include "emit.h"
#include "cost.h"
#include "fuse.h"
#include "memplan.h"
#include "recompute.h"
#include "plan.h"
#include "prec.h"
#include "sema.h"
#include "mp_out.h"   /* runtime/: the writer programs and mpcc share */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: mpcc MODEL.mp [options]\n"
    "\n"
    "Compiles a model description into a mixed-precision training program.\n"
    "\n"
    "options:\n"
    "  -o FILE                 output file (default: MODEL_NAME.cu, or .c with --target c)\n"
    "  --target cuda|c         CUDA program (default) or portable C\n"
    "  --precision POLICY      float32, mixed_float16, mixed_bfloat16 or mixed_float8\n"
    "                          (overrides the train block)\n"
    "  --dump-plan[=FORMAT]    print the precision plan: text (default), json, dot, or\n"
    "                          html (one self-contained page: repeats and blocks as\n"
    "                          boxes that open on a click, search, a node's row on hover);\n"
    "                          cost or cost-json: each op's FLOPs, bytes and roofline\n"
    "                          time on the --gpu device, the step's time and MFU;\n"
    "                          no program is written unless -o is given too\n"
    "  --collapse              with --dump-plan=dot: each repeat and block call one box\n"
    "  --gpu NAME              the device of --dump-plan=cost: h100, h200, a100, l4, or\n"
    "                          cpu (this machine); with html the summary shows the cost\n"
    "  --memory-budget SIZE    bound the memory of a training step (e.g. 6GiB; overrides\n"
    "                          the train block's memory_budget): forward values are\n"
    "                          recomputed in the backward pass until it is met\n"
    "  --float32-matmul ieee|tf32\n"
    "                          tf32: products that compute in f32 round their operands\n"
    "                          to TF32 (cuBLAS's TF32 mode on the GPU); overrides the\n"
    "                          train block's float32_matmul\n"
    "  --no-loop               write every copy of a repeat and iteration of a for loop\n"
    "                          out in full, instead of one function per body called in\n"
    "                          a loop (for tests)\n"
    "  --fuse, --no-fuse       fuse chains of elementwise ops into one pass over memory\n"
    "                          (default on; MPCC_NO_FUSE=1 in the environment makes the\n"
    "                          default off); results are bit-identical either way\n"
    "  --version               print mpcc's version\n"
    "  --help                  print this help\n"
    "\n"
    "exit status: 0 ok (warnings allowed), 1 errors in the model, 2 bad usage or I/O,\n"
    "3 internal error (a bug in mpcc)\n";

typedef struct Options {
    const char *input, *output;
    bool target_c, dump;
    bool fuse;                  /* run fuse.c's pass */
    bool dump_ast;              /* hidden developer flag: print the tree, stop */
    bool no_loop;               /* --no-loop: repeat copies, for iterations written out in full */
    PlanFormat fmt;
    bool collapse;              /* --collapse: dot with repeats and blocks as boxes */
    int cost;                   /* --dump-plan=cost 1, cost-json 2 */
    const char *gpu;            /* --gpu */
    int policy;                 /* -1: the train block decides */
    int64_t budget;             /* --memory-budget, bytes; 0: the train block's */
    int tf32;                   /* --float32-matmul: 0 ieee, 1 tf32; -1: the train block's */
} Options;

static bool parse_policy(const char *s, int *out)
{
    static const char *const names[] = {"float32", "mixed_float16", "mixed_bfloat16", "mixed_float8"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return true;
        }
    diag_usage("unknown precision policy '%s', expected float32, mixed_float16, "
               "mixed_bfloat16 or mixed_float8", s);
    return false;
}

/* Returns -1 to go on, or an exit status. */
static int parse_args(int argc, char **argv, Options *o)
{
    const char *no_fuse = getenv("MPCC_NO_FUSE");
    *o = (Options){.policy = -1, .tf32 = -1, .fuse = !(no_fuse && *no_fuse && strcmp(no_fuse, "0") != 0)};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return EXIT_OK;
        } else if (strcmp(a, "--version") == 0) {
            printf("mpcc %s\n", MPCC_VERSION);
            return EXIT_OK;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--target") == 0 || strcmp(a, "--precision") == 0
                   || strcmp(a, "--gpu") == 0 || strcmp(a, "--memory-budget") == 0
                   || strcmp(a, "--float32-matmul") == 0) {
            if (i + 1 >= argc) {
                diag_usage("%s needs a value", a);
                return EXIT_USAGE;
            }
            val = argv[++i];
            if (a[1] == 'o')
                o->output = val;
            else if (strcmp(a, "--memory-budget") == 0) {
                if (!recompute_parse_size(val, &o->budget)) {
                    diag_usage("--memory-budget '%s': expected a size in bytes, or with kB, MB, GB, "
                               "KiB, MiB or GiB (e.g. 6GiB)", val);
                    return EXIT_USAGE;
                }
            }
            else if (strcmp(a, "--float32-matmul") == 0) {
                if (strcmp(val, "ieee") != 0 && strcmp(val, "tf32") != 0) {
                    diag_usage("unknown --float32-matmul '%s', expected ieee or tf32", val);
                    return EXIT_USAGE;
                }
                o->tf32 = val[0] == 't';
            }
            else if (strcmp(a, "--gpu") == 0)
                o->gpu = val;
            else if (strcmp(a, "--target") == 0) {
                if (strcmp(val, "c") == 0)
                    o->target_c = true;
                else if (strcmp(val, "cuda") == 0)
                    o->target_c = false;
                else {
                    diag_usage("unknown target '%s', expected cuda or c", val);
                    return EXIT_USAGE;
                }
            } else if (!parse_policy(val, &o->policy))
                return EXIT_USAGE;
        } else if (strncmp(a, "--dump-plan", 11) == 0 && (a[11] == 0 || a[11] == '=')) {
            o->dump = true;
            o->cost = 0;
            const char *f = a[11] ? a + 12 : "text";
            if (strcmp(f, "text") == 0)
                o->fmt = PLAN_TEXT;
            else if (strcmp(f, "json") == 0)
                o->fmt = PLAN_JSON;
            else if (strcmp(f, "dot") == 0)
                o->fmt = PLAN_DOT;
            else if (strcmp(f, "html") == 0)
                o->fmt = PLAN_HTML;
            else if (strcmp(f, "cost") == 0 || strcmp(f, "cost-json") == 0)
                o->cost = f[4] ? 2 : 1;
            else {
                diag_usage("unknown plan format '%s', expected text, json, dot, html, cost or "
                           "cost-json", f);
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "--collapse") == 0) {
            o->collapse = true;
        } else if (strcmp(a, "--fuse") == 0 || strcmp(a, "--no-fuse") == 0) {
            o->fuse = a[2] == 'f';
        } else if (strcmp(a, "--dump-ast") == 0) {
            o->dump_ast = true;
        } else if (strcmp(a, "--no-loop") == 0) {
            o->no_loop = true;
        } else if (a[0] == '-' && a[1] != 0) {
            diag_usage("unknown option '%s' (see mpcc --help)", a);
            return EXIT_USAGE;
        } else if (o->input) {
            diag_usage("more than one model file given ('%s' and '%s')", o->input, a);
            return EXIT_USAGE;
        } else
            o->input = a;
    }
    if (!o->input) {
        diag_usage("no model file given (see mpcc --help)");
        return EXIT_USAGE;
    }
    if (o->cost && !o->gpu) {
        diag_usage("--dump-plan=%s needs --gpu NAME (%s)", o->cost == 2 ? "cost-json" : "cost",
                   cost_device_keys());
        return EXIT_USAGE;
    }
    if (o->collapse && !(o->dump && !o->cost && o->fmt == PLAN_DOT)) {
        diag_usage("--collapse only applies to --dump-plan=dot");
        return EXIT_USAGE;
    }
    if (o->gpu && !o->cost && !(o->dump && o->fmt == PLAN_HTML)) {
        diag_usage("--gpu only applies to --dump-plan=cost, cost-json or html");
        return EXIT_USAGE;
    }
    if (o->gpu && !cost_device(o->gpu)) {
        diag_usage("unknown device '%s' for --gpu, expected %s", o->gpu, cost_device_keys());
        return EXIT_USAGE;
    }
    return -1;
}

/* Write the program through runtime/mp_out.h, the runtime's own writer:
 * the same output rules as the generated program (TRAINER.md, Outputs),
 * the model being the one input that -o must not name. */
static int write_program(const Options *o, const IrGraph *g)
{
    MpOutIn in = {"the model", o->input};
    MpOut out;
    MpErr e;
    if (mp_out_check("cannot write", o->output, &in, 1, NULL, 0, &e)
        || mp_out_begin(&out, o->output, &e)) {
        diag_usage("%s", e.msg);
        return EXIT_USAGE;
    }
    if (!(o->target_c ? emit_c(out.f, g, !o->no_loop) : emit_cuda(out.f, g, !o->no_loop))) {
        mp_out_abort(&out);
        diag_usage("cannot write '%s'", o->output);
        return EXIT_USAGE;
    }
    if (mp_out_commit(&out, o->output, &e)) {
        diag_usage("%s", e.msg);
        return EXIT_USAGE;
    }
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    diag_init(stderr);
    Options o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    rc = EXIT_OK;

    Arena arena;
    arena_init(&arena);
    SrcFile *file = ast_read_file(&arena, o.input);
    if (!file)
        return EXIT_USAGE;
    Ast *ast = ast_parse(&arena, file);
    if (o.dump_ast) {
        ast_dump(stdout, ast);
        return diag_error_count() ? EXIT_MODEL : EXIT_OK;
    }
    if (diag_error_count())
        return EXIT_MODEL;
    IrGraph *g = sema_lower(&arena, ast, o.policy);
    if (!g || diag_error_count())
        return EXIT_MODEL;
    if (o.tf32 >= 0)
        g->train.tf32 = o.tf32;
    prec_forward(g);
    if (diag_error_count())
        return EXIT_MODEL;
    ad_backward(g);
    prec_finish(g);
    if (diag_error_count())
        return EXIT_MODEL;
    memplan_fold_casts(g);
    if (o.budget)
        g->train.memory_budget_loc = g->model_loc;
    if (!recompute_plan(g, o.budget ? o.budget : g->train.memory_budget, g->train.memory_budget_loc, o.fuse))
        return EXIT_MODEL;

    if (o.dump && o.cost)
        cost_dump(stdout, g, cost_device(o.gpu), o.cost == 2);
    else if (o.dump && o.fmt == PLAN_HTML)
        plan_dump_html(stdout, g, o.gpu ? cost_device(o.gpu) : NULL);
    else if (o.dump)
        plan_dump(stdout, g, o.collapse ? PLAN_DOT_COLLAPSED : o.fmt);
    if (!o.dump || o.output) {
        if (!o.output)
            o.output = arena_printf(&arena, "%s.%s", g->model, o.target_c ? "c" : "cu");
        rc = write_program(&o, g);
    }
    if (fflush(stdout) != 0) {
        diag_usage("cannot write standard output");
        rc = EXIT_USAGE;
    }
    arena_free(&arena);
    return rc;
}
