"""Training on shared cores: tokens/s of the demo's training with 1 and 2 threads and each OpenMP
wait policy, on idle cores and beside competing CPU-bound processes.

Each run is ``graphformer train --task copy`` (what ``make demo`` trains: the defaults) in a fresh
process, stopped after ``--steps`` optimizer steps or ``--max-seconds`` of training, whichever
comes first. Its rate is read back from the run's ``steps.jsonl``: target tokens over training
seconds, leaving out the first ``--skip`` steps (warm-up); null where ``--max-seconds`` ran out
before a step past them.

A condition is (threads, wait policy, load):

* threads: ``--threads N`` of the command (``default``: the command's own choice);
* wait policy: how an OpenMP thread that finished its share waits for the next parallel region.
  GNU OpenMP (what torch's pip wheels use) spins ``GOMP_SPINCOUNT`` times before it sleeps: 300,000
  unless told (``spin``); ``passive`` (``OMP_WAIT_POLICY=passive``) sleeps at once; ``default``
  sets neither and measures what graphformer chooses by itself;
* load: ``idle``, or ``busy``: one busy loop (``while True: pass``) per core this process may
  use, started before the run and stopped after it.

Every condition runs once a round; ``/proc/loadavg`` before each run is kept with it. Writes
``threads.json`` to ``--out``.

    python -m benchmarks.threads [--steps 30] [--rounds 3] [--loads idle busy] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import ROOT, command, interleaved, reported, write_result
from graphformer.cli import at_least_one

# What each wait policy sets in the run's environment; every other OpenMP wait setting is removed.
WAITS = {
    "default": {},
    "spin": {"GOMP_SPINCOUNT": "300000"},  # GNU OpenMP's own default, named so it stays that
    "spin-50k": {"GOMP_SPINCOUNT": "50000"},
    "spin-10k": {"GOMP_SPINCOUNT": "10000"},
    "spin-2k": {"GOMP_SPINCOUNT": "2000"},
    "passive": {"OMP_WAIT_POLICY": "passive"},
}
OPENMP_SETTINGS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def conditions(threads: list[str], waits: list[str], loads: list[str]) -> list[dict]:
    """Every (threads, wait, load) to measure. Each wait policy is run with 2 threads; 1 thread
    never waits for another, and the command's own thread count goes with its own wait policy."""
    chosen = []
    for count in threads:
        for wait in waits if count == "2" else ["default"]:
            chosen += [{"threads": count, "wait": wait, "load": load} for load in loads]
    return chosen


@contextlib.contextmanager
def competing(processes: int, load: str):
    """``processes`` busy loops for the ``busy`` load (none for ``idle``), stopped on the way out;
    yields their process ids."""
    count = processes if load == "busy" else 0
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield [p.pid for p in loops]
    finally:
        for p in loops:
            p.kill()
            p.wait()


def train(condition: dict, args, scratch: Path) -> dict:
    """One run of the demo's training under ``condition``: its tokens/s and the load before it."""
    run = scratch / "run"
    shutil.rmtree(run, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in OPENMP_SETTINGS}
    env.update(WAITS[condition["wait"]], PYTHONPATH=str(ROOT), DGLBACKEND="pytorch")
    argv = [sys.executable, "-m", "graphformer", "train", "--task", "copy", "--out", str(run)]
    argv += ["--data-dir", str(scratch / "data"), "--max-steps", str(args.steps)]
    argv += ["--max-minutes", str(args.max_seconds / 60)]
    argv += [] if condition["threads"] == "default" else ["--threads", condition["threads"]]
    load_before = Path("/proc/loadavg").read_text().split()[0]
    with competing(args.busy, condition["load"]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"benchmarks.threads: error: {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()][args.skip :]
    threads = json.loads((run / "config.json").read_text())["train"]["threads"]
    # None: --max-seconds ran out before a step past the warm-up (too slow to measure).
    rate = sum(s["tokens"] for s in steps) / sum(s["seconds"] for s in steps) if steps else None
    return {"tokens_per_s": rate, "steps": len(steps), "threads_used": threads, "load_before": float(load_before)}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", nargs="+", default=["1", "2", "default"], choices=["1", "2", "default"])
    parser.add_argument("--waits", nargs="+", default=["spin", "passive"], choices=sorted(WAITS))
    parser.add_argument("--steps", type=at_least_one, default=30, help="optimizer steps a run trains")
    parser.add_argument("--skip", type=int, default=5, help="first steps left out of the rate (warm-up)")
    parser.add_argument("--max-seconds", type=at_least_one, default=20, help="training seconds a run may take")
    parser.add_argument("--loads", nargs="+", default=["idle", "busy"], choices=["idle", "busy"])
    parser.add_argument("--rounds", type=at_least_one, default=3)
    parser.add_argument("--busy", type=at_least_one, default=len(os.sched_getaffinity(0)), help="busy loops")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    if not 0 <= args.skip < args.steps:
        parser.error(f"--skip {args.skip}: give 0 to {args.steps - 1} (fewer than --steps)")
    return args


def main() -> int:
    args = parse_args()
    chosen = conditions(args.threads, args.waits, args.loads)
    with tempfile.TemporaryDirectory() as scratch:

        def run(c):
            found = train(c, args, Path(scratch))
            shown = "too slow to measure" if found["tokens_per_s"] is None else f"{found['tokens_per_s']:.0f} tokens/s"
            print(f"{c['threads']} threads, {c['wait']}, {c['load']}: {shown}", flush=True)
            return found

        runs = interleaved({i: (lambda c=c: run(c)) for i, c in enumerate(chosen)}, args.rounds, measure=reported)
    for i, c in enumerate(chosen):
        c["runs"] = runs[i]
        measured = [run["tokens_per_s"] for run in c["runs"] if run["tokens_per_s"] is not None]
        c["tokens_per_s"] = max(measured, default=None)
    result = {
        "task": "copy (the demo's defaults)",
        "steps": args.steps,
        "skip": args.skip,
        "rounds": args.rounds,
        "busy_loops": args.busy,
        "rows": chosen,
    }
    write_result(args.out, "threads.json", command("threads", sys.argv[1:]), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
