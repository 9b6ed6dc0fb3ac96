"""Maps of long inputs drawn in blocks: what a heatmap shows of thousands of tokens.

A map of up to `MAX_TOKEN_ROWS` queries and keys is drawn as it is, a row per query and a
column per key, each ticked with its token. A longer one would need millions of cells a panel
and a screen cannot show its tokens, so its tokens are cut into runs of ``size`` consecutive
ones (the last run shorter), at most `MAX_BINS` a side, and each block of a run of queries by a
run of keys is drawn as one cell holding the strongest weight in it::

    size       = ceil(n / MAX_BINS)                       tokens per run (block side)
    cell[i, j] = max { w_uv : v in run i, u in run j }    NaN where the block holds no edge

The maximum, not the sum: a cell then reads on the same 0..1 scale as a token's cell, and a
single strong edge in a block of weak ones still shows. It is computed from the edges
(`graphformer.viz.edge_maps.EdgeMaps`) in O(edges) and the (bins x bins) result: the dense
queries x keys array is never made. The axes name each run by its token range, ``0-15``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from graphformer.viz.edge_maps import EdgeMaps

MAX_TOKEN_ROWS = 160  # queries or keys drawn one per row or column, with their tokens, up to this
MAX_BINS = 64  # runs of tokens a side beyond it, each drawn as its strongest weight
TICK_EVERY = 4  # a picture ticks every 4th run with its token range: 16 labels a side, room for each


@dataclass(frozen=True)
class Drawn:
    """What a heatmap draws of one sub-layer's maps.

    Attributes:
        weights: (layers, heads, rows, columns) float32, NaN where there is no edge.
        queries, keys: the label of each row and column: a token, or a run's token range.
        note: how the map was drawn, for a title: empty, or e.g. ``2,001 tokens in blocks of 21, block max``.
    """

    weights: np.ndarray
    queries: list[str]
    keys: list[str]
    note: str = ""

    @property
    def binned(self) -> bool:
        return bool(self.note)


def run_size(n: int, max_bins: int = MAX_BINS) -> int:
    """Tokens per run: 1 up to `MAX_TOKEN_ROWS` tokens (each drawn itself), else ceil(n / max_bins)."""
    return 1 if n <= MAX_TOKEN_ROWS else math.ceil(n / max_bins)


def range_labels(n: int, size: int) -> list[str]:
    """``first-last`` of each run of ``size`` tokens out of ``n`` (counted from 0)."""
    return [f"{first}-{min(first + size, n) - 1}" for first in range(0, n, size)]


def block_max(maps: EdgeMaps, query_size: int, key_size: int) -> np.ndarray:
    """(layers, heads, query runs, key runs): the strongest weight of each block, NaN where the
    block holds no edge (or only a halted query's NaN weights)."""
    layers, heads, edges = maps.weights.shape
    rows, cols = -(-maps.n_queries // query_size), -(-maps.n_keys // key_size)
    cell = (maps.queries // query_size) * cols + maps.keys // key_size  # (E,) the block of each edge
    panel = torch.arange(layers * heads).reshape(layers, heads, 1) * (rows * cols)
    at = (panel + cell).reshape(-1)  # (layers * heads * E,) the block of each weight, all panels apart
    weights = maps.weights.reshape(-1).float()
    present = ~weights.isnan()
    out = torch.full((layers * heads * rows * cols,), float("nan"))
    # NaN in, NaN out: amax over the present weights alone, into blocks that start empty.
    out.scatter_reduce_(0, at[present], weights[present], reduce="amax", include_self=False)
    return out.reshape(layers, heads, rows, cols).numpy()


def drawn(maps: EdgeMaps, queries: list[str], keys: list[str], max_bins: int = MAX_BINS) -> Drawn:
    """The heatmap of ``maps`` (a layer and head selection of them, say): dense with the
    ``queries`` and ``keys`` tokens where both sides have at most `MAX_TOKEN_ROWS`, else in
    blocks (see the module's docstring) labelled by token range."""
    query_size, key_size = run_size(maps.n_queries, max_bins), run_size(maps.n_keys, max_bins)
    if query_size == key_size == 1:
        return Drawn(maps.dense().float().numpy(), list(queries), list(keys))
    sides = {n: size for n, size in ((maps.n_queries, query_size), (maps.n_keys, key_size)) if size > 1}
    runs = " and ".join(f"{n:,} tokens in blocks of {size}" for n, size in sides.items())
    return Drawn(
        block_max(maps, query_size, key_size),
        list(queries) if query_size == 1 else range_labels(maps.n_queries, query_size),
        list(keys) if key_size == 1 else range_labels(maps.n_keys, key_size),
        f"{runs}, block max",
    )
