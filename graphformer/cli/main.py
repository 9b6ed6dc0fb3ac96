"""The entry point of the ``graphformer`` command: parse, run the command, report what stopped it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from graphformer.cli.attend import cmd_attend
from graphformer.cli.average import cmd_average
from graphformer.cli.decode import cmd_evaluate, cmd_translate
from graphformer.cli.draw import cmd_animate, cmd_heatmap
from graphformer.cli.errors import report
from graphformer.cli.parser import parse_command_line
from graphformer.cli.train import cmd_train
from graphformer.errors import UserError
from graphformer.registry import load_plugins
from graphformer.training.threads import choose_wait_here, use_threads

COMMANDS = {
    "train": cmd_train,
    "evaluate": cmd_evaluate,
    "translate": cmd_translate,
    "average": cmd_average,
    "animate": cmd_animate,
    "heatmap": cmd_heatmap,
    "attend": cmd_attend,
}
# Commands that decode with a trained model: torch's threads as training's (`graphformer.training.threads`)
# chooses them; train sets its own, from --threads.
DECODING = ("evaluate", "translate", "attend")


def main(argv=None) -> int:
    """Run ``graphformer ARGV`` (``sys.argv[1:]`` when None) and return its exit status."""
    choose_wait_here(os.environ)  # before any command or plugin loads torch and its OpenMP
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # before the parser is built: a plugin's backends, patterns, tasks and models are choices
        load_plugins(plugins_named(argv), installed=True)
    except UserError as err:
        return report(err)
    args = parse_command_line(argv)
    args.argv = argv  # the command `train --processes` runs in each process
    try:
        _check_output_folder(getattr(args, "output", None))
        _check_output_folder(getattr(args, "save_maps", None), "--save-maps")
        if args.command in DECODING:
            use_threads(None)
        return COMMANDS[args.command](args)
    except BaseException as err:
        status = report(err)
        if status is None:
            raise
        return status


def plugins_named(argv: list[str]) -> list[str]:
    """The modules of every ``--plugin MODULE`` (or ``--plugin=MODULE``) in ``argv``."""
    named = [value for flag, value in zip(argv, argv[1:]) if flag == "--plugin"]
    return named + [arg.removeprefix("--plugin=") for arg in argv if arg.startswith("--plugin=")]


def _check_output_folder(output: str | None, flag: str = "-o") -> None:
    if output is None:
        return
    if Path(output).is_dir():
        raise UserError(f"{flag} {output} is a folder; give the name of the file to write")
    parent = Path(output).resolve().parent
    if not parent.is_dir():
        what = "is a file, not a folder" if parent.exists() else "does not exist; create it first"
        raise UserError(f"{flag} {output}: {Path(output).parent} {what}")
