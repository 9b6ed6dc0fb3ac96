r"""Encoder and decoder layers as *pre* and *post* node functions around message passing.

A layer never touches edges itself: ``pre`` turns node states into queries, keys and values,
`graphformer.attention.graph_attention` moves messages along the edges, and ``post`` turns
the aggregated messages back into node states. Running a layer on part of a graph (the still-active
tokens of the Universal Transformer, the newest token while decoding) is then just calling the
node functions on fewer nodes.

Residual blocks come in two placements of layer normalisation:

    post-norm (the paper):               x = LN(x + Sublayer(x))
    pre-norm  (Annotated Transformer):   x = x + Sublayer(LN(x))
"""

from __future__ import annotations

import torch
from torch import nn

from graphformer.attention import DEFAULT_BACKEND
from graphformer.model.attention import MultiHeadAttention
from graphformer.model.edge_encoding import attend, edge_encoding


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to every node independently."""

    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu_(self.linear1(x))  # in place: the (N, d_ff) tensor is the biggest a layer makes
        return self.linear2(self.dropout(h) if self.training else h)  # eval: dropout is the identity


class Residual(nn.Module):
    """Layer norm + dropout + residual connection around one sub-layer, pre- or post-norm."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def enter(self, x: torch.Tensor) -> torch.Tensor:
        """The sub-layer's input: LN(x) with pre-norm, x itself with post-norm."""
        return self.norm(x) if self.norm_first else x

    def leave(self, x: torch.Tensor, inner_out: torch.Tensor) -> torch.Tensor:
        """The block's output from its input x and the sub-layer's output."""
        # In eval mode dropout is the identity: not calling it saves incremental decoding, which
        # runs the layers once per token, a module call per block.
        y = x + (self.dropout(inner_out) if self.training else inner_out)
        return y if self.norm_first else self.norm(y)

    def forward(self, x: torch.Tensor, inner) -> torch.Tensor:
        """The block's output around ``inner``, the sub-layer as a function of its input (a
        `sublayer` elsewhere is the name 'enc', 'dec' or 'cross' of an attention sub-layer)."""
        return self.leave(x, inner(self.enter(x)))


