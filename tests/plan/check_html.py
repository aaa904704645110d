"""check_html.py - checks one page of `mpcc --dump-plan=html`, as headless
chromium left its DOM (--dump-dom), against the model's `--dump-plan=json`
(tests/t_plan_html.sh runs it).

usage: check_html.py MODE DOM.html PLAN.json [REPEAT]
  MODE collapsed  the page before any click: no script error, at most 60
                  boxes and the whole page inside 1920 x 1080 with its text
                  at least 9 px high (when REPEAT is given: GPT-2), REPEAT's
                  box "REPEAT xN" shown, N its copies in the json
  MODE expanded   the page of #click=REPEAT (a click on its box) or
                  #expand=REPEAT: the box is gone, the layer's ops are shown
                  (each copy's layer_norm nodes, found by their parameters'
                  names in the json)
  MODE search     the page of #search=REPEAT: as many matches as json nodes
                  whose name (or, unnamed in the backward pass, their forward
                  node's) holds REPEAT, and boxes outlined
  MODE all        the page of #expand=all: every node of the json drawn once,
                  its compute type as the json's, filled with the legend's
                  colour of that type (one colour per type), casts (and only
                  they) diamonds, user casts marked; each edge within a pass
                  drawn once, marked as a cast exactly when the json's input
                  reads through a cast; loss scaling marked when the plan
                  scales the loss
Prints what is wrong and exits 1, or exits 0."""
import json
import re
import sys
from html.parser import HTMLParser


class Dom(HTMLParser):
    """The elements the checks read: every start tag with its attributes, the
    first shape (rect or polygon) of each node item, the error text."""

    def __init__(self):
        super().__init__()
        self.tags = []        # (tag, attrs)
        self.stack = []
        self.shape_of = {}    # data-key of an item -> (tag, attrs) of its first shape
        self.errors_text = ""
        self.in_errors = False
        self.found_text = ""
        self.in_found = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag in ("rect", "polygon"):
            for t, pa in reversed(self.stack):
                if t == "g" and "item" in pa.get("class", "").split():
                    self.shape_of.setdefault(pa["data-key"], (tag, a))
                    break
        self.in_errors = a.get("id") == "errors"
        self.in_found = a.get("id") == "found"
        self.stack.append((tag, a))

    def handle_endtag(self, tag):
        while self.stack:
            t, _ = self.stack.pop()
            if t == tag:
                break
        self.in_errors = self.in_found = False

    def handle_data(self, d):
        if self.in_errors:
            self.errors_text += d
        if self.in_found:
            self.found_text += d

    def find(self, pred):
        return [a for t, a in self.tags if pred(t, a)]


problems = []


def bad(msg):
    problems.append(msg)


