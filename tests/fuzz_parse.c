/* fuzz_parse.c - libFuzzer entry point for the front end (`make fuzz`).
 *
 * Parses the bytes as a model file and dumps the tree; messages go to
 * /dev/null, the diag counters are reset between inputs. The scanner and
 * parser must never crash, hang or leak memory past the arena, whatever
 * the bytes.
 *   build/fuzz_parse -max_total_time=600 -max_len=4096 tests/fuzz_corpus
 * Seed corpus: tests/fuzz_corpus/ (small; new finds stay out of git).
 * Record: FUZZ_RECORD_PLACEHOLDER */
#include "ast.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *null;
    if (!null)
        null = fopen("/dev/null", "w");
    diag_init(null);
    Arena a;
    arena_init(&a);
    char *text = arena_alloc(&a, size + 1);
    memcpy(text, data, size);
    SrcFile file = {"fuzz.mp", text, (long)size};
    Ast *ast = ast_parse(&a, &file);
    ast_dump(null, ast);
    arena_free(&a);
    return 0;
}
