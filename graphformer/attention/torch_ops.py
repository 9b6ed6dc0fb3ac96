r"""Attention as message passing, in plain PyTorch: the same four steps as `.dgl_ops`.

For an edge u -> v (key u, query v) and head h, with d the per-head size:

    s_uv   = q_v . k_u / sqrt(d) + b_uv            src_dot_dst:   gather q[v], k[u]; dot (b: an EdgeBias, or 0)
    m_v    = max_{w -> v} s_wv                     scatter_reduce amax per destination (detached)
    a_uv   = exp(s_uv - m_v)                       scaled_exp
    wv_v   = sum_{u -> v} a_uv * v_u               u_mul_e + sum: index_add_ over destinations
    z_v    = sum_{u -> v} a_uv                     copy_e  + sum: index_add_ over destinations
    out_v  = wv_v / z_v

As in the DGL kernels, the shift by m_v makes the largest numerator exp(0) = 1 (z_v >= 1, no
overflow for any score) and is detached, since softmax does not depend on it. Gathers, scatters
and index_add are ordinary autograd ops, so the backward pass comes for free, and the whole
thing runs wherever PyTorch does: a CUDA build of PyTorch needs no CUDA build of DGL.

Shapes: q (N_dst, H, d), k and v (N_src, H, d), scores and weights (E, H, 1). The (E, H, d)
messages a_uv * v_u are materialised (DGL's fused kernel does not need to).
"""

from __future__ import annotations

import math

import torch

from graphformer.attention.bias import EdgeBias
from graphformer.graphs.relation import Relation


def src_dot_dst(relation: Relation, k: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(E, H, 1) dot product of each edge's source key and destination query."""
    return (k[relation.u] * q[relation.v]).sum(-1, keepdim=True)


def scaled_exp(relation: Relation, scores: torch.Tensor, scale: float, bias: torch.Tensor | None = None):
    """(E, H, 1) softmax numerators exp(scale * s + b - max over the destination's in-edges), with
    ``bias`` b (E, H) or none."""
    scores = scores * scale if bias is None else scores * scale + bias[..., None]
    index = relation.v[:, None, None].expand_as(scores)
    peak = scores.new_full((relation.num_queries, *scores.shape[1:]), float("-inf"))
    peak = peak.scatter_reduce(0, index, scores, "amax").detach()
    return torch.exp(scores - peak[relation.v])


def sum_into_destinations(relation: Relation, messages: torch.Tensor) -> torch.Tensor:
    """(N_dst, ...) sum of each destination's incoming (E, ...) messages."""
    total = messages.new_zeros((relation.num_queries, *messages.shape[1:]))
    return total.index_add(0, relation.v, messages)


def attend(relation: Relation, q, k, v, return_weights: bool = False, bias: EdgeBias | None = None):
    """Same contract as `graphformer.attention.dgl_ops.attend`."""
    b = None if bias is None else bias.per_edge(relation, q.dtype)
    a = scaled_exp(relation, src_dot_dst(relation, k, q), 1.0 / math.sqrt(q.shape[-1]), b)
    wv = sum_into_destinations(relation, a * v[relation.u])
    z = sum_into_destinations(relation, a)
    out = wv / z
    if return_weights:
        return out, a / z[relation.v]
    return out
