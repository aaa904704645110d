/* fuzz_parse.c - libFuzzer entry point for the front end (`make fuzz`).
 *
 * Parses the bytes as a model file and dumps the tree; messages go to
 * /dev/null, the diag counters are reset between inputs. The scanner and
 * parser must never crash, hang or leak memory past the arena, whatever
 * the bytes.
 *   mkdir -p /tmp/fz && build/fuzz_parse -max_total_time=600 -max_len=4096 \
 *       -dict=tests/fuzz_parse.dict /tmp/fz tests/fuzz_corpus
 * Seed corpus: tests/fuzz_corpus/ (small: the tests/diag cases and a few
 * valid models); new finds go to the first directory, out of git.
 * Record (2-core machine shared with other jobs, ASan+UBSan, -max_len=4096):
 *   600 s, 295,529 inputs, no crash (parser as of commit fde1367);
 *   600 s, 342,574 inputs, no crash (44bb930, with tests/fuzz_parse.dict,
 *     -len_control=0);
 *   180 s,  77,759 inputs, no crash (03ed79f, the same options).
 *   Total 23 minutes crash-free. The one slow case it would have hit (a
 *   file of NUL bytes, quadratic in flex) was found and fixed by hand
 *   before: see lex_begin() in grammar/lexer.l. */
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
