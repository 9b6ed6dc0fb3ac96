"""The graph decoder with its step written out inline, as the dense peer's is: a bound on what
cutting the graph decoder's per-step overhead could reach, not a decoder to use."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from graphformer.decoding import IncrementalStepper
from graphformer.graphs import patterns


class InlineStepGraphStepper:
    """Everything is an `IncrementalStepper`'s, held as ``graph`` (the batch and encoder, the
    padded memory ``memory_kv``, the `graphformer.decoding.cache.DecodingCache`, reorders and
    dropped rows) except ``step``: its operations inline, with no relation, backend dispatch, node
    functions or residual blocks, one fused attention call per sub-layer over the cache's blocks
    and the memory's, read in place. It computes what the graph step computes
    (`tests/bench/test_benchmarks.py` holds it to that). Covers what the fixed setting decodes: a
    pre-norm Transformer, causal self-attention and full cross-attention, sources of one length.
    """

    def __init__(self, model, batch, hyps_per_sentence: int, max_steps: int, pool):
        lengths = set(batch.src_lengths.tolist())
        if not (
            model.cfg.model == "transformer"
            and model.cfg.norm_first
            and pool.dec is patterns.causal
            and pool.cross_is_full
            and len(lengths) == 1
        ):
            raise ValueError(
                "the inline step covers pre-norm Transformers with causal and full attention on sources "
                "of one length (the fixed setting)"
            )
        self.graph = IncrementalStepper(model, batch, hyps_per_sentence, max_steps, pool)
        self.model, self.k, self.width = model, hyps_per_sentence, lengths.pop()
        self.device = self.graph.device

    @property
    def num_hyps(self) -> int:
        return self.graph.num_hyps

    def reorder(self, parents):
        self.graph.reorder(parents)

    def step(self, tokens):
        model, cache, n, k = self.model, self.graph.cache, self.graph.num_hyps, self.k
        x = model.tgt_embed.embed(tokens, torch.full_like(tokens, self.graph.t))
        for i, layer in enumerate(model.decoder.layers):
            attn, cross, d = layer.self_attn, layer.cross_attn, x.shape[1]
            q, key, value = (
                F.linear(layer.self_block.norm(x), attn.in_proj.weight, attn.in_proj.bias)
                .view(n, 3, attn.heads, -1)
                .unbind(1)
            )
            cache.write(i, key, value)
            keys, values = (z.transpose(1, 2) for z in cache.blocks(i))  # (n, H, t + 1, d_head)
            x = x + attn.out_proj(F.scaled_dot_product_attention(q[:, :, None], keys, values).view(n, d))
            q = F.linear(layer.cross_block.norm(x), cross.in_proj.weight[:d], cross.in_proj.bias[:d])
            q = q.view(n // k, k, cross.heads, -1).transpose(1, 2)  # (sentences, H, k, d_head)
            memory = (z.view(n // k, self.width, cross.heads, -1).transpose(1, 2) for z in self.graph.memory_kv[i])
            o = F.scaled_dot_product_attention(q, *memory).transpose(1, 2).reshape(n, d)
            x = x + cross.out_proj(o)
            x = x + layer.feed_forward.linear2(torch.relu(layer.feed_forward.linear1(layer.ff_block.norm(x))))
        cache.end_step()
        return model.generator(model.decoder.norm(x))
