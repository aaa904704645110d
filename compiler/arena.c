/* arena.c - see arena.h. Blocks are chained; a request larger than the
 * default block size gets a block of its own. */
#include "arena.h"
#include "diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_SIZE (256 * 1024)

struct ArenaBlock {
    ArenaBlock *next;
    size_t cap, off;
    _Alignas(16) unsigned char data[];
};

void arena_init(Arena *a) { a->head = NULL; a->used = 0; }

void arena_free(Arena *a)
{
    ArenaBlock *b = a->head;
    while (b) {
        ArenaBlock *n = b->next;
        free(b);
        b = n;
    }
    a->head = NULL;
    a->used = 0;
}

void *arena_alloc(Arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    ArenaBlock *b = a->head;
    if (!b || b->cap - b->off < n) {
        size_t cap = n > BLOCK_SIZE ? n : BLOCK_SIZE;
        b = malloc(sizeof *b + cap);
        if (!b)
            diag_fatal_oom();
        b->cap = cap;
        b->off = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = b->data + b->off;
    b->off += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(Arena *a, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = arena_alloc(a, (size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return p;
}

void *arena_grow(Arena *a, void *old, size_t old_n, size_t new_cap, size_t elem)
{
    void *p = arena_alloc(a, new_cap * elem);
    if (old && old_n)
        memcpy(p, old, old_n * elem);
    return p;
}
