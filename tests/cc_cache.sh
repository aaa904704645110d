#!/usr/bin/env bash
# cc_cache.sh - the tests' compile cache. tests/run_all.sh puts links to this
# script named cc, gcc, clang, g++, c++ and clang++ first on the tests' PATH
# ($B/cc-cache/bin), so that a generated program compiled again with the
# same compiler and options (by another test, or by make test-nofuse where
# fusion does not change the program) is copied, not rebuilt: most of the
# suite's CPU time is the C compiler's.
#
# A build is cached only when it is one source file (.c .cc .cpp .cu) to an
# output named by -o; anything else (several inputs, -E, -M*, no -o, a
# response file, stdin) runs the real compiler untouched. The key is the
# real compiler (path, size, time), the options (without -o's argument and
# with the source's name replaced) and the source as the preprocessor sees
# it (`-E -P` with the same options: every header, -include and -D counts;
# where a path could reach the output, -g or __FILE__, the key has it too).
# A hit replays the compiler's standard output and exit status 0; builds
# that fail or print anything on stderr (a warning names its source's
# path) are not kept. MP_CC_CACHE=0 turns the cache off (every
# call goes to the real compiler); $B/cc-cache/log has one line a build
# (hit, miss or split, the compiler's CPU seconds, the test that asked
# (MP_CC_TEST, set by run_all.sh), the compiler, the options): run_all.sh
# counts them, and sums each test's compiling time.
set -u
name=${0##*/}
self_dir=$(cd "${0%/*}" && pwd)
path=
IFS=: read -ra dirs <<<"$PATH"
for d in "${dirs[@]}"; do
    [ "$d" = "$self_dir" ] || path=${path:+$path:}$d
done
export PATH=$path          # the compiler's own helpers are the real ones
real=$(command -v "$name") || { echo "cc_cache.sh: no $name on PATH" >&2; exit 127; }
[ "${MP_CC_CACHE:-1}" = 0 ] && exec "$real" "$@"

out= src= nsrc=0 pass=0 key_args=() pre_args=() g=0
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    a=${args[i]}
    case $a in
    -o) out=${args[i + 1]:-}; i=$((i + 1)); continue ;;
    -o*) out=${a#-o}; continue ;;
    -E | -M* | -S | -save-temps* | @* | - | --help | --version | -v | -dumpversion | -print*) pass=1 ;;
    -g*) g=1 ;;
    -l* | -L* | -Wl,* | -pthread) key_args+=("$a"); continue ;;   # linker only
    -x | -include | -imacros | -I | -D | -U | -isystem | -iquote | -idirafter | -Xpreprocessor)
        key_args+=("$a" "${args[i + 1]:-}"); pre_args+=("$a" "${args[i + 1]:-}"); i=$((i + 1)); continue ;;
    -Xlinker | -Xassembler | -MF | -MT | -MQ) pass=1 ;;
    -*) ;;
    *.c | *.cc | *.cpp | *.cxx | *.cu) src=$a; nsrc=$((nsrc + 1)); key_args+=("SOURCE"); pre_args+=("$a"); continue ;;
    *) pass=1 ;;              # an object, an archive, anything else
    esac
    key_args+=("$a")
    pre_args+=("$a")
done
if [ $pass = 1 ] || [ $nsrc != 1 ] || [ -z "$out" ] || [ "$out" = - ] || [ ! -f "$src" ]; then
    exec "$real" "$@"
