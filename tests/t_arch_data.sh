#!/usr/bin/env bash
# run_all: fusion-independent (mpcc's default fusion plays no part: make test-nofuse skips it)
# t_arch_data.sh - the data steps of the GPT-2 / LLaMA / ResNet-18 examples:
#   1. text2bin on tiny shakespeare against nanoGPT's shakespeare_char
#      prepare.py, redone in Python (sorted set of characters, ids, a 90/10
#      split, u16 .bin files) and on a UTF-8 text with multi-byte characters
#      and another --split;
#   2. text2bin's refusals: bad UTF-8 (with the byte offset), empty text,
#      bad usage; exit status and a one-line message naming the file;
#   3. idx2npy --pad 2 on Fashion-MNIST against numpy.pad.
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
PY=/usr/bin/python3
DATA=../shared/data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
for f in "$DATA/tinyshakespeare/input.txt" "$DATA/fashion-mnist/t10k-images-idx3-ubyte.gz"; do
    [ -f "$f" ] || { echo "FAIL: dataset $f is missing (../shared/data must sit beside the checkout)"; exit 1; }
done
for t in "$B/text2bin" "$B/idx2npy"; do
    [ -x "$t" ] || { echo "FAIL: $t is not built (run make)"; exit 1; }
done

# ---- 1. text2bin against prepare.py --------------------------------------
"$B/text2bin" "$DATA/tinyshakespeare/input.txt" "$tmp/train.bin" "$tmp/val.bin" "$tmp/vocab.txt" \
    >"$tmp/out" || bad "text2bin failed on tiny shakespeare"
grep -qx 'vocab_size 65, train 1003854 tokens, val 111540 tokens' "$tmp/out" ||
    bad "text2bin's summary: $(cat "$tmp/out")"
printf 'héllo wörld ☃ — naïve 𝄞 text\nmore ☃☃ lines\n' >"$tmp/u.txt"
"$B/text2bin" --split 0.5 "$tmp/u.txt" "$tmp/ut.bin" "$tmp/uv.bin" "$tmp/uvocab.txt" >/dev/null ||
    bad "text2bin failed on UTF-8 text"
"$PY" - "$tmp" "$DATA/tinyshakespeare/input.txt" <<'PYEOF' || bad "text2bin's output differs from prepare.py's"
import sys
import numpy as np
tmp, shake = sys.argv[1], sys.argv[2]
ok = True
for text, split, stem in [(open(shake, encoding="utf-8").read(), 0.9, ("train", "val", "vocab")),
                          (open(tmp + "/u.txt", encoding="utf-8").read(), 0.5, ("ut", "uv", "uvocab"))]:
    chars = sorted(set(text))                 # prepare.py, statement for statement
    stoi = {ch: i for i, ch in enumerate(chars)}
    n = len(text)
    train, val = text[:int(n * split)], text[int(n * split):]
    want = [np.array([stoi[c] for c in s], dtype=np.uint16) for s in (train, val)]
    got = [np.fromfile(f"{tmp}/{s}.bin", dtype="<u2") for s in stem[:2]]
    for w, g, s in zip(want, got, stem):
        if w.shape != g.shape or (w != g).any():
            print(f"{s}.bin: {g.shape[0]} ids, expected {w.shape[0]}; first difference at "
                  f"{int(np.argmax(w[:len(g)] != g[:len(w)])) if len(w) and len(g) else 0}")
            ok = False
    if open(f"{tmp}/{stem[2]}.txt", encoding="utf-8").read() != "".join(chars):
        print(f"{stem[2]}.txt is not the sorted set of characters")
        ok = False
sys.exit(0 if ok else 1)
PYEOF

# ---- 2. refusals ----------------------------------------------------------
# refuse EXPECTED_STATUS 'message pattern' ARGS...
refuse() {
    local want=$1 pat=$2; shift 2
    "$B/text2bin" "$@" >"$tmp/r.out" 2>"$tmp/r.err"
    local rc=$?
    [ $rc = "$want" ] || bad "text2bin $*: exit $rc, expected $want"
    grep -q -- "$pat" "$tmp/r.err" || bad "text2bin $*: message '$(head -c 300 "$tmp/r.err")' lacks '$pat'"
    [ "$want" = 2 ] || [ "$(wc -l <"$tmp/r.err")" = 1 ] || bad "text2bin $*: more than one line on stderr"
}
printf 'ok\xc3(bad' >"$tmp/bad.txt"
: >"$tmp/empty.txt"
refuse 1 "bad.txt: not UTF-8 text: malformed byte sequence at byte offset 2" "$tmp/bad.txt" "$tmp/a" "$tmp/b" "$tmp/c"
refuse 1 "empty.txt: empty text" "$tmp/empty.txt" "$tmp/a" "$tmp/b" "$tmp/c"
refuse 1 "nothere.txt" "$tmp/nothere.txt" "$tmp/a" "$tmp/b" "$tmp/c"
refuse 1 "nodir/a" "$tmp/u.txt" "$tmp/nodir/a" "$tmp/b" "$tmp/c"
refuse 2 "expected an input text and three output files" "$tmp/u.txt" "$tmp/a"
refuse 2 "split needs a fraction" --split 1.5 "$tmp/u.txt" "$tmp/a" "$tmp/b" "$tmp/c"
refuse 2 "unknown option" --bogus "$tmp/u.txt" "$tmp/a" "$tmp/b" "$tmp/c"
[ -e "$tmp/a" ] && bad "a refused run wrote an output"

# ---- 3. idx2npy --pad ----------------------------------------------------
"$B/idx2npy" --shape nchw --pad 2 --limit 300 "$DATA/fashion-mnist/t10k-images-idx3-ubyte.gz" "$tmp/p.npy" ||
    bad "idx2npy --pad failed"
"$B/idx2npy" --pad 1 --limit 5 "$DATA/fashion-mnist/t10k-images-idx3-ubyte.gz" "$tmp/pf.npy" ||
    bad "idx2npy --pad (flat) failed"
"$PY" - "$tmp" "$DATA/fashion-mnist/t10k-images-idx3-ubyte.gz" <<'PYEOF' || bad "idx2npy --pad differs from numpy.pad"
import gzip, sys
import numpy as np
tmp, src = sys.argv[1], sys.argv[2]
x = np.frombuffer(gzip.open(src).read(), np.uint8, offset=16).reshape(-1, 28, 28)
p, pf = np.load(tmp + "/p.npy"), np.load(tmp + "/pf.npy")
want = np.pad(x[:300], ((0, 0), (2, 2), (2, 2)))[:, None]
wantf = np.pad(x[:5], ((0, 0), (1, 1), (1, 1))).reshape(5, 900)
sys.exit(0 if p.dtype == np.uint8 and p.shape == (300, 1, 32, 32) and (p == want).all()
         and pf.shape == (5, 900) and (pf == wantf).all() else 1)
PYEOF
"$B/idx2npy" --pad -1 "$DATA/fashion-mnist/t10k-images-idx3-ubyte.gz" "$tmp/q.npy" 2>"$tmp/r.err"
[ $? = 2 ] && grep -q -- "--pad needs a count" "$tmp/r.err" || bad "idx2npy --pad -1: not refused as usage"

[ $fail = 0 ] && echo "text2bin and idx2npy --pad agree with prepare.py and numpy"
exit $fail
