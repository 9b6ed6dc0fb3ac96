"""The edge list every attention pattern and graph builder returns."""

from __future__ import annotations

import torch

# (u, v): (E,) int64 key node ids and (E,) int64 query node ids; edge i carries messages u[i] -> v[i].
EdgeList = tuple[torch.Tensor, torch.Tensor]
