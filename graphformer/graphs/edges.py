"""The edge list every attention pattern and graph builder returns."""

from __future__ import annotations

import torch

# (u, v): (E,) int64 key node ids and (E,) int64 query node ids; edge i carries messages u[i] -> v[i].
EdgeList = tuple[torch.Tensor, torch.Tensor]


def unique_pairs(u: torch.Tensor, v: torch.Tensor, width: int) -> EdgeList:
    """The edges (u, v) with each pair once, sorted by query, then key; ``width``: more than any key id.
    An edge given twice would count twice in an edge-wise softmax (and once in a dense mask)."""
    ids = torch.unique(v * width + u)
    return ids % width, ids // width
