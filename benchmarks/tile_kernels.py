"""Which kernel the padded backend gives unmasked tiles on a CPU: fused attention or batched matmuls.

`graphformer.attention.padded._fused_pays` takes PyTorch's fused ``scaled_dot_product_attention``
for one query per tile and for tiles of at least ``FUSED_MIN_SCORES`` scores per head, and two
batched matmuls in between. This script times both kernels, each forced, where the choice matters,
methods interleaved (best of ``--rounds``):

* training: one forward and backward pass of the copy configuration (2 layers, d_model 128,
  4 heads) on a batch of about 4,096 tokens per side, every sample of one length L, so that the
  encoder's and the cross-attention's relations are L x L tiles (`uniform_tiles`);
* beam search: incremental decoding of the fixed-length benchmark's 32 sentences (20 tokens, 50
  output tokens) with beam 5 and 10: tiles of 5 or 10 queries (`benchmarks/decoding.py`).

    python benchmarks/tile_kernels.py [--rounds 10] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path
from unittest import mock

import torch

from graphformer import make_model
from graphformer.attention import padded
from graphformer.decoding import IncrementalStepper, beam_search
from graphformer.graphs import make_batch

# Tiles of several queries get the kernel named; one query per tile keeps fused attention in both.
KERNELS = {"fused": lambda tiles, device: True, "matmuls": lambda tiles, device: tiles.queries == 1}


def interleaved(runs: dict, rounds: int) -> dict:
    """Best seconds of each run, the runs alternating in order round by round."""
    seconds = {name: [] for name in runs}
    for r in range(rounds):
        for name in (list(runs) if r % 2 else list(runs)[::-1]):
            tic = time.perf_counter()
            runs[name]()
            seconds[name].append(time.perf_counter() - tic)
    return {name: min(times) for name, times in seconds.items()}


def forced(kernel: str, run):
    def go():
        with mock.patch.object(padded, "_fused_pays", KERNELS[kernel]):
            run()
    return go


def training(lengths: list[int], rounds: int) -> list[dict]:
    rows = []
    for length in lengths:
        torch.manual_seed(0)
        model = make_model(30, layers=2, d_model=128, heads=4, d_ff=256, dropout=0.1, max_len=2 * length + 8)
        rng = random.Random(0)
        src = [[rng.randrange(4, 30) for _ in range(length)] for _ in range(max(1, 4096 // length))]
        batch = make_batch(model.make_pool(), src, src)
        step = lambda: model(batch).sum().backward()  # noqa: E731
        step()  # warm-up
        seconds = interleaved({k: forced(k, step) for k in KERNELS}, rounds)
        rows.append(row("training step", f"L={length}", seconds, padded.FUSED_MIN_SCORES <= (length + 1) ** 2))
    return rows


def beam(beams: list[int], rounds: int) -> list[dict]:
    torch.manual_seed(0)
    model = make_model(30, layers=2, d_model=128, heads=4, d_ff=256, dropout=0.0).eval()
    rng = random.Random(0)
    src = [[rng.randrange(4, 30) for _ in range(20)] for _ in range(32)]
    pool = model.make_pool()
    rows = []
    for k in beams:
        @torch.inference_mode()
        def decode(k=k):
            stepper = IncrementalStepper(model, make_batch(pool, src), k, 50, pool)
            beam_search(stepper, torch.full((len(src),), 50), k)
        decode()
        seconds = interleaved({name: forced(name, decode) for name in KERNELS}, rounds)
        rows.append(row("beam search decode", f"beam {k}", seconds, False))
    return rows


def row(setting: str, case: str, seconds: dict, chose_fused: bool) -> dict:
    faster = min(seconds, key=seconds.get)
    chosen = "fused" if chose_fused else "matmuls"
    print(f"{setting:20s} {case:8s} fused {seconds['fused'] * 1e3:8.1f} ms  matmuls {seconds['matmuls'] * 1e3:8.1f} ms"
          f"  chosen: {chosen}{'' if chosen == faster else ' (the other was faster here)'}")
    return {"setting": setting, "case": case, "fused_seconds": seconds["fused"], "matmuls_seconds": seconds["matmuls"],
            "chosen": chosen, "faster": faster}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    rows = training([16, 32, 64, 128, 256], args.rounds) + beam([5, 10], max(2, args.rounds // 3))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"command": f"python benchmarks/tile_kernels.py --rounds {args.rounds}",
              "fused_min_scores": padded.FUSED_MIN_SCORES, "rows": rows,
              "machine": {"threads": torch.get_num_threads(), "platform": platform.platform()},
              "versions": {"torch": torch.__version__, "python": platform.python_version()}}
    (out / "tile_kernels.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'tile_kernels.json'}")


if __name__ == "__main__":
    main()
