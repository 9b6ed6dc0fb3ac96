"""Where a training run stands: the counters a checkpoint saves and a resumed run goes on from.

A checkpoint keeps them as a plain dict (``state["progress"]``), which loads with
``weights_only=True`` and which every earlier run directory already holds; `Progress` is read
from and written to that form at the checkpoint's edge only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Progress:
    """``epoch``: epochs complete; ``batch``: optimizer steps taken in the current epoch (where
    a resumed run goes on); ``step``: optimizer steps taken in all; ``best``: the best validation
    metric so far (`TrainConfig.select_by`), None before the first; ``epochs_since_best``:
    validations in a row that did not improve on it (``--patience``)."""

    epoch: int = 0
    batch: int = 0
    step: int = 0
    best: float | None = None
    epochs_since_best: int = 0

    def to_dict(self) -> dict:
        """A checkpoint's ``"progress"``."""
        return asdict(self)

    @classmethod
    def from_dict(cls, saved: dict) -> Progress:
        """A checkpoint's ``"progress"`` read back; one written before the run's first validation
        may lack ``epochs_since_best``."""
        return cls(saved["epoch"], saved["batch"], saved["step"], saved["best"], saved.get("epochs_since_best", 0))
