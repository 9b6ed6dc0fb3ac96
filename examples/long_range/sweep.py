"""Train the encoder classifier with each attention pattern on one long-range task, same budget and
seed, and tabulate accuracy, seconds per step, memory, edges per query and reach.

    python examples/long_range/sweep.py --task recall --length 1024 --steps 300 \
        --patterns full,window,w64g1=window:64+global:1 --out runs/sweep/recall-1024

writes ``OUT/sweep.json``, ``OUT/sweep.md`` and ``OUT/sweep.png``; each pattern's run directory
is ``OUT/runs/NAME`` (a finished run is reused, so an interrupted sweep continues where it
stopped; ``OUT/options.json`` keeps a sweep of other options from reusing them). Every pattern trains in its own process:

* accuracy: ``graphformer evaluate --split test --beam 1`` (exact match of the one label);
* seconds per step: the median over the run's ``steps.jsonl`` (the first steps, which warm up
  the allocator, excluded);
* peak memory: the largest resident set of the training process, minus that of a process that
  only imports graphformer and torch (what the pattern, the model, the data and the optimiser add);
* step memory: what one training step (forward, loss, backward on one batch) adds above the
  resident set just before it (``step_memory.py``, a fresh process per pattern): the memory that
  grows with the pattern's edges, without the fixed floor the peak memory carries;
* edges per query: the encoder graph's edges divided by its nodes, for one sample of the length
  (for a pattern with each sample's own edges, such as ``parse-tree``: over the test split);
* reach: the share of the context whose information can meet the last token's (recall's query)
  in one node within the model's layers (`graphformer.graphs.reach`), and for recall the accuracy
  bound that follows, reach + (1 - reach) / values: what no training budget can beat.

Mean pooling (``--pooling mean``, the default here) and ``--pooling last`` (the label read from
the closing ``</s>``, next to recall's query) keep purely local patterns local; with
``--pooling cls`` every pattern gains a global ``<cls>`` node and with it long reach.

``--minutes M`` gives every pattern the same wall-clock budget besides the step budget: the
question a user with a fixed machine asks (what accuracy does an hour buy?), where a cheaper
pattern takes more steps; the table says how many each took.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from graph_measures import accuracy_bound, edges_per_query, reach  # beside this script

from graphformer.model.config import POOLINGS

PATTERNS = {  # name -> encoder pattern; BigBird = window + global + random
    "full": "full",
    "window": "window:64",
    "window+global": "window:64+global:2",
    "dilated": "window:8+dilated:32,16",
    "block": "block:64",
    "random": "window:1+random:32",
    "bigbird": "window:32+global:2+random:16",
    "tree": "tree:4",
    "parse-tree": "parse-tree",  # each sample's own parse tree (listops; graphformer.graphs.sample_edges)
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--task", choices=("recall", "listops", "boolean"), required=True)
    p.add_argument("--length", type=int, required=True, help="tokens per sample (listops, boolean: the longest)")
    p.add_argument("--min-length", type=int, help="listops, boolean: the shortest sample (default: half of --length)")
    p.add_argument(
        "--patterns",
        default=",".join(PATTERNS),
        help="comma-separated names from the table in this file, or NAME=SPEC for your own",
    )
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per pattern (the same budget for all)")
    p.add_argument(
        "--minutes",
        type=float,
        help="also a wall-clock budget per pattern: each stops after the step "
        "that ends this many minutes in (cheaper patterns take more steps)",
    )
    p.add_argument("--batch-tokens", type=int, default=8192, help="tokens per batch")
    p.add_argument("--pooling", choices=POOLINGS, default="mean", help="see graphformer train --help")
    p.add_argument(
        "--train-options",
        default="",
        metavar="OPTIONS",
        help='further graphformer train options for every run, e.g. "--layers 2 --d-model 64"',
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sizes", default="2000,200,200", help="train,valid,test samples")
    p.add_argument("--out", required=True, type=Path)
    return p.parse_args(argv)


def pattern_specs(text: str) -> dict[str, str]:
    """{name: spec} of ``--patterns``. Commas separate patterns, except before a digit, where they
    belong to a spec's numbers (``dilated=window:2+dilated:4,8``)."""
    specs = {}
    for item in re.split(r",(?![0-9])", text):
        name, _, spec = item.partition("=")
        if not spec and name not in PATTERNS:
            raise SystemExit(f"sweep: unknown pattern {name!r}; use one of {', '.join(PATTERNS)} or NAME=SPEC")
        specs[name] = spec or PATTERNS[name]
    return specs


