"""Memory one training step of a run's model adds: forward, loss and backward on one batch of
samples of L tokens, above the resident set just before it (so without the several hundred MiB
that importing torch and DGL, the data and the optimiser cost every pattern alike).

    python examples/long_range/step_memory.py RUN_DIR --length 4096 --batch-tokens 8192

prints one JSON line: ``{"step_bytes": ..., "samples": ..., "length": ...}``. The run directory
gives the model (its ``config.json``); the weights and token ids are random, which changes no
tensor's size. Run it in a fresh process per pattern: the peak is the process's.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys

from graphformer.cli import at_least_one

# glibc raises its mmap threshold as large blocks are freed, after which freed tensors stay
# resident and the measured step would reuse the warm-up's pages unseen. A fixed threshold keeps
# every large tensor its own mapping, returned to the system when freed.
FIXED_MMAP_THRESHOLD = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}


def one_step(model, batch) -> None:
    import torch

    model.zero_grad(set_to_none=True)
    log_probs = model(batch)
    torch.nn.functional.nll_loss(log_probs, batch.gold).backward()


def random_tree(nodes: int, generator):
    """(u, v) of a random tree on ``nodes`` nodes: node i > 0 under a random earlier node, edges
    both ways, and a self-loop on every node."""
    import torch

    child = torch.arange(1, nodes)
    parent = (torch.rand(nodes - 1, generator=generator) * child).long()
    loops = torch.arange(nodes)
    return torch.cat([loops, child, parent]), torch.cat([loops, parent, child])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("run_dir")
    p.add_argument("--length", type=at_least_one, required=True, help="tokens per sample")
    p.add_argument("--batch-tokens", type=at_least_one, required=True, help="tokens per batch (as in training)")
    args = p.parse_args(argv)
    if any(os.environ.get(name) != value for name, value in FIXED_MMAP_THRESHOLD.items()):
        os.execve(
            sys.executable,
            [sys.executable, __file__, *(sys.argv[1:] if argv is None else argv)],
            {**os.environ, **FIXED_MMAP_THRESHOLD},
        )  # glibc reads it at start-up only
    os.environ.setdefault("DGLBACKEND", "pytorch")
    import torch

    from graphformer.graphs import make_batch
    from graphformer.model import build_model
    from graphformer.model.config import ModelConfig
    from graphformer.rss import peak_rss_bytes, reset_peak_rss, rss_bytes
    from graphformer.training.run_dir import RunDir
    from graphformer.vocab import UNK

    model_fields, train_fields = RunDir(args.run_dir).read_config()
    torch.set_num_threads(train_fields.get("threads") or 1)
    model = build_model(ModelConfig.from_dict(model_fields), train_fields.get("attention_backend", "auto")).train()
    pool, samples = model.make_pool(), max(1, args.batch_tokens // args.length)
    generator = torch.Generator().manual_seed(0)
    first = UNK + 1  # past the specials
    src = torch.randint(first, model.cfg.src_vocab, (samples, args.length), generator=generator).tolist()
    labels = torch.randint(first, model.cfg.tgt_vocab, (samples, 1), generator=generator).tolist()
    # Each sample's own edges (parse-tree, edges) are stood in for by a random tree over its
    # nodes: as many edges per node as a parse tree (each node and its parent, both ways, and itself).
    edges = [random_tree(args.length + 1, generator) for _ in src] if pool.sample_terms else None
    batch = make_batch(pool, src, labels, edges)
    one_step(model, batch)  # warm-up: graph formats, tile layouts, the allocator
    gc.collect()
    before = rss_bytes()
    if not reset_peak_rss():
        sys.exit("step_memory: cannot reset the peak resident set (/proc/self/clear_refs): needs Linux")
    one_step(model, batch)
    print(json.dumps({"step_bytes": max(peak_rss_bytes() - before, 0), "samples": samples, "length": args.length}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
