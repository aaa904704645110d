#!/usr/bin/env bash
# t_plan_html.sh - the plan as a page, `mpcc --dump-plan=html`, opened in a
# real browser, and `--dump-plan=dot --collapse` (PRECISION.md, "Additions:
# the plan as a page"; compiler/plan_html.c, templates/plan.html.in):
#   1. --dump-plan=dot --collapse of GPT-2 draws `transformer.h ×4` as one
#      box, no layer's node, and renders (Graphviz's dot -Tpng) under 2,000
#      pixels high (the full dot is 15,705 x 21,137 and takes dot minutes:
#      not rendered here); usage errors (--collapse without the dot format)
#      exit 2;
#   2. every example's page, opened in headless chromium (Debian's
#      chromium, installed by .ci/run) at 1920 x 1080, runs its script
#      without an error; each page at #expand=all draws every node of
#      --dump-plan=json once, coloured by the json's compute type (the
#      legend's colour, f16, bf16 and f32 distinct), casts as diamonds,
#      each edge of a pass once, marked as a cast exactly where the json
#      reads through one, loss scaling marked where the plan scales
#      (tests/plan/check_html.py compares the DOM with the json);
#   3. GPT-2's page (bf16, and under --precision mixed_float16 with loss
#      scaling) before any click shows at most 60 boxes, inside 1920 x 1080
#      with its text at least 9 px high; a click on the box (#click=,
#      which dispatches one) and #expand=transformer.h show the layer's
#      ops; #search=ln_1 finds the json's ln_1 nodes; the page made with
#      --gpu h100 shows the cost in its summary.
# Without chromium (or with CHROMIUM= set empty) parts 2 and 3 are skipped
# (SKIP, exit 0); CI has it. CHROMIUM=PATH names another browser binary.
# run_all: once (the page draws whatever plan fusion made; the default, fused one is enough: make test-nofuse skips it)
set -u
cd "$(dirname "$0")/.."
. tests/py/lib.sh
test_tmp

echo "== 1. --dump-plan=dot --collapse: GPT-2 in one screen's height"
if ! command -v dot >/dev/null; then
    bad "Graphviz's dot not found (.ci/run installs graphviz)"
else
    "$MPCC" examples/gpt2.mp --dump-plan=dot --collapse >"$tmp/c.dot" 2>"$tmp/c.err" ||
        bad "--dump-plan=dot --collapse: exit $?: $(head -n 3 "$tmp/c.err")"
    grep -q 'label="transformer.h ×4' "$tmp/c.dot" || bad "no box 'transformer.h ×4' in the collapsed dot"
    grep -q 'transformer.h.1.attn' "$tmp/c.dot" && bad "the collapsed dot still draws the layers' nodes"
    dot -Tpng -o "$tmp/c.png" "$tmp/c.dot" || bad "dot cannot render the collapsed plan"
    $PY - "$tmp/c.png" <<'EOF' || fail=1
import struct, sys
def size(p):
    b = open(p, "rb").read(24)
    assert b[:8] == b"\x89PNG\r\n\x1a\n", p + " is not a PNG"
    return struct.unpack(">II", b[16:24])
cw, ch = size(sys.argv[1])
print("  collapsed: %d x %d px" % (cw, ch))
if ch >= 2000:
    print("FAIL: the collapsed picture is %d px high, at most 2000 wanted" % ch)
    sys.exit(1)
EOF
fi
for bad_args in "--dump-plan=json --collapse" "--collapse" "--dump-plan=cost --gpu h100 --collapse"; do
    # shellcheck disable=SC2086
    "$MPCC" examples/gpt2.mp $bad_args >"$tmp/u.out" 2>"$tmp/u.err"
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--collapse only applies to --dump-plan=dot" "$tmp/u.err" ||
        bad "mpcc $bad_args: exit $rc, wanted 2 and a message: $(head -n 2 "$tmp/u.err")"
done

