/* diag.c - every message a user sees about a model (see diag.h).
 *
 * A message with a location prints three lines:
 *     file.mp:LINE:COL: error: what
 *         <the source line, indented by 4>
 *         <spaces>^~~~
 * COL is a byte column (1-based). The source line is shown "safely": tabs
 * expanded to 8-column stops so the caret lines up, any byte that is not
 * printable ASCII shown as '?', and a line wider than SHOW_WIDTH clipped to
 * a window around the caret with "..." at the cut ends. The underline never
 * runs past the end of the line, whatever `len` says.
 *
 * Invariants: output depends only on the messages and the source text
 * (golden tests compare it byte for byte); after DIAG_MAX_ERRORS errors one
 * "too many errors, stopping" line is printed and everything after it is
 * dropped, and diag_too_many() tells the phases to stop. */
#include "diag.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define INDENT     "    "
#define TAB_STOP   8
#define SHOW_WIDTH 100   /* widest source line shown unclipped */
#define SHOW_LEFT  40    /* columns kept left of the caret when clipping */

static FILE *out;
static int nerr, nwarn;
static bool stopped;     /* the "too many errors" line was printed */

/* The line last looked up, so that messages in file order cost O(text). */
static struct {
    const SrcFile *file;
    const char *text;    /* a new file may come at the same address */
    int line;
    long off;
} cache;

static FILE *sink(void) { return out ? out : stderr; }

void diag_init(FILE *f)
{
    out = f;
    diag_reset();
}

void diag_reset(void)
{
    nerr = nwarn = 0;
    stopped = false;
    cache.file = NULL;
}

int diag_error_count(void) { return nerr; }
int diag_warning_count(void) { return nwarn; }
bool diag_too_many(void) { return nerr >= DIAG_MAX_ERRORS; }

/* Byte offset of the start of line `line` (1-based), or -1 past the end. */
static long line_start(const SrcFile *f, int line)
{
    long off = 0;
    int at = 1;
    if (cache.file == f && cache.text == f->text && cache.line <= line) {
        off = cache.off;
        at = cache.line;
    }
    while (at < line) {
        const char *nl = memchr(f->text + off, '\n', (size_t)(f->len - off));
        if (!nl)
            return -1;
        off = nl - f->text + 1;
        at++;
    }
    cache.file = f;
    cache.text = f->text;
    cache.line = line;
    cache.off = off;
    return off;
}

static long line_length(const SrcFile *f, long start)
{
    const char *nl = memchr(f->text + start, '\n', (size_t)(f->len - start));
    long n = nl ? nl - (f->text + start) : f->len - start;
    if (n > 0 && f->text[start + n - 1] == '\r')   /* CRLF files */
        n--;
    return n;
}

/* Width on screen of byte c at display column dcol. */
static long width_at(char c, long dcol)
{
    return c == '\t' ? TAB_STOP - dcol % TAB_STOP : 1;
}

/* Display column of byte index i of the line s. */
static long display_col(const char *s, long i)
{
    long d = 0;
    for (long k = 0; k < i; k++)
        d += width_at(s[k], d);
    return d;
}

/* Display width of the n bytes of s from byte i (at display column d),
 * counted only as far as `cap`: a message on a huge line costs
 * O(its column), not O(the line). */
static long display_width(const char *s, long i, long d, long n, long cap)
{
    for (long k = i; k < n && d <= cap; k++)
        d += width_at(s[k], d);
    return d;
}

/* Print the display columns [from, to) of line s (n bytes). */
static void print_window(FILE *f, const char *s, long n, long from, long to)
{
    long d = 0;
    for (long k = 0; k < n && d < to; k++) {
        unsigned char c = (unsigned char)s[k];
        long w = width_at((char)c, d);
        for (long j = 0; j < w; j++, d++) {
            if (d < from || d >= to)
                continue;
            fputc(c == '\t' ? ' ' : (c >= 0x20 && c < 0x7f) ? c : '?', f);
        }
    }
}

