"""One attention map drawn as a bipartite graph: keys in a row on top, queries in a row below, an
edge per weight with width and opacity by weight, and colour by the edge's type where it has one
(`graphformer.viz.type_colours`).

Each row's tokens sit just outside it and its name to its left, all inside the panel: edges never
cover them, and neither does the panel's title, which matplotlib places above the panel without
looking at its texts. How much room the texts need is known only once the figure is laid out,
so `fit` sets the panel's limits then; `plots.draw` calls it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.lines import Line2D

from graphformer.viz import text_sizes

FONT_SIZE = text_sizes.TOKEN
EDGE_RGB = (0.12, 0.3, 0.6)
NEUTRAL_RGB = (0.3, 0.3, 0.3)  # the width legend's, where colour tells an edge's type
LEGEND_SHARES = (1.0, 0.5, 0.1)  # of a panel's largest weight: the edges the legend shows
GAP = 0.07  # inches from a marker's centre to its token: clear of the marker
PAD = 0.03  # inches from the outermost text to the panel's edge
# Room a panel needs besides its positions and texts, in inches, before `fit` measures the
# texts: the space between the row of keys and the row of queries, where the edges run.
ROW_GAP = 1.8


class GraphTexts(NamedTuple):
    """The texts of one bipartite panel, for `fit` to place."""

    key_tokens: list  # above the key row (y = 1)
    query_tokens: list  # below the query row (y = 0)
    names: list  # each row's name, left of it
    positions: int  # markers in the longer row


def edge_style(strength):
    """Line widths (points) and opacities of edges of ``strength`` (weight over the panel's
    largest, 0 to 1)."""
    return 0.3 + 3.5 * strength, 0.15 + 0.85 * strength


def edge_colours(rows, cols, alphas, colours=None) -> list:
    """The RGBA of the edges (query ``rows``, key ``cols``) of opacities ``alphas``: each in its
    type's colour from the (queries, keys, 3) ``colours``, or all in `EDGE_RGB` without types."""
    if colours is None:
        return [(*EDGE_RGB, a) for a in alphas]
    return [(*colours[r, c], a) for r, c, a in zip(rows, cols, alphas)]


def width_legend(target, vmax: float, colour=EDGE_RGB, **placement):
    """A legend on ``target`` (an Axes or a Figure) of what an edge's width means: the weights
    of a few widths, for a panel whose widest edge is ``vmax``, drawn in ``colour`` (a neutral one
    where colour tells an edge's type)."""
    widths, alphas = edge_style(np.array(LEGEND_SHARES))
    handles = [Line2D([], [], color=colour, linewidth=w, alpha=a) for w, a in zip(widths, alphas)]
    entries = [f"{share * vmax:.2g}" for share in LEGEND_SHARES]
    return target.legend(
        handles,
        entries,
        title="edge width: weight",
        fontsize=text_sizes.LEGEND,
        title_fontsize=text_sizes.LEGEND,
        frameon=False,
        **placement,
    )


def bipartite(
    ax,
    weights,
    key_tokens,
    query_tokens,
    title: str = "",
    vmax: float = 1.0,
    key_axis: str = "keys",
    query_axis: str = "queries",
    threshold: float = 0.02,
    colours: np.ndarray | None = None,
) -> GraphTexts:
    """One (queries, keys) map as a bipartite graph on ``ax``, a marker per key and query with its
    token, an edge per weight above ``threshold * vmax``, in its type's colour where ``colours``
    (queries, keys, 3) gives them. Returns its texts: call `fit` once the figure is laid out."""
    w = np.asarray(weights, dtype=float)
    n_keys, n_queries = len(key_tokens), len(query_tokens)
    positions = max(n_keys, n_queries)
    key_x = np.arange(n_keys) + (positions - n_keys) / 2
    query_x = np.arange(n_queries) + (positions - n_queries) / 2
    rows, cols = np.nonzero(np.nan_to_num(w, nan=0.0) > threshold * vmax)
    widths, alphas = edge_style(np.clip(w[rows, cols] / vmax, 0, 1))
    segments = [[(key_x[i], 1.0), (query_x[j], 0.0)] for j, i in zip(rows, cols)]
    ax.add_collection(
        LineCollection(segments, linewidths=widths, colors=edge_colours(rows, cols, alphas, colours), zorder=1)
    )
    ax.scatter(key_x, np.ones(n_keys), s=30, color="tab:blue", zorder=2)
    ax.scatter(query_x, np.zeros(n_queries), s=30, color="tab:orange", zorder=2)

    def text(x, y, string, fontsize=FONT_SIZE, **style):
        made = ax.text(x, y, string, fontsize=fontsize, **style)
        made.set_in_layout(False)  # `fit` keeps it inside the panel
        return made

    texts = GraphTexts(
        [text(x, 1.1, token, rotation=90, ha="center", va="bottom") for x, token in zip(key_x, key_tokens)],
        [text(x, -0.1, token, rotation=90, ha="center", va="top") for x, token in zip(query_x, query_tokens)],
        [
            text(-0.5, y, text_sizes.break_name(name), text_sizes.LABEL, ha="right", va="center", color=colour)
            for y, name, colour in ((1.0, key_axis, "tab:blue"), (0.0, query_axis, "tab:orange"))
        ],
        positions,
    )
    ax.set_xlim(-3, positions - 0.5)  # until `fit`
    ax.set_ylim(-0.6, 1.6)
    ax.set_title(title, fontsize=text_sizes.PANEL_TITLE)
    ax.axis("off")
    return texts


def size(key_tokens, query_tokens, key_axis: str, query_axis: str, inch_per_position: float) -> tuple[float, float]:
    """The (width, height) in inches a bipartite panel wants, title included, estimated from
    how long its texts are."""

    name = text_sizes.longest([text_sizes.break_name(n) for n in (key_axis, query_axis)], text_sizes.LABEL)
    width = inch_per_position * max(len(key_tokens), len(query_tokens)) + name + 0.4
    title = text_sizes.line_height(text_sizes.PANEL_TITLE)
    return width, ROW_GAP + text_sizes.longest(key_tokens) + text_sizes.longest(query_tokens) + 2 * GAP + title


def fit(ax, texts: GraphTexts, renderer) -> None:
    """Set the limits of a laid-out bipartite panel so that its texts fill it to its edges:
    the rows of markers take the room the tokens and names leave."""
    box = ax.get_window_extent(renderer)
    dpi = ax.figure.dpi

    def longest(group, side):
        return max((getattr(t.get_window_extent(renderer), side) for t in group), default=0.0) / dpi

    above, below = longest(texts.key_tokens, "height"), longest(texts.query_tokens, "height")
    per_y = max(box.height / dpi - above - below - 2 * (GAP + PAD), 0.3)  # inches from one row to the other
    per_x = max((box.width / dpi - longest(texts.names, "width") - PAD) / texts.positions, 0.05)
    for token in texts.key_tokens:
        token.set_y(1 + GAP / per_y)
    for token in texts.query_tokens:
        token.set_y(-GAP / per_y)
    ax.set_ylim(-(GAP + below + PAD) / per_y, 1 + (GAP + above + PAD) / per_y)
    ax.set_xlim(-0.5 - (longest(texts.names, "width") + PAD) / per_x, texts.positions - 0.5)
