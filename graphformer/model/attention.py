r"""Multi-head attention split into the node functions around message passing.

    pre:   q = x_dst W_q + b_q,  k = x_src W_k + b_k,  v = x_src W_v + b_v   (each split into H heads)
    edges: o = graph_attention(graph, q, k, v)                              (see graphformer.attention)
    post:  y = concat_h(o_h) W_o + b_o

W_q, W_k, W_v are stacked in one (3 d_model, d_model) matrix, the layout of
``torch.nn.MultiheadAttention.in_proj_weight``: self-attention projects all three in one matmul.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from graphformer.attention import check_backend


class BackendChoice:
    """A model's ``attention_backend`` attribute, checked when set: ``model.attention_backend =
    "torch"`` with a name that is no backend fails there, not at the next forward pass."""

    def __set_name__(self, owner, name: str):
        self.slot = "_" + name

    def __get__(self, model, owner=None):
        return self if model is None else model.__dict__[self.slot]

    def __set__(self, model, name: str):
        model.__dict__[self.slot] = check_backend(name)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, heads: int):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by the number of heads ({heads})")
        self.d_model, self.heads, self.d_head = d_model, heads, d_model // heads
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(x.shape[0], self.heads, self.d_head)

    def qkv(self, x: torch.Tensor):
        """(N, d_model) -> q, k, v each (N, H, d_head): self-attention in one matmul."""
        q, k, v = self.in_proj(x).chunk(3, dim=-1)
        return self._split(q), self._split(k), self._split(v)

    def q(self, x: torch.Tensor) -> torch.Tensor:
        """(N_dst, d_model) -> (N_dst, H, d_head) queries only (cross-attention, decoding)."""
        d = self.d_model
        return self._split(F.linear(x, self.in_proj.weight[:d], self.in_proj.bias[:d]))

    def kv(self, x: torch.Tensor):
        """(N_src, d_model) -> k, v each (N_src, H, d_head) (cross-attention memory)."""
        d = self.d_model
        k, v = F.linear(x, self.in_proj.weight[d:], self.in_proj.bias[d:]).chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def out(self, o: torch.Tensor) -> torch.Tensor:
        """(N, H, d_head) attention output -> (N, d_model)."""
        return self.out_proj(o.reshape(o.shape[0], self.d_model))
