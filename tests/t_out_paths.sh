#!/usr/bin/env bash
# run_all: once (the trainer's process behaviour, which fusion does not change: make test-nofuse skips it)
# t_out_paths.sh - TRAINER.md "Outputs", for mpcc's -o and the program's
# --save and --log: only a regular file is replaced (a directory, FIFO,
# socket or device is refused, exit 2, one line naming the path), a symbolic
# link is written through, an input of the run is never overwritten
# (--save may name --resume), the folder is checked before the first step,
# and every refused path is left as it was.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

# expect RC FRAGMENT CMD...: exit status RC, stderr one line holding FRAGMENT
expect() {
    local want=$1 frag=$2 rc; shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    if [ "$rc" != "$want" ] || { [ -n "$frag" ] && ! grep -qF -- "$frag" "$tmp/err"; } \
        || [ "$want" != 0 -a "$(grep -c . "$tmp/err")" != 1 ]; then
        bad "$* -> exit $rc (want $want, '$frag'); stderr:"; sed 's/^/    /' "$tmp/err"
    else
        echo "ok   exit $rc: ${*: -2}"
    fi
}

M=$tmp/m.mp
cp tests/models/mlp_small.mp "$M"
cp "$M" "$tmp/m.orig"
build_trainer "$M" "$tmp/train" || exit 1
mnist_first train 256 "$tmp/x.npy" "$tmp/y.npy" || exit 1
cp "$tmp/x.npy" "$tmp/x.orig"
cp "$tmp/x.npy" "$tmp/xe.npy"

# the kinds of path that are refused, made in the temp folder
mkdir "$tmp/dir"
mkfifo "$tmp/fifo"
$PY -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$tmp/sock"
kinds="dir:directory fifo:FIFO sock:socket"
if [ "$(id -u)" = 0 ] && mknod "$tmp/null" c 1 3 2>/dev/null; then
    kinds="$kinds null:device"
else
    echo "SKIP device node: not root (mknod needs it)"
fi

echo "== mpcc -o"
for k in $kinds; do
    expect 2 "is a ${k#*:}" ./mpcc "$M" --target c -o "$tmp/${k%%:*}"
done
expect 2 "is the same file as the model" ./mpcc "$M" --target c -o "$M"
ln -s m.mp "$tmp/link_to_model"
expect 2 "is the same file as the model" ./mpcc "$M" --target c -o "$tmp/link_to_model"
expect 2 "does not exist" ./mpcc "$M" --target c -o "$tmp/no/such/x.c"
cmp -s "$M" "$tmp/m.orig" || bad "mpcc changed the model file"
# a link is written through: the link stays, its target gets the program
echo old >"$tmp/real.c"
ln -s real.c "$tmp/link.c"
expect 0 "" ./mpcc "$M" --target c -o "$tmp/link.c"
[ -L "$tmp/link.c" ] && grep -q "mp_main" "$tmp/real.c" || bad "-o through a symbolic link"
ln -s nothing_yet.c "$tmp/dangling.c"
expect 0 "" ./mpcc "$M" --target c -o "$tmp/dangling.c"
[ -L "$tmp/dangling.c" ] && [ -f "$tmp/nothing_yet.c" ] || bad "-o through a dangling link"

echo "== the program's outputs"
T=$tmp/train
D=(--data image="$tmp/x.npy" --data label="$tmp/y.npy" --steps 3)
for o in --save --log; do
    for k in $kinds; do
        expect 2 "$o '$tmp/${k%%:*}': is a ${k#*:}" "$T" "${D[@]}" $o "$tmp/${k%%:*}"
    done
    expect 2 "is the same file as --data" "$T" "${D[@]}" $o "$tmp/x.npy"
    ln -sf x.npy "$tmp/link_to_data"
    expect 2 "is the same file as --data" "$T" "${D[@]}" $o "$tmp/link_to_data"
    expect 2 "is the same file as --eval" "$T" "${D[@]}" --eval image="$tmp/xe.npy" \
        --eval label="$tmp/y.npy" $o "$tmp/xe.npy"
    expect 2 "does not exist" "$T" "${D[@]}" $o "$tmp/no/such/file"
done
cmp -s "$tmp/x.npy" "$tmp/x.orig" || bad "the data file was changed"
[ -d "$tmp/dir" ] && [ -p "$tmp/fifo" ] && [ -S "$tmp/sock" ] || bad "a refused path was touched"

expect 0 "" "$T" "${D[@]}" --save "$tmp/ck.st"
cp "$tmp/ck.st" "$tmp/ck.orig"
expect 2 "is the same file as --init" "$T" "${D[@]}" --init "$tmp/ck.st" --save "$tmp/ck.st"
expect 2 "is the same file as --resume" "$T" "${D[@]}" --resume "$tmp/ck.st" --log "$tmp/ck.st"
cmp -s "$tmp/ck.st" "$tmp/ck.orig" || bad "a refused run changed the checkpoint"
# the preemption loop: --resume ck --save ck is allowed
expect 0 "" "$T" --data image="$tmp/x.npy" --data label="$tmp/y.npy" --steps 6 \
    --resume "$tmp/ck.st" --save "$tmp/ck.st"
$PY - "$tmp/ck.st" <<'EOF' || bad "--save over --resume did not write step 6"
import sys; sys.path.insert(0, "tests/py"); import st
_, meta = st.read(sys.argv[1], with_meta=True)
sys.exit(meta["step"] != "6")
EOF
# links are written through, for the checkpoint and the log
ln -s real.st "$tmp/ck_link.st"
ln -s real.jsonl "$tmp/log_link.jsonl"
expect 0 "" "$T" "${D[@]}" --save "$tmp/ck_link.st" --log "$tmp/log_link.jsonl" --log-every 1
[ -L "$tmp/ck_link.st" ] && [ -f "$tmp/real.st" ] && [ -L "$tmp/log_link.jsonl" ] &&
    [ "$(grep -c step "$tmp/real.jsonl")" = 3 ] || bad "--save / --log through a symbolic link"
ls -a "$tmp" | grep -q mpcc-tmp && bad "a temporary file was left behind"

echo "== a bad --save is refused before the first step of a long run"
# the program would pause after step 1 (the test-only hook MPCC_TEST_PAUSE)
pause_start 1 "$T" --data image="$tmp/x.npy" --data label="$tmp/y.npy" \
    --steps 10000000 --save "$tmp/gone/ck.st" 2>"$tmp/err"
pause_next
if [ -n "$paused_pid" ]; then
    bad "a bad --save: the run trained ($pause_line) instead of refusing it"; kill -9 "$paused_pid"; pause_next
elif [ "$exit_rc" != 2 ] || ! grep -q "does not exist" "$tmp/err" || [ "$(grep -c . "$tmp/err")" != 1 ]; then
    bad "a bad --save: $pause_line (want exit 2), stderr: $(cat "$tmp/err")"
else
    echo "ok   refused before step 1: $(cat "$tmp/err")"
fi
pause_end
exit $fail
