"""Pictures of attention with matplotlib: heatmaps, grids of heads laid out to fit a screen,
bipartite drawings (`viz.bipartite` draws one), animations across epochs (as a GIF, or the HTML
player of `viz.player`), and the Universal Transformer's ponder steps.

`viz.panel_layout` sizes a picture from its tokens and text (`viz.text_sizes`), in inches, so
that its text stays readable however many tokens it has. Every function here builds its own
`matplotlib.figure.Figure` and draws it with the Agg canvas, so importing this module never
touches pyplot's global backend: a notebook keeps its inline figures, a script without a screen
still writes files.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from graphformer.choices import ANIMATION_FORMATS, IMAGE_FORMATS, SCALES, VIEWS
from graphformer.errors import UserError
from graphformer.files import write_atomic, write_text_atomic
from graphformer.graphs import patterns
from graphformer.viz import binned, bipartite, layered, long_tree, text_sizes
from graphformer.viz.panel_layout import layout
from graphformer.viz.picture import AttentionPicture
from graphformer.viz.player import player_page
from graphformer.viz.type_colours import type_colours, type_legend, type_matrix


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
    tick_every: int = 1,
):
    """One (queries, keys) map on ``ax``, each column and row ticked with its token (every
    ``tick_every``-th one: a long map's blocks); NaN (no edge) cells stay blank. Returns the image.

    The cells fill the panel (``aspect="auto"``) rather than keeping square: `layout` sizes the
    panel so that they come out square, and a fixed aspect would let matplotlib's constrained
    layout shrink the panel after it has placed the axis names, which then fall off the figure.
    """
    image = ax.imshow(
        np.ma.masked_invalid(np.asarray(weights, dtype=float)), cmap="viridis", vmin=0, vmax=vmax, aspect="auto"
    )
    keys, queries = range(0, len(key_tokens), tick_every), range(0, len(query_tokens), tick_every)
    ax.set_xticks(keys, [key_tokens[j] for j in keys], rotation=90, fontsize=text_sizes.TOKEN)
    ax.set_yticks(queries, [query_tokens[i] for i in queries], fontsize=text_sizes.TOKEN)
    ax.set_xlabel(key_axis, fontsize=text_sizes.LABEL)
    ax.set_ylabel(query_axis, fontsize=text_sizes.LABEL)
    ax.set_title(title, fontsize=text_sizes.PANEL_TITLE)
    return image


# ---- whole pictures -------------------------------------------------------------------------
def draw(picture: AttentionPicture, view: str = "heatmap", scale: str = "shared") -> Figure:
    """A figure of every panel of ``picture`` in a grid: heatmaps (``view='heatmap'``), bipartite
    graphs (``'graph'``), or per head a heatmap and its graph side by side (``'both'``).

    ``scale='shared'`` gives all panels one colour scale, 0 to 1 (weights are probabilities, so
    heads and epochs compare directly); ``'per-head'`` stretches each panel from 0 to its own
    largest weight, with its own colour bar or legend. With edge types, graphs colour each edge by
    its type, the heatmap view adds a panel of the types, and a legend names them. The figure
    has one title (``picture.title``), each panel a short one of its own. In a notebook, show it
    with ``IPython.display.Image(png_bytes(figure))``.
    """
    _check_view(picture, view, scale)
    kinds = ["heatmap", "graph"] if view == "both" else [view]
    shared = scale == "shared"
    if picture.blocks and view != "heatmap":
        return _draw_long_tree(picture, kinds, shared)
    loops = picture.layout != "tree" or view == "heatmap"  # a tree's node shows its weight on itself
    colours = None if picture.types is None else type_colours(picture.types, loops)
    panels = len(picture.maps) + (colours is not None and view == "heatmap")  # the last: the types
    sizes, rows, cols, figure_size = layout(picture, kinds, scale, panels, colours)
    figure = new_figure(*figure_size)
    axes = figure.subplots(rows, cols * len(kinds), squeeze=False, width_ratios=[w for w, _ in sizes] * cols)
    heatmap_axes, fitters = [], []
    edge_rgb = None if colours is None else colours.of_edges(picture.types.ids)
    for p, weights in enumerate(picture.maps):
        vmax = 1.0 if shared else max(float(np.nanmax(weights)), 1e-6)
        for k, kind in enumerate(kinds):
            ax = axes[p // cols, (p % cols) * len(kinds) + k]
            args = (ax, weights, picture.keys, picture.queries, picture.panel_titles[p], vmax)
            args += (picture.key_axis, picture.query_axis)
            if kind == "graph":
                fitters.append(_graph_panel(args, picture.layout, edge_rgb, None if shared else vmax))
                continue
            image = heatmap(*args, tick_every=binned.TICK_EVERY if picture.blocks else 1)
            heatmap_axes.append(ax)
            if p % cols:
                ax.set_ylabel("")  # the first panel of a row names the queries
            if not shared:
                figure.colorbar(image, ax=ax, fraction=0.046)
    if panels > len(picture.maps):
        ax = axes[(panels - 1) // cols, (panels - 1) % cols]
        type_matrix(ax, picture.types, colours, picture.keys, picture.queries, picture.key_axis, picture.query_axis)
        named = heatmap_axes + [ax]
    else:
        named = heatmap_axes
    for ax in axes.flat[panels * len(kinds) :]:
        ax.remove()
    if shared and heatmap_axes:
        figure.colorbar(image, ax=heatmap_axes, fraction=0.03, label="weight")
    if shared and "graph" in kinds:
        neutral = bipartite.EDGE_RGB if colours is None else bipartite.NEUTRAL_RGB
        bipartite.width_legend(figure, 1.0, neutral, loc="outside lower center", ncols=len(bipartite.LEGEND_SHARES))
    if colours is not None:
        type_legend(figure, colours, loc="outside right upper")
    figure.suptitle(picture.title, fontsize=text_sizes.FIGURE_TITLE)
    _fit_texts(figure, named, fitters)
    return figure


def _check_view(picture: AttentionPicture, view: str, scale: str) -> None:
    """A ValueError for an unknown ``view`` or ``scale``; a one-line UserError for a graph view
    of a long map, drawn in blocks of tokens, but a tree's (`long_tree`): a bipartite graph of a
    node per token would not read."""
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; choose one of {VIEWS}")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; choose one of {SCALES}")
    if view != "heatmap" and picture.blocks and picture.tree is None:
        raise UserError(
            f"the {view} view draws a node per token, too many to read here ({picture.blocks}); "
            "use --view heatmap, which draws them in blocks"
        )


HEATMAP_INCH = 6.0  # a long map's heatmap in blocks beside its tree, cells and ticks
COLORBAR_INCH = 0.9


def _draw_long_tree(picture: AttentionPicture, kinds: list[str], shared: bool) -> Figure:
    """The graph view of a long map on its own tree (``picture.tree``): a row per panel, the tree
    (`long_tree.draw_tree`) and, where ``kinds`` asks for it too, the heatmap in blocks left of it."""
    tree, both = picture.tree, "heatmap" in kinds
    depth_inches = long_tree.panel_height(layered.edge_depths(len(tree.tokens), tree.queries, tree.keys))
    heights = max(depth_inches, HEATMAP_INCH * both)
    width = long_tree.MAX_WIDTH + both * (HEATMAP_INCH + COLORBAR_INCH)
    figure = new_figure(width, len(picture.maps) * heights + 1.2)
    ratios = [HEATMAP_INCH, long_tree.MAX_WIDTH] if both else [1]
    axes = figure.subplots(len(picture.maps), len(kinds), squeeze=False, width_ratios=ratios)
    for p, title in enumerate(picture.panel_titles):
        queries, keys, weights = tree.panel(p)
        vmax = 1.0 if shared else max(float(np.nanmax(weights, initial=0.0)), 1e-6)
        if both:
            image = heatmap(axes[p, 0], picture.maps[p], picture.keys, picture.queries, f"{title}, in blocks", vmax,
                            picture.key_axis, picture.query_axis, tick_every=binned.TICK_EVERY)  # fmt: skip
            figure.colorbar(image, ax=axes[p, 0], fraction=0.05, label="weight (block max)")
        ax = axes[p, -1]
        self_weight = long_tree.self_weights((queries, keys, weights), len(tree.tokens), vmax)
        nodes = long_tree.draw_tree(
            ax, (queries, keys, weights), tree.tokens, self_weight, f"{title}, on its tree", vmax
        )
        figure.colorbar(nodes, ax=ax, fraction=0.02, pad=0.01, label="weight on itself")
        if not shared:
            # below the panel's right end, clear of the tree
            bipartite.width_legend(ax, vmax, loc="upper right", bbox_to_anchor=(1, -0.02), ncols=3)
    if shared:
        bipartite.width_legend(figure, 1.0, loc="outside lower center", ncols=len(bipartite.LEGEND_SHARES))
    title = picture.title if both else picture.title.replace(f"; {picture.blocks}", "")  # the blocks: the heatmap's
    figure.suptitle(title, fontsize=text_sizes.FIGURE_TITLE)
    return figure


def _graph_panel(args: tuple, layout_name: str, edge_rgb, own_vmax: float | None) -> Callable:
    """One graph panel from `draw`'s panel ``args``, laid out as ``layout_name`` says, its edges in
    ``edge_rgb`` (or the one edge colour); with ``own_vmax``, a legend of its own widths. Returns
    what fits its texts to it once the figure is laid out: ``fit(renderer)``."""
    ax = args[0]
    colour = bipartite.EDGE_RGB if edge_rgb is None else bipartite.NEUTRAL_RGB
    if own_vmax is not None:
        bipartite.width_legend(ax, own_vmax, colour, loc="upper left", bbox_to_anchor=(1, 1))
    draw_graph, fit = (layered.layered, layered.fit) if layout_name == "tree" else (bipartite.bipartite, bipartite.fit)
    texts = draw_graph(*args, colours=edge_rgb)
    return lambda renderer: fit(ax, texts, renderer)


def _fit_texts(figure: Figure, named_axes: list, fitters: list) -> None:
    """Lay ``figure`` out, then break each query name of ``named_axes`` (heatmaps) that is taller
    than its panel onto two lines, and fit each graph panel to its texts (``fitters``, from
    `_graph_panel`)."""
    figure.draw_without_rendering()
    renderer = figure.canvas.get_renderer()
    labels = [ax.yaxis.label for ax in named_axes]
    tall = [
        label
        for ax, label in zip(named_axes, labels)
        if label.get_window_extent(renderer).height > ax.get_window_extent(renderer).height
    ]
    for label in tall:
        label.set_text(text_sizes.break_name(label.get_text()))
    if tall:  # constrained layout settles a change over two passes: this one, and the one that draws it
        figure.draw_without_rendering()
    for fit in fitters:
        fit(renderer)


def output_path(path: str | Path, formats: tuple[str, ...], what: str) -> Path:
    """``path`` as a Path, if its extension is one of ``formats``; else a one-line UserError."""
    path = Path(path)
    if path.suffix.lower() not in formats:
        found = f"{path.suffix} is not a format written here" if path.suffix else "the name has no extension"
        raise UserError(f"cannot write {what} to {path}: {found}; use {', '.join(formats)}")
    return path


def check_image_path(path: str | Path) -> Path:
    """The output path of a picture, if its format is one matplotlib writes by itself."""
    return output_path(path, IMAGE_FORMATS, "a picture")


def save(picture: AttentionPicture, path: str | Path, view: str = "heatmap", scale: str = "shared") -> None:
    """Draw ``picture`` into an image file (one of `IMAGE_FORMATS`)."""
    save_figure(draw(picture, view, scale), path)


def save_figure(figure: Figure, path: str | Path, dpi: int = 120) -> None:
    """Write ``figure`` to ``path`` in the format its extension names, atomically."""
    path = check_image_path(path)
    write_atomic(path, lambda f: figure.savefig(f, format=path.suffix.lower()[1:], dpi=dpi))


def check_animation_path(path: str | Path) -> Path:
    """The output path of an animation, if its extension is one we write."""
    return output_path(path, ANIMATION_FORMATS, "an animation")


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
