/* diag.h - diagnostics: every message a user sees about a model.
 *
 * Format (LANGUAGE.md "Errors"):
 *     file.mp:LINE:COL: error: what, expected vs found
 *         <the source line>
 *                 ^~~~
 * Errors are counted and compilation goes on; after DIAG_MAX_ERRORS the
 * run stops with "too many errors". Notes point at related definitions.
 * Exit codes of mpcc live here too, in one place (TRAINER.md). */
#ifndef MPCC_DIAG_H
#define MPCC_DIAG_H

#include <stdbool.h>
#include <stdio.h>

enum {
    EXIT_OK       = 0,   /* success, warnings allowed */
    EXIT_MODEL    = 1,   /* errors in the model */
    EXIT_USAGE    = 2,   /* bad usage or I/O */
    EXIT_INTERNAL = 3,   /* a bug in mpcc: message names mpcc's file:line */
};

#define DIAG_MAX_ERRORS 20

/* A source file, kept whole in memory so messages can show its lines. */
typedef struct SrcFile {
    const char *path;   /* as given on the command line */
    const char *text;   /* NUL-terminated contents */
    long len;
} SrcFile;

/* A place in a model file. line and col are 1-based (col counts bytes);
 * len is the width of the underline in bytes (0 or 1 means a single caret;
 * it is clipped to the end of the line when printed, so a span that runs
 * over several lines underlines the rest of its first line). file NULL = no
 * location. */
typedef struct SrcLoc {
    const SrcFile *file;
    int line, col, len;
} SrcLoc;

void diag_init(FILE *out);          /* where messages go (stderr by default); resets */
void diag_reset(void);              /* counts back to zero (fuzzer, unit tests) */
void diag_error(SrcLoc at, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_warning(SrcLoc at, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void diag_note(SrcLoc at, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Until called again with from NULL: a message located in `from` (the
 * prelude) is printed at `to` (the user's call), followed by " (what)". */
void diag_redirect(const SrcFile *from, SrcLoc to, const char *what);
int  diag_error_count(void);
int  diag_warning_count(void);
bool diag_too_many(void);           /* true once DIAG_MAX_ERRORS were reported */

/* Closest candidate to `name` by edit distance, or NULL if none is close
 * enough to be a plausible typo. For "did you mean 'x'?" hints. */
const char *diag_suggest(const char *name, const char *const *cands, int n);

/* Usage and I/O errors: "mpcc: what" on stderr. */
void diag_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Internal errors: print mpcc's own file:line and exit(EXIT_INTERNAL). */
_Noreturn void diag_internal(const char *file, int line, const char *msg);
_Noreturn void diag_fatal_oom(void);
#define MP_ASSERT(c) ((c) ? (void)0 : diag_internal(__FILE__, __LINE__, "assertion failed: " #c))

#endif
