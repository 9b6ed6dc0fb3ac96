"""What every benchmark shares: the interleaved best-of timing loop, and the result writer that
records, beside the figures, the command, the machine and the versions that made them.

The loop (the method itself is told once, in ``docs/results.md``, "How we measure")::

    for round in 1..rounds:
        for run in runs:            # every run once a round, in turn
            figure[run].append(measure(run))

so that a busy machine slows every run of a round alike; a run's figure is then its best round
(`best_of`). This module imports no graphformer and torch only inside functions: the GPU
check's orchestrator imports it before the wheels it installs are on the path.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Hashable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository root, where benchmarks run from


def wall_seconds(run: Callable[[], object]) -> float:
    """Seconds of one call of ``run`` (the loop's usual measure)."""
    tic = time.perf_counter()
    run()
    return time.perf_counter() - tic


def reported(run: Callable[[], object]):
    """The figure ``run`` returns itself: for runs that leave their own set-up out of the timing,
    or measure something else than seconds (a subprocess's rate)."""
    return run()


def interleaved(
    runs: dict[Hashable, Callable[[], object]],
    rounds: int,
    measure: Callable[[Callable[[], object]], object] = wall_seconds,
    alternate: bool = False,
) -> dict[Hashable, list]:
    """``{name: [figure of each round]}``: each run measured once a round, the runs in turn.

    ``alternate`` reverses the order every other round (the first round backwards), so that no
    run always follows the same one. Warm-up calls are the caller's: the loop times every call.
    """
    figures = {name: [] for name in runs}
    for r in range(rounds):
        order = list(runs) if r % 2 or not alternate else list(runs)[::-1]
        for name in order:
            figures[name].append(measure(runs[name]))
    return figures


def best_of(seconds: dict[Hashable, list[float]]) -> dict[Hashable, float]:
    """Each run's fastest round."""
    return {name: min(times) for name, times in seconds.items()}


# ----------------------------------------------------------------------------- the result writer


def command(benchmark: str, argv: list[str]) -> str:
    """The command that reruns a benchmark from the repository root: ``python -m
    benchmarks.NAME ARGS``."""
    return " ".join([f"python -m benchmarks.{benchmark}", *argv])


def machine(**extra) -> dict:
    """Cores, torch's threads and the platform (plus ``extra`` facts a benchmark adds)."""
    import torch

    return {"cores": os.cpu_count(), "threads": torch.get_num_threads(), "platform": platform.platform(), **extra}


def versions(**extra) -> dict:
    """torch's and Python's versions (plus ``extra``, e.g. CUDA's)."""
    import torch

    return {"torch": torch.__version__, "python": platform.python_version(), **extra}


def write_json(path: Path, data: dict) -> None:
    """Rewrites ``path`` whole, through a file beside it (a reader never sees half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def write_result(out: str | Path, filename: str, command_line: str, result: dict, **machine_facts) -> Path:
    """Writes ``{"command": ..., **result, "machine": ..., "versions": ...}`` to ``out/filename``
    (``machine_facts``: what a benchmark adds to `machine`) and says where; returns the path."""
    path = Path(out) / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"command": command_line, **result, "machine": machine(**machine_facts), "versions": versions()})
    print(f"wrote {path}")
    return path
