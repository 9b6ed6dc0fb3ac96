"""A long sample's own graph drawn as a tree from its edges: ListOps at 2,000 tokens on its parse tree.

`graphformer.viz.layered` gives every node a position wide enough for its token, which past
`binned.MAX_TOKEN_ROWS` nodes makes a picture no screen shows. This keeps its layout and fixes
the width instead::

    x(node) = its place in reading order          0 .. N-1, left to right
    y(node) = -(edges between it and the last)    `layered.edge_depths`: BFS from `</s>`, top to bottom

in a panel at most `MAX_WIDTH` inches wide (a node gets a hundredth of an inch at 2,000 tokens),
`ROW_INCH` a row. Nodes are small markers filled with a value of their own (their weight on
themselves, or a rollout share); each edge weight w_qk above ``threshold`` of the panel's largest
is the half of the edge next to its query, as in `layered`, its width and opacity by weight
(`bipartite.edge_style`) and drawn in order of weight, so the strong ones lie on top. Tokens are
named where a name reads: the inner nodes (two nodes or more one row below them) of the top
`LABEL_ROWS` rows, each at least `LABEL_GAP` from the last named in its row.

Everything is computed from the (queries, keys, weights) of the edges: O(nodes + edges) memory.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from matplotlib.collections import LineCollection

from graphformer.viz import text_sizes
from graphformer.viz.bipartite import EDGE_RGB, edge_style
from graphformer.viz.layered import edge_depths

MAX_WIDTH = 22.0  # inches: about 2,600 pixels at save_figure's dpi
ROW_INCH = 0.55  # inches between rows: room for the slope of an edge to read
MARKER_AREA = 10.0  # points squared: a node a few pixels across
LABEL_ROWS = 3  # rows whose inner nodes are named: the root, its arguments and theirs
LABEL_GAP = 0.45  # inches between the starts of two names of one row
LABEL_SIZE = 7  # points
GRAPH_WIDTH = 0.4  # points: an edge of the graph alone (a rollout's panel, about its nodes)


class TreeMaps(NamedTuple):
    """The panels of a long map as edges, for its tree view: one sample's graph, a weight per
    panel (head) and edge, and the token of each node."""

    queries: np.ndarray  # (E,) int64 query node of each edge
    keys: np.ndarray  # (E,) int64 key node of each edge
    weights: np.ndarray  # (panels, E) NaN where a panel has no weight (a halted query, a top-K cut)
    tokens: list  # (N,) the text of each node

    def panel(self, index: int) -> tuple:
        """(queries, keys, weights) of panel ``index``, as `draw_tree` takes them."""
        return self.queries, self.keys, self.weights[index]

    @classmethod
    def of(cls, maps, tokens: list) -> TreeMaps:
        """The panels of an `EdgeMaps` whose weights are (layers or steps, heads, E), layer-major."""
        weights = maps.weights.float().numpy()
        return cls(maps.queries.numpy(), maps.keys.numpy(), weights.reshape(-1, weights.shape[-1]), list(tokens))


def panel_height(depth: np.ndarray) -> float:
    """Inches a tree panel of nodes at ``depth`` wants: `ROW_INCH` a row, its title and axis names."""
    return (int(depth.max()) + 1) * ROW_INCH + 2 * text_sizes.line_height(text_sizes.PANEL_TITLE) + 0.6


def named_nodes(depth: np.ndarray, queries, keys, inch_per_node: float) -> list[int]:
    """The nodes whose tokens are drawn: the inner nodes (two or more nodes one row below them,
    an operator's arguments and its `]`) of the top `LABEL_ROWS` rows below `</s>`, left to
    right, each at least `LABEL_GAP` inches right of the last named in its row."""
    queries, keys = np.asarray(queries), np.asarray(keys)
    deeper = (depth[keys] == depth[queries] + 1) & (queries != keys)  # from a node down to one a row below
    below = np.zeros(len(depth), dtype=np.int64)
    np.add.at(below, queries[deeper], 1)  # a key linked to a query both ways counts once: edges are per direction
    inner = below >= 2  # a leaf beside a subtree (its `]`) in a window has one such neighbour, an operator two
    named, last = [], {}
    for node in np.nonzero(inner & (depth >= 1) & (depth <= LABEL_ROWS))[0]:
        row = int(depth[node])
        if row not in last or (node - last[row]) * inch_per_node >= LABEL_GAP:
            named.append(int(node))
            last[row] = node
    return named


def draw_tree(ax, edges, tokens, node_values, title: str, vmax: float, *, threshold: float = 0.02,
              cmap="Oranges", values_max: float = 1.0):  # fmt: skip
    """One panel of a long tree on ``ax``. ``edges``: (queries, keys, weights), each (E,), the
    weights one layer and head's (NaN: not drawn), or None to draw the graph alone, thin and grey;
    ``tokens``: the N nodes' texts; ``node_values``: (N,) what fills each marker, on ``cmap`` from
    0 to ``values_max``; ``vmax``: the weight drawn widest. Returns the nodes' scatter (its array:
    ``node_values``), for a colour bar."""
    queries, keys, weights = edges
    queries, keys = np.asarray(queries), np.asarray(keys)
    n = len(tokens)
    depth = edge_depths(n, queries, keys)
    x, y = np.arange(n, dtype=float), -depth.astype(float)
    ax.add_collection(_lines(x, y, queries, keys, weights, vmax, threshold))
    nodes = ax.scatter(x, y, s=MARKER_AREA, c=node_values, cmap=cmap, vmin=0, vmax=values_max, linewidths=0, zorder=2)
    inch_per_node = MAX_WIDTH / n
    for node in named_nodes(depth, queries, keys, inch_per_node):
        ax.text(x[node], y[node] + 0.12, tokens[node], fontsize=LABEL_SIZE, ha="left", va="bottom", zorder=3,
                bbox={"boxstyle": "square,pad=0.05", "facecolor": "white", "alpha": 0.7, "linewidth": 0})  # fmt: skip
    ax.set_xlim(-0.01 * n, 1.01 * n)
    ax.set_ylim(y.min() - 0.5, 0.6)
    rows = range(int(depth.max()) + 1)
    ax.set_yticks([-r for r in rows], [str(r) for r in rows], fontsize=text_sizes.TOKEN)
    ax.set_xticks([])
    ax.set_xlabel(
        f"{n:,} nodes in reading order (the tokens, then </s>); the top rows' inner nodes named",
        fontsize=text_sizes.LABEL,
    )
    ax.set_ylabel("depth below </s>", fontsize=text_sizes.LABEL)
    ax.set_title(title, fontsize=text_sizes.PANEL_TITLE)
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    return nodes


def _lines(x, y, queries, keys, weights, vmax: float, threshold: float) -> LineCollection:
    """Each weight above ``threshold`` of ``vmax`` as the half of its edge next to its query, by
    width and opacity, the strongest on top; without ``weights``, each edge whole, thin and grey."""
    apart = queries != keys  # a node's weight on itself fills its marker
    if weights is None:  # a link drawn once, however many directions it has
        q, k = np.unique(np.sort(np.stack([queries[apart], keys[apart]], -1), axis=-1), axis=0).T
        return LineCollection(np.stack([np.stack([x[q], y[q]], -1), np.stack([x[k], y[k]], -1)], 1),
                              linewidths=GRAPH_WIDTH, colors="0.6", zorder=1)  # fmt: skip
    strength = np.clip(np.nan_to_num(np.asarray(weights, dtype=float), nan=0.0) / vmax, 0, 1)
    drawn = np.nonzero((strength > threshold) & apart)[0]
    drawn = drawn[np.argsort(strength[drawn], kind="stable")]  # the strongest last, on top
    q, k = queries[drawn], keys[drawn]
    halves = np.stack([np.stack([x[q], y[q]], -1), np.stack([(x[q] + x[k]) / 2, (y[q] + y[k]) / 2], -1)], 1)
    widths, alphas = edge_style(strength[drawn])
    return LineCollection(halves, linewidths=widths, colors=[(*EDGE_RGB, a) for a in alphas], zorder=1)


def self_weights(edges, n: int, vmax: float) -> np.ndarray:
    """(n,) each node's weight on itself over ``vmax``, 0 to 1 (0 where it has no self-loop)."""
    queries, keys, weights = (np.asarray(a) for a in edges)
    values = np.zeros(n)
    loops = queries == keys
    values[queries[loops]] = np.nan_to_num(weights[loops].astype(float), nan=0.0)
    return np.clip(values / vmax, 0, 1)
