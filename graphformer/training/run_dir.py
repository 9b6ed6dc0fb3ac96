"""A run directory: the files of one training run, and the only code that writes them.

    RUN_DIR/config.json          {"model": ModelConfig, "train": TrainConfig}; a valid --config
    RUN_DIR/vocab.json           {"src": [...], "tgt": [...]} tokens by id
    RUN_DIR/checkpoint_last.pt   written every epoch (and on Ctrl-C, --max-steps, --save-every)
    RUN_DIR/checkpoint_best.pt   the epoch with the best validation metric (TrainConfig.select_by)
    RUN_DIR/checkpoints/         epoch_NNNN.pt of the last keep_last epochs, for `graphformer average`
    RUN_DIR/checkpoint_averaged.pt  written by `graphformer average`
    RUN_DIR/metrics.jsonl        one JSON object per epoch
    RUN_DIR/steps.jsonl          one JSON object per optimizer step
    RUN_DIR/attention/           epoch_NNNN.pt attention maps of a validation sample (--viz-every)
    RUN_DIR/tensorboard/         the same logs for TensorBoard (--tensorboard)
    RUN_DIR/data/                generated data (copy, sort, listops, boolean, recall; unless --data-dir says otherwise)
                                 or Multi30k tokenized (data-bpeN: in subword pieces)
    RUN_DIR/subwords.model       the SentencePiece model of --bpe (subwords.json: its options)
    RUN_DIR/ranks.json           the parameter digests of each process of a multi-process run
    RUN_DIR/.lock                held by the training process that writes the run

Every file is replaced atomically (`graphformer.files`); the logs are appended a line at a
time and cut back to the checkpoint when a run resumes (a crash can leave records past it, or
half a line).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import shutil
from pathlib import Path

from graphformer.data.text import split_lines
from graphformer.errors import UserError
from graphformer.files import (
    append_line,
    epoch_file,
    epoch_files,
    epoch_of,
    remove_temporaries,
    write_json_atomic,
    write_text_atomic,
)
from graphformer.invocation import invoked_as
from graphformer.training import checkpoint

CONFIG, VOCAB = "config.json", "vocab.json"
LAST, BEST, AVERAGED = "checkpoint_last.pt", "checkpoint_best.pt", "checkpoint_averaged.pt"
STEPS, METRICS = "steps.jsonl", "metrics.jsonl"
EPOCHS = "checkpoints"
ATTENTION, TENSORBOARD = "attention", "tensorboard"
LOCK = ".lock"
RANKS = "ranks.json"  # a multi-process run's parameter digests per rank, after training


class RunClaim:
    """A run directory as a trainer that starts or resumes it claims it: made where it was not there,
    and locked (by the main process). A start or resume refused after the claim gives the folder back
    as it found it (`give_back`): one it made is removed, a lock file it made is deleted."""

    def __init__(self, files: RunDir, is_main: bool):
        self.files, self.is_main = files, is_main
        self.had_lock = (files.path / LOCK).exists()
        self.made = False  # set once this process made the folder and holds it

    def take(self) -> None:
        """Create and lock the run directory (the main process; the others write nothing)."""
        if not self.is_main:
            return
        created = not self.files.path.exists()
        self.files.create()
        self.files.lock()  # raises if another process holds the run: then nothing here is ours
        self.made = created

    def give_back(self) -> None:
        """Undo `take` after a refusal: the lock released (its file deleted while still held, where
        this claim made it, so no other process holds what it deletes), a folder it made removed."""
        self.files.unlock(remove=self.is_main and not self.had_lock)
        if self.made:
            shutil.rmtree(self.files.path, ignore_errors=True)


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock_file = None

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    # ---- opening ----------------------------------------------------------------------------
    def holds_run(self) -> bool:
        return any((self.path / name).exists() for name in (LAST, BEST))

    def create(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise UserError(f"{self.path} is a file, not a directory; choose another --out")
        self.path.mkdir(parents=True, exist_ok=True)

    def trainer(self) -> str | None:
        """Who holds the run now (e.g. ``process 1234``), or None if no process does."""
        if not (self.path / LOCK).is_file():
            return None
        with open(self.path / LOCK) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return f.read().strip() or "another process"
            fcntl.flock(f, fcntl.LOCK_UN)
            return None

    def lock(self) -> None:
        """Hold the run for this process (released when it exits): two trainings writing one
        directory would interleave their logs and checkpoints."""
        f = open(self.path / LOCK, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            owner = f.read().strip() or "another process"
            f.close()
            raise UserError(
                f"{self.path} is being trained by {owner}; wait for it to finish or choose another --out"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"process {os.getpid()}\n")
        f.flush()
        self._lock_file = f
        for folder in (self.path, self.path / EPOCHS, self.path / ATTENTION):  # only this run's writers
            remove_temporaries(folder)  # (interrupted) can have left them

    def unlock(self, remove: bool = False) -> None:
        """Release the run; ``remove``: delete the lock file too (a refused start that made it), while
        still holding it, so that no other process can hold the file it deletes."""
        if self._lock_file is not None:
            if remove:
                (self.path / LOCK).unlink(missing_ok=True)
            self._lock_file.close()
            self._lock_file = None

    # ---- reading ----------------------------------------------------------------------------
    def read_json(self, name: str):
        path = self.path / name
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"{path} is missing; is {self.path} a run directory (graphformer train --out)?") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise UserError(f"{path} is not valid JSON ({err}); restore it or retrain") from None

    def read_config(self) -> tuple[dict, dict]:
        """The (model, train) option dicts of ``config.json``."""
        config = self.read_json(CONFIG)
        if (
            not isinstance(config, dict)
            or not isinstance(config.get("model"), dict)
            or not isinstance(config.get("train"), dict)
        ):
            raise UserError(f'{self.path / CONFIG} needs a "model" and a "train" object; restore it or retrain')
        return config["model"], config["train"]

    # ---- writing ----------------------------------------------------------------------------
    def write_config(self, model_cfg, train_cfg) -> None:
        write_json_atomic(self.path / CONFIG, {"model": model_cfg.to_dict(), "train": train_cfg.to_dict()})

    def write_vocab(self, src_vocab, tgt_vocab) -> None:
        write_json_atomic(self.path / VOCAB, {"src": src_vocab.itos, "tgt": tgt_vocab.itos})

    def save_checkpoint(self, state: dict, best: bool) -> None:
        """The best checkpoint first: the last one records which metric is best, so it must never
        be on disk before the best checkpoint it speaks of."""
        if best:
            checkpoint.save_atomic(state, self.path / BEST)
        checkpoint.save_atomic(state, self.path / LAST)

    def epoch_checkpoints(self) -> list[Path]:
        """The kept per-epoch checkpoints, oldest first."""
        return epoch_files(self.path / EPOCHS)

    def keep_epoch_checkpoint(self, state: dict, epoch: int, keep_last: int) -> None:
        """Add ``checkpoints/epoch_NNNN.pt``, dropping the oldest first so that never more than
        ``keep_last`` are on disk."""
        (self.path / EPOCHS).mkdir(exist_ok=True)
        older = [p for p in self.epoch_checkpoints() if epoch_of(p) != epoch]
        for path in older[: max(0, len(older) - keep_last + 1)]:
            path.unlink()
        checkpoint.save_atomic(state, epoch_file(self.path / EPOCHS, epoch))

    def save_attention(self, record: dict, epoch: int) -> Path:
        """Write the attention maps recorded at ``epoch`` (`graphformer.viz.recording`)."""
        (self.path / ATTENTION).mkdir(exist_ok=True)
        path = epoch_file(self.path / ATTENTION, epoch)
        checkpoint.save_atomic(record, path)
        return path

    def attention_files(self) -> list[Path]:
        """The recorded attention maps, oldest first."""
        return epoch_files(self.path / ATTENTION)

    def owns(self, path: str | Path) -> bool:
        """Whether writing ``path`` would replace the run's own: a file in the run directory, or
        anything in a folder the run writes (epoch checkpoints, attention maps)."""
        path = Path(path).resolve()
        kept = any(path.is_relative_to((self.path / folder).resolve()) for folder in (EPOCHS, ATTENTION))
        return kept or (path.is_relative_to(self.path.resolve()) and path.exists())

    def log(self, name: str, record: dict) -> None:
        """Append one JSON line; non-finite numbers are written as null (JSON has no NaN)."""
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        append_line(self.path / name, json.dumps(clean))

    def records(self, name: str) -> list[tuple[str, dict]]:
        """The (line, record) pairs of a log, without a last line that a crash cut in half
        (a log is appended a line at a time); any other line that is not JSON is an error."""
        path = self.path / name
        lines = split_lines(path.read_text(encoding="utf-8")) if path.is_file() else []
        pairs = []
        for i, line in enumerate(lines):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if i == len(lines) - 1:  # torn by a crash mid-write
                    break
                raise UserError(f"{path}: line {i + 1} is not JSON; repair or delete the line") from None
            if not isinstance(record, dict):
                raise UserError(f"{path}: line {i + 1} is not a JSON object; repair or delete the line")
            pairs.append((line, record))
        return pairs

    def cut_logs(self, step: int, epoch: int) -> None:
        """Drop log records written after the checkpoint a run resumes from, and a last line that
        a crash cut in half."""
        for name, key, last in ((STEPS, "step", step), (METRICS, "epoch", epoch)):
            path = self.path / name
            if not path.is_file():
                continue
            kept = [line for line, record in self.records(name) if record.get(key, last + 1) <= last]
            if "".join(line + "\n" for line in kept) != path.read_text(encoding="utf-8"):
                write_text_atomic(path, "".join(line + "\n" for line in kept))

    def clear_records(self) -> None:
        """Start a new run's records empty where a run killed before its first checkpoint (which a
        new run may replace: `holds_run` is false) left its logs, maps and epoch checkpoints; that
        it was a run, not a folder of the user's, its ``config.json`` says. (Its data is kept: a
        generated folder records its task and seed, a subword model the options it was learned
        with, and Moses tokenization has no options.)"""
        if not (self.path / CONFIG).is_file():
            return
        for name in (STEPS, METRICS, AVERAGED):
            (self.path / name).unlink(missing_ok=True)
        for folder in (EPOCHS, ATTENTION, TENSORBOARD):
            shutil.rmtree(self.path / folder, ignore_errors=True)


def resume_command(run_dir: str | Path, processes: int = 1, per_node: int | None = None) -> str:
    """The command that continues a run of ``processes`` processes, ``per_node`` of them on each
    machine (default: all on one): ``--processes`` on one machine (however it was started), torchrun
    across several."""
    per_node = per_node or processes
    if processes == 1:
        return f"{invoked_as()} train --out {run_dir} --resume"
    if per_node == processes:
        return f"{invoked_as()} train --processes {processes} --out {run_dir} --resume"
    launch = f"torchrun --nnodes={processes // per_node} --nproc_per_node={per_node} ... -m graphformer"
    return f"{launch} train --out {run_dir} --resume"


def check_run_dir(run_dir: str | Path) -> Path:
    """``run_dir`` as a Path, if it is a folder; else a UserError that says what it is."""
    run_dir = Path(run_dir)
    if run_dir.is_dir():
        return run_dir
    what = "is a file, not a run directory" if run_dir.exists() else "does not exist"
    raise UserError(f"run directory {run_dir} {what}; give the --out directory of a training run")


def find_checkpoint(run_dir: str | Path, which: str = "best") -> Path:
    """The run's ``best`` (or ``last``) checkpoint, falling back to the other one; ``averaged``
    (written by ``graphformer average``); or the path of a checkpoint file."""
    run_dir = check_run_dir(run_dir)
    if which not in ("best", "last"):
        path = run_dir / AVERAGED if which == "averaged" else Path(which)
        if path.is_dir():
            raise UserError(f"checkpoint {path} is a folder; give best, last, averaged or a checkpoint file")
        if not path.is_file():
            hint = (
                f"write it with {invoked_as()} average"
                if which == "averaged"
                else "give best, last, averaged or a file"
            )
            raise UserError(f"checkpoint {path} does not exist; {hint}")
        return path
    order = (BEST, LAST) if which == "best" else (LAST, BEST)
    for name in order:
        if (run_dir / name).is_file():
            return run_dir / name
    if not (run_dir / CONFIG).is_file():  # not a run at all (a run's data folder, say)
        raise UserError(
            f"{run_dir} is not a run directory (it has no {CONFIG}); give the --out directory of a training run"
        )
    raise UserError(f"no checkpoint in {run_dir}; train first with {invoked_as()} train --out {run_dir}")
