"""Attention maps: the normalised edge weights of one sample, as dense (layers, heads, queries, keys).

The forward pass records every layer's edge weights a_uv / z_v (see
`graphformer.attention.record_attention`); the edges of the chosen sample are picked out
of the batched graph by their node-id range and scattered into a dense array in one indexing
operation. Pairs without an edge (the future in the decoder, anything a sparse pattern leaves
out) are NaN, so a plot shows the pattern itself.
"""

from __future__ import annotations

import torch

from graphformer.attention import record_attention
from graphformer.catalog import MODELS
from graphformer.choices import RELATIONS
from graphformer.graphs import GraphBatch
from graphformer.model.modes import evaluating


def recorded_kinds() -> tuple[str, ...]:
    """The kinds of model drawn with one map per layer (their classes' ``records_maps``). The
    universal ones attend on shrinking subgraphs of their still-active nodes at every step; those
    are drawn as ponder maps instead (`graphformer.viz.plots.ponder_map`)."""
    return tuple(kind for kind, cls in MODELS.items() if cls.records_maps)


def _ranges(batch: GraphBatch, relation: str, sample: int) -> tuple[int, int, int, int]:
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
    }[relation]


@torch.no_grad()
def attention_maps(model, batch: GraphBatch, relation: str = "cross", sample: int = 0) -> torch.Tensor:
    """(layers, heads, queries, keys) attention weights of one sample; NaN where there is no edge.

    Works for the models whose class ``records_maps`` (one map per layer; see `recorded_kinds`).
    ``batch`` must have targets for 'dec'/'cross'.
    """
    if not model.records_maps:
        raise ValueError(
            f"attention maps are drawn for the {' and '.join(recorded_kinds())} models, not model "
            f"{model.cfg.model!r}, whose steps attend on subgraphs of their active nodes; draw its "
            "ponder map instead (graphformer.viz.plots.ponder_map)"
        )
    if relation not in RELATIONS:
        raise ValueError(f"unknown relation {relation!r}; choose one of {RELATIONS}")
    if relation != "enc" and (model.cfg.classifies or batch.num_tgt_tokens == 0):
        why = "an encoder classifier attends with enc only" if model.cfg.classifies else "the batch has no targets"
        raise ValueError(f"no {relation} attention to map: {why}; give make_batch(pool, src, tgt) or relation 'enc'")
    if isinstance(sample, bool) or not isinstance(sample, int) or not 0 <= sample < batch.size:
        raise ValueError(f"sample {sample!r} is not a sample of the batch of {batch.size}")
    with evaluating(model), record_attention() as records:
        model(batch)
    key_first, n_keys, query_first, n_queries = _ranges(batch, relation, sample)
    maps = []
    for name, graph, weights in records:
        if name != relation:
            continue
        u, v = graph.edges()
        mine = (v >= query_first) & (v < query_first + n_queries)
        dense = weights.new_full((weights.shape[1], n_queries, n_keys), float("nan"))
        dense[:, v[mine] - query_first, u[mine] - key_first] = weights[mine, :, 0].T
        maps.append(dense)
    return torch.stack(maps).cpu()
