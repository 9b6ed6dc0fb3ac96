"""Pictures of rollout and flow (`graphformer.viz.rolled`): a heatmap of the (queries x input
tokens) shares and, for a per-sample encoder graph (a parse tree, ``--edges``), the same shares on
the sample's own graph, so that a parse tree shows which leaves reached its root.

    graphformer.viz.draw_rollout("runs/copy", ["a b c"], out="runs/copy/rollout.png")

The heatmap is `plots.heatmap`'s, sized by `panel_layout.heatmap_size`: a composition is a
one-layer, one-head map. Its colours run from 0 to the largest share drawn (shares spread over many
tokens would all be dark on a 0-to-1 scale), one scale for both panels. The graph panel lays the
nodes out as `graphformer.viz.layered` does (the root under `</s>`, a row lower per edge), draws
the edges thin and grey (the picture is about nodes), and fills each node with its share in the
chosen query's row; the query itself is ringed in red.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import numpy as np
from matplotlib.collections import LineCollection

from graphformer.choices import IMAGE_FORMATS
from graphformer.files import write_atomic
from graphformer.running.loaded import LoadedRun
from graphformer.viz import binned, layered, long_tree, panel_layout, plots, text_sizes
from graphformer.viz.attend_views import MAX_FIGURE_INCHES, output_paths, shorten
from graphformer.viz.on_demand import check_choice, encode_inputs, load
from graphformer.viz.picture import AttentionPicture
from graphformer.viz.rolled import Rolled, rollout_lines
from graphformer.viz.step_rollout import HOW
from graphformer.viz.step_views import ponder_labels

WHAT = {  # what a composition on each sub-layer tells, for the picture's title
    "enc": "how much of each input token reaches each node",
    "dec": "how much of each decoder input reaches each output",
    "cross": "the source tokens each output depends on",
}
QUERY_RING = "tab:red"
MIN_WIDTH = 5.0  # inches: a map of a few tokens still holds its title, wrapped


def check_picture_path(path: str | Path) -> Path:
    """``path``, if a picture's suffix ends it; else a one-line UserError (rollout has no page)."""
    return plots.output_path(path, IMAGE_FORMATS, f"a rollout or flow (a picture: {', '.join(IMAGE_FORMATS)})")


def picture_of(rolled: Rolled) -> AttentionPicture:
    """The heatmap's `AttentionPicture`: one panel, the shares; a universal model's queries
    labelled with the ACT steps they pondered."""
    sublayer = rolled.sublayer
    queries, keys = rolled.tokens[sublayer]
    ponder = rolled.ponder.get(sublayer)
    unit = "ACT step" if ponder else "layer"
    key_axis, query_axis = rolled.axes[sublayer]
    return AttentionPicture(
        maps=rolled.shares[None],
        keys=list(keys),
        queries=ponder_labels(queries, ponder) if ponder else list(queries),
        panel_titles=[f"{rolled.depth} {unit}{'s' * (rolled.depth != 1)}, heads averaged"],
        title=f"{rolled.how}: {WHAT[sublayer]}",
        key_axis=key_axis,
        query_axis=query_axis,
    )


def figure_size(picture: AttentionPicture, graph) -> tuple[float, list[tuple[float, float]]]:
    """(token spacing, (width with its colour bar, height) of each panel) in inches:
    `panel_layout.INCH_PER_TOKEN` between tokens where the figure fits `MAX_FIGURE_INCHES` wide,
    closer where it would not."""
    spacing = panel_layout.INCH_PER_TOKEN
    for _ in range(2):  # once at full spacing, once scaled to the room left
        sizes = [panel_layout.heatmap_size(picture, spacing)]
        if graph is not None:
            sizes.append(layered.size(layered.edge_depths(len(picture.keys), *graph), picture.keys, spacing))
        sizes = [(w + panel_layout.COLORBAR_WIDTH, h) for w, h in sizes]
        if sum(w for w, _ in sizes) <= MAX_FIGURE_INCHES:
            break
        spacing *= MAX_FIGURE_INCHES / sum(w for w, _ in sizes)
    return spacing, sizes


def panels(figure, sizes: list[tuple[float, float]]) -> list:
    """The axes of the heatmap and of the graph (if ``sizes`` has two panels) side by side, each
    as tall as it wants: a heatmap of a few rows beside a tall tree keeps its cells near square
    rather than stretched to the tree's height."""
    widths, heights = [w for w, _ in sizes], [h for _, h in sizes]
    if len(sizes) == 1 or heights[0] >= heights[1]:
        return list(figure.subplots(1, len(sizes), squeeze=False, width_ratios=widths)[0])
    grid = figure.add_gridspec(2, 2, width_ratios=widths, height_ratios=[heights[0], heights[1] - heights[0]])
    return [figure.add_subplot(grid[0, 0]), figure.add_subplot(grid[:, 1])]


