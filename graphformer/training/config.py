"""Training and decoding options, declared once (see `graphformer.config_io`) and saved with
the run (``RUN_DIR/config.json`` and every checkpoint).

A run's configuration is assembled here too (`run_configs`): the dataclass defaults, then a
``--config`` file (`graphformer.training.config_file`, read by the caller), then the flags
(`with_flags`); a resumed run's saved configuration, then what may change (`resume_config`).

Resuming a run keeps its configuration: only the fields marked ``RESUME_OVERRIDES`` (how long to
train) may be given again with another value, ``RUNTIME`` fields (where and how fast to run)
may differ between sessions of one run without changing what it computes, and ``accumulate`` may
change with the number of processes as long as their product, the batches of an optimizer step,
stays (the trainer checks it: see ``steps.check_batches_per_step``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Optional

from graphformer.catalog import BACKENDS
from graphformer.choices import ATTENTION_BACKENDS, DEFAULT_ALPHA, DEFAULT_BACKEND, PRECISIONS, TRAIN_PRECISIONS
from graphformer.config_io import AT_LEAST_1, NON_NEGATIVE, POSITIVE, PROBABILITY, DictConfig, Range, option
from graphformer.data.batching import DECODE_BATCH_TOKENS
from graphformer.data.tasks import TASKS, get_task, task_help
from graphformer.errors import ConfigError, UserError
from graphformer.model.config import ModelConfig
from graphformer.registry import load_plugins
from graphformer.training.progress import Progress

# metric -> True when larger is better
SELECT_BY = {"loss": False, "token_accuracy": True, "exact_match": True}
DEVICES = "auto | cpu | cuda | cuda:N"  # what --device takes (see graphformer.training.distributed.resolve_device)
RESUME_OVERRIDES = ("epochs", "max_steps", "max_minutes", "patience")
RUNTIME = ("device", "threads", "attention_backend", "tensorboard", "keep_last")
GROWS = ("plugins",)  # a resumed run imports its own and those given again (a plugin backend is RUNTIME)
PER_PROCESS = ("accumulate",)  # x processes: the batches per step, which a resumed run keeps
PATHS = ("data_dir", "init_from")  # saved absolute: a run is evaluated and resumed from any folder
BATCH_SIZE = 64  # sentences per training batch when neither batch_size nor batch_tokens is given


def backend_help() -> str:
    """The backends as ``train --help`` lists them, from graphformer.catalog.BACKENDS."""
    return "same results, different speed: " + "; ".join(f"{e.name}: {e.summary}" for e in BACKENDS.entries())


@dataclass
class TrainConfig(DictConfig):
    task: str = option("copy", task_help, choices=TASKS)
    data_dir: Optional[str] = option(
        None,
        "parallel, classify: train/valid/test.{src,tgt} files; copy, sort, "
        "listops, boolean, recall: where to "
        "generate them (default RUN_DIR/data); multi30k: a local mirror of the raw "
        ".gz files instead of downloading",
        metavar="DIR",
    )
    train_limit: Optional[int] = option(None, "use only the first N training pairs", range=AT_LEAST_1)
    train_lengths: Optional[str] = option(
        None,
        "copy, sort, reverse, addition: source lengths of the training split, LOW-HIGH or one "
        "length, drawn uniformly (default: around 15)",
        metavar="RANGE",
    )
    test_lengths: Optional[str] = option(
        None,
        "copy, sort, reverse, addition: source lengths of the valid and test splits, e.g. 400 "
        "after --train-lengths 1-40 to test length generalisation (default: --train-lengths)",
        metavar="RANGE",
    )
    bpe: Optional[int] = option(
        None,
        "multi30k: a SentencePiece BPE vocabulary of this many pieces, learned on the "
        "training split and kept in RUN_DIR/subwords.model, instead of Moses words",
        range=Range(low=100),
    )
    min_count: int = option(1, "drop tokens seen fewer times in the training data", range=AT_LEAST_1)
    shared_vocab: bool = option(True, "one vocabulary for both sides (--no-shared-vocab: one per side)")
    init_from: Optional[str] = option(
        None,
        "start from the weights and vocabulary of another run (its best "
        "checkpoint) or of a checkpoint file, e.g. one trained on shorter samples "
        "(a curriculum); model options default to its own, and only those that keep "
        "the weights' shapes may change (attention patterns, dropout, max_len unless "
        "positions are learned, ACT); the optimizer and the learning-rate schedule "
        "start afresh",
        metavar="RUN|FILE",
    )
    seed: int = option(1, "seed of data generation, initialisation, dropout and batch order")
    epochs: int = option(12, "passes over the training data", range=AT_LEAST_1)
    batch_size: Optional[int] = option(
        None, f"sentences per batch ({BATCH_SIZE} unless --batch-tokens)", range=AT_LEAST_1
    )
    batch_tokens: Optional[int] = option(None, "source + target tokens per batch", range=AT_LEAST_1)
    accumulate: int = option(1, "batches per optimizer step", range=AT_LEAST_1)
    clip_norm: Optional[float] = option(None, "clip the gradient norm to this value", range=POSITIVE)
    warmup: int = option(400, "Noam warm-up steps", range=AT_LEAST_1)
    lr_factor: float = option(
        0.5, "Noam factor: lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)", range=POSITIVE
    )
    label_smoothing: float = option(0.1, "probability mass spread over the other tokens", range=PROBABILITY)
    valid_beam: int = option(1, "beam of the per-epoch exact-match check (1 = greedy)", range=AT_LEAST_1)
    select_by: Optional[str] = option(
        None,
        "validation metric that picks checkpoint_best.pt (default: the "
        "task's: exact_match for the generated tasks (copy, sort, listops, boolean, recall), "
        "loss otherwise)",
        choices=tuple(SELECT_BY),
    )
    patience: Optional[int] = option(
        None, "stop early after N epochs without a better validation metric (select_by)", range=AT_LEAST_1
    )
    keep_last: int = option(
        0,
        "keep the checkpoints of the last N epochs in RUN_DIR/checkpoints, for graphformer average",
        range=Range(low=0),
    )
    save_every: Optional[int] = option(None, "also write checkpoint_last.pt every N steps", range=AT_LEAST_1)
    max_steps: Optional[int] = option(None, "stop with a checkpoint after this many optimizer steps", range=AT_LEAST_1)
    max_minutes: Optional[float] = option(
        None,
        "stop with a checkpoint after the step that ends this many minutes "
        "into this invocation (a wall-clock budget; --resume starts a new one)",
        range=POSITIVE,
    )
    viz_every: Optional[int] = option(
        None, "record attention maps of a validation sample every N epochs", range=AT_LEAST_1
    )
    precision: str = option(
        "float32",
        "bfloat16: the forward pass's matrix products in bfloat16, under "
        "torch.autocast (weights, gradients and the optimizer stay float32; validation runs in "
        "float32); faster on GPUs and on CPUs with bfloat16 instructions (AVX512-BF16, AMX), much "
        "slower on CPUs without them",
        choices=TRAIN_PRECISIONS,
    )
    device: str = option("auto", DEVICES)
    threads: Optional[int] = option(
        None,
        "torch CPU threads per process (default: the cores this process may "
        "use, shared among the run's processes on this machine)",
        range=AT_LEAST_1,
    )
    tensorboard: bool = option(
        False,
        "also log loss, learning rate, tokens/s, validation metrics and recorded "
        "attention maps to RUN_DIR/tensorboard (needs the tensorboard extra)",
    )
    plugins: Optional[str] = option(
        None, "the plugin modules the run was trained with, comma-separated (train --plugin)", cli=False
    )
    attention_backend: str = option(
        DEFAULT_BACKEND,
        backend_help,
        choices=ATTENTION_BACKENDS,
    )

    def check(self) -> None:
        if self.batch_size is None and self.batch_tokens is None:
            self.batch_size = BATCH_SIZE
        task = get_task(self.task)
        if self.select_by is None:
            self.select_by = task.select_by
        super().check()
        if self.attention_backend != "auto":  # whether the installed stack has it (DGL, flex) needs torch
            from graphformer.attention import unavailable

            if unavailable(self.attention_backend):
                raise ConfigError("attention_backend", unavailable(self.attention_backend))
        if self.batch_size is not None and self.batch_tokens is not None:
            raise ConfigError(
                "batch_size", "and a token budget per batch (batch_tokens, --batch-tokens) exclude each other: give one"
            )
        check_device_name(self.device)
        task.check_options(self, self.task)  # what only some tasks need or read

    def used(self, split: str, lines: list) -> list:
        """The lines of ``split`` the run trains or scores on: of the training split, the first
        ``train_limit``; of the others, all."""
        return lines[: self.train_limit] if split == "train" and self.train_limit else lines

    def out_of_patience(self, progress: Progress) -> bool:
        """Early stopping: ``patience`` epochs in a row without a better validation metric."""
        return bool(self.patience) and progress.epochs_since_best >= self.patience


@dataclass
class DecodeConfig(DictConfig):
    """How ``evaluate`` and ``translate`` decode (choose both on the validation split, never on test)."""

    beam: int = option(5, "beam size (1 = greedy)", range=AT_LEAST_1)
    alpha: float = option(
        DEFAULT_ALPHA, "GNMT length penalty ((5 + length) / 6) ** alpha; 0 = none", range=NON_NEGATIVE
    )
    batch_tokens: int = option(
        DECODE_BATCH_TOKENS,
        "source tokens per decoding batch (sentences of similar length decode together)",
        range=AT_LEAST_1,
    )
    precision: str = option(
        "float32",
        "bfloat16 or float16: matrix products and attention in that dtype, under "
        "torch.autocast; faster on GPUs and on CPUs with bfloat16 instructions (AVX512-BF16, "
        "AMX), much slower on CPUs without them; outputs may differ a little from float32's. "
        "float16 needs a GPU",
        choices=PRECISIONS,
    )


def check_device_name(name: str) -> None:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N``; whether CUDA is there is asked when a run starts."""
    kind, _, index = name.partition(":")
    if name in ("auto", "cpu", "cuda") or (kind == "cuda" and index.isdigit()):
        return
    raise ConfigError("device", f"must be auto, cpu, cuda or cuda:N, got {name!r}")


