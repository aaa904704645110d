#!/usr/bin/env bash
# run_all: fusion-independent (mpcc's default fusion plays no part: make test-nofuse skips it)
# t_tools.sh - the data converters (idx2npy, csv2npy) and the runtime's file
# formats, checked against independent Python readers:
#   1. converts the real MNIST t10k files and the digits CSV and compares
#      shapes, dtypes and every value with Python's own parse of the IDX /
#      CSV (gzip + struct / csv), loading the .npy files with NumPy;
#   2. every refusal of the converters: exit status and a one-line message
#      that names the file;
#   3. .npy files written by NumPy (every dtype, versions 1 and 2, and the
#      ones to refuse) read by mp_npy_load (test_npy's MP_NPY_IN mode);
#   4. a safetensors file written by mp_st_save (test_safetensors' MP_ST_OUT
#      mode) read by a Python reader (json + numpy), and one written by
#      Python read by mp_st_load (MP_ST_IN mode).
# Needs ../shared/data (always there in CI: missing data is a failure),
# /usr/bin/python3 with numpy, and `make` (the tools and unit tests built).
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
PY=/usr/bin/python3
DATA=../shared/data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

for f in "$DATA/mnist/t10k-images-idx3-ubyte.gz" "$DATA/mnist/t10k-labels-idx1-ubyte.gz" \
         "$DATA/digits/digits.csv.gz"; do
    [ -f "$f" ] || { echo "FAIL: dataset $f is missing (../shared/data must sit beside the checkout)"; exit 1; }
done
for t in "$B/idx2npy" "$B/csv2npy" "$B/tests/test_npy" "$B/tests/test_safetensors"; do
    [ -x "$t" ] || { echo "FAIL: $t is not built (run make and make $B/tests/...)"; exit 1; }
done
"$PY" -c 'import numpy' || { echo "FAIL: $PY has no numpy"; exit 1; }

# ---- 1. conversions against Python's own parse ---------------------------
run() { "$@" || bad "exit $? from: $*"; }
run "$B/idx2npy" "$DATA/mnist/t10k-images-idx3-ubyte.gz" "$tmp/x.npy"
run "$B/idx2npy" "$DATA/mnist/t10k-labels-idx1-ubyte.gz" "$tmp/y.npy"
run "$B/idx2npy" --shape nchw --limit 100 "$DATA/mnist/t10k-images-idx3-ubyte.gz" "$tmp/x4.npy"
run "$B/idx2npy" --limit 10 "$DATA/mnist/t10k-labels-idx1-ubyte.gz" "$tmp/y10.npy"
run "$B/csv2npy" --label -1 "$DATA/digits/digits.csv.gz" "$tmp/dx.npy" "$tmp/dy.npy"
run "$B/csv2npy" --features 0:64 --dtype u8 "$DATA/digits/digits.csv.gz" "$tmp/du8.npy"
run "$B/csv2npy" --features -1 --dtype i32 "$DATA/digits/digits.csv.gz" "$tmp/dlast.npy"
# the same images from an uncompressed IDX file
gzip -dc "$DATA/mnist/t10k-images-idx3-ubyte.gz" > "$tmp/images.idx"
run "$B/idx2npy" "$tmp/images.idx" "$tmp/xplain.npy"

"$PY" - "$tmp" "$DATA" <<'EOF' || bad "converted files differ from Python's parse"
import csv, gzip, io, struct, sys
import numpy as np
tmp, data = sys.argv[1], sys.argv[2]

def idx(path):
    b = gzip.open(path).read()
    magic, = struct.unpack('>I', b[:4])
    nd = magic & 0xff
    dims = struct.unpack('>' + 'I' * nd, b[4:4 + 4 * nd])
    return np.frombuffer(b, np.uint8, offset=4 + 4 * nd).reshape(dims)

def load(name, descr, shape):
    raw = open(f'{tmp}/{name}', 'rb').read()
    assert raw[:8] == b'\x93NUMPY\x01\x00', (name, raw[:8])
    assert (10 + raw[8] + 256 * raw[9]) % 64 == 0, name
    a = np.load(f'{tmp}/{name}', allow_pickle=False)
    assert a.dtype.str == descr and a.shape == shape and a.flags.c_contiguous, (name, a.dtype.str, a.shape)
    return a

