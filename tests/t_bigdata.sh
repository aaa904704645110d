#!/usr/bin/env bash
# run_all: once (the trainer's process behaviour, which fusion does not change: make test-nofuse skips it)
# t_bigdata.sh - TRAINER.md "Big data": a 2 GB .npy (sparse: written with a
# NumPy header and truncate, so it costs no disk and scans fast) trains for
# a few shuffled steps while the program's private resident memory
# (RssAnon in /proc/PID/status, read after every step while the program is
# paused there: MPCC_TEST_PAUSE, tests/py/lib.sh) stays at the batch
# working set plus the data order (8 bytes a sample), and its private
# writable mappings are capped there for the whole run (ulimit -d): the file
# is mapped, not read into memory. The finite-value check streams through the whole
# file first, with a progress line on a terminal (util-linux `script`
# provides one): a NaN put into the last sample is refused, naming the file
# and the sample. Prints the peak RssAnon / VmRSS and the run's time.
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh         # pause_*
MPCC=${MPCC:-./mpcc}
PY=/usr/bin/python3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
N=650000            # samples of f32[784]: 2.04 GB

sed 's/^input image: u8\[B, 784\]/input image: f32[B, 784]/' tests/models/mlp_small.mp > "$tmp/big.mp"
"$MPCC" "$tmp/big.mp" --target c -o "$tmp/big.c" && cc -O2 "$tmp/big.c" -o "$tmp/big" -lm ||
    { echo "FAIL: the f32 MLP does not build"; exit 1; }
"$PY" - "$tmp" $N <<'EOF' || { echo "FAIL: writing the sparse data"; exit 1; }
import sys, numpy as np
from numpy.lib import format as fmt
t, n = sys.argv[1], int(sys.argv[2])
r = np.random.default_rng(0)
y = np.zeros(n, np.int32)
y[:4096] = r.integers(0, 10, 4096)
np.save(f'{t}/y.npy', y)
with open(f'{t}/x.npy', 'wb') as f:
    fmt.write_array_header_1_0(f, {'descr': '<f4', 'fortran_order': False, 'shape': (n, 784)})
    f.write(r.random((4096, 784), dtype=np.float32).tobytes())   # some real samples
    f.truncate(f.tell() - 4096 * 784 * 4 + n * 784 * 4)          # the rest: a hole
EOF
size=$(stat -c %s "$tmp/x.npy")
[ "$size" -gt 2000000000 ] || bad "the data file is only $size bytes"

# run_peak STEPS CMD...: runs CMD (a trainer, for STEPS steps), reading its
# memory after every step, while it is paused there (the test-only hook
# MPCC_TEST_PAUSE, tests/py/lib.sh): sets rc, peak_anon and peak_rss (kB),
# peak_data (VmData, kB: every private writable page it has mapped, resident
# or not), secs
run_peak() {
    local steps=$1 start=$(date +%s.%N) a r d; shift
    peak_anon=0 peak_rss=0 peak_data=0 rc=
    pause_start 1 "$@" > "$tmp/out" 2>&1
    while pause_next && [ -z "$exit_rc" ]; do
        a=$(awk '/^RssAnon/{print $2}' /proc/$paused_pid/status)
        r=$(awk '/^VmRSS/{print $2}' /proc/$paused_pid/status)
        d=$(awk '/^VmData/{print $2}' /proc/$paused_pid/status)
        [ "$a" -gt $peak_anon ] && peak_anon=$a
        [ "$r" -gt $peak_rss ] && peak_rss=$r
        [ "$d" -gt $peak_data ] && peak_data=$d
        if [ "$paused_step" -lt "$steps" ]; then pause_say step; else pause_say run; fi
    done
    pause_end
    rc=${exit_rc:-"none ($pause_line)"}
    secs=$(echo "$(date +%s.%N) - $start" | bc)
}

# batch working set (a few MB) + the data order's 8 bytes a sample
limit=$(( 16384 + 8 * N / 1024 ))
# Between the readings too: RLIMIT_DATA (ulimit -d) caps the program's
# private writable mappings at the limit for the whole run, so no copy of
# the data (not even one freed before the next step) can be made.
run_peak 30 bash -c 'ulimit -d "$0" && exec "$@"' $limit \
    "$tmp/big" --data image="$tmp/x.npy" --data label="$tmp/y.npy" --steps 30 --log-every 10
[ "$rc" = 0 ] || bad "training on the 2 GB file (ulimit -d $limit): exit $rc: $(tail -1 "$tmp/out")"
grep -q "^step 30/30 loss" "$tmp/out" || bad "no step 30 in: $(cat "$tmp/out")"
echo "t_bigdata: $size bytes, 30 steps in ${secs}s: peak RssAnon ${peak_anon} kB (limit $limit), peak VmRSS ${peak_rss} kB, VmData ${peak_data} kB"
[ $peak_anon -gt 0 ] || bad "RssAnon was never read"
[ $peak_anon -le $limit ] || bad "private resident memory ${peak_anon} kB > $limit kB: the data was read into memory"

# the check's progress line: on a terminal only
grep -q "checking" "$tmp/out" && bad "a progress line went to a file: $(head -c 200 "$tmp/out")"
if command -v script > /dev/null; then
    script -qec "'$tmp/big' --data image='$tmp/x.npy' --data label='$tmp/y.npy' --steps 1" /dev/null > "$tmp/tty" 2>&1
    grep -q "checking $tmp/x.npy: 100%" "$tmp/tty" || bad "no progress line for the check on a terminal: $(head -c 300 "$tmp/tty")"
else
    echo "t_bigdata: no 'script' here: the progress line on a terminal is not checked"
fi

# a NaN in the last sample: the check streams through the whole file
"$PY" -c "
import numpy as np, sys
f = open('$tmp/x.npy', 'r+b'); f.seek($size - 4); f.write(np.float32('nan').tobytes())"
out=$("$tmp/big" --data image="$tmp/x.npy" --data label="$tmp/y.npy" --steps 1 2>&1); rc=$?
[ $rc = 1 ] || bad "NaN data: exit $rc, want 1"
case $out in
    *"$tmp/x.npy: sample $((N - 1)): nan is not a finite number"*) ;;
    *) bad "NaN data: the message does not name the file and sample $((N - 1)): $out" ;;
esac

[ $fail = 0 ] && echo "t_bigdata: ok"
exit $fail
