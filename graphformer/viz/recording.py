"""Attention maps recorded during training: ``RUN_DIR/attention/epoch_NNNN.pt``, one per recorded
epoch, each holding the maps of all three relations for the first validation sample."""
from __future__ import annotations

from pathlib import Path

import torch

from graphformer.errors import UserError
from graphformer.graphs import make_batch, tree
from graphformer.training.checkpoint import save_atomic
from graphformer.viz.maps import RELATIONS, attention_maps
from graphformer.vocab import EOS, SOS


def record_epoch(model, split, pool, src_vocab, tgt_vocab, run_dir: Path, epoch: int) -> Path:
    if getattr(model.cfg, "model", "transformer") != "transformer":
        return None  # the Universal Transformer's per-step subgraphs are plotted as ponder maps instead
    src, tgt = split.src[0], split.tgt[0]
    batch = make_batch(pool, [src], [tgt]).to(next(model.parameters()).device)
    src_labels = [src_vocab.itos[i] for i in src] + [src_vocab.itos[EOS]]
    n = len(src_labels)
    spans = [tree.span_range(n, node) for node in range(n, n + pool.span_nodes(n))]  # tree patterns only
    record = {
        "epoch": epoch,
        "src_labels": src_labels,
        "enc_labels": src_labels + [f"[{first}:{end})" for first, end in spans],
        "tgt_labels": [tgt_vocab.itos[SOS]] + [tgt_vocab.itos[i] for i in tgt],
        "maps": {rel: attention_maps(model, batch, rel) for rel in RELATIONS},
    }
    folder = Path(run_dir) / "attention"
    folder.mkdir(exist_ok=True)
    path = folder / f"epoch_{epoch:04d}.pt"
    save_atomic(record, path)
    return path


def load_records(run_dir: str | Path) -> list[dict]:
    folder = Path(run_dir) / "attention"
    paths = sorted(folder.glob("epoch_*.pt")) if folder.is_dir() else []
    if not paths:
        raise UserError(f"no attention maps recorded in {run_dir}; train with --viz-every N to record them")
    return [torch.load(p, map_location="cpu", weights_only=True) for p in paths]