def main():
    mode, dom_path, plan_path = sys.argv[1:4]
    repeat = sys.argv[4] if len(sys.argv) > 4 else None
    plan = json.load(open(plan_path))
    dom = Dom()
    dom.feed(open(dom_path, encoding="utf-8").read())
    nodes = plan["nodes"]

    status = dom.find(lambda t, a: a.get("id") == "status")
    if not status or status[0].get("data-ready") != "1":
        bad("the page's script did not finish (no #status data-ready)")
        return
    st = status[0]
    errs = dom.find(lambda t, a: a.get("id") == "errors")
    if not errs or errs[0].get("data-count") != "0" or dom.errors_text.strip():
        bad("script errors: %r" % dom.errors_text.strip())
    items = dom.find(lambda t, a: t == "g" and "item" in a.get("class", "").split())
    if int(st["data-boxes"]) != len(items):
        bad("#status says %s boxes, the svg has %d" % (st["data-boxes"], len(items)))
    groups = [a for a in items if "group" in a["class"].split()]
    node_items = [a for a in items if "node" in a["class"].split()]

    copies = None
    if repeat and mode != "search":
        pat = re.compile(re.escape(repeat) + r"\.(\d+)\.")
        copies = len({m.group(1) for n in nodes if n["name"] for m in [pat.match(n["name"])] if m})
        if copies < 2:
            bad("the json names no copies of %s" % repeat)
    label = "%s \u00d7%d" % (repeat, copies) if copies else None

    if mode == "collapsed":
        if repeat:
            if len(items) > 60:
                bad("%d boxes before any click, at most 60 wanted" % len(items))
            w, h = int(st["data-page-width"]), int(st["data-page-height"])
            if w > 1920 or h > 1080:
                bad("the page is %d x %d pixels, more than 1920 x 1080" % (w, h))
            if float(st["data-font-px"]) < 9:
                bad("text %s px high: not readable" % st["data-font-px"])
            if not [g for g in groups if g.get("data-label") == label]:
                bad("no box %r; boxes: %s" % (label, [g.get("data-label") for g in groups]))
        print("  %d boxes, %s x %s px, text %s px" % (len(items), st["data-page-width"],
                                                      st["data-page-height"], st["data-font-px"]))
    elif mode == "expanded":
        if [g for g in groups if g.get("data-label") == label and g.get("data-phase") == "forward"]:
            bad("the forward pass's %r is still a closed box" % label)
        shown = {int(a["data-id"]) for a in node_items}
        want = {n["id"] for n in nodes if n["op"] == "layer_norm" and n["phase"] == "forward"
                and (n["inputs"] and any((nodes[i["from"]]["name"] or "").startswith(repeat + ".")
                                         for i in n["inputs"]))}
        if len(want) < copies or not want <= shown:
            bad("the layer's layer_norm ops %s are not all shown (shown: %s)"
                % (sorted(want), sorted(shown & want)))
        print("  %d boxes; the layer's layer_norm nodes %s shown" % (len(items), sorted(want)))
    elif mode == "all":
        legend = {a["data-type"]: a["data-color"].lower()
                  for a in dom.find(lambda t, a: "swatch" in a.get("class", "").split())}
        used = {n["compute"] for n in nodes if n["compute"] in ("f16", "bf16", "f32")}
        colors = [legend.get(t) for t in used]
        if None in colors or len(set(colors)) != len(colors):
            bad("legend colours of %s: %s (one each, distinct, wanted)" % (sorted(used), legend))
        by_id = {}
        for a in node_items:
            i = int(a["data-id"])
            if i in by_id:
                bad("node #%d drawn twice" % i)
            by_id[i] = a
        if set(by_id) != {n["id"] for n in nodes}:
            bad("nodes drawn %d, json %d; missing %s" % (len(by_id), len(nodes),
                                                        sorted({n["id"] for n in nodes} - set(by_id))[:10]))
        if groups:
            bad("closed boxes left after #expand=all: %s" % [g.get("data-label") for g in groups])
        for n in nodes:
            a = by_id.get(n["id"])
            if a is None:
                continue
            if a.get("data-compute") != n["compute"] or a.get("data-op") != n["op"]:
                bad("#%d: page %s/%s, json %s/%s" % (n["id"], a.get("data-op"), a.get("data-compute"),
                                                     n["op"], n["compute"]))
            tag, shape = dom.shape_of.get("n%d" % n["id"], (None, {}))
            if n["compute"] in legend and shape.get("fill", "").lower() != legend[n["compute"]]:
                bad("#%d (%s) filled %s, the legend's %s is %s" % (n["id"], n["op"], shape.get("fill"),
                                                                   n["compute"], legend[n["compute"]]))
            is_cast = n["op"] == "cast"
            if is_cast != (tag == "polygon") or is_cast != ("data-cast" in a):
                bad("#%d (%s): drawn as %s, cast mark %r" % (n["id"], n["op"], tag, a.get("data-cast")))
            if is_cast and a.get("data-cast") != ("user" if n.get("user") else "plan"):
                bad("#%d: cast by %s in the json, %s on the page" % (
                    n["id"], "the user" if n.get("user") else "the plan", a.get("data-cast")))
            scaled = n["op"] in ("loss_scale", "unscale") and plan["loss_scale"]["kind"] != "none"
            if scaled != ("data-scale" in a):
                bad("#%d (%s): loss scaling mark %r" % (n["id"], n["op"], a.get("data-scale")))
        want = {}
        for n in nodes:
            for i in n["inputs"]:
                if nodes[i["from"]]["phase"] == n["phase"]:
                    k = ("n%d" % i["from"], "n%d" % n["id"])
                    want[k] = want.get(k, False) or i["cast"]
        got = {}
        for a in dom.find(lambda t, a: t == "path" and "edge" in a.get("class", "").split()):
            k = (a["data-from"], a["data-to"])
            if k in got:
                bad("edge %s -> %s drawn twice" % k)
            got[k] = a["data-cast"] == "1"
            if got[k] != ("cast" in a["class"].split()):
                bad("edge %s -> %s: data-cast %s but class %r" % (k + (a["data-cast"], a["class"])))
        if set(got) != set(want):
            bad("edges: %d drawn, %d in the json; e.g. missing %s, extra %s" % (
                len(got), len(want), sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5]))
        wrong = [k for k in want if k in got and got[k] != want[k]]
        if wrong:
            bad("cast marks differ from the json on %d edges, e.g. %s" % (len(wrong), wrong[:5]))
        ncast = sum(want.values())
        print("  %d nodes, %d edges (%d through casts) as in the json; computes %s" % (
            len(by_id), len(got), ncast, sorted({n["compute"] for n in nodes})))
    elif mode == "search":
        def name(n):
            if n["name"]:
                return n["name"]
            g = n.get("grad_of")
            return nodes[g]["name"] or "" if g is not None else ""
        want = sum(repeat in name(n) for n in nodes)
        m = re.match(r"(\d+) nodes match, in (\d+) boxes", dom.found_text)
        hits = [a for a in items if "hit" in a["class"].split()]
        if not m or int(m.group(1)) != want or int(m.group(2)) != len(hits) or not hits:
            bad("search %r: the page says %r with %d boxes outlined; %d nodes match in the json"
                % (repeat, dom.found_text, len(hits), want))
        print("  %s (the json: %d nodes)" % (dom.found_text, want))
    else:
        bad("unknown mode %s" % mode)


main()
for p in problems[:20]:
    print("FAIL: " + p)
sys.exit(1 if problems else 0)
