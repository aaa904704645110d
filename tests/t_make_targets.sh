#!/usr/bin/env bash
# run_all: fusion-independent (mpcc's default fusion plays no part: make test-nofuse skips it)
# t_make_targets.sh - the Makefile's documented targets that CI does not run
# itself (.ci/run runs make test and make test-nofuse), on a fresh copy of
# the tree: the tracked files as they are in the working tree, no build
# outputs, no ../shared beside it, no MNIST_DIR.
#   make demo            one line naming the four MNIST files and where to
#                        put them, a non-zero exit, nothing built
#   make golden-update   builds mpcc, rewrites no golden file (they are
#                        current)
#   make asan            builds in build-asan/ with ASan and UBSan and runs
#                        one unit program there (ONLY=test_sema_blocks)
#   make fuzz            with clang and libFuzzer: build/fuzz_parse, run
#                        once over tests/fuzz_corpus; without them: one line
#                        saying so and a non-zero exit (this part skipped)
#   make clean           leaves exactly the copied files, unchanged
# Builds use CFLAGS=-O0 where the target allows it (the golden files do not
# depend on it): the point is the targets, not the optimiser.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
git rev-parse --show-toplevel >/dev/null 2>&1 ||
    { echo "SKIP: not a git checkout: no list of the tracked files to copy"; exit 0; }
test_tmp
unset MAKEFLAGS MFLAGS MAKELEVEL MNIST_DIR ONLY   # this test's make, not a caller's
R=$tmp/repo
mkdir -p "$R"
git ls-files -z | while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    xargs -0 cp -d --parents -t "$R" || { echo "FAIL: copying the tracked files"; exit 1; }
# every file of the copy with its checksum: what clean must leave
sums() { (cd "$R" && find . -path ./.git -prune -o \( -type f -o -type l \) -print0 | sort -z | xargs -0 sha256sum); }
sums >"$tmp/sums.copy"
in_r() { (cd "$R" && "$@"); }

echo "== make demo without MNIST"
in_r make demo >"$tmp/demo.out" 2>"$tmp/demo.err"; rc=$?
line=$(grep '^demo:' "$tmp/demo.err")
if [ $rc = 0 ] || [ "$(grep -c '^demo:' "$tmp/demo.err")" != 1 ]; then
    bad "make demo: exit $rc, want non-zero and one 'demo:' line; stderr: $(cat "$tmp/demo.err")"
else
    for w in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
             t10k-labels-idx1-ubyte.gz ../shared/data/mnist/ MNIST_DIR; do
        [[ $line == *"$w"* ]] || bad "make demo: the line does not say '$w': $line"
    done
    [ -e "$R/mpcc" ] || [ -e "$R/build" ] && bad "make demo built something before finding the data missing"
    echo "ok   make demo: exit $rc: $line"
fi

echo "== make golden-update: nothing to rewrite"
if ! in_r make -j2 CFLAGS="-O0 -g" golden-update >"$tmp/golden.out" 2>&1; then
    bad "make golden-update failed: $(tail -n 5 "$tmp/golden.out")"
else
    sums | grep -v -e ' \./mpcc$' -e ' \./build/' >"$tmp/sums.golden"
    if diff "$tmp/sums.copy" "$tmp/sums.golden" >"$tmp/golden.diff"; then
        echo "ok   make golden-update: $(grep -c . "$tmp/golden.out") lines of output, no file changed"
    else
        bad "make golden-update changed files:"; sed 's/^/    /' "$tmp/golden.diff"
    fi
fi

echo "== make asan (ONLY=test_sema_blocks)"
if in_r env ONLY=test_sema_blocks make -j2 asan >"$tmp/asan.out" 2>&1 &&
    grep -q "^PASS test_sema_blocks" "$tmp/asan.out" && grep -q '^1 passed, 0 failed' "$tmp/asan.out" &&
    grep -q -- '-fsanitize=address,undefined' "$tmp/asan.out" && [ -x "$R/build-asan/mpcc" ]; then
    echo "ok   make asan: $(grep '^PASS' "$tmp/asan.out")"
else
    bad "make asan (ONLY=test_sema_blocks): $(tail -n 8 "$tmp/asan.out")"
fi

echo "== make fuzz"
in_r make -j2 fuzz >"$tmp/fuzz.out" 2>&1; rc=$?
if [ $rc = 0 ]; then
    if in_r build/fuzz_parse -runs=0 tests/fuzz_corpus >"$tmp/fuzz.run" 2>&1; then
        echo "ok   make fuzz: build/fuzz_parse ran over tests/fuzz_corpus: $(grep -m1 -o 'INITED.*' "$tmp/fuzz.run")"
    else
        bad "build/fuzz_parse over tests/fuzz_corpus: $(tail -n 5 "$tmp/fuzz.run")"
    fi
elif grep -q '^make fuzz: .*clang' "$tmp/fuzz.out"; then
    echo "SKIP (part): $(grep '^make fuzz:' "$tmp/fuzz.out")"
else
    bad "make fuzz: exit $rc without saying why: $(tail -n 5 "$tmp/fuzz.out")"
fi

echo "== make clean"
if in_r make clean >"$tmp/clean.out" 2>&1 && sums >"$tmp/sums.clean" &&
    diff "$tmp/sums.copy" "$tmp/sums.clean" >"$tmp/clean.diff"; then
    echo "ok   make clean: the copied files and nothing else"
else
    bad "make clean: $(cat "$tmp/clean.out")"; sed 's/^/    /' "$tmp/clean.diff"
fi
exit $fail
