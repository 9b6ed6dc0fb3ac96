"""The Universal Transformer's attention, step by step: one sample's maps per ACT step, as edges.

A universal model applies one shared layer up to ``max_depth`` times. At step s only the nodes
still pondering are queries: the layer attends on ``relation.restrict_to_destinations(active)``,
the in-edges of the active nodes, their queries renumbered 0..n_active-1 (see
`graphformer.model.universal`). `record_attention` therefore sees one record per step and
sub-layer, and a node that halted after its S-th step is a query of steps 1..S only::

    active[s, v] = ponder[v] > s                 halting is for good: the steps are a prefix
    weights[s, h, e] = a_uv / z_v at step s      NaN where query v had halted before step s

Every step's edges are a subset of the first step's (then every node is active), so the steps
stack as the layers axis of one `EdgeMaps` over those edges: the grid of layers by heads, the
HTML page and `EdgeMaps.dense` show step s where a Transformer shows layer l, and a halted
query's row is blank (NaN) by itself. `StepMaps.step` gives one step's edges alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from graphformer.attention import record_attention
from graphformer.graphs import GraphBatch
from graphformer.model.modes import evaluating
from graphformer.viz.edge_maps import EdgeMaps, _picked, _ranges, check_sample, sublayer_maps

SIDE = {"enc": "src", "dec": "tgt", "cross": "tgt"}  # whose ACT statistics a sub-layer's queries are


@dataclass(frozen=True)
class StepMaps:
    """One sample's attention on one sub-layer of a universal model, per ACT step.

    Attributes:
        maps: an `EdgeMaps` over the first step's edges whose layers axis is the steps axis:
            weights (steps, heads, E), NaN on the edges of a query that had halted.
        ponder: (n_queries,) int64 steps each query node took (1..max_depth), from ACT.
    """

    maps: EdgeMaps
    ponder: torch.Tensor

    @property
    def steps(self) -> int:
        """Steps the sample's queries ran: the most any of them took."""
        return self.maps.layers

    @property
    def active(self) -> torch.Tensor:
        """(steps, n_queries) bool: whether each query node was still pondering at each step."""
        return torch.arange(self.steps)[:, None] < self.ponder[None, :]

    def step(self, s: int) -> EdgeMaps:
        """The maps of step ``s`` (from 0) on that step's edges alone, the in-edges of its active
        queries: weights (1, heads, E_s), each active query's summing to 1."""
        if not 0 <= s < self.steps:
            raise ValueError(f"step {s} is not one of the {self.steps} steps the sample's queries ran")
        return self.maps.live(s)  # a query's weights are finite exactly while it ponders

    def dense(self) -> torch.Tensor:
        """(steps, heads, queries, keys) weights, NaN where there is no edge or the query had halted."""
        return self.maps.dense()


@torch.no_grad()
def step_maps(model, batch: GraphBatch, sublayer: str = "enc", sample: int = 0) -> StepMaps:
    """The `StepMaps` of ``sample`` on ``sublayer`` ('enc'; 'dec' or 'cross' for the
    encoder-decoder ``universal`` model, whose ``batch`` must have targets) from one forward pass
    of the universal ``model`` over ``batch`` (in eval mode), on the CPU."""
    return sublayer_step_maps(model, batch, (sublayer,), sample)[sublayer]


@torch.no_grad()
def sublayer_step_maps(model, batch: GraphBatch, sublayers, sample: int = 0) -> dict[str, StepMaps]:
    """`step_maps` of each of ``sublayers``, by name, from the same one forward pass."""
    check_universal(model)
    for sublayer in sublayers:
        check_sample(model, batch, sublayer, sample)
    with evaluating(model), record_attention() as records:
        stats = model(batch, full_output=True).stats
    return {s: _stepped(model, batch, records, stats[SIDE[s]].steps.cpu(), s, sample) for s in sublayers}


def _stepped(model, batch: GraphBatch, records: list, ponder: torch.Tensor, sublayer: str, sample: int) -> StepMaps:
    """The sample's `StepMaps` out of the batch's ``records``, one per step run on the batch;
    ``ponder``: (batch's query nodes,) steps each took, whose prefix property gives each step's
    active nodes, in the order the step's relation numbers its queries."""
    steps = [(relation, weights) for name, relation, weights in records if name == sublayer]
    first = _picked(model, batch, [(sublayer, *steps[0])], sublayer, sample)  # step 1: all queries active
    key_first, n_keys, query_first, n_queries = _ranges(batch, sublayer, sample)
    mine = ponder[query_first : query_first + n_queries]
    # Each edge of a step is found among the first step's by its (query, key) pair.
    pairs = first.queries * n_keys + first.keys
    order = torch.argsort(pairs)
    weights = first.weights.new_full((int(mine.max()), *first.weights.shape[1:]), float("nan"))
    for s in range(len(weights)):
        relation, w = steps[s]
        ids = (ponder > s).nonzero().squeeze(1)  # the batch's active queries at step s, ascending
        v = ids[relation.v.cpu()] - query_first
        at = (v >= 0) & (v < n_queries)
        step_pairs = v[at] * n_keys + relation.u.cpu()[at] - key_first
        edge = order[torch.searchsorted(pairs[order], step_pairs)]
        weights[s][:, edge] = w[at.to(w.device), :, 0].T.cpu()
    return StepMaps(replace(first, weights=weights), mine.clone())


def check_universal(model) -> None:
    """A ValueError for a model that has no ACT steps (one map per layer: `edge_maps` draws it)."""
    if model.records_maps:
        raise ValueError(
            f"model {model.cfg.model!r} has layers, not ACT steps; step_maps maps the universal models, "
            "edge_maps this one"
        )


@torch.no_grad()
def any_model_maps(model, batch: GraphBatch, sublayers, sample: int = 0):
    """({sub-layer: `EdgeMaps`}, {sub-layer: (queries,) ponder steps}) of ``sample`` from one
    forward pass of any model: a layer per map for a Transformer (no ponder steps), a step per map
    for a universal model (`StepMaps.maps` and `StepMaps.ponder`)."""
    if model.records_maps:
        return sublayer_maps(model, batch, sublayers, sample), {}
    stepped = sublayer_step_maps(model, batch, sublayers, sample)
    return {s: m.maps for s, m in stepped.items()}, {s: m.ponder for s, m in stepped.items()}


def pad_steps(maps: torch.Tensor, depth: int) -> torch.Tensor:
    """(depth, heads, queries, keys): ``maps`` of the steps a sample ran, then NaN (every query
    halted) up to ``depth``, so that recordings of every epoch have the same steps."""
    blank = maps.new_full((depth - len(maps), *maps.shape[1:]), float("nan"))
    return torch.cat([maps, blank])
