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

Runs go round by round, every condition once a round, so that other work on the machine hits each
condition alike; a condition's figure is its best round. ``/proc/loadavg`` before each run is kept
with it. Writes ``threads.json`` to ``--out``.

    python benchmarks/threads.py [--steps 30] [--rounds 3] [--loads idle busy] [--out benchmarks/results]
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

sys.path.insert(0, str(Path(__file__).parent))
from provenance import machine, versions  # noqa: E402

from graphformer.cli import at_least_one  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
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
    command = [sys.executable, "-m", "graphformer", "train", "--task", "copy", "--out", str(run)]
    command += ["--data-dir", str(scratch / "data"), "--max-steps", str(args.steps)]
    command += ["--max-minutes", str(args.max_seconds / 60)]
    command += [] if condition["threads"] == "default" else ["--threads", condition["threads"]]
    load_before = Path("/proc/loadavg").read_text().split()[0]
    with competing(args.busy, condition["load"]):
        done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"threads.py: error: {' '.join(command)} failed:\n{done.stderr[-2000:]}")
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()][args.skip :]
    threads = json.loads((run / "config.json").read_text())["train"]["threads"]
    # None: --max-seconds ran out before a step past the warm-up (too slow to measure).
    rate = sum(s["tokens"] for s in steps) / sum(s["seconds"] for s in steps) if steps else None
    return {"tokens_per_s": rate, "steps": len(steps), "threads_used": threads, "load_before": float(load_before)}


def main() -> int:
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
    chosen = conditions(args.threads, args.waits, args.loads)
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(args.rounds):
            for c in chosen:
                c.setdefault("runs", []).append(train(c, args, Path(scratch)))
                rate = c["runs"][-1]["tokens_per_s"]
                shown = "too slow to measure" if rate is None else f"{rate:.0f} tokens/s"
                print(f"round {r + 1}: {c['threads']} threads, {c['wait']}, {c['load']}: {shown}", flush=True)
    for c in chosen:
        measured = [run["tokens_per_s"] for run in c["runs"] if run["tokens_per_s"] is not None]
        c["tokens_per_s"] = max(measured, default=None)
    result = {
        "command": "python benchmarks/threads.py " + " ".join(sys.argv[1:]),
        "task": "copy (the demo's defaults)",
        "steps": args.steps,
        "skip": args.skip,
        "rounds": args.rounds,
        "busy_loops": args.busy,
        "rows": chosen,
        "machine": machine(),
        "versions": versions(),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "threads.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'threads.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