def with_flags(file_values: dict, flags: dict) -> dict:
    """A ``--config`` file's train options, overridden by the command line's. A run's own
    ``config.json`` (every option present) holds the defaults it filled in, so with one a flag
    that sets one of batch_size and batch_tokens unsets the other, and a flag that changes the
    task drops a select_by that was the file's task's default."""
    merged = {**file_values, **flags}
    if "plugins" in file_values or "plugins" in flags:  # the file's plugins named its choices: keep them
        merged["plugins"] = joined_plugins(file_values.get("plugins"), flags.get("plugins"))
    if not {f.name for f in fields(TrainConfig)} <= set(file_values):
        return merged  # a file the user wrote holds only what they chose
    for one, other in (("batch_size", "batch_tokens"), ("batch_tokens", "batch_size")):
        if flags.get(one) is not None and other not in flags:
            merged[other] = None
    file_task = file_values.get("task", TrainConfig.task)
    if (
        flags.get("task", file_task) != file_task
        and "select_by" not in flags
        and file_values.get("select_by") == get_task(file_task).select_by
    ):
        merged["select_by"] = None
    return merged


def absolute_paths(values: dict) -> dict:
    """``values`` (option name -> value) with the ``PATHS`` options made absolute, read from the
    current folder as the command line meant them."""
    return {
        name: os.path.abspath(os.path.expanduser(value)) if name in PATHS and value else value
        for name, value in values.items()
    }


