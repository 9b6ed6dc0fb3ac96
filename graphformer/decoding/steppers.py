"""Steppers: the model's next-token distribution for a set of growing hypotheses.

Search (greedy or beam) sees only this interface::

    stepper.step(tokens)   feed each hypothesis its newest token (H,), get (H, V) log-probs
    stepper.reorder(idx)   hypothesis h now continues hypothesis idx[h] (beam search)

Two implementations give the same numbers:

* `IncrementalStepper` - graph decoding proper. At step t only the H newest target nodes
  are computed. Each layer's keys and values of earlier target nodes are kept as node state, so
  the only messages sent are along the in-edges of the new nodes: for full attention t + 1
  decoder self-attention edges and n_src cross-attention edges per hypothesis.
* `RecomputeStepper` - rebuilds each hypothesis's whole prefix as a training batch every
  step. Slow (quadratic work), kept as the reference the incremental one is tested against.
"""
from __future__ import annotations

import torch

from graphformer.graphs import CROSS, DEC, GraphBatch, GraphPool, make_batch
from graphformer.graphs.relation import Relation


class IncrementalStepper:
    """Incremental graph decoding for a `graphformer.model.GraphTransformer` or a
    `graphformer.model.UniversalTransformer`: both run ``model.decode`` on the new nodes.

    Args:
        model: the model (used in eval mode under no_grad by the caller).
        batch: an inference batch of B source sentences (``make_batch(pool, src)``).
        hyps_per_sentence: k hypotheses per sentence (1 for greedy, the beam size for beam search);
            hypothesis h belongs to sentence h // k.
        max_steps: most target nodes any hypothesis will have.
        pool: the graph pool of the model's attention patterns; the edges into each new node
            are read from it.

    The node computed at step j for row h of the batch is cached under id ``j * num_hyps + h``
    (one slice of keys and values per layer; per ACT step for the Universal Transformer) and never
    moves. A Universal Transformer node halted before the deepest step keeps serving its last
    keys and values there, as in training. Beam search reorders hypotheses by re-pointing edges instead of copying caches:
    ``lineage[h, j]`` is the row whose step-j node is hypothesis h's j-th target node, and the
    edges into h's new node start from those ids.
    """

    def __init__(self, model: torch.nn.Module, batch: GraphBatch, hyps_per_sentence: int, max_steps: int,
                 pool: GraphPool | None = None):
        self.model = model
        self.pool = pool or model.make_pool()
        self.device = batch.src_tokens.device
        memory = model.encode(batch)
        self.num_memory = len(memory)
        self.memory_kv = model.memory_kv(memory)
        self.num_hyps = batch.size * hyps_per_sentence
        sentence = torch.arange(batch.size, device=self.device).repeat_interleave(hyps_per_sentence)
        self.src_lengths = batch.src_lengths[sentence].tolist()
        self.src_offsets = batch.src_offsets[sentence].tolist()
        # With full cross-attention the edges never change: build them once.
        self.fixed_cross_relation = self._cross_relation(None) if self.pool.cross_is_full else None
        cfg = model.cfg
        self.depth = cfg.max_depth if cfg.model == "universal" else cfg.layers  # cache slices
        shape = (self.depth, max_steps, self.num_hyps, cfg.heads, cfg.d_model // cfg.heads)
        self.keys = memory.new_zeros(shape)
        self.values = memory.new_zeros(shape)
        self.lineage = torch.arange(self.num_hyps, device=self.device)[:, None].repeat(1, max_steps)
        self.max_steps = max_steps
        self.t = 0

    def _self_relation(self, hyps: torch.Tensor) -> Relation:
        """Edges from the cached target nodes of the given hypotheses to their new node t (for the
        causal pattern: nodes 0..t); query i of the relation is hypothesis hyps[i]."""
        t, T = self.t, self.max_steps
        keys = self.pool.incoming(DEC, t + 1, t).to(self.device)
        return Relation.of_rows(keys * self.num_hyps + self.lineage[hyps][:, keys], T * self.num_hyps)

    def _cross_relation(self, t: int | None) -> Relation:
        """Edges from source nodes to each hypothesis's new node t (all source nodes if t is None)."""
        rows = [torch.arange(n) if t is None else self.pool.incoming(CROSS, n, t) for n in self.src_lengths]
        key_index = torch.full((self.num_hyps, max(len(r) for r in rows)), -1, dtype=torch.int64)
        for h, (keys, first) in enumerate(zip(rows, self.src_offsets)):
            key_index[h, :len(keys)] = keys + first
        return Relation.of_rows(key_index.to(self.device), self.num_memory)

    def cross_relation(self) -> Relation:
        if self.fixed_cross_relation is not None:
            return self.fixed_cross_relation
        return self._cross_relation(self.t)

    def _cached(self, cache: torch.Tensor, depth: int) -> torch.Tensor:
        """(max_steps * num_hyps, heads, d_head) view of one layer's (or ACT step's) cache."""
        return cache[depth].reshape((-1,) + cache.shape[3:])

    def _remember(self, depth: int, k: torch.Tensor, v: torch.Tensor):
        """Cache the new nodes' keys and values of one layer (or ACT step); attend over the cache."""
        self.keys[depth, self.t], self.values[depth, self.t] = k, v
        self.reached = max(self.reached, depth + 1)
        return self._cached(self.keys, depth), self._cached(self.values, depth)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.t >= self.max_steps:
            raise RuntimeError("decoding ran past max_steps")
        t, self.reached = self.t, 0
        everyone = torch.arange(self.num_hyps, device=self.device)
        out = self.model.decode(tokens, torch.full_like(tokens, t), self._self_relation(everyone),
                                self.cross_relation(), self.memory_kv, self._remember)
        for depth in range(self.reached, self.depth):  # every node halted early: deeper slices keep its last
            self.keys[depth, t], self.values[depth, t] = self.keys[depth - 1, t], self.values[depth - 1, t]
        self.t += 1
        return out.log_probs

    def reorder(self, parents: torch.Tensor) -> None:
        self.lineage = self.lineage[parents]
        self.lineage[:, self.t:] = torch.arange(self.num_hyps, device=self.device)[:, None]  # future nodes: own row


class RecomputeStepper:
    """Reference stepper: recompute every hypothesis's full prefix at every step."""

    def __init__(self, model, src: list[list[int]], hyps_per_sentence: int, pool: GraphPool, device=None):
        self.model, self.pool, self.device = model, pool, device
        self.src = [s for s in src for _ in range(hyps_per_sentence)]
        self.prefixes = [[] for _ in self.src]
        self.started = False

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        # The first token is <s>, which make_batch adds itself.
        if self.started:
            for prefix, tok in zip(self.prefixes, tokens.tolist()):
                prefix.append(tok)
        self.started = True
        batch = make_batch(self.pool, self.src, self.prefixes)
        if self.device is not None:
            batch = batch.to(self.device)
        log_probs = self.model(batch)
        last = torch.cumsum(batch.tgt_lengths, 0) - 1
        return log_probs[last.to(log_probs.device)]

    def reorder(self, parents: torch.Tensor) -> None:
        self.prefixes = [list(self.prefixes[p]) for p in parents.tolist()]
