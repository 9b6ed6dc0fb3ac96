"""Steppers: the model's next-token distribution for a set of growing hypotheses.

Search (greedy or beam) sees only this interface::

    stepper.step(tokens)   feed each live hypothesis its newest token (L,), get (L, V) log-probs
                           (a fresh tensor: search masks it in place)
    stepper.reorder(idx)   the live hypotheses become idx (L',): hypothesis h now continues
                           hypothesis idx[h]; a shorter idx drops the others (finished ones)

A sentence's hypotheses stay one block of ``hyps_per_sentence`` rows: a reorder keeps or drops
whole blocks (beam search drops a sentence once all its hypotheses are done; greedy search, one
hypothesis per sentence, drops each as it ends).

Two implementations give the same numbers:

* `IncrementalStepper` - graph decoding proper. At step t only the newest target node of each
  live hypothesis is computed. Each layer's keys and values of earlier target nodes are kept as
  node state, so the only messages sent are along the in-edges of the new nodes: for full
  attention t + 1 decoder self-attention edges and n_src cross-attention edges per hypothesis.
* `RecomputeStepper` - rebuilds each hypothesis's whole prefix as a training batch every
  step. Slow (quadratic work), kept as the reference the incremental one is tested against.
"""

from __future__ import annotations

import torch

from graphformer.decoding.cache import DecodingCache
from graphformer.decoding.search import reads_are_free
from graphformer.errors import UserError
from graphformer.graphs import CROSS, DEC, ENC, GraphBatch, GraphPool, make_batch, patterns
from graphformer.graphs.batch import per_sample_edges
from graphformer.graphs.relation import Relation
from graphformer.vocab import EOS


def check_decodable(pool: GraphPool) -> None:
    """Refuse a pool whose decoder or cross attention takes edges given with each sample: a
    target's edges are known only once the whole target is, and decoding makes it a token at a time."""
    if not pool.decodable:
        targets = [etype[1] for etype in pool.sample_terms if etype != ENC]
        raise UserError(
            f"cannot decode with per-sample edges in the {' and '.join(targets)} attention (they need the "
            "whole target); use length patterns there, or score given targets with teacher forcing"
        )


def own_cross_patterns(pool: GraphPool, src: list, edges: list | None) -> list | None:
    """Each sample's own cross pattern (a structure derived from its source,
    `graphformer.graphs.sample_edges.operands`), where the pool's cross attention takes one; None
    where it does not. ``src`` and ``edges`` as `make_batch` takes them."""
    if CROSS not in pool.sample_terms:
        return None
    if edges is None:
        raise ValueError("this pool's cross attention takes each sample's own pattern: give edges=[one per sample]")
    own = [entry.get(CROSS) for entry in per_sample_edges(pool, src, edges)]
    if not all(callable(p) for p in own):
        raise ValueError(
            "decoding makes a sample's cross edges a query at a time: give each as a pattern "
            "(num_keys, num_queries) -> (u, v) of the sample, as graphformer.graphs.sample_edges.operands makes"
        )
    return own


class IncrementalStepper:
    """Incremental graph decoding for a `graphformer.model.base.SequenceModel` (the
    `graphformer.model.GraphTransformer` and the `graphformer.model.UniversalTransformer`): it runs
    ``model.decode`` on the new nodes.

    Args:
        model: the model, in eval mode (the stepper runs it without gradients).
        batch: an inference batch of B source sentences (``make_batch(pool, src)``).
        hyps_per_sentence: k hypotheses per sentence (1 for greedy, the beam size for beam search);
            live hypothesis h belongs to live sentence h // k.
        max_steps: most target nodes any hypothesis will have.
        pool: the graph pool of the model's attention patterns; the edges into each new node
            are read from it.
        own_cross: where the pool's cross attention takes a structure derived from each
            source, the B sentences' own patterns ``(num_keys, num_queries) -> (u, v)``
            (`own_cross_patterns`); their edges join the pool's.
        copy_moved_only: on a reorder, find the rows whose parent is another row and copy only
            those (the default on a CPU); else gather every row, which needs no read back from the
            device (the default elsewhere: finding the moved rows would wait for the device at
            every beam search step).

    Node layout (what makes a step cheap). Target node j of live hypothesis h is cached at id
    ``h * max_steps + j`` of ``cache`` (a `graphformer.decoding.cache.DecodingCache`: one
    (L * max_steps, heads, d_head) table of keys and of values per layer; per ACT step for the
    Universal Transformer), and source token j of live sentence s is read at id ``s * width + j``
    of the padded memory ``memory_kv`` (width: the longest source; a `MemoryKV`, one
    (B * width, heads, d_head) pair per decoder layer). With the
    usual patterns (causal decoder self-attention, full cross-attention) a step's relations are
    then `Relation.of_groups`: hypothesis h's keys are one block of the table, and the ``padded``
    backend attends over the blocks in place. Other patterns list each new node's keys as rows
    (`Relation.of_rows`) in the same numbering, read from the pool.

    Positions (what a relative-position bias reads, `graphformer.graphs.edge_types`): the new node
    of step t sits at decoder position t, cached node ``h * max_steps + j`` at j, and memory node
    ``s * width + j`` at its source node's position, as in the whole prefix's training batch, so a
    biased score at step t is the one a full recompute gives. Positions belong to slots, not to
    hypotheses: a reorder moves nothing but the memory's, with its keys.

    ``reorder`` copies the kept hypotheses' cached prefixes into place (beam search) and drops
    finished ones, so the work per step shrinks as hypotheses end. A Universal Transformer node
    halted before the deepest step keeps serving its last keys and values there, as in training.
    """

    @torch.no_grad()
    def __init__(
        self,
        model: torch.nn.Module,
        batch: GraphBatch,
        hyps_per_sentence: int,
        max_steps: int,
        pool: GraphPool | None = None,
        copy_moved_only: bool | None = None,
        own_cross: list | None = None,
    ):
        if model.training:
            raise ValueError(
                "the model is in training mode (dropout on: every run would decode other tokens); "
                "call model.eval() before decoding"
            )
        if max_steps > model.max_target_len:  # checked once: the steps embed unchecked
            raise ValueError(
                f"max_steps {max_steps} exceeds the positional table (max_len={model.max_target_len}); "
                "decode fewer tokens"
            )
        self.model = model
        self.pool = pool or model.make_pool()
        check_decodable(self.pool)
        if (CROSS in self.pool.sample_terms) != (own_cross is not None):
            raise ValueError(
                "own_cross: give each sentence's own cross pattern where, and only where, the pool's cross "
                "attention takes one (own_cross_patterns)"
            )
        self.device = batch.src_tokens.device
        self.copy_moved_only = reads_are_free(self.device) if copy_moved_only is None else copy_moved_only
        self.k = hyps_per_sentence
        self.src_lengths = batch.src_lengths.tolist()  # of the live sentences
        self.width = max(self.src_lengths)
        # Each layer's cross-attention keys and values, projected once per sentence from its real
        # source nodes only, then laid out padded: (B * width, heads, d_head) tensors.
        slots = _padded_slots(batch, self.width).flatten()
        self.memory_kv = [(k[slots], v[slots]) for k, v in model.memory_kv(model.encode(batch))]
        # Each memory key's source position, in the same layout (relative positions read it).
        self.memory_positions = batch.src_pos[slots]
        self.causal = self.pool.dec is patterns.causal
        # The memory's keys give the cache its dtype: the key projections' (under torch.autocast
        # a projection gives bfloat16 or float16 while the memory, out of a layer norm, is float32).
        # Causal groups are read up to the step, rows gather their listed keys, and blocked tiles
        # zero the keys no edge names: the cache's unwritten slots never reach a result.
        _, heads, d_head = self.memory_kv[0][0].shape
        rows = batch.size * hyps_per_sentence
        self.cache = DecodingCache(model.cache_depth, rows, max_steps, heads, d_head, like=self.memory_kv[0][0])
        self.cross = self._full_cross() if self.pool.cross_is_full else None
        # Prefix-stable, so each sentence's edges for every query allowed are made once, here.
        self.own_cross = None if own_cross is None else [p(n, max_steps) for p, n in zip(own_cross, self.src_lengths)]

    @property
    def num_hyps(self) -> int:
        """Live hypotheses (the cache's live rows)."""
        return self.cache.rows

    @property
    def t(self) -> int:
        """The step under way: target nodes each live hypothesis holds so far."""
        return self.cache.steps

    @property
    def max_steps(self) -> int:
        return self.cache.max_steps

    def _full_cross(self) -> Relation:
        """Every live hypothesis's new node attends to all of its sentence's source tokens (the
        queries' positions are the step's: `_cross_relation` gives them)."""
        return Relation.of_groups(
            len(self.src_lengths),
            self.k,
            self.width,
            self.src_lengths,
            self.device,
            key_positions=self.memory_positions,
        )

    def _self_relation(self, positions: torch.Tensor) -> Relation:
        """Edges from each live hypothesis's cached target nodes to its new node t, the new nodes
        at ``positions`` (num_hyps,) and each cached node at its own (`DecodingCache.positions`)."""
        t, T = self.t, self.max_steps
        at = dict(key_positions=self.cache.positions, query_positions=positions)
        if self.causal:
            return Relation.of_groups(self.num_hyps, 1, T, t + 1, self.device, **at)
        keys = self.pool.incoming(DEC, t + 1, t).to(self.device)
        rows = torch.arange(self.num_hyps, device=self.device)[:, None] * T
        return Relation.of_rows(rows + keys, self.num_hyps * T, **at)

    def _cross_relation(self, positions: torch.Tensor) -> Relation:
        """Edges from source tokens to each live hypothesis's new node t, at ``positions``."""
        if self.cross is not None:
            return self.cross.with_query_positions(positions)  # its edges and layouts are built once
        rows = []
        for s, n in enumerate(self.src_lengths):
            keys = self.pool.incoming(CROSS, n, self.t)
            if self.own_cross is not None:
                u, v = self.own_cross[s]
                keys = torch.unique(torch.cat([keys, u[v == self.t]]))
            rows += [keys] * self.k
        key_index = torch.full((self.num_hyps, max(len(r) for r in rows)), -1, dtype=torch.int64)
        for h, keys in enumerate(rows):
            key_index[h, : len(keys)] = keys + (h // self.k) * self.width
        return Relation.of_rows(
            key_index.to(self.device),
            len(self.src_lengths) * self.width,
            key_positions=self.memory_positions,
            query_positions=positions,
        )

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():  # called outside no_grad (search's callers run under inference_mode)
            with torch.no_grad():  # the cache is written in place: no autograd history to keep
                return self.step(tokens)
        if self.t >= self.max_steps:
            raise RuntimeError("decoding ran past max_steps")
        positions = torch.full_like(tokens, self.t)  # every new node is target node t: position t (<s>: 0)
        out = self.model.decode(
            tokens,
            positions,
            self._self_relation(positions),
            self._cross_relation(positions),
            self.memory_kv,
            self.cache,
        )
        self.cache.end_step()
        return out.log_probs

    def reorder(self, parents: torch.Tensor) -> None:
        """Row h now continues row parents[h], and rows past len(parents) are dropped. With
        ``copy_moved_only``, only rows whose parent is another row are copied (search keeps
        survivors in place where it can)."""
        rows = len(parents)
        self.cache.reorder(parents, _moved(parents) if self.copy_moved_only else None)
        if rows < self.num_hyps:  # whole sentences dropped: their memory too
            kept = parents[:: self.k] // self.k
            moved = _moved(kept)
            self.memory_kv = [
                (self._kept_memory(k, kept, moved), self._kept_memory(v, kept, moved)) for k, v in self.memory_kv
            ]
            self.memory_positions = self._kept_memory(self.memory_positions, kept, moved)
            self.src_lengths = [self.src_lengths[s] for s in kept.tolist()]
            if self.own_cross is not None:
                self.own_cross = [self.own_cross[s] for s in kept.tolist()]
            self.cross = self._full_cross() if self.cross is not None else None
        self.cache.drop(rows)

    def _kept_memory(self, x: torch.Tensor, kept: torch.Tensor, moved: torch.Tensor) -> torch.Tensor:
        """The (B * width, ...) memory tensor x with sentence s's block moved from kept[s] (for the
        ``moved`` sentences, whose kept[s] != s), in place."""
        if len(moved):
            blocks = x.view(-1, self.width, *x.shape[1:])
            blocks[moved] = blocks[kept[moved]]
        return x[: len(kept) * self.width]


def _moved(parents: torch.Tensor) -> torch.Tensor:
    """The rows h whose parent is another row (parents[h] != h)."""
    return (parents != torch.arange(len(parents), device=parents.device)).nonzero().squeeze(1)


def _padded_slots(batch: GraphBatch, width: int) -> torch.Tensor:
    """(B, width) memory node of each padded source slot; slots past a sentence's last token
    read its first token (never attended)."""
    first = batch.src_offsets[:, None]
    columns = torch.arange(width, device=first.device)
    return first + torch.where(columns < batch.src_lengths[:, None], columns, 0)


class RecomputeStepper:
    """Reference stepper: recompute every hypothesis's full prefix at every step."""

    def __init__(self, model, src: list[list[int]], hyps_per_sentence: int, pool: GraphPool, device=None, edges=None):
        self.model, self.pool, self.device = model, pool, device
        self.src = [s for s in src for _ in range(hyps_per_sentence)]  # of the live hypotheses
        self.edges = None if edges is None else [e for e in edges for _ in range(hyps_per_sentence)]
        self.prefixes = [[] for _ in self.src]
        self.ended = [False for _ in self.src]  # stepped on after its </s> (search ignores what it gets)
        self.started = False

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        # The first token is <s>, which make_batch adds itself; a prefix holds words only.
        if self.started:
            for h, tok in enumerate(tokens.tolist()):
                self.ended[h] = self.ended[h] or tok == EOS
                if not self.ended[h]:
                    self.prefixes[h].append(tok)
        self.started = True
        batch = make_batch(self.pool, self.src, self.prefixes, edges=self.edges)
        if self.device is not None:
            batch = batch.to(self.device)
        log_probs = self.model(batch)
        last = torch.cumsum(batch.tgt_lengths, 0) - 1
        return log_probs[last.to(log_probs.device)]

    def reorder(self, parents: torch.Tensor) -> None:
        parents = parents.tolist()
        self.prefixes = [list(self.prefixes[p]) for p in parents]
        self.ended = [self.ended[p] for p in parents]
        self.src = [self.src[p] for p in parents]
        if self.edges is not None:
            self.edges = [self.edges[p] for p in parents]
