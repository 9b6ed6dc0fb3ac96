"""The encoder-decoder Transformer on batched graphs.

    memory = Encoder(embed_src(src))                        over the 'enc' relation
    h      = Decoder(embed_tgt(tgt_in), memory)             over 'dec' and 'cross'
    logp   = log_softmax(h W_gen + b_gen)                   (N_tgt, vocab)

Pre-norm stacks end with a final layer norm (their residual stream is never normalised
otherwise); post-norm stacks already end normalised and have none.
"""
from __future__ import annotations

import torch
from torch import nn

from graphformer.graphs import CROSS, DEC, ENC, GraphBatch, GraphPool
from graphformer.model.config import ModelConfig
from graphformer.model.embedding import POSITIONS, Embedder, TokenEmbedding, embed_source
from graphformer.model.layers import DecoderLayer, EncoderLayer


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
    """Encoder-decoder Transformer whose attention runs on the edges of a `GraphBatch`."""

    aux_loss = None  # the Transformer has no loss besides the likelihood

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.model != "transformer":
            raise ValueError(f"GraphTransformer needs model='transformer', got {cfg.model!r}; use build_model")
        self.cfg = cfg
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
        return self.encoder(batch.relation(ENC), embed_source(self.src_embed, batch))

    def decode(self, batch: GraphBatch, memory: torch.Tensor) -> torch.Tensor:
        """(N_tgt, d_model) decoder output for the batch's target nodes."""
        x = self.tgt_embed(batch.tgt_tokens, batch.tgt_pos)
        return self.decoder(batch.relation(DEC), batch.relation(CROSS), x, memory)

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        """(N_tgt, tgt_vocab) log-probabilities of the next token at every target node."""
        return self.generator(self.decode(batch, self.encode(batch)))

    def incremental_stepper(self, batch, hyps_per_sentence: int, max_steps: int, pool):
        from graphformer.decoding.steppers import IncrementalStepper
        return IncrementalStepper(self, batch, hyps_per_sentence, max_steps, pool)


def build_model(cfg: ModelConfig) -> nn.Module:
    """The model class that ``cfg.model`` names."""
    if cfg.model == "universal":
        from graphformer.model.universal import UniversalTransformer
        return UniversalTransformer(cfg)
    return GraphTransformer(cfg)


def make_model(src_vocab: int, tgt_vocab: int | None = None, **hyper) -> nn.Module:
    """Build a `GraphTransformer` (or, with ``model="universal"``, a
    `graphformer.model.universal.UniversalTransformer`); ``hyper`` are
    `ModelConfig` fields."""
    return build_model(ModelConfig(src_vocab=src_vocab, tgt_vocab=tgt_vocab or src_vocab, **hyper))