static void print_source(FILE *f, SrcLoc at)
{
    long start = line_start(at.file, at.line);
    if (start < 0)
        return;
    const char *s = at.file->text + start;
    long n = line_length(at.file, start);
    long col = at.col < 1 ? 0 : at.col - 1;
    if (col > n)
        col = n;                       /* end of file / end of line */
    long len = at.len < 1 ? 1 : at.len;
    if (len > n - col)
        len = n - col < 1 ? 1 : n - col;
    long c0 = display_col(s, col);
    long from = c0 > SHOW_LEFT ? c0 - SHOW_LEFT : 0;
    long width = display_width(s, col, c0, n, from + SHOW_WIDTH);
    if (width <= SHOW_WIDTH)
        from = 0;                          /* the whole line fits */
    long to = from + SHOW_WIDTH < width ? from + SHOW_WIDTH : width;
    long c1 = display_width(s, col, c0, col + len, to);
    const char *lead = from > 0 ? "..." : "";
    fprintf(f, INDENT "%s", lead);
    print_window(f, s, n, from, to);
    fputs(to < width ? "...\n" : "\n", f);
    fprintf(f, INDENT "%*s^", (int)(strlen(lead) + (size_t)(c0 - from)), "");
    long end = c1 < to ? c1 : to;
    for (long d = c0 + 1; d < end; d++)
        fputc('~', f);
    fputc('\n', f);
}

/* diag_redirect: messages about `from` go to `to`, saying `what`. */
static struct {
    const SrcFile *from;
    SrcLoc to;
    const char *what;
} redir;

void diag_redirect(const SrcFile *from, SrcLoc to, const char *what)
{
    redir.from = from;
    redir.to = to;
    redir.what = what;
}

static void vmessage(const char *kind, SrcLoc at, const char *fmt, va_list ap)
{
    FILE *f = sink();
    bool moved = redir.from && at.file == redir.from;
    if (moved)
        at = redir.to;
    if (at.file)
        fprintf(f, "%s:%d:%d: ", at.file->path, at.line, at.col);
    fprintf(f, "%s: ", kind);
    vfprintf(f, fmt, ap);
    if (moved)
        fprintf(f, " (%s)", redir.what);
    fputc('\n', f);
    if (at.file && at.line > 0 && at.file->len > 0)
        print_source(f, at);
}

void diag_error(SrcLoc at, const char *fmt, ...)
{
    if (stopped)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmessage("error", at, fmt, ap);
    va_end(ap);
    if (++nerr >= DIAG_MAX_ERRORS) {
        fputs("error: too many errors, stopping\n", sink());
        stopped = true;
    }
}

void diag_warning(SrcLoc at, const char *fmt, ...)
{
    if (stopped)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmessage("warning", at, fmt, ap);
    va_end(ap);
    nwarn++;
}

void diag_note(SrcLoc at, const char *fmt, ...)
{
    if (stopped)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmessage("note", at, fmt, ap);
    va_end(ap);
}

/* Edit distance counting a swap of two neighbours as one edit ("rleu" is
 * one typo away from "relu"), giving up (limit + 1) beyond `limit`. */
static int distance(const char *a, const char *b, int limit)
{
    int na = (int)strlen(a), nb = (int)strlen(b);
    if (na > 255 || nb > 255 || abs(na - nb) > limit)
        return limit + 1;
    int rows[3][256];                      /* rows i-2, i-1, i (rotating) */
    for (int j = 0; j <= nb; j++)
        rows[0][j] = j;
    for (int i = 1; i <= na; i++) {
        int *cur = rows[i % 3], *up = rows[(i - 1) % 3], *up2 = rows[(i - 2 + 3) % 3];
        int best = cur[0] = i;
        for (int j = 1; j <= nb; j++) {
            int d = up[j - 1] + (a[i - 1] != b[j - 1]);
            if (up[j] + 1 < d)
                d = up[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && up2[j - 2] + 1 < d)
                d = up2[j - 2] + 1;
            cur[j] = d;
            if (d < best)
                best = d;
        }
        if (best > limit)
            return limit + 1;
    }
    return rows[na % 3][nb];
}

const char *diag_suggest(const char *name, const char *const *cands, int n)
{
    int len = (int)strlen(name);
    int limit = len / 3 > 1 ? len / 3 : 1;
    const char *best = NULL;
    int best_d = limit + 1;
    for (int i = 0; i < n; i++) {
        if (!cands[i])
            continue;
        if (strcmp(cands[i], name) == 0)
            return NULL;                   /* a known name is no typo */
        int d = distance(name, cands[i], limit);
        if (d < best_d) {
            best_d = d;
            best = cands[i];
        }
    }
    return best;
}

void diag_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("mpcc: ", sink());
    vfprintf(sink(), fmt, ap);
    fputc('\n', sink());
    va_end(ap);
}

_Noreturn void diag_internal(const char *file, int line, const char *msg)
{
    fflush(stdout);
    fprintf(sink(), "mpcc: internal error (a bug in mpcc) at %s:%d: %s\n", file, line, msg);
    fflush(sink());
    exit(EXIT_INTERNAL);
}

_Noreturn void diag_fatal_oom(void)
{
    fprintf(sink(), "mpcc: out of memory\n");
    fflush(sink());
    exit(EXIT_INTERNAL);
}
