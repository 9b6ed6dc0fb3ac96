"""Training throughput: graphformer against a dense peer on torch.nn.Transformer, same work.

Both models get the same hyper-parameters, the same length-bucketed batches of the copy task,
the same Adam + Noam optimizer and label-smoothed loss. Runs alternate in one process (graph
with each attention backend, dense, and again), so the ratios share the machine's conditions. Also
measured: graph building + batching as a share of a step, sgemm GFLOP/s and model FLOP
utilisation (6 x matmul parameters x tokens + attention, over time, over measured peak).

Two configurations: ``--task copy`` (1 layer, d_model 512, 8 heads, d_ff 2048, batches of 128
sentences) and ``--task multi30k`` (the model and batch size of the CPU recipe,
``examples/multi30k/cpu.yaml``; needs the raw files, from ``--data-dir MIRROR`` or the download cache).

    python benchmarks/training_throughput.py [--task copy] [--steps 20] [--rounds 2] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from provenance import machine, versions
from torch import nn

from graphformer import make_model
from graphformer.attention import BACKENDS, check_backend_trains, unavailable
from graphformer.cli import at_least_one
from graphformer.data import multi30k, synthetic
from graphformer.data.batching import plan_batches
from graphformer.data.corpus import build_vocabs, read_split
from graphformer.evaluation.loss import label_smoothed_nll
from graphformer.graphs import make_batch
from graphformer.training.schedule import make_optimizer
from graphformer.vocab import EOS, PAD, SOS

sys.path.insert(0, str(Path(__file__).parent))
from recipe import MODEL_SIZES, RECIPE_MODEL, RECIPE_TRAIN  # noqa: E402

CONFIGS = {
    "copy": dict(layers=1, d_model=512, heads=8, d_ff=2048, dropout=0.1),
    "multi30k": dict(MODEL_SIZES, dropout=RECIPE_MODEL["dropout"]),  # the CPU recipe's model
}


class DensePeer(nn.Module):
    """The same Transformer on padded tensors with masks, built on torch.nn.Transformer."""

    def __init__(self, vocab: int, layers: int, d_model: int, heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model)
        self.register_buffer("pos", make_model(vocab, d_model=d_model, heads=heads).src_embed.positions.table)
        self.core = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout, batch_first=True, norm_first=True)
        self.out = nn.Linear(d_model, vocab)

    def forward(self, src, tgt_in):
        def emb(x):
            return self.embed(x) * self.d_model**0.5 + self.pos[: x.shape[1]]

        causal = torch.ones(tgt_in.shape[1], tgt_in.shape[1], dtype=torch.bool, device=tgt_in.device).triu(1)
        h = self.core(
            emb(src),
            emb(tgt_in),
            tgt_mask=causal,
            src_key_padding_mask=src == PAD,
            tgt_key_padding_mask=tgt_in == PAD,
            memory_key_padding_mask=src == PAD,
        )
        return torch.log_softmax(self.out(h), -1)


def trains_here(backend: str) -> bool:
    """Whether the installed stack has ``backend`` and it trains on the CPU (flex does not)."""
    try:
        check_backend_trains(backend, torch.device("cpu"))
    except ValueError:
        return False
    return not unavailable(backend)


def pad(seqs, device=None):
    width = max(len(s) for s in seqs)
    return torch.tensor([s + [PAD] * (width - len(s)) for s in seqs], device=device)


def graph_loss(model, pool, src, tgt, device=None):
    """(summed label-smoothed loss, gold count) of the graph model on one batch."""
    batch = make_batch(pool, src, tgt)
    batch = batch if device is None else batch.to(device)  # graphs on the CPU, tensors to the device
    return label_smoothed_nll(model(batch), batch.gold, 0.1), len(batch.gold)


def dense_loss(dense, src, tgt, vocab: int, device=None):
    """(summed label-smoothed loss, gold count) of the dense peer on the same batch, padded."""
    s = pad([x + [EOS] for x in src], device)
    tgt_in, gold = pad([[SOS] + y for y in tgt], device), pad([y + [EOS] for y in tgt], device).reshape(-1)
    logp = dense(s, tgt_in).reshape(-1, vocab)
    return label_smoothed_nll(logp, gold, 0.1), sum(len(y) + 1 for y in tgt)  # counted on the host


def sgemm_gflops(n=2048, repeats=5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    tic = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - tic) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(CONFIGS), default="copy")
    parser.add_argument("--data-dir", help="multi30k: a local mirror of the raw files")
    parser.add_argument("--steps", type=at_least_one, default=20)
    parser.add_argument("--rounds", type=at_least_one, default=2)
    parser.add_argument("--batch-size", type=at_least_one, default=128, help="copy: sentences per batch")
    parser.add_argument(
        "--batch-tokens",
        type=at_least_one,
        default=RECIPE_TRAIN["batch_tokens"],
        help="multi30k: tokens per batch (default: the CPU recipe's, %(default)s)",
    )
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    torch.manual_seed(0)
    CONFIG = CONFIGS[args.task]
    scratch_dir = tempfile.TemporaryDirectory()  # removed when the script ends, however it ends
    scratch = Path(scratch_dir.name)
    if args.task == "copy":
        data = synthetic.write_task("copy", scratch / "copy", seed=1)
        sizing = {"batch_size": args.batch_size}
    else:
        data = multi30k.prepare(scratch / "multi30k", mirror=args.data_dir)
        sizing = {"batch_tokens": args.batch_tokens}
    train = read_split(data, "train")
    vocab, _ = build_vocabs(train, min_count=2 if args.task == "multi30k" else 1)
    train.encode(vocab, vocab)
    plan = plan_batches([len(s) for s in train.src], [len(t) for t in train.tgt], seed=0, **sizing)
    batches = [plan[i % len(plan)] for i in range(args.steps)]

    graph = make_model(len(vocab), **CONFIG)
    dense = DensePeer(len(vocab), **CONFIG)
    # Every backend but auto (which picks one of them), then the dense peer.
    systems = {
        **{f"graph ({name})": graph for name in BACKENDS if name != "auto" and trains_here(name)},
        "dense nn.Transformer": dense,
    }
    optimizers = {name: make_optimizer(m.parameters(), CONFIG["d_model"], 400, 1.0) for name, m in systems.items()}
    pool = graph.make_pool()
    src_b = [[train.src[i] for i in b] for b in batches]
    tgt_b = [[train.tgt[i] for i in b] for b in batches]
    tokens = sum(len(t) + 1 for b in tgt_b for t in b)

    def graph_step(i, model=graph, src=src_b, tgt=tgt_b):
        return graph_loss(model, pool, src[i], tgt[i])

    def dense_step(i):
        return dense_loss(dense, src_b[i], tgt_b[i], len(vocab))

    def run(name):
        graph.attention_backend = name[len("graph (") : -1] if name.startswith("graph") else "auto"
        step = dense_step if name.startswith("dense") else graph_step
        optimizer, schedule = optimizers[name]
        step(0)[0].backward()  # warm-up
        optimizer.zero_grad()
        tic = time.perf_counter()
        for i in range(args.steps):
            loss, n = step(i)
            (loss / n).backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
        return time.perf_counter() - tic

    seconds = {name: [] for name in systems}
    for _ in range(args.rounds):
        for name in systems:
            seconds[name].append(run(name))
    tic = time.perf_counter()
    for i in range(args.steps):
        make_batch(pool, src_b[i], tgt_b[i])
    batching = (time.perf_counter() - tic) / args.steps
    # Fixed cost of a step (Python, dispatch, batching, graph bookkeeping): the same batches through
    # a model too small to compute anything (d_model 8, 16 token ids), padded backend.
    micro = make_model(16, layers=CONFIG["layers"], d_model=8, heads=1, d_ff=8, dropout=0.1, attention_backend="padded")
    micro_opt, micro_schedule = make_optimizer(micro.parameters(), 8, 400, 1.0)
    few = [[[4 + t % 12 for t in s] for s in b] for b in src_b], [[[4 + t % 12 for t in s] for s in b] for b in tgt_b]
    graph_step(0, micro, *few)[0].backward()
    tic = time.perf_counter()
    for i in range(args.steps):
        loss, n = graph_step(i, micro, *few)
        (loss / n).backward()
        micro_opt.step()
        micro_schedule.step()
        micro_opt.zero_grad()
    fixed = (time.perf_counter() - tic) / args.steps

    peak = sgemm_gflops()
    matmul_params = sum(p.numel() for n, p in graph.named_parameters() if p.dim() == 2 and "embed" not in n)
    src_tokens = sum(len(s) + 1 for b in src_b for s in b)
    attention = 0  # 2 matmuls (scores, weighted sum) x 3 (forward + backward) per edge and model dim
    for b_src, b_tgt in zip(src_b, tgt_b):
        for s, t in zip(b_src, b_tgt):
            n, m = len(s) + 1, len(t) + 1
            attention += 2 * 2 * 3 * CONFIG["d_model"] * (n * n + m * (m + 1) // 2 + n * m) * CONFIG["layers"]
    flops = 6 * matmul_params * (src_tokens + tokens) / 2 + attention  # each token passes half the matmuls
    rows = []
    for name, times in seconds.items():
        best = min(times)
        rows.append(
            {"system": name, "tokens_per_s": tokens / best, "seconds": best, "mfu": flops / best / (peak * 1e9)}
        )
    dense_rate = rows[-1]["tokens_per_s"]
    for r in rows:
        r["ratio_to_dense"] = r["tokens_per_s"] / dense_rate
        print(
            f"{r['system']:22s} {r['tokens_per_s']:9.0f} target tokens/s  x{r['ratio_to_dense']:.2f} of dense  "
            f"MFU {100 * r['mfu']:.1f} %"
        )
    step_time = min(seconds["graph (padded)"]) / args.steps
    print(
        f"sgemm peak {peak:.1f} GFLOP/s; graph building + batching {1e3 * batching:.1f} ms per batch = "
        f"{100 * batching / step_time:.1f} % of a graph (padded) training step; fixed cost per step "
        f"{1e3 * fixed:.1f} ms = {100 * fixed / step_time:.1f} %"
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    unused = ("out", "data_dir", "batch_tokens" if args.task == "copy" else "batch_size")
    shown = {k: v for k, v in vars(args).items() if k not in unused and v is not None}
    result = {
        "command": "python benchmarks/training_throughput.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in shown.items()),
        "config": {**CONFIG, **sizing, "task": args.task},
        "steps": args.steps,
        "rounds": args.rounds,
        "target_tokens": tokens,
        "rows": rows,
        "sgemm_gflops": peak,
        "batching_seconds_per_batch": batching,
        "batching_share_of_step": batching / step_time,
        "fixed_seconds_per_step": fixed,
        "fixed_share_of_step": fixed / step_time,
        "machine": machine(),
        "versions": versions(),
    }
    name = "training_throughput.json" if args.task == "copy" else f"training_throughput_{args.task}.json"
    (out / name).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
