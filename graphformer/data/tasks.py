"""Tasks: what training needs to know about a data set, and nothing else.

A task says where its aligned ``{train,valid,test}.{src,tgt}`` files come from (generated,
fetched, or the user's own), how a line of text becomes tokens and back, which validation metric
picks the best checkpoint, whether raw references exist for BLEU, which train options it needs or
reads (`Task.check_options`), and whether it is classification (one label token per target line,
for ``--model encoder``) or sequence to sequence. The trainer, ``evaluate``
and ``translate`` see tasks only through this interface: a new task is a ``Task`` (a subclass, or
an instance of one here) and one entry in `graphformer.catalog.TASKS`, whose target is that object.

This module imports neither torch nor DGL (the command line lists the task names from it).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from functools import partial
from pathlib import Path

from graphformer.catalog import TASKS as CATALOG_TASKS
from graphformer.data import boolean, listops, multi30k, recall, subwords, synthetic
from graphformer.data.text import split_lines, write_lines_atomic
from graphformer.errors import ConfigError, UserError, did_you_mean
from graphformer.files import write_text_atomic

Tokenize = Callable[[str], list]
Detokenize = Callable[[list], str]

# The train options only some tasks take (`Task.takes`) -> the tasks that do, as a refusal names them.
TASK_OPTIONS = {
    "train_lengths": f"the tasks {', '.join(synthetic.NAMES)}",
    "test_lengths": f"the tasks {', '.join(synthetic.NAMES)}",
    "bpe": "the multi30k task (raw text)",
}


class Task:
    """Whitespace-tokenized parallel text that the user provides (``--data-dir``)."""

    select_by = "loss"  # the validation metric that picks checkpoint_best.pt by default
    needs_data_dir = True  # the data_dir option is required
    classification = False  # targets are one label token each (the encoder classifier's tasks)
    takes: tuple[str, ...] = ()  # which of TASK_OPTIONS this task reads

    def check_options(self, cfg, name: str) -> None:
        """Refuse a run of this task (``name``: as the run names it) whose options (``cfg``: its
        TrainConfig) lack what the task needs, or set one of `TASK_OPTIONS` that it does not read."""
        if self.needs_data_dir and not cfg.data_dir:
            raise ConfigError(
                "data_dir", f"is needed by task {name!r}: a directory with train/valid/test .src/.tgt files"
            )
        for option, takers in TASK_OPTIONS.items():
            if getattr(cfg, option) and option not in self.takes:
                raise ConfigError(option, f"applies to {takers}, not to {name!r}")

    def data_dir(self, cfg, run_dir: Path) -> Path:
        """Where the tokenized train/valid/test.{src,tgt} files of a run (``cfg``: its TrainConfig) are."""
        return Path(cfg.data_dir)

    def prepare(self, cfg, run_dir: Path) -> Path:
        """Make sure the files exist (generate or fetch them); returns their folder."""
        folder = self.data_dir(cfg, run_dir)
        if not folder.is_dir():
            raise UserError(
                f"data directory {folder} does not exist; give a folder with train/valid/test .src/.tgt files"
            )
        return folder

    def pipelines(self, cfg, run_dir: Path) -> tuple[Tokenize, Detokenize]:
        """(line -> tokens, target tokens -> line)."""
        return str.split, " ".join

    def references(self, cfg, run_dir: Path, split: str) -> list[str] | None:
        """Raw (untokenized) target lines of a split, for BLEU; None where the task has none."""
        return None

    def split_file(self, name: str) -> str:
        """The file stem of the split ``evaluate --split`` names (``test`` -> ``test.src``...)."""
        if name not in ("train", "valid", "test"):
            raise UserError(f"this run's task has no split {name!r}: give train, valid or test")
        return name

    def bleu_tokenize(self, cfg) -> Tokenize | None:
        """How text is tokenized for the tokenized BLEU score, if the model's own tokens are not
        the words to score (subwords); None: score the model's tokens."""
        return None


class GeneratedTask(Task):
    """Data generated from the seed into RUN_DIR/data (or data_dir, if given) by
    ``write(folder, seed=seed)``: copy, sort, reverse, addition, and the long-range ListOps, Boolean and associative recall."""

    select_by = "exact_match"
    needs_data_dir = False

    def __init__(self, write: Callable[..., Path], classification: bool = False):
        self.write = write
        self.classification = classification

    def data_dir(self, cfg, run_dir):
        return Path(cfg.data_dir) if cfg.data_dir else run_dir / "data"

    def prepare(self, cfg, run_dir):
        return self.write(self.data_dir(cfg, run_dir), seed=cfg.seed)


class SyntheticTask(GeneratedTask):
    """copy, sort, reverse and addition (`graphformer.data.synthetic`), with the lengths of each
    split that ``train_lengths`` and ``test_lengths`` give."""

    takes = ("train_lengths", "test_lengths")

    def __init__(self, name: str):
        super().__init__(partial(synthetic.write_task, name))
        self.name = name

    def check_options(self, cfg, name):
        super().check_options(cfg, name)
        synthetic.split_lengths(self.name, cfg.train_lengths, cfg.test_lengths)  # refuses a malformed range

    def prepare(self, cfg, run_dir):
        lengths = synthetic.split_lengths(self.name, cfg.train_lengths, cfg.test_lengths)
        return self.write(self.data_dir(cfg, run_dir), seed=cfg.seed, lengths=lengths)


class LabelFiles(Task):
    """The user's own classification data (``--data-dir``): ``{split}.src`` whitespace-tokenized
    texts and ``{split}.tgt`` one label per line, for ``--model encoder``."""

    classification = True


