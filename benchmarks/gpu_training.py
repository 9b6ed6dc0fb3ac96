"""The GPU check's training stage: target tokens/s of every graph backend against the dense
`benchmarks.peers.DensePeer` on the same batches, in float32, TF32 and bfloat16 (autocast), at the
copy configuration of ``training_throughput`` and the Multi30k GPU recipe's model and batch size
(``examples/multi30k/gpu.yaml``) on random sentences of Multi30k's lengths (speed does not depend
on which words they are). The CPU rehearsal shrinks both to a size a CPU runs in seconds.
"""

from __future__ import annotations

import random
from pathlib import Path

from benchmarks.gpu_stages import Rows, timed
from benchmarks.harness import ROOT, write_json


# Training: (model options, batches) per configuration; the CPU rehearsal shrinks both.
def training_configs(device) -> dict:
    from graphformer.cli import read_config_file

    gpu_model, gpu_train = read_config_file(str(ROOT / "examples" / "multi30k" / "gpu.yaml"))
    sizes = ("layers", "d_model", "heads", "d_ff", "dropout")
    configs = {
        "copy": ({"layers": 1, "d_model": 512, "heads": 8, "d_ff": 2048, "dropout": 0.1}, {"sentences": 128}),
        "multi30k gpu recipe": ({k: gpu_model[k] for k in sizes}, {"tokens": gpu_train["batch_tokens"]}),
    }
    if device.type == "cpu":  # the rehearsal: the code paths, at a size a CPU runs in seconds
        tiny = {"layers": 1, "d_model": 32, "heads": 4, "d_ff": 64, "dropout": 0.1}
        configs = {"copy": (tiny, {"sentences": 8}), "multi30k gpu recipe": (tiny, {"tokens": 200})}
    return configs


def random_batches(steps: int, vocab: int, sizing: dict, seed: int = 0):
    """``steps`` batches of (sources, targets): copy-task pairs, or Multi30k-like lengths
    (sources 8-20 tokens, targets 8-22) filling ``tokens`` target tokens."""
    rng = random.Random(seed)
    batches = []
    for _ in range(steps):
        src, tgt = [], []
        while (len(src) < sizing["sentences"]) if "sentences" in sizing else (sum(map(len, tgt)) < sizing["tokens"]):
            n = rng.randint(8, 20)
            s = [rng.randrange(4, vocab) for _ in range(n)]
            src.append(s)
            tgt.append(s if "sentences" in sizing else [rng.randrange(4, vocab) for _ in range(rng.randint(8, 22))])
        batches.append((src, tgt))
    return batches


PRECISIONS = {"float32": ("highest", "float32"), "tf32": ("high", "float32"), "bfloat16": ("highest", "bfloat16")}


def training_stage(device, rows: Rows, out: Path):
    """Every configuration's rows: each precision, each backend that trains here and the peer."""
    import torch

    from benchmarks.peers import DensePeer
    from graphformer import make_model

    steps = 10 if device.type == "cuda" else 2
    vocab = 8000 if device.type == "cuda" else 40
    for config, (model_opts, sizing) in training_configs(device).items():
        batches = random_batches(steps, vocab, sizing)
        tokens = sum(len(t) + 1 for _, tgt in batches for t in tgt)
        setting = {"config": config, "steps": steps, "target_tokens": tokens, **model_opts, **sizing}
        torch.manual_seed(0)
        graph = make_model(vocab, **model_opts).to(device)
        dense = DensePeer(vocab, **model_opts).to(device)
        for precision in PRECISIONS:
            precision_rows(rows, setting, precision, (graph, dense, graph.make_pool()), batches, device)
        del graph, dense
        if device.type == "cuda":
            torch.cuda.empty_cache()
    torch.set_float32_matmul_precision("highest")


def precision_rows(rows: Rows, setting: dict, precision: str, models, batches, device):
    """One precision's rows (``setting``: the configuration's facts), then each one's speed
    against the dense peer's."""
    import torch

    from graphformer.attention import BACKENDS

    matmul, dtype = PRECISIONS[precision]
    torch.set_float32_matmul_precision(matmul)
    graph, dense, pool = models
    dense_rate = None
    for system in [*(b for b in BACKENDS if b != "auto"), "dense nn.Transformer"]:
        row = {"config": setting["config"], "precision": precision, "system": system, **setting}
        reason = None if system.startswith("dense") else cannot_train(system, device)
        if reason:
            rows.add({**row, "skipped": reason})
            continue
        model = dense if system.startswith("dense") else graph
        graph.attention_backend = "auto" if model is dense else system
        epoch = training_epoch(model, (dense, pool), batches, dtype, device)

        def measure(epoch=epoch):
            seconds, peak = timed(epoch, device)
            return {
                "tokens_per_s": setting["target_tokens"] / seconds,
                "seconds": seconds,
                "peak_memory_mib": peak / 2**20,
            }

        rows.attempt(row, measure)
        if model is dense and "tokens_per_s" in row:
            dense_rate = row["tokens_per_s"]
    for r in rows.data["rows"]:
        if (r["config"], r["precision"]) == (setting["config"], precision) and dense_rate and "tokens_per_s" in r:
            r["ratio_to_dense"] = r["tokens_per_s"] / dense_rate
    write_json(rows.path, rows.data)


def cannot_train(backend: str, device) -> str | None:
    """Why ``backend`` cannot train on ``device`` here, or None."""
    from graphformer.attention import check_backend_trains, unavailable
    from graphformer.errors import UserError

    reason = unavailable(backend)
    if reason is None:
        try:
            check_backend_trains(backend, device)
        except UserError as err:
            reason = str(err)
    return reason


def training_epoch(model, peer_and_pool, batches, dtype: str, device):
    """A call that trains ``model`` (the graph model, or the dense peer of ``peer_and_pool``; the
    pool is the graph model's) one step per batch, under autocast to ``dtype``, with a fresh Adam."""
    import torch

    from benchmarks.peers import dense_loss
    from benchmarks.training_throughput import graph_loss
    from graphformer.precision import autocast

    dense, pool = peer_and_pool
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    vocab = dense.out.out_features  # the peer's generator: one logit per target word

    def epoch():
        for src, tgt in batches:
            with autocast(dtype, device):
                loss, n = (
                    dense_loss(model, src, tgt, vocab, device)
                    if model is dense
                    else graph_loss(model, pool, src, tgt, device)
                )
            (loss / n).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return epoch
