"""Attention maps kept as edges: one sample's weights on one sub-layer, O(edges), never dense.

The forward pass records every layer's edge weights a_uv / z_v (see
`graphformer.attention.record_attention`) for the whole batch. The edges of the chosen sample are
picked out by their node-id range and renumbered from 0 within the sample::

    keys[e], queries[e]          local key u and query v of edge e          (E,) int64
    weights[l, h, e]             a_uv / z_v of layer l, head h              (layers, heads, E)

so a ListOps sample of 2,000 tokens on its parse tree, or recall at 4,096 on a window, costs
memory in its edges, not in 2,000^2 or 4,096^2 pairs. Every layer of a sub-layer attends over the
same edges. `EdgeMaps.dense` scatters them into the (layers, heads, queries, keys) array
`graphformer.viz.attention_maps` gives (NaN where there is no edge) for samples small enough to
draw; `top_edges` gives the strongest keys of each query at any size.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from graphformer.attention import record_attention
from graphformer.catalog import MODELS
from graphformer.choices import SUBLAYERS
from graphformer.graphs import GraphBatch
from graphformer.graphs.edge_types import edge_types
from graphformer.model.modes import evaluating


@dataclass(frozen=True)
class EdgeMaps:
    """One sample's attention on one sub-layer ('enc', 'dec' or 'cross'), as edges.

    Attributes:
        sublayer: the attention sub-layer recorded.
        n_queries, n_keys: query and key nodes of the sample (keys: its tokens, then any span nodes).
        keys, queries: (E,) int64 local key and query id of each edge.
        weights: (layers, heads, E) attention weight of each edge; each query's weights sum to 1.
        types: ``{types spec: (derivation, (E,) int64 type ids)}`` of the edge terms the model
            reads on this sub-layer (its ``--*-edges``); empty where its edges say nothing.
    """

    sublayer: str
    n_queries: int
    n_keys: int
    keys: torch.Tensor
    queries: torch.Tensor
    weights: torch.Tensor
    types: dict[str, tuple] = field(default_factory=dict)

    @property
    def layers(self) -> int:
        return self.weights.shape[0]

    def as_record(self) -> dict:
        """What a file keeps of the maps (their edges, not a dense array): ``keys``, ``queries``,
        ``weights``, ``n_queries``, ``n_keys``; `of_record` reads it back."""
        return {
            "keys": self.keys,
            "queries": self.queries,
            "weights": self.weights,
            "n_queries": self.n_queries,
            "n_keys": self.n_keys,
        }

    @classmethod
    def of_record(cls, sublayer: str, record) -> EdgeMaps:
        """The maps of an `as_record` dict, or of a dense (layers, heads, queries, keys) tensor
        (NaN: no edge) as files written before maps were kept as edges hold them."""
        if isinstance(record, torch.Tensor):
            queries, keys = (~record.isnan()).any(dim=(0, 1)).nonzero(as_tuple=True)
            return cls(sublayer, record.shape[2], record.shape[3], keys, queries, record[:, :, queries, keys])
        fields = ("n_queries", "n_keys", "keys", "queries", "weights")
        return cls(sublayer, *(record[name] for name in fields))

    def dense(self) -> torch.Tensor:
        """(layers, heads, queries, keys) weights, NaN where there is no edge: O(queries x keys)."""
        layers, heads, _ = self.weights.shape
        maps = self.weights.new_full((layers, heads, self.n_queries, self.n_keys), float("nan"))
        maps[:, :, self.queries, self.keys] = self.weights
        return maps

    def dense_types(self) -> dict[str, tuple]:
        """``{types spec: (derivation, (queries, keys) int64 ids)}``, -1 where there is no edge."""
        dense = {}
        for spec, (derivation, ids) in self.types.items():
            table = torch.full((self.n_queries, self.n_keys), -1, dtype=torch.int64)
            table[self.queries, self.keys] = ids
            dense[spec] = (derivation, table)
        return dense

    def layer(self, index: int) -> EdgeMaps:
        """The maps of layer ``index`` alone (weights (1, heads, E)); negative indices count from the top."""
        if not -self.layers <= index < self.layers:
            raise ValueError(f"layer {index} is not one of the {self.layers} layers of the {self.sublayer} maps")
        return replace(self, weights=self.weights[index : index + 1 or None])

    def live(self, index: int) -> EdgeMaps:
        """Layer (or ACT step) ``index`` alone on its live edges, those whose weights are finite
        (a universal model's halted queries have NaN): weights (1, heads, E_live), types alike."""
        one = self.layer(index)
        kept = one.weights[0].isfinite().all(0)
        types = {spec: (derivation, ids[kept]) for spec, (derivation, ids) in one.types.items()}
        return replace(
            one, keys=one.keys[kept], queries=one.queries[kept], weights=one.weights[:, :, kept], types=types
        )

    def head_mean(self) -> EdgeMaps:
        """The heads averaged (weights (layers, 1, E)): rollout's and flow's view of a layer."""
        return replace(self, weights=self.weights.mean(1, keepdim=True))

    def _ranked(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(order, rank), each (layers, heads, E): the edges sorted by query, strongest first
        within a query (a NaN weight, a halted query's, last), and each sorted edge's place within
        its query's run (0: the query's strongest key)."""
        edges = self.weights.shape[-1]
        # Strongest first, then (a stable sort) grouped by query: each query's edges form one run.
        by_weight = torch.argsort(self.weights.nan_to_num(-1.0), dim=-1, descending=True, stable=True)
        by_query = torch.argsort(self.queries[by_weight], dim=-1, stable=True)
        order = by_weight.gather(-1, by_query)
        counts = torch.bincount(self.queries, minlength=self.n_queries)
        run_start = torch.cumsum(counts, 0) - counts
        return order, torch.arange(edges) - run_start[self.queries[order]]

    def keep_top(self, k: int) -> EdgeMaps:
        """The same edges with each query's weights NaN (drawn as no edge) but for its ``k``
        strongest keys, on every layer and head: the "top edges" view. O(layers x heads x E)."""
        if k < 1:
            raise ValueError(f"keep_top needs k >= 1, got {k}")
        order, rank = self._ranked()
        kept = torch.zeros_like(rank, dtype=torch.bool).scatter_(-1, order, rank < k)  # by edge, not by order
        return replace(self, weights=self.weights.masked_fill(~kept, float("nan")))

    def top_edges(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` strongest keys of every query: (layers, heads, queries, k) key ids, -1 past a
        query's last key, and their weights, NaN there; strongest first. Costs O(layers x heads x E)
        plus the (queries x k) result."""
        if k < 1:
            raise ValueError(f"top_edges needs k >= 1, got {k}")
        layers, heads, _ = self.weights.shape
        order, rank = self._ranked()
        query = self.queries[order]  # (layers, heads, E), ascending
        kept = rank < k
        lh = torch.arange(layers * heads).reshape(layers, heads, 1).expand_as(order)
        keys = torch.full((layers * heads, self.n_queries, k), -1, dtype=torch.int64)
        weights = self.weights.new_full((layers * heads, self.n_queries, k), float("nan"))
        at = (lh[kept], query[kept], rank[kept])
        keys[at] = self.keys[order[kept]]
        weights[at] = self.weights.gather(-1, order)[kept]
        return keys.reshape(layers, heads, self.n_queries, k), weights.reshape(layers, heads, self.n_queries, k)


@torch.no_grad()
def edge_maps(model, batch: GraphBatch, sublayer: str = "cross", sample: int = 0) -> EdgeMaps:
    """The `EdgeMaps` of ``sample`` on ``sublayer`` ('enc', 'dec' or 'cross') from one forward pass
    of ``model`` over ``batch`` (in eval mode), on the CPU. Works for the models whose class
    ``records_maps`` (see `recorded_kinds`); ``batch`` must have targets for 'dec'/'cross'."""
    return sublayer_maps(model, batch, (sublayer,), sample)[sublayer]


@torch.no_grad()
def sublayer_maps(model, batch: GraphBatch, sublayers, sample: int = 0) -> dict[str, EdgeMaps]:
    """`edge_maps` of each of ``sublayers``, by name, from the same one forward pass."""
    for sublayer in sublayers:
        check_maps(model, batch, sublayer, sample)
    with evaluating(model), record_attention() as records:
        model(batch)
    return {sublayer: _picked(model, batch, records, sublayer, sample) for sublayer in sublayers}


def _picked(model, batch: GraphBatch, records: list, sublayer: str, sample: int) -> EdgeMaps:
    """The sample's edges of ``sublayer`` out of the batch's ``records`` (`record_attention`'s)."""
    key_first, n_keys, query_first, n_queries = _ranges(batch, sublayer, sample)
    layers = [(graph, weights) for name, graph, weights in records if name == sublayer]
    graph = layers[0][0]  # every layer attends over the same edges
    mine = (graph.v >= query_first) & (graph.v < query_first + n_queries)
    types = {
        spec: (derivation, edge_types(graph, derivation)[mine].cpu())
        for spec, derivation in _derivations(model, sublayer).items()
    }
    return EdgeMaps(
        sublayer=sublayer,
        n_queries=n_queries,
        n_keys=n_keys,
        keys=(graph.u[mine] - key_first).cpu(),
        queries=(graph.v[mine] - query_first).cpu(),
        weights=torch.stack([weights[mine, :, 0].T for _, weights in layers]).cpu(),  # (layers, heads, E)
        types=types,
    )


def recorded_kinds() -> tuple[str, ...]:
    """The kinds of model drawn with one map per layer (their classes' ``records_maps``). The
    universal ones attend on shrinking subgraphs of their still-active nodes at every step; those
    are mapped per step instead (`graphformer.viz.step_maps`)."""
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


def _derivations(model, sublayer: str) -> dict:
    """{types spec: derivation} of the edge terms the model's config gives ``sublayer``, each once."""
    return {term.types_spec: term.derivation() for term in model.cfg.edge_terms(sublayer)}


def check_maps(model, batch: GraphBatch, sublayer: str, sample: int) -> None:
    """A ValueError for a model that records no maps, an unknown sub-layer, one the batch has no
    targets for, or a sample outside the batch."""
    if not model.records_maps:
        raise ValueError(
            f"attention maps are drawn for the {' and '.join(recorded_kinds())} models, not model "
            f"{model.cfg.model!r}, whose steps attend on subgraphs of their active nodes; draw its "
            "step maps instead (graphformer.viz.step_maps)"
        )
    check_sample(model, batch, sublayer, sample)


def check_sample(model, batch: GraphBatch, sublayer: str, sample: int) -> None:
    """A ValueError for an unknown sub-layer, one the batch has no targets for, or a sample
    outside the batch."""
    if sublayer not in SUBLAYERS:
        raise ValueError(f"unknown sub-layer {sublayer!r}; choose one of {SUBLAYERS}")
    if sublayer != "enc" and (model.cfg.classifies or batch.num_tgt_tokens == 0):
        why = "an encoder classifier attends with enc only" if model.cfg.classifies else "the batch has no targets"
        raise ValueError(f"no {sublayer} attention to map: {why}; give make_batch(pool, src, tgt) or sub-layer 'enc'")
    if isinstance(sample, bool) or not isinstance(sample, int) or not 0 <= sample < batch.size:
        raise ValueError(f"sample {sample!r} is not a sample of the batch of {batch.size}")
