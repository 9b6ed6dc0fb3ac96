"""Tasks: what training needs to know about a data set, and nothing else.

A task says where its aligned ``{train,valid,test}.{src,tgt}`` files come from (generated,
fetched, or the user's own), how a line of text becomes tokens and back, which validation metric
picks the best checkpoint, whether raw references exist for BLEU, and whether it is classification
(one label token per target line, for ``--model encoder``) or sequence to sequence. The trainer, ``evaluate``
and ``translate`` see tasks only through this interface: a new task is a subclass of ``Task`` and
one line in ``TASKS``.

This module imports neither torch nor DGL (the command line lists the task names from it).
"""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable, Optional

from graphformer.data import listops, multi30k, recall, synthetic
from graphformer.errors import ConfigError, UserError

Tokenize = Callable[[str], list]
Detokenize = Callable[[list], str]


class Task:
    """Whitespace-tokenized parallel text that the user provides (``--data-dir``)."""

    select_by = "loss"          # the validation metric that picks checkpoint_best.pt by default
    needs_data_dir = True       # the data_dir option is required
    classification = False      # targets are one label token each (the encoder classifier's tasks)

    def data_dir(self, data_dir: Optional[str], run_dir: Path) -> Path:
        """Where the tokenized train/valid/test.{src,tgt} files of a run are."""
        return Path(data_dir)

    def prepare(self, data_dir: Optional[str], run_dir: Path, seed: int) -> Path:
        """Make sure the files exist (generate or fetch them); returns their folder."""
        folder = self.data_dir(data_dir, run_dir)
        if not folder.is_dir():
            raise UserError(f"data directory {folder} does not exist; give a folder with train/valid/test .src/.tgt files")
        return folder

    def pipelines(self) -> tuple[Tokenize, Detokenize]:
        """(line -> tokens, target tokens -> line)."""
        return str.split, " ".join

    def references(self, folder: Path, split: str) -> Optional[list[str]]:
        """Raw (untokenized) target lines of a split, for BLEU; None where the task has none."""
        return None


class GeneratedTask(Task):
    """Data generated from the seed into RUN_DIR/data (or data_dir, if given) by
    ``write(folder, seed=seed)``: copy, sort, and the long-range ListOps and associative recall."""

    select_by = "exact_match"
    needs_data_dir = False

    def __init__(self, write: Callable[..., Path], classification: bool = False):
        self.write = write
        self.classification = classification

    def data_dir(self, data_dir, run_dir):
        return Path(data_dir) if data_dir else run_dir / "data"

    def prepare(self, data_dir, run_dir, seed):
        return self.write(self.data_dir(data_dir, run_dir), seed=seed)


class Multi30kTask(Task):
    """English -> German, fetched (or read from the mirror in data_dir), Moses-tokenized into
    RUN_DIR/data, BLEU against the raw references."""

    needs_data_dir = False

    def data_dir(self, data_dir, run_dir):
        return run_dir / "data"

    def prepare(self, data_dir, run_dir, seed):
        return multi30k.prepare(self.data_dir(data_dir, run_dir), mirror=data_dir)

    def pipelines(self):
        return multi30k.MosesPipeline(multi30k.SRC_LANG).tokenize, multi30k.MosesPipeline(multi30k.TGT_LANG).detokenize

    def references(self, folder, split):
        return (folder / f"{split}.ref").read_text(encoding="utf-8").splitlines()


TASKS: dict[str, Task] = {
    "copy": GeneratedTask(partial(synthetic.write_task, "copy")),
    "sort": GeneratedTask(partial(synthetic.write_task, "sort")),
    "listops": GeneratedTask(listops.write_listops, classification=True),   # 500-2000 tokens: raise max_len
    "recall": GeneratedTask(recall.write_recall, classification=True),      # 1024 tokens: raise max_len
    "parallel": Task(),
    "multi30k": Multi30kTask(),
}


def classification_tasks() -> list[str]:
    return [name for name, task in TASKS.items() if task.classification]


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ConfigError("task", f"must be one of {', '.join(TASKS)}, got {name!r}")
    return TASKS[name]