def make_data(task: str, length: int, sizes: dict, seed: int, folder: Path, min_length: int | None = None) -> Path:
    from graphformer.data import boolean, listops, recall

    if task == "recall":
        return recall.write_recall(folder, seed=seed, sizes=sizes, min_length=length, max_length=length)
    write = {"listops": listops.write_listops, "boolean": boolean.write_boolean}[task]
    shortest = min_length or max(4, length // 2)
    return write(folder, seed=seed, sizes=sizes, min_length=shortest, max_length=length)


def run_measured(command: list[str]) -> tuple[int, int]:
    """(exit status, peak resident set in bytes) of one child process."""
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        _, status, usage = os.wait4(child.pid, 0)
    except KeyboardInterrupt:  # the child heard the Ctrl-C too: let it write its checkpoint first
        child.wait()
        raise
    return os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024


def train_one(name: str, spec: str, args, data: Path) -> str | None:
    """Train one pattern's run (unless it is done: its peak memory is recorded) and record its
    peak memory; an error or None. An interrupted run is resumed (its peak is then the resumed
    process's)."""
    run = args.out / "runs" / name
    if (run / "peak_rss_bytes").is_file():
        return None
    if (run / "checkpoint_last.pt").is_file():
        command = [sys.executable, "-m", "graphformer", "train", "--out", str(run), "--quiet", "--resume"]
    else:
        command = [
            sys.executable,
            "-m",
            "graphformer",
            "train",
            "--task",
            args.task,
            "--data-dir",
            str(data),
            "--out",
            str(run),
            "--quiet",
            "--model",
            "encoder",
            "--pooling",
            args.pooling,
            "--enc-attention",
            spec,
            "--max-len",
            str(args.length + 2),
            "--batch-tokens",
            str(args.batch_tokens),
            "--epochs",
            "1000",
            "--max-steps",
            str(args.steps),
            *(["--max-minutes", str(args.minutes)] if args.minutes else []),
            "--seed",
            str(args.seed),
            *shlex.split(args.train_options),
        ]
    status, peak = run_measured(command)
    if status != 0:
        return f"training exited with status {status}"
    (run / "peak_rss_bytes").write_text(str(peak))
    return None


def measure_one(name: str, spec: str, args, data: Path) -> dict:
    """A trained pattern's row: test accuracy, step time, memory, edges per query and reach."""
    run = args.out / "runs" / name
    scores = json.loads(
        subprocess.run(
            [sys.executable, "-m", "graphformer", "evaluate", str(run), "--split", "test", "--beam", "1", "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    timed = [s["seconds"] for s in steps[min(5, len(steps) - 1) :]]
    return {
        "name": name,
        "pattern": spec,
        "accuracy": scores["exact_match"],
        "steps": len(steps),
        "training_minutes": sum(s["seconds"] for s in steps) / 60,
        "seconds_per_step": statistics.median(timed),
        "peak_rss_bytes": int((run / "peak_rss_bytes").read_text()),
        "step_bytes": step_memory(run, args),
        "edges_per_query": edges_per_query(spec, args.length, args.pooling, data),
        "reach": (share := reach(spec, args.length, args.pooling, run, data)),
        "accuracy_bound": accuracy_bound(args.task, share),
    }


def step_memory(run: Path, args) -> int:
    """Bytes one training step of ``run``'s model adds (see step_memory.py), cached in the run."""
    cached = run / "step_memory.json"
    if not cached.is_file():
        out = subprocess.run(
            [
                sys.executable,
                str(Path(__file__).with_name("step_memory.py")),
                str(run),
                "--length",
                str(args.length),
                "--batch-tokens",
                str(args.batch_tokens),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        cached.write_text(out)
    return json.loads(cached.read_text())["step_bytes"]


def baseline_rss() -> int:
    _, peak = run_measured([sys.executable, "-c", "import torch, graphformer.training.trainer"])
    return peak


def write_table(rows: list[dict], args, baseline: int) -> None:
    full = next((r for r in rows if r["name"] == "full" and "error" not in r), None)
    budget = f"{args.steps} steps" + (f" or {args.minutes:g} minutes, whichever ends first," if args.minutes else "")
    lines = [
        f"{args.task}, L = {args.length}, {budget} per pattern, pooling {args.pooling}; "
        f"memory above the {baseline / 2**20:.0f} MiB of a process that only imports torch and graphformer",
        "",
        "| pattern | spec | accuracy | steps | minutes | s / step | vs full | peak memory (MiB) | vs full "
        "| step memory (MiB) | vs full | edges / query | reach | accuracy bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | `{r['pattern']}` | {r['error']} | | | | | | | | | | | |")
            continue
        memory = (r["peak_rss_bytes"] - baseline) / 2**20
        speed = f"{full['seconds_per_step'] / r['seconds_per_step']:.1f}x" if full else ""
        smaller = f"{(full['peak_rss_bytes'] - baseline) / max(r['peak_rss_bytes'] - baseline, 1):.1f}x" if full else ""
        step_smaller = f"{full['step_bytes'] / max(r['step_bytes'], 1):.1f}x" if full else ""
        lines.append(
            f"| {r['name']} | `{r['pattern']}` | {r['accuracy']:.3f} | {r['steps']} "
            f"| {r['training_minutes']:.1f} | {r['seconds_per_step']:.3f} | {speed} "
            f"| {memory:.0f} | {smaller} | {r['step_bytes'] / 2**20:.0f} | {step_smaller} "
            f"| {r['edges_per_query']:.1f} | {r['reach']:.3f} "
            f"| {'' if r['accuracy_bound'] is None else format(r['accuracy_bound'], '.3f')} |"
        )
    (args.out / "sweep.md").write_text("\n".join(lines) + "\n")


def plot(rows: list[dict], args, baseline: int) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    done = [r for r in rows if "error" not in r]
    figure = Figure(figsize=(6.5, 4.2))
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    sizes = [max(r["step_bytes"] / 2**20, 1) for r in done]
    ax.scatter(
        [r["seconds_per_step"] for r in done],
        [r["accuracy"] for r in done],
        s=[20 + 200 * s / max(sizes) for s in sizes],
        alpha=0.6,
    )
    for r in done:
        ax.annotate(
            r["name"], (r["seconds_per_step"], r["accuracy"]), fontsize=8, xytext=(4, 4), textcoords="offset points"
        )
    ax.set_xscale("log")
    ax.set_xlabel("seconds per training step (log)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"{args.task}, L = {args.length} (marker area: step memory)")
    figure.tight_layout()
    figure.savefig(args.out / "sweep.png", dpi=120)


def check_same_sweep(args) -> None:
    """A finished run is reused only by the sweep that made it: ``OUT/options.json`` records the
    options every pattern's run shares, and another set of them is refused."""
    options = {
        "task": args.task,
        "length": args.length,
        "steps": args.steps,
        "minutes": args.minutes,
        "batch_tokens": args.batch_tokens,
        "pooling": args.pooling,
        "train_options": args.train_options,
        "seed": args.seed,
        "sizes": args.sizes,
    }
    recorded = args.out / "options.json"
    if recorded.is_file():
        before = json.loads(recorded.read_text())
        changed = {k: (before.get(k), v) for k, v in options.items() if before.get(k) != v}
        if changed:
            sys.exit(
                f"sweep.py: error: {args.out} holds a sweep with other options ("
                + ", ".join(f"{k}: {a!r} there, {b!r} here" for k, (a, b) in changed.items())
                + "); give another --out, or the same options to continue it"
            )
    args.out.mkdir(parents=True, exist_ok=True)
    recorded.write_text(json.dumps(options) + "\n")


def main(argv=None) -> int:
    args = parse_args(argv)
    specs = pattern_specs(args.patterns)
    check_same_sweep(args)
    sizes = dict(zip(("train", "valid", "test"), map(int, args.sizes.split(","))))
    data = make_data(args.task, args.length, sizes, args.seed, args.out / "data", args.min_length)
    baseline = baseline_rss()
    # Every run trains before this process imports torch or builds a graph: a child's peak resident
    # set counts the parent's at the fork (Linux keeps it across exec).
    errors = {}
    for name, spec in specs.items():
        print(f"{name}: {spec}", flush=True)
        errors[name] = train_one(name, spec, args, data)
    rows = []
    for name, spec in specs.items():
        rows.append(
            {"name": name, "pattern": spec, "error": errors[name]}
            if errors[name]
            else measure_one(name, spec, args, data)
        )
        print(f"  {rows[-1]}", flush=True)
    (args.out / "sweep.json").write_text(
        json.dumps(
            {
                "task": args.task,
                "length": args.length,
                "steps": args.steps,
                "minutes": args.minutes,
                "pooling": args.pooling,
                "baseline_rss_bytes": baseline,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    write_table(rows, args, baseline)
    plot(rows, args, baseline)
    print((args.out / "sweep.md").read_text())
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit("sweep: interrupted; the same command picks up where it stopped")
