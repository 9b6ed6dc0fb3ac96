r"""How one attention sub-layer uses its edges' types: the modules of `graphformer.catalog.EDGE_USES`.

For an edge u -> v (key u, query v) of type t = t_uv (`graphformer.graphs.edge_types`) and head h,
attention computes

    s_uvh = q_vh . k_uh / sqrt(d) + b_uvh                  w_uvh = softmax over v's in-edges of s_uvh
    o_vh  = sum_u w_uvh (v_uh + c_uvh)

and each use adds its part of b (the score bias) or c (the value term):

    bias    b = B[t, h]                        B (T, H) learned, zero at first (T5, Graphormer)
    alibi   b = -m_h |i - j|                   m_h fixed: 2^(-8h/H) for H a power of two (Press et al.)
    shaw    b = q_vh . a^K_th / sqrt(d)        a^K, a^V (T, H, d) learned (Shaw et al., 2018, eq. 3-4)
            c = a^V_th
    features  b = q_vh . (W^K f_uv)_h / sqrt(d)  W^K, W^V (F -> H x d) learned, f_uv the edge's F features
            c = (W^V f_uv)_h                   (given:T,F): k_u + W^K f_uv, v_u + W^V f_uv as PyG's edge_dim

The score part is an `graphformer.attention.bias.EdgeBias` that every biased backend adds inside
its softmax; the value part, sum_u w_uvh a^V_{t_uv}h, needs the normalised weights, so a sub-layer
with one asks attention for them. `EdgeEncoding` holds a sub-layer's uses and runs attention with them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from graphformer.attention import EdgeBias, graph_attention
from graphformer.attention.bias import summed
from graphformer.attention.torch_ops import sum_into_destinations
from graphformer.catalog import EDGE_USES
from graphformer.graphs.edge_types import edge_types


class EdgeUse(nn.Module):
    """A use of one derivation's type ids: a score bias, a value term, or both (a subclass says).

    Its parameters start at zero, so that a model starts as the one without edge information
    (`graphformer.model.layers.xavier_init` leaves a module with ``initialises_itself`` alone)."""

    initialises_itself = True
    adds_values = False  # whether `values` gives a term, for which attention must return its weights

    def __init__(self, derivation, heads: int, d_head: int):
        super().__init__()
        self.derivation, self.heads, self.d_head = derivation, heads, d_head

    def score(self, relation, q: torch.Tensor) -> EdgeBias | None:
        """The bias this use adds to the scores of ``relation``'s edges, given the (N_dst, H, d) queries."""
        return None

    def values(self, relation, weights: torch.Tensor) -> torch.Tensor:
        """(N_dst, H, d) sum_u w_uv c_uv, from the (E, H, 1) normalised weights."""
        raise NotImplementedError


