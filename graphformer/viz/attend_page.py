"""The offline HTML page of one input's attention: an overview of every layer (rows) by head
(columns) of each sub-layer, BertViz's "model view", and a head view of one chosen map, drawn big
with its tokens, that reads out the weight under the pointer. Clicking an overview map opens it in
the head view.

The page is self-contained, like `graphformer.viz.player`'s: the weights are inlined, the script
draws them on canvases, and nothing is loaded from the network. Each sub-layer's maps travel as
one base64 string of little-endian float32, (layers, heads, queries, keys) in C order, NaN where
there is no edge: exact, and a third the size of the same numbers in JSON. A long input's maps
travel in blocks of tokens (`graphformer.viz.binned`), so a page of 2,000 tokens holds 64 x 64
cells a map, not 2,000 x 2,000.

A universal model's layers axis is its ACT steps: the page says "step" where it says "layer",
each query's label carries the steps it pondered, and a query's row is grey at the steps after it
halted (``ponder``: those steps per query; empty for a Transformer).
"""

from __future__ import annotations

import base64
import hashlib
import html

import numpy as np

from graphformer.errors import UserError
from graphformer.viz.on_demand import shown
from graphformer.viz.player import _script_literal

# The most weights a page holds (layers x heads x queries x keys over its sub-layers). Each is
# drawn a pixel of a canvas (4 bytes of the browser's memory for the overview and again for the
# head view) and inlined as 5.3 characters of base64: at this limit the page is about 21 MB and
# its canvases about 32 MB, which a browser opens in seconds; beyond it pages grow slow to open
# and to redraw. A picture (.png) has no such limit, and --sublayer, --layer, --head cut a page.
MAX_PAGE_CELLS = 4_000_000


def page_data(attended, layer: int | None = None, head: int | None = None, top: int | None = None) -> dict:
    """What the page's script reads: the input, its title, and each sub-layer's maps (`shown`:
    in blocks of tokens where long, labelled by token range) and labels."""
    blocks = []
    for sublayer in attended.edges:
        view, layers, heads = shown(attended, sublayer, layer, head, top)
        key_axis, query_axis = attended.axes[sublayer]
        raw = np.ascontiguousarray(view.weights, dtype="<f4").tobytes()
        blocks.append(
            {
                "name": sublayer,
                "layers": layers,
                "heads": heads,
                "queries": view.queries,
                "keys": view.keys,
                "keyAxis": key_axis + (f" ({view.note})" if view.binned else ""),
                "queryAxis": query_axis,
                "weights": base64.b64encode(raw).decode("ascii"),
                # a block's row mixes queries that halted at different steps: no row is greyed
                "ponder": [] if view.binned else attended.ponder.get(sublayer, []),
            }
        )
    return {"line": attended.line, "title": attended.title, "unit": attended.unit, "sublayers": blocks}


def check_page_size(data: dict, line: str) -> None:
    """Refuse a page (`page_data`) of more than `MAX_PAGE_CELLS` weights, saying how to make it smaller."""
    cells = sum(len(b["layers"]) * len(b["heads"]) * len(b["queries"]) * len(b["keys"]) for b in data["sublayers"])
    if cells > MAX_PAGE_CELLS:
        raise UserError(
            f"the page for {line[:40]!r} would hold {cells:,} weights, more than the {MAX_PAGE_CELLS:,} "
            "a browser opens and redraws smoothly; choose fewer with --sublayer, --layer or --head, or write a .png"
        )


def attend_page(attended, layer: int | None = None, head: int | None = None, top: int | None = None) -> str:
    """The page of ``attended`` (an `graphformer.viz.attend.Attended`), every sub-layer it holds,
    of ``layer`` and ``head`` where given, each query's ``top`` strongest keys alone where given."""
    data = page_data(attended, layer, head, top)
    check_page_size(data, attended.line)
    uid = "gf" + hashlib.sha1(repr(data).encode("utf-8")).hexdigest()[:10]  # ids stay unique in a notebook
    title = html.escape(f"{attended.line} - {attended.title}")
    script = SCRIPT.replace("UID", uid).replace("DATA", _script_literal(data))  # the data last: it is not read
    return PAGE.format(uid=uid, title=title, script=script)


PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
  #{uid} {{ font-family: sans-serif; }}
  #{uid} table {{ border-collapse: collapse; }}
  #{uid} td, #{uid} th {{ padding: 2px; font-size: 0.8em; font-weight: normal; }}
  #{uid} .thumb {{ width: 96px; height: 96px; image-rendering: pixelated; cursor: pointer; border: 1px solid #ccc; }}
  #{uid} .thumb.chosen {{ border: 2px solid #d33; }}
  #{uid} .head canvas {{ image-rendering: pixelated; }}
</style>
</head>
<body>
<div id="{uid}">
<h2 class="line"></h2>
<p class="title"></p>
<h3>Head view</h3>
<div class="head">
  <label>sub-layer <select class="sublayer"></select></label>
  <label><span class="unit">layer</span> <select class="layer"></select></label>
  <label>head <select class="headnum"></select></label>
  <span class="readout"></span>
  <div><canvas class="big"></canvas></div>
