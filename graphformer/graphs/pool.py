"""The graph pool: one heterograph per (source length, target length), built on demand.

Each graph has two node types and three relations (one per attention sub-layer)::

    node types   'src' (n source tokens)        'tgt' (m target tokens)
    relations    ('src', 'enc',   'src')        encoder self-attention   (complete: n^2 edges)
                 ('tgt', 'dec',   'tgt')        decoder self-attention   (causal:   m(m+1)/2)
                 ('src', 'cross', 'tgt')        encoder-decoder attention (bipartite: n*m)

One heterograph rather than three graphs keeps the node ids of a sample consistent across its
relations and lets ``dgl.batch`` offset all of them in one call. Node features hold positions;
token ids are per sample and are attached after batching.
"""
from __future__ import annotations

from functools import lru_cache

import dgl
import torch

from graphformer.graphs import patterns
from graphformer.graphs.patterns import Pattern

SRC, TGT = "src", "tgt"
ENC = (SRC, "enc", SRC)
DEC = (TGT, "dec", TGT)
CROSS = (SRC, "cross", TGT)


class GraphPool:
    """Builds and caches the per-length graphs of one attention structure.

    Args:
        enc_pattern: encoder self-attention pattern, ``(n, n) -> edges``.
        dec_pattern: decoder self-attention pattern, ``(m, m) -> edges``; must be causal.
        cross_pattern: source -> target pattern, ``(n, m) -> edges``.
        cache_size: how many (n, m) graphs to keep.
    """

    def __init__(
        self,
        enc_pattern: Pattern = patterns.full,
        dec_pattern: Pattern = patterns.causal,
        cross_pattern: Pattern = patterns.full,
        cache_size: int = 4096,
    ):
        self.enc_pattern = enc_pattern
        self.dec_pattern = dec_pattern
        self.cross_pattern = cross_pattern
        self.graph = lru_cache(maxsize=cache_size)(self._build)

    def _build(self, n: int, m: int) -> dgl.DGLGraph:
        """The heterograph of one sample with n source and m target tokens (m may be 0)."""
        if n < 1:
            raise ValueError("empty source sequence: every sample needs at least one source token")
        g = dgl.heterograph(
            {
                ENC: self.enc_pattern(n, n),
                DEC: self.dec_pattern(m, m) if m else _no_edges(),
                CROSS: self.cross_pattern(n, m) if m else _no_edges(),
            },
            num_nodes_dict={SRC: n, TGT: m},
            idtype=torch.int64,
        )
        g.nodes[SRC].data["pos"] = torch.arange(n)
        g.nodes[TGT].data["pos"] = torch.arange(m)
        return g

    def batch(self, lengths: list[tuple[int, int]]) -> dgl.DGLGraph:
        """The batched graph of samples with the given (n, m) lengths, in order."""
        return dgl.batch([self.graph(n, m) for n, m in lengths])


def _no_edges() -> tuple[torch.Tensor, torch.Tensor]:
    empty = torch.zeros(0, dtype=torch.int64)
    return empty, empty