img = idx(f'{data}/mnist/t10k-images-idx3-ubyte.gz')
lab = idx(f'{data}/mnist/t10k-labels-idx1-ubyte.gz')
assert img.shape == (10000, 28, 28) and lab.shape == (10000,)
assert np.array_equal(load('x.npy', '|u1', (10000, 784)), img.reshape(10000, 784))
assert np.array_equal(load('xplain.npy', '|u1', (10000, 784)), img.reshape(10000, 784))
assert np.array_equal(load('x4.npy', '|u1', (100, 1, 28, 28)), img[:100].reshape(100, 1, 28, 28))
assert np.array_equal(load('y.npy', '<i4', (10000,)), lab.astype(np.int32))
assert np.array_equal(load('y10.npy', '<i4', (10,)), lab[:10].astype(np.int32))

rows = [[int(v) for v in r] for r in csv.reader(io.TextIOWrapper(gzip.open(f'{data}/digits/digits.csv.gz')))]
d = np.array(rows)
assert d.shape == (1797, 65)
assert np.array_equal(load('dx.npy', '<f4', (1797, 64)), d[:, :64].astype(np.float32))
assert np.array_equal(load('dy.npy', '<i4', (1797,)), d[:, 64].astype(np.int32))
assert np.array_equal(load('du8.npy', '|u1', (1797, 64)), d[:, :64].astype(np.uint8))
assert np.array_equal(load('dlast.npy', '<i4', (1797, 1)), d[:, 64:].astype(np.int32))
print('converted files match Python\'s parse')
EOF

# ---- 2. refusals: exit status, one line naming the file ------------------
# expect STATUS PATTERN CMD...: CMD exits STATUS and its standard error
# contains PATTERN (and, for status 1, is exactly one line).
expect() {
    local want=$1 pat=$2
    shift 2
    "$@" > /dev/null 2> "$tmp/err"
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        bad "exit $rc (expected $want) from: $*"
    elif ! grep -qF -- "$pat" "$tmp/err"; then
        bad "message of '$*' lacks '$pat': $(head -c 300 "$tmp/err")"
    elif [ "$want" -eq 1 ] && [ "$(wc -l < "$tmp/err")" -ne 1 ]; then
        bad "more than one line from: $*"
    fi
}
head -c 3000 "$DATA/mnist/t10k-labels-idx1-ubyte.gz" > "$tmp/cut.gz"
head -c 100000 "$tmp/images.idx" > "$tmp/cut.idx"
cp "$tmp/images.idx" "$tmp/long.idx" && printf 'xx' >> "$tmp/long.idx"
printf '\0\0\x08\x02\0\0\0\1\0\0\0\1\0' > "$tmp/matrix.idx"
I=$B/idx2npy C=$B/csv2npy
expect 1 "$tmp/cut.gz: corrupt or truncated gzip data" "$I" "$tmp/cut.gz" "$tmp/o.npy"
expect 1 "$tmp/cut.idx: truncated: header says 10000x28x28 (7840000 bytes) but the file holds 99984 bytes" \
    "$I" "$tmp/cut.idx" "$tmp/o.npy"
expect 1 "$tmp/long.idx: header says 10000x28x28 (7840000 bytes) but the file holds 7840002" \
    "$I" "$tmp/long.idx" "$tmp/o.npy"
expect 1 "digits.csv.gz: not an IDX file" "$I" "$DATA/digits/digits.csv.gz" "$tmp/o.npy"
expect 1 "found 0x00000802" "$I" "$tmp/matrix.idx" "$tmp/o.npy"
expect 1 "$tmp/absent.gz: cannot open" "$I" "$tmp/absent.gz" "$tmp/o.npy"
expect 1 "/nonexistent-dir/o.npy: cannot create" "$I" "$tmp/images.idx" /nonexistent-dir/o.npy
expect 1 "holds 10000 samples, fewer than --limit 10001" "$I" --limit 10001 "$tmp/images.idx" "$tmp/o.npy"
expect 2 "usage: idx2npy" "$I"
expect 2 "--shape must be flat or nchw" "$I" --shape nhwc "$tmp/images.idx" "$tmp/o.npy"
expect 2 "--limit needs a positive count" "$I" --limit 0 "$tmp/images.idx" "$tmp/o.npy"
expect 2 "unknown option '--bogus'" "$I" --bogus "$tmp/images.idx" "$tmp/o.npy"
expect 2 "too many arguments" "$I" a b c
"$I" --help | grep -q "usage: idx2npy" || bad "idx2npy --help"
[ -e "$tmp/o.npy" ] && bad "a refused conversion left $tmp/o.npy"

