"""A self-attention map over a sample's own graph, drawn as that graph: a parse tree as a tree.

Nodes keep their reading order left to right and sit one row lower per edge between them and
the last node (`</s>`, which a parse tree joins to the root), so a parse tree reads as a tree:
the root under `</s>`, each operator's arguments in the row below it. Attention goes both ways
along an edge, so each edge is drawn in two halves: the half next to a node is as wide as the
weight that node puts on the node at the other end. A node's weight on itself colours its marker.
"""

from __future__ import annotations

from collections import deque

import numpy as np
from matplotlib.collections import LineCollection

from graphformer.viz.bipartite import FONT_SIZE, edge_colours, edge_style


def depths(weights: np.ndarray) -> np.ndarray:
    """(N,) edges between each node and the last node, over the edges of a (queries, keys) map
    taken either way (NaN: no edge); nodes the last one does not reach go one row below the rest."""
    linked = ~np.isnan(weights)
    linked = linked | linked.T
    n = len(weights)
    depth = np.full(n, -1)
    depth[n - 1] = 0
    queue = deque([n - 1])
    while queue:
        node = queue.popleft()
        for other in np.nonzero(linked[node])[0]:
            if depth[other] < 0:
                depth[other] = depth[node] + 1
                queue.append(other)
    depth[depth < 0] = depth.max() + 1
    return depth


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
):
    """One (N, N) self-attention map drawn as its graph on ``ax``, with the signature of
    `graphformer.viz.bipartite.bipartite`, which it stands in for; it sets its own limits (the
    tokens hang below their nodes, in every row), so it needs no `fit`. Each half edge takes the
    colour of its own edge's type (``colours``, (N, N, 3)): a parent's half and a child's differ."""
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
    for xi, yi, token in zip(x, y, tokens):
        ax.text(xi, yi - 0.04, token, fontsize=FONT_SIZE, rotation=90, ha="center", va="top", clip_on=False)
    ax.set_xlim(-1, n)
    ax.set_ylim(-0.6, 1.2)
    ax.set_title(title, fontsize=FONT_SIZE + 1)
    ax.axis("off")
