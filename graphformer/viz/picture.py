"""`AttentionPicture`: one or more attention maps of one sample, with what their axes show; what
`graphformer.viz.plots` draws and `graphformer.viz.panel_layout` sizes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphformer.viz.long_tree import TreeMaps
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
        blocks: how a long map was cut into blocks of tokens (`graphformer.viz.binned`), its rows
            and columns then token ranges; empty for a map drawn a token a row and column.
        tree: a long map's panels as edges, with its tokens, for the tree view of a ``tree``
            layout (`graphformer.viz.long_tree`); None where the map is drawn a token a row.
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
    blocks: str = ""
    tree: TreeMaps | None = None
