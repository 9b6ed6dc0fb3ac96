r"""Label-smoothed negative log-likelihood over target nodes.

The smoothed target puts 1 - eps on the gold token and spreads eps evenly over the other
tokens except `<pad>`, which no target node ever predicts:

    q(w) = 1 - eps                  if w = gold
         = eps / (V - 2)            for every other w != <pad>
    loss = - sum_nodes sum_w q(w) log p(w)

Graph batches have no padding nodes, so no position needs masking; gold `<pad>` ids (possible in
dense layouts) are skipped all the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from graphformer.vocab import PAD


def label_smoothed_nll(log_probs: torch.Tensor, gold: torch.Tensor, smoothing: float = 0.1) -> torch.Tensor:
    """Summed loss of (N, V) log-probabilities against (N,) gold ids (divide by the token count)."""
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"label smoothing must be in [0, 1), got {smoothing}")
    keep = gold != PAD
    log_probs, gold = log_probs[keep], gold[keep]
    nll = -log_probs.gather(1, gold[:, None]).squeeze(1)
    if smoothing == 0.0:
        return nll.sum()
    vocab = log_probs.shape[1]
    others = -(log_probs.sum(1) - log_probs[:, PAD]) - nll  # - sum of log p over w not in {gold, pad}
    return ((1.0 - smoothing) * nll + smoothing / (vocab - 2) * others).sum()


def token_accuracy_counts(log_probs: torch.Tensor, gold: torch.Tensor, never: Sequence[int] = ()) -> tuple[int, int]:
    """(correct, total) argmax predictions over non-pad gold tokens. The ids in ``never`` are
    left out of the argmax: what the model's decoding can never output (search never emits
    `<pad>` or `<s>`, a classifier never predicts a special) is not its prediction either."""
    keep = gold != PAD
    log_probs = log_probs[keep]
    if never:
        log_probs = log_probs.index_fill(1, torch.tensor(never, device=log_probs.device), float("-inf"))
    return int((log_probs.argmax(1) == gold[keep]).sum()), int(keep.sum())


class NonFiniteLoss(ArithmeticError):
    """A step's loss overflowed (inf or nan): the step is not applied."""

    def __init__(self, value: float):
        super().__init__(f"non-finite loss {value}")
        self.value = value