class EncoderLayer(nn.Module):
    """Self-attention over the encoder graph, then a feed-forward block. Node states (N, d_model).
    ``edges``: what its attention does with the edges' types (`graphformer.model.edge_spec.EdgeTerm`s)."""

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float, norm_first: bool, edges=()):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads)
        self.edges = edge_encoding(edges, heads, d_model)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.attn_block = Residual(d_model, dropout, norm_first)
        self.ff_block = Residual(d_model, dropout, norm_first)

    def pre(self, x: torch.Tensor):
        """Node states -> q, k, v (N, H, d_head)."""
        return self.self_attn.qkv(self.attn_block.enter(x))

    def post(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """Node states and their aggregated messages o (N, H, d_head) -> new node states."""
        x = self.attn_block.leave(x, self.self_attn.out(o))
        return self.ff_block(x, self.feed_forward)

    def forward(
        self, relation, x: torch.Tensor, backend: str = DEFAULT_BACKEND, kv_cache=None, depth: int = 0
    ) -> torch.Tensor:
        """``kv_cache``, if given, keeps these nodes' keys and values (``kv_cache.write(depth, k, v)
        -> (keys, values)``, see `kept_keys`) and gives those to attend over."""
        q, k, v = self.pre(x)
        k, v = kept_keys(kv_cache, depth, k, v)
        return self.post(x, attend(self.edges, relation, q, k, v, backend, "enc"))


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the encoder's memory, then feed-forward.
    ``self_edges``, ``cross_edges``: what each attention does with its edges' types (as EncoderLayer's)."""

    def __init__(
        self, d_model: int, heads: int, d_ff: int, dropout: float, norm_first: bool, self_edges=(), cross_edges=()
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, heads)
        self.cross_attn = MultiHeadAttention(d_model, heads)
        self.self_edges = edge_encoding(self_edges, heads, d_model)
        self.cross_edges = edge_encoding(cross_edges, heads, d_model)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.self_block = Residual(d_model, dropout, norm_first)
        self.cross_block = Residual(d_model, dropout, norm_first)
        self.ff_block = Residual(d_model, dropout, norm_first)

    def self_pre(self, x: torch.Tensor):
        return self.self_attn.qkv(self.self_block.enter(x))

    def self_post(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        return self.self_block.leave(x, self.self_attn.out(o))

    def cross_pre(self, x: torch.Tensor) -> torch.Tensor:
        return self.cross_attn.q(self.cross_block.enter(x))

    def memory_kv(self, memory: torch.Tensor):
        """Keys and values of the encoder's output, computed once per layer and reused."""
        return self.cross_attn.kv(memory)

    def cross_post(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        x = self.cross_block.leave(x, self.cross_attn.out(o))
        return self.ff_block.leave(x, self.feed_forward(self.ff_block.enter(x)))

    def forward(
        self,
        self_relation,
        cross_relation,
        x: torch.Tensor,
        memory_kv: tuple[torch.Tensor, torch.Tensor],
        backend: str = DEFAULT_BACKEND,
        kv_cache=None,
        depth: int = 0,
    ) -> torch.Tensor:
        """One decoder layer on the nodes x, reading this layer's ``memory_kv`` (the encoder
        output's cross-attention keys and values). ``kv_cache``, if given, keeps these nodes'
        self-attention keys and values at ``depth`` and gives those to attend over (`kept_keys`)."""
        q, k, v = self.self_pre(x)
        k, v = kept_keys(kv_cache, depth, k, v)
        x = self.self_post(x, attend(self.self_edges, self_relation, q, k, v, backend, "dec"))
        mem_k, mem_v = memory_kv
        return self.cross_post(
            x, attend(self.cross_edges, cross_relation, self.cross_pre(x), mem_k, mem_v, backend, "cross")
        )


def kept_keys(kv_cache, depth: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values a layer's queries attend over, given its nodes' own (N, H, d_head) k and v.

    Without a cache, these. With one, the layer's nodes are some of a larger set whose earlier
    keys are kept: ``kv_cache.write(depth, k, v)`` stores these at slice ``depth`` and returns
    the whole set's tables (`graphformer.decoding.cache.DecodingCache`: a hypothesis's earlier
    target nodes; the Universal Transformer's halted tokens, with their last step's keys).
    """
    return (k, v) if kv_cache is None else kv_cache.write(depth, k, v)


class Generator(nn.Module):
    """(N, d_model) -> (N, vocab) log-probabilities."""

    def __init__(self, d_model: int, vocab: int):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.proj(h)
        # In float32 at least: bfloat16 (autocast on a CPU keeps it) would round the scores
        # that search adds up and the loss to about 3 digits.
        return torch.log_softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))


def encoder_layer(cfg) -> EncoderLayer:
    """An encoder layer of the config's sizes and ``enc_edges``."""
    return EncoderLayer(cfg.d_model, cfg.heads, cfg.d_ff, cfg.dropout, cfg.norm_first, edges=cfg.edge_terms("enc"))


def decoder_layer(cfg) -> DecoderLayer:
    """A decoder layer of the config's sizes, ``dec_edges`` and ``cross_edges``."""
    return DecoderLayer(
        cfg.d_model,
        cfg.heads,
        cfg.d_ff,
        cfg.dropout,
        cfg.norm_first,
        self_edges=cfg.edge_terms("dec"),
        cross_edges=cfg.edge_terms("cross"),
    )


def final_norm(cfg) -> nn.Module:
    """What ends a stack of layers: a layer norm for pre-norm stacks (their residual stream is
    never normalised otherwise), nothing for post-norm ones (already normalised)."""
    return nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()


def init_and_tie(model: nn.Module) -> None:
    """`xavier_init` on an encoder-decoder model, then, with ``cfg.tie`` 'decoder' or 'all', its
    generator's matrix becomes the target token table (tied after initialising: initialised once)."""
    xavier_init(model)
    if model.cfg.tie != "none":
        model.generator.proj.weight = model.tgt_embed.tokens.table.weight


def xavier_init(model: nn.Module) -> None:
    """Xavier-uniform initialisation of every matrix (Vaswani et al.); biases and norms keep
    PyTorch's defaults, and so do modules that set ``initialises_itself`` (the edge uses' tables,
    zero at first). Call before tying weights, so a shared matrix is initialised once."""
    own = {id(p) for m in model.modules() if getattr(m, "initialises_itself", False) for p in m.parameters()}
    for p in model.parameters():
        if p.dim() > 1 and id(p) not in own:
            nn.init.xavier_uniform_(p)
