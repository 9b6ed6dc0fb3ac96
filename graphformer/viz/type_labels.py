r"""The edge types of a recorded map: which type each edge of the sample has, and what each type is called.

A sub-layer whose model uses its edges' types (``--enc-edges bias=role``, ``shaw=relative:8``) has
one type id per edge under each derivation (`graphformer.graphs.edge_types`). A recording keeps,
per derivation, the ids as a dense (queries, keys) matrix beside the weights (-1: no edge), and a
name per id for the legend:

    role, hops:K, given:T   the derivation's own names (`graphformer.graphs.sample_types`); given
                            types read from an edges file take the names of its names file
    relative:K              offset -3, with the clipped ends  offset <=-K  and  offset >=K
    t5:B,D                  the offsets each bucket holds: offset 8..11, offset >=64
    distance                |offset| 5, one per distance present

where offset = query position - key position. Types that stand for a span of one quantity (an
offset, a distance, hops) keep that span too, ``ranges[t] = (low, high)`` (±inf for an open end):
a picture with more types than a legend can list joins neighbouring ones into a few spans.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from graphformer.graphs.edge_types import Distance, Relative, T5Buckets
from graphformer.graphs.sample_types import Hops


@dataclass
class EdgeTypeMap:
    """One derivation's edge types over one sample's map.

    Attributes:
        spec: the types as the command line writes them, e.g. ``role`` or ``relative:8``.
        ids: (queries, keys) int64 type id of each edge, -1 where there is no edge.
        names: a name per type id, e.g. ``parent-child`` or ``offset -3``.
        ranges: for types that are spans of one quantity, ``(low, high)`` per id (NaN for an id no
            edge can have); ``None`` for types without an order (roles, given types).
        quantity: what the ranges measure (``offset``, ``|offset|``, ``hops``), or ``None``.
    """

    spec: str
    ids: np.ndarray
    names: list
    ranges: list | None = None
    quantity: str | None = None

    def as_record(self) -> dict:
        """Plain values for a recording (`torch.load(weights_only=True)` reads them back)."""
        return {
            "spec": self.spec,
            "ids": torch.as_tensor(self.ids, dtype=torch.int64),
            "names": list(self.names),
            "ranges": None if self.ranges is None else [list(map(float, r)) for r in self.ranges],
            "quantity": self.quantity,
        }

    @classmethod
    def of_record(cls, entry: dict) -> EdgeTypeMap:
        ranges = entry.get("ranges")
        return cls(
            entry["spec"],
            np.asarray(entry["ids"], dtype=np.int64),
            list(entry["names"]),
            None if ranges is None else [tuple(r) for r in ranges],
            entry.get("quantity"),
        )


def span_name(quantity: str, low: float, high: float) -> str:
    """``offset -3``, ``offset 8..11``, ``offset >=64``, ``offset <=-8``: a span of ``quantity``."""
    if math.isinf(high):
        return f"{quantity} ≥{low:g}"
    if math.isinf(low):
        return f"{quantity} ≤{high:g}"
    return f"{quantity} {low:g}" if low == high else f"{quantity} {low:g}..{high:g}"


def t5_ranges(buckets: T5Buckets) -> list[tuple[float, float]]:
    """The offsets each T5 bucket holds, read off the derivation itself at every offset up to one
    past ``max_distance`` (the last bucket of each side is reached before it, and holds every
    offset beyond): a bucket holding that outermost offset is open on its side."""
    reach = buckets.max_distance + 1
    offsets = torch.arange(-reach, reach + 1)
    ids = buckets.of_offsets(offsets)
    ranges = []
    for t in range(buckets.num_types):
        held = offsets[ids == t]
        if not len(held):
            ranges.append((math.nan, math.nan))  # a bucket the log rounds past: no edge has it
            continue
        low, high = float(held.min()), float(held.max())
        ranges.append((-math.inf if low == -reach else low, math.inf if high == reach else high))
    return ranges


def ordered_types(derivation, ids: np.ndarray) -> tuple[list, str] | None:
    """(ranges, quantity) of a derivation whose types are spans of one quantity; None otherwise."""
    if isinstance(derivation, Relative):
        k = derivation.clip
        return [(-math.inf if r == -k else r, math.inf if r == k else r) for r in range(-k, k + 1)], "offset"
    if isinstance(derivation, T5Buckets):
        return t5_ranges(derivation), "offset"
    if isinstance(derivation, Distance):
        return [(d, d) for d in range(int(ids.max(initial=0)) + 1)], "|offset|"
    if isinstance(derivation, Hops):
        return [(h, h) for h in range(derivation.clip + 1)] + [(derivation.clip + 1, math.inf)], "hops"
    return None


def describe(derivation, spec: str, ids: np.ndarray, names: list[str] | None = None) -> EdgeTypeMap:
    """The `EdgeTypeMap` of ``ids`` (queries, keys; -1: no edge) under ``derivation``, written
    ``spec``; ``names``, where given (a names file's), name the ids in place of the derivation's."""
    ordered = ordered_types(derivation, ids)
    ranges, quantity = ordered if ordered is not None else (None, None)
    if names is None:
        names = getattr(derivation, "names", None)
    if names is None and ranges is not None:
        names = [span_name(quantity, *r) if not math.isnan(r[0]) else f"bucket {t}" for t, r in enumerate(ranges)]
    if names is None:  # a plugin's derivation that names nothing
        count = getattr(derivation, "num_types", None) or int(ids.max(initial=0)) + 1
        names = [f"type {t}" for t in range(count)]
    return EdgeTypeMap(spec, ids, list(names), ranges, quantity)


__all__ = ["EdgeTypeMap", "describe", "span_name", "t5_ranges", "ordered_types"]
