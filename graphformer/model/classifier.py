r"""An encoder-only classifier on the same graphs: the encoder stack and one label per sample.

    h      = Encoder(embed_src(<cls> x_1 ... x_n </s>))       over the 'enc' relation (model 'encoder';
                                                                'universal-encoder': one shared layer with ACT)
    z_b    = h[<cls> node of sample b]                          pooling = 'cls'
           = mean of h over the token nodes of sample b         pooling = 'mean' (no <cls> node)
           = h[</s> node of sample b]                           pooling = 'last' (no <cls> node)
    logp_b = log_softmax(z_b W + c)                             (B, labels)

The loss is the trainer's: label-smoothed cross-entropy of ``logp`` against the (B,) labels in
``batch.gold`` (see `graphformer.graphs.batch.make_batch`), plus the weighted ponder cost with the
universal encoder, and accuracy is the share of argmax labels that are right. No decoder is built.

The `<cls>` node is global, and that is expressed as edges, not special code: the classifier's
graph pool adds the term ``global:1`` to the encoder pattern, so the first node of every sample
reads every token and every token reads it (`graphformer.graphs.pool.GraphPool`). Through it any
pattern gets long reach (two hops: token -> `<cls>` -> token). Mean and last pooling add no node
and no edges, so they show where local patterns fail: mean pooling reads every token's final
state, each of which under a purely local pattern has heard only of its neighbourhood; last
pooling reads one node, the closing `</s>`, as a decoder-only classifier reads its final token.
That suits retrieval (recall): the answer has to reach one place, next to the query, rather than
be spread over the average of thousands of tokens.
"""

from __future__ import annotations

import torch
from torch import nn

from graphformer.attention import DEFAULT_BACKEND
from graphformer.graphs import ENC, GraphBatch
from graphformer.graphs.relation import Relation, sample_of
from graphformer.model.act import ACTStats
from graphformer.model.base import GraphModel
from graphformer.model.config import ModelConfig
from graphformer.model.embedding import TokenEmbedding, check_ids, embed_source, make_embedder
from graphformer.model.layers import Generator, xavier_init
from graphformer.model.output import ModelOutput
from graphformer.model.transformer import Encoder
from graphformer.model.universal import UniversalEncoder
from graphformer.vocab import EOS, PAD, SOS, UNK

# The specials are never a prediction. <unk> is no label either: a test line's label unseen in
# training reads as <unk>, and answering <unk> must not count as getting it right.
NEVER_LABELS = (PAD, SOS, EOS, UNK)


class EncoderClassifier(GraphModel):
    """Encoder stack (``model='encoder'``) and a classification head over ``cfg.tgt_vocab`` labels
    (`UniversalEncoderClassifier`: the same on the universal encoder)."""

    kind = "encoder"

    def __init__(self, cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND):
        super().__init__(cfg, attention_backend)
        self.src_embed = make_embedder(cfg, TokenEmbedding(cfg.src_vocab, cfg.d_model))
        self.encoder = self.make_encoder(cfg)
        self.head = Generator(cfg.d_model, cfg.tgt_vocab)
        xavier_init(self)

    def make_encoder(self, cfg: ModelConfig) -> nn.Module:
        return Encoder(cfg)

    def run_encoder(self, batch: GraphBatch, relation: Relation, h: torch.Tensor) -> tuple[torch.Tensor, None]:
        """(N_src, d_model) encoder output of the embedded source nodes ``h``, and no ACT statistics."""
        return self.encoder(relation, h, self.attention_backend), None

    def _encode(self, batch: GraphBatch) -> tuple[torch.Tensor, ACTStats | None]:
        self.check_batch(batch)
        return self.run_encoder(batch, batch.relation(ENC), embed_source(self.src_embed, batch))

    def encode(self, batch: GraphBatch) -> torch.Tensor:
        """(N_src, d_model) encoder output."""
        return self._encode(batch)[0]

    def summarize(self, batch: GraphBatch, h: torch.Tensor) -> torch.Tensor:
        """(B, d_model): each sample's `<cls>` node, the mean of its token nodes (not span nodes), or
        its `</s>` node."""
        if self.cfg.cls_node:
            return h[batch.src_offsets]  # the <cls> node is each sample's first
        if self.cfg.pooling == "last":
            return h[batch.src_offsets + batch.src_lengths - 1]  # span nodes (trees) come after the tokens
        sample = sample_of(batch.src_nodes)
        rank = torch.arange(len(h), device=h.device) - batch.src_offsets[sample]  # node's index in its sample
        is_token = rank < batch.src_lengths[sample]
        total = h.new_zeros(batch.size, h.shape[1]).index_add(0, sample[is_token], h[is_token])
        return total / batch.src_lengths[:, None].to(h.dtype)

    def forward(self, batch: GraphBatch, full_output: bool = False):
        """(B, tgt_vocab) log-probabilities of each sample's label; with ``full_output`` a
        `ModelOutput`, which for the universal encoder holds the weighted ponder cost and its ACT
        statistics (``stats['src']``)."""
        h, stats = self._encode(batch)  # checks first that the batch is a classifier's
        if batch.gold is not None:
            check_ids(batch.gold, self.cfg.tgt_vocab, "label", "label vocabulary", "labels")
        log_probs = self.head(self.summarize(batch, h))
        if not full_output:
            return log_probs
        if stats is None:
            return ModelOutput(log_probs)
        return ModelOutput(log_probs, {"src": stats}, self.cfg.ponder_weight)

    @torch.no_grad()
    def predict(self, batch: GraphBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(B,) most likely labels (never a special: `<pad>`, `<s>`, `</s>`, `<unk>`) and (B,) their
        log-probabilities."""
        log_probs = self(batch).clone()
        log_probs[:, list(NEVER_LABELS)] = float("-inf")
        best, labels = log_probs.max(dim=1)
        return labels, best


class UniversalEncoderClassifier(EncoderClassifier):
    """`EncoderClassifier` on the universal encoder (``model='universal-encoder'``): one shared
    layer repeated with ACT, whose ponder cost joins the loss."""

    kind = "universal-encoder"
    records_maps = False  # its steps attend on subgraphs of the active nodes

    def make_encoder(self, cfg: ModelConfig) -> nn.Module:
        return UniversalEncoder(cfg)

    def run_encoder(self, batch: GraphBatch, relation: Relation, h: torch.Tensor) -> tuple[torch.Tensor, ACTStats]:
        """(N_src, d_model) halting-weighted encoder states and what ACT did."""
        return self.encoder(relation, h, batch.src_pos, self.src_embed, self.attention_backend)
