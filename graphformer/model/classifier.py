r"""An encoder-only classifier on the same graphs: the encoder stack and one label per sample.

    h      = Encoder(embed_src(<cls> x_1 ... x_n </s>))       over the 'enc' relation
    z_b    = h[<cls> node of sample b]                          pooling = 'cls'
           = mean of h over the token nodes of sample b         pooling = 'mean' (no <cls> node)
    logp_b = log_softmax(z_b W + c)                             (B, labels)

The loss is the trainer's: label-smoothed cross-entropy of ``logp`` against the (B,) labels in
``batch.gold`` (see `graphformer.graphs.batch.make_batch`), and accuracy is the share of argmax
labels that are right. No decoder is built.

The `<cls>` node is global, and that is expressed as edges, not special code: the classifier's
graph pool adds the term ``global:1`` to the encoder pattern, so the first node of every sample
reads every token and every token reads it (`graphformer.graphs.pool.GraphPool`). Through it any
pattern gets long reach (two hops: token -> `<cls>` -> token). Mean pooling has no `<cls>` node
and adds no edges: the label reads each token's final state, which under a purely local pattern
has heard only of its neighbourhood, so it shows where local patterns fail.
"""
from __future__ import annotations

import torch
from torch import nn

from graphformer.attention import DEFAULT_BACKEND, check_backend
from graphformer.graphs import ENC, GraphBatch, GraphPool
from graphformer.model.config import ModelConfig
from graphformer.model.embedding import POSITIONS, Embedder, TokenEmbedding, embed_source
from graphformer.model.layers import Generator, init_weights
from graphformer.model.output import ModelOutput
from graphformer.model.transformer import Encoder
from graphformer.vocab import EOS, PAD, SOS

NEVER_LABELS = (PAD, SOS, EOS)  # specials a target line cannot hold (<unk> can: an unseen label)


class EncoderClassifier(nn.Module):
    """Encoder stack + classification head over ``cfg.tgt_vocab`` labels (``model='encoder'``).

    ``attention_backend`` is set as on `graphformer.model.transformer.GraphTransformer`.
    """

    def __init__(self, cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND):
        super().__init__()
        if cfg.model != "encoder":
            raise ValueError(f"EncoderClassifier needs model='encoder', got {cfg.model!r}; use build_model")
        self.cfg = cfg
        self.attention_backend = check_backend(attention_backend)
        self.src_embed = Embedder(TokenEmbedding(cfg.src_vocab, cfg.d_model),
                                  POSITIONS[cfg.positions](cfg.d_model, cfg.max_len), cfg.dropout)
        self.encoder = Encoder(cfg)
        self.head = Generator(cfg.d_model, cfg.tgt_vocab)
        init_weights(self)

    def make_pool(self) -> GraphPool:
        """A source-only graph pool with this model's encoder pattern (and `<cls>` node)."""
        return self.cfg.graph_pool()

    def encode(self, batch: GraphBatch) -> torch.Tensor:
        """(N_src, d_model) encoder output."""
        return self.encoder(batch.relation(ENC), embed_source(self.src_embed, batch), self.attention_backend)

    def summarize(self, batch: GraphBatch, h: torch.Tensor) -> torch.Tensor:
        """(B, d_model): each sample's `<cls>` node, or the mean of its token nodes (not span nodes)."""
        if self.cfg.pooling == "cls":
            return h[batch.src_offsets]  # the <cls> node is each sample's first
        sample = torch.repeat_interleave(torch.arange(batch.size, device=h.device), batch.src_nodes)
        rank = torch.arange(len(h), device=h.device) - batch.src_offsets[sample]  # node's index in its sample
        is_token = rank < batch.src_lengths[sample]
        total = h.new_zeros(batch.size, h.shape[1]).index_add(0, sample[is_token], h[is_token])
        return total / batch.src_lengths[:, None].to(h.dtype)

    def forward(self, batch: GraphBatch, full_output: bool = False):
        """(B, tgt_vocab) log-probabilities of each sample's label (a `ModelOutput` with ``full_output``)."""
        log_probs = self.head(self.summarize(batch, self.encode(batch)))
        return ModelOutput(log_probs) if full_output else log_probs

    @torch.no_grad()
    def predict(self, batch: GraphBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(B,) most likely labels (never `<pad>`, `<s>`, `</s>`) and (B,) their log-probabilities."""
        log_probs = self(batch).clone()
        log_probs[:, list(NEVER_LABELS)] = float("-inf")
        best, labels = log_probs.max(dim=1)
        return labels, best
