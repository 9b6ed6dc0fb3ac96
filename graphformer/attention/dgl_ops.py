r"""Attention as message passing, with DGL's fused sparse kernels.

For an edge u -> v (key u, query v) and head h, with d the per-head size:

    s_uv   = q_v . k_u / sqrt(d) + b_uv                 src_dot_dst   (SDDMM; b: an EdgeBias, or 0)
    a_uv   = exp(s_uv - max_{w -> v} s_wv)              scaled_exp    (SDDMM + SpMM-max)
    wv_v   = sum_{u -> v} a_uv * v_u                    u_mul_e + sum (SpMM)
    z_v    = sum_{u -> v} a_uv                          copy_e  + sum (SpMM)
    out_v  = wv_v / z_v

Subtracting each destination's maximum makes the largest exponent exactly exp(0) = 1, so z_v >= 1
and nothing overflows, for any score. The maximum is a constant shift of softmax, so it is
detached: the gradient of out_v is exactly the gradient of the softmax.

Shapes: q (N_dst, H, d), k and v (N_src, H, d), scores and weights (E, H, 1).

The kernels run where DGL was built for: PyPI's DGL is CPU-only, so on a GPU the ``auto``
backend uses `graphformer.attention.torch_ops`, the same four steps as PyTorch ops. DGL is
imported on first use: where it cannot be (current PyTorch), `runs_on` is False everywhere and
`attend` says why in one line.
"""

from __future__ import annotations

import math
from functools import cache

import torch

from graphformer.attention.bias import EdgeBias
from graphformer.graphs.heterograph import dgl_missing, require_dgl
from graphformer.graphs.relation import Relation


@cache
def _runs_on(device_type: str) -> bool:
    if dgl_missing():
        return False
    if device_type == "cpu":
        return True
    try:  # a DGL built without CUDA raises here; so does a machine without the device
        require_dgl("the dgl backend").graph(([0], [0])).to(device_type)
        return True
    except Exception:  # noqa: BLE001 - DGL raises its own error types, and torch may too
        return False


def missing() -> str | None:
    """Why DGL cannot be imported here, or None."""
    return dgl_missing()


def runs_on(device: torch.device) -> bool:
    """Whether DGL is installed and this build can run its kernels on ``device``."""
    return _runs_on(torch.device(device).type)


def graph_of(relation: Relation):
    """A DGL graph of the relation's edges on the relation's device (the one it came from if
    it is there already, else built once and kept with the relation)."""
    graph = relation.graph
    if graph is not None and graph.device == relation.device:
        return graph
    dgl = require_dgl("the dgl attention backend")
    return relation.layout(
        "dgl",
        lambda r: dgl.heterograph(
            {("key", "attends", "query"): (r.u, r.v)},
            num_nodes_dict={"key": r.num_keys, "query": r.num_queries},
            idtype=torch.int64,
            device=r.device,
        ),
    )


def src_dot_dst(graph, k: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """(E, H, 1) dot product of each edge's source key and destination query."""
    return _ops().u_dot_v(graph, k, q)


def scaled_exp(graph, scores: torch.Tensor, scale: float, bias: torch.Tensor | None = None) -> torch.Tensor:
    """(E, H, 1) softmax numerators exp(scale * s + b - max over the destination's in-edges), with
    ``bias`` b (E, H) in the graph's edge order, or none."""
    scores = scores * scale if bias is None else scores * scale + bias[..., None]
    peak = _ops().copy_e_max(graph, scores).detach()
    return torch.exp(_ops().e_sub_v(graph, scores, peak))


def _ops():
    return require_dgl("the dgl attention backend").ops


def attend(relation: Relation, q, k, v, return_weights: bool = False, bias: EdgeBias | None = None):
    """Multi-head attention of each destination node over its in-edges, each score plus its
    edge's ``bias`` (`graphformer.attention.bias.EdgeBias`) where one is given.

    Returns out (N_dst, H, d), and with ``return_weights`` also the normalised edge weights
    (E, H, 1), which sum to 1 over the in-edges of every destination.
    """
    # The kernels index raw storage: head-split projections must be made contiguous first.
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    require_dgl("the dgl attention backend")
    if not runs_on(q.device):
        raise ValueError(
            f"this DGL build cannot run its kernels on {q.device}; use the torch attention "
            "backend (or auto), or install DGL built for that device"
        )
    graph = graph_of(relation)
    b = None if bias is None else bias.per_edge(relation, q.dtype)  # the graph's edges are the relation's, in order
    a = scaled_exp(graph, src_dot_dst(graph, k, q), 1.0 / math.sqrt(q.shape[-1]), b)
    wv = _ops().u_mul_e_sum(graph, v, a)
    z = _ops().copy_e_sum(graph, a)
    out = wv / z
    if return_weights:
        return out, _ops().e_div_v(graph, a, z)
    return out