</div>
<h3>Model view: every <span class="unit">layer</span> (rows) and head (columns)</h3>
<div class="overview"></div>
</div>
<script>
{script}
</script>
</body>
</html>
"""

# The page's script: decode each sub-layer's weights, draw the overview, and draw and read out the
# chosen map. Colours: viridis, sampled at five stops and interpolated; no edge stays white.
SCRIPT = """(function () {
  const data = DATA;
  const root = document.getElementById("UID");
  const $ = s => root.querySelector(s);
  const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], halted = [200, 200, 200];
  const unit = data.unit;
  function colour(w) {
    if (Number.isNaN(w)) return [255, 255, 255];
    const x = Math.min(Math.max(w, 0), 1) * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2), f = x - i;
    return stops[i].map((c, k) => Math.round(c + f * (stops[i + 1][k] - c)));
  }
  data.sublayers.forEach(s => {
    const bytes = Uint8Array.from(atob(s.weights), c => c.charCodeAt(0));
    s.values = new Float32Array(bytes.buffer);
    s.size = s.queries.length * s.keys.length;
  });
  function map(s, l, h) {
    const at = (l * s.heads.length + h) * s.size;
    return s.values.subarray(at, at + s.size);
  }
  // A universal model's query that pondered fewer steps than this map's is grey: it had halted.
  const stopped = (s, l, q) => s.ponder.length > 0 && s.ponder[q] < s.layers[l];
  function paint(canvas, s, weights, l) {
    canvas.width = s.keys.length; canvas.height = s.queries.length;
    const context = canvas.getContext("2d"), image = context.createImageData(canvas.width, canvas.height);
    weights.forEach((w, i) => {
      const rgb = stopped(s, l, Math.floor(i / s.keys.length)) ? halted : colour(w);
      image.data.set([...rgb, 255], 4 * i);
    });
    context.putImageData(image, 0, 0);
  }
  const chosen = {s: 0, l: 0, h: 0};
  function showHead() {
    const s = data.sublayers[chosen.s], weights = map(s, chosen.l, chosen.h), cell = Math.max(2, Math.min(24, Math.floor(640 / Math.max(s.keys.length, s.queries.length))));
    const small = document.createElement("canvas"); paint(small, s, weights, chosen.l);
    const big = $(".big"), labels = cell >= 8 ? 90 : 0;
    big.width = labels + cell * s.keys.length; big.height = labels + cell * s.queries.length;
    const context = big.getContext("2d");
    context.imageSmoothingEnabled = false;
    context.drawImage(small, labels, labels, cell * s.keys.length, cell * s.queries.length);
    if (labels) {
      context.font = Math.min(12, cell) + "px sans-serif"; context.fillStyle = "#000"; context.textAlign = "right";
      s.queries.forEach((t, i) => context.fillText(s.ponder.length ? t + " (" + s.ponder[i] + ")" : t, labels - 4, labels + cell * (i + 0.75)));
      s.keys.forEach((t, j) => { context.save(); context.translate(labels + cell * (j + 0.75), labels - 4); context.rotate(-Math.PI / 2); context.textAlign = "left"; context.fillText(t, 0, 0); context.restore(); });
    }
    big.onmousemove = e => {
      const j = Math.floor((e.offsetX - labels) / cell), i = Math.floor((e.offsetY - labels) / cell);
      if (i < 0 || j < 0 || i >= s.queries.length || j >= s.keys.length) return;
      const w = weights[i * s.keys.length + j];
      const none = stopped(s, chosen.l, i) ? "halted" : "no edge";
      $(".readout").textContent = s.queries[i] + " \\u2192 " + s.keys[j] + ": " + (Number.isNaN(w) ? none : w.toFixed(3));
    };
    root.querySelectorAll(".thumb").forEach(t => t.classList.toggle("chosen", t.dataset.at === [chosen.s, chosen.l, chosen.h].join(",")));
    $(".readout").textContent = s.name + " " + unit + " " + s.layers[chosen.l] + ", head " + s.heads[chosen.h] + " (" + s.queryAxis + " by " + s.keyAxis + ")";
  }
  function options(select, labels, value) {
    select.innerHTML = ""; labels.forEach((t, i) => select.add(new Option(t, i)));
    select.value = value;
  }
  function choose(s, l, h) {
    Object.assign(chosen, {s, l, h});
    const block = data.sublayers[s];
    options($(".sublayer"), data.sublayers.map(b => b.name), s);
    options($(".layer"), block.layers.map(String), l);
    options($(".headnum"), block.heads.map(String), h);
    showHead();
  }
  $(".sublayer").onchange = e => choose(Number(e.target.value), 0, 0);
  $(".layer").onchange = e => choose(chosen.s, Number(e.target.value), chosen.h);
  $(".headnum").onchange = e => choose(chosen.s, chosen.l, Number(e.target.value));
  $(".line").textContent = data.line; $(".title").textContent = data.title;
  root.querySelectorAll(".unit").forEach(e => { e.textContent = unit; });
  data.sublayers.forEach((s, si) => {
    const heading = document.createElement("h4"); heading.textContent = s.name + " attention";
    const table = document.createElement("table"), top = table.insertRow();
    top.insertCell().textContent = "";
    s.heads.forEach(h => { top.insertCell().textContent = "head " + h; });
    s.layers.forEach((layer, l) => {
      const row = table.insertRow(); row.insertCell().textContent = unit + " " + layer;
      s.heads.forEach((_, h) => {
        const canvas = document.createElement("canvas"); canvas.className = "thumb"; canvas.dataset.at = [si, l, h].join(",");
        canvas.title = s.name + " " + unit + " " + layer + ", head " + s.heads[h];
        paint(canvas, s, map(s, l, h), l); canvas.onclick = () => choose(si, l, h);
        row.insertCell().appendChild(canvas);
      });
    });
    $(".overview").append(heading, table);
  });
  choose(0, 0, 0);
})();"""
