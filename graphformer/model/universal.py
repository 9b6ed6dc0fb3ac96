r"""The Adaptive Universal Transformer on graphs (Dehghani et al., 2018; Graves, 2016).

One shared encoder layer and one shared decoder layer are applied up to ``max_depth`` times. At
step s every token's state gets its position and the step encoded (the same sinusoids over
positions and over steps), and a halting unit says how sure the token is that it is done:

    p_s   = sigmoid(w_h . LN(h_s) + b_h)                          per token, per step
    halt at the first step S where  p_1 + ... + p_S > threshold   (or at s = max_depth)
    w_s   = p_s for s < S,   w_S = R = 1 - (p_1 + ... + p_{S-1})     (the weights sum to 1)
    out   = sum_s w_s h_s                                         the halting-weighted state
    ponder cost = S + R, averaged over tokens and added to the loss with weight ``ponder_weight``

Halted tokens drop out of the graph: each step's pre functions, messages and post functions run
only on the tokens still active and their incoming edges. A halted token keeps serving as key and
value with the keys and values of its last step, so its state never changes again.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from graphformer.attention import DEFAULT_BACKEND, check_backend, graph_attention
from graphformer.graphs import CROSS, DEC, ENC, GraphBatch
from graphformer.model.embedding import Embedder, SinusoidalPositions, embed_source
from graphformer.model.layers import DecoderLayer, EncoderLayer
from graphformer.model.transformer import Generator, ModelConfig, make_embedders


@dataclass
class ACTStats:
    """What one ACT pass did, for one side (source or target)."""

    steps: torch.Tensor                               # (N,) steps each token took (1..max_depth)
    remainders: torch.Tensor                          # (N,) R of each token
    weights: torch.Tensor                             # (N, max_depth) halting weights w_s
    active_nodes: list[int] = field(default_factory=list)   # tokens updated at each step
    active_edges: list[int] = field(default_factory=list)   # messages sent at each step (all attentions)
    states: list[torch.Tensor] = field(default_factory=list)  # (N, d) after each step, if recorded

    @property
    def ponder_cost(self) -> torch.Tensor:
        return (self.steps.to(self.remainders.dtype) + self.remainders).mean()


class HaltingUnit(nn.Module):
    def __init__(self, d_model: int, init_bias: float = 1.0):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.proj = nn.Linear(d_model, 1)
        nn.init.constant_(self.proj.bias, init_bias)  # start by pondering for a few steps (as in UT)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(self.norm(h))).squeeze(-1)


class ACT:
    """Bookkeeping of adaptive computation time for N tokens; ``step`` returns the active mask."""

    def __init__(self, n: int, max_depth: int, threshold: float, like: torch.Tensor):
        self.max_depth, self.threshold = max_depth, threshold
        self.cumulative = like.new_zeros(n)
        self.weights = like.new_zeros(n, max_depth)
        self.steps = torch.zeros(n, dtype=torch.int64, device=like.device)
        self.remainders = like.new_zeros(n)
        self.running = torch.ones(n, dtype=torch.bool, device=like.device)

    def weigh(self, s: int, p: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
        """Halting weights of step s for the active tokens (p: their halting probabilities)."""
        last = s == self.max_depth - 1
        halts = (self.cumulative[active] + p > self.threshold) | last
        remainder = 1.0 - self.cumulative[active]
        w = torch.where(halts, remainder, p)
        self.weights = self.weights.index_put((active.nonzero().squeeze(1), torch.full_like(p, s, dtype=torch.int64)), w)
        self.cumulative = self.cumulative.index_put((active,), self.cumulative[active] + w)
        self.steps[active] += 1
        ids = active.nonzero().squeeze(1)
        self.remainders = self.remainders.index_put((ids[halts],), remainder[halts])
        self.running = self.running.clone()
        self.running[ids[halts]] = False
        return w

    def finish(self, stats: ACTStats) -> ACTStats:
        stats.steps, stats.remainders, stats.weights = self.steps, self.remainders, self.weights
        return stats


class UniversalTransformer(nn.Module):
    """Encoder-decoder Universal Transformer with ACT, on the same graph batches as the Transformer."""

    def __init__(self, cfg: ModelConfig, attention_backend: str = DEFAULT_BACKEND):
        super().__init__()
        if cfg.model != "universal":
            raise ValueError("UniversalTransformer needs a config with model='universal'")
        self.cfg = cfg
        self.attention_backend = check_backend(attention_backend)  # as in GraphTransformer
        self.src_embed, self.tgt_embed = make_embedders(cfg)
        self.depth = SinusoidalPositions(cfg.d_model, cfg.max_depth)
        self.encoder_layer = EncoderLayer(cfg.d_model, cfg.heads, cfg.d_ff, cfg.dropout, cfg.norm_first)
        self.decoder_layer = DecoderLayer(cfg.d_model, cfg.heads, cfg.d_ff, cfg.dropout, cfg.norm_first)
        self.encoder_halt = HaltingUnit(cfg.d_model)
        self.decoder_halt = HaltingUnit(cfg.d_model)
        self.encoder_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model) if cfg.norm_first else nn.Identity()
        self.generator = Generator(cfg.d_model, cfg.tgt_vocab)
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if cfg.tie != "none":
            self.generator.proj.weight = self.tgt_embed.tokens.table.weight
        self.stats: dict[str, ACTStats] = {}
        self.aux_loss = None
        self.record_states = False  # keep every step's states in ``stats`` (for plots and tests)

    def make_pool(self):
        """A graph pool with this model's attention patterns."""
        return self.cfg.graph_pool()

    def _timing(self, positions: torch.Tensor, s: int, embedder: Embedder) -> torch.Tensor:
        depth = self.depth.table[s].to(embedder.tokens.table.weight.dtype)
        return embedder.positions(positions).to(depth.dtype) + depth

    def _ponder(self, side: str, h: torch.Tensor, positions: torch.Tensor, embedder: Embedder,
                halt: HaltingUnit, update) -> torch.Tensor:
        """The ACT loop of one side: ``update(x, active) -> (new states, messages sent)`` runs the
        shared layer on the active tokens; returns the halting-weighted sum of states."""
        act = ACT(len(h), self.cfg.max_depth, self.cfg.act_threshold, h.new_zeros(()))
        out = torch.zeros_like(h)
        stats = ACTStats(act.steps, act.remainders, act.weights)
        for s in range(self.cfg.max_depth):
            active = act.running
            if not bool(active.any()):
                break
            x = h[active] + self._timing(positions[active], s, embedder)
            new, n_edges = update(x, active)
            w = act.weigh(s, halt(new), active)
            h = h.index_put((active,), new)
            out = out.index_put((active,), out[active] + w[:, None] * new)
            self._record(stats, active, n_edges, h)
        self.stats[side] = act.finish(stats)
        return out

    def encode(self, batch: GraphBatch) -> torch.Tensor:
        """(N_src, d_model) memory: the halting-weighted encoder states, normalised."""
        relation, layer, backend = batch.relation(ENC), self.encoder_layer, self.attention_backend
        cache = {}  # keys and values of every source token, as of its last active step

        def update(x, active):
            q, k, v = layer.pre(x)
            cache["k"], cache["v"] = _scatter(cache.get("k"), active, k), _scatter(cache.get("v"), active, v)
            sub = relation.restrict_to_destinations(active)
            return layer.post(x, graph_attention(sub, q, cache["k"], cache["v"], backend)), sub.num_edges

        h = embed_source(self.src_embed, batch)
        return self.encoder_norm(self._ponder("src", h, batch.src_pos, self.src_embed, self.encoder_halt, update))

    def decode(self, batch: GraphBatch, memory: torch.Tensor) -> torch.Tensor:
        self_relation, cross_relation = batch.relation(DEC), batch.relation(CROSS)
        layer, backend = self.decoder_layer, self.attention_backend
        mem_k, mem_v = layer.memory_kv(memory)
        cache = {}

        def update(x, active):
            q, k, v = layer.self_pre(x)
            cache["k"], cache["v"] = _scatter(cache.get("k"), active, k), _scatter(cache.get("v"), active, v)
            sub_self = self_relation.restrict_to_destinations(active)
            x = layer.self_post(x, graph_attention(sub_self, q, cache["k"], cache["v"], backend))
            sub_cross = cross_relation.restrict_to_destinations(active)
            x = layer.cross_post(x, graph_attention(sub_cross, layer.cross_pre(x), mem_k, mem_v, backend))
            return x, sub_self.num_edges + sub_cross.num_edges

        h = self.tgt_embed(batch.tgt_tokens, batch.tgt_pos)
        return self.decoder_norm(self._ponder("tgt", h, batch.tgt_pos, self.tgt_embed, self.decoder_halt, update))

    def _record(self, stats: ACTStats, active: torch.Tensor, n_edges: int, h: torch.Tensor) -> None:
        stats.active_nodes.append(int(active.sum()))
        stats.active_edges.append(n_edges)
        if self.record_states:
            stats.states.append(h.detach().clone())

    def forward(self, batch: GraphBatch) -> torch.Tensor:
        log_probs = self.generator(self.decode(batch, self.encode(batch)))
        self.aux_loss = self.cfg.ponder_weight * (self.stats["src"].ponder_cost + self.stats["tgt"].ponder_cost)
        return log_probs

    def incremental_stepper(self, batch, hyps_per_sentence, max_steps, pool):
        from graphformer.decoding.universal import UniversalStepper
        return UniversalStepper(self, batch, hyps_per_sentence, max_steps, pool)


def _scatter(table, active: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``table`` with the rows of the active tokens replaced (created on the first step)."""
    if table is None:
        table = rows.new_zeros((len(active),) + rows.shape[1:])
    return table.index_put((active,), rows)
