"""Starting a run, or resuming one: everything a `Trainer` needs before its first step.

``start_run`` checks a new run (its model fits the task, the samples fit the positional table, an
``--init-from`` checkpoint fits the model), then writes its configuration and vocabularies;
``resume_run`` reads ``checkpoint_last.pt`` back, checked against the run's files and this launch.
Both return a `RunState`. Everything a new run would refuse is refused before it writes, and a
refused start leaves no half-made run directory behind. A refused resume leaves the run directory
as it was: it is checked before the run is locked (locking writes ``.lock``).
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from graphformer.data.corpus import Split, build_vocabs
from graphformer.data.splits import RECORD, generated_by
from graphformer.data.tasks import GeneratedTask, get_task
from graphformer.errors import ConfigError, UserError
from graphformer.model import ModelConfig, build_model, graph_pool
from graphformer.training import checkpoint
from graphformer.training.checks import (
    check_lengths,
    check_matches_run,
    check_model_fits_task,
    fitted_max_len,
)
from graphformer.training.config import TrainConfig
from graphformer.training.distributed import Context
from graphformer.training.init_from import check_init_fits, check_init_vocab, load_init_weights, read_init
from graphformer.training.loaded import checkpoint_vocabs, load_model
from graphformer.training.progress import Progress
from graphformer.training.run_data import load_splits, test_split
from graphformer.training.run_dir import LAST, LOCK, RunDir
from graphformer.training.steps import (
    check_batches_per_step,
    check_epoch_has_steps,
    check_limits_not_below_progress,
    epoch_plan,
)
from graphformer.vocab import SPECIALS, Vocab


@dataclass
class RunState:
    """What a run trains with. ``resumed_from``: the checkpoint a resumed run continues (its
    optimizer, schedule and random states are restored once the optimizer exists), None for a
    new run. ``made_run_dir``: this process created the run directory (a refused start removes it)."""

    splits: dict[str, Split]
    src_vocab: Vocab
    tgt_vocab: Vocab
    model: torch.nn.Module
    progress: Progress
    resumed_from: dict | None = None
    made_run_dir: bool = False


def start_run(
    files: RunDir, ctx: Context, cfg: TrainConfig, model_cfg: ModelConfig, recorder=None, fit_max_len: bool = False
) -> RunState:
    """Check and start a new run in ``files``; ``fit_max_len``: grow max_len to the longest sample
    (the user gave none). ``recorder``: the attention recorder, with ``cfg.viz_every``."""
    if ctx.is_main:
        check_holds_no_run(files)  # before anything else is checked or written
    if cfg.viz_every:
        recorder.check_model(model_cfg.model, cfg.viz_every)
    check_model_fits_task(model_cfg, cfg.task)
    init = read_init(cfg.init_from) if cfg.init_from else None  # before anything is written
    if init:
        check_init_fits(*init, model_cfg)
    made, had_lock = False, (files.path / LOCK).exists()
    try:
        made = open_run_dir(files, ctx)
        if ctx.is_main:
            check_holds_no_run(files)  # again, now that no other trainer can write here
        state = _new_run(files, ctx, cfg, model_cfg, recorder, fit_max_len, init)
    except BaseException:
        files.unlock(remove=ctx.is_main and not had_lock)  # a folder that was there is left as it was
        if made:  # a refused start leaves no half-made run behind
            shutil.rmtree(files.path, ignore_errors=True)
        raise
    return dataclasses.replace(state, made_run_dir=made)


def _new_run(files, ctx, cfg, model_cfg, recorder, fit_max_len, init) -> RunState:
    pool = graph_pool(model_cfg)
    if not pool.decodable and cfg.select_by == "exact_match":
        raise ConfigError(
            "select_by",
            "exact_match needs decoding, which per-sample edges in the decoder or cross attention "
            "rule out (they need the whole target); select by loss or token_accuracy",
        )
    splits = load_splits(cfg, files.path, ctx, pool)
    samples = {**splits, **test_split(cfg, files.path, pool)}  # test: evaluate must fit too
    if fit_max_len:
        model_cfg = dataclasses.replace(model_cfg, max_len=fitted_max_len(samples, pool, model_cfg.max_len))
    check_lengths(samples, pool, model_cfg.max_len)
    if cfg.viz_every:
        recorder.check_split(splits["valid"], pool, cfg.viz_every)
    src_vocab, tgt_vocab = choose_vocabs(splits, cfg, init, ctx.is_main)
    if model_cfg.tie == "all" and src_vocab != tgt_vocab:  # equal sizes are not enough
        raise ConfigError(
            "tie",
            "'all' shares one embedding between source and target tokens, and this run has "
            "one vocabulary per side; drop --no-shared-vocab, or tie decoder only",
        )
    encode(splits, src_vocab, tgt_vocab)
    check_epoch_has_steps(epoch_plan(splits["train"], cfg, ctx, 0)[0], cfg.accumulate, ctx.world)  # before a model
    model_cfg = dataclasses.replace(model_cfg, src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab))
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model = build_model(model_cfg, cfg.attention_backend)
    if init:
        load_init_weights(model, *init)
    if ctx.is_main:
        files.clear_records()  # every check has passed: this run starts here
        files.write_config(model_cfg, cfg)
        files.write_vocab(src_vocab, tgt_vocab)
    return RunState(splits, src_vocab, tgt_vocab, model, Progress())


def resume_run(files: RunDir, ctx: Context, cfg: TrainConfig) -> RunState:
    """The run of ``files`` as its last checkpoint left it, locked; the caller (`Trainer`)
    unlocks it when the resume fails."""
    path = files.path / LAST
    if not path.is_file():
        owner = files.trainer()  # a run still in its first epoch has no checkpoint yet
        if owner:
            raise UserError(
                f"{files.path} is being trained by {owner} and has no checkpoint yet; wait for "
                "one (an epoch's end), or for that run to finish"
            )
        raise UserError(f"no checkpoint to resume in {files.path}; start a new run without --resume")
    written = _version(path)
    state = resumable_state(path, files, cfg, ctx)
    open_run_dir(files, ctx)  # the caller unlocks it if what follows fails
    if _version(path) != written:  # a trainer that held the run wrote it meanwhile
        state = resumable_state(path, files, cfg, ctx)
    model = load_model(state, path, cfg.attention_backend)
    splits = load_splits(cfg, files.path, ctx, model.make_pool())
    src_vocab, tgt_vocab = checkpoint_vocabs(state)
    encode(splits, src_vocab, tgt_vocab)
    progress = Progress.from_dict(state["progress"])
    return RunState(splits, src_vocab, tgt_vocab, model, progress, resumed_from=state)


def resumable_state(path: Path, files: RunDir, cfg: TrainConfig, ctx: Context) -> dict:
    """The checkpoint to resume from, read and checked against the run's files and this launch."""
    state = checkpoint.load(path)
    check_matches_run(state, files, path)
    check_batches_per_step(state, cfg.accumulate, ctx.world, files.path)
    check_limits_not_below_progress(Progress.from_dict(state["progress"]), files.read_config()[1], cfg, files.path)
    return state