printf '1,2,3\n4,5\n' > "$tmp/ragged.csv"
printf '1,2,3\n\n4,x,6\n' > "$tmp/word.csv"
printf '1,2,3\r\n4,256,6\r\n' > "$tmp/big.csv"
printf '1,2,3\n4,2.5,6\n' > "$tmp/frac.csv"
printf '1,inf,3\n' > "$tmp/inf.csv"
printf 'a,b,label\n1.5,-2,3\n' > "$tmp/header.csv"
printf '\n\n' > "$tmp/blank.csv"
expect 1 "$tmp/ragged.csv:2: expected 3 columns (as on the first row), found 2" "$C" "$tmp/ragged.csv" "$tmp/o.npy"
expect 1 "$tmp/word.csv:3: column 1: expected a number, found 'x'" "$C" "$tmp/word.csv" "$tmp/o.npy"
expect 1 "$tmp/big.csv:2: column 1: 256 is out of range for u8" "$C" --dtype u8 "$tmp/big.csv" "$tmp/o.npy"
expect 1 "$tmp/frac.csv:2: column 1: expected a whole number for i32" "$C" --label 1 --features 0 "$tmp/frac.csv" "$tmp/o.npy" "$tmp/o2.npy"
expect 1 "$tmp/inf.csv:1: column 1: expected a finite number" "$C" "$tmp/inf.csv" "$tmp/o.npy"
expect 1 "$tmp/header.csv:1: column 0: expected a number, found 'a' (if the first row holds column names, add --header)" "$C" "$tmp/header.csv" "$tmp/o.npy"
expect 1 "$tmp/word.csv:3: column 1: expected a number, found 'x'" "$C" --header "$tmp/word.csv" "$tmp/o.npy"
expect 1 "$tmp/blank.csv: no rows of data" "$C" "$tmp/blank.csv" "$tmp/o.npy"
expect 1 "--label 7 is outside the 3 columns" "$C" --label 7 "$tmp/ragged.csv" "$tmp/o.npy" "$tmp/o2.npy"
expect 1 "in the middle" "$C" --label 1 "$tmp/ragged.csv" "$tmp/o.npy" "$tmp/o2.npy"
expect 2 "OUT_Y.npy (for --label / --target)" "$C" --label -1 "$tmp/ragged.csv" "$tmp/o.npy"
expect 2 "give one of --label and --target" "$C" --label -1 --target 0 "$tmp/ragged.csv" "$tmp/o.npy" "$tmp/o2.npy"
expect 1 "--target 5 is outside the 3 columns" "$C" --target 5 "$tmp/ragged.csv" "$tmp/o.npy" "$tmp/o2.npy"
expect 2 "--dtype must be f32, u8 or i32" "$C" --dtype f64 "$tmp/ragged.csv" "$tmp/o.npy"
expect 2 "bad --features '1:x'" "$C" --features 1:x "$tmp/ragged.csv" "$tmp/o.npy"
expect 2 "usage: csv2npy" "$C"
"$C" --help | grep -q "usage: csv2npy" || bad "csv2npy --help"
[ -e "$tmp/o.npy" ] && bad "a refused conversion left $tmp/o.npy"
run "$C" --header --label -1 "$tmp/header.csv" "$tmp/h.npy" "$tmp/hy.npy"
"$PY" -c "
import numpy as np, sys
x, y = np.load('$tmp/h.npy'), np.load('$tmp/hy.npy')
sys.exit(not (x.tolist() == [[1.5, -2.0]] and x.dtype == np.float32 and y.tolist() == [3] and y.dtype == np.int32))
" || bad "csv2npy --header"
printf 'a,b,price\n1.5,-2,3.25\n0,1,-0.5\n' > "$tmp/reg.csv"
run "$C" --header --target -1 "$tmp/reg.csv" "$tmp/r.npy" "$tmp/ry.npy"
"$PY" -c "
import numpy as np, sys
x, y = np.load('$tmp/r.npy'), np.load('$tmp/ry.npy')
sys.exit(not (x.tolist() == [[1.5, -2.0], [0, 1]] and y.tolist() == [3.25, -0.5] and y.dtype == np.float32))
" || bad "csv2npy --target: float targets"