def title_of(picture: AttentionPicture, rolled: Rolled, width: float) -> str:
    """The figure's title, what is drawn, the input and what the model made of it, each line
    wrapped to the figure's ``width`` in inches."""
    chars = max(int((width - 0.4) / (text_sizes.CHAR_WIDTH * text_sizes.FIGURE_TITLE)), 20)
    lines = [picture.title, shorten(rolled.line), rolled.title]
    return "\n".join(textwrap.fill(line, chars) for line in lines)


def draw_rolled(rolled: Rolled):
    """The figure of one `Rolled`: the heatmap, and the graph panel where it has a ``graph``, each
    with its colour bar (the graph's: the chosen query's row alone, see `shares_on_graph`); a long
    one's is `draw_long`'s."""
    if max(len(rolled.rows), len(rolled.shares[0])) > binned.MAX_TOKEN_ROWS:
        return draw_long(rolled)
    picture = picture_of(rolled)
    spacing, sizes = figure_size(picture, rolled.graph)
    width = max(sum(w for w, _ in sizes), MIN_WIDTH)
    title = title_of(picture, rolled, width)
    lines = title.count("\n") + 1
    figure = plots.new_figure(
        width, max(h for _, h in sizes) + text_sizes.line_height(text_sizes.FIGURE_TITLE) * lines + 0.4
    )
    axes = panels(figure, sizes)
    vmax = max(float(np.nanmax(rolled.shares)), 1e-6)
    image = plots.heatmap(axes[0], rolled.shares, picture.keys, picture.queries, picture.panel_titles[0], vmax,
                          picture.key_axis, picture.query_axis)  # fmt: skip
    if spacing < panel_layout.MIN_INCH_PER_TOKEN:  # too close for text: the pattern alone
        axes[0].set_xticks([]), axes[0].set_yticks([])
    figure.colorbar(image, ax=axes[0], fraction=0.05, label=f"share ({rolled.how})")
    fitters = []
    if rolled.graph is not None:
        nodes, texts = shares_on_graph(axes[1], rolled)
        figure.colorbar(nodes, ax=axes[1], fraction=0.05, label="share in the query's row")
        fitters.append(lambda renderer: layered.fit(axes[1], texts, renderer))
    figure.suptitle(title, fontsize=text_sizes.FIGURE_TITLE)
    plots._fit_texts(figure, [axes[0]], fitters)
    return figure


def shares_on_graph(ax, rolled: Rolled):
    """The sample's own encoder graph on ``ax``, laid out as a tree, each node filled with its
    share in the row of ``rolled.query``, from 0 to the largest share of any other node (the
    query's share of itself, the residual's, would leave the rest dark: it is drawn at the top of
    the scale, ringed). Returns the nodes' scatter and the texts for `layered.fit`."""
    (queries, keys), tokens = rolled.graph, rolled.tokens[rolled.sublayer][1]
    row, vmax = query_row(rolled)
    depth = layered.edge_depths(len(tokens), queries, keys)
    x, y = np.arange(len(tokens), dtype=float), 1.0 - depth / max(int(depth.max()), 1)
    apart = queries != keys
    lines = [[(x[q], y[q]), (x[k], y[k])] for q, k in zip(queries[apart], keys[apart])]
    ax.add_collection(LineCollection(lines, linewidths=0.6, colors="0.6", zorder=1))
    nodes = ax.scatter(x, y, s=60, c=row, cmap="viridis", vmin=0, vmax=vmax, edgecolors="0.3", linewidths=0.5, zorder=2)
    if rolled.sublayer == "enc":  # the query is a node of this graph
        ax.scatter([x[rolled.query]], [y[rolled.query]], s=150, facecolors="none", edgecolors=QUERY_RING, zorder=3)
    texts = [
        ax.text(xi, yi, token, fontsize=text_sizes.TOKEN, rotation=90, ha="center", va="top", zorder=3)
        for xi, yi, token in zip(x, y, tokens)
    ]
    for text in texts:
        text.set_in_layout(False)  # `layered.fit` keeps it inside the panel
    ax.set_title(f"on the sample's graph:\n{reaching(rolled)}", fontsize=text_sizes.PANEL_TITLE)
    ax.set_xlim(-0.6, len(tokens) - 0.4)
    ax.set_ylim(-0.6, 1.1)  # until `layered.fit`
    ax.axis("off")
    return nodes, layered.TreeTexts(texts, y)


def query_row(rolled: Rolled) -> tuple[np.ndarray, float]:
    """(N,) the shares of ``rolled.query``'s row, and the largest of them but the query's own."""
    row = rolled.shares[rolled.rows.index(rolled.query)]
    others = np.delete(row, rolled.query) if rolled.sublayer == "enc" else row
    return row, max(float(np.nanmax(others, initial=0.0)), 1e-6)


