"""The encoder-decoder Transformer on batched graphs.

    memory = Encoder(embed_src(src))                        over the 'enc' relation
    h      = Decoder(embed_tgt(tgt_in), memory)             over 'dec' and 'cross'
    logp   = log_softmax(h W_gen + b_gen)                   (N_tgt, vocab)

Pre-norm stacks end with a final layer norm (their residual stream is never normalised
otherwise); post-norm stacks already end normalised and have none.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
from torch import nn

from graphformer.graphs import CROSS, DEC, ENC, GraphBatch, GraphPool, patterns
from graphformer.model.embedding import POSITIONS, Embedder, TokenEmbedding
from graphformer.model.layers import DecoderLayer, EncoderLayer

TYING = ("none", "decoder", "all")


@dataclass
class ModelConfig:
    """Hyper-parameters of a :class:`GraphTransformer` (saved with every checkpoint).

    tie: 'none'; 'decoder' shares the target embedding with the generator; 'all' also shares
    the source embedding (needs one vocabulary for both sides).
    """

    src_vocab: int
    tgt_vocab: int
    layers: int = 6
    d_model: int = 512
    heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    norm_first: bool = True
    positions: str = "sinusoidal"
    max_len: int = 512
    tie: str = "none"
    enc_attention: str = "full"       # attention patterns (graphformer.graphs.patterns syntax)
    dec_attention: str = "causal"
    cross_attention: str = "full"

    def __post_init__(self):
        if self.layers < 1:
            raise ValueError(f"layers must be at least 1, got {self.layers}")
        if min(self.d_model, self.heads, self.d_ff, self.max_len) < 1:
            raise ValueError("d_model, heads, d_ff and max_len must be positive")
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by the number of heads ({self.heads})")
        if self.d_model % 2:
            raise ValueError(f"d_model must be even for positional encodings, got {self.d_model}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.positions not in POSITIONS:
            raise ValueError(f"unknown positions {self.positions!r}; choose one of {sorted(POSITIONS)}")
        if self.tie not in TYING:
            raise ValueError(f"unknown tie {self.tie!r}; choose one of {TYING}")
        if self.tie == "all" and self.src_vocab != self.tgt_vocab:
            raise ValueError("tie='all' needs one vocabulary for source and target (equal sizes)")
        for spec in (self.enc_attention, self.dec_attention, self.cross_attention):
            patterns.parse(spec)  # fails early, with the pattern's own message

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(cfg.d_model, cfg.heads, cfg.d_ff, cfg.dropout, cfg.norm_first) for _ in range(cfg.layers)
        )
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()

    def forward(self, graph, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(graph, x)
        return self.norm(x)


class Decoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(cfg.d_model, cfg.heads, cfg.d_ff, cfg.dropout, cfg.norm_first) for _ in range(cfg.layers)
        )
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()

    def forward(self, self_graph, cross_graph, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(self_graph, cross_graph, x, layer.memory_kv(memory))
        return self.norm(x)


class Generator(nn.Module):
    """(N, d_model) -> (N, vocab) log-probabilities."""

    def __init__(self, d_model: int, vocab: int):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.proj(h), dim=-1)


class GraphTransformer(nn.Module):
    """Encoder-decoder Transformer whose attention runs on the edges of a :class:`GraphBatch`."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        positions = POSITIONS[cfg.positions]
        src_tokens = TokenEmbedding(cfg.src_vocab, cfg.d_model)
        tgt_tokens = src_tokens if cfg.tie == "all" else TokenEmbedding(cfg.tgt_vocab, cfg.d_model)
        self.src_embed = Embedder(src_tokens, positions(cfg.d_model, cfg.max_len), cfg.dropout)
        self.tgt_embed = Embedder(tgt_tokens, positions(cfg.d_model, cfg.max_len), cfg.dropout)
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.generator = Generator(cfg.d_model, cfg.tgt_vocab)
        self._init_weights()
        if cfg.tie != "none":
            self.generator.proj.weight = tgt_tokens.table.weight

    def _init_weights(self):
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def make_pool(self) -> GraphPool:
        """A graph pool with this model's attention patterns."""
        return GraphPool(self.cfg.enc_attention, self.cfg.dec_attention, self.cfg.cross_attention)

    def encode(self, batch: GraphBatch) -> torch.Tensor:
        """(N_src, d_model) encoder output (the memory)."""
        return self.encoder(batch.relation(ENC), self.src_embed(batch.src_tokens, batch.src_pos))

    def decode(self, batch: GraphBatch, memory: torch.Tensor) -> torch.Tensor:
        """(N_tgt, d_model) decoder output for the batch's target nodes."""
        x = self.tgt_embed(batch.tgt_tokens, batch.tgt_pos)
        return self.decoder(batch.relation(DEC), batch.relation(CROSS), x, memory)

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        """(N_tgt, tgt_vocab) log-probabilities of the next token at every target node."""
        return self.generator(self.decode(batch, self.encode(batch)))


def make_model(src_vocab: int, tgt_vocab: int | None = None, **hyper) -> GraphTransformer:
    """Build a :class:`GraphTransformer`; ``hyper`` are :class:`ModelConfig` fields."""
    return GraphTransformer(ModelConfig(src_vocab=src_vocab, tgt_vocab=tgt_vocab or src_vocab, **hyper))