def resume_config(saved: TrainConfig, given: dict) -> TrainConfig:
    """The saved configuration of a run, with what ``given`` may change when it resumes.

    Raises ConfigError for a given value that would make the resumed run another run.
    """
    values = saved.to_dict()
    for name, value in given.items():
        if name in GROWS:
            values[name] = joined_plugins(values[name], value)
        elif name in RESUME_OVERRIDES or name in RUNTIME or name in PER_PROCESS:
            values[name] = value
        elif value != values[name]:
            raise ConfigError(
                name,
                f"{differs(values[name], value)}: a resumed run keeps its configuration (only "
                f"{', '.join(RESUME_OVERRIDES)} and {', '.join(RUNTIME)} may change, and "
                f"{', '.join(PER_PROCESS)} with the number of processes); start a new run to change it",
            )
    return TrainConfig(**values)


def differs(saved, given) -> str:
    """How a resumed run's saved value and the one given again differ, in words."""
    return f"is {'not set' if saved is None else repr(saved)} in this run; you gave {given!r}"


def run_configs(
    model_given: dict, train_given: dict, *, from_file: tuple[dict, dict] = ({}, {}), resume: str | None = None
) -> tuple[ModelConfig, TrainConfig]:
    """The configuration of a run to train, from the options given (name -> value, as flags).

    A new run takes the dataclass defaults, then ``from_file`` (the model and train options of a
    ``--config`` file, `graphformer.training.config_file.read_config_file`), then what is given
    (with ``init_from``, the model options of its checkpoint come first); ``resume`` (a run
    directory) takes that run's saved configuration, then what may change (`resume_config`).
    """
    model_file, train_file = from_file
    model_given, train_given = {**model_file, **model_given}, with_flags(train_file, train_given)
    train_given = absolute_paths(train_given)
    if resume is not None:
        model_cfg, train_cfg = _resumed_configs(resume, model_given, train_given)
    else:
        if train_given.get("init_from"):
            model_given = {**init_model_options(train_given["init_from"]), **model_given}
        model_cfg, train_cfg = ModelConfig(src_vocab=1, tgt_vocab=1, **model_given), TrainConfig(**train_given)
    check_backend_serves(model_cfg, train_cfg.attention_backend)
    return model_cfg, train_cfg


