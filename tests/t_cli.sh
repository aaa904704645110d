#!/usr/bin/env bash
# t_cli.sh - mpcc's own command line (TRAINER.md "mpcc's command line"):
# exit codes 0 / 1 / 2, one-line usage errors, the default output name,
# --dump-plan writing no program unless -o is given, and no output file
# (nor a temporary one) left behind when the model has errors.
set -uo pipefail
cd "$(dirname "$0")/.."
MPCC=$(cd "$(dirname "${MPCC:-./mpcc}")" && pwd)/$(basename "${MPCC:-./mpcc}")
ROOT=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {   # check WANT_RC WANT_STDERR_SUBSTRING ARGS...
    local want=$1 msg=$2; shift 2
    "$MPCC" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" != "$want" ] || { [ -n "$msg" ] && ! grep -qF -- "$msg" "$tmp/err"; }; then
        echo "FAIL: mpcc $* -> exit $rc (want $want), stderr:"; sed 's/^/    /' "$tmp/err"; fail=1
    else
        echo "ok   mpcc $* -> $want"
    fi
}
M=$ROOT/examples/mnist_mlp.mp
check 2 "cannot read 'nosuch.mp'" nosuch.mp
check 2 "Is a directory" "$ROOT/examples"
check 2 "cannot write '$tmp/no/dir/x.c'" "$M" --target c -o "$tmp/no/dir/x.c"
check 2 "unknown target 'fpga', expected cuda or c" "$M" --target fpga
check 2 "--memory-budget '6XB': expected a size in bytes" "$M" --memory-budget 6XB --dump-plan
check 2 "--memory-budget '-1': expected a size" "$M" --memory-budget -1 --dump-plan
check 2 "--collapse" "$M" --dump-plan=json --collapse
check 2 "unknown precision policy 'f8'" "$M" --precision f8
check 2 "unknown plan format 'svg'" "$M" --dump-plan=svg
check 2 "-o needs a value" "$M" -o
check 2 "more than one model file" a.mp b.mp
check 2 "unknown option '--bogus'" --bogus
check 2 "no model file given" --target c
check 0 "" --version
grep -q "^mpcc [0-9]" "$tmp/out" || { echo "FAIL: --version prints no version"; fail=1; }
check 0 "" --help
grep -q "exit status" "$tmp/out" || { echo "FAIL: --help does not document the exit status"; fail=1; }

# a model error: exit 1, file:line:col, and nothing written
cd "$tmp"
printf 'model bad\ninput x: f32[4, 3]\ny = x @ x\nloss = mean(y)\ntrain {\n  optimizer = sgd(lr = 0.1)\n  minimize loss\n}\n' > bad.mp
check 1 "bad.mp:3:7: error:" bad.mp --target c -o out.c
check 1 "bad.mp:3:7: error:" bad.mp --dump-plan
[ -e out.c ] && { echo "FAIL: an output file was written despite errors"; fail=1; }
ls | grep -q '\.tmp\.' && { echo "FAIL: a temporary file was left behind"; fail=1; }

# success: the default name, and --dump-plan alone writes no program
check 0 "" "$M" --target c
[ -s mnist_mlp.c ] || { echo "FAIL: no mnist_mlp.c (default output name)"; fail=1; }
rm -f mnist_mlp.c
check 0 "" "$M" --dump-plan
[ -e mnist_mlp.cu ] || [ -e mnist_mlp.c ] && { echo "FAIL: --dump-plan alone wrote a program"; fail=1; }
grep -q "precision plan of model mnist_mlp" out || { echo "FAIL: --dump-plan printed no plan"; fail=1; }
check 0 "" "$M" --dump-plan=json -o both.c --target c
[ -s both.c ] || { echo "FAIL: --dump-plan with -o wrote no program"; fail=1; }
/usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' out || { echo "FAIL: --dump-plan=json is not JSON"; fail=1; }
ls | grep -q '\.tmp\.' && { echo "FAIL: a temporary file was left behind"; fail=1; }
exit $fail
