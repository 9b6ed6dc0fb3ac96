"""Starting a run, or resuming one: everything a `Trainer` needs before its first step.

``start_run`` checks a new run (`graphformer.training.preflight`), then writes its configuration
and vocabularies;
``resume_run`` reads ``checkpoint_last.pt`` back, checked against the run's files and this launch.
Both return a `RunState`. Everything a new run would refuse is refused before it writes its
records; the folder and lock they take are a `RunClaim`, which the `Trainer` gives back when a
start or resume is refused: a refused start leaves no half-made run directory behind, a refused
resume the run directory as it was (its checkpoint is checked before the run is locked).
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from graphformer.data.corpus import Split
from graphformer.data.splits import RECORD, generated_by
from graphformer.data.tasks import GeneratedTask, get_task
from graphformer.errors import UserError
from graphformer.model import ModelConfig, build_model
from graphformer.training import checkpoint
from graphformer.training.checkpoint import checkpoint_vocabs, load_model
from graphformer.training.checks import check_matches_run
from graphformer.training.config import TrainConfig
from graphformer.training.distributed import Context
from graphformer.training.init_from import load_init_weights
from graphformer.training.preflight import check_configs, check_data
from graphformer.training.progress import Progress
from graphformer.training.run_data import encode, load_splits
from graphformer.training.run_dir import LAST, RunClaim, RunDir
from graphformer.training.steps import check_batches_per_step, check_limits_not_below_progress
from graphformer.vocab import Vocab


@dataclass
class RunState:
    """What a run trains with. ``resumed_from``: the checkpoint a resumed run continues (its
    optimizer, schedule and random states are restored once the optimizer exists), None for a
    new run."""

    splits: dict[str, Split]
    src_vocab: Vocab
    tgt_vocab: Vocab
    model: torch.nn.Module
    progress: Progress
    resumed_from: dict | None = None


def start_run(
    claim: RunClaim, ctx: Context, cfg: TrainConfig, model_cfg: ModelConfig, recorder=None, fit_max_len: bool = False
) -> RunState:
    """Check and start a new run in ``claim``'s folder (see `graphformer.training.preflight` for
    ``recorder`` and ``fit_max_len``): every check passes before its records are written. The
    caller (`Trainer`) gives the claim back when the start is refused."""
    init = check_configs(claim.files, ctx, cfg, model_cfg, recorder)
    claim.take()
    plan = check_data(claim.files, ctx, cfg, model_cfg, recorder, fit_max_len, init)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    model = build_model(plan.model_cfg, cfg.attention_backend)
    if init:
        load_init_weights(model, *init)
    if ctx.is_main:
        claim.files.clear_records()  # every check has passed: this run starts here
        claim.files.write_config(plan.model_cfg, cfg)
        claim.files.write_vocab(plan.src_vocab, plan.tgt_vocab)
    return RunState(plan.splits, plan.src_vocab, plan.tgt_vocab, model, Progress())


def resume_run(claim: RunClaim, ctx: Context, cfg: TrainConfig) -> RunState:
    """The run of ``claim``'s folder as its last checkpoint left it, locked; the caller (`Trainer`)
    gives the claim back when the resume fails."""
    files = claim.files
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
    claim.take()
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
