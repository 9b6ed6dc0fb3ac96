"""``graphformer train``: assemble the run's configuration, start its processes, train, and say
how it ended and how to go on."""

from __future__ import annotations

import os
import sys

from graphformer.cli.parser import given
from graphformer.cli.signals import abort_on_ctrl_c_at_exit, abort_training
from graphformer.errors import UserError
from graphformer.model.config import ModelConfig, unused_layers
from graphformer.training.config import TrainConfig, load_run_plugins, run_configs
from graphformer.training.config_file import read_config_file
from graphformer.training.progress import Progress


def config_file(args) -> tuple[dict, dict]:
    """The (model, train) options of ``--config`` (none without one), its plugins imported: a
    plugin's task, model or pattern named in the file is a choice by the time the file is checked."""
    if not args.config:
        return {}, {}
    model_file, train_file = read_config_file(args.config)
    load_run_plugins(train_file, source=f"--config {args.config}: train.plugins")
    return model_file, train_file


def train_configs(args, from_file: tuple[dict, dict] | None = None) -> tuple[ModelConfig, TrainConfig]:
    """The configuration of the run ``args`` (parsed ``train`` options) asks for (see
    `graphformer.training.config.run_configs`); ``from_file``: `config_file` (read here if None)."""
    plugins = {"plugins": ",".join(args.plugin)} if args.plugin else {}  # recorded: the run loads them again
    return run_configs(
        given(args, ModelConfig),
        {**given(args, TrainConfig), **plugins},
        from_file=config_file(args) if from_file is None else from_file,
        resume=args.out if args.resume else None,
    )


def ignored_flags_warning(args, model_cfg: ModelConfig) -> str | None:
    """A warning for a flag given on this command line that the model has no use for."""
    why = unused_layers(model_cfg.model)
    if why and "layers" in given(args, ModelConfig):
        return f"graphformer: warning: --{why} (--max-depth: {model_cfg.max_depth})"
    return None


def chose_max_len(args, train_cfg: TrainConfig, model_file: dict) -> bool:
    """Whether the user set max_len (a flag, the --config file's ``model_file`` options, or
    --init-from's model): if not, a new run fits it to its data."""
    return "max_len" in given(args, ModelConfig) or "max_len" in model_file or bool(train_cfg.init_from)


def cmd_train(args) -> int:
    from graphformer.attention import flex_calls
    from graphformer.training.run_dir import resume_command

    before = flex_calls.snapshot()
    from_file = config_file(args)  # read once, here
    model_cfg, train_cfg = train_configs(args, from_file)  # before any process starts: a mistake gets one line, once
    world = os.environ.get("WORLD_SIZE")
    if args.processes > 1 and world is None:  # start the processes, each of which runs this command
        from graphformer.training.distributed import check_devices_for
        from graphformer.training.launch import run_processes

        check_devices_for(args.processes, train_cfg.device)
        return run_processes(args.argv, args.processes, resume_command(args.out, args.processes))
    if args.processes > 1 and world != str(args.processes):
        raise UserError(
            f"--processes {args.processes} starts its own processes, but this one is already one of "
            f"{world} (torchrun): leave --processes out, or run it without torchrun"
        )
    from graphformer.training.launch import follow_launcher
    from graphformer.training.trainer import Trainer
    from graphformer.viz.recording import AttentionRecorder

    follow_launcher()

    trainer = Trainer(
        args.out,
        model_cfg,
        train_cfg,
        resume=args.resume,
        show_progress=not args.quiet,
        abort=abort_training,
        fit_max_len=not chose_max_len(args, train_cfg, from_file[0]),
        recorder=AttentionRecorder(),
    )
    warning = None if args.resume else ignored_flags_warning(args, model_cfg)
    if warning and trainer.ctx.is_main:  # after the run's checks: an error stays the only line
        print(warning, file=sys.stderr)
    try:
        metrics = trainer.train()
    except BaseException:
        trainer.close(failed=True)
        raise
    if trainer.interrupted:
        abort_on_ctrl_c_at_exit()
    trainer.close()
    if not trainer.ctx.is_main:
        return 0
    flex_calls.report(trainer.cfg.attention_backend, before, sys.stderr)
    return _report_end(args, trainer, metrics)


def _report_end(args, trainer, metrics: dict | None) -> int:
    """The last line of a training command (how it ended, the scores, how to go on) and its exit status."""
    from graphformer.training.run_dir import resume_command

    resume = resume_command(args.out, trainer.ctx.world, trainer.ctx.per_node)
    if trainer.interrupted:
        print(
            f"interrupted at step {trainer.progress.step}; checkpoint written to {args.out}; continue with: {resume}",
            file=sys.stderr,
        )
        return 130
    cfg, progress = trainer.cfg, trainer.progress
    where = f"step {progress.step}, {progress.epoch} of {cfg.epochs} epochs complete"
    scores = metrics and _valid_headline(metrics)
    if scores and progress.epoch < cfg.epochs and cfg.out_of_patience(progress):
        span = f"{cfg.patience} epochs" if cfg.patience != 1 else "1 epoch"
        print(f"stopped early ({where}: no better valid {cfg.select_by} in the last {span}): {scores}")
    elif scores and _finished(cfg, progress):
        print(f"done ({where}): {scores}")
    else:  # --max-steps or --max-minutes ended it first
        print(
            f"stopped at {where}{f' ({scores})' if scores else ''}; checkpoint in {args.out}; "
            f"{_how_to_go_on(trainer.cfg, trainer.progress, resume)}"
        )
    return 0


def _valid_headline(metrics: dict) -> str:
    """The last validation's loss and accuracies, e.g. ``valid loss 0.0850, token accuracy 0.9998,
    exact match 0.9970``; a classifier's ``valid loss 1.2, accuracy 0.355``."""
    from graphformer.evaluation.scores import headline

    return "valid " + headline({k.removeprefix("valid_"): v for k, v in metrics.items() if k.startswith("valid_")}, " ")


def _finished(cfg: TrainConfig, progress: Progress) -> bool:
    """Whether the run trained its --epochs, or stopped early (--patience)."""
    return progress.epoch >= cfg.epochs or cfg.out_of_patience(progress)


def _how_to_go_on(cfg: TrainConfig, progress: Progress, resume: str) -> str:
    """What resumes a run that stopped without finishing an epoch in this call (``resume``: the
    command that continues it as it is)."""
    if progress.epoch >= cfg.epochs:
        return f"it has finished its --epochs {cfg.epochs}; to train longer: {resume} --epochs {progress.epoch + 1}"
    if cfg.max_steps is not None and progress.step >= cfg.max_steps:
        return f"it has taken its --max-steps {cfg.max_steps}; to go on: {resume} --max-steps {2 * cfg.max_steps}"
    if _finished(cfg, progress):
        return (
            f"it stopped early (no better valid {cfg.select_by} for {progress.epochs_since_best} epochs); "
            f"to go on: {resume} --patience {progress.epochs_since_best + cfg.patience}"
        )
    return f"continue with: {resume}"
