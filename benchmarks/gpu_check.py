"""GPU check: training and decoding throughput on CUDA, per attention backend, against torch.nn.Transformer.

Written for a CUDA machine with the README's plain pip install (PyPI's DGL is CPU-only: DGL
builds and batches the graphs on the CPU, the relations' index tensors and every layer run on the
GPU). ``make gpu-check`` runs the ``gpu``-marked tests, then this script, which writes
``benchmarks/results/gpu.json``:

* training: the copy configuration of ``training_throughput.py`` (1 layer, d_model 512, 8 heads,
  d_ff 2048, batches of 128 sentences), the same batches for every graph backend and for the dense
  peer on ``torch.nn.Transformer``; target tokens/s and peak GPU memory per system;
* decoding: the ``decoding.py`` model (2 layers, d_model 128) decoding 20-token sources to exactly
  50 tokens, greedy and beam 5, incremental graph decoding per backend against the dense KV cache;
  all must produce the same tokens.

    python benchmarks/gpu_check.py [--steps 30] [--sentences 64] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from decoding import (FIXED_OUTPUT_TOKENS, dense_decode, fixed_model_and_sources,  # noqa: E402
                      fixed_translate)
from training_throughput import CONFIGS, DensePeer, pad  # noqa: E402

from graphformer import make_model  # noqa: E402
from graphformer.attention import BACKENDS, dgl_ops  # noqa: E402
from graphformer.data import synthetic  # noqa: E402
from graphformer.data.batching import plan_batches  # noqa: E402
from graphformer.data.corpus import build_vocabs, read_split  # noqa: E402
from graphformer.graphs import make_batch  # noqa: E402
from graphformer.model.dense import to_torch_transformer  # noqa: E402
from graphformer.training.loss import label_smoothed_nll  # noqa: E402
from graphformer.training.schedule import make_optimizer  # noqa: E402
from graphformer.vocab import EOS, PAD, SOS  # noqa: E402

DEVICE = torch.device("cuda")


def backends() -> list[str]:
    """Every backend that can run here: dgl only with a CUDA build of DGL."""
    return [name for name in BACKENDS if name != "dgl" or dgl_ops.runs_on(DEVICE)]


def timed(fn, repeats: int = 1) -> tuple[float, int]:
    """(seconds of ``repeats`` calls after one warm-up, peak bytes allocated during them)."""
    fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    tic = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return time.perf_counter() - tic, torch.cuda.max_memory_allocated()


def training(steps: int) -> list[dict]:
    config = CONFIGS["copy"]
    data = synthetic.write_task("copy", Path(tempfile.mkdtemp()) / "copy", seed=1)
    train = read_split(data, "train")
    vocab, _ = build_vocabs(train, min_count=1)
    train.encode(vocab, vocab)
    plan = plan_batches([len(s) for s in train.src], [len(t) for t in train.tgt], seed=0, batch_size=128)
    src_b = [[train.src[i] for i in plan[b % len(plan)]] for b in range(steps)]
    tgt_b = [[train.tgt[i] for i in plan[b % len(plan)]] for b in range(steps)]
    tokens = sum(len(t) + 1 for b in tgt_b for t in b)
    torch.manual_seed(0)
    graph = make_model(len(vocab), **config).to(DEVICE)
    dense = DensePeer(len(vocab), **config).to(DEVICE)
    pool = graph.make_pool()

    def graph_epoch(optimizer):
        for src, tgt in zip(src_b, tgt_b):
            batch = make_batch(pool, src, tgt).to(DEVICE)  # graphs on the CPU, tensors to the GPU
            (label_smoothed_nll(graph(batch), batch.gold, 0.1) / len(batch.gold)).backward()
            optimizer.step()
            optimizer.zero_grad()

    def dense_epoch(optimizer):
        for src, tgt in zip(src_b, tgt_b):
            s = pad([x + [EOS] for x in src]).to(DEVICE)
            tgt_in, gold = pad([[SOS] + y for y in tgt]).to(DEVICE), pad([y + [EOS] for y in tgt]).to(DEVICE)
            gold = gold.reshape(-1)
            loss = label_smoothed_nll(dense(s, tgt_in).reshape(-1, len(vocab)), gold, 0.1)
            (loss / (gold != PAD).sum()).backward()
            optimizer.step()
            optimizer.zero_grad()

    rows = []
    for name in backends() + ["dense nn.Transformer"]:
        model = dense if name.startswith("dense") else graph
        optimizer, _ = make_optimizer(model.parameters(), config["d_model"], 400, 1.0)
        if model is graph:
            graph.attention_backend = name
        seconds, peak = timed(lambda: (dense_epoch if model is dense else graph_epoch)(optimizer))
        rows.append({"system": name if model is dense else f"graph ({name})", "tokens_per_s": tokens / seconds,
                     "seconds": seconds, "peak_memory_mib": peak / 2**20})
    for r in rows:
        r["ratio_to_dense"] = r["tokens_per_s"] / rows[-1]["tokens_per_s"]
        print(f"train  {r['system']:22s} {r['tokens_per_s']:10.0f} tokens/s  x{r['ratio_to_dense']:.2f} of dense  "
              f"peak {r['peak_memory_mib']:.0f} MiB")
    return rows


def decoding(sentences: int) -> list[dict]:
    model, src = fixed_model_and_sources(sentences, DEVICE)
    dense = to_torch_transformer(model).eval()
    rows = []
    for beam in (1, 5):
        methods = {f"graph incremental ({name})": name for name in backends()}
        reference = None
        for method, backend in [*methods.items(), ("dense KV cache", None)]:
            def run():
                if backend is None:
                    with torch.no_grad():
                        return dense_decode(model, dense, src, beam, FIXED_OUTPUT_TOKENS)
                model.attention_backend = backend
                return fixed_translate(model, src, beam)
            hyps = run()
            reference = reference or [h.tokens for h in hyps]
            assert [h.tokens for h in hyps] == reference, f"{method} decoded different tokens"
            seconds, peak = timed(run)
            rows.append({"beam": beam, "method": method, "tokens_per_s": sentences * FIXED_OUTPUT_TOKENS / seconds,
                         "seconds": seconds, "peak_memory_mib": peak / 2**20})
        dense_rate = rows[-1]["tokens_per_s"]
        for r in rows[-len(methods) - 1:]:
            r["ratio_to_dense"] = r["tokens_per_s"] / dense_rate
            print(f"decode beam {beam} {r['method']:28s} {r['tokens_per_s']:9.0f} tokens/s  "
                  f"x{r['ratio_to_dense']:.2f} of dense  peak {r['peak_memory_mib']:.0f} MiB")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device is visible; run it on a machine with a GPU")
    result = {"command": f"python benchmarks/gpu_check.py --steps {args.steps} --sentences {args.sentences}",
              "device": torch.cuda.get_device_name(DEVICE), "dgl_runs_on_cuda": dgl_ops.runs_on(DEVICE),
              "training": training(args.steps), "decoding": decoding(args.sentences),
              "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()}}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'gpu.json'}")


if __name__ == "__main__":
    main()
