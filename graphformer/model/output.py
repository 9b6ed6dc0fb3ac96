"""What a forward pass returns besides log-probabilities (the Universal Transformer's extras)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import torch


class ModelOutput(NamedTuple):
    """log_probs: (N_tgt, vocab). aux_loss: a loss to add to the likelihood's (the Universal
    Transformer's weighted ponder cost), ``None`` for the Transformer. stats: per side ('src',
    'tgt') what adaptive computation time did (`graphformer.model.act.ACTStats`)."""

    log_probs: torch.Tensor
    aux_loss: Optional[torch.Tensor] = None
    stats: Optional[dict] = None
