"""Checkpoint averaging: the mean of the weights of several epochs of one run.

Averaging the parameters of the last few epochs (Vaswani et al., 2017, averaged the last 5 or
20 checkpoints) smooths out the noise of the last updates, and usually scores a little better
than any single one of them. Only checkpoints of one model with one vocabulary can be averaged;
buffers and integer tensors are taken from the newest checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from graphformer.errors import ConfigError, UserError
from graphformer.files import epoch_of
from graphformer.training import checkpoint
from graphformer.training.run_dir import AVERAGED, METRICS, RunDir


def average_states(paths: list[Path]) -> dict:
    """A checkpoint whose weights are the mean of those in ``paths`` (newest last)."""
    states = [checkpoint.load(p) for p in paths]
    newest = states[-1]
    for path, state in zip(paths, states):
        for key in ("model_config", "vocab"):
            if state[key] != newest[key]:
                raise UserError(
                    f"{path} has another {key.replace('_', ' ')} than {paths[-1]}; "
                    "only checkpoints of one run can be averaged"
                )
    model = {}
    for name, tensor in newest["model"].items():
        if tensor.is_floating_point():
            total = sum(s["model"][name].double() for s in states)
            model[name] = (total / len(states)).to(tensor.dtype)
        else:
            model[name] = tensor
    return {
        "model_config": newest["model_config"],
        "train_config": newest["train_config"],
        "model": model,
        "vocab": newest["vocab"],
        "progress": newest["progress"],
        "averaged_from": [p.name for p in paths],
    }


def choose(
    run: RunDir,
    last: int | None = None,
    best: int | None = None,
    select_by: str = "loss",
    larger_is_better: bool = False,
) -> list[Path]:
    """The kept epoch checkpoints to average: the ``last`` newest, or the ``best`` by the
    validation metric recorded in metrics.jsonl; oldest first."""
    kept = run.epoch_checkpoints()
    wanted = last if last is not None else best
    if wanted is None or wanted < 1:
        raise ConfigError("last" if last is not None else "best", f"must be at least 1, got {wanted}")
    if not kept:
        raise UserError(f"{run.path} keeps no epoch checkpoints; train with --keep-last N to keep them")
    if wanted > len(kept):
        raise UserError(
            f"{run.path} keeps {len(kept)} epoch checkpoints, fewer than the {wanted} asked for; "
            f"ask for at most {len(kept)} or train with a larger --keep-last"
        )
    if last is not None:
        return kept[-last:]
    if not (run / METRICS).is_file():
        raise UserError(f"{run / METRICS} is missing: without validation metrics, use --last instead of --best")
    records = {record["epoch"]: record for _, record in run.records(METRICS) if "epoch" in record}

    def rank(path: Path) -> tuple[float, float]:
        """Smaller ranks first: the metric (an epoch without it last), then the validation loss, so
        that epochs tied on a coarse metric (exact match) go to the better trained one."""
        record = records.get(epoch_of(path), {})
        value = _or(record.get(f"valid_{select_by}"), float("-inf") if larger_is_better else float("inf"))
        return (-value if larger_is_better else value), _or(record.get("valid_loss"), float("inf"))

    return sorted(sorted(kept, key=rank)[:best], key=epoch_of)


def average_path(run: RunDir, output: str | Path | None = None) -> Path:
    """Where `write_average` writes: ``output``, by default the run's averaged checkpoint."""
    return Path(output) if output else run / AVERAGED


def write_average(run: RunDir, paths: list[Path], output: Path | None = None) -> Path:
    output = average_path(run, output)
    if run.owns(output) and output.resolve() != (run / AVERAGED).resolve():
        raise UserError(
            f"-o {output} is one of the run's own files (or in a folder the run keeps); write the "
            f"average to another file (by default {run / AVERAGED})"
        )
    if output.exists() and not checkpoint.is_average(output):  # an earlier average is replaced, nothing else
        raise UserError(
            f"-o {output} exists and is not an average (graphformer average writes those); write the "
            "average to another file"
        )
    checkpoint.save_atomic(average_states(paths), output)
    return output


def _or(value, default):
    return default if value is None else value
