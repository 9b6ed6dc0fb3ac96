"""Pictures of attention with matplotlib: heatmaps, head grids, bipartite drawings, animations
across epochs, and the Universal Transformer's ponder steps.

Every function here builds its own `matplotlib.figure.Figure` and draws it with the Agg canvas,
so importing this module never touches pyplot's global backend: a notebook keeps its inline
figures, a script without a screen still writes files.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from graphformer.errors import UserError
from graphformer.files import write_atomic, write_text_atomic
from graphformer.graphs import patterns

VIEWS = ("heatmap", "graph", "both")  # what one panel of a picture shows
SCALES = ("shared", "per-head")  # one colour scale for all panels, or one each
ANIMATION_FORMATS = (".gif", ".html")
# Still pictures matplotlib writes with no outside program (.pgf, say, needs LaTeX).
IMAGE_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg")
INCH_PER_LABEL = 0.32


@dataclass
class AttentionPicture:
    """One or more attention maps of one sample, with everything needed to label them.

    Attributes:
        maps: (panels, queries, keys) weights, NaN where there is no edge; one panel per head.
        keys: a label per key (column).
        queries: a label per query (row).
        panel_titles: a title per panel, e.g. ``head 0``.
        title: the title of the whole picture, e.g. relation, layer and epoch.
        key_axis: what the keys are, e.g. ``keys: source tokens``.
        query_axis: what the queries are, e.g. ``queries: decoder inputs <s>, y1, ...``.
    """

    maps: np.ndarray
    keys: list
    queries: list
    panel_titles: list
    title: str = ""
    key_axis: str = "keys"
    query_axis: str = "queries"


def new_figure(width: float, height: float) -> Figure:
    """A figure with its own Agg canvas: no pyplot, no global backend."""
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def png_bytes(figure: Figure, dpi: int = 110) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


# ---- one panel ------------------------------------------------------------------------------
def heatmap(
    ax,
    weights,
    key_labels,
    query_labels,
    title: str = "",
    vmax: float = 1.0,
    key_axis: str = "keys",
    query_axis: str = "queries",
):
    """One (queries, keys) map on ``ax``; NaN (no edge) cells stay blank. Returns the image."""
    image = ax.imshow(np.ma.masked_invalid(np.asarray(weights, dtype=float)), cmap="viridis", vmin=0, vmax=vmax)
    ax.set_xticks(range(len(key_labels)), key_labels, rotation=90, fontsize=8)
    ax.set_yticks(range(len(query_labels)), query_labels, fontsize=8)
    ax.set_xlabel(key_axis, fontsize=8)
    ax.set_ylabel(query_axis, fontsize=8)
    ax.set_title(title, fontsize=9)
    return image


def bipartite(
    ax,
    weights,
    key_labels,
    query_labels,
    title: str = "",
    vmax: float = 1.0,
    key_axis: str = "keys",
    query_axis: str = "queries",
    threshold: float = 0.02,
):
    """One map as a bipartite graph on ``ax``: keys on top, queries below, an edge per weight
    above ``threshold`` with width and opacity by weight. Labels sit outside the two rows, so
    edges never cover them."""
    w = np.asarray(weights, dtype=float)
    n_keys, n_queries = len(key_labels), len(query_labels)
    width = max(n_keys, n_queries)
    key_x = np.arange(n_keys) + (width - n_keys) / 2
    query_x = np.arange(n_queries) + (width - n_queries) / 2
    rows, cols = np.nonzero(np.nan_to_num(w, nan=0.0) > threshold * vmax)
    strength = np.clip(w[rows, cols] / vmax, 0, 1)
    segments = [[(key_x[i], 1.0), (query_x[j], 0.0)] for j, i in zip(rows, cols)]
    colours = [(0.12, 0.3, 0.6, 0.15 + 0.85 * s) for s in strength]
    ax.add_collection(LineCollection(segments, linewidths=0.3 + 3.5 * strength, colors=colours, zorder=1))
    ax.scatter(key_x, np.ones(n_keys), s=30, color="tab:blue", zorder=2)
    ax.scatter(query_x, np.zeros(n_queries), s=30, color="tab:orange", zorder=2)
    for x, label in zip(key_x, key_labels):
        ax.text(x, 1.1, label, rotation=90, ha="center", va="bottom", fontsize=8)
    for x, label in zip(query_x, query_labels):
        ax.text(x, -0.1, label, rotation=90, ha="center", va="top", fontsize=8)
    ax.text(-0.8, 1.0, key_axis.replace(": ", ":\n", 1), ha="right", va="center", fontsize=8, color="tab:blue")
    ax.text(-0.8, 0.0, query_axis.replace(": ", ":\n", 1), ha="right", va="center", fontsize=8, color="tab:orange")
    ax.set_xlim(-0.8 - 0.12 * max(len(key_axis), len(query_axis)) / 2, width - 0.4)
    ax.set_ylim(-0.6, 1.6)
    ax.set_title(title, fontsize=9)
    ax.axis("off")


# ---- whole pictures -------------------------------------------------------------------------
def draw(picture: AttentionPicture, view: str = "heatmap", scale: str = "shared") -> Figure:
    """A figure of every panel of ``picture``: heatmaps in a grid (``view='heatmap'``), bipartite
    graphs (``'graph'``), or a heatmap and its graph side by side per panel (``'both'``).

    ``scale='shared'`` gives all panels one colour scale, 0 to 1 (weights are probabilities, so
    heads and epochs compare directly); ``'per-head'`` stretches each panel from 0 to its own
    largest weight, with its own colour bar. In a notebook, show it with
    ``IPython.display.Image(png_bytes(figure))``.
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; choose one of {VIEWS}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose one of {SCALES}")
    kinds = ["heatmap", "graph"] if view == "both" else [view]
    n_panels = len(picture.maps)
    cols = len(kinds) if view == "both" else min(n_panels, 4)
    rows = n_panels if view == "both" else math.ceil(n_panels / cols)
    n_keys, n_queries = len(picture.keys), len(picture.queries)
    panel_size = {
        "heatmap": (INCH_PER_LABEL * n_keys + 2.0, INCH_PER_LABEL * n_queries + 1.8),
        "graph": (0.3 * max(n_keys, n_queries) + 2.6, 3.6),
    }
    width = sum(panel_size[k][0] for k in kinds) if view == "both" else cols * panel_size[view][0]
    height = rows * max(panel_size[k][1] for k in kinds) + 0.6
    figure = new_figure(width, height)
    axes = figure.subplots(
        rows, cols, squeeze=False, width_ratios=[panel_size[k][0] for k in kinds] if view == "both" else None
    )
    heatmap_axes = []
    for p, weights in enumerate(picture.maps):
        vmax = 1.0 if scale == "shared" else max(float(np.nanmax(weights)), 1e-6)
        for k, kind in enumerate(kinds):
            ax = axes[p, k] if view == "both" else axes[p // cols, p % cols]
            args = (
                ax,
                weights,
                picture.keys,
                picture.queries,
                picture.panel_titles[p],
                vmax,
                picture.key_axis,
                picture.query_axis,
            )
            if kind == "graph":
                bipartite(*args)
                continue
            image = heatmap(*args)
            heatmap_axes.append(ax)
            if view != "both" and p % cols:
                ax.set_ylabel("")  # the first panel of a row names the queries
            if scale == "per-head":
                figure.colorbar(image, ax=ax, fraction=0.046)
    for ax in axes.flat[n_panels * len(kinds) :]:
        ax.set_visible(False)
    if scale == "shared" and "heatmap" in kinds:
        figure.colorbar(image, ax=heatmap_axes, fraction=0.03, label="weight")
    figure.suptitle(picture.title, fontsize=10)
    return figure


def _output_path(path: str | Path, formats: tuple[str, ...], what: str) -> Path:
    """``path`` as a Path, if its extension is one of ``formats``; else a one-line UserError."""
    path = Path(path)
    if path.suffix.lower() not in formats:
        found = f"{path.suffix} is not a format written here" if path.suffix else "the name has no extension"
        raise UserError(f"cannot write {what} to {path}: {found}; use {', '.join(formats)}")
    return path


def check_image_path(path: str | Path) -> Path:
    """The output path of a picture, if its format is one matplotlib writes by itself."""
    return _output_path(path, IMAGE_FORMATS, "a picture")


def save(picture: AttentionPicture, path: str | Path, view: str = "heatmap", scale: str = "shared") -> None:
    """Draw ``picture`` into an image file (one of `IMAGE_FORMATS`)."""
    save_figure(draw(picture, view, scale), path)


def save_figure(figure: Figure, path: str | Path, dpi: int = 120) -> None:
    """Write ``figure`` to ``path`` in the format its extension names, atomically."""
    path = check_image_path(path)
    write_atomic(path, lambda f: figure.savefig(f, format=path.suffix.lower()[1:], dpi=dpi))


def check_animation_path(path: str | Path) -> Path:
    """The output path of an animation, if its extension is one we write."""
    return _output_path(path, ANIMATION_FORMATS, "an animation")


def animate(
    pictures: list[AttentionPicture],
    path: str | Path,
    view: str = "heatmap",
    scale: str = "shared",
    seconds_per_frame: float = 0.8,
) -> int:
    """One frame per picture: an animated GIF for ``.gif``, a self-contained HTML player (frames
    inlined as PNG, no network needed) for ``.html``. Returns the number of frames."""
    if not pictures:
        raise ValueError("no pictures to animate: give at least one")
    path = check_animation_path(path)
    frames = draw_frames(pictures, view, scale)
    write_animation(frames, [p.title for p in pictures], path, seconds_per_frame)
    return len(frames)


def draw_frames(
    pictures: list[AttentionPicture],
    view: str = "heatmap",
    scale: str = "shared",
    after_frame: Callable[[], object] | None = None,
) -> list[bytes]:
    """Each picture drawn as PNG bytes. ``after_frame()``, if given, is called as each frame is
    done (a progress bar's step, or a check for a pending interrupt)."""
    frames = []
    for picture in pictures:
        frames.append(png_bytes(draw(picture, view, scale)))
        if after_frame is not None:
            after_frame()
    return frames


def write_animation(frames: list[bytes], captions: list[str], path: str | Path, seconds_per_frame: float = 0.8) -> None:
    """Write PNG ``frames`` as a GIF or an HTML player (by the extension of ``path``), atomically."""
    path = check_animation_path(path)
    if path.suffix.lower() == ".gif":
        _write_gif(frames, path, seconds_per_frame)
    else:
        title = captions[0].split(", epoch")[0] or "attention"
        write_text_atomic(path, player_page(frames, captions, title, seconds_per_frame))


def _write_gif(frames: list[bytes], path: Path, seconds_per_frame: float) -> None:
    from PIL import Image

    images = [Image.open(io.BytesIO(frame)).convert("RGB") for frame in frames]
    write_atomic(
        path,
        lambda f: images[0].save(
            f, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 * seconds_per_frame), loop=0
        ),
    )


