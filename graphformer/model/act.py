r"""Adaptive computation time (Graves, 2016) for N tokens, as the Universal Transformer uses it.

p_s   = sigmoid(w_h . LN(h_s) + b_h)                          per token, per step (HaltingUnit)
halt at the first step S where  p_1 + ... + p_S > threshold   (or at s = max_depth)
w_s   = p_s for s < S,   w_S = R = 1 - (p_1 + ... + p_{S-1})     (the weights sum to 1)
ponder cost = S + R, averaged over tokens
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class ACTStats:
    """What one ACT pass did, for one side (source or target)."""

    steps: torch.Tensor  # (N,) steps each token took (1..max_depth)
    remainders: torch.Tensor  # (N,) R of each token
    weights: torch.Tensor  # (N, max_depth) halting weights w_s
    active_nodes: list[int] = field(default_factory=list)  # tokens updated at each step
    active_edges: list[int] = field(default_factory=list)  # messages sent at each step (all attentions)
    states: list[torch.Tensor] = field(default_factory=list)  # (N, d) after each step, if recorded

    @property
    def ponder_sum(self) -> torch.Tensor:
        """Sum over tokens of steps + R (0 for a side without tokens)."""
        return (self.steps.to(self.remainders.dtype) + self.remainders).sum()

    @property
    def ponder_cost(self) -> torch.Tensor:
        """Mean over tokens of steps + R; 0 for a side without tokens (the target side of a batch
        without targets), not the NaN of an empty mean."""
        return self.ponder_sum / max(self.steps.numel(), 1)


class HaltingUnit(nn.Module):
    def __init__(self, d_model: int, init_bias: float = 1.0):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.proj = nn.Linear(d_model, 1)
        nn.init.constant_(self.proj.bias, init_bias)  # start by pondering for a few steps (as in UT)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        # In the states' dtype: under autocast the projection gives bfloat16, which would round
        # the halting sums (compared with 1 - eps) to about 3 digits; the states stay float32.
        return torch.sigmoid(self.proj(self.norm(h)).squeeze(-1).to(h.dtype))


class ACT:
    """Bookkeeping of adaptive computation time for N tokens; ``step`` returns the active mask."""

    def __init__(self, n: int, max_depth: int, threshold: float, like: torch.Tensor):
        self.max_depth, self.threshold = max_depth, threshold
        self.cumulative = like.new_zeros(n)
        self.weights = like.new_zeros(n, max_depth)
        self.steps = torch.zeros(n, dtype=torch.int64, device=like.device)
        self.remainders = like.new_zeros(n)
        self.running = torch.ones(n, dtype=torch.bool, device=like.device)

    def weigh(self, s: int, p: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Halting weights of step s for the active tokens ``ids`` (ascending; p: their halting
        probabilities). Indexing by ids, not by the boolean mask, keeps the device from waiting
        for the host: only the step's ``nonzero`` that made ``ids`` reads the mask back."""
        last = s == self.max_depth - 1
        cumulative = self.cumulative[ids]
        halts = (cumulative + p > self.threshold) | last
        remainder = 1.0 - cumulative
        w = torch.where(halts, remainder, p)
        self.weights = self.weights.index_put((ids, torch.full_like(ids, s)), w)
        self.cumulative = self.cumulative.index_put((ids,), cumulative + w)
        self.steps = self.steps.index_put((ids,), self.steps[ids] + 1)
        # A token still running has no remainder yet (0): writing every active token keeps the
        # halted ones' R and the others' 0, without selecting the halted ones on the host.
        self.remainders = self.remainders.index_put((ids,), torch.where(halts, remainder, self.remainders[ids]))
        self.running = self.running.index_put((ids,), ~halts)  # the active tokens were running
        return w

    def finish(self, stats: ACTStats) -> ACTStats:
        stats.steps, stats.remainders, stats.weights = self.steps, self.remainders, self.weights
        return stats
