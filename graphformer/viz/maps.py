"""Attention maps: the normalised edge weights of one sample, as dense (layers, heads, queries, keys).

The forward pass records every layer's edge weights a_uv / z_v (see
`graphformer.attention.record_attention`); `graphformer.viz.edge_maps` picks the edges of the
chosen sample out of the batched graph, and here they are scattered into a dense array in one
indexing operation. Pairs without an edge (the future in the decoder, anything a sparse pattern
leaves out) are NaN, so a plot shows the pattern itself. Where the model reads its edges' types
(``--enc-edges bias=role``), `maps_and_types` scatters each edge's type id the same way.
"""

from __future__ import annotations

import torch

from graphformer.choices import SUBLAYERS
from graphformer.graphs import GraphBatch
from graphformer.viz.edge_maps import edge_maps, recorded_kinds


@torch.no_grad()
def attention_maps(
    model, batch: GraphBatch, sublayer: str = "cross", sample: int = 0, *, relation: str | None = None
) -> torch.Tensor:
    """(layers, heads, queries, keys) attention weights of one sample on the attention sub-layer
    ``sublayer`` ('enc', 'dec' or 'cross'); NaN where there is no edge.

    Works for the models whose class ``records_maps`` (one map per layer; see `recorded_kinds`).
    ``batch`` must have targets for 'dec'/'cross'. ``relation=`` is the keyword's old name, still
    read: the docs named it so before ``relation`` came to mean a `Relation` only.
    """
    return maps_and_types(model, batch, sublayer if relation is None else relation, sample)[0]


def maps_and_types(
    model, batch: GraphBatch, sublayer: str = "cross", sample: int = 0
) -> tuple[torch.Tensor, dict[str, tuple]]:
    """`attention_maps`, and the edge types the model reads on ``sublayer`` (its ``--*-edges``
    terms): ``{types spec: (derivation, (queries, keys) int64 ids)}``, -1 where there is no edge
    (an empty dict for a sub-layer whose edges say nothing). The weights are those after the bias."""
    maps = edge_maps(model, batch, sublayer, sample)
    return maps.dense(), maps.dense_types()


__all__ = ["attention_maps", "maps_and_types", "recorded_kinds", "SUBLAYERS"]
