"""The encoder-decoder Transformer on batched graphs.

    memory = Encoder(embed_src(src))                        over the 'enc' relation
    h      = Decoder(embed_tgt(tgt_in), memory)             over 'dec' and 'cross'
    logp   = log_softmax(h W_gen + b_gen)                   (N_tgt, vocab)

Pre-norm stacks end with a final layer norm (their residual stream is never normalised
otherwise); post-norm stacks already end normalised and have none.

`GraphTransformer.decode` runs the decoder on any set of target nodes: all of a batch's in
training, the newest node of each hypothesis in incremental decoding (which passes a
`graphformer.decoding.cache.DecodingCache`: each layer writes its keys and values at its own depth).
"""

from __future__ import annotations

import torch
from torch import nn

from graphformer.attention import DEFAULT_BACKEND
from graphformer.graphs import CROSS, DEC, ENC, GraphBatch
from graphformer.graphs.relation import Relation
from graphformer.model.base import MemoryKV, SequenceModel
from graphformer.model.config import ModelConfig
from graphformer.model.embedding import embed_source, make_embedders
from graphformer.model.layers import Generator, decoder_layer, encoder_layer, final_norm, init_and_tie
from graphformer.model.output import ModelOutput


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(encoder_layer(cfg) for _ in range(cfg.layers))
        self.norm = final_norm(cfg)

    def forward(self, relation, x: torch.Tensor, backend: str = DEFAULT_BACKEND) -> torch.Tensor:
        for layer in self.layers:
            x = layer(relation, x, backend)
        return self.norm(x)


class Decoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(decoder_layer(cfg) for _ in range(cfg.layers))
        self.norm = final_norm(cfg)

    def memory_kv(self, memory: torch.Tensor) -> MemoryKV:
        """Each layer's cross-attention keys and values of the encoder's output."""
        return [layer.memory_kv(memory) for layer in self.layers]

    def forward(
        self,
        self_relation,
        cross_relation,
        x: torch.Tensor,
        memory_kv: MemoryKV,
        backend: str = DEFAULT_BACKEND,
        kv_cache=None,
    ) -> torch.Tensor:
        """``kv_cache``, if given, keeps layer i's self-attention keys and values of these nodes
        at depth i and gives those the queries attend over (a decoding cache)."""
        for i, layer in enumerate(self.layers):
            x = layer(self_relation, cross_relation, x, memory_kv[i], backend, kv_cache, depth=i)
        return self.norm(x)


class GraphTransformer(SequenceModel):
    """Encoder-decoder Transformer whose attention runs on the edges of a `GraphBatch`
    (``model='transformer'``; ``attention_backend``: see `graphformer.model.base.GraphModel`)."""

    kind = "transformer"

    def __init__(self, cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND):
        super().__init__(cfg, attention_backend)
        self.src_embed, self.tgt_embed = make_embedders(cfg)
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.generator = Generator(cfg.d_model, cfg.tgt_vocab)
        init_and_tie(self)

    @property
    def cache_depth(self) -> int:
        """Decoder layers an incremental decoding cache holds keys and values for: one per layer."""
        return self.cfg.layers

    def encode(self, batch: GraphBatch) -> torch.Tensor:
        """(N_src, d_model) encoder output (the memory)."""
        self.check_batch(batch)
        return self.encoder(batch.relation(ENC), embed_source(self.src_embed, batch), self.attention_backend)

    def memory_kv(self, memory: torch.Tensor) -> MemoryKV:
        """What the decoder reads of the memory: each layer's cross-attention keys and values."""
        return self.decoder.memory_kv(memory)

    def decode(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        self_relation: Relation,
        cross_relation: Relation,
        memory_kv: MemoryKV,
        kv_cache=None,
    ) -> ModelOutput:
        """Log-probabilities (N, tgt_vocab) of the next token at N target nodes with these decoder
        input tokens and positions. ``kv_cache`` (a `graphformer.decoding.cache.DecodingCache`), if
        given, keeps each layer's keys and values of these nodes at the layer's depth and gives the
        ones to attend over (default: these). The ids are not checked here (``forward`` checks a
        batch's; search makes its own)."""
        x = self.tgt_embed.embed(tokens, positions)
        h = self.decoder(self_relation, cross_relation, x, memory_kv, self.attention_backend, kv_cache)
        return ModelOutput(self.generator(h))

    def forward(self, batch: GraphBatch, full_output: bool = False):
        """(N_tgt, tgt_vocab) log-probabilities of the next token at every target node (a
        `ModelOutput` with ``full_output``)."""
        self.tgt_embed.check(batch.tgt_tokens, batch.tgt_pos)
        out = self.decode(
            batch.tgt_tokens,
            batch.tgt_pos,
            batch.relation(DEC),
            batch.relation(CROSS),
            self.memory_kv(self.encode(batch)),
        )
        return out if full_output else out.log_probs
