"""Decoding speed: incremental graph decoding against recomputing the prefix, and against a dense peer.

A model of the copy configuration (2 layers, d_model 128) decodes sentences of 20 source tokens
to exactly 50 target tokens (</s> is suppressed until the length limit), greedy and beam 5, with:

* graph incremental: graphformer's decoding (only the newest node of each hypothesis is
  computed; beam reordering re-points edges);
* graph recompute: the whole prefix rebuilt as a training batch at every step (the reference);
  both with the ``dgl`` backend and with the default ``auto`` (which takes ``padded`` here);
* dense KV cache: the same weights in ``torch.nn.Transformer``, decoded on padded tensors with
  the usual key/value cache (reordered by indexing, as dense libraries do) and PyTorch's
  ``scaled_dot_product_attention``.

All of them run the same greedy / beam search code and must produce the same tokens.

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
import torch.nn.functional as F

from graphformer import make_model
from graphformer.decoding import beam_search, greedy_search, translate_ids
from graphformer.model.dense import to_torch_transformer
from graphformer.vocab import EOS


class DenseCacheStepper:
    """Stepper interface (step / reorder) over nn.Transformer weights with a key/value cache."""

    def __init__(self, model, dense, src: list[list[int]], k: int, max_steps: int):
        self.model, self.dense, self.heads = model, dense, model.cfg.heads
        device = next(model.parameters()).device
        ids = torch.tensor([s + [EOS] for s in src], device=device)  # equal lengths here: no padding needed
        pos = torch.arange(ids.shape[1], device=device).repeat(len(src))
        memory = dense.encoder(model.src_embed(ids.reshape(-1), pos).view(*ids.shape, -1))
        memory = memory.repeat_interleave(k, 0)  # (hyps, n, d)
        self.memory_kv = []
        for layer in dense.decoder.layers:
            w, b, d = layer.multihead_attn.in_proj_weight, layer.multihead_attn.in_proj_bias, model.cfg.d_model
            mk, mv = F.linear(memory, w[d:], b[d:]).chunk(2, -1)
            self.memory_kv.append((self._heads(mk), self._heads(mv)))
        hyps, d_head = len(memory), model.cfg.d_model // self.heads
        self.cache = memory.new_zeros(len(dense.decoder.layers), 2, hyps, self.heads, max_steps, d_head)
        self.t = 0

    def _heads(self, x):  # (hyps, n, d) -> (hyps, heads, n, d_head)
        return x.view(x.shape[0], x.shape[1], self.heads, -1).transpose(1, 2)

    def step(self, tokens):
        t, d = self.t, self.model.cfg.d_model
        x = self.model.tgt_embed(tokens, torch.full_like(tokens, t))[:, None]  # (hyps, 1, d)
        for i, layer in enumerate(self.dense.decoder.layers):
            q, k, v = (self._heads(z) for z in F.linear(layer.norm1(x), layer.self_attn.in_proj_weight,
                                                        layer.self_attn.in_proj_bias).chunk(3, -1))
            self.cache[i, 0, :, :, t], self.cache[i, 1, :, :, t] = k[:, :, 0], v[:, :, 0]
            o = F.scaled_dot_product_attention(q, self.cache[i, 0, :, :, :t + 1], self.cache[i, 1, :, :, :t + 1])
            x = x + layer.self_attn.out_proj(o.transpose(1, 2).reshape(len(x), 1, d))
            attn = layer.multihead_attn
            q = self._heads(F.linear(layer.norm2(x), attn.in_proj_weight[:d], attn.in_proj_bias[:d]))
            o = F.scaled_dot_product_attention(q, *self.memory_kv[i])
            x = x + attn.out_proj(o.transpose(1, 2).reshape(len(x), 1, d))
            x = x + layer.linear2(F.relu(layer.linear1(layer.norm3(x))))
        self.t += 1
        return self.model.generator(self.dense.decoder.norm(x[:, 0]))

    def reorder(self, parents):
        self.cache = self.cache[:, :, parents]


def dense_decode(model, dense, src, beam, limit):
    stepper = DenseCacheStepper(model, dense, src, beam, limit)
    limits = torch.full((len(src),), limit, device=next(model.parameters()).device)
    return greedy_search(stepper, limits) if beam == 1 else beam_search(stepper, limits, beam, 0.6)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=32)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = make_model(30, layers=2, d_model=128, heads=4, d_ff=256, dropout=0.0).eval()
    with torch.no_grad():
        model.generator.proj.bias[EOS] = -1e4  # every hypothesis runs to the length limit
    dense = to_torch_transformer(model).eval()
    rng = random.Random(0)
    src = [[rng.randrange(4, 30) for _ in range(20)] for _ in range(args.sentences)]
    extra = 50 - 21  # limit = source length (20 + </s>) + extra = 50 target tokens

    def graph(backend, incremental):
        def run(beam):
            model.attention_backend = backend
            return translate_ids(model, src, beam=beam, extra_len=extra, incremental=incremental,
                                 batch_size=args.sentences)
        return run

    methods = {
        "graph incremental (dgl)": graph("dgl", True),
        "graph recompute (dgl)": graph("dgl", False),
        "graph incremental (auto)": graph("auto", True),
        "graph recompute (auto)": graph("auto", False),
        "dense KV cache": lambda beam: torch.no_grad()(dense_decode)(model, dense, src, beam, 50),
    }
    rows = []
    for beam in (1, 5):
        tokens = None
        for name, run in methods.items():
            run(beam)  # warm-up (graph pool, allocator)
            tic = time.perf_counter()
            hyps = run(beam)
            seconds = time.perf_counter() - tic
            assert all(len(h.tokens) == 49 for h in hyps)  # 49 tokens + the forced </s>
            tokens = tokens or [h.tokens for h in hyps]
            assert [h.tokens for h in hyps] == tokens, f"{name} decoded different tokens"
            rows.append({"beam": beam, "method": name, "sentences_per_s": len(src) / seconds, "seconds": seconds})
            print(f"beam {beam} {name:28s} {rows[-1]['sentences_per_s']:8.2f} sentences/s")
        rate = {r["method"]: r["sentences_per_s"] for r in rows if r["beam"] == beam}
        for r in rows[-len(methods):]:
            backend = r["method"][r["method"].find("("):]
            if r["method"].startswith("graph incremental"):
                r["vs_recompute"] = r["sentences_per_s"] / rate[f"graph recompute {backend}"]
            r["vs_dense_kv_cache"] = r["sentences_per_s"] / rate["dense KV cache"]
        for backend in ("(dgl)", "(auto)"):
            fast = rate[f"graph incremental {backend}"]
            print(f"beam {beam}: incremental {backend} is {fast / rate[f'graph recompute {backend}']:.1f}x "
                  f"recomputation and {fast / rate['dense KV cache']:.2f}x the dense KV cache")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"command": f"python benchmarks/decoding.py --sentences {args.sentences}", "target_length": 50,
              "rows": rows, "machine": {"cores": os.cpu_count(), "threads": torch.get_num_threads(),
                                        "platform": platform.platform()},
              "versions": {"torch": torch.__version__, "python": platform.python_version()}}
    (out / "decoding.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'decoding.json'}")


if __name__ == "__main__":
    main()