fi
# A program mpcc generated (C, or CUDA built as C++ for the stand-in,
# tests/cuda/mp_cuda_emu.h) compiles in two parts (runtime/mp_model.h,
# MP_PART_RUNTIME and MP_PART_MODEL): the runtime's part is the same text
# for every model, so it is compiled once per compiler and options (an
# entry of its own here, found by its preprocessed text like any build)
# and only the model's part, the model's code with the kernels it calls,
# for each program (by the compiler itself: the whole build's entry
# already keeps the result); the two objects are linked as the whole file
# would be. Two thirds of a small model's optimised build is the runtime's
# part. Only plain builds split: one source to a program, or (optimised)
# -c to /dev/null (the warning checks: both parts compiled, nothing
# linked), with options from the list below; anything else compiles
# whole. Each part would parse the runtime's text again, some 1 s of a
# model part's 1.5 to 7 s: the model's part is compiled after a
# precompiled header of that text (cc-cache/pch/KEY: made once per text,
# compiler and options, with the stand-in's header first where the build
# -includes it; `#line` keeps the messages' file and lines the source's;
# a header whose precompiling says anything, a warning, is read as text,
# so that its messages reach the build). An unoptimised build's (-O0, or
# no -O: a C program only) runtime part is compiled from that folder's
# copy of the text, rt.c, so that -g (debug information names the
# source: the sanitized and gradient-check builds) splits too: the
# runtime's frames name cc-cache/pch/KEY/rt.c, a file that holds their
# text, the model's the program's own file. An optimised -g build
# compiles whole. MP_CC_SPLIT=0 compiles every program whole. Whole and
# split are two builds (the key says which).
# split_args: whether this build splits; its parts' options in cargs
# (pargs: without the source; hargs: without -x, -include and
# -emit-llvm, for the precompiled header, whose language is lang and
# which includes incs), the link's in largs; o=0 unoptimised
split_args() {
    [ "${MP_CC_SPLIT:-1}" != 0 ] && [[ $src == *.c || $src == *.cu ]] &&
        grep -q '^#ifndef MP_PART_RUNTIME' "$src" || return 1
    local a i c=0
    o=0 cargs=() pargs=() hargs=() largs=() incs=() lang=c emit=()
    for ((i = 0; i < ${#args[@]}; i++)); do
        a=${args[i]}
        case $a in
        -o) i=$((i + 1)) ;;
        -x | -include)
            cargs+=("$a" "${args[i + 1]:-}"); pargs+=("$a" "${args[i + 1]:-}")
            if [ "$a" = -x ]; then lang=${args[i + 1]:-}; else incs+=("${args[i + 1]:-}"); fi
            i=$((i + 1)) ;;
        -c) c=1 ;;
        -DMP_PART_*) return 1 ;;       # a part itself
        -O0) o=0; cargs+=("$a"); pargs+=("$a"); hargs+=("$a") ;;
        -O*) o=1; cargs+=("$a"); pargs+=("$a"); hargs+=("$a") ;;
        -l?* | -L?* | -Wl,*) largs+=("$a") ;;
        -fopenmp | -pthread | -fsanitize=* | -fno-sanitize*) cargs+=("$a"); pargs+=("$a"); hargs+=("$a"); largs+=("$a") ;;
        "$src") cargs+=("$a") ;;
        -emit-llvm) cargs+=("$a"); pargs+=("$a"); emit=("$a") ;;
        -W* | -w | -D?* | -I?* | -std=* | -march=* | -mtune=* | -g* | \
            -fno-omit-frame-pointer | -ffp-contract=*) cargs+=("$a"); pargs+=("$a"); hargs+=("$a") ;;
        *) return 1 ;;
        esac
    done
    [ "$lang" = c ] || [ "$lang" = c++ ] || return 1
    if [ $o = 1 ]; then
        [ $g = 0 ] && { [ $c = 0 ] || [ "$out" = /dev/null ]; }
    else
        [ $c = 0 ] && [[ $src == *.c ]]
    fi
}
# rt_pch: the folder of this program's runtime text as rt.h (after an
# #include of each -include'd header) and its precompiled header (made by
# the first build that needs it; one at a time, under flock: others wait
# for it, never on a clock)
rt_pch() {
    local first=$1 k=$2 key d f
    { for f in "${incs[@]}"; do echo "#include \"$(realpath "$f")\""; done
      sed -n "$first,$((k - 1))p" "$src"; } >"$tmp/rt.h"
    sed -n "$first,$((k - 1))p" "$src" >"$tmp/rt.c"
    key=$( {
        printf '%s\n' "$real" "$(stat -L -c '%s %Y' "$real")" "$lang" "${hargs[@]}"
        cat "$tmp/rt.h" "${incs[@]}"
    } | sha256sum | cut -c1-40)
    d=$cache/pch/$key
    mkdir -p "$cache/pch"
    [ -e "$d/done" ] || (
        flock 9
        [ -e "$d/done" ] && exit 0
        ext=gch     # clang's precompiled header is FILE.pch
        "$real" --version 2>/dev/null | grep -q clang && ext=pch
        rm -rf "$d" && mkdir "$d" && cp "$tmp/rt.h" "$tmp/rt.c" "$d/" || exit 1
        # a header that does not precompile, or warns, is read as text
        "$real" "${hargs[@]}" -DMP_PART_MODEL -x "$lang-header" "$d/rt.h" -o "$d/rt.h.$ext" \
            >"$d/pch.log" 2>&1 && [ ! -s "$d/pch.log" ] || rm -f "$d/rt.h.$ext"
        : >"$d/done"
    ) 9>"$d.lock" || return 1
    echo "$d"
}
split_build() {
    local self=$0 first k d e=${src##*.} mo=$tmp/model.o
    first=$(grep -n -m 1 '^#' "$src" | cut -d: -f1)
    k=$(grep -n -m 1 '^#ifndef MP_PART_RUNTIME' "$src" | cut -d: -f1)
    d=$(rt_pch "$first" "$k") || return
    { sed -n "1,$((first - 1))p" "$src"; echo "#line $k \"$src\""; sed -n "$k,\$p" "$src"; } >"$tmp/model.$e"
    if [ "$out" = /dev/null ]; then
        mo=/dev/null
        "$self" "${cargs[@]}" -DMP_PART_RUNTIME -c -o /dev/null || return
    elif [ $o = 1 ]; then
        "$self" "${cargs[@]}" -DMP_PART_RUNTIME -c -o "$tmp/runtime.o" || return
    else
        "$self" "${pargs[@]}" -DMP_PART_RUNTIME -c "$d/rt.c" -o "$tmp/runtime.o" || return
    fi
    "$real" "${hargs[@]}" "${emit[@]}" -DMP_PART_MODEL -include "$d/rt.h" -x "$lang" -c "$tmp/model.$e" -o "$mo" || return
    [ "$out" = /dev/null ] || "$real" "$tmp/runtime.o" "$tmp/model.o" "${largs[@]}" -o "$out"
}
how="miss"
split_args && how="split"
cache=${MP_CC_CACHE_DIR:?run_all.sh sets MP_CC_CACHE_DIR}
mkdir -p "$cache/objs"
pre=$("$real" "${pre_args[@]}" -E -P -o - 2>/dev/null | sha256sum) || exec "$real" "$@"
key=$( {
    printf '%s\n' "$real" "$(stat -L -c '%s %Y' "$real")" "$how" "${key_args[@]}" "$pre"
    if [ $g = 1 ] || grep -q '__FILE__\|__BASE_FILE__' "$src"; then printf '%s\n' "$PWD" "$src"; fi
} | sha256sum | cut -c1-40)
entry=$cache/objs/$key
log() { printf '%s %s %s %s %s\n' "$1" "$2" "${MP_CC_TEST:--}" "$name" "${key_args[*]}" >>"$cache/log"; }
if [ -e "$entry.done" ]; then
    if [ "$out" = /dev/null ] || cp "$entry.out" "$out" 2>/dev/null; then
        [ -x "$entry.out" ] && [ "$out" != /dev/null ] && chmod +x "$out"
        cat "$entry.stdout"
        log hit 0
        exit 0
    fi
fi
tmp=$(mktemp -d "$cache/objs/tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [ $how = split ]; then
    split_build >"$tmp/stdout" 2>"$tmp/stderr"
else
    "$real" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
fi
rc=$?
cat "$tmp/stdout"
cat "$tmp/stderr" >&2
if [ $rc = 0 ] && [ ! -s "$tmp/stderr" ]; then    # warnings name this source: not kept
    # a new entry appears whole (its .done last) or not at all
    if [ "$out" = /dev/null ]; then : >"$tmp/out"; else cp -p "$out" "$tmp/out"; fi &&
        mv "$tmp/out" "$entry.out" && mv "$tmp/stdout" "$entry.stdout" &&
        : >"$entry.done"
fi
# the compiler's CPU seconds (user + system: the second line of times;
# a split build's include its parts', its runtime part logged too)
times >"$tmp/times"
log $how "$(awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); s += t[1] * 60 + t[2] }
                         printf "%.2f", s }' "$tmp/times")"
exit $rc
