"""A relation's edges as FlexAttention's block mask: which blocks of the (query, key) plane are
empty, full or partial, and a bitmap per partial block (the layout `graphformer.attention.flex`
describes).

With ``shared_sizes`` every count the compiled kernel is specialised on (query blocks, key
blocks, bitmap slots) is rounded up to a power of two (`shared_size`), so relations of many sizes
share a few kernels: the added query blocks list no key block and the added slots are never read,
so they cost memory (less than twice the padded q, k and v), not work. The CPU kernel needs that
(see `graphformer.attention.flex`: torch 2.11's code generator fails on kernels for several sizes).
"""

from __future__ import annotations

import torch

from graphformer.attention import torch_ops
from graphformer.attention.bias import EdgeBias
from graphformer.graphs.relation import Relation

CHUNK_BYTES = 16 * 2**20  # scores of the blocks computed at once for the weights
_EMPTY, _FULL = 0, 1  # sentinel slots of the bitmap: a block with no edge, a block of edges only


class FlexLayout:
    """A relation's edges as a FlexAttention `BlockMask` over nodes padded to whole blocks.

    Attributes:
        num_keys, num_queries: the relation's nodes; ``padded_keys``/``padded_queries`` rounded up
            to whole blocks, with ``shared_sizes`` to a power of two of blocks (what the kernel sees).
        block_mask: the BlockMask (batch 1, one head broadcast to all heads).
        partial, full: how many blocks carry a bitmap and how many are all edges.
        bits: (2 + partial, BQ, BK) bool: slot 0 all False, slot 1 all True, then one per partial
            block (and, with ``shared_sizes``, unused slots up to a power of two).
        table: (q_blocks, k_blocks) int32 slot of each block's bitmap.
    """

    def __init__(
        self,
        u: torch.Tensor,
        v: torch.Tensor,
        num_keys: int,
        num_queries: int,
        block: tuple[int, int],
        shared_sizes: bool = False,
    ):
        from torch.nn.attention.flex_attention import BlockMask

        bq, bk = block
        self.block = block
        self.num_keys, self.num_queries = num_keys, num_queries
        size = shared_size if shared_sizes else int
        q_blocks, k_blocks = size(-(-num_queries // bq)), size(-(-num_keys // bk))
        self.padded_queries, self.padded_keys = q_blocks * bq, k_blocks * bk
        device = u.device
        # Edges per block: a block is full when it holds BQ * BK distinct edges (a verified
        # relation lists no edge twice) and no padded node, which no edge names.
        tile_of_edge = (v // bq) * k_blocks + u // bk
        count = torch.bincount(tile_of_edge, minlength=q_blocks * k_blocks).view(q_blocks, k_blocks)
        full = count == bq * bk
        partial = (count > 0) & ~full
        self.partial, self.full = int(partial.sum()), int(full.sum())

        # Slots: 0 and 1 are the empty and full sentinels, so mask_mod is exact on every block, even
        # where a kernel evaluates it on a block it could have skipped (the uncompiled path does).
        table = torch.full((q_blocks, k_blocks), _EMPTY, dtype=torch.int32, device=device)
        table[full] = _FULL
        table[partial] = torch.arange(2, 2 + self.partial, dtype=torch.int32, device=device)
        bits = torch.zeros(size(2 + self.partial), bq, bk, dtype=torch.bool, device=device)
        bits[_FULL] = True
        slot = table.view(-1)[tile_of_edge]
        in_partial = slot >= 2
        bits[slot[in_partial].long(), v[in_partial] % bq, u[in_partial] % bk] = True
        self.table, self.bits = table, bits
        read = torch.zeros(num_keys, dtype=torch.bool, device=device)
        read[u] = True
        # (num_keys,) True for keys no edge names, None if there are none. A block's products span
        # all its keys, and a masked key still enters P V with weight 0, but 0 * NaN is NaN: such
        # keys are read as zeros (a decoding cache leaves the slots past the current step unwritten).
        self.unread_keys = None if bool(read.all()) else ~read

        def mask_mod(b, h, q_idx, kv_idx):
            return bits[table[q_idx // bq, kv_idx // bk], q_idx % bq, kv_idx % bk]

        kv_num, kv_index = _ordered(partial)
        full_num, full_index = _ordered(full)
        self.block_mask = BlockMask.from_kv_blocks(
            kv_num, kv_index, full_num, full_index, BLOCK_SIZE=block, mask_mod=mask_mod
        )

    def edge_scores(
        self, u: torch.Tensor, v: torch.Tensor, Q: torch.Tensor, K: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """(E, H) scores scale * q_v . k_u of the edges, from the padded (1, H, L, d) Q and K.

        Block by block, as the kernel computes them: S_t = scale * Q_qb K_kb^T over the blocks that
        hold edges, a chunk of blocks at a time (memory stays one chunk, and the products run at
        BLAS speed where gathering q_v and k_u per edge would move E * H * d numbers twice)."""
        bq, bk = self.block
        q_blocks, k_blocks = self.table.shape
        heads, d = Q.shape[1], Q.shape[-1]
        Qb = Q[0].view(heads, q_blocks, bq, d).transpose(0, 1)  # (q_blocks, H, BQ, d) views
        Kb = K[0].view(heads, k_blocks, bk, d).transpose(0, 1)
        touched = (self.table != _EMPTY).view(-1)
        blocks = touched.nonzero().squeeze(1)  # (T,) the blocks with edges, query-block major
        rank = torch.cumsum(touched, 0) - 1
        edge_block = rank[(v // bq) * k_blocks + u // bk]  # (E,) which of the T blocks holds each edge
        order = torch.argsort(edge_block)
        starts = torch.cumsum(torch.bincount(edge_block, minlength=len(blocks)), 0).tolist()
        scores = Q.new_empty(len(u), heads)
        step = max(1, CHUNK_BYTES // (heads * bq * bk * Q.element_size()))
        for first in range(0, len(blocks), step):
            last = min(first + step, len(blocks))
            edges = order[(starts[first - 1] if first else 0) : starts[last - 1]]
            chunk = blocks[first:last]
            S = Qb[chunk // k_blocks] @ Kb[chunk % k_blocks].transpose(-1, -2)  # (chunk, H, BQ, BK)
            scores[edges] = S[edge_block[edges] - first, :, v[edges] % bq, u[edges] % bk] * scale
        return scores

    def edge_weights(
        self, relation: Relation, Q: torch.Tensor, K: torch.Tensor, scale: float, bias: EdgeBias | None = None
    ) -> torch.Tensor:
        """(E, H, 1) attention weights of ``relation``'s edges, in its edge order, from the padded
        (1, H, L, d) Q and K, with ``bias`` (or none) added to the scores as the kernel adds it;
        with their gradient where one is asked (Shaw's value term is made of them).

        They are normalised over the edges' own scores (`edge_scores`) by `torch_ops`'s steps,
        a_uv = exp(s_uv + b_uv - m_v) / z_v with m_v the largest of v's in-edge scores and z_v the
        sum of v's numerators, rather than with an lse read from the kernel: the compiled CPU
        kernel cannot return one, asking for it would compile one more kernel, and exp(s - m_v) / z_v
        keeps the bits that exp(s - lse_v) loses where scores are large (s - lse_v is then a
        difference of two large float32 numbers)."""
        scores = self.edge_scores(relation.u, relation.v, Q, K, scale)[..., None]  # (E, H, 1), scaled
        b = None if bias is None else bias.per_edge(relation, Q.dtype)  # (E, H)
        a = torch_ops.scaled_exp(relation, scores, 1.0, b)  # exp(s_uv + b_uv - m_v)
        return a / torch_ops.sum_into_destinations(relation, a)[relation.v]

    def pad_queries(self, x: torch.Tensor) -> torch.Tensor:
        """(N_dst, H, d) -> (1, H, padded_queries, d)."""
        return _to_sequence(x, self.padded_queries)

    def pad_keys(self, x: torch.Tensor) -> torch.Tensor:
        """(N_src, H, d) -> (1, H, padded_keys, d), the keys that no edge names zeroed."""
        return _to_sequence(x, self.padded_keys, self.unread_keys)


def shared_size(count: int) -> int:
    """The power of two at or above ``count``: sizes that many relations share."""
    return 1 << max(count - 1, 0).bit_length()


def _ordered(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A (q_blocks, k_blocks) bool plane as FlexAttention's (1, 1, q_blocks) counts and
    (1, 1, q_blocks, k_blocks) int32 key-block indices, each row's blocks first, in key order."""
    num = blocks.sum(-1, dtype=torch.int32)
    # A stable descending sort of the plane puts each row's present blocks first, in order; the
    # rest of the row holds the absent ones (valid indices, never read past ``num``).
    index = torch.sort(blocks.to(torch.int8), dim=-1, descending=True, stable=True).indices.to(torch.int32)
    return num[None, None].contiguous(), index[None, None].contiguous()


def _to_sequence(x: torch.Tensor, length: int, zeroed: torch.Tensor | None = None) -> torch.Tensor:
    """(N, H, d) nodes -> (1, H, length, d), zero-padded past N, the ``zeroed`` rows ((N,) bool)
    zeros. The memory stays node-major ((length, H, d)), so the kernel's output, laid out like its
    query, reads back as (N_dst, H, d) without a copy."""
    n, h, d = x.shape
    if n != length or zeroed is not None:
        padded = x.new_zeros(length, h, d)
        padded[:n] = x if zeroed is None else x.masked_fill(zeroed[:, None, None], 0)
        x = padded
    return x.permute(1, 0, 2).unsqueeze(0)