def open_run_dir(files: RunDir, ctx: Context) -> bool:
    """Create and lock the run directory (the main process); whether this process made it."""
    if not ctx.is_main:
        return False
    created = not files.path.exists()
    files.create()
    files.lock()  # raises if another process holds the run: then nothing here is ours
    return created


def check_holds_no_run(files: RunDir) -> None:
    if files.holds_run():
        raise UserError(f"{files.path} already holds a run; continue it with --resume or choose another --out")


def choose_vocabs(
    splits: dict[str, Split], cfg: TrainConfig, init: tuple[dict, Path] | None, is_main: bool
) -> tuple[Vocab, Vocab]:
    """A new run's vocabularies: built from its training split, or those of the checkpoint it
    starts from (``--init-from``), whose embeddings it takes over."""
    if init is None:
        src_vocab, tgt_vocab = vocabs_for(splits["train"], cfg)
        if len(src_vocab) == len(SPECIALS):  # every source token would read as <unk>
            raise ConfigError(
                "min_count",
                f"({cfg.min_count}) is more than any training source token is "
                "seen: the vocabulary would hold no word; lower it",
            )
        return src_vocab, tgt_vocab
    state, path = init
    src_vocab, tgt_vocab = checkpoint_vocabs(state)
    warning = check_init_vocab(splits["train"], src_vocab, tgt_vocab, path, get_task(cfg.task).classification)
    if warning and is_main:
        tqdm.write(warning, file=sys.stderr)
    return src_vocab, tgt_vocab


def vocabs_for(train: Split, cfg: TrainConfig) -> tuple[Vocab, Vocab]:
    """The source and target vocabularies of a new run. A classification task's target vocabulary
    is its labels (whatever ``shared_vocab`` says): the classifier's head scores only those, and
    every training label is one, however rare (``min_count`` thins the source words alone: a
    label read as `<unk>` would be a class the classifier never answers)."""
    if not get_task(cfg.task).classification:
        return build_vocabs(train, cfg.min_count, cfg.shared_vocab)
    return Vocab.build(train.src_words, cfg.min_count), Vocab.build(train.tgt_words, 1)


def encode(splits: dict[str, Split], src_vocab: Vocab, tgt_vocab: Vocab) -> None:
    for split in splits.values():
        split.encode(src_vocab, tgt_vocab)


def warn_about_generated_data(cfg: TrainConfig, run_dir: Path) -> None:
    """Files already in a generated task's data folder are used as they are, whatever --seed
    says, and even if no generator made them: say so (once the run has started: a refused start
    says only why)."""
    task = get_task(cfg.task)
    if not isinstance(task, GeneratedTask):
        return
    folder = task.data_dir(cfg, run_dir)  # --data-dir, or RUN_DIR/data (a killed run's, maybe)
    record = generated_by(folder)
    if record is None and cfg.data_dir:
        warning = (
            f"{folder} has no record of a generator ({RECORD}); training task {cfg.task!r} "
            "on its files as they are (for your own files, --task parallel)"
        )
    elif record is not None and record.get("seed", cfg.seed) != cfg.seed:
        warning = (
            f"the data in {folder} was generated with seed {record['seed']}; training on it as it is "
            f"(--seed {cfg.seed} sets the initialisation, dropout and batch order; give a new "
            "--data-dir for data of this seed)"
        )
    else:
        return
    tqdm.write(f"graphformer: warning: {warning}", file=sys.stderr)


def _version(path: Path) -> tuple:
    """What tells one version of a file from the next: each atomic write makes a new file."""
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns, stat.st_size