def reaching(rolled: Rolled) -> str:
    """What the graph panel colours: ``reaching node 0 (<cls>)``."""
    query_token = rolled.tokens[rolled.sublayer][0][rolled.rows.index(rolled.query)]
    return f"reaching {'node' if rolled.sublayer == 'enc' else 'output'} {rolled.query} ({query_token})"


def draw_long(rolled: Rolled):
    """The figure of a `Rolled` of more than `binned.MAX_TOKEN_ROWS` queries or keys: the shares
    in blocks of tokens (`binned`), and on the sample's graph, where it has one, the chosen query's
    row on its tree (`long_tree`: a hundredth of an inch a node at 2,000 tokens)."""
    picture = picture_of(rolled)
    view = binned.drawn(rolled.edges[rolled.sublayer], picture.queries, picture.keys)
    tree = rolled.graph is not None
    tokens = rolled.tokens[rolled.sublayer][1]
    depth = layered.edge_depths(len(tokens), *rolled.graph) if tree else None
    widths = [plots.HEATMAP_INCH + plots.COLORBAR_INCH] + [long_tree.MAX_WIDTH + plots.COLORBAR_INCH] * tree
    heights = [plots.HEATMAP_INCH] + [long_tree.panel_height(depth)] * tree
    title = title_of(picture, rolled, sum(widths))
    title_inches = text_sizes.line_height(text_sizes.FIGURE_TITLE) * (title.count("\n") + 1)
    figure = plots.new_figure(sum(widths), max(heights) + title_inches + 0.4)
    axes = figure.subplots(1, len(widths), width_ratios=widths, squeeze=False)[0]
    vmax = max(float(np.nanmax(rolled.shares)), 1e-6)
    image = plots.heatmap(axes[0], view.weights[0, 0], view.keys, view.queries, f"{picture.panel_titles[0]}, in blocks",
                          vmax, picture.key_axis, picture.query_axis, tick_every=binned.TICK_EVERY)  # fmt: skip
    figure.colorbar(image, ax=axes[0], fraction=0.05, label=f"share ({rolled.how}), block max")
    if tree:
        row, row_max = query_row(rolled)
        edges = (*rolled.graph, None)  # the graph alone: the picture is about its nodes
        nodes = long_tree.draw_tree(axes[1], edges, tokens, row, f"on the sample's tree: {reaching(rolled)}", 1.0,
                                    cmap="viridis", values_max=row_max)  # fmt: skip
        if rolled.sublayer == "enc":  # the query is a node of this graph
            where = (rolled.query, -depth[rolled.query])
            axes[1].scatter(*where, s=120, facecolors="none", edgecolors=QUERY_RING, zorder=3)
        figure.colorbar(nodes, ax=axes[1], fraction=0.02, pad=0.01, label="share in the query's row")
    figure.suptitle(f"{title}\n{view.note}", fontsize=text_sizes.FIGURE_TITLE)
    return figure


def render(rolled: Rolled, suffix: str) -> bytes:
    """The bytes of ``rolled``'s picture in the format of ``suffix``."""
    buffer = io.BytesIO()
    draw_rolled(rolled).savefig(buffer, format=suffix[1:], dpi=120)
    return buffer.getvalue()


def write(results: list[Rolled], out: str | Path) -> list[Path]:
    """Write each of ``results`` to its file (`attend_views.output_paths`: ``out``, or one per
    input with its index); every picture is drawn before the first is written."""
    suffix = check_picture_path(out).suffix.lower()
    contents = [render(rolled, suffix) for rolled in results]
    paths = output_paths(out, len(results))
    for path, content in zip(paths, contents):
        write_atomic(path, lambda f, content=content: f.write(content))
    return paths


def draw_rollout(
    run: str | Path | LoadedRun,
    lines: list[str],
    out: str | Path | None = None,
    *,
    show: str = "rollout",
    sublayer: str | None = None,
    query: int | None = None,
    layer: int | None = None,
    edges: str | Path | None = None,
    beam: int = 5,
    checkpoint: str = "best",
) -> list[Rolled]:
    """Rollout (``show='rollout'``) or flow (``'flow'``) of the run's model on each of ``lines``,
    in one call: load, decode, compose, and with ``out`` write a picture per line (`write`).

    ``sublayer``: 'enc', 'dec' or 'cross' (default 'cross', a classifier's 'enc'); ``query``: that
    query's row alone, and the node the graph view colours; ``layer``: compose up to that layer or
    a universal model's ACT step. Returns a `Rolled` per line: ``.shares`` is what is drawn."""
    if show not in HOW:
        raise ValueError(f"unknown show {show!r}; choose one of {HOW}")
    if out is not None:
        check_picture_path(out)
    run = load(run, checkpoint)
    sublayer = sublayer or ("enc" if run.model.cfg.classifies else "cross")
    check_choice(run, sublayer, layer, None)
    source, sample_edges = encode_inputs(run, list(lines), edges)
    results = rollout_lines(run, source, sample_edges, sublayer, show, query, layer, beam)
    if out is not None:
        write(results, out)
    return results
