"""Where a run stands (`graphformer.training.progress`), and its form in a checkpoint."""

import torch

from graphformer.training import checkpoint
from graphformer.training.config import TrainConfig
from graphformer.training.progress import Progress


def test_progress_goes_into_a_checkpoint_as_a_plain_dict_and_comes_back(tmp_path):
    progress = Progress(epoch=3, batch=2, step=17, best=0.25, epochs_since_best=1)
    checkpoint.save_atomic({"progress": progress.to_dict(), "model": {"w": torch.ones(1)}}, tmp_path / "c.pt")
    saved = checkpoint.load(tmp_path / "c.pt")["progress"]  # loaded with weights_only=True
    assert saved == {"epoch": 3, "batch": 2, "step": 17, "best": 0.25, "epochs_since_best": 1}
    assert Progress.from_dict(saved) == progress


def test_a_checkpoint_written_before_the_first_validation_reads_as_no_epochs_without_a_better_one():
    saved = {"epoch": 0, "batch": 5, "step": 5, "best": None}  # the form of earlier graphformer versions too
    assert Progress.from_dict(saved) == Progress(batch=5, step=5)
    assert Progress() == Progress.from_dict({"epoch": 0, "batch": 0, "step": 0, "best": None})


def test_patience_counts_the_epochs_since_the_best():
    cfg = TrainConfig(task="copy", patience=2)
    assert not cfg.out_of_patience(Progress(epoch=4, epochs_since_best=1))
    assert cfg.out_of_patience(Progress(epoch=4, epochs_since_best=2))
    assert not TrainConfig(task="copy").out_of_patience(Progress(epochs_since_best=9))  # no patience: never
