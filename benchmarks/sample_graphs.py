"""Per-sample graphs: what deriving, building and batching each sample's own edges costs a step.

ListOps at Long Range Arena's lengths (500-2000 tokens), batches of ``--batch-tokens`` tokens.
For each batch, timed side by side in one process:

* derive: the parse tree of every sample from its tokens (`graphformer.graphs.sample_edges`);
* batch: ``make_batch`` joining those edges to the cached length graphs (none are cached by sample);
* batch, length pattern: ``make_batch`` of the same samples with ``window:1``, whose graphs the
  pool caches by length: what a length pattern costs for comparison;
* typed: ``make_batch`` with ``window:1+parse-tree``, untyped and with each per-sample edge type
  of ``--edge-types`` (`graphformer.graphs.sample_types`: tree roles, hops), which the pool
  computes for every edge as it batches;
* step: one training step (forward, loss, backward, Adam) of the encoder classifier on the
  parse-tree batch (``--layers`` layers, d_model 64), which includes its derive and batch.

and the process's peak resident set, to show that memory does not grow with the batches seen
(the trees are derived per batch, never kept).

    python -m benchmarks.sample_graphs [--batches 20] [--batch-tokens 8192] [--edge-types role hops:4]
        [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import time

import torch

from benchmarks.harness import command, write_result
from graphformer import make_model
from graphformer.cli import at_least_one
from graphformer.data import listops
from graphformer.data.batching import plan_batches
from graphformer.evaluation.loss import label_smoothed_nll
from graphformer.graphs import GraphPool, make_batch
from graphformer.graphs.sample_edges import parse_tree
from graphformer.vocab import Vocab


def timed(fn):
    tic = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - tic


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=at_least_one, default=20)
    parser.add_argument("--batch-tokens", type=at_least_one, default=8192)
    parser.add_argument("--layers", type=at_least_one, default=12)
    parser.add_argument("--edge-types", nargs="*", default=["role", "hops:4"])
    parser.add_argument("--out", default="benchmarks/results")
    return parser.parse_args()


def measure(args) -> list[dict]:
    """One row of seconds per batch: deriving its trees, batching them (and untyped and typed
    window:1+parse-tree, and window:1 alone), and a training step of the tree model."""
    torch.manual_seed(0)
    pairs = listops.generate_listops(40 * args.batches, random.Random(1))
    words = [s.split() for s, _ in pairs]
    vocab = Vocab.build(words + [[t] for _, t in pairs])
    src, tgt = [vocab.encode(w) for w in words], [vocab.encode([t]) for _, t in pairs]
    plan = plan_batches([len(s) for s in src], [1] * len(src), batch_tokens=args.batch_tokens, seed=0)[: args.batches]
    model = make_model(
        len(vocab), model="encoder", layers=args.layers, d_model=64, heads=4, d_ff=128, dropout=0.0,
        positions="none", pooling="last", enc_attention="parse-tree", max_len=2002,
    )  # fmt: skip
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    tree_pool, window_pool = model.make_pool(), GraphPool("window:1", targets=False)
    typed_pools = {
        spec: GraphPool("window:1+parse-tree", targets=False, edge_types=None if spec == "untyped" else {"enc": spec})
        for spec in ["untyped", *args.edge_types]
    }
    rows = []
    for idx in plan:
        batch_src, batch_tgt = [src[i] for i in idx], [tgt[i] for i in idx]
        edges, derive = timed(lambda: [parse_tree(words[i]) for i in idx])  # noqa: B023
        batch, building = timed(lambda: make_batch(tree_pool, batch_src, batch_tgt, edges))  # noqa: B023
        _, window = timed(lambda: make_batch(window_pool, batch_src, batch_tgt))  # noqa: B023
        typed = {
            spec: timed(lambda p=pool: make_batch(p, batch_src, batch_tgt, edges))[1]  # noqa: B023
            for spec, pool in typed_pools.items()
        }

        def step():
            loss = label_smoothed_nll(model(batch), batch.gold, 0.0)  # noqa: B023
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        _, compute = timed(step)
        rows.append(
            {"tokens": sum(map(len, batch_src)), "derive": derive, "batch": building, "window_batch": window}
            | {"step": compute}
            | {f"typed_batch {spec}": seconds for spec, seconds in typed.items()}
        )
    return rows


def main() -> int:
    args = parse_args()
    rows = measure(args)
    median = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "tokens"}
    whole_step = median["derive"] + median["batch"] + median["step"]
    result = {
        "benchmark": "sample_graphs",
        "batches": len(rows),
        "batch_tokens": args.batch_tokens,
        "layers": args.layers,
        "median_seconds": median,
        "derive_and_batch_share_of_step": (median["derive"] + median["batch"]) / whole_step,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rows": rows,
    }
    write_result(args.out, "sample_graphs.json", command("sample_graphs", sys.argv[1:]), result)
    print(
        f"per batch of about {args.batch_tokens} tokens (median of {len(rows)}): derive {1e3 * median['derive']:.1f} ms, "
        f"batch {1e3 * median['batch']:.1f} ms (window:1, cached by length: {1e3 * median['window_batch']:.1f} ms), "
        f"step {1e3 * median['step']:.0f} ms; derive + batch = "
        f"{100 * result['derive_and_batch_share_of_step']:.1f} % of a step; peak RSS {result['peak_rss_mib']:.0f} MiB"
    )
    print(
        "window:1+parse-tree batch: "
        + ", ".join(f"{k.split()[1]} {1e3 * v:.1f} ms" for k, v in median.items() if k.startswith("typed_batch"))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