class ScoreBias(EdgeUse):
    """``bias``: a learned scalar B[t, h] per type and head, zero at first (attention starts unbiased)."""

    def __init__(self, derivation, heads: int, d_head: int):
        super().__init__(derivation, heads, d_head)
        self.table = nn.Parameter(torch.zeros(derivation.num_types, heads))

    def score(self, relation, q: torch.Tensor) -> EdgeBias:
        return EdgeBias(self.derivation, table=self.table)


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi's head slopes m_1..m_H (Press et al., 2022): 2^(-8i/H) for i = 1..H when H is a power
    of two; otherwise the slopes of the closest smaller power of two P, then every other slope of
    2P heads (the ones between) until H are given."""
    power = 2 ** math.floor(math.log2(heads))
    ours = [2 ** (-8 * i / power) for i in range(1, power + 1)]
    if power == heads:
        return ours
    return ours + alibi_slopes(2 * power)[0::2][: heads - power]


class AlibiSlopes(EdgeUse):
    """``alibi``: b = -m_h |i - j|, fixed (no parameter; a non-persistent buffer moves with the model)."""

    def __init__(self, derivation, heads: int, d_head: int):
        super().__init__(derivation, heads, d_head)
        self.register_buffer("slopes", -torch.tensor(alibi_slopes(heads)), persistent=False)

    def score(self, relation, q: torch.Tensor) -> EdgeBias:
        return EdgeBias(self.derivation, slopes=self.slopes)


class ShawVectors(EdgeUse):
    """``shaw``: learned key vectors a^K_t and value vectors a^V_t, (T, H, d) each, zero at first."""

    adds_values = True

    def __init__(self, derivation, heads: int, d_head: int):
        super().__init__(derivation, heads, d_head)
        self.keys = nn.Parameter(torch.zeros(derivation.num_types, heads, d_head))
        self.vals = nn.Parameter(torch.zeros(derivation.num_types, heads, d_head))

    def score(self, relation, q: torch.Tensor) -> EdgeBias:
        # One row per query: q_v . a^K_t / sqrt(d) for every type t, (N_dst, H, T); the edge reads its t.
        table = torch.einsum("nhd,thd->nht", q, self.keys.to(q.dtype)) / math.sqrt(self.d_head)
        return EdgeBias(self.derivation, table=table)

    def values(self, relation, weights: torch.Tensor) -> torch.Tensor:
        per_edge = weights * self.vals.to(weights.dtype)[edge_types(relation, self.derivation)]  # (E, H, d)
        return sum_into_destinations(relation, per_edge)


class FeatureMaps(EdgeUse):
    """``features``: learned maps W^K and W^V of each edge's F features, (F, H, d) each, zero at
    first; the relation carries the (E, F) features (`graphformer.graphs.sample_types`, given:T,F)."""

    adds_values = True

    def __init__(self, derivation, heads: int, d_head: int):
        super().__init__(derivation, heads, d_head)
        self.width = derivation.features
        self.keys = nn.Parameter(torch.zeros(self.width, heads, d_head))
        self.vals = nn.Parameter(torch.zeros(self.width, heads, d_head))

    def mapped(self, relation, weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(E, H, d) W f_uv for every edge of ``relation``; a ValueError where its features are
        missing or of another width than the model's."""
        features = relation.edge_features
        if features is None or features.shape[1] != self.width:
            has = "no edge features" if features is None else f"edge features of width {features.shape[1]}"
            raise ValueError(
                f"{relation} carries {has}, but its features use maps {self.width} per edge (given:T,{self.width})"
            )
        return torch.einsum("ef,fhd->ehd", features.to(dtype), weight.to(dtype))

    def score(self, relation, q: torch.Tensor) -> EdgeBias:
        keys = self.mapped(relation, self.keys, q.dtype)
        return EdgeBias(self.derivation, values=(q[relation.v] * keys).sum(-1) / math.sqrt(self.d_head))

    def values(self, relation, weights: torch.Tensor) -> torch.Tensor:
        return sum_into_destinations(relation, weights * self.mapped(relation, self.vals, weights.dtype))


class EdgeEncoding(nn.Module):
    """The uses of one attention sub-layer's edges (the terms of its ``--*-edges`` spec,
    `graphformer.model.edge_spec.EdgeTerm`), each an EDGE_USES module."""

    def __init__(self, terms, heads: int, d_head: int):
        super().__init__()
        self.uses = nn.ModuleList(EDGE_USES[t.use](t.derivation(), heads, d_head) for t in terms)

    def attend(self, relation, q, k, v, backend: str, name: str) -> torch.Tensor:
        """(N_dst, H, d) attention over ``relation`` with every use's bias and value term."""
        biases = [b for use in self.uses if (b := use.score(relation, q)) is not None]
        bias = summed(biases)
        valued = [use for use in self.uses if use.adds_values]
        if not valued:
            return graph_attention(relation, q, k, v, backend, name=name, bias=bias)
        out, weights = graph_attention(relation, q, k, v, backend, return_weights=True, name=name, bias=bias)
        return out + sum(use.values(relation, weights) for use in valued)


def attend(edges: EdgeEncoding | None, relation, q, k, v, backend: str, name: str) -> torch.Tensor:
    """A layer's attention: with its ``edges`` uses where it has some, else plain `graph_attention`."""
    if edges is None:
        return graph_attention(relation, q, k, v, backend, name=name)
    return edges.attend(relation, q, k, v, backend, name)


def edge_encoding(terms, heads: int, d_model: int) -> EdgeEncoding | None:
    """The `EdgeEncoding` of a sub-layer's terms, or None without any (the layer keeps its parameters)."""
    return EdgeEncoding(terms, heads, d_model // heads) if terms else None


__all__ = [
    "EdgeUse",
    "ScoreBias",
    "AlibiSlopes",
    "ShawVectors",
    "FeatureMaps",
    "alibi_slopes",
    "EdgeEncoding",
    "attend",
]
