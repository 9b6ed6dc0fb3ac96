"""Training throughput: graphformer against a dense peer on torch.nn.Transformer, same work.

Both models get the same hyper-parameters, the same length-bucketed batches, the same Adam + Noam
optimizer and label-smoothed loss; the graph model runs with every attention backend that trains
here. Also measured: graph building + batching per batch, the fixed cost of a step (the same
batches through a model too small to compute anything), sgemm GFLOP/s and model FLOP utilisation.

Two configurations: ``--task copy`` (1 layer, d_model 512, 8 heads, d_ff 2048, batches of 128
sentences) and ``--task multi30k`` (the model and batch size of the CPU recipe,
``examples/multi30k/cpu.yaml``; needs the raw files, from ``--data-dir MIRROR`` or the download cache).
``--precision float32,bfloat16`` times every system in each precision (bfloat16: the forward pass
under autocast, as ``train --precision bfloat16`` runs it); each row's ratio is to the dense peer
in the same precision, and a bfloat16 row's ``ratio_to_float32`` to the same system in float32.

    python -m benchmarks.training_throughput [--task copy] [--steps 20] [--rounds 2] [--precision float32]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.harness import command, interleaved, reported, write_result
from benchmarks.peers import DensePeer, dense_loss
from benchmarks.recipe import MODEL_SIZES, RECIPE_MODEL, RECIPE_TRAIN
from graphformer import make_model
from graphformer.attention import BACKENDS, check_backend_trains, unavailable
from graphformer.cli import at_least_one
from graphformer.data import multi30k, synthetic
from graphformer.data.batching import plan_batches
from graphformer.data.corpus import build_vocabs, read_split
from graphformer.evaluation.loss import label_smoothed_nll
from graphformer.graphs import make_batch
from graphformer.precision import autocast
from graphformer.training.schedule import make_optimizer

CONFIGS = {
    "copy": dict(layers=1, d_model=512, heads=8, d_ff=2048, dropout=0.1),
    "multi30k": dict(MODEL_SIZES, dropout=RECIPE_MODEL["dropout"]),  # the CPU recipe's model
}


def trains_here(backend: str) -> bool:
    """Whether the installed stack has ``backend`` and it trains on the CPU (flex does not)."""
    try:
        check_backend_trains(backend, torch.device("cpu"))
    except ValueError:
        return False
    return not unavailable(backend)


def graph_loss(model, pool, src, tgt, device=None):
    """(summed label-smoothed loss, gold count) of the graph model on one batch."""
    batch = make_batch(pool, src, tgt)
    batch = batch if device is None else batch.to(device)  # graphs on the CPU, tensors to the device
    return label_smoothed_nll(model(batch), batch.gold, 0.1), len(batch.gold)


def sgemm_gflops(n=2048, repeats=5, dtype: torch.dtype = torch.float32) -> float:
    """GFLOP/s of an n x n matrix product in ``dtype`` (the machine's peak for the MFU). Where the
    CPU emulates ``dtype`` (bfloat16 without AVX512-BF16 or AMX: about 1 GFLOP/s), n is halved
    until one product takes under a second, so the figure comes in seconds, not minutes."""
    while n > 256 and _product_seconds(max(n // 8, 64), dtype) * 512 > 1.0:  # (n/8)^3 is n^3 / 512
        n //= 2
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    tic = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - tic) / 1e9


def _product_seconds(n: int, dtype: torch.dtype) -> float:
    a = torch.randn(n, n, dtype=dtype)
    a @ a  # warm-up
    tic = time.perf_counter()
    a @ a
    return time.perf_counter() - tic


def add_batch_options(parser: argparse.ArgumentParser, steps: int) -> None:
    """The options that choose the configuration, its batches and the timing (``--steps``
    defaulting to ``steps``), shared with `benchmarks.edge_cost`; `training_batches` reads them."""
    parser.add_argument("--task", choices=sorted(CONFIGS), default="copy")
    parser.add_argument("--data-dir", help="multi30k: a local mirror of the raw files")
    parser.add_argument("--steps", type=at_least_one, default=steps)
    parser.add_argument("--rounds", type=at_least_one, default=2)
    parser.add_argument("--batch-size", type=at_least_one, default=128, help="copy: sentences per batch")
    parser.add_argument(
        "--batch-tokens",
        type=at_least_one,
        default=RECIPE_TRAIN["batch_tokens"],
        help="multi30k: tokens per batch (default: the CPU recipe's, %(default)s)",
    )
    parser.add_argument("--out", default="benchmarks/results")


TIMED_PRECISIONS = ("float32", "bfloat16")  # what a CPU trains in (float16 is emulated there)


def precisions(text: str) -> str:
    """``--precision``'s comma-separated list, checked and put in `TIMED_PRECISIONS`' order."""
    names = {name.strip() for name in text.split(",")}
    if not names <= set(TIMED_PRECISIONS):
        raise argparse.ArgumentTypeError(f"{text!r}: give float32, bfloat16 or float32,bfloat16")
    return ",".join(name for name in TIMED_PRECISIONS if name in names)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_batch_options(parser, steps=20)
    parser.add_argument(
        "--precision", type=precisions, default="float32", help="float32 (default), bfloat16 or float32,bfloat16"
    )
    return parser.parse_args()


def rerun_argv(args: argparse.Namespace) -> list[str]:
    """The options of `add_batch_options` (and any others) that rerun these figures, for the
    result's command: all but ``--out``, ``--data-dir`` (a path of this machine) and the batch size
    the task does not read."""
    unused = ("out", "data_dir", "batch_tokens" if args.task == "copy" else "batch_size")
    given = {k: v for k, v in vars(args).items() if k not in unused and v is not None}
    return [f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in given.items()]


def training_batches(args) -> tuple[int, list, list, dict]:
    """(vocabulary size, sources per batch, targets per batch, sizing): ``--steps`` batches of the
    task's training split, planned as training plans them (seed 0)."""
    with tempfile.TemporaryDirectory() as scratch:
        if args.task == "copy":
            data = synthetic.write_task("copy", Path(scratch) / "copy", seed=1)
            sizing = {"batch_size": args.batch_size}
        else:
            data = multi30k.prepare(Path(scratch) / "multi30k", mirror=args.data_dir)
            sizing = {"batch_tokens": args.batch_tokens}
        train = read_split(data, "train")
    vocab, _ = build_vocabs(train, min_count=2 if args.task == "multi30k" else 1)
    train.encode(vocab, vocab)
    plan = plan_batches([len(s) for s in train.src], [len(t) for t in train.tgt], seed=0, **sizing)
    batches = [plan[i % len(plan)] for i in range(args.steps)]
    return (
        len(vocab),
        [[train.src[i] for i in b] for b in batches],
        [[train.tgt[i] for i in b] for b in batches],
        sizing,
    )


def train_seconds(step, model_optimizer, steps: int) -> float:
    """Seconds of ``steps`` optimizer steps, ``step(i) -> (summed loss, gold count)`` on batch i,
    after one untimed warm-up step; ``model_optimizer``: what `make_optimizer` returns."""
    optimizer, schedule = model_optimizer
    step(0)[0].backward()  # warm-up
    optimizer.zero_grad()
    tic = time.perf_counter()
    for i in range(steps):
        loss, n = step(i)
        (loss / n).backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
    return time.perf_counter() - tic


def system_seconds(config: dict, vocab: int, batches, steps: int, rounds: int, precisions: list[str]):
    """({(system, precision): [seconds of each round]}, the graph model, its pool): every graph
    backend that trains here (not auto, which picks one of them) and the dense peer, in each of
    ``precisions``, in turn each round."""
    src_b, tgt_b = batches
    graph, dense = make_model(vocab, **config), DensePeer(vocab, **config)
    backends = [name for name in BACKENDS if name != "auto" and trains_here(name)]
    models = {**{f"graph ({name})": graph for name in backends}, "dense nn.Transformer": dense}
    systems = [(name, precision) for precision in precisions for name in models]
    optimizers = {key: make_optimizer(models[key[0]].parameters(), config["d_model"], 400, 1.0) for key in systems}
    pool = graph.make_pool()

    def loss(name, i):
        if name.startswith("dense"):
            return dense_loss(dense, src_b[i], tgt_b[i], vocab)
        graph.attention_backend = name[len("graph (") : -1]
        return graph_loss(graph, pool, src_b[i], tgt_b[i])

    def run(name, precision):
        def step(i):
            with autocast(precision, "cpu"):  # the forward pass, as training runs it
                return loss(name, i)

        return train_seconds(step, optimizers[name, precision], steps)

    runs = {key: (lambda key=key: run(*key)) for key in systems}
    return interleaved(runs, rounds, measure=reported), graph, pool  # each run times its steps only


def fixed_step_seconds(layers: int, pool, batches, steps: int) -> float:
    """Fixed cost of a step (Python, dispatch, batching, graph bookkeeping): the same batches
    through a model too small to compute anything (d_model 8, 16 token ids), padded backend, with
    the graph model's ``pool`` (its graphs of these batches cached)."""
    micro = make_model(16, layers=layers, d_model=8, heads=1, d_ff=8, dropout=0.1, attention_backend="padded")
    src_b, tgt_b = ([[[4 + t % 12 for t in s] for s in b] for b in side] for side in batches)
    step = lambda i: graph_loss(micro, pool, src_b[i], tgt_b[i])  # noqa: E731
    return train_seconds(step, make_optimizer(micro.parameters(), 8, 400, 1.0), steps) / steps


def model_flops(graph, config: dict, batches) -> float:
    """Training FLOPs of the batches: 6 x matmul parameters per token (each token passes half the
    matmuls: the encoder's or the decoder's) plus attention, 2 matmuls (scores, weighted sum) x 3
    (forward and backward) per edge and model dimension."""
    src_b, tgt_b = batches
    matmul_params = sum(p.numel() for n, p in graph.named_parameters() if p.dim() == 2 and "embed" not in n)
    tokens = sum(len(s) + 1 for b in src_b for s in b) + sum(len(t) + 1 for b in tgt_b for t in b)
    attention = 0
    for b_src, b_tgt in zip(src_b, tgt_b):
        for s, t in zip(b_src, b_tgt):
            n, m = len(s) + 1, len(t) + 1
            attention += 2 * 2 * 3 * config["d_model"] * (n * n + m * (m + 1) // 2 + n * m) * config["layers"]
    return 6 * matmul_params * tokens / 2 + attention


def throughput_rows(seconds: dict, tokens: int, flops: float, peaks: dict) -> list[dict]:
    """A row per (system, precision): target tokens/s, MFU against ``peaks[precision]`` (GFLOP/s
    of a matrix product in that dtype), the ratio to the dense peer in the same precision and, for
    a bfloat16 row, to the same system in float32."""
    rows = []
    for (system, precision), t in seconds.items():
        rate = tokens / min(t)
        mfu = flops / min(t) / (peaks[precision] * 1e9)
        rows.append({"system": system, "precision": precision, "tokens_per_s": rate, "seconds": min(t), "mfu": mfu})
    rate = {(r["system"], r["precision"]): r["tokens_per_s"] for r in rows}
    for r in rows:
        r["ratio_to_dense"] = r["tokens_per_s"] / rate["dense nn.Transformer", r["precision"]]
        if r["precision"] != "float32" and (r["system"], "float32") in rate:
            r["ratio_to_float32"] = r["tokens_per_s"] / rate[r["system"], "float32"]
    return rows


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        against = f"  x{r['ratio_to_float32']:.2f} of float32" if "ratio_to_float32" in r else ""
        print(
            f"{r['system']:22s} {r['precision']:9s} {r['tokens_per_s']:9.0f} target tokens/s  "
            f"x{r['ratio_to_dense']:.2f} of dense  MFU {100 * r['mfu']:.1f} %{against}"
        )


def main():
    args = parse_args()
    torch.manual_seed(0)
    config, precisions = CONFIGS[args.task], args.precision.split(",")
    vocab, src_b, tgt_b, sizing = training_batches(args)
    seconds, graph, pool = system_seconds(config, vocab, (src_b, tgt_b), args.steps, args.rounds, precisions)
    tic = time.perf_counter()
    for i in range(args.steps):
        make_batch(pool, src_b[i], tgt_b[i])
    batching = (time.perf_counter() - tic) / args.steps
    fixed = fixed_step_seconds(config["layers"], pool, (src_b, tgt_b), args.steps)
    peaks = {precision: sgemm_gflops(dtype=getattr(torch, precision)) for precision in precisions}
    flops = model_flops(graph, config, (src_b, tgt_b))
    tokens = sum(len(t) + 1 for b in tgt_b for t in b)
    rows = throughput_rows(seconds, tokens, flops, peaks)
    print_rows(rows)
    step_time = min(seconds["graph (padded)", precisions[0]]) / args.steps
    print(
        f"matrix product peak {', '.join(f'{p} {g:.1f}' for p, g in peaks.items())} GFLOP/s; graph building + "
        f"batching {1e3 * batching:.1f} ms per batch = {100 * batching / step_time:.1f} % of a graph (padded) "
        f"training step; fixed cost per step {1e3 * fixed:.1f} ms = {100 * fixed / step_time:.1f} %"
    )
    result = {
        "config": {**config, **sizing, "task": args.task},
        "steps": args.steps,
        "rounds": args.rounds,
        "target_tokens": tokens,
        "rows": rows,
        "sgemm_gflops": peaks.get("float32"),
        "matmul_gflops": peaks,
        "batching_seconds_per_batch": batching,
        "batching_share_of_step": batching / step_time,
        "fixed_seconds_per_step": fixed,
        "fixed_share_of_step": fixed / step_time,
    }
    name = "training_throughput.json" if args.task == "copy" else f"training_throughput_{args.task}.json"
    write_result(args.out, name, command("training_throughput", rerun_argv(args)), result)


if __name__ == "__main__":
    main()