def check_backend_serves(model_cfg: ModelConfig, backend: str) -> None:
    """A ConfigError on ``attention_backend`` when the backend cannot add the edge biases the
    model's ``*_edges`` ask for (`graphformer.catalog.BACKENDS`' position-bias, edge-type-bias)."""
    entry = BACKENDS.entry(backend)
    lacking = sorted(need for need in model_cfg.backend_needs() if not entry.can(need))
    if lacking:
        able = [e.name for e in BACKENDS.entries() if all(map(e.can, model_cfg.backend_needs()))]
        raise ConfigError(
            "attention_backend",
            f"{backend} cannot add the edge biases the model's edges options ask for (it lacks "
            f"{', '.join(lacking)}); choose one of {', '.join(able)}",
        )


def _resumed_configs(run_dir: str, model_given: dict, train_given: dict) -> tuple[ModelConfig, TrainConfig]:
    """The saved configuration of the run in ``run_dir``, with what may change when it resumes."""
    from graphformer.training.run_dir import CONFIG, RunDir

    run = RunDir(run_dir)
    if not (run / CONFIG).is_file():
        raise UserError(f"--resume: no run to continue in {run_dir} (no {CONFIG}); start it without --resume")
    model_saved, train_saved = run.read_config()
    load_run_plugins(train_saved, source=f"the run's plugins ({run / CONFIG}: train.plugins)")
    saved = ModelConfig.from_dict(model_saved)
    for name, value in model_given.items():
        if getattr(saved, name) != value:
            raise ConfigError(
                name,
                f"{differs(getattr(saved, name), value)}: a resumed run keeps its model; start a new run to change it",
            )
    return saved, resume_config(TrainConfig.from_dict(absolute_paths(train_saved)), train_given)


def load_run_plugins(train_values: dict, source: str = "the run's plugins (train.plugins)") -> None:
    """Import the plugins a run was trained with (its saved ``plugins``, or a --config file's),
    before its options are read; ``source`` names where they were written, for the error."""
    load_plugins((train_values.get("plugins") or "").split(","), source=source)


def joined_plugins(*lists: str | None) -> str | None:
    """Comma-separated plugin lists joined, each module once, in order: ``"a,b"``, ``"b,c"`` -> ``"a,b,c"``."""
    modules = [m for plugins in lists if plugins for m in plugins.split(",") if m]
    return ",".join(dict.fromkeys(modules)) or None


def init_model_options(where: str) -> dict:
    """The model options of the checkpoint ``init_from`` names: a new run's defaults, so that
    only what changes (an attention pattern, dropout, max_len) needs to be given."""
    from graphformer.training.init_from import read_init

    saved = dict(read_init(where)[0]["model_config"])
    for name in ("src_vocab", "tgt_vocab"):  # the run's vocabularies set these
        saved.pop(name)
    return saved
