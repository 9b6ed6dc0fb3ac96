"""The flex backend (torch's FlexAttention, compiled) against the blocked and torch backends and
dense masked attention, on a CPU: forward time and peak memory, and what the compilation costs.

The attention operator alone (no projections), 4 heads of 32 dims, float32, no gradients (on a
CPU FlexAttention has no backward pass), one sequence of L tokens attending to itself with:

    window    window:64                           keys j-64..j+64
    dilated   dilated:32,4                        keys j + 4i, |i| <= 32 (Sparse Transformer's strided)
    bigbird   window:64+global:2+random:3         BigBird's window, global tokens and random links
    tree      tree:1                              BP-Transformer: L tokens and about L span nodes

Methods: ``flex`` (`graphformer.attention.flex.attend`, compiled), ``blocked`` and ``torch``
(`graphformer.attention.blocked.attend`, `graphformer.attention.torch_ops.attend`), and ``sdpa``:
``torch.nn.functional.scaled_dot_product_attention`` with a dense (N, N) boolean mask of the edges.
Each (method, pattern) runs in a fresh process, lengths in increasing order: one warm-up call (for
flex the compilation: on a CPU one kernel per power-of-two size, see `graphformer.attention.flex`),
then ``--rounds`` timed calls. A size whose time or memory, extrapolated from the
previous one (edges for the graph backends, N^2 for sdpa), would pass 60 s or 8 GiB is skipped, and
the row says why; a call of 2 s or more is timed once. All processes of one run share a fresh
Inductor cache, so the first flex process compiles from nothing, as a first run would; a last
process repeats its first call with that cache warm.

    python -m benchmarks.flex_attention [--lengths 1024 4096 16384] [--rounds 3] [--quick] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.harness import ROOT, command, write_result
from graphformer.rss import peak_rss_bytes, reset_peak_rss, rss_bytes

PATTERNS = {
    "window": "window:64",
    "dilated": "dilated:32,4",
    "bigbird": "window:64+global:2+random:3",
    "tree": "tree:1",
}
METHODS = ["flex", "blocked", "torch", "sdpa"]
HEADS, DIM = 4, 32
MAX_SECONDS, MAX_BYTES = 60.0, 8 * 2**30
SLOW_CALL = 2.0  # seconds: a call this slow is timed once (its median would cost minutes)
PUBLISHED = ROOT / "benchmarks" / "results"


def relation_of(spec: str, L: int):
    """The pattern's relation over L tokens (a tree's span nodes join keys and queries alike)."""
    import torch

    from graphformer.graphs import patterns
    from graphformer.graphs.relation import Relation

    u, v = patterns.parse(spec)(L, L)
    nodes = max(L, int(u.max()) + 1, int(v.max()) + 1)
    return Relation(u.to(torch.int64), v.to(torch.int64), nodes, nodes, verified=True)


def _release():
    """Return freed memory to the system, so the next measurement's baseline holds no garbage."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _call(method: str, relation):
    """The timed call of ``method`` on ``relation`` (its tensors made here, outside the timing)."""
    import torch

    from benchmarks.peers import masked_sdpa
    from graphformer.attention import blocked, flex, torch_ops

    torch.manual_seed(0)
    n = relation.num_queries
    q, k, v = (torch.randn(n, HEADS, DIM) for _ in range(3))
    if method == "sdpa":
        return masked_sdpa(relation, q, k, v)
    attend = {"flex": flex.attend, "blocked": blocked.attend, "torch": torch_ops.attend}[method]
    return lambda: attend(relation, q, k, v)


