#!/usr/bin/env bash
# t_bigdata.sh - TRAINER.md "Big data": a 2 GB .npy (sparse: written with a
# NumPy header and truncate, so it costs no disk and scans fast) trains for
# a few shuffled steps while the program's private resident memory
# (RssAnon in /proc/PID/status, sampled every 20 ms) stays at the batch
# working set plus the data order (8 bytes a sample): the file is mapped,
# not read into memory. The finite-value check streams through the whole
# file first: a NaN put into the last sample is refused, naming the file
# and the sample. Prints the peak RssAnon / VmRSS and the run's time.
set -u
cd "$(dirname "$0")/.."
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

# run_peak CMD...: runs CMD, sets rc, peak_anon and peak_rss (kB), secs
run_peak() {
    local start=$(date +%s.%N) a r
    peak_anon=0 peak_rss=0
    "$@" > "$tmp/out" 2>&1 &
    local pid=$!
    while kill -0 $pid 2>/dev/null; do
        a=$(awk '/^RssAnon/{print $2}' /proc/$pid/status 2>/dev/null)
        r=$(awk '/^VmRSS/{print $2}' /proc/$pid/status 2>/dev/null)
        [ -n "$a" ] && [ "$a" -gt $peak_anon ] && peak_anon=$a
        [ -n "$r" ] && [ "$r" -gt $peak_rss ] && peak_rss=$r
        sleep 0.02
    done
    wait $pid
    rc=$?
    secs=$(echo "$(date +%s.%N) - $start" | bc)
}

run_peak "$tmp/big" --data image="$tmp/x.npy" --data label="$tmp/y.npy" --steps 30 --log-every 10
[ $rc = 0 ] || bad "training on the 2 GB file: exit $rc: $(tail -1 "$tmp/out")"
grep -q "^step 30/30 loss" "$tmp/out" || bad "no step 30 in: $(cat "$tmp/out")"
# batch working set (a few MB) + the data order's 8 bytes a sample
limit=$(( 16384 + 8 * N / 1024 ))
echo "t_bigdata: $size bytes, 30 steps in ${secs}s: peak RssAnon ${peak_anon} kB (limit $limit), peak VmRSS ${peak_rss} kB"
[ $peak_anon -gt 0 ] || bad "RssAnon was never read"
[ $peak_anon -le $limit ] || bad "private resident memory ${peak_anon} kB > $limit kB: the data was read into memory"

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
