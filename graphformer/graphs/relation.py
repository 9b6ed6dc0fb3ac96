"""A relation: who attends to whom in one attention sub-layer, as a plain value.

Every attention call receives one. It holds the edges u -> v (key u, query v) as index tensors
on the compute device, the number of key and query nodes, and what its builder knows about how
nodes group into samples:

* ``key_counts``, ``query_counts`` (B,): a batch numbers nodes sample by sample, and no edge
  crosses samples (`GraphBatch.relation`);
* ``key_rows`` (N_dst, K): incremental decoding lists each query's keys as one row, -1 padded;
* ``groups``: incremental decoding with full (or causal) attention, where every query of a group
  attends to all of its group's keys and the keys sit in fixed-width blocks (`DenseGroups`).
  Backends that take edges get them built on first use; ``padded`` reads the blocks in place.

and what its edges say, where the builder knows it (`graphformer.graphs.edge_types` derives an
edge's type from these):

* ``key_positions``, ``query_positions``: each node's position in its sample (relative positions,
  T5 buckets and ALiBi distances are functions of query minus key position);
* ``edge_types`` (E,): an integer type per edge that no position can tell (a tree edge's role, a
  type read from an edges file), and ``edge_features`` (E, F), a float vector per edge.

Layouts that a backend derives from the edges (padded per-sample matrices, block-sparse tiles, a
DGL graph on the compute device) are built on first use and kept in `layouts`, so a
relation reused by every layer of a batch pays for them once. A layout reads the edges only, never
positions or types: `Relation.with_query_positions` shares them between relations that differ there. A DGL graph a relation was read
from (`of_graph`) stays where DGL built it (the CPU for PyPI's DGL); the attention backends read
only the tensors here (the ``dgl`` backend builds its own graph on the compute device when it
needs one there).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DenseGroups:
    """Queries and keys in B equal groups, each query attending to all of its group's keys.

    Query i belongs to group i // queries. Group b owns the key ids b * width + j, j < width, and
    its first ``lengths[b]`` of them are its keys (the rest are unused slots), so a (B * width, H, d)
    key tensor is read as (B, width, H, d) blocks without gathering. ``span`` is the longest
    group's key count (a host int). ``lengths`` (B,) and ``padding`` (B, 1, 1, span), True past a
    group's last key, are None when every group has ``span`` keys.
    """

    queries: int
    width: int
    span: int
    device: torch.device
    lengths: torch.Tensor | None = None
    padding: torch.Tensor | None = None


class Relation:
    """The edges of one attention sub-layer and the layouts derived from them.

    Attributes:
        u, v: (E,) int64 key and query node id of each edge, on the compute device.
        num_keys, num_queries: key (source) and query (destination) nodes.
        key_counts, query_counts: (B,) keys and queries of each sample, when nodes are numbered
            sample by sample and no edge joins two samples; ``None`` if unknown.
        key_rows: (num_queries, K) key ids of each query, -1 past its last key, when the edges
            are listed row by row in this order (`of_rows`, or derived from ``groups``).
        groups: the `DenseGroups` layout of a relation built by `of_groups` (its edges are then
            made only when a backend asks for ``u``/``v``); ``None`` otherwise.
        graph: the DGL graph the edges were read from, where DGL keeps it (may be ``None``).
        num_edges: E, known without building the edges.
        layouts: backend layouts built from the edges, by name (see `layout`).
        verified: every query has a key and no edge is listed twice. graphformer's own relations
            are made so (a graph pool's patterns are checked when it builds them); one made by
            hand is checked by `graphformer.attention.graph_attention` on first use.
        key_positions, query_positions: (num_keys,), (num_queries,) int64 position of each node in
            its sample, or ``None``.
        edge_types: (E,) int64 type id of each edge, or ``None``; edge_features: (E, F) or ``None``.
    """

    def __init__(
        self,
        u: torch.Tensor | None,
        v: torch.Tensor | None,
        num_keys: int,
        num_queries: int,
        key_counts: torch.Tensor | None = None,
        query_counts: torch.Tensor | None = None,
        key_rows: torch.Tensor | None = None,
        graph: object = None,
        groups: DenseGroups | None = None,
        num_edges: int | None = None,
        verified: bool = False,
        key_positions: torch.Tensor | None = None,
        query_positions: torch.Tensor | None = None,
        edge_types: torch.Tensor | None = None,
        edge_features: torch.Tensor | None = None,
    ):
        if u is None and groups is None:
            raise ValueError("a relation needs its edges (u, v) or the dense groups they come from")
        self._u, self._v, self._key_rows = u, v, key_rows  # built from the groups on first use when None
        self.num_keys, self.num_queries = num_keys, num_queries
        self.key_counts, self.query_counts = key_counts, query_counts
        self.graph, self.groups, self.verified = graph, groups, verified
        self.num_edges = len(u) if num_edges is None else num_edges
        self.key_positions, self.query_positions = key_positions, query_positions
        self.edge_types, self.edge_features = edge_types, edge_features
        self.layouts: dict = {}

    def __repr__(self) -> str:
        return f"Relation({self.num_keys} keys -> {self.num_queries} queries, {self.num_edges} edges)"

    @classmethod
    def of_edges(
        cls,
        u: torch.Tensor,
        v: torch.Tensor,
        num_keys: int,
        num_queries: int,
        key_counts: torch.Tensor | None = None,
        query_counts: torch.Tensor | None = None,
        device: torch.device | str | None = None,
        verified: bool = False,
        key_rows: torch.Tensor | None = None,
        **described: torch.Tensor | None,
    ) -> Relation:
        """Key u[i] -> query v[i] for each edge i, the index tensors moved to ``device`` (default:
        where they are); sample counts, key rows and what the edges say (``key_positions``,
        ``query_positions``, ``edge_types``, ``edge_features``) as in the attributes."""
        device = u.device if device is None else device
        counts = [None if c is None else c.to(device) for c in (key_counts, query_counts, key_rows)]
        return cls(
            u.to(device, torch.int64),
            v.to(device, torch.int64),
            num_keys,
            num_queries,
            *counts,
            verified=verified,
            **_on(device, described),
        )

    @classmethod
    def of_graph(
        cls,
        graph,
        key_counts: torch.Tensor | None = None,
        query_counts: torch.Tensor | None = None,
        device: torch.device | str | None = None,
        verified: bool = False,
    ) -> Relation:
        """The relation of a single-relation DGL graph, its index tensors moved to ``device``
        (default: where the graph is). The graph itself stays where it is."""
        u, v = graph.edges()
        device = graph.device if device is None else device
        counts = [None if c is None else c.to(device) for c in (key_counts, query_counts)]
        return cls(
            u.to(device, torch.int64),
            v.to(device, torch.int64),
            graph.num_src_nodes(),
            graph.num_dst_nodes(),
            *counts,
            graph=graph,
            verified=verified,
        )  # int64 whatever DGL's idtype: torch's scatter takes no other

    @classmethod
    def of_rows(cls, key_rows: torch.Tensor, num_keys: int, **described: torch.Tensor | None) -> Relation:
        """Query i attends to the key ids in row i of ``key_rows`` (-1: no key); edges row by row.
        ``described``: node positions (or edge types and features) as `of_edges` takes them."""
        rows, columns = (key_rows >= 0).nonzero(as_tuple=True)
        return cls.of_edges(
            key_rows[rows, columns], rows, num_keys, len(key_rows), key_rows=key_rows, verified=True, **described
        )

    @classmethod
    def of_groups(
        cls,
        num_groups: int,
        queries: int,
        width: int,
        lengths: list[int] | int,
        device: torch.device | str | None = None,
        **described: torch.Tensor | None,
    ) -> Relation:
        """``num_groups`` groups of ``queries`` queries each, group b's queries attending to the key
        ids b * width + j for j < lengths[b] (an int: the same for every group; see `DenseGroups`).
        Edges are listed query by query, keys in increasing order, and built only if a backend
        asks for them. ``described`` as `of_edges` takes it, moved to ``device``: key positions are
        those of all ``num_groups * width`` key ids (unused slots too, never read)."""
        device = torch.device(device or "cpu")
        span = lengths if isinstance(lengths, int) else max(lengths)
        if isinstance(lengths, int) or min(lengths) == span:
            groups = DenseGroups(queries, width, span, device)
            num_edges = num_groups * queries * span
        else:
            counts = torch.tensor(lengths, device=device)
            padding = (torch.arange(span, device=device) >= counts[:, None])[:, None, None]
            groups = DenseGroups(queries, width, span, device, counts, padding)
            num_edges = queries * sum(lengths)
        return cls(
            None,
            None,
            num_groups * width,
            num_groups * queries,
            groups=groups,
            num_edges=num_edges,
            verified=True,
            **_on(device, described),
        )

    @property
    def u(self) -> torch.Tensor:
        """(E,) key node id of each edge (a grouped relation's edges are a layout, made on first use)."""
        return self.layout("edges", _group_edges)[0] if self._u is None else self._u

    @property
    def v(self) -> torch.Tensor:
        """(E,) query node id of each edge."""
        return self.layout("edges", _group_edges)[1] if self._v is None else self._v

    @property
    def key_rows(self) -> torch.Tensor | None:
        if self._key_rows is None and self.groups is not None:
            return self.layout("key rows", _group_rows)
        return self._key_rows

    @property
    def device(self) -> torch.device:
        if self._u is None and self.groups is not None:
            return self.groups.device
        return self._u.device

    def edges(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(u, v): key and query node id of each edge."""
        return self.u, self.v

    def layout(self, name, build: Callable[[Relation], object]):
        """The layout ``name``, built as ``build(self)`` on first use and kept with the relation."""
        if name not in self.layouts:
            self.layouts[name] = build(self)
        return self.layouts[name]

    def with_query_positions(self, query_positions: torch.Tensor) -> Relation:
        """The same edges with the queries at ``query_positions`` (num_queries,). Everything else is
        shared, the layouts included (they are built from the edges alone), so a relation whose
        queries move on step after step (incremental decoding's cross-attention) is built once."""
        moved = copy.copy(self)  # shallow: the edge tensors and the layouts dict are the same objects
        moved.query_positions = query_positions
        return moved

    def restrict_to_destinations(self, active: torch.Tensor) -> Relation:
        """The in-edges of the ``active`` queries ((num_queries,) bool), from all keys to the
        active queries only, renumbered 0..n_active-1 in order. Sample counts, key rows, positions
        and each kept edge's type and features follow."""
        keep = active[self.v]
        new_id = torch.cumsum(active, 0) - 1
        query_counts = key_rows = None
        if self.query_counts is not None:
            sample = self.layout("query_sample", _query_sample)
            query_counts = torch.zeros_like(self.query_counts).index_add_(0, sample, active.to(sample.dtype))
        if self.key_rows is not None:
            key_rows = self.key_rows[active]
        return Relation(
            self.u[keep],
            new_id[self.v[keep]],
            self.num_keys,
            int(active.sum()),
            self.key_counts,
            query_counts,
            key_rows,
            verified=self.verified,
            key_positions=self.key_positions,
            query_positions=None if self.query_positions is None else self.query_positions[active],
            edge_types=None if self.edge_types is None else self.edge_types[keep],
            edge_features=None if self.edge_features is None else self.edge_features[keep],
        )


def _on(device: torch.device | str, described: dict) -> dict:
    """What a relation's nodes and edges say (positions, types, features), moved to ``device``."""
    return {name: None if t is None else t.to(device) for name, t in described.items()}


def _group_rows(relation: Relation) -> torch.Tensor:
    """(num_queries, span) key ids of each query of a grouped relation, -1 past its group's length."""
    groups = relation.groups
    group = torch.arange(relation.num_queries, device=relation.device) // groups.queries
    columns = torch.arange(groups.span, device=relation.device)
    rows = group[:, None] * groups.width + columns
    if groups.lengths is None:
        return rows
    return torch.where(columns < groups.lengths[group][:, None], rows, -1)


def _group_edges(relation: Relation) -> tuple[torch.Tensor, torch.Tensor]:
    rows = relation.key_rows
    queries, columns = (rows >= 0).nonzero(as_tuple=True)
    return rows[queries, columns], queries


def sample_of(counts: torch.Tensor) -> torch.Tensor:
    """(sum(counts),) the sample of each node, for nodes numbered sample by sample with counts[b]
    nodes in sample b."""
    return torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts)


def _query_sample(relation: Relation) -> torch.Tensor:
    """(num_queries,) the sample of each query node."""
    return sample_of(relation.query_counts)


__all__ = ["DenseGroups", "Relation", "sample_of"]
