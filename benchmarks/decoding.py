"""Decoding speed: incremental graph decoding against recomputing the whole prefix every step.

A model of the copy configuration (2 layers, d_model 128) decodes sentences of 20 source tokens
to exactly 50 target tokens (</s> is suppressed until the length limit), greedy and beam 5.

    python benchmarks/decoding.py [--sentences 32] [--out benchmarks/results]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time
from pathlib import Path

import torch

from graphformer import make_model
from graphformer.decoding import translate_ids
from graphformer.vocab import EOS


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = make_model(30, layers=2, d_model=128, heads=4, d_ff=256, dropout=0.0).eval()
    with torch.no_grad():
        model.generator.proj.bias[EOS] = -1e4  # every hypothesis runs to the length limit
    rng = random.Random(0)
    src = [[rng.randrange(4, 30) for _ in range(20)] for _ in range(args.sentences)]
    extra = 50 - 21  # limit = source length (20 + </s>) + extra = 50 target tokens
    rows = []
    for beam in (1, 5):
        for incremental in (True, False):
            tic = time.perf_counter()
            hyps = translate_ids(model, src, beam=beam, extra_len=extra, incremental=incremental, batch_size=args.sentences)
            seconds = time.perf_counter() - tic
            assert all(len(h.tokens) == 49 for h in hyps)  # 49 tokens + the forced </s>
            rows.append({"beam": beam, "method": "incremental" if incremental else "recompute",
                         "sentences_per_s": len(src) / seconds, "seconds": seconds})
            print(f"beam {beam} {rows[-1]['method']:11s} {rows[-1]['sentences_per_s']:8.2f} sentences/s")
        fast, slow = rows[-2]["sentences_per_s"], rows[-1]["sentences_per_s"]
        print(f"beam {beam}: incremental is {fast / slow:.1f}x faster than recomputing the prefix")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"command": f"python benchmarks/decoding.py --sentences {args.sentences}", "target_length": 50,
              "rows": rows, "machine": {"cores": os.cpu_count(), "platform": platform.platform()},
              "versions": {"torch": torch.__version__, "python": platform.python_version()}}
    (out / "decoding.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'decoding.json'}")


if __name__ == "__main__":
    main()
