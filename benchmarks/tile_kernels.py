"""Fused attention or batched matmuls for the padded backend's unmasked tiles on a CPU.

The ``padded`` backend gives unmasked tiles (`graphformer.attention.padded._attend_tiles`) to
PyTorch's fused ``scaled_dot_product_attention``. Timed alone, one call of fused attention on a few
queries per tile (beam search) runs about three times slower on a CPU than the same attention as
two batched matmuls, so this script times both end to end, the matmuls patched in for every tile of
several queries (in alternating order, round by round):

* training: one forward and backward pass of the copy configuration (2 layers, d_model 128,
  4 heads) on a batch of about 4,096 tokens per side, every sample of one length L, so that the
  encoder's and the cross-attention's relations are (L + 1) x (L + 1) tiles (`full_stretches`: one stretch; L
  tokens and `</s>`, `<s>` and L tokens);
* beam search: incremental decoding of the fixed-length benchmark's 32 sentences (20 tokens, 50
  output tokens, `</s>` suppressed until the limit) with beam 5 and 10: cross-attention tiles of 5
  or 10 queries over 21 keys at every step, and the encoder's 21 x 21 tiles once
  (`benchmarks.decoders.fixed_model_and_sources`).

    python -m benchmarks.tile_kernels [--rounds 10] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import math
import random
from types import SimpleNamespace
from unittest import mock

import torch
import torch.nn.functional as F

from benchmarks.decoders import FIXED_OUTPUT_TOKENS, fixed_model_and_sources
from benchmarks.harness import best_of, command, interleaved, write_result
from graphformer import make_model
from graphformer.attention import padded
from graphformer.decoding import IncrementalStepper, beam_search
from graphformer.graphs import make_batch


def matmul_attention(q, k, v):
    """``scaled_dot_product_attention`` (no mask) as two batched matmuls, for several queries per
    tile; one query per tile keeps the fused kernel."""
    if q.shape[-2] == 1:
        return F.scaled_dot_product_attention(q, k, v)
    return torch.softmax((q @ k.transpose(-1, -2)).mul_(1.0 / math.sqrt(q.shape[-1])), dim=-1) @ v


KERNELS = {"fused": F, "matmuls": SimpleNamespace(scaled_dot_product_attention=matmul_attention)}


def forced(kernel: str, run):
    def go():
        with mock.patch.object(padded, "F", KERNELS[kernel]):
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
        seconds = best_of(interleaved({k: forced(k, step) for k in KERNELS}, rounds, alternate=True))
        rows.append(row("training step", f"L={length}", seconds))
    return rows


def beam(beams: list[int], rounds: int) -> list[dict]:
    model, src = fixed_model_and_sources()  # decoding.py's fixed setting
    pool = model.make_pool()
    rows = []
    for k in beams:

        @torch.inference_mode()
        def decode(k=k):
            stepper = IncrementalStepper(model, make_batch(pool, src), k, FIXED_OUTPUT_TOKENS, pool)
            beam_search(stepper, torch.full((len(src),), FIXED_OUTPUT_TOKENS), k)

        decode()
        seconds = best_of(interleaved({name: forced(name, decode) for name in KERNELS}, rounds, alternate=True))
        rows.append(row("beam search decode", f"beam {k}", seconds))
    return rows


def row(setting: str, case: str, seconds: dict) -> dict:
    ratio = seconds["fused"] / seconds["matmuls"]
    print(
        f"{setting:20s} {case:8s} fused {seconds['fused'] * 1e3:8.1f} ms  matmuls {seconds['matmuls'] * 1e3:8.1f} ms"
        f"  fused / matmuls {ratio:.3f}"
    )
    return {
        "setting": setting,
        "case": case,
        "fused_seconds": seconds["fused"],
        "matmuls_seconds": seconds["matmuls"],
        "fused_over_matmuls": ratio,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    rows = training([16, 32, 64, 128, 256], args.rounds) + beam([5, 10], args.rounds)
    result = {"rows": rows}
    write_result(args.out, "tile_kernels.json", command("tile_kernels", ["--rounds", str(args.rounds)]), result)


if __name__ == "__main__":
    main()
