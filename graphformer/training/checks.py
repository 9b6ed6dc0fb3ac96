"""What a run's model and data must satisfy, and a checkpoint the run it sits in: checked before
a new run writes anything (and a split before it is scored), each refusal naming what to change."""

from __future__ import annotations

from pathlib import Path

from graphformer.data.corpus import Split
from graphformer.data.tasks import classification_tasks, get_task
from graphformer.errors import ConfigError, UserError
from graphformer.model import ModelConfig
from graphformer.model.config import CLASSIFIERS
from graphformer.training.run_dir import CONFIG, VOCAB, RunDir


def check_model_fits_task(model_cfg: ModelConfig, task_name: str) -> None:
    """A classifier trains on classification tasks, a sequence model on the others."""
    task = get_task(task_name)
    if model_cfg.classifies and not task.classification:
        raise ConfigError(
            "model",
            f"{model_cfg.model!r} is a classifier (one label per sample) and task "
            f"{task_name!r} asks for sequences; use it with {' or '.join(classification_tasks())}, "
            "or choose model transformer or universal",
        )
    if task.classification and not model_cfg.classifies:
        raise ConfigError(
            "model",
            f"{model_cfg.model!r} generates sequences and task {task_name!r} is "
            f"classification (one label per sample); choose model {' or '.join(CLASSIFIERS)}",
        )


def check_labels(splits: dict[str, Split]) -> None:
    """A classification task's target line is one label token: fail before training or scoring,
    naming the first line that is not."""
    for name, split in splits.items():
        for i, label in enumerate(split.tgt_words):
            if len(label) != 1:
                raise UserError(
                    f"{name}.tgt line {i + 1} holds {len(label)} tokens; a classification task "
                    "needs exactly one label per line"
                )


def longest_sample(splits: dict[str, Split], pool) -> tuple[int, str, str, int, int] | None:
    """(positions, split, side, line, tokens) of the sample that takes the most positions (source
    positions count `</s>` and a `<cls>` node, target positions `<s>`); None without samples."""
    longest = None
    for name, split in splits.items():
        for side, seqs, positions in (
            ("src", split.src_words, pool.source_positions),
            ("tgt", split.tgt_words, pool.target_nodes),
        ):
            for i, seq in enumerate(seqs):
                if longest is None or positions(len(seq)) > longest[0]:
                    longest = (positions(len(seq)), name, side, i + 1, len(seq))
    return longest


def fitted_max_len(splits: dict[str, Split], pool, max_len: int) -> int:
    """The max_len of a new run whose user did not choose one: the default, or the positions of
    the longest sample where that is more (a task's own data must fit its defaults)."""
    longest = longest_sample(splits, pool)
    return max(max_len, longest[0]) if longest else max_len


def check_lengths(splits: dict[str, Split], pool, max_len: int) -> None:
    """Every sample must fit the positional table: fail before training, naming max_len and the
    value that would fit (see `longest_sample`)."""
    longest = longest_sample(splits, pool)
    if longest is not None and longest[0] > max_len:
        needed, name, side, line, tokens = longest
        raise ConfigError(
            "max_len",
            f"({max_len}) is shorter than the data: {name}.{side} line {line} has {tokens} "
            f"tokens, which take {needed} positions with the model's special nodes; it must be "
            f"at least {needed}",
        )


def check_matches_run(state: dict, run: RunDir, path: Path) -> None:
    """A checkpoint must belong to the run it sits in: same vocabulary, same model."""
    if (run / VOCAB).is_file() and run.read_json(VOCAB) != state["vocab"]:
        raise UserError(
            f"{path} was trained with another vocabulary than {run / VOCAB}; use the checkpoint of this run or retrain"
        )
    if (run / CONFIG).is_file() and run.read_config()[0] != state["model_config"]:
        raise UserError(
            f"{path} holds another model than {run / CONFIG} describes; use the checkpoint of this run or retrain"
        )
