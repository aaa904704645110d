/* arena.h - one bump allocator per compilation.
 *
 * mpcc is a short-lived program: every AST node, IR node, string and table
 * of one compilation comes from one Arena and is released at once with
 * arena_free(). Nothing is freed node by node. arena_alloc() never returns
 * NULL: running out of memory is reported (exit 3) and the program stops. */
#ifndef MPCC_ARENA_H
#define MPCC_ARENA_H

#include <stddef.h>

typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
    ArenaBlock *head;
    size_t used;          /* bytes handed out, for statistics */
} Arena;

void  arena_init(Arena *a);
void  arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t n);                 /* zeroed, 16-byte aligned */
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Grow an arena-backed array: returns a copy with room for new_cap elements. */
void *arena_grow(Arena *a, void *old, size_t old_n, size_t new_cap, size_t elem);

#endif
