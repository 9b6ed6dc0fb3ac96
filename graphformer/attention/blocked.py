r"""Block-sparse graph attention in plain PyTorch: the same edges, computed tile by tile.

The (query, key) plane is cut into B x B tiles; only tiles holding at least one edge are kept,
each with a boolean mask of its edges. Scores of a tile are one small dense matmul, so the work
runs at BLAS speed instead of edge by edge, and a pattern with locality (windows, blocks, a batch
of short sentences) keeps few tiles. The result is exactly graph attention over the edges:

    S_t   = scale * Q_qb(t) K_kb(t)^T + B_t      masked to the tile's edges
    m     = max over a query's tiles of S   (pass 1: stability, as in scaled_exp)
    l     = sum_t rowsum exp(S_t - m)       (pass 2, with O = sum_t exp(S_t - m) V_kb(t))
    out   = O / l,  and m and l are all the backward pass keeps

B_t is an edge bias (`graphformer.attention.bias.EdgeBias`) made tile by tile, or 0: from
positions it is recomputed per tile; a given type comes from an (E, H) per-edge tensor, the one
tensor of edges x heads this backend then holds (`graphformer.attention.tile_bias`).

The backward pass rebuilds the weights as exp(S_t - m) / l, not as exp(S_t - lse) with
lse = m + log l: for large scores a float32 lse has no bits left for log l, and the weights
would no longer sum to 1.

Tiles are processed in chunks, forward and backward (FlashAttention-style recomputation), so
memory stays O(nodes) plus one chunk of tiles: no (edges x heads) tensor is stored, save a
given-type bias's (above).
A tile spans whole blocks of keys, so it meets keys that no edge names; those are read as zeros
(their weight is 0, but 0 * NaN is NaN), so whatever the key tensor holds there never reaches a
result (a decoding cache leaves the slots past the current step unwritten).
No DGL kernel is involved: the work is plain PyTorch matmuls on whatever device q, k, v are on.
Per-edge weights (Shaw's value term, inspection) are computed edge by edge, as the torch backend computes them
(max, exp, sum over each query's edges): a score recomputed per edge rounds apart from its tile's
matmul, and for large scores one rounding outweighs the whole range of exp, so the weights are
normalised over the very scores they are made of.
"""

from __future__ import annotations

import math

import torch

from graphformer.attention import torch_ops
from graphformer.attention.bias import EdgeBias
from graphformer.attention.tile_bias import tiles_of
from graphformer.graphs.relation import Relation

BLOCK = 64
CHUNK_BYTES = 16 * 2**20


