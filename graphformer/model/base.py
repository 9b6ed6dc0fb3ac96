"""What a model is to the rest of graphformer: the one protocol training, decoding and viz use.

A model class declares what it is and can do, so that no other module decides by the name of a
kind of model:

    kind             the ``ModelConfig.model`` value it builds: the name of its entry in
                     `graphformer.catalog.MODELS`, where `build_model` finds the class
    records_maps     whether every layer attends once over the whole graph, so that
                     `graphformer.viz.attention_maps` draws one (heads, queries, keys) map per layer
                     (not so the ACT models: their steps attend on subgraphs of the active nodes)

The graph pool a model reads is its config's (``cfg.graph_pool()``: the catalog entry's
``classifies`` capability decides between a classifier's pool and a sequence model's). Every
model gives

    model.cfg, model.attention_backend     its `ModelConfig`; the attention implementation
    model.make_pool()                      its own pool, ``model.cfg.graph_pool()``
    model.check_batch(batch)               refuse a batch made by another kind of pool
    model.encode(batch)                    (N_src, d_model) encoder output
    model(batch, full_output=False)        log-probabilities: (N_tgt, tgt_vocab) of the next
                                           token at every target node (a `SequenceModel`), or
                                           (B, tgt_vocab) of each sample's label (a classifier);
                                           a `ModelOutput` with ``full_output``

A `SequenceModel` (an encoder-decoder) also decodes incrementally (`graphformer.decoding`), with
``max_target_len``, ``cache_depth``, ``memory_kv`` and ``decode``.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from graphformer.attention import DEFAULT_BACKEND
from graphformer.graphs import GraphBatch, GraphPool
from graphformer.model.attention import BackendChoice
from graphformer.model.config import ModelConfig

# What the decoder reads of the encoder's output, the same shape for every model: one (keys, values)
# pair of (N_src, heads, d_head) tensors per decoder layer (a shared layer: one pair).
MemoryKV = list[tuple[torch.Tensor, torch.Tensor]]


class GraphModel(nn.Module):
    """Base of every model class (see the module's docstring for the protocol).

    ``attention_backend`` names the attention implementation every layer uses (see
    `graphformer.attention`); it changes speed, never results, so it is not part of the
    config saved with checkpoints: set it on the model (``model.attention_backend = "torch"``).
    """

    kind: ClassVar[str]
    records_maps: ClassVar[bool] = True
    attention_backend = BackendChoice()

    def __init__(self, cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND):
        super().__init__()
        if cfg.model != self.kind:
            raise ValueError(f"{type(self).__name__} needs model={self.kind!r}, got {cfg.model!r}; use build_model")
        self.cfg = cfg
        self.attention_backend = attention_backend

    def make_pool(self) -> GraphPool:
        """A graph pool with this model's attention patterns."""
        return self.cfg.graph_pool()

    def check_batch(self, batch: GraphBatch) -> None:
        """Refuse a batch made by another kind of graph pool than this model's (a classifier's for a
        sequence model, or one without the `<cls>` node this classifier reads): it would run, wrongly."""
        if batch.targets == self.cfg.classifies or batch.cls_node != self.cfg.cls_node:
            made = (
                "a sequence model's pool"
                if batch.targets
                else "a classifier's pool" + (" with a <cls> node" if batch.cls_node else "")
            )
            raise ValueError(
                f"the batch was made with {made}, not with this {self.cfg.model} model's; make it with "
                "make_batch(model.make_pool(), ...)"
            )


class SequenceModel(GraphModel):
    """An encoder-decoder: a target sequence for each source, decoded token by token.

    Besides `GraphModel`'s protocol it gives what incremental decoding
    (`graphformer.decoding.steppers.IncrementalStepper`) calls:

    * ``max_target_len``: the most target nodes (``<s>`` included) a sequence may have;
    * ``cache_depth``: how many slices of keys and values a decoding cache holds per target node
      (one per decoder layer, or per ACT step of a shared layer);
    * ``memory_kv(memory)``: what the decoder reads of the (N_src, d_model) encoder output, a
      `MemoryKV`;
    * ``decode(tokens, positions, self_relation, cross_relation, memory_kv, kv_cache)``: the
      log-probabilities (N, tgt_vocab) at N target nodes, as a `ModelOutput`; with ``kv_cache``
      (a `graphformer.decoding.cache.DecodingCache`) the nodes' self-attention keys and values
      are written there at each depth, and the queries attend over the cache's.
    """

    @property
    def max_target_len(self) -> int:
        """The most target nodes a sequence may have: the target positional table's length."""
        return self.tgt_embed.positions.max_len

    @property
    def cache_depth(self) -> int:
        raise NotImplementedError

    def memory_kv(self, memory: torch.Tensor) -> MemoryKV:
        raise NotImplementedError