CHROMIUM=${CHROMIUM-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$CHROMIUM" ]; then
    echo "SKIP: chromium not found: the pages are not opened in a browser here (.ci/run installs Debian's chromium)"
    exit "$fail"
fi

# open PAGE HASH DOM: the page's DOM after its script ran, in a 1920 x 1080
# window; chromium ends when the page has loaded and its timers are done
# (virtual time: nothing waits on the clock)
open_page() {
    timeout 120 "$CHROMIUM" --headless --disable-gpu --no-sandbox --disable-dev-shm-usage --no-first-run \
        --user-data-dir="$tmp/profile" --window-size=1920,1080 --hide-scrollbars \
        --virtual-time-budget=10000 --dump-dom "file://$1$2" >"$3" 2>"$3.err" ||
        { bad "chromium on $1$2: exit $?: $(tail -n 3 "$3.err")"; return 1; }
}

echo "== 2. every example's page against its json, node for node"
for m in examples/*.mp; do
    b=$(basename "$m" .mp)
    echo "-- $b"
    "$MPCC" "$m" --dump-plan=html >"$tmp/$b.html" 2>"$tmp/$b.err" ||
        { bad "$b: --dump-plan=html: exit $?: $(head -n 3 "$tmp/$b.err")"; continue; }
    "$MPCC" "$m" --dump-plan=json >"$tmp/$b.json" || { bad "$b: --dump-plan=json failed"; continue; }
    grep -Eq '<(script|link|img)[^>]* (src|href)=' "$tmp/$b.html" &&
        bad "$b: the page loads something from elsewhere"
    open_page "$tmp/$b.html" "" "$tmp/$b.dom" && { $PY tests/plan/check_html.py collapsed "$tmp/$b.dom" "$tmp/$b.json" || fail=1; }
    open_page "$tmp/$b.html" "#expand=all" "$tmp/$b.all.dom" &&
        { $PY tests/plan/check_html.py all "$tmp/$b.all.dom" "$tmp/$b.json" || fail=1; }
done

echo "== 3. GPT-2: one screen before any click, the layer's ops after one"
"$MPCC" examples/gpt2.mp --dump-plan=html --precision mixed_float16 >"$tmp/g16.html" &&
    "$MPCC" examples/gpt2.mp --dump-plan=json --precision mixed_float16 >"$tmp/g16.json" ||
    bad "gpt2 under mixed_float16: no page"
grep -q '"kind": "dynamic"' "$tmp/g16.json" || bad "gpt2 under mixed_float16 does not scale the loss dynamically"
for v in gpt2 g16; do
    echo "-- $v"
    open_page "$tmp/$v.html" "" "$tmp/$v.c.dom" &&
        { $PY tests/plan/check_html.py collapsed "$tmp/$v.c.dom" "$tmp/$v.json" transformer.h || fail=1; }
    open_page "$tmp/$v.html" "#click=transformer.h" "$tmp/$v.x.dom" &&
        { $PY tests/plan/check_html.py expanded "$tmp/$v.x.dom" "$tmp/$v.json" transformer.h || fail=1; }
done
open_page "$tmp/gpt2.html" "#expand=transformer.h" "$tmp/gpt2.e.dom" &&
    { $PY tests/plan/check_html.py expanded "$tmp/gpt2.e.dom" "$tmp/gpt2.json" transformer.h || fail=1; }
open_page "$tmp/gpt2.html" "#search=ln_1" "$tmp/gpt2.s.dom" &&
    { $PY tests/plan/check_html.py search "$tmp/gpt2.s.dom" "$tmp/gpt2.json" ln_1 || fail=1; }
open_page "$tmp/g16.html" "#expand=all" "$tmp/g16.all.dom" &&
    { $PY tests/plan/check_html.py all "$tmp/g16.all.dom" "$tmp/g16.json" || fail=1; }
"$MPCC" examples/gpt2.mp --dump-plan=html --gpu h100 >"$tmp/gc.html" || bad "--dump-plan=html --gpu h100 failed"
open_page "$tmp/gc.html" "" "$tmp/gc.dom" && {
    grep -q 'cost on h100' "$tmp/gc.dom" || bad "the page made with --gpu h100 shows no cost: $(grep -o '<div id="summary".\{0,300\}' "$tmp/gc.dom")"
    $PY tests/plan/check_html.py collapsed "$tmp/gc.dom" "$tmp/gpt2.json" transformer.h || fail=1
}

[ "$fail" -eq 0 ] && echo "t_plan_html: all passed"
exit "$fail"
