"""What a forward pass returns besides log-probabilities (the Universal Transformer's extras)."""

from __future__ import annotations

from typing import NamedTuple

import torch


class ModelOutput(NamedTuple):
    """log_probs: (N_tgt, vocab). stats: per side ('src', 'tgt') what adaptive computation time
    did (`graphformer.model.act.ACTStats`), ``None`` for the Transformer. ponder_weight: the
    weight of the ponder cost in the loss (see ``aux_loss``)."""

    log_probs: torch.Tensor
    stats: dict | None = None
    ponder_weight: float = 0.0

    @property
    def aux_loss(self) -> torch.Tensor | None:
        """The loss to add to the likelihood's: the weighted ponder cost,

            ponder_weight * sum over sides of (mean over the side's nodes of S + R),

        ``None`` without adaptive computation time."""
        return self.aux_loss_over(None)

    def aux_loss_over(self, nodes: dict | None) -> torch.Tensor | None:
        """``aux_loss`` with each side's sum of S + R divided by ``nodes[side]`` instead of this
        batch's node count: this batch's share of the ponder cost of a larger batch it is part of
        (an optimizer step's micro-batches on every process), whose shares add up to its cost."""
        if not self.stats:
            return None
        if nodes is None:
            return self.ponder_weight * sum(stats.ponder_cost for stats in self.stats.values())
        if missing := set(self.stats) - set(nodes):
            raise ValueError(
                f"nodes must give the node count of every side of the batch ({', '.join(self.stats)}); "
                f"missing: {', '.join(sorted(missing))}"
            )
        return self.ponder_weight * sum(stats.ponder_sum / max(nodes[side], 1) for side, stats in self.stats.items())