class BlockLayout:
    """The non-empty tiles of a graph's (query block, key block) plane and their edge masks."""

    def __init__(self, u: torch.Tensor, v: torch.Tensor, num_keys: int, num_queries: int, block: int):
        self.block = block
        self.num_keys, self.num_queries = num_keys, num_queries
        self.key_blocks = -(-num_keys // block)
        self.query_blocks = -(-num_queries // block)
        tile_key = (v // block) * self.key_blocks + u // block
        space = self.query_blocks * self.key_blocks
        if space <= 50_000_000:  # dense bookkeeping, no sort
            present = torch.bincount(tile_key, minlength=space) > 0
            tiles = present.nonzero().squeeze(1)
            rank = torch.cumsum(present, 0) - 1
            tile_of_edge = rank[tile_key]
        else:
            tiles, tile_of_edge = torch.unique(tile_key, return_inverse=True)
        self.q_block = tiles // self.key_blocks
        self.k_block = tiles % self.key_blocks
        self.mask = torch.zeros(len(tiles), block, block, dtype=torch.bool, device=u.device)
        self.mask[tile_of_edge, v % block, u % block] = True
        read = torch.zeros(num_keys, dtype=torch.bool, device=u.device)
        read[u] = True
        self.unread_keys = None if bool(read.all()) else ~read  # (num_keys,) bool; None: every key is read


def layout_of(relation: Relation, block: int) -> BlockLayout:
    """The relation's layout, computed once and kept with the relation."""
    return relation.layout(("blocked", block), lambda r: BlockLayout(r.u, r.v, r.num_keys, r.num_queries, block))


def worth_it(relation: Relation, min_queries: int = 1024, min_fill: float = 0.25) -> bool:
    """Whether tiles pay: a long relation (at least ``min_queries`` queries) whose edges fill at
    least ``min_fill`` of the tiles they touch (windows and blocks over long sequences: yes;
    random links, dilation, short sentences: no, the edge-wise kernels do less work). The layout
    built to decide is the one `attend` then uses."""
    if relation.num_queries < min_queries or relation.num_edges == 0:
        return False
    return relation.layout(
        ("blocked pays", min_fill), lambda r: r.num_edges >= min_fill * layout_of(r, BLOCK).mask.numel()
    )


def _to_blocks(x: torch.Tensor, num_blocks: int, block: int, zeroed: torch.Tensor | None = None) -> torch.Tensor:
    """(N, H, D) -> (num_blocks, H, block, D), zero-padded, with the ``zeroed`` rows ((N,) bool) zeros."""
    n, h, d = x.shape
    padded = x.new_zeros(num_blocks * block, h, d)
    padded[:n] = x
    if zeroed is not None:
        padded[:n].masked_fill_(zeroed[:, None, None], 0)
    return padded.view(num_blocks, block, h, d).transpose(1, 2).contiguous()


def _from_blocks(x: torch.Tensor, n: int) -> torch.Tensor:
    """(num_blocks, H, block, D) -> (n, H, D)."""
    b, h, blk, d = x.shape
    return x.transpose(1, 2).reshape(b * blk, h, d)[:n]


def _chunks(layout: BlockLayout, heads: int, itemsize: int):
    per_tile = heads * layout.block * layout.block * itemsize
    step = max(1, CHUNK_BYTES // per_tile)
    for start in range(0, len(layout.mask), step):
        yield slice(start, start + step)


def _scores(Qt: torch.Tensor, Kt: torch.Tensor, mask: torch.Tensor, scale: float, bias=None) -> torch.Tensor:
    """(tiles, H, B, B) scaled scores of query tiles Qt against key tiles Kt, plus the tiles'
    ``bias`` (tiles, H, B, B) if any, -inf off the edges."""
    S = Qt @ Kt.transpose(-1, -2) * scale
    if bias is not None:
        S = S + bias
    return S.masked_fill(~mask[:, None], float("-inf"))


def _tile_bias(tiles, chunk: slice, param, dtype):
    """The chunk's (tiles, H, B, B) bias (`graphformer.attention.tile_bias`), or None without one."""
    return None if tiles is None else tiles.of(chunk, param, dtype)


class BlockedAttention(torch.autograd.Function):
    """Both passes in the inputs' dtype with autocast off, sums kept in at least float32 (`_acc`):
    CUDA autocast runs exp and sums in float32 and would mix dtypes in the tiles' products and
    index_add_, where CPU autocast does not. ``tiles`` makes each chunk's bias from ``param``
    (None, None: no bias), whose gradient the backward pass returns."""

    @staticmethod
    def forward(ctx, layout: BlockLayout, tiles, q, k, v, param):
        with torch.autocast(q.device.type, enabled=False):
            return BlockedAttention._forward(ctx, layout, tiles, q, k, v, param)

    @staticmethod
    def _forward(ctx, layout: BlockLayout, tiles, q, k, v, param):
        scale = 1.0 / math.sqrt(q.shape[-1])
        B = layout.block
        Q = _to_blocks(q, layout.query_blocks, B)
        K, V = (_to_blocks(x, layout.key_blocks, B, layout.unread_keys) for x in (k, v))
        H, acc = q.shape[1], _acc(q.dtype)
        peak = Q.new_full((layout.query_blocks, H, B), float("-inf"))
        for c in _chunks(layout, H, q.element_size()):
            qb, kb = layout.q_block[c], layout.k_block[c]
            S = _scores(Q[qb], K[kb], layout.mask[c], scale, _tile_bias(tiles, c, param, Q.dtype))
            row_max = S.amax(-1)
            peak.scatter_reduce_(0, qb[:, None, None].expand_as(row_max), row_max, "amax")
        peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))  # padding rows
        total = torch.zeros_like(peak, dtype=acc)
        O = torch.zeros_like(Q, dtype=acc)
        for c in _chunks(layout, H, q.element_size()):
            qb, kb = layout.q_block[c], layout.k_block[c]
            S = _scores(Q[qb], K[kb], layout.mask[c], scale, _tile_bias(tiles, c, param, Q.dtype))
            P = torch.exp(S - peak[qb][..., None])
            total.index_add_(0, qb, P.sum(-1, dtype=acc))
            O.index_add_(0, qb, (P @ V[kb]).to(acc))
        total = torch.where(total > 0, total, torch.ones_like(total))  # 0 only on padding rows
        O = (O / total[..., None]).to(q.dtype)
        ctx.layout, ctx.scale, ctx.tiles = layout, scale, tiles
        ctx.save_for_backward(Q, K, V, O, peak, total, param)
        return _from_blocks(O, layout.num_queries)

    @staticmethod
    def backward(ctx, grad_out):
        with torch.autocast(grad_out.device.type, enabled=False):
            return BlockedAttention._backward(ctx, grad_out)

    @staticmethod
    def _backward(ctx, grad_out):
        layout, scale, tiles = ctx.layout, ctx.scale, ctx.tiles
        Q, K, V, O, peak, total, param = ctx.saved_tensors
        dparam = torch.zeros_like(param) if tiles is not None and ctx.needs_input_grad[5] else None
        acc = total.dtype
        dO = _to_blocks(grad_out.to(Q.dtype).contiguous(), layout.query_blocks, layout.block)
        delta = (dO.to(acc) * O.to(acc)).sum(-1)  # rowsum(dO * O) = sum_u P_u dP_u
        dQ, dK, dV = (torch.zeros_like(x, dtype=acc) for x in (Q, K, V))
        for c in _chunks(layout, Q.shape[1], Q.element_size()):
            qb, kb = layout.q_block[c], layout.k_block[c]
            Qc, Kc, Vc, dOc = Q[qb], K[kb], V[kb], dO[qb]
            S = _scores(Qc, Kc, layout.mask[c], scale, _tile_bias(tiles, c, param, Q.dtype))
            P = (torch.exp(S - peak[qb][..., None]).to(acc) / total[qb][..., None]).to(Q.dtype)
            dV.index_add_(0, kb, (P.transpose(-1, -2) @ dOc).to(acc))
            dS = (P.to(acc) * ((dOc @ Vc.transpose(-1, -2)).to(acc) - delta[qb][..., None])).to(Q.dtype)
            dQ.index_add_(0, qb, (dS @ Kc).to(acc) * scale)
            dK.index_add_(0, kb, (dS.transpose(-1, -2) @ Qc).to(acc) * scale)
            if dparam is not None:  # dS is the bias's gradient: b enters S unscaled
                tiles.add_grad(c, param, dS, dparam)
        n_k, dtype = layout.num_keys, Q.dtype
        return (
            None,
            None,
            _from_blocks(dQ, layout.num_queries).to(dtype),
            _from_blocks(dK, n_k).to(dtype),
            _from_blocks(dV, n_k).to(dtype),
            dparam,
        )


def _acc(dtype: torch.dtype) -> torch.dtype:
    """The dtype sums are kept in: float32 for bfloat16 and float16 inputs, else the inputs'."""
    return torch.promote_types(dtype, torch.float32)


def attend(relation: Relation, q, k, v, return_weights: bool = False, block: int = BLOCK, bias: EdgeBias | None = None):
    """Graph attention over the relation's edges, tile by tile; same contract as the DGL backend.
    The weights, where asked, are computed edge by edge (with their gradient: Shaw's value term is
    made of them), at the torch backend's (E, H) cost."""
    layout = layout_of(relation, block)
    tiles = tiles_of(relation, bias, layout, q.dtype)
    out = BlockedAttention.apply(layout, tiles, q, k, v, None if tiles is None else tiles.param)
    if not return_weights:
        return out
    b = None if bias is None else bias.per_edge(relation, q.dtype)
    scores = torch_ops.src_dot_dst(relation, k, q)
    a = torch_ops.scaled_exp(relation, scores, 1.0 / math.sqrt(q.shape[-1]), b)
    return out, a / torch_ops.sum_into_destinations(relation, a)[relation.v]
