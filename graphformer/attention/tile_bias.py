r"""Edge biases tile by tile, for `graphformer.attention.blocked`.

Blocked attention computes each tile's scores S_t = scale * Q K^T + B_t three times (the two
forward passes and the backward pass) and stores none of them, so the tile's bias B_t (H, B, B)
is made again each time, and its gradient dL/dB_t = dS_t (0 off the edges, where the weights are 0)
is summed back chunk by chunk into ``param``, the tensor the bias is made from:

* from positions (`PositionTiles`): B_t[h, i, j] = b(query q0 + i, key k0 + j, head h), computed
  from the two nodes' positions by `EdgeBias.score`; ``param`` is the bias's table or slopes, and
  their gradient is autograd of that computation, one chunk at a time. Memory: one chunk.
* a given type (`EdgeTiles`): the type lives on the edge, not on the (query, key) pair, so the
  (E, H) per-edge bias is ``param``, made once as the torch backend makes it, and scattered into
  each tile at its edges' slots; its gradient is dS_t read back at those slots (then autograd of
  `EdgeBias.per_edge` takes it to the table). Memory: (E, H), and an (E,) slot map. A `BiasSum`
  of several biases is served so too, whatever its parts.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from graphformer.attention.bias import EdgeBias
from graphformer.graphs.relation import Relation


class PositionTiles:
    """B_t from positions: tile (qb, kb) holds queries qb * B + i and keys kb * B + j."""

    def __init__(self, relation: Relation, bias: EdgeBias, layout):
        self.relation, self.bias, self.layout = relation, bias, layout
        self.param = bias.table if bias.table is not None else bias.slopes

    def of(self, chunk: slice, param: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(tiles, H, B, B) bias of the chunk's tiles, made from ``param`` in place of the bias's own."""
        layout, relation = self.layout, self.relation
        bias = replace(self.bias, table=param) if self.bias.table is not None else replace(self.bias, slopes=param)
        offsets = torch.arange(layout.block, device=param.device)
        # Past the last node a tile's rows and columns are padding: any node will do, they are masked.
        queries = (layout.q_block[chunk][:, None] * layout.block + offsets).clamp(max=relation.num_queries - 1)
        keys = (layout.k_block[chunk][:, None] * layout.block + offsets).clamp(max=relation.num_keys - 1)
        heads = torch.arange(bias.num_heads, device=param.device)
        return bias.score(relation, queries[:, None, :, None], keys[:, None, None, :], heads[:, None, None]).to(dtype)

    def add_grad(self, chunk: slice, param: torch.Tensor, dS: torch.Tensor, grad: torch.Tensor) -> None:
        """Add the chunk's share of dL/dparam, from its tiles' score gradients ``dS``, to ``grad``."""
        with torch.enable_grad():
            leaf = param.detach().requires_grad_(True)
            (share,) = torch.autograd.grad(self.of(chunk, leaf, dS.dtype), leaf, dS)
        grad += share


class EdgeSlots:
    """Each edge's slot in the tiles, edges sorted by tile: those of tiles [s, t) are
    ``edge[start[s]:start[t]]``, in tile ``tile`` at row ``row`` and column ``col``."""

    def __init__(self, relation: Relation, layout):
        block = layout.block
        tiles = layout.q_block * layout.key_blocks + layout.k_block  # ascending, as the layout made them
        tile_of_edge = torch.searchsorted(tiles, (relation.v // block) * layout.key_blocks + relation.u // block)
        self.edge = torch.argsort(tile_of_edge, stable=True)
        self.tile = tile_of_edge[self.edge]
        self.row, self.col = relation.v[self.edge] % block, relation.u[self.edge] % block
        counts = torch.bincount(tile_of_edge, minlength=len(tiles))
        self.start = [0, *torch.cumsum(counts, 0).tolist()]  # host ints: one slice per chunk, no device sync

    def of_chunk(self, chunk: slice) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(edges, tile within the chunk, row, column) of the edges of the chunk's tiles."""
        last = len(self.start) - 1
        edges = slice(self.start[min(chunk.start, last)], self.start[min(chunk.stop, last)])
        return self.edge[edges], self.tile[edges] - chunk.start, self.row[edges], self.col[edges]


class EdgeTiles:
    """B_t scattered from the (E, H) per-edge bias ``param`` (given types)."""

    def __init__(self, relation: Relation, bias: EdgeBias, layout, dtype: torch.dtype):
        self.layout, self.heads = layout, bias.num_heads
        self.slots = relation.layout(("blocked slots", layout.block), lambda r: EdgeSlots(r, layout))
        self.param = bias.per_edge(relation, dtype)

    def of(self, chunk: slice, param: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        edges, tile, row, col = self.slots.of_chunk(chunk)
        block = self.layout.block
        tiles = len(self.layout.mask[chunk])
        out = torch.zeros(tiles, self.heads, block, block, dtype=dtype, device=param.device)
        out[tile, :, row, col] = param[edges].to(dtype)
        return out

    def add_grad(self, chunk: slice, param: torch.Tensor, dS: torch.Tensor, grad: torch.Tensor) -> None:
        edges, tile, row, col = self.slots.of_chunk(chunk)
        grad[edges] += dS[tile, :, row, col].to(grad.dtype)  # each edge sits in one tile: no two writes meet


def tiles_of(relation: Relation, bias, layout, dtype: torch.dtype):
    """The tile bias for ``bias`` (an `EdgeBias` or a `BiasSum`) on ``relation``'s ``layout`` (None
    without a bias)."""
    if bias is None:
        return None
    if bias.from_positions and len(bias.parts) == 1:
        return PositionTiles(relation, bias, layout)
    return EdgeTiles(relation, bias, layout, dtype)  # a given type, or a sum of several biases


__all__ = ["PositionTiles", "EdgeTiles", "EdgeSlots", "tiles_of"]
