"""Sparse graph attention against dense masked attention: forward+backward time and peak memory.

The attention operator alone (no projections), 8 heads of 64 dims, one sequence of length L
attending to itself. ``window:W`` lets query j see keys j-W..j+W. Dense baselines get the same
window as a boolean mask: an explicit softmax, and torch's scaled_dot_product_attention.

Each (method, L) runs in a fresh process so its peak resident memory can be read cleanly
(peak RSS during the timed work minus RSS before it).

    python -m benchmarks.sparse_attention [--lengths 256 1024 4096 8192] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import ROOT, command, write_result
from graphformer.rss import peak_rss_bytes, reset_peak_rss, rss_bytes

# The edge-wise kernels: DGL's where it is installed, else the same message passing as PyTorch ops.
EDGEWISE = "dgl" if importlib.util.find_spec("dgl") else "torch"
METHODS = [
    f"{EDGEWISE} window:64",
    f"{EDGEWISE} window:128",
    "blocked window:64",
    "blocked window:128",
    "dense softmax (window:128 mask)",
    "sdpa (window:128 mask)",
]
HEADS, DIM = 8, 64
PUBLISHED = ROOT / "benchmarks" / "results"


def forward_backward(method: str, q, k, v):
    """(a call of ``method``'s forward and backward pass over q, k, v of L tokens, edges per head).
    The window's edge lists are dropped on return: only what the method holds counts."""
    import torch

    from graphformer.attention import BACKENDS
    from graphformer.graphs import patterns
    from graphformer.graphs.relation import Relation

    L = len(q)
    w = int(method.split("window:")[1].split()[0].rstrip(")"))
    u, dst = patterns.window(w)(L, L)
    if method.startswith(("dgl", "torch", "blocked")):
        graph, attend = Relation(u, dst, L, L), BACKENDS[method.split()[0]]
        return (lambda: attend(graph, q, k, v).sum().backward()), len(u)
    blocked = torch.ones(L, L, dtype=torch.bool)
    blocked[dst, u] = False
    allowed = ~blocked
    qh, kh, vh = (t.transpose(0, 1) for t in (q, k, v))  # (H, L, d) views
    if method.startswith("dense"):

        def run():
            scores = (qh @ kh.transpose(1, 2)) / DIM**0.5
            scores = scores.masked_fill(blocked, float("-inf"))
            (torch.softmax(scores, -1) @ vh).sum().backward()

        return run, len(u)
    return (
        lambda: torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, attn_mask=allowed).sum().backward()
    ), len(u)


def measure(method: str, L: int, repeats: int) -> dict:
    """Runs inside the child process: peak memory of one call after a warm-up, then the median
    of ``repeats`` timed calls."""
    os.environ.setdefault("DGLBACKEND", "pytorch")
    import gc

    import torch

    torch.manual_seed(0)
    q, k, v = (torch.randn(L, HEADS, DIM, requires_grad=True) for _ in range(3))
    run, edges = forward_backward(method, q, k, v)
    run()  # warm-up (graph formats, block layouts, allocator)
    for t in (q, k, v):
        t.grad = None
    gc.collect()
    before = rss_bytes()
    reset_peak_rss()
    run()
    peak = peak_rss_bytes() - before
    times = []
    for _ in range(repeats):
        for t in (q, k, v):
            t.grad = None
        tic = time.perf_counter()
        run()
        times.append(time.perf_counter() - tic)
    return {
        "method": method,
        "L": L,
        "edges_per_head": edges,
        "seconds": statistics.median(times),
        "peak_bytes": max(peak, 0),
        "repeats": repeats,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096, 8192])
    parser.add_argument(
        "--out",
        default=str(PUBLISHED),
        help="where the JSON and figure go; the docs' copy of the "
        "figure is rewritten only for the published results (this default)",
    )
    parser.add_argument("--child", nargs=3, metavar=("METHOD", "L", "REPEATS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], int(args.child[1]), int(args.child[2]))))
        return

    if min(args.lengths) < 2:
        parser.error(f"--lengths must be at least 2, got {min(args.lengths)}")
    rows = []
    for L in args.lengths:
        for method in METHODS:
            repeats = 3 if L >= 4096 else 5
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.sparse_attention", "--child", method, str(L), str(repeats)],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            if proc.returncode != 0:
                rows.append({"method": method, "L": L, "error": proc.stderr.strip().splitlines()[-1]})
            else:
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(
                f"L={L:5d} {method:34s} "
                + (
                    f"{r['seconds'] * 1e3:9.1f} ms {r['peak_bytes'] / 2**20:9.1f} MiB"
                    if "error" not in r
                    else r["error"]
                ),
                flush=True,
            )
    out = Path(args.out)
    result = {"heads": HEADS, "dim": DIM, "rows": rows}
    write_result(out, "sparse_attention.json", command("sparse_attention", sys.argv[1:]), result)
    plot(rows, out / "sparse_attention.png")
    if out.resolve() == PUBLISHED:  # the published results: the docs show their figure
        plot(rows, ROOT / "docs" / "figures" / "sparse_attention.png")
    print(f"wrote {out / 'sparse_attention.png'}")


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for method in METHODS:
        pts = [r for r in rows if r["method"] == method and "error" not in r]
        axes[0].plot([r["L"] for r in pts], [r["seconds"] * 1e3 for r in pts], "o-", label=method)
        axes[1].plot([r["L"] for r in pts], [r["peak_bytes"] / 2**20 for r in pts], "o-", label=method)
    for ax, label in zip(axes, ("forward + backward (ms)", "peak memory (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length L")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Attention operator forward+backward, 8 heads x 64 dims")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
