r"""Edge biases: what an edge's type adds to its attention score.

Every backend computes, for an edge u -> v (key u, query v) and head h,

    s_uvh = q_vh . k_uh / sqrt(d) + b_uvh

and the softmax over v's in-edges as before. An `EdgeBias` says what b is. With t = t_uv, the
edge's type id (`graphformer.graphs.edge_types`: given with the edge or derived from positions),
it is one of

    table (T, H)           b = table[t, h]               a learned scalar per type and head (T5, Graphormer)
    table (N_dst, H, T)    b = table[v, h, t]            one row per query: Shaw's q_v . a_t / sqrt(d)
    slopes (H,)            b = slopes[h] * t             fixed per head, linear in t (ALiBi: -m_h |i - j|)
    values (E, H)          b = values[e, h]              one value per edge, in the relation's edge order:
                                                         a map of its features, q_v . W_k f_uv / sqrt(d)

Several uses on one relation add up: a `BiasSum` of parts is a bias too, and a backend that reads
more than ``per_edge`` and ``score`` (a kernel's own parameters) handles each of its ``parts``.

`score` computes b from index tensors elementwise, so the same function serves every edge of a
relation at once (`per_edge`) and one (query, key, head) at a time inside FlexAttention's
``score_mod``, where a derived type is recomputed from the two positions instead of read from a
query-by-key table.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphformer.graphs.edge_types import Given, edge_types, offsets
from graphformer.graphs.relation import Relation


@dataclass(frozen=True)
class EdgeBias:
    """b[e, h] for the edges of one relation, as the module docstring defines it.

    Attributes:
        derivation: how an edge's type id is found (`graphformer.graphs.edge_types`).
        table: (T, H) or (N_dst, H, T) biases by type (and query).
        slopes: (H,) per-head factor of the type id.
        values: (E, H) the bias of each edge itself, with a `Given` derivation (it lives on the edges).
    """

    derivation: object
    table: torch.Tensor | None = None
    slopes: torch.Tensor | None = None
    values: torch.Tensor | None = None

    def __post_init__(self):
        if sum(x is not None for x in (self.table, self.slopes, self.values)) != 1:
            raise ValueError("an EdgeBias takes a table, slopes or values, exactly one")
        if self.values is not None and self.from_positions:
            raise ValueError("an EdgeBias with values per edge lives on the edges: give it a Given derivation")

    @property
    def from_positions(self) -> bool:
        """Whether the type is a function of the two ends' positions (FlexAttention can
        recompute it from the indices; a given type lives only on the edge)."""
        return not isinstance(self.derivation, Given)

    @property
    def parts(self) -> tuple[EdgeBias, ...]:
        """The single biases this one adds up: itself."""
        return (self,)

    @property
    def capability(self) -> str:
        """What a backend must be able to do to add this bias (a capability of
        `graphformer.catalog.BACKENDS`)."""
        return "position-bias" if self.from_positions else "edge-type-bias"

    def of_types(self, types: torch.Tensor, queries: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """b for type ids ``types`` at query nodes ``queries`` and heads ``heads`` (broadcastable)."""
        if self.slopes is not None:
            return self.slopes[heads] * types
        if self.table.dim() == 2:
            return self.table[types, heads]
        return self.table[queries, heads, types]

    def score(self, relation: Relation, queries: torch.Tensor, keys: torch.Tensor, heads: torch.Tensor):
        """b for query nodes ``queries``, key nodes ``keys`` and ``heads`` (broadcastable index
        tensors) of a relation whose types come from positions."""
        types = self.derivation.of_offsets(offsets(relation, queries, keys))
        return self.of_types(types, queries, heads)

    def per_edge(self, relation: Relation, dtype: torch.dtype) -> torch.Tensor:
        """(E, H) bias of every edge of ``relation``, in its edge order, as ``dtype``."""
        if self.values is not None:
            return self.values.to(dtype)
        types = edge_types(relation, self.derivation)
        heads = torch.arange(self.num_heads, device=types.device)
        return self.of_types(types[:, None], relation.v[:, None], heads[None]).to(dtype)

    @property
    def num_heads(self) -> int:
        if self.values is not None:
            return self.values.shape[1]
        if self.slopes is not None:
            return len(self.slopes)
        return self.table.shape[-1] if self.table.dim() == 2 else self.table.shape[1]


@dataclass(frozen=True)
class BiasSum:
    """Several `EdgeBias` of one relation as one: b = the sum of theirs (the interface backends call)."""

    parts: tuple[EdgeBias, ...]

    @property
    def from_positions(self) -> bool:
        return all(p.from_positions for p in self.parts)

    @property
    def capability(self) -> str:
        return "position-bias" if self.from_positions else "edge-type-bias"

    @property
    def num_heads(self) -> int:
        return self.parts[0].num_heads

    def per_edge(self, relation: Relation, dtype: torch.dtype) -> torch.Tensor:
        return sum(p.per_edge(relation, dtype) for p in self.parts)

    def score(self, relation: Relation, queries: torch.Tensor, keys: torch.Tensor, heads: torch.Tensor):
        return sum(p.score(relation, queries, keys, heads) for p in self.parts)


def summed(biases: list[EdgeBias]) -> EdgeBias | BiasSum | None:
    """None, the one bias, or their `BiasSum`."""
    return None if not biases else biases[0] if len(biases) == 1 else BiasSum(tuple(biases))


__all__ = ["EdgeBias", "BiasSum", "summed"]
