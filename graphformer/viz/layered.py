"""A self-attention map over a sample's own graph, drawn as that graph: a parse tree as a tree.

Nodes keep their reading order left to right and sit one row lower per edge between them and
the last node (`</s>`, which a parse tree joins to the root), so a parse tree reads as a tree:
the root under `</s>`, each operator's arguments in the row below it. Attention goes both ways
along an edge, so each edge is drawn in two halves: the half next to a node is as wide as the
weight that node puts on the node at the other end. A node's weight on itself colours its marker.

The panel is as wide as its nodes and as tall as its rows: each row has room for the longest
token hanging below its node and for the edges down to the next row (`size`); once the figure
is laid out, `fit` spreads the rows over the panel's height.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import numpy as np
from matplotlib.collections import LineCollection

from graphformer.viz import text_sizes
from graphformer.viz.bipartite import GAP, PAD, edge_colours, edge_style

# Inches from one row of the tree to the next, besides the tokens that hang below the upper row:
# room for the edges' slopes to read.
ROW_INCH = 0.35
MARKER = 0.05  # inches: a node's marker reaches this far above its row


class TreeTexts(NamedTuple):
    """The tokens of one tree panel, for `fit` to place below their nodes."""

    tokens: list  # a text per node, in node order
    y: np.ndarray  # (N,) the row of each node: 1 for the last node, 0 for the deepest


def depths(weights: np.ndarray) -> np.ndarray:
    """(N,) `edge_depths` over the edges of a (queries, keys) map (NaN: no edge)."""
    return edge_depths(len(weights), *np.nonzero(~np.isnan(weights)))


def edge_depths(n: int, queries, keys) -> np.ndarray:
    """(n,) the edges between each node and the last one (`</s>`, which a parse tree joins to its
    root), over the edges (``queries[e]``, ``keys[e]``) taken either way; a node the last one does
    not reach goes one row below the rest. O(n + edges)."""
    ends = np.concatenate([np.asarray(queries), np.asarray(keys)]).astype(np.int64)
    others = np.concatenate([np.asarray(keys), np.asarray(queries)]).astype(np.int64)
    order = np.argsort(ends, kind="stable")
    starts = np.searchsorted(ends[order], np.arange(n + 1))  # node i's neighbours: others[order[starts[i]:starts[i+1]]]
    depth = np.full(n, -1)
    depth[n - 1] = 0
    queue = deque([n - 1])
    while queue:
        node = queue.popleft()
        for other in others[order[starts[node] : starts[node + 1]]]:
            if depth[other] < 0:
                depth[other] = depth[node] + 1
                queue.append(other)
    depth[depth < 0] = depth.max() + 1
    return depth


def size(depth: np.ndarray, tokens, inch_per_position: float) -> tuple[float, float]:
    """The (width, height) in inches a tree panel of nodes at ``depth`` (`depths`) wants, title
    included: a position per node, and per row of the tree the longest token (each hangs below
    its node, above the next row) and `ROW_INCH` for the edges."""
    rows = max(int(depth.max()), 1)
    hanging = text_sizes.longest(tokens) + GAP
    title = text_sizes.line_height(text_sizes.PANEL_TITLE)
    return inch_per_position * len(tokens) + 0.3, rows * (ROW_INCH + hanging) + hanging + MARKER + 2 * PAD + title


def layered(
    ax,
    weights,
    tokens,
    _queries,
    title: str = "",
    vmax: float = 1.0,
    *_axes,
    threshold: float = 0.02,
    colours: np.ndarray | None = None,
) -> TreeTexts:
    """One (N, N) self-attention map drawn as its graph on ``ax``, with the signature of
    `graphformer.viz.bipartite.bipartite`, which it stands in for. Each half edge takes the
    colour of its own edge's type (``colours``, (N, N, 3)): a parent's half and a child's differ.
    Returns its texts: call `fit` once the figure is laid out."""
    w = np.asarray(weights, dtype=float)
    n = len(tokens)
    depth = depths(w)
    rows = max(int(depth.max()), 1)
    x, y = np.arange(n, dtype=float), 1.0 - depth / rows
    queries, keys = np.nonzero(np.nan_to_num(w, nan=0.0) > threshold * vmax)
    apart = queries != keys
    queries, keys = queries[apart], keys[apart]
    widths, alphas = edge_style(np.clip(w[queries, keys] / vmax, 0, 1))
    middle_x, middle_y = (x[queries] + x[keys]) / 2, (y[queries] + y[keys]) / 2
    halves = [[(x[q], y[q]), (mx, my)] for q, mx, my in zip(queries, middle_x, middle_y)]
    ax.add_collection(
        LineCollection(halves, linewidths=widths, colors=edge_colours(queries, keys, alphas, colours), zorder=1)
    )
    self_weight = np.clip(np.nan_to_num(np.diag(w), nan=0.0) / vmax, 0, 1)
    ax.scatter(x, y, s=30, c=self_weight, cmap="Oranges", vmin=0, vmax=1, edgecolors="tab:orange", zorder=2)
    texts = [
        ax.text(xi, yi, token, fontsize=text_sizes.TOKEN, rotation=90, ha="center", va="top", zorder=3)
        for xi, yi, token in zip(x, y, tokens)
    ]
    for text in texts:
        text.set_in_layout(False)  # `fit` keeps it inside the panel
    ax.set_xlim(-0.6, n - 0.4)
    ax.set_ylim(-0.6, 1.1)  # until `fit`
    ax.set_title(title, fontsize=text_sizes.PANEL_TITLE)
    ax.axis("off")
    return TreeTexts(texts, y)


def fit(ax, texts: TreeTexts, renderer) -> None:
    """Set the limits of a laid-out tree panel so that the deepest row's tokens end at its bottom
    edge and the top row's markers at its top: the rows take the room the tokens leave."""
    dpi = ax.figure.dpi
    box_height = ax.get_window_extent(renderer).height / dpi
    deepest = max(t.get_window_extent(renderer).height for t, y in zip(texts.tokens, texts.y) if y == 0) / dpi
    per_y = max(
        box_height - deepest - GAP - MARKER - 2 * PAD, 0.2
    )  # inches from the top row (y = 1) to the deepest (0)
    for token, y in zip(texts.tokens, texts.y):
        token.set_y(y - GAP / per_y)
    ax.set_ylim(-(GAP + deepest + PAD) / per_y, 1 + (MARKER + PAD) / per_y)
