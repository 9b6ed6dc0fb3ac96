r"""Position-derived edge biases inside FlexAttention's ``score_mod``, from the indices alone.

The flex backend lays a relation's nodes out as one flat sequence (`graphformer.attention.flex`):
query node v is row q_idx = v, key node u is column kv_idx = u, both padded to whole blocks.
FlexAttention calls ``score_mod(score, b, h, q_idx, kv_idx)`` for every pair of the blocks it
computes, so the bias of `graphformer.attention.bias.EdgeBias` is recomputed there from the
two indices:

    r    = qpos[q_idx] - kpos[kv_idx]           query minus key position, two (padded_nodes,) lookups
    t    = derivation.of_offsets(r)             relative clip, T5 bucket (its log too) or |r|
    s'   = s + bias.of_types(t, q_idx, h)       table[t, h], table[q_idx, h, t] or slopes[h] * t

What the closure holds is O(N + table): the two position vectors, one entry per padded node, and
the bias's own table or slopes (Shaw's per-query table padded to the padded query rows). No
query-by-key table of biases or types exists; `captured` lists those tensors, so a test can
check it. Padded rows and columns read position 0: their pairs are in no edge, so the mask
drops whatever they score.

Only biases whose types come from positions can be recomputed so: a type given with each edge
(`graphformer.graphs.edge_types.Given`) lives on the edge list, which the kernel never reads, so
the flex entry of `graphformer.catalog.BACKENDS` lacks "edge-type-bias" (``auto`` passes such
calls to other backends; naming flex for one is a one-line error).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from graphformer.attention.bias import EdgeBias
from graphformer.attention.flex_layout import FlexLayout
from graphformer.errors import UserError
from graphformer.graphs.edge_types import offsets
from graphformer.graphs.relation import Relation


@dataclasses.dataclass(frozen=True)
class FlexBias:
    """An `EdgeBias` ready for the kernel.

    Attributes:
        score_mod: FlexAttention's ``score_mod(score, b, h, q_idx, kv_idx)``, adding the bias (None: none).
        captured: the tensors ``score_mod`` reads: (padded_queries,) and (padded_keys,) int64
            positions, then the table ((T, H) or (padded_queries, H, T)) or the (H,) slopes.
        kernel_key: what a compiled kernel is specialised on beyond the layout's sizes (`kernel_key`).
    """

    score_mod: Callable | None
    captured: tuple[torch.Tensor, ...]
    kernel_key: tuple


NO_BIAS = FlexBias(None, (), None)


def for_kernel(bias, relation: Relation, layout: FlexLayout, dtype: torch.dtype) -> FlexBias:
    """``bias`` (an `EdgeBias` or a `BiasSum`) as a `FlexBias` over ``layout``'s padded nodes, its
    tables or slopes in ``dtype`` (float32 at least: the kernel's scores are float32 for 16-bit
    inputs); `NO_BIAS` for None."""
    if bias is None:
        return NO_BIAS
    if not bias.from_positions:
        raise UserError(
            "the flex attention backend adds only biases derived from positions (relative, t5, alibi): "
            "an edge's given type is not in its block mask; choose the torch or dgl backend, or auto"
        )
    offsets(relation, relation.v[:0], relation.u[:0])  # a relation without positions: its ValueError
    qpos = _padded(relation.query_positions, layout.padded_queries)
    kpos = _padded(relation.key_positions, layout.padded_keys)
    parts = [_ready(part, layout, dtype) for part in bias.parts]  # a BiasSum's parts add up

    def score_mod(score, b, h, q_idx, kv_idx):  # one (query, key, head) at a time, as the kernel asks
        offset, total = qpos[q_idx] - kpos[kv_idx], score
        for part in parts:
            total = total + part.of_types(part.derivation.of_offsets(offset), q_idx, h)
        return total.to(score.dtype)

    values = tuple(part.table if part.slopes is None else part.slopes for part in parts)
    return FlexBias(score_mod, (qpos, kpos, *values), kernel_key(bias))


def _ready(bias: EdgeBias, layout: FlexLayout, dtype: torch.dtype) -> EdgeBias:
    """``bias`` with its table or slopes as the kernel reads them: in ``dtype`` (float32 at least),
    a per-query table padded like the queries."""
    # Detached where no gradient is asked, as the flex backend detaches q, k and v: a captured
    # tensor's requires_grad is part of what a compiled kernel is for, so a model's learned table
    # (a parameter) would otherwise build a second kernel for evaluation.
    field = "table" if bias.slopes is None else "slopes"
    values = getattr(bias, field).to(torch.promote_types(dtype, torch.float32))
    values = values if torch.is_grad_enabled() else values.detach()
    if values.dim() == 3:  # Shaw's table, one row per query node: padded like the queries
        values = _padded(values, layout.padded_queries)
    return dataclasses.replace(bias, **{field: values})


def kernel_key(bias) -> tuple | None:
    """What a compiled kernel adding ``bias`` is specialised on beyond the layout's sizes and the
    dtype: for each of its parts, the derivation (its constants are in the code) and the shape of the
    table or slopes, less a per-query table's rows (the padded query count, already a size). None
    without a bias."""
    if bias is None:
        return None
    return tuple(_part_key(part) for part in bias.parts)


def _part_key(bias: EdgeBias) -> tuple:
    if bias.slopes is not None:
        return (bias.derivation, "slopes", *bias.slopes.shape)
    if bias.table.dim() == 2:
        return (bias.derivation, "table", *bias.table.shape)
    return (bias.derivation, "per-query table", *bias.table.shape[1:])


def learned(bias) -> tuple[torch.Tensor, ...]:
    """The tensors of ``bias`` that may carry gradients (its parts' tables or slopes), none without one."""
    return () if bias is None else tuple(t for p in bias.parts for t in (p.table, p.slopes) if t is not None)


def _padded(x: torch.Tensor, length: int) -> torch.Tensor:
    """(N, ...) -> (length, ...), zeros past N."""
    if len(x) == length:
        return x
    padded = x.new_zeros(length, *x.shape[1:])
    padded[: len(x)] = x
    return padded


__all__ = ["FlexBias", "NO_BIAS", "for_kernel", "kernel_key", "learned"]
