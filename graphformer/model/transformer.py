"""The encoder-decoder Transformer on batched graphs.

    memory = Encoder(embed_src(src))                        over the 'enc' relation
    h      = Decoder(embed_tgt(tgt_in), memory)             over 'dec' and 'cross'
    logp   = log_softmax(h W_gen + b_gen)                   (N_tgt, vocab)

Pre-norm stacks end with a final layer norm (their residual stream is never normalised
otherwise); post-norm stacks already end normalised and have none.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from graphformer.attention import DEFAULT_BACKEND, check_backend
from graphformer.config_io import DictConfig
from graphformer.graphs import CROSS, DEC, ENC, GraphBatch, GraphPool
from graphformer.model.embedding import POSITIONS, Embedder, TokenEmbedding, embed_source
from graphformer.model.layers import DecoderLayer, EncoderLayer

TYING = ("none", "decoder", "all")
MODELS = ("transformer", "universal")


@dataclass
class ModelConfig(DictConfig):
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
    model: str = "transformer"        # or "universal": one shared layer per side with ACT
    max_depth: Optional[int] = None   # universal only (default 8): most steps per token
    act_threshold: Optional[float] = None  # universal only (default 0.99): halt when sum p > it
    ponder_weight: Optional[float] = None  # universal only (default 0.01): weight of the ponder cost

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
        self.graph_pool()  # parses and checks the attention patterns: fails early, with their own message
        act = {"max_depth": 8, "act_threshold": 0.99, "ponder_weight": 0.01}
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}; choose one of {MODELS}")
        if self.model == "transformer":
            given = [name for name in act if getattr(self, name) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} apply only to the universal model (model='universal')")
            return
        for name, default in act.items():
            if getattr(self, name) is None:
                setattr(self, name, default)
        if self.max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, got {self.max_depth}")
        if not 0.0 < self.act_threshold <= 1.0:
            raise ValueError(f"act_threshold must be in (0, 1], got {self.act_threshold}")
        if self.ponder_weight < 0:
            raise ValueError(f"ponder_weight must be at least 0, got {self.ponder_weight}")

    def graph_pool(self) -> GraphPool:
        """A graph pool with these attention patterns."""
        return GraphPool(self.enc_attention, self.dec_attention, self.cross_attention)


def make_embedders(cfg: ModelConfig) -> tuple[Embedder, Embedder]:
    """Source and target embedders; with tie='all' they share one token table."""
    positions = POSITIONS[cfg.positions]
    src_tokens = TokenEmbedding(cfg.src_vocab, cfg.d_model)
    tgt_tokens = src_tokens if cfg.tie == "all" else TokenEmbedding(cfg.tgt_vocab, cfg.d_model)
    return (Embedder(src_tokens, positions(cfg.d_model, cfg.max_len), cfg.dropout),
            Embedder(tgt_tokens, positions(cfg.d_model, cfg.max_len), cfg.dropout))


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderLayer(cfg.d_model, cfg.heads, cfg.d_ff, cfg.dropout, cfg.norm_first) for _ in range(cfg.layers)
        )
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()

    def forward(self, relation, x: torch.Tensor, backend: str = DEFAULT_BACKEND) -> torch.Tensor:
        for layer in self.layers:
            x = layer(relation, x, backend)
        return self.norm(x)


class Decoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(
            DecoderLayer(cfg.d_model, cfg.heads, cfg.d_ff, cfg.dropout, cfg.norm_first) for _ in range(cfg.layers)
        )
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()

    def forward(self, self_relation, cross_relation, x: torch.Tensor, memory: torch.Tensor,
                backend: str = DEFAULT_BACKEND) -> torch.Tensor:
        for layer in self.layers:
            x = layer(self_relation, cross_relation, x, layer.memory_kv(memory), backend)
        return self.norm(x)


class Generator(nn.Module):
    """(N, d_model) -> (N, vocab) log-probabilities."""

    def __init__(self, d_model: int, vocab: int):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.proj(h), dim=-1)


class GraphTransformer(nn.Module):
    """Encoder-decoder Transformer whose attention runs on the edges of a :class:`GraphBatch`.

    ``attention_backend`` names the attention implementation every layer uses (see
    :mod:`graphformer.attention`); it changes speed, never results, so it is not part of the
    config saved with checkpoints: set it on the model (``model.attention_backend = "torch"``).
    """

    aux_loss = None  # the Transformer has no loss besides the likelihood

    def __init__(self, cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND):
        super().__init__()
        if cfg.model != "transformer":
            raise ValueError(f"GraphTransformer needs model='transformer', got {cfg.model!r}; use build_model")
        self.cfg = cfg
        self.attention_backend = check_backend(attention_backend)
        self.src_embed, self.tgt_embed = make_embedders(cfg)
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.generator = Generator(cfg.d_model, cfg.tgt_vocab)
        self._init_weights()
        if cfg.tie != "none":
            self.generator.proj.weight = self.tgt_embed.tokens.table.weight

    def _init_weights(self):
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def make_pool(self) -> GraphPool:
        """A graph pool with this model's attention patterns."""
        return self.cfg.graph_pool()

    def encode(self, batch: GraphBatch) -> torch.Tensor:
        """(N_src, d_model) encoder output (the memory)."""
        return self.encoder(batch.relation(ENC), embed_source(self.src_embed, batch), self.attention_backend)

    def decode(self, batch: GraphBatch, memory: torch.Tensor) -> torch.Tensor:
        """(N_tgt, d_model) decoder output for the batch's target nodes."""
        x = self.tgt_embed(batch.tgt_tokens, batch.tgt_pos)
        return self.decoder(batch.relation(DEC), batch.relation(CROSS), x, memory, self.attention_backend)

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        """(N_tgt, tgt_vocab) log-probabilities of the next token at every target node."""
        return self.generator(self.decode(batch, self.encode(batch)))

    def incremental_stepper(self, batch, hyps_per_sentence: int, max_steps: int, pool):
        from graphformer.decoding.steppers import IncrementalStepper
        return IncrementalStepper(self, batch, hyps_per_sentence, max_steps, pool)


def build_model(cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND) -> nn.Module:
    """The model class that ``cfg.model`` names."""
    if cfg.model == "universal":
        from graphformer.model.universal import UniversalTransformer
        return UniversalTransformer(cfg, attention_backend)
    return GraphTransformer(cfg, attention_backend)


def make_model(src_vocab: int, tgt_vocab: int | None = None, attention_backend: str = DEFAULT_BACKEND,
               **hyper) -> nn.Module:
    """Build a :class:`GraphTransformer` (or, with ``model="universal"``, a
    :class:`~graphformer.model.universal.UniversalTransformer`); ``hyper`` are
    :class:`ModelConfig` fields."""
    cfg = ModelConfig(src_vocab=src_vocab, tgt_vocab=tgt_vocab or src_vocab, **hyper)
    return build_model(cfg, attention_backend)
