"""A run's data splits, read one way for a new run, a resumed one and a trained one read back.

A split is the task's tokenized ``{name}.src`` and ``{name}.tgt`` files (`read_split`), with each
sample's own attention edges where the model's patterns take them (`attach`); a classification
task's targets are checked to be one label each; of the run's own data, the lines the run uses
(`TrainConfig.used`: the first ``train_limit`` training pairs).
"""

from __future__ import annotations

from pathlib import Path

import torch

from graphformer.data.corpus import Split, read_split
from graphformer.data.tasks import get_task
from graphformer.graphs import GraphPool
from graphformer.graphs.sample_edges import attach
from graphformer.training.checks import check_labels
from graphformer.training.config import TrainConfig
from graphformer.training.distributed import Context
from graphformer.vocab import Vocab


def read_run_split(
    cfg: TrainConfig, folder: Path, name: str, pool: GraphPool, own: bool = True, labels: bool = True
) -> Split:
    """Split ``name`` of ``folder`` for a run of ``cfg`` whose model makes ``pool``; ``own``: the
    run's own data, cut to the lines it uses (a folder the user names is read whole). ``labels``:
    check a classification task's labels, on every line of the file (which the refusal's line
    number counts)."""
    split = attach(read_split(folder, name), pool, folder, name)
    if labels and get_task(cfg.task).classification:
        check_labels({name: split})
    if own:
        split.src_words, split.tgt_words = (cfg.used(name, side) for side in (split.src_words, split.tgt_words))
        split.edges = None if split.edges is None else cfg.used(name, split.edges)
    return split


def load_splits(cfg: TrainConfig, run_dir: Path, ctx: Context, pool: GraphPool) -> dict[str, Split]:
    """The train and valid splits a run trains with (made first by the main process: generated or
    fetched)."""
    task = get_task(cfg.task)
    if ctx.is_main:
        task.prepare(cfg, run_dir)
    if ctx.distributed:
        torch.distributed.barrier()  # rank 0 generates synthetic data before the others read it
    folder = task.data_dir(cfg, run_dir)
    return {name: read_run_split(cfg, folder, name, pool) for name in ("train", "valid")}


def test_split(cfg: TrainConfig, run_dir: Path, pool: GraphPool) -> dict[str, Split]:
    """{"test": the test split} where the data has one, else {}: a new run's samples must all fit
    its positions, those ``evaluate`` scores too (its labels are checked when it is scored)."""
    folder = get_task(cfg.task).data_dir(cfg, run_dir)
    if not (folder / "test.src").is_file():
        return {}
    return {"test": read_run_split(cfg, folder, "test", pool, labels=False)}


def encode(splits: dict[str, Split], src_vocab: Vocab, tgt_vocab: Vocab) -> None:
    """Give each split's samples their token ids in the run's vocabularies."""
    for split in splits.values():
        split.encode(src_vocab, tgt_vocab)
