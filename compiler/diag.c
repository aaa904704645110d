/* diag.c - SCAFFOLD: replaced by the real diagnostics module. */
#include "diag.h"
#include <stdarg.h>
#include <stdlib.h>
static FILE *out;
static int nerr, nwarn;
void diag_init(FILE *f) { out = f; }
static void vmsg(const char *kind, SrcLoc at, const char *fmt, va_list ap)
{
    if (at.file) fprintf(out ? out : stderr, "%s:%d:%d: ", at.file->path, at.line, at.col);
    fprintf(out ? out : stderr, "%s: ", kind);
    vfprintf(out ? out : stderr, fmt, ap);
    fputc('\n', out ? out : stderr);
}
void diag_error(SrcLoc at, const char *fmt, ...) { va_list ap; va_start(ap, fmt); vmsg("error", at, fmt, ap); va_end(ap); nerr++; }
void diag_warning(SrcLoc at, const char *fmt, ...) { va_list ap; va_start(ap, fmt); vmsg("warning", at, fmt, ap); va_end(ap); nwarn++; }
void diag_note(SrcLoc at, const char *fmt, ...) { va_list ap; va_start(ap, fmt); vmsg("note", at, fmt, ap); va_end(ap); }
int diag_error_count(void) { return nerr; }
int diag_warning_count(void) { return nwarn; }
bool diag_too_many(void) { return nerr >= DIAG_MAX_ERRORS; }
const char *diag_suggest(const char *name, const char *const *cands, int n) { (void)name; (void)cands; (void)n; return NULL; }
void diag_usage(const char *fmt, ...) { va_list ap; va_start(ap, fmt); fputs("mpcc: ", stderr); vfprintf(stderr, fmt, ap); fputc('\n', stderr); va_end(ap); }
_Noreturn void diag_internal(const char *file, int line, const char *msg) { fprintf(stderr, "mpcc: internal error at %s:%d: %s\n", file, line, msg); exit(EXIT_INTERNAL); }
_Noreturn void diag_fatal_oom(void) { fprintf(stderr, "mpcc: out of memory\n"); exit(EXIT_INTERNAL); }