def _script_literal(value) -> str:
    """``value`` as a JavaScript literal for a ``<script>`` element: JSON with ``</`` written ``<\\/``,
    so that no string in it (a caption quoting a label from the data) can end the element."""
    return json.dumps(value).replace("</", "<\\/")


def player_page(frames: list[bytes], captions: list[str], title: str, seconds_per_frame: float = 0.8) -> str:
    """A small HTML page that steps through PNG ``frames``: play/pause, previous, next and a
    slider. Everything is inline, so it works offline and as a notebook output."""
    uid = "gf" + hashlib.sha1(b"".join(frames)).hexdigest()[:10]  # ids stay unique in a notebook
    sources = [f"data:image/png;base64,{base64.b64encode(frame).decode('ascii')}" for frame in frames]
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>
  #{uid} {{ font-family: sans-serif; }}
  #{uid} img {{ max-width: 100%; display: block; }}
  #{uid} button {{ font-size: 1em; min-width: 3em; }}
</style>
</head>
<body>
<div id="{uid}">
<img alt="attention map" src="{sources[0]}">
<div>
  <button data-step="-1" title="previous frame">&#9664;</button>
  <button data-play title="play or pause">play</button>
  <button data-step="1" title="next frame">&#9654;</button>
  <input type="range" min="0" max="{len(frames) - 1}" value="0" aria-label="frame">
  <span class="caption">{html.escape(captions[0])}</span>