def measure(method: str, pattern: str, lengths: list[int], rounds: int) -> list[dict]:
    """Runs inside a child process: every length of one (method, pattern), smallest first."""
    import torch

    from graphformer.attention import flex

    rows, previous, stopped = [], None, None
    for L in lengths:
        row = {"method": method, "pattern": pattern, "spec": PATTERNS[pattern], "L": L}
        rows.append(row)
        if method == "flex" and flex.unavailable() is not None:
            row["skipped"] = flex.unavailable()
            continue
        if stopped is not None:
            row["skipped"] = f"longer than L={stopped}, already past the limit"
            continue
        relation = relation_of(PATTERNS[pattern], L)
        row.update(nodes=relation.num_queries, edges=relation.num_edges)
        size = relation.num_queries**2 if method == "sdpa" else relation.num_edges
        if previous is not None:
            grow = size / previous["size"]
            seconds, peak = previous["seconds"] * grow, previous["peak_bytes"] * grow
            if seconds > MAX_SECONDS or peak > MAX_BYTES:
                row["skipped"] = (
                    f"extrapolated from L={previous['L']} ({'N^2' if method == 'sdpa' else 'edges'} "
                    f"x{grow:.1f}): ~{seconds:.0f} s, ~{peak / 2**30:.1f} GiB, past the "
                    f"{MAX_SECONDS:.0f} s / {MAX_BYTES / 2**30:.0f} GiB limit"
                )
                stopped = L
                continue
        with torch.no_grad():
            if method == "flex":
                tic = time.perf_counter()
                layout = flex.layout_of(relation)
                row["layout_seconds"] = time.perf_counter() - tic
                row["blocks"] = {
                    "side": layout.block[0],
                    "partial": layout.partial,
                    "full": layout.full,
                    "fill": relation.num_edges / ((layout.partial + layout.full) * layout.block[0] * layout.block[1]),
                }
            run = _call(method, relation)
            tic = time.perf_counter()
            run()  # warm-up: the compilation, block layouts, the allocator
            row["first_call_seconds"] = time.perf_counter() - tic
            _release()
            before = rss_bytes()
            reset_peak_rss()
            times = []
            while len(times) < rounds and (not times or times[0] < SLOW_CALL):  # a slow call: once is enough
                tic = time.perf_counter()
                run()
                times.append(time.perf_counter() - tic)
            row.update(
                seconds=statistics.median(times), rounds=len(times), peak_bytes=max(peak_rss_bytes() - before, 0)
            )
        del run
        _release()
        previous = {"L": L, "size": size, "seconds": row["seconds"], "peak_bytes": row["peak_bytes"]}
    return rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--rounds", type=int, default=3, help="timed calls per row (the median is kept)")
    parser.add_argument("--patterns", nargs="+", default=list(PATTERNS), choices=list(PATTERNS))
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--quick", action="store_true", help="a rehearsal: lengths 256 and 1024, 2 rounds")
    parser.add_argument("--out", default=str(PUBLISHED), help="where flex_attention.json goes")
    parser.add_argument("--child", nargs=4, metavar=("METHOD", "PATTERN", "LENGTHS", "ROUNDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return args
    if args.quick:
        args.lengths, args.rounds = [256, 1024], 2
    if min(args.lengths) < 2:
        parser.error(f"--lengths must be at least 2, got {min(args.lengths)}")
    if args.rounds < 1:
        parser.error(f"--rounds: must be at least 1, got {args.rounds}")
    args.lengths = sorted(set(args.lengths))
    return args


def child_rows(method: str, pattern: str, lengths: list[int], rounds: int, env: dict) -> list[dict]:
    """`measure` in a fresh process (a row per length; the error on every row if it fails)."""
    argv = ["--child", method, pattern, ",".join(map(str, lengths)), str(rounds)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.flex_attention", *argv], capture_output=True, text=True, env=env, cwd=ROOT
    )
    if proc.returncode == 0:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    error = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
    return [{"method": method, "pattern": pattern, "spec": PATTERNS[pattern], "L": L, "error": error} for L in lengths]


def all_rows(args) -> tuple[list[dict], list[dict]]:
    """(rows, the warm-cache repeat's rows): every (method, pattern) in a fresh process sharing
    one fresh Inductor cache; last, flex's first call again with its kernel in that cache."""
    rows, compile_rows = [], []
    with tempfile.TemporaryDirectory(prefix="flex-bench-inductor-") as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        jobs = [(m, p, args.lengths) for p in args.patterns for m in args.methods]
        if "flex" in args.methods:
            jobs.append(("flex", args.patterns[0], args.lengths[:1]))
        for index, (method, pattern, job_lengths) in enumerate(jobs):
            warm_repeat = index == len(jobs) - 1 and "flex" in args.methods
            found = child_rows(method, pattern, job_lengths, args.rounds, env)
            (compile_rows if warm_repeat else rows).extend(found)
            for r in found:
                note = " (warm cache)" if warm_repeat else ""
                print(f"{method:7s} {pattern:8s} L={r['L']:6d} " + _describe(r) + note, flush=True)
    return rows, compile_rows


def compilation(rows: list[dict], compile_rows: list[dict]) -> dict:
    """What flex's first calls cost: cold, at each new length, and with a warm cache."""
    flex_rows = [r for r in rows if r["method"] == "flex" and "seconds" in r]
    if not flex_rows:
        return {}
    first = [r for r in flex_rows if r["pattern"] == flex_rows[0]["pattern"]]
    return {
        "pattern": first[0]["pattern"],
        "first_call_cold_seconds": first[0]["first_call_seconds"],
        "first_call_of_a_new_length_seconds": [r["first_call_seconds"] for r in first[1:]],
        "first_call_warm_cache_seconds": [r.get("first_call_seconds") for r in compile_rows],
    }


def main():
    args = parse_args()
    if args.child:
        method, pattern, lengths, rounds = args.child
        print(json.dumps(measure(method, pattern, [int(n) for n in lengths.split(",")], int(rounds))))
        return
    rows, compile_rows = all_rows(args)
    result = {
        "heads": HEADS,
        "dim": DIM,
        "dtype": "float32",
        "patterns": PATTERNS,
        "compilation": compilation(rows, compile_rows),
        "rows": rows,
    }
    write_result(args.out, "flex_attention.json", command("flex_attention", sys.argv[1:]), result)
    print(markdown(result))


def _describe(row: dict) -> str:
    if "seconds" in row:
        text = (
            f"{row['seconds'] * 1e3:9.1f} ms {row['peak_bytes'] / 2**20:8.1f} MiB  "
            f"first call {row['first_call_seconds']:.2f} s"
        )
        return text + (f"  blocks fill {row['blocks']['fill']:.2f}" if "blocks" in row else "")
    return row.get("skipped") or row.get("error", "?")


def markdown(result: dict) -> str:
    """The results as a markdown table: a row per (pattern, L), a column per method; block fill is
    the share of the pairs of the flex blocks that hold edges which are edges."""
    rows = result["rows"]
    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    lines = [
        "| pattern | L | nodes | edges | block fill | " + " | ".join(methods) + " |",
        "|---|---|---|---|---|" + "---|" * len(methods),
    ]
    keys = sorted({(r["pattern"], r["L"]) for r in rows}, key=lambda key: (list(PATTERNS).index(key[0]), key[1]))
    for pattern, L in keys:
        cells = {r["method"]: r for r in rows if (r["pattern"], r["L"]) == (pattern, L)}
        sized = next((r for r in cells.values() if "edges" in r), {})
        fill = cells.get("flex", {}).get("blocks", {}).get("fill")
        line = (
            f"| {PATTERNS[pattern]} | {L} | {sized.get('nodes', '')} | {sized.get('edges', '')} | "
            f"{'' if fill is None else f'{fill:.3f}'} |"
        )
        for m in methods:
            r = cells.get(m, {})
            line += (
                f" {r['seconds'] * 1e3:.0f} ms / {r['peak_bytes'] / 2**20:.0f} MiB |"
                if "seconds" in r
                else " skipped |"
                if "skipped" in r
                else " error |"
            )
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    main()
