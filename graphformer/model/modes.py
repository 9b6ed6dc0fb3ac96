"""A model's train/eval mode, switched for a block of code and always switched back.

Decoding, scoring and drawing attention maps run a model in eval mode (no dropout) whatever mode
the caller left it in; the caller's mode must come back even when the block raises, or a training
loop that catches the error would go on training without dropout.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Run the block with ``model`` in eval mode; restore its previous mode on the way out."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
