"""Attention maps: the normalised edge weights of one sample, as dense (layers, heads, queries, keys).

The forward pass records every layer's edge weights a_uv / z_v (see
`graphformer.attention.record_attention`); the edges of the chosen sample are picked out
of the batched graph by their node-id range and scattered into a dense array in one indexing
operation. Pairs without an edge (the future in the decoder, anything a sparse pattern leaves
out) are NaN, so a plot shows the pattern itself. Where the model reads its edges' types
(``--enc-edges bias=role``), `maps_and_types` scatters each edge's type id the same way.
"""

from __future__ import annotations

import torch

from graphformer.attention import record_attention
from graphformer.catalog import MODELS
from graphformer.choices import SUBLAYERS
from graphformer.graphs import GraphBatch
from graphformer.graphs.edge_types import edge_types
from graphformer.model.modes import evaluating


def recorded_kinds() -> tuple[str, ...]:
    """The kinds of model drawn with one map per layer (their classes' ``records_maps``). The
    universal ones attend on shrinking subgraphs of their still-active nodes at every step; those
    are drawn as ponder maps instead (`graphformer.viz.plots.ponder_map`)."""
    return tuple(kind for kind, cls in MODELS.items() if cls.records_maps)


def _ranges(batch: GraphBatch, sublayer: str, sample: int) -> tuple[int, int, int, int]:
    """(first key id, number of keys, first query id, number of queries) of the sample."""
    src_first = int(batch.src_offsets[sample])
    tgt_offsets = torch.cumsum(batch.tgt_lengths, 0) - batch.tgt_lengths
    tgt_first = int(tgt_offsets[sample])
    n, m = int(batch.src_lengths[sample]), int(batch.tgt_lengths[sample])
    nodes = int(batch.src_nodes[sample])  # n tokens, then any span nodes of a tree pattern
    return {
        "enc": (src_first, nodes, src_first, nodes),
        "dec": (tgt_first, m, tgt_first, m),
        "cross": (src_first, n, tgt_first, m),
    }[sublayer]


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


@torch.no_grad()
def maps_and_types(
    model, batch: GraphBatch, sublayer: str = "cross", sample: int = 0
) -> tuple[torch.Tensor, dict[str, tuple]]:
    """`attention_maps`, and the edge types the model reads on ``sublayer`` (its ``--*-edges``
    terms): ``{types spec: (derivation, (queries, keys) int64 ids)}``, -1 where there is no edge
    (an empty dict for a sub-layer whose edges say nothing). The weights are those after the bias."""
    _check(model, batch, sublayer, sample)
    with evaluating(model), record_attention() as records:
        model(batch)
    key_first, n_keys, query_first, n_queries = _ranges(batch, sublayer, sample)
    maps, recorded = [], None
    for name, graph, weights in records:
        if name != sublayer:
            continue
        u, v = graph.u, graph.v
        mine = (v >= query_first) & (v < query_first + n_queries)
        at = (v[mine] - query_first, u[mine] - key_first)
        dense = weights.new_full((weights.shape[1], n_queries, n_keys), float("nan"))
        dense[:, at[0], at[1]] = weights[mine, :, 0].T
        maps.append(dense)
        recorded = recorded or (graph, mine, at)  # every layer attends over the same edges
    types = {}
    for spec, derivation in _derivations(model, sublayer).items():
        graph, mine, at = recorded
        ids = torch.full((n_queries, n_keys), -1, dtype=torch.int64)
        ids[at[0].cpu(), at[1].cpu()] = edge_types(graph, derivation)[mine].cpu()
        types[spec] = (derivation, ids)
    return torch.stack(maps).cpu(), types


def _derivations(model, sublayer: str) -> dict:
    """{types spec: derivation} of the edge terms the model's config gives ``sublayer``, each once."""
    return {term.types_spec: term.derivation() for term in model.cfg.edge_terms(sublayer)}


def _check(model, batch: GraphBatch, sublayer: str, sample: int) -> None:
    """A ValueError for a model that records no maps, an unknown sub-layer, one the batch has no
    targets for, or a sample outside the batch."""
    if not model.records_maps:
        raise ValueError(
            f"attention maps are drawn for the {' and '.join(recorded_kinds())} models, not model "
            f"{model.cfg.model!r}, whose steps attend on subgraphs of their active nodes; draw its "
            "ponder map instead (graphformer.viz.plots.ponder_map)"
        )
    if sublayer not in SUBLAYERS:
        raise ValueError(f"unknown sub-layer {sublayer!r}; choose one of {SUBLAYERS}")
    if sublayer != "enc" and (model.cfg.classifies or batch.num_tgt_tokens == 0):
        why = "an encoder classifier attends with enc only" if model.cfg.classifies else "the batch has no targets"
        raise ValueError(f"no {sublayer} attention to map: {why}; give make_batch(pool, src, tgt) or sub-layer 'enc'")
    if isinstance(sample, bool) or not isinstance(sample, int) or not 0 <= sample < batch.size:
        raise ValueError(f"sample {sample!r} is not a sample of the batch of {batch.size}")
