"""Training options, saved with the run (``RUN_DIR/config.json`` and every checkpoint)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from graphformer.config_io import DictConfig
from graphformer.errors import UserError

TASKS = ("copy", "sort", "parallel", "multi30k")
# metric -> True when larger is better
SELECT_BY = {"loss": False, "token_accuracy": True, "exact_match": True}


@dataclass
class TrainConfig(DictConfig):
    task: str = "copy"
    data_dir: Optional[str] = None      # copy/sort: where the generated files go (default RUN_DIR/data);
                                        # parallel: your files; multi30k: a local mirror of the raw files
    train_limit: Optional[int] = None   # train on the first N training pairs only
    seed: int = 1
    epochs: int = 10
    batch_size: Optional[int] = None    # sentences per batch ...
    batch_tokens: Optional[int] = None  # ... or source + target tokens per batch
    accumulate: int = 1                 # batches per optimizer step
    clip_norm: Optional[float] = None
    warmup: int = 400
    lr_factor: float = 1.0
    label_smoothing: float = 0.1
    min_count: int = 1
    shared_vocab: bool = True
    device: str = "auto"
    valid_beam: int = 1                 # beam for the per-epoch exact-match check (1 = greedy)
    save_every: Optional[int] = None    # also write checkpoint_last.pt every N steps
    max_steps: Optional[int] = None     # stop (with a checkpoint) after this many optimizer steps
    viz_every: Optional[int] = None     # record attention maps of a validation sample every N epochs
    select_by: Optional[str] = None     # validation metric of the best checkpoint (default: exact_match
                                        # for copy/sort, loss otherwise)

    def __post_init__(self):
        if self.task not in TASKS:
            raise UserError(f"unknown task {self.task!r}; choose one of {', '.join(TASKS)}")
        if self.task == "parallel" and not self.data_dir:
            raise UserError("--task parallel needs --data-dir with train/valid/test .src/.tgt files")
        if self.batch_size is None and self.batch_tokens is None:
            self.batch_size = 64
        if self.batch_size is not None and self.batch_tokens is not None:
            raise UserError("give either --batch-size or --batch-tokens, not both")
        for name in ("epochs", "accumulate", "warmup", "min_count", "valid_beam"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        for name in ("batch_size", "batch_tokens", "save_every", "max_steps", "viz_every", "train_limit"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise UserError(f"--label-smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.select_by is None:
            self.select_by = "exact_match" if self.task in ("copy", "sort") else "loss"
        if self.select_by not in SELECT_BY:
            raise UserError(f"unknown --select-by {self.select_by!r}; choose one of {', '.join(SELECT_BY)}")
        if self.clip_norm is not None and self.clip_norm <= 0:
            raise UserError(f"--clip-norm must be positive, got {self.clip_norm}")
