"""Incremental decoding for the Universal Transformer.

As for the Transformer, step t computes only the newest target node of each hypothesis. Inside it,
ACT runs up to max_depth steps; at depth s the node attends to the keys and values that the
earlier target nodes had at depth s, or, if they halted before s, at their last depth. The cache
therefore holds one slice per depth, and a node that halts copies its last keys and values into
the deeper slices: exactly what the training graph gives a halted key node.
"""
from __future__ import annotations

import torch

from graphformer.attention import graph_attention
from graphformer.decoding.steppers import IncrementalStepper
from graphformer.model.universal import ACT


class UniversalStepper(IncrementalStepper):
    def _memory_kv(self, memory):
        return self.model.decoder_layer.memory_kv(memory)

    def _cache_depth(self) -> int:
        return self.model.cfg.max_depth

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.t >= self.max_steps:
            raise RuntimeError("decoding ran past max_steps")
        model, t, cfg = self.model, self.t, self.model.cfg
        layer = model.decoder_layer
        positions = torch.full_like(tokens, t)
        h = model.tgt_embed(tokens, positions)
        act = ACT(len(h), cfg.max_depth, cfg.act_threshold, h.new_zeros(()))
        out = torch.zeros_like(h)
        cross_all = self.cross_relation()
        mem_k, mem_v = self.memory_kv
        backend = model.attention_backend
        for s in range(cfg.max_depth):
            active = act.running
            if not bool(active.any()):
                break
            if s > 0:  # halted nodes keep serving with their last keys and values
                self.keys[s, t] = self.keys[s - 1, t]
                self.values[s, t] = self.values[s - 1, t]
            hyps = active.nonzero().squeeze(1)
            x = h[active] + model._timing(positions[active], s, model.tgt_embed)
            q, k, v = layer.self_pre(x)
            self.keys[s, t, hyps] = k
            self.values[s, t, hyps] = v
            o = graph_attention(self._self_relation(hyps), q, self._cached(self.keys, s), self._cached(self.values, s),
                                backend)
            x = layer.self_post(x, o)
            cross = cross_all.restrict_to_destinations(active)
            new = layer.cross_post(x, graph_attention(cross, layer.cross_pre(x), mem_k, mem_v, backend))
            w = act.weigh(s, model.decoder_halt(new), active)
            h = h.index_put((active,), new)
            out = out.index_put((active,), out[active] + w[:, None] * new)
        for s in range(act.steps.max().item(), cfg.max_depth):  # nodes that all halted early: fill deeper slices
            self.keys[s, t] = self.keys[s - 1, t]
            self.values[s, t] = self.values[s - 1, t]
        self.t += 1
        return model.generator(model.decoder_norm(out))
