r"""What an edge says: an integer type per edge, derived from where its ends sit or given with it.

Attention reads an edge's type through a table (`graphformer.attention.bias.EdgeBias`), so a type
is an id in ``range(num_types)``. A *derivation* says how an edge gets its id:

* from positions, for any pattern, sample graph or union of them. With offset r = i - j, query
  position i minus key position j (for cross-attention, target minus source position):

      relative:K     id = clip(r, -K, K) + K                       2K + 1 types   (Shaw et al., 2018)
      t5:B:D         id = T5's log bucket of r, B buckets, exact below B/4 (B/2 one-sided), log up to D
      distance       id = |r|                                      unbounded     (ALiBi's distance)

* given with the edges, where no position can tell (`Given`): the role of an edge in a parse
  tree, a type column of an edges file, a tensor passed from Python. The relation carries them as
  ``edge_types``.

A derivation from positions is an elementwise function of index tensors (`of_offsets`), so the same
code gives the (E,) ids of a relation's edges and, inside FlexAttention's ``score_mod``, the id of
one (query, key) pair, with no query-by-key table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from graphformer.graphs.relation import Relation


@dataclass(frozen=True)
class Relative:
    """Clipped relative position: offsets beyond ``clip`` share the last id on their side."""

    clip: int

    @property
    def num_types(self) -> int:
        return 2 * self.clip + 1

    def of_offsets(self, offset: torch.Tensor) -> torch.Tensor:
        return offset.clamp(-self.clip, self.clip) + self.clip


@dataclass(frozen=True)
class T5Buckets:
    r"""T5's relative position buckets (Raffel et al., 2020). With n = |r| and, when
    ``bidirectional``, half the buckets for each sign of r (keys after the query: upper half):

        id = n                                                  n < exact = buckets / 2
        id = min(exact + floor(log(n / exact) / log(D / exact) * (buckets - exact)), buckets - 1)

    where ``buckets`` is the count per side. One-sided (``bidirectional`` False, a causal decoder),
    keys after the query (r < 0) fall in bucket 0 with the query itself.
    """

    buckets: int
    max_distance: int
    bidirectional: bool = True

    def __post_init__(self):
        # What the formula needs: at least one exact bucket (exact = B/4, or B/2 one-sided, >= 1; else it
        # divides by log(D / 0)), every bucket reachable (an odd B split in two leaves the last one out),
        # and a log range that grows (D > exact: log(D / exact) > 0, else the far ids are NaN or below exact).
        share = 4 if self.bidirectional else 2  # exact = B / share
        exact, spec = self.buckets // share, f"t5:{self.buckets},{self.max_distance}"
        if self.bidirectional and self.buckets % 2:
            raise ValueError(f"{spec}: B must be even, half the buckets for keys on each side of the query")
        if exact < 1:
            raise ValueError(f"{spec}: B must be at least {share} here: B/{share} buckets hold one offset each")
        if self.max_distance <= exact:
            raise ValueError(
                f"{spec}: D must exceed B/{share} = {exact}, the offsets with a bucket each; the log buckets span "
                "from there to D"
            )

    @property
    def num_types(self) -> int:
        return self.buckets

    def of_offsets(self, offset: torch.Tensor) -> torch.Tensor:
        side, base = self.buckets, torch.zeros_like(offset)
        if self.bidirectional:
            side //= 2
            base = (offset < 0).to(offset.dtype) * side
            n = offset.abs()
        else:
            n = offset.clamp(min=0)
        exact = side // 2
        # float64: a bucket boundary (n = 16 of D = 128, 16 buckets) must not round below its integer.
        far = torch.log(n.clamp(min=1).double() / exact) / math.log(self.max_distance / exact) * (side - exact)
        far = (exact + far.to(offset.dtype)).clamp(max=side - 1)
        return base + torch.where(n < exact, n, far)


@dataclass(frozen=True)
class Distance:
    """|r|, unbounded: ALiBi multiplies it by a fixed slope per head instead of reading a table."""

    @property
    def num_types(self) -> None:
        return None

    def of_offsets(self, offset: torch.Tensor) -> torch.Tensor:
        return offset.abs()


@dataclass(frozen=True)
class Given:
    """Ids that come with the edges (``relation.edge_types``), each below ``num_types``."""

    num_types: int


def offsets(relation: Relation, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Query position minus key position for query nodes ``queries`` and key nodes ``keys``
    (index tensors of one broadcastable shape)."""
    if relation.query_positions is None or relation.key_positions is None:
        raise ValueError(
            f"{relation} has no node positions, and a relative position needs them; build it with "
            "key_positions= and query_positions= (a batch's relations have them)"
        )
    return relation.query_positions[queries] - relation.key_positions[keys]


def edge_types(relation: Relation, derivation) -> torch.Tensor:
    """(E,) int64 type id of each edge of ``relation`` under ``derivation``."""
    if isinstance(derivation, Given):
        if relation.edge_types is None:
            raise ValueError(f"{relation} carries no edge types; give edge_types= when building it")
        return relation.edge_types
    return derivation.of_offsets(offsets(relation, relation.v, relation.u))


__all__ = ["Relative", "T5Buckets", "Distance", "Given", "offsets", "edge_types"]
