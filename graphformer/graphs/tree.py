r"""A binary-partition tree over the source, in the manner of BP-Transformer (Ye et al., 2019).

Besides its n token nodes the encoder graph gets *span nodes*: level l >= 1 cuts the sequence
into spans of 2^l tokens (the last one may be shorter), up to the last level with at least two
spans (the root, a span of everything, would overlap every token's own position, so no token
could use it). For n = 6:

    level 2   [0 ...... 4) [4 .. 6)                  nodes 9, 10
    level 1   [0, 2) [2, 4) [4, 6)                   nodes 6, 7, 8
    level 0   0  1  2  3  4  5                       the tokens, nodes 0..5

Edges (key -> query):

* every token attends to itself and, fine to coarse, to k spans on each side per level: the
  nearest context as single tokens, farther context as ever larger spans. The spans a token
  attends to tile the whole sequence exactly once, so one layer reaches every position through
  O(k log n) keys instead of n;
* every span attends to the tokens it holds (BP-Transformer's affiliated edges), so its state
  summarises them. A span node starts as the mean of its tokens' input vectors.

Span nodes live only in the encoder: the decoder's cross-attention reads the token nodes.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from graphformer.graphs.edges import EdgeList


@lru_cache(maxsize=1024)
def levels(n: int) -> tuple[int, ...]:
    """Spans per level, for levels 1, 2, ...: ceil(n / 2^l) while that is at least 2."""
    counts, count = [], -(-n // 2)
    while count > 1:
        counts.append(count)
        count = -(-count // 2)
    return tuple(counts)


def span_count(n: int) -> int:
    return sum(levels(n))


def _node(n: int, level: int, index: int) -> int:
    """Node id of span ``index`` of ``level`` (level 0: the tokens themselves)."""
    return index if level == 0 else n + sum(levels(n)[: level - 1]) + index


def _context(n: int, i: int, k: int) -> list[tuple[int, int]]:
    """(level, index) of the keys of token i besides itself: k per level and side, fine to coarse.

    Walking left, [0, lo) is what is still uncovered; at level l (span size s = 2^l) lo is a
    multiple of s/2. If it is not also a multiple of s, the half-size span ending at lo comes
    first (its parent would overlap what is already covered). Walking right is the mirror image.
    """
    keys = []
    lo, level = i, 0
    while lo > 0:
        size, taken = 1 << level, 0
        if lo % size:
            keys.append((level - 1, lo // (size // 2) - 1))
            lo, taken = lo - size // 2, 1
        while taken < k and lo > 0:
            keys.append((level, lo // size - 1))
            lo, taken = lo - size, taken + 1
        level += 1
    hi, level = i + 1, 0
    while hi < n:
        size, taken = 1 << level, 0
        if hi % size:
            keys.append((level - 1, hi // (size // 2)))
            hi, taken = hi + size // 2, 1
        while taken < k and hi < n:
            keys.append((level, hi // size))
            hi, taken = hi + size, taken + 1
        level += 1
    return keys


def span_range(n: int, node: int) -> tuple[int, int]:
    """[first, end) tokens held by a node (a token holds itself)."""
    if node < n:
        return node, node + 1
    rest = node - n
    for level, count in enumerate(levels(n), start=1):
        if rest < count:
            return rest << level, min((rest + 1) << level, n)
        rest -= count
    raise ValueError(f"node {node} is not in the tree of {n} tokens")


@lru_cache(maxsize=1024)
def members(n: int) -> EdgeList:
    """(token, span) pairs: each span node and the tokens it holds."""
    tokens, spans = [], []
    for i in range(n):
        for level in range(1, len(levels(n)) + 1):
            tokens.append(i)
            spans.append(_node(n, level, i >> level))
    return torch.tensor(tokens, dtype=torch.int64), torch.tensor(spans, dtype=torch.int64)


@lru_cache(maxsize=1024)
def edges(n: int, k: int) -> EdgeList:
    """(key, query) edges of the tree graph on n tokens plus their span nodes."""
    u, v = [], []
    for i in range(n):
        keys = [i] + [_node(n, level, index) for level, index in _context(n, i, k)]
        u += keys
        v += [i] * len(keys)
    tokens, spans = members(n)
    return torch.cat([torch.tensor(u, dtype=torch.int64), tokens]), torch.cat(
        [torch.tensor(v, dtype=torch.int64), spans]
    )


def first_tokens(n: int) -> torch.Tensor:
    """(span_count(n),) position of the first token of each span node."""
    return torch.tensor([span_range(n, node)[0] for node in range(n, n + span_count(n))], dtype=torch.int64)
