"""The ``graphformer`` command as the user started it, for every hint that tells them what to run
next (``continue with: .venv/bin/graphformer train --out R --resume``): a hint the user pastes
must name the command they ran, not one that may not be on their PATH.

How it was started shows in ``sys.argv[0]``:

    .venv/bin/graphformer ...       the script's path as typed         -> .venv/bin/graphformer
    graphformer ...                 the shell found it on PATH and      -> graphformer
                                    passed its full path
    python -m graphformer ...       graphformer/__main__.py; the words  -> python -m graphformer
                                    before the arguments are in
                                    sys.orig_argv, as typed

Anything else is a program that calls `graphformer.cli.main` itself (the tests, a notebook),
whose hints say plain ``graphformer``. The processes of ``train --processes N`` run
``python -m graphformer`` but are told their launcher's command (`COMMAND`); those torchrun
starts say ``python -m graphformer`` with this interpreter's path.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

COMMAND = "GRAPHFORMER_COMMAND"  # set by graphformer.training.launch for the processes it starts
TORCHRUN = "TORCHELASTIC_RUN_ID"  # set by torchrun (torch.distributed.run) for the processes it starts
NAME = "graphformer"


def invoked_as() -> str:
    """The command that started this process, as the user would type it again (see the module
    docstring)."""
    if COMMAND in os.environ:
        return os.environ[COMMAND]
    if TORCHRUN in os.environ:  # the user typed torchrun's command; this interpreter runs graphformer alone
        return shlex.join([sys.executable, "-m", NAME])
    script = sys.argv[0] if sys.argv else ""
    if _is_our_main(script):
        words = sys.orig_argv[: len(sys.orig_argv) - len(sys.argv) + 1]  # the interpreter, its options, -m graphformer
        return shlex.join(words)
    if Path(script).stem == NAME:
        return NAME if _found_on_path(script) else shlex.quote(script)
    return NAME


def _is_our_main(script: str) -> bool:
    """Whether ``script`` is this package's ``__main__.py`` (what ``-m graphformer`` puts in argv[0])."""
    return Path(script).name == "__main__.py" and Path(script).resolve().parent == Path(__file__).resolve().parent


def _found_on_path(script: str) -> bool:
    """Whether typing the bare name runs ``script``: the shell passes a command found on PATH by its
    full path, which the user never typed."""
    on_path = shutil.which(NAME)
    return on_path is not None and Path(on_path).resolve() == Path(script).resolve()
