"""An epoch's optimizer steps: which batches each step takes on each rank, what its loss is
averaged over, and the checks that keep a resumed run's steps the ones it would have taken.

An epoch's batches are a function of (seed, epoch) only (`plan_batches`); step s takes batches
``s*k*world .. (s+1)*k*world`` of them (``k``: --accumulate), shared among the ``world``
processes. A run therefore keeps ``k * world`` when it resumes, on any number of processes.
"""

from __future__ import annotations

from pathlib import Path

from graphformer.data.batching import plan_batches, shard
from graphformer.data.corpus import Split
from graphformer.errors import UserError
from graphformer.training.progress import Progress
from graphformer.training.run_dir import resume_command


def epoch_plan(train: Split, cfg, ctx, epoch: int) -> tuple[list, list]:
    """The optimizer steps of an epoch: this rank's batches for each step (``accumulate`` of
    them), and all ranks' batches for each step (``accumulate * world`` of them)."""
    plan = plan_batches(
        [len(s) for s in train.src],
        [len(t) for t in train.tgt],
        batch_size=cfg.batch_size,
        batch_tokens=cfg.batch_tokens,
        seed=cfg.seed,
        epoch=epoch,
    )
    k, world = cfg.accumulate, ctx.world
    steps = len(plan) // (k * world)
    per_step = [plan[s * k * world : (s + 1) * k * world] for s in range(steps)]
    return [shard(group, ctx.rank, world) for group in per_step], per_step


def step_counts(train: Split, pool, step_batches: list[list[int]]) -> dict:
    """Counts of a step, from all ranks' batches of the step: what its loss is averaged over,
    gold entries ('gold') and the nodes of each side that ACT runs on ('src', 'tgt'); and the
    tokens it reads ('tokens', for tokens/s and steps.jsonl): a sequence model's target tokens
    and `</s>` (its gold), a classifier's source nodes (its gold is one label per sample)."""
    samples = [j for batch in step_batches for j in batch]
    counts = {
        "gold": sum(pool.gold_count(len(train.tgt[j])) for j in samples),
        "src": sum(pool.source_nodes(len(train.src[j])) for j in samples),
        "tgt": sum(pool.target_nodes(len(train.tgt[j])) for j in samples),
    }
    return counts | {"tokens": counts["gold"] if pool.targets else counts["src"]}


def check_epoch_has_steps(steps: list, accumulate: int, world: int) -> None:
    """An epoch of fewer batches than one optimizer step takes would train nothing, silently."""
    if not steps:
        raise UserError(
            f"an epoch holds fewer batches than one optimizer step takes (--accumulate {accumulate} x {world} "
            "process(es)): nothing would be trained; give smaller batches (--batch-size or "
            "--batch-tokens), a smaller --accumulate, fewer processes, or more data"
        )


def check_batches_per_step(state: dict, accumulate: int, world: int, run_dir: Path) -> None:
    """A resumed run keeps its batches per optimizer step, accumulate x processes: step s of an
    epoch then takes the same batches, however many processes share them (another product would
    train some batches twice and skip others). Resuming on another number of processes takes
    the --accumulate that keeps the product. ``state``: the checkpoint resumed from."""
    saved_k = state["train_config"]["accumulate"]
    trained_by = state.get("processes", world)  # a checkpoint without the count: taken as this one
    per_step = saved_k * trained_by
    if accumulate * world == per_step:
        return
    how = (
        f"{run_dir} takes {per_step} batches per optimizer step (--accumulate {saved_k} x {trained_by} "
        f"process(es)), this would take {accumulate * world} ({accumulate} x {world})"
    )
    if per_step % world:
        raise UserError(
            f"{how}; {world} process(es) cannot share {per_step} batches evenly: resume it on "
            f"{trained_by} process(es) ({resume_command(run_dir, trained_by)})"
        )
    raise UserError(f"{how}: resume it with {resume_command(run_dir, world)} --accumulate {per_step // world}")


def check_limits_not_below_progress(progress: Progress, saved: dict, cfg, run_dir: Path) -> None:
    """A resumed run's new --epochs and --max-steps must not undercut what it has done:
    config.json would no longer describe the run (as --config, it would train a shorter one).
    (A lower value saved by an earlier version is kept: the run is then done.) ``saved``: the
    run's saved training configuration."""
    for flag, name, done, unit in (
        ("--epochs", "epochs", progress.epoch, "epochs"),
        ("--max-steps", "max_steps", progress.step, "steps"),
    ):
        limit = getattr(cfg, name)
        if limit is not None and limit < done and limit != saved.get(name):  # config.json's: given now
            raise UserError(
                f"{flag} {limit} is fewer than the {done} {unit} {run_dir} has trained; give at "
                f"least {done} (or leave it out)"
            )
