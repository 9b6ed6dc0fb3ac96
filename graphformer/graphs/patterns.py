"""Attention patterns: which key tokens each query token may attend to.

A pattern is a function ``(num_keys, num_queries) -> (u, v)`` returning two int64 tensors of
equal length: edge ``u[i] -> v[i]`` lets query ``v[i]`` attend to key ``u[i]``. For self-attention
``num_keys == num_queries``. The three patterns of the original Transformer:

    full(n, n)      every token sees every token               n^2 edges (self-loops included)
    causal(m, m)    target j sees targets 0..j (i -> j iff i <= j)   m(m+1)/2 edges
    full(n, m)      every target sees every source              n*m edges
"""
from __future__ import annotations

from typing import Callable

import torch

EdgeList = tuple[torch.Tensor, torch.Tensor]
Pattern = Callable[[int, int], EdgeList]


def full(num_keys: int, num_queries: int) -> EdgeList:
    """Every query attends to every key."""
    u = torch.arange(num_keys).repeat(num_queries)
    v = torch.arange(num_queries).repeat_interleave(num_keys)
    return u, v


def causal(num_keys: int, num_queries: int) -> EdgeList:
    """Query j attends to keys 0..j: the decoder never sees a later target token."""
    if num_keys != num_queries:
        raise ValueError("the causal pattern is for self-attention: keys and queries must match")
    u, v = torch.tril_indices(num_queries, num_queries)  # row = query, column = key
    return v, u
