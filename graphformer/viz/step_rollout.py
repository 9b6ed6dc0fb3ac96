r"""Rollout and flow of any model: a Transformer's layers, or a Universal Transformer's ACT steps.

A universal model applies one shared layer up to ``max_depth`` times, each step to the nodes still
pondering (`graphformer.viz.step_maps`: a halted query's weights are NaN from the step after its
last). A halted node keeps its state (`graphformer.model.universal`), so each step is a layer of
the rollout whose row is the identity for a query that has halted:

    A'_s[i] = rownorm(0.5 A_s + 0.5 I)[i]      query i still pondering at step s
            = e_i                              query i halted before step s (it keeps its state)
    R       = A'_S ... A'_1                    over the S steps the sample ran

Through cross-attention a halted decoder query reads nothing more: at its cross step it keeps all
its share (1 where a pondering one keeps 0.5, `attention_rollout.cross_rollout_rows`' ``keep``).
The encoder's rollout runs over all its steps: the decoder reads the encoder's final states.

The identity rows need no code of their own: a step's `EdgeMaps` keeps the edges of its
pondering queries only (finite weights), and `attention_rollout.mixed_layers` adds a self-loop to
every node, so a halted query's row is its self-loop alone, renormalised to 1. A Transformer's
maps have no NaN, so the same functions give its rollout and flow, layer by layer.
"""

from __future__ import annotations

import torch

from graphformer.viz.attention_flow import cross_flow_rows, flow_rows
from graphformer.viz.attention_rollout import cross_layers, cross_rollout_rows, mixed_layers, query_ids, rollout_rows
from graphformer.viz.edge_maps import EdgeMaps

HOW = ("rollout", "flow")


def step_layers(maps: EdgeMaps, top: int | None = None) -> list[torch.Tensor]:
    """A'_s of each step (or layer) of a self-attention's ``maps`` up to ``top`` (all where None),
    bottom first: sparse (N, N), the identity row for a query that has halted."""
    steps = range(maps.layers)[: None if top is None else top + 1]
    return [mixed_layers(maps.live(s))[0] for s in steps]


def cross_steps(maps: EdgeMaps, n_source: int, top: int | None = None) -> tuple[list, list]:
    """(C_s, keep_s) of each cross step up to ``top``: C_s sparse (m, ``n_source``), its rows
    renormalised; keep_s (m,) 0.5 for a query still pondering (it has edges), 1 for one halted."""
    steps = range(maps.layers)[: None if top is None else top + 1]
    cross, keep = [], []
    for s in steps:
        step = maps.live(s)
        cross += cross_layers(step, n_source)
        reads = torch.bincount(step.queries, minlength=maps.n_queries) > 0
        keep.append(1.0 - 0.5 * reads.to(step.weights.dtype))
    return cross, keep


def composed(maps: dict[str, EdgeMaps], sublayer: str, how: str = "rollout", queries=None, top=None) -> torch.Tensor:
    """(queries, nodes) rollout or flow (``how``) of one sample from its ``maps`` by sub-layer
    (`graphformer.viz.step_maps.any_model_maps`'s: layers or steps), dense.

    ``sublayer`` 'enc' or 'dec': that stack's; 'cross': which source nodes each output depends on,
    through the encoder's whole stack and the decoder's. ``queries``: ids of the rows, None for
    all. ``top``: the last layer or step to compose (of the decoder's, for 'cross'), None for all.
    """
    if how not in HOW:
        raise ValueError(f"unknown composition {how!r}; choose one of {HOW}")
    # The sparse matrices are built from edges already checked; torch 2.11 warns on each process's
    # first one unless told whether to check them again.
    with torch.sparse.check_sparse_tensor_invariants(enable=False):
        return _composed(maps, sublayer, how, queries, top)


def _composed(maps: dict[str, EdgeMaps], sublayer: str, how: str, queries, top) -> torch.Tensor:
    if sublayer == "cross":
        encoder = step_layers(maps["enc"])
        decoder = step_layers(maps["dec"], top)
        cross, keep = cross_steps(maps["cross"], encoder[0].shape[0], top)
        ids = query_ids(range(decoder[0].shape[0]) if queries is None else queries, decoder[0].shape[0])
        compose = cross_flow_rows if how == "flow" else cross_rollout_rows
        return compose(encoder, decoder, cross, ids, keep)
    layers = step_layers(maps[sublayer], top)
    ids = query_ids(range(layers[0].shape[0]) if queries is None else queries, layers[0].shape[0])
    return (flow_rows if how == "flow" else rollout_rows)(layers, ids)