</div>
</div>
<script>
(function () {{
  const frames = {_script_literal(sources)};
  const captions = {_script_literal(captions)};
  const root = document.getElementById("{uid}");
  const img = root.querySelector("img"), slider = root.querySelector("input"),
        caption = root.querySelector(".caption"), play = root.querySelector("[data-play]");
  let current = 0, timer = null;
  function show(i) {{
    current = (i + frames.length) % frames.length;
    img.src = frames[current]; slider.value = current; caption.textContent = captions[current];
  }}
  root.querySelectorAll("[data-step]").forEach(b => b.onclick = () => show(current + Number(b.dataset.step)));
  slider.oninput = () => show(Number(slider.value));
  play.onclick = () => {{
    if (timer) {{ clearInterval(timer); timer = null; play.textContent = "play"; return; }}
    timer = setInterval(() => show(current + 1), {int(1000 * seconds_per_frame)}); play.textContent = "pause";
  }};
}})();
</script>
</body>
</html>
"""


# ---- the Universal Transformer and patterns --------------------------------------------------
def ponder_map(steps, labels, path: str | Path, title: str = "ponder steps per token") -> None:
    """Universal Transformer: how many steps each token of a sentence took (``steps`` and
    ``labels`` one per token; a tree encoder's span nodes have steps too: label them, or leave them out)."""
    if len(steps) != len(labels):
        raise ValueError(f"{len(steps)} step counts but {len(labels)} labels: give one label per token")
    figure = new_figure(0.35 * len(labels) + 2, 2.2)
    ax = figure.subplots()
    ax.bar(range(len(labels)), steps, color="tab:orange")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("steps")
    ax.set_title(title, fontsize=9)
    save_figure(figure, path)


def ponder_distribution(metrics: list[dict], path: str | Path) -> None:
    """Universal Transformer: the share of tokens entering each ACT step, epoch by epoch
    (from ``metrics.jsonl`` records), for source and target tokens."""
    sides = [side for side in ("src", "tgt") if f"valid_{side}_step_fraction" in metrics[0]]
    figure = new_figure(5 * len(sides), 3.2)
    axes = figure.subplots(1, len(sides), squeeze=False)
    for ax, side in zip(axes[0], sides):
        grid = np.array([m[f"valid_{side}_step_fraction"] for m in metrics])
        image = ax.imshow(
            grid.T,
            aspect="auto",
            origin="lower",
            cmap="magma",
            vmin=0,
            vmax=1,
            extent=(0.5, len(metrics) + 0.5, 0.5, grid.shape[1] + 0.5),
        )
        ax.set_xlabel("epoch")
        ax.set_ylabel("ACT step")
        ax.set_title(f"{side}: share of tokens entering each step", fontsize=9)
        figure.colorbar(image, ax=ax, fraction=0.046)
    save_figure(figure, path)


def pattern_matrices(specs: list[str], n: int = 16, path: str | Path | None = None) -> Figure:
    """Each attention pattern spec drawn as its (query, key) matrix for a sequence of n tokens;
    saved to ``path`` when given, and returned as a figure (``display(figure)`` in a notebook)."""

    figure = new_figure(2.1 * len(specs), 2.5)
    axes = figure.subplots(1, len(specs), squeeze=False)
    for ax, spec in zip(axes[0], specs):
        u, v = patterns.parse(spec)(n, n)
        size = max(n, int(u.max()) + 1, int(v.max()) + 1) if len(u) else n  # a tree's span nodes follow the tokens
        matrix = np.zeros((size, size))
        matrix[v.numpy(), u.numpy()] = 1
        ax.imshow(matrix, cmap="Greys", vmin=0, vmax=1)
        spans = f", {size - n} span nodes after the {n} tokens" if size > n else ""
        ax.set_title(f"{spec}\n{len(u)} edges{spans}", fontsize=8)
        ax.set_xlabel("key", fontsize=7)
        ax.set_ylabel("query", fontsize=7)
        ax.set_xticks([])
        ax.set_yticks([])
    if path is not None:
        save_figure(figure, path, dpi=110)
    return figure
