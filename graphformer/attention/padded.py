r"""Graph attention per sample: each sample's edges as one padded, masked dense tile.

In a batch no edge crosses samples: sample b's keys are nodes [k_b, k_b + n_b) and its queries
[q_b, q_b + m_b). Padding every sample to (M, N) = (max m_b, max n_b) turns attention into two
batched matmuls at BLAS speed, masked to the edges:

    S_b = scale * Q_b K_b^T,   S_b[i, j] = -inf where there is no edge j -> i
    out_b = softmax(S_b) V_b                                   (B, H, M, N) work in all

Only attention is padded: projections and feed-forward layers still run on the real nodes alone.
With length-bucketed batches of short sentences padding is small, so this is the fastest backend
for training; for long sequences with local patterns (most of the tile empty) ``blocked`` is.

A graph knows which nodes belong to which sample only if whoever built it said so: a
`graphformer.graphs.GraphBatch` for its relations (`mark_segments`), incremental
decoding for its per-step graphs (`Segments.of_rows`). Any other graph (the Universal
Transformer's subgraphs of active nodes) falls back to the DGL kernels.
"""
from __future__ import annotations

import math

import torch

from graphformer.attention import dgl_ops


class Segments:
    """Samples as rows of a padded layout.

    Attributes:
        key_index: (B, N) key node ids of each sample, -1 past its last key.
        query_slot: (N_dst,) where each query node sits in the (B * M) padded queries.
        key_gather: ``key_index`` with -1 read as node 0 (its scores are masked out).
        no_edge: (B, 1, M, N) True where no edge joins the padded query and key (padding rows,
            which have no edges at all, are left unmasked so their softmax stays finite).
        edge_at: (sample, query index, key index) of each edge, to read per-edge weights.
    """

    def __init__(self, key_index: torch.Tensor, query_slot: torch.Tensor, max_queries: int,
                 mask: torch.Tensor, edge_at: tuple):
        self.key_index, self.query_slot, self.max_queries = key_index, query_slot, max_queries
        self.key_gather = key_index.clamp(min=0)
        # Rows without keys (padding) attend to everything: finite, and their outputs are dropped.
        self.no_edge = ~(mask | ~mask.any(-1, keepdim=True))[:, None]
        self.edge_at = edge_at

    @classmethod
    def of_batch(cls, u, v, key_counts: torch.Tensor, query_counts: torch.Tensor) -> "Segments":
        """Keys and queries numbered sample by sample, ``counts`` of each per sample."""
        key_sample, key_pos = _sample_and_index(key_counts)
        query_sample, query_pos = _sample_and_index(query_counts)
        if bool((key_sample[u] != query_sample[v]).any()):
            raise ValueError("an edge joins two samples; padded attention needs per-sample edges")
        size, n, m = len(key_counts), max(int(key_counts.max()), 1), max(int(query_counts.max()), 1)
        first = torch.cumsum(key_counts, 0) - key_counts
        columns = torch.arange(n, device=u.device)
        key_index = torch.where(columns < key_counts[:, None], first[:, None] + columns, -1)
        edge_at = (query_sample[v], query_pos[v], key_pos[u])
        mask = torch.zeros(size, m, n, dtype=torch.bool, device=u.device)
        mask[edge_at] = True
        return cls(key_index, query_sample * m + query_pos, m, mask, edge_at)

    @classmethod
    def of_rows(cls, key_index: torch.Tensor) -> "Segments":
        """One query per row, attending to exactly the row's keys (edges listed row by row)."""
        mask = key_index >= 0
        edge_at = mask.nonzero(as_tuple=True)
        rows = torch.arange(len(key_index), device=key_index.device)
        return cls(key_index, rows, 1, mask[:, None], (edge_at[0], torch.zeros_like(edge_at[0]), edge_at[1]))

    def edges(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(u, v) of a graph with these segments (for `of_rows` layouts)."""
        sample, _, column = self.edge_at
        return self.key_index[sample, column], self.query_slot[sample]


def _sample_and_index(counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For nodes numbered sample by sample: each node's sample and its index inside the sample."""
    sample = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts)
    first = torch.cumsum(counts, 0) - counts
    return sample, torch.arange(len(sample), device=counts.device) - first[sample]


def mark_segments(graph, key_counts: torch.Tensor, query_counts: torch.Tensor) -> None:
    """Tell ``graph`` (one relation of a batch) how many keys and queries each sample has."""
    graph._graphformer_counts = (key_counts.to(graph.device), query_counts.to(graph.device))


def segments_of(graph) -> Segments | None:
    cached = getattr(graph, "_graphformer_segments", None)
    counts = getattr(graph, "_graphformer_counts", None)
    if cached is None and counts is not None:
        u, v = graph.edges()
        cached = graph._graphformer_segments = Segments.of_batch(u, v, *counts)
    return cached


def worth_it(graph, max_waste: float = 4.0) -> bool:
    """Whether ``graph`` has a per-sample layout whose padded tiles hold at most ``max_waste``
    slots per edge (dense patterns on similar lengths: yes; a window over long sequences: no).
    Decided once per graph: the counts may live on a GPU, and reading them waits for it."""
    decided = getattr(graph, "_graphformer_padded_pays", None)
    if decided is not None:
        return decided
    counts = getattr(graph, "_graphformer_counts", None)
    seg = getattr(graph, "_graphformer_segments", None)
    if graph.num_edges() == 0 or (counts is None and seg is None):
        decided = False
    elif counts is not None:
        keys, queries = counts
        decided = len(keys) * int(keys.max()) * int(queries.max()) <= max_waste * graph.num_edges()
    else:
        decided = seg.key_index.numel() * seg.max_queries <= max_waste * graph.num_edges()
    graph._graphformer_padded_pays = decided
    return decided


def _gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(nodes, H, D) -> (B, H, N, D) rows of ``index`` (B, N)."""
    return x[index].transpose(1, 2)


def attend(graph, q, k, v, return_weights: bool = False):
    """Same contract as `graphformer.attention.dgl_ops.attend`."""
    seg = segments_of(graph) if graph.num_edges() else None
    if seg is None:
        return dgl_ops.attend(graph, q, k, v, return_weights=return_weights)
    size, m = len(seg.key_index), seg.max_queries
    if m == 1 and len(q) == size:  # one query per row (decoding): nothing to pad
        Q = q[:, :, None]
    else:
        Q = q.new_zeros(size * m, *q.shape[1:])
        Q[seg.query_slot] = q
        Q = Q.view(size, m, *q.shape[1:]).transpose(1, 2)
    K, V = _gather(k, seg.key_gather), _gather(v, seg.key_gather)
    scores = (Q @ K.transpose(-1, -2)).mul_(1.0 / math.sqrt(q.shape[-1])).masked_fill_(seg.no_edge, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    out = (weights @ V).transpose(1, 2).reshape(-1, *q.shape[1:])[seg.query_slot]
    if return_weights:
        b, i, j = seg.edge_at
        return out, weights.permute(0, 2, 3, 1)[b, i, j][..., None]
    return out