# ---- 3. .npy written by NumPy, read by mp_npy_load -------------------------
"$PY" - "$tmp" <<'EOF' > "$tmp/npy_want" || bad "writing .npy files with NumPy"
import sys
import numpy as np
from numpy.lib import format as fmt
tmp = sys.argv[1]
def fnv(b):
    h = 1469598103934665603
    for c in b:
        h = ((h ^ c) * 1099511628211) % (1 << 64)
    return f'{h:016x}'
r = np.random.default_rng(1)
good = {
    'f4': r.standard_normal((3, 5)).astype('<f4'),
    'f2': r.standard_normal((7,)).astype('<f2'),
    'i4': r.integers(-1000, 1000, (2, 3, 4)).astype('<i4'),
    'u1': r.integers(0, 256, (4, 1, 2, 2)).astype(np.uint8),
    'u2': r.integers(0, 65536, (9,)).astype('<u2'),
    'scalar': np.array(2.5, dtype='<f4'),
    'empty': np.zeros((0, 3), dtype='<f4'),
}
names = {'float32': 'f32', 'float16': 'f16', 'int32': 'i32', 'uint8': 'u8', 'uint16': 'u16'}
for k, a in good.items():
    np.save(f'{tmp}/{k}.npy', a)
    shape = 'x'.join(map(str, a.shape)) or 'scalar'
    print(f'{k}.npy {names[a.dtype.name]} {shape} {a.nbytes} {fnv(a.tobytes())}')
with open(f'{tmp}/v2.npy', 'wb') as f:
    fmt.write_array(f, good['i4'], version=(2, 0))
a = good['i4']
print(f'v2.npy i32 2x3x4 {a.nbytes} {fnv(a.tobytes())}')
np.save(f'{tmp}/fortran.npy', np.asfortranarray(r.standard_normal((3, 4)).astype('<f4')))
np.save(f'{tmp}/big.npy', np.arange(4, dtype='>f4'))
np.save(f'{tmp}/f8.npy', np.arange(4, dtype='<f8'))
np.save(f'{tmp}/obj.npy', np.array([1, 'a'], dtype=object), allow_pickle=True)
np.save(f'{tmp}/rec.npy', np.zeros(2, dtype=[('a', '<f4'), ('b', '<i4')]))
np.savez(f'{tmp}/zipped.npz', a=good['f4'])
EOF
for k in f4 f2 i4 u1 u2 scalar empty v2; do
    got=$(MP_NPY_IN="$tmp/$k.npy" "$B/tests/test_npy")
    want=$(grep "^$k.npy " "$tmp/npy_want" | cut -d' ' -f2-)
    [ "$got" = "$want" ] || bad "mp_npy_load($k.npy): got '$got', NumPy wrote '$want'"
done
refuse() {
    local got
    got=$(MP_NPY_IN="$tmp/$1" "$B/tests/test_npy") && bad "mp_npy_load accepted $1"
    case $got in *"$tmp/$1: "*"$2"*) ;; *) bad "mp_npy_load($1): '$got' lacks '$2'" ;; esac
}
refuse fortran.npy "expected a C-order array, found fortran_order True"
refuse big.npy "big-endian"
refuse f8.npy "found '<f8'"
refuse obj.npy "object array"
refuse rec.npy "structured dtype"
refuse zipped.npz ".npz archive"

