# mpcc - see README.md. Targets:
#   make            build ./mpcc
#   make test       every test (unit, golden, generated trainers, PyTorch)
#   make test-nofuse     the same with fusion off (MPCC_NO_FUSE=1)
#   make asan       the same under AddressSanitizer and UBSan (in build-asan/)
#   make fuzz       libFuzzer target for the front end (not in CI): needs
#                   clang with libFuzzer, else says so and fails
#   make demo       the README's main job: train the MNIST MLP (the data:
#                   tools/demo.sh says which files, where, when missing)
#   make golden-update   rewrite golden files (review the diff!)
#   make clean      remove every build output
# ONLY=pattern (test, test-nofuse, asan) runs, and builds, only the tests
# whose name contains it (tests/run_all.sh). tests/t_make_targets.sh checks
# asan, fuzz, demo, golden-update and clean on a fresh copy of the tree.
CC      ?= cc
CFLAGS  ?= -O2 -g
WARN     = -std=c11 -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CPPFLAGS = -Icompiler -I$(B) -Iruntime -D_POSIX_C_SOURCE=200809L
B        = build
SAN      =

COMPILER_SRC := $(filter-out compiler/main.c,$(wildcard compiler/*.c))
COMPILER_OBJ := $(COMPILER_SRC:compiler/%.c=$(B)/%.o) $(B)/parser.o $(B)/lexer.o $(B)/runtime_blob.o
RUNTIME_HDR  := $(wildcard runtime/*.h) runtime/AMALGAMATION runtime/AMALGAMATION_CUDA
UNIT_SRC     := $(wildcard tests/unit/test_*.c)
UNIT_BIN     := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
# the unit programs a test run needs: those ONLY picks, or all
RUN_BIN      := $(if $(ONLY),$(foreach b,$(UNIT_BIN),$(if $(findstring $(ONLY),$(notdir $(b))),$(b))),$(UNIT_BIN))

TOOLS        := $(B)/idx2npy $(B)/csv2npy $(B)/text2bin

# The compiler itself: ./mpcc, or $(B)/mpcc for the sanitizer build.
MPCC_BIN ?= mpcc

all: $(MPCC_BIN) $(TOOLS)

$(MPCC_BIN): $(B)/main.o $(COMPILER_OBJ)
	$(CC) $(CFLAGS) $(SAN) -o $@ $^ -lm

$(B)/%.o: compiler/%.c compiler/*.h compiler/ops.def $(B)/parser.h | $(B)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN) $(WARN) -c -o $@ $<

# Generated scanner and parser: bison's and flex's own code is not held to -Werror.
$(B)/parser.c $(B)/parser.h &: grammar/parser.y | $(B)
	bison -Wall -Werror --defines=$(B)/parser.h -o $(B)/parser.c $<
$(B)/lexer.c $(B)/lexer.h &: grammar/lexer.l | $(B)
	flex --header-file=$(B)/lexer.h -o $(B)/lexer.c $<
$(B)/parser.o: $(B)/parser.c $(B)/lexer.h compiler/*.h
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN) -std=c11 -w -c -o $@ $<
$(B)/lexer.o: $(B)/lexer.c $(B)/parser.h compiler/*.h
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN) -std=c11 -w -c -o $@ $<

# The runtime, embedded as text: emit_*.c paste it into generated programs.
$(B)/embed: tools/embed.c | $(B)
	$(CC) -O2 -std=c11 -Wall -Werror -o $@ $<
# The skeletons of the generated programs (templates/*.in) go into the same
# file, a third table.
# The prelude (compiler/prelude.mp: operations written in the language) is
# a fourth table, parsed by sema before the model.
$(B)/runtime_blob.c: $(B)/embed $(RUNTIME_HDR) $(wildcard templates/*.in) compiler/prelude.mp
	{ $(B)/embed runtime $$(cat runtime/AMALGAMATION) && \
	  $(B)/embed -p mp_cuda_runtime runtime $$(cat runtime/AMALGAMATION_CUDA) && \
	  $(B)/embed -p mp_template templates train.c.in train.cu.in plan.html.in && \
	  $(B)/embed -p mp_prelude compiler prelude.mp; } > $@
$(B)/runtime_blob.o: $(B)/runtime_blob.c
	$(CC) $(CFLAGS) -std=c11 -c -o $@ $<

# Data converters (tools/*2npy.c, text2bin.c): IDX and CSV to .npy, text to u16 tokens.
$(TOOLS): $(B)/%: tools/%.c tools/tool_input.h $(RUNTIME_HDR) | $(B)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN) $(WARN) -o $@ $< -lm

$(B):
	mkdir -p $(B)/tests

# ---- tests --------------------------------------------------------------
$(B)/tests/%: tests/unit/%.c $(wildcard tests/unit/*.h) $(COMPILER_OBJ) $(RUNTIME_HDR) | $(B)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(SAN) $(WARN) -Wno-missing-field-initializers -o $@ $< $(COMPILER_OBJ) -lcmocka -lm

test: $(MPCC_BIN) $(TOOLS) $(RUN_BIN)
	MPCC=./$(MPCC_BIN) B=$(B) SAN="$(SAN)" tests/run_all.sh

# The whole suite again with fusion off (mpcc's default under MPCC_NO_FUSE=1):
# fused and unfused programs must both pass everything.
test-nofuse:
	MPCC_NO_FUSE=1 $(MAKE) test

asan:
	$(MAKE) B=build-asan CFLAGS="-O1 -g -fno-omit-frame-pointer" \
	    SAN="-fsanitize=address,undefined -fno-sanitize-recover=all" \
	    MPCC_BIN=build-asan/mpcc mpcc-asan-test

mpcc-asan-test: $(MPCC_BIN) $(TOOLS) $(RUN_BIN)
	ASAN_OPTIONS=detect_leaks=0 MPCC=./$(MPCC_BIN) B=$(B) SAN="$(SAN)" tests/run_all.sh

golden-update: mpcc
	MPCC=./mpcc tests/golden.sh --update

# libFuzzer comes with clang (not gcc): without it, say so and fail.
FUZZ_PROBE = int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }
fuzz: $(B)/parser.c $(B)/lexer.c $(B)/runtime_blob.c | $(B)
	@command -v clang >/dev/null || { echo "make fuzz: needs clang with libFuzzer (-fsanitize=fuzzer); there is no clang here" >&2; exit 2; }
	@echo '$(FUZZ_PROBE)' | clang -fsanitize=fuzzer -x c - -o $(B)/fuzz_probe 2>/dev/null || \
	    { echo "make fuzz: clang here cannot link -fsanitize=fuzzer (libFuzzer, in the compiler-rt / libclang-rt-dev package, is missing)" >&2; exit 2; }
	@rm -f $(B)/fuzz_probe
	clang -g -O1 -fsanitize=fuzzer,address,undefined $(CPPFLAGS) -std=c11 \
	    -o $(B)/fuzz_parse tests/fuzz_parse.c $(filter-out $(B)/%.o,$(COMPILER_OBJ)) \
	    $(COMPILER_SRC) $(B)/parser.c $(B)/lexer.c $(B)/runtime_blob.c -lm
	@echo "run: $(B)/fuzz_parse -max_total_time=600 -max_len=4096 NEW_DIR tests/fuzz_corpus"

# tools/demo.sh looks for the data first, then builds what it needs ($(MAKE)).
demo:
	+MAKE="$(MAKE)" tools/demo.sh

clean:
	rm -rf build build-asan mpcc

.PHONY: all test test-nofuse asan mpcc-asan-test golden-update fuzz demo clean
.DELETE_ON_ERROR:
