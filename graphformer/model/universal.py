r"""The Adaptive Universal Transformer on graphs (Dehghani et al., 2018; Graves, 2016).

One shared encoder layer and one shared decoder layer are applied up to ``max_depth`` times. At
step s every token's state gets its position and the step encoded (the same sinusoids over
positions and over steps), and a halting unit says how sure the token is that it is done
(adaptive computation time: the equations are in `graphformer.model.act`). The token's output is
the halting-weighted sum of its states, out = sum_s w_s h_s, and the ponder cost S + R joins the
loss with weight ``ponder_weight``.

Halted tokens drop out of the graph: each step's pre functions, messages and post functions run
only on the tokens still active and their incoming edges. A halted token keeps serving as key and
value with the keys and values of its last step, so its state never changes again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from graphformer.attention import DEFAULT_BACKEND
from graphformer.graphs import CROSS, DEC, ENC, GraphBatch
from graphformer.graphs.relation import Relation
from graphformer.model.act import ACT, ACTStats, HaltingUnit
from graphformer.model.base import MemoryKV, SequenceModel
from graphformer.model.config import ModelConfig
from graphformer.model.embedding import Embedder, SinusoidalPositions, embed_source, make_embedders
from graphformer.model.layers import Generator, decoder_layer, encoder_layer, final_norm, init_and_tie
from graphformer.model.output import ModelOutput


def ponder(
    h: torch.Tensor,
    timing: Callable,
    halt: HaltingUnit,
    update: Callable,
    cfg: ModelConfig,
    record_states: bool = False,
) -> tuple[torch.Tensor, ACTStats]:
    """The ACT loop of one side over its (N, d_model) token states ``h``.

    Before step s the active tokens' states get ``timing(ids, s)``, then ``update(x, active, ids, s)
    -> (new states, messages sent)`` runs the shared layer on them (``active``: the (N,) mask of
    the tokens still running; ``ids``: theirs, ascending). Returns the (N, d_model)
    halting-weighted sum of states and what ACT did (every step's states too, if ``record_states``).
    """
    act = ACT(len(h), cfg.max_depth, cfg.act_threshold, h.new_zeros(()))
    out = torch.zeros_like(h)
    stats = ACTStats(act.steps, act.remainders, act.weights)
    for s in range(cfg.max_depth):
        active = act.running
        ids = active.nonzero().squeeze(1)  # the step's one read of the mask: the rest index by ids
        if not len(ids):
            break
        x = h[ids] + timing(ids, s)
        new, n_edges = update(x, active, ids, s)
        w = act.weigh(s, halt(new), ids)
        h = h.index_put((ids,), new)
        out = out.index_put((ids,), out[ids] + w[:, None] * new)
        stats.active_nodes.append(len(ids))
        stats.active_edges.append(n_edges)
        if record_states:
            stats.states.append(h.detach().clone())
    return out, act.finish(stats)


def timing_signal(depth: SinusoidalPositions, embedder: Embedder, positions: torch.Tensor, s: int) -> torch.Tensor:
    """(N, d_model) what step s adds to each state: its position's encoding and the step's."""
    step = depth.table[s].to(embedder.tokens.table.weight.dtype)
    return embedder.positions(positions).to(step.dtype) + step


class UniversalEncoder(nn.Module):
    """One shared encoder layer applied to the tokens with ACT over the 'enc' relation; the encoder
    of the `UniversalTransformer` and of the encoder-only classifier (``model='universal-encoder'``)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.depth = SinusoidalPositions(cfg.d_model, cfg.max_depth)
        self.layer = encoder_layer(cfg)
        self.halt = HaltingUnit(cfg.d_model)
        self.norm = final_norm(cfg)

    def forward(
        self,
        relation: Relation,
        h: torch.Tensor,
        positions: torch.Tensor,
        embedder: Embedder,
        backend: str = DEFAULT_BACKEND,
        record_states: bool = False,
    ) -> tuple[torch.Tensor, ACTStats]:
        """(N_src, d_model) halting-weighted states, normalised, and what ACT did, from the
        embedded tokens ``h`` at ``positions`` (the embedder gives the per-step timing signal)."""
        latest = LatestKeys(len(h))

        def update(x, active, ids, s):
            sub = relation.restrict_to_destinations(active)
            return self.layer(sub, x, backend, latest.at(ids), depth=s), sub.num_edges

        out, stats = ponder(
            h,
            lambda ids, s: timing_signal(self.depth, embedder, positions[ids], s),
            self.halt,
            update,
            self.cfg,
            record_states,
        )
        return self.norm(out), stats


class UniversalTransformer(SequenceModel):
    """Encoder-decoder Universal Transformer with ACT, on the same graph batches as the Transformer
    (``model='universal'``)."""

    kind = "universal"
    records_maps = False  # its steps attend on subgraphs of the active nodes: see graphformer.viz.step_maps

    def __init__(self, cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND):
        super().__init__(cfg, attention_backend)
        self.src_embed, self.tgt_embed = make_embedders(cfg)
        self.encoder = UniversalEncoder(cfg)
        self.decoder_layer = decoder_layer(cfg)
        self.decoder_halt = HaltingUnit(cfg.d_model)
        self.decoder_norm = final_norm(cfg)
        self.generator = Generator(cfg.d_model, cfg.tgt_vocab)
        init_and_tie(self)
        self.record_states = False  # keep every step's states in the ACT statistics (for plots and tests)
        self._register_load_state_dict_pre_hook(_rename_flat_encoder_keys)

    @property
    def cache_depth(self) -> int:
        """Steps an incremental decoding cache holds keys and values for: the shared layer's, up to max_depth."""
        return self.cfg.max_depth

    def _encode(self, batch: GraphBatch) -> tuple[torch.Tensor, ACTStats]:
        self.check_batch(batch)
        return self.encoder(
            batch.relation(ENC),
            embed_source(self.src_embed, batch),
            batch.src_pos,
            self.src_embed,
            self.attention_backend,
            self.record_states,
        )

    def encode(self, batch: GraphBatch) -> torch.Tensor:
        """(N_src, d_model) memory: the halting-weighted encoder states, normalised."""
        return self._encode(batch)[0]

    def memory_kv(self, memory: torch.Tensor) -> MemoryKV:
        """The shared decoder layer's cross-attention keys and values of the memory (one pair)."""
        return [self.decoder_layer.memory_kv(memory)]

    def decode(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        self_relation: Relation,
        cross_relation: Relation,
        memory_kv: MemoryKV,
        kv_cache=None,
    ) -> ModelOutput:
        """Log-probabilities (N, tgt_vocab) at N target nodes, pondering each with ACT; the
        statistics are in ``stats['tgt']``. ``kv_cache`` (a
        `graphformer.decoding.cache.DecodingCache`), if given, keeps the nodes' keys and values at
        each step s (halted nodes: those of their last step) and gives the ones to attend over."""
        layer, backend = self.decoder_layer, self.attention_backend
        latest = LatestKeys(len(tokens), kv_cache)

        def update(x, active, ids, s):
            sub_self = self_relation.restrict_to_destinations(active)
            sub_cross = cross_relation.restrict_to_destinations(active)
            x = layer(sub_self, sub_cross, x, memory_kv[0], backend, latest.at(ids), depth=s)
            return x, sub_self.num_edges + sub_cross.num_edges

        h = self.tgt_embed(tokens, positions)
        steps = self.encoder.depth  # one table of step encodings serves both sides (fixed sinusoids)
        out, stats = ponder(
            h,
            lambda ids, s: timing_signal(steps, self.tgt_embed, positions[ids], s),
            self.decoder_halt,
            update,
            self.cfg,
            self.record_states,
        )
        return ModelOutput(self.generator(self.decoder_norm(out)), {"tgt": stats}, self.cfg.ponder_weight)

    def forward(self, batch: GraphBatch, full_output: bool = False):
        """(N_tgt, tgt_vocab) log-probabilities; with ``full_output`` a `ModelOutput` that
        also holds the weighted ponder cost (``aux_loss``) and both sides' ACT statistics."""
        memory, src_stats = self._encode(batch)
        out = self.decode(
            batch.tgt_tokens, batch.tgt_pos, batch.relation(DEC), batch.relation(CROSS), self.memory_kv(memory)
        )
        if not full_output:
            return out.log_probs
        tgt_stats = out.stats["tgt"]
        return ModelOutput(out.log_probs, {"src": src_stats, "tgt": tgt_stats}, self.cfg.ponder_weight)


# Before UniversalEncoder (graphformer's first release) the encoder's parts were the model's own.
FLAT_ENCODER_NAMES = {
    "encoder_layer.": "encoder.layer.",
    "encoder_halt.": "encoder.halt.",
    "encoder_norm.": "encoder.norm.",
}


def _rename_flat_encoder_keys(state_dict: dict, prefix: str, *_) -> None:
    """Load hook: weights saved under the first release's names load into `UniversalEncoder`."""
    for key in list(state_dict):
        for old, new in FLAT_ENCODER_NAMES.items():
            if key.startswith(prefix + old):
                state_dict[prefix + new + key[len(prefix + old) :]] = state_dict.pop(key)


class LatestKeys:
    """Keys and values of n tokens as of each one's last active ACT step: a step runs the shared
    layer on the active tokens only, and a halted token keeps serving its last keys and values.

    ``then``: a decoding cache (`graphformer.decoding.cache.DecodingCache`) that keeps each step's
    tables of all n tokens at the step's depth, for the target nodes of later decoding steps.
    """

    def __init__(self, n: int, then=None):
        self.n, self.then = n, then
        self.k = self.v = None  # (n, heads, d_head), made at the first step

    def at(self, ids: torch.Tensor) -> ActiveKeys:
        """What a step's layer on the active tokens ``ids`` (ascending) writes its keys to."""
        return ActiveKeys(self, ids)

    def write(self, ids: torch.Tensor, depth: int, k: torch.Tensor, v: torch.Tensor):
        """The active tokens' new keys and values replace theirs; the (n, heads, d_head) tables
        (as ``then`` keeps them, if given) are what the queries attend over."""
        self.k, self.v = _scatter(self.k, ids, self.n, k), _scatter(self.v, ids, self.n, v)
        return (self.k, self.v) if self.then is None else self.then.write(depth, self.k, self.v)


@dataclass(frozen=True)
class ActiveKeys:
    """The ``kv_cache`` of one ACT step's layer call (`graphformer.model.layers.kept_keys`): the
    active tokens ``ids`` of a `LatestKeys`."""

    latest: LatestKeys
    ids: torch.Tensor

    def write(self, depth: int, k: torch.Tensor, v: torch.Tensor):
        return self.latest.write(self.ids, depth, k, v)


def _scatter(table, ids: torch.Tensor, n: int, rows: torch.Tensor) -> torch.Tensor:
    """``table`` (n rows) with the rows of the active tokens replaced (created on the first step)."""
    if table is None:
        table = rows.new_zeros((n,) + rows.shape[1:])
    return table.index_put((ids,), rows)