# ---- 4. safetensors both ways ----------------------------------------------
MP_ST_OUT="$tmp/k.safetensors" "$B/tests/test_safetensors" || bad "test_safetensors could not write"
"$PY" - "$tmp/k.safetensors" <<'EOF' || bad "Python reader disagrees with mp_st_save"
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], 'rb').read()
n, = struct.unpack('<Q', raw[:8])
assert (8 + n) % 8 == 0, 'data must start 8-byte aligned'
text = raw[8:8 + n].decode('utf-8')
assert text.startswith('{') and text.rstrip(' ') == text.rstrip(), 'header padded with spaces only'
hdr = json.loads(text)
assert hdr.pop('__metadata__') == {'model': 'mnist', 'note': 'a "q"\n\u00e9'}
data = raw[8 + n:]
spans = sorted(v['data_offsets'] for v in hdr.values())
at = 0
for b, e in spans:
    assert b == at, 'tensors tile the buffer'
    at = e
assert at == len(data), 'nothing after the last tensor'
types = {'F32': '<f4', 'I32': '<i4', 'F16': '<u2', 'BF16': '<u2', 'U8': 'u1'}
def get(name, dtype, shape):
    v = hdr[name]
    assert v['dtype'] == dtype and v['shape'] == shape, (name, v)
    b, e = v['data_offsets']
    return np.frombuffer(data[b:e], types[dtype]).reshape(shape)
assert np.array_equal(get('w', 'F32', [2, 3]), (0.5 * np.arange(6, dtype=np.float32) - 1).reshape(2, 3))
assert get('step', 'I32', []) == 1234
assert np.array_equal(get('h', 'F16', [4]).view('<f2'), np.array([1, 1.0009766, 1.0019531, 1.0029297], '<f2'))
assert np.array_equal(get('b', 'BF16', [2]), [0x3f80, 0x3f81])
assert np.array_equal(get('u', 'U8', [5]), [250, 251, 252, 253, 254])
assert get('empty', 'F32', [0, 3]).size == 0
assert list(hdr) == ['w', 'step', 'h', 'b', 'u', 'empty']
print('safetensors written by mp_st_save read by Python')
EOF
# written by Python (its json.dumps spacing, sorted keys, data in another
# order than the header) and read back by mp_st_load
"$PY" - "$tmp/py.safetensors" <<'EOF' > "$tmp/st_want" || bad "writing safetensors with Python"
import json, struct, sys
import numpy as np
t = {'layer.bias': np.array([0.5, -1], '<f4'), 'ids': np.array([[1, 2], [3, -4]], '<i4'),
     'mask': np.array([0, 1, 255], np.uint8)}
order = ['mask', 'ids', 'layer.bias']  # data layout differs from the header's sorted order
hdr, off, blob = {'__metadata__': {'step': '42', 'name': 'caf\u00e9'}}, 0, b''
for k in order:
    b = t[k].tobytes()
    hdr[k] = {'dtype': {'float32': 'F32', 'int32': 'I32', 'uint8': 'U8'}[t[k].dtype.name],
              'shape': list(t[k].shape), 'data_offsets': [off, off + len(b)]}
    off += len(b)
    blob += b
text = json.dumps(hdr, sort_keys=True).encode()
text += b' ' * (-len(text) % 8)
open(sys.argv[1], 'wb').write(struct.pack('<Q', len(text)) + text + blob)
print('meta "name" "caf\u00e9"')
print('meta "step" "42"')
for k in sorted(t):
    a = t[k]
    print('tensor', k, hdr[k]['dtype'], 'x'.join(map(str, a.shape)), a.tobytes().hex())
EOF
MP_ST_IN="$tmp/py.safetensors" "$B/tests/test_safetensors" > "$tmp/st_got" || bad "mp_st_load refused Python's file: $(cat "$tmp/st_got")"
diff "$tmp/st_want" "$tmp/st_got" > /dev/null || bad "mp_st_load read Python's file differently: $(diff "$tmp/st_want" "$tmp/st_got")"
head -c 150 "$tmp/py.safetensors" > "$tmp/cut.safetensors"
got=$(MP_ST_IN="$tmp/cut.safetensors" "$B/tests/test_safetensors") && bad "mp_st_load accepted a truncated file"
case $got in *"$tmp/cut.safetensors: truncated"*) ;; *) bad "truncated safetensors: '$got'" ;; esac

if [ "$fail" -ne 0 ]; then
    echo "t_tools: FAILED"
    exit 1
fi
echo "t_tools: all checks passed"
