"""Pictures of attention with matplotlib: heatmaps, grids of heads laid out to fit a screen,
bipartite drawings (`viz.bipartite` draws one), animations across epochs (as a GIF, or the HTML
player of `viz.player`), and the Universal Transformer's ponder steps.

Every function here builds its own `matplotlib.figure.Figure` and draws it with the Agg canvas,
so importing this module never touches pyplot's global backend: a notebook keeps its inline
figures, a script without a screen still writes files.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from graphformer.choices import ANIMATION_FORMATS, IMAGE_FORMATS, SCALES, VIEWS
from graphformer.errors import UserError
from graphformer.files import write_atomic, write_text_atomic
from graphformer.graphs import patterns
from graphformer.viz import bipartite, layered
from graphformer.viz.player import player_page
from graphformer.viz.type_colours import TypeColours, legend_width, type_colours, type_legend, type_matrix
from graphformer.viz.type_labels import EdgeTypeMap


@dataclass
class AttentionPicture:
    """One or more attention maps of one sample, with everything needed to draw their axes.

    Attributes:
        maps: (panels, queries, keys) weights, NaN where there is no edge; one panel per head.
        keys: the token (a string) shown for each key (column).
        queries: the token shown for each query (row).
        panel_titles: a title per panel, e.g. ``head 0``.
        title: the title of the whole picture, e.g. sub-layer, layer and epoch.
        key_axis: what the keys are, e.g. ``keys: source tokens``.
        query_axis: what the queries are, e.g. ``queries: decoder inputs <s>, y1, ...``.
        layout: how the graph view lays nodes out: ``bipartite`` (keys above, queries below), or
            ``tree`` for self-attention over each sample's own graph (`graphformer.viz.layered`).
        types: the type of each edge (`graphformer.viz.type_labels.EdgeTypeMap`), or None: the
            graph view colours edges by it, and the heatmap view adds a panel of the types.
    """

    maps: np.ndarray
    keys: list
    queries: list
    panel_titles: list
    title: str = ""
    key_axis: str = "keys"
    query_axis: str = "queries"
    layout: str = "bipartite"
    types: EdgeTypeMap | None = None


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
    key_tokens,
    query_tokens,
    title: str = "",
    vmax: float = 1.0,
    key_axis: str = "keys",
    query_axis: str = "queries",
):
    """One (queries, keys) map on ``ax``, each column and row ticked with its token; NaN (no edge)
    cells stay blank. Returns the image."""
    image = ax.imshow(np.ma.masked_invalid(np.asarray(weights, dtype=float)), cmap="viridis", vmin=0, vmax=vmax)
    ax.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=8)
    ax.set_yticks(range(len(query_tokens)), query_tokens, fontsize=8)
    ax.set_xlabel(key_axis, fontsize=8)
    ax.set_ylabel(query_axis, fontsize=8)
    ax.set_title(title, fontsize=9)
    return image


# ---- whole pictures -------------------------------------------------------------------------
# A picture is laid out in inches, so its tokens' text keeps its size; its panels take the widest
# token spacing, and the grid of them the rows, that keep it within MAX_WIDTH by MAX_HEIGHT,
# which a screen shows without shrinking the text.
MAX_WIDTH = 16.5  # inches: about 2,000 px at save_figure's dpi
MAX_HEIGHT = 11.0
ASPECT = 1.5  # the width over height a grid of panels comes closest to
INCH_PER_TOKEN = 0.32  # between the rows, columns or positions of a panel
MIN_INCH_PER_TOKEN = 0.16  # still room for a token's text: a picture too big at this spacing stays bigger
COLORBAR_WIDTH = 0.9
LEGEND_WIDTH = 1.2
LEGEND_HEIGHT = 0.6


def panel_sizes(picture: AttentionPicture, kinds: list[str], scale: str, spacing: float) -> list[tuple[float, float]]:
    """The (width, height) in inches of each kind of panel of one head, tokens ``spacing`` apart."""
    own = scale == "per-head"  # then each panel carries its own colour bar or legend
    graph_w, graph_h = bipartite.size(picture.keys, picture.queries, picture.key_axis, picture.query_axis, spacing)
    return [
        (spacing * len(picture.keys) + 2.0 + own * COLORBAR_WIDTH, spacing * len(picture.queries) + 1.8)
        if kind == "heatmap"
        else (graph_w + own * LEGEND_WIDTH, graph_h)
        for kind in kinds
    ]


def grid_shape(panels: int, width: float, height: float, room: float = MAX_WIDTH) -> tuple[int, int]:
    """(rows, columns) for ``panels`` panels of ``width`` by ``height`` inches: of the grids
    within ``room`` inches (one column, if a panel alone is wider), the one closest to `ASPECT`."""
    fitting = [c for c in range(1, panels + 1) if c * width <= room] or [1]

    def misfit(cols):
        return abs(math.log(cols * width / (math.ceil(panels / cols) * height) / ASPECT))

    rows = math.ceil(panels / min(fitting, key=misfit))
    return rows, math.ceil(panels / rows)  # as few columns as the rows need: no empty row end


def layout(
    picture: AttentionPicture, kinds: list[str], scale: str, panels: int, colours: TypeColours | None = None
) -> tuple[list, int, int, tuple]:
    """The panel sizes of one head (`panel_sizes`), the (rows, columns) of ``panels`` heads (and
    the panel of types) and the figure's (width, height), at the widest token spacing from
    `INCH_PER_TOKEN` down to `MIN_INCH_PER_TOKEN` whose figure fits `MAX_WIDTH` by `MAX_HEIGHT`
    (the narrowest, if none does); a legend of edge ``colours`` stands right of them all."""
    shared = scale == "shared"  # then one colour bar and one legend serve the whole figure
    extra_width = (shared and "heatmap" in kinds) * COLORBAR_WIDTH + (colours is not None and legend_width(colours))
    extra_height = 0.6 + (shared and "graph" in kinds) * LEGEND_HEIGHT  # and the title
    for spacing in np.linspace(INCH_PER_TOKEN, MIN_INCH_PER_TOKEN, 9):
        sizes = panel_sizes(picture, kinds, scale, spacing)
        width, height = sum(w for w, _ in sizes), max(h for _, h in sizes)
        rows, cols = grid_shape(panels, width, height, MAX_WIDTH - extra_width)
        figure_size = (cols * width + extra_width, rows * height + extra_height)
        if figure_size[0] <= MAX_WIDTH and figure_size[1] <= MAX_HEIGHT:
            break
    return sizes, rows, cols, figure_size


def draw(picture: AttentionPicture, view: str = "heatmap", scale: str = "shared") -> Figure:
    """A figure of every panel of ``picture`` in a grid: heatmaps (``view='heatmap'``), bipartite
    graphs (``'graph'``), or per head a heatmap and its graph side by side (``'both'``).

    ``scale='shared'`` gives all panels one colour scale, 0 to 1 (weights are probabilities, so
    heads and epochs compare directly); ``'per-head'`` stretches each panel from 0 to its own
    largest weight, with its own colour bar or legend. With edge types, graphs colour each edge by
    its type, the heatmap view adds a panel of the types, and a legend names them. In a notebook,
    show it with ``IPython.display.Image(png_bytes(figure))``.
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; choose one of {VIEWS}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose one of {SCALES}")
    kinds = ["heatmap", "graph"] if view == "both" else [view]
    shared = scale == "shared"
    loops = picture.layout != "tree" or view == "heatmap"  # a tree's node shows its weight on itself
    colours = None if picture.types is None else type_colours(picture.types, loops)
    panels = len(picture.maps) + (colours is not None and view == "heatmap")  # the last: the types
    sizes, rows, cols, figure_size = layout(picture, kinds, scale, panels, colours)
    figure = new_figure(*figure_size)
    axes = figure.subplots(rows, cols * len(kinds), squeeze=False, width_ratios=[w for w, _ in sizes] * cols)
    heatmap_axes, graphs = [], []
    edge_rgb = None if colours is None else colours.of_edges(picture.types.ids)
    for p, weights in enumerate(picture.maps):
        vmax = 1.0 if shared else max(float(np.nanmax(weights)), 1e-6)
        for k, kind in enumerate(kinds):
            ax = axes[p // cols, (p % cols) * len(kinds) + k]
            args = (ax, weights, picture.keys, picture.queries, picture.panel_titles[p], vmax)
            args += (picture.key_axis, picture.query_axis)
            if kind == "graph":
                graphs += _graph_panel(args, picture.layout, edge_rgb, None if shared else vmax)
                continue
            image = heatmap(*args)
            ax.set_anchor("N")  # its top level with the graph's beside it, and so their titles
            heatmap_axes.append(ax)
            if p % cols:
                ax.set_ylabel("")  # the first panel of a row names the queries
            if not shared:
                figure.colorbar(image, ax=ax, fraction=0.046)
    if panels > len(picture.maps):
        ax = axes[(panels - 1) // cols, (panels - 1) % cols]
        type_matrix(ax, picture.types, colours, picture.keys, picture.queries, picture.key_axis, picture.query_axis)
        ax.set_anchor("N")
    for ax in axes.flat[panels * len(kinds) :]:
        ax.remove()
    if shared and heatmap_axes:
        figure.colorbar(image, ax=heatmap_axes, fraction=0.03, label="weight")
    if shared and "graph" in kinds:
        neutral = bipartite.EDGE_RGB if colours is None else bipartite.NEUTRAL_RGB
        bipartite.width_legend(figure, 1.0, neutral, loc="outside lower center", ncols=len(bipartite.LEGEND_SHARES))
    if colours is not None:
        type_legend(figure, colours, loc="outside right upper")
    figure.suptitle(picture.title, fontsize=10)
    _fit_graphs(figure, graphs)
    return figure


def _graph_panel(args: tuple, layout_name: str, edge_rgb, own_vmax: float | None) -> list:
    """One graph panel from `draw`'s panel ``args``, laid out as ``layout_name`` says, its edges in
    ``edge_rgb`` (or the one edge colour); with ``own_vmax``, a legend of its own widths. Returns
    the (axes, texts) of a bipartite panel for `_fit_graphs`, [] for a tree (it fits itself)."""
    ax = args[0]
    colour = bipartite.EDGE_RGB if edge_rgb is None else bipartite.NEUTRAL_RGB
    if own_vmax is not None:
        bipartite.width_legend(ax, own_vmax, colour, loc="upper left", bbox_to_anchor=(1, 1))
    if layout_name == "tree":
        layered.layered(*args, colours=edge_rgb)
        return []
    return [(ax, bipartite.bipartite(*args, colours=edge_rgb))]


def _fit_graphs(figure: Figure, graphs: list) -> None:
    """Lay ``figure`` out, then fit each (axes, texts) bipartite panel of ``graphs`` to its texts."""
    if graphs:
        figure.draw_without_rendering()
        renderer = figure.canvas.get_renderer()
        for ax, texts in graphs:
            bipartite.fit(ax, texts, renderer)


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


# ---- the Universal Transformer and patterns --------------------------------------------------
def ponder_map(steps, tokens, path: str | Path, title: str = "ponder steps per token") -> None:
    """Universal Transformer: how many steps each token of a sentence took (``steps`` and the
    ``tokens`` to tick the bars with, one per token; a tree encoder's span nodes have steps too:
    name them, or leave them out)."""
    if len(steps) != len(tokens):
        # "labels": the bars' tick labels
        raise ValueError(f"{len(steps)} step counts but {len(tokens)} labels: give one token per step count")
    figure = new_figure(0.35 * len(tokens) + 2, 2.2)
    ax = figure.subplots()
    ax.bar(range(len(tokens)), steps, color="tab:orange")
    ax.set_xticks(range(len(tokens)), tokens, fontsize=8)
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