class Multi30kTask(Task):
    """English -> German, fetched (or read from the mirror in data_dir), Moses-tokenized into
    RUN_DIR/data, BLEU against the raw references. With ``bpe``, SentencePiece pieces learned on
    the training split instead of Moses words (`graphformer.data.subwords`)."""

    needs_data_dir = False
    takes = ("bpe",)

    def data_dir(self, cfg, run_dir):
        return run_dir / (f"{subwords.DATA_PREFIX}{cfg.bpe}" if cfg.bpe else "data")

    def split_file(self, name):
        """Every split of `multi30k.SPLIT_FILES`; ``test_2016_flickr`` is ``test``."""
        if name == multi30k.TEST_SETS[0]:
            return "test"
        return name if name in multi30k.SPLIT_FILES else super().split_file(name)

    def prepare(self, cfg, run_dir):
        if not cfg.bpe:
            return multi30k.prepare(run_dir / "data", mirror=cfg.data_dir)  # with the raw references
        folder = self.data_dir(cfg, run_dir)
        learned_for = {"pieces": cfg.bpe, "train_limit": cfg.train_limit}
        record, model = run_dir / subwords.RECORD, run_dir / subwords.MODEL
        if record.is_file():
            stale = json.loads(record.read_text(encoding="utf-8")) != learned_for
        else:  # learned before records were kept: its size is all there is to compare
            stale = model.is_file() and subwords.SubwordPipeline(model).model.get_piece_size() != cfg.bpe
        if stale:  # learned for other options, by a run killed before its first checkpoint: learn anew
            model.unlink(missing_ok=True)
            shutil.rmtree(folder, ignore_errors=True)
        if all((folder / f"{split}.{side}").is_file() for split in multi30k.SPLIT_FILES for side in ("src", "tgt")):
            return folder
        raw = multi30k.fetch(cfg.data_dir)
        sentences = {
            split: (
                multi30k.read_gz(raw / f"{stem}.{multi30k.SRC_LANG}.gz"),
                multi30k.read_gz(raw / f"{stem}.{multi30k.TGT_LANG}.gz"),
            )
            for split, stem in multi30k.SPLIT_FILES.items()
        }
        if not model.is_file():  # learned on the training pairs the run trains on
            en, de = (cfg.used("train", side) for side in sentences["train"])
            subwords.learn(en + de, cfg.bpe, model)
            write_text_atomic(record, json.dumps(learned_for) + "\n")
        pieces = subwords.SubwordPipeline(model)
        folder.mkdir(exist_ok=True)
        for split, (en, de) in sentences.items():
            write_lines_atomic(folder / f"{split}.ref", de)
            write_lines_atomic(folder / f"{split}.tgt", [" ".join(pieces.tokenize(x)) for x in de])
            write_lines_atomic(folder / f"{split}.src", [" ".join(pieces.tokenize(x)) for x in en])
        return folder

    def pipelines(self, cfg, run_dir):
        if cfg.bpe:
            pieces = subwords.SubwordPipeline(run_dir / subwords.MODEL)
            return pieces.tokenize, pieces.detokenize
        return multi30k.MosesPipeline(multi30k.SRC_LANG).tokenize, multi30k.MosesPipeline(multi30k.TGT_LANG).detokenize

    def references(self, cfg, run_dir, split):
        return split_lines((self.data_dir(cfg, run_dir) / f"{split}.ref").read_text(encoding="utf-8"))

    def bleu_tokenize(self, cfg):
        return multi30k.MosesPipeline(multi30k.TGT_LANG).tokenize if cfg.bpe else None


# The package's tasks, each the target of its entry in graphformer.catalog.TASKS (``TASKS`` below).
COPY, SORT, REVERSE, ADDITION = (SyntheticTask(name) for name in synthetic.NAMES)
LISTOPS = GeneratedTask(listops.write_listops, classification=True)  # 500-2000 tokens: raise max_len
RECALL = GeneratedTask(recall.write_recall, classification=True)  # 1024 tokens: raise max_len
BOOLEAN = GeneratedTask(boolean.write_boolean, classification=True)  # 100-500 tokens
PARALLEL, CLASSIFY, MULTI30K = Task(), LabelFiles(), Multi30kTask()
TASKS = CATALOG_TASKS  # name -> Task, loaded from the catalog's entries (a plugin's too)


# What ``evaluate --split`` may name: every task's train, valid and test, and Multi30k's test sets.
EVALUATION_SPLITS = ("train", "valid", "test", *multi30k.TEST_SETS)


def classification_tasks() -> list[str]:
    return [name for name, task in TASKS.items() if task.classification]


def task_help() -> str:
    """The tasks as ``train --help`` lists them, sequence tasks first, those of one summary
    together: ``copy | sort | reverse | addition (generated), parallel (...); for --model encoder: ...``."""

    def listed(entries) -> str:
        groups: dict[str, list[str]] = {}
        for entry in entries:
            groups.setdefault(entry.summary, []).append(entry.name)
        return ", ".join(f"{' | '.join(names)} ({summary})" for summary, names in groups.items())

    entries = TASKS.entries()
    sequence = [e for e in entries if not TASKS[e.name].classification]
    labels = [e for e in entries if TASKS[e.name].classification]
    return f"{listed(sequence)}; for --model encoder: {listed(labels)}"


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ConfigError("task", f"must be one of {', '.join(TASKS)}, got {name!r}{did_you_mean(str(name), TASKS)}")
    task = TASKS[name]
    if not isinstance(task, Task):
        raise UserError(f"task {name!r} is registered with {task!r}, not a graphformer.data.tasks.Task; fix its entry")
    return task
