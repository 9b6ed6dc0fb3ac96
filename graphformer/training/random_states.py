"""Each rank's random states, into a checkpoint and back, so that a resumed run draws what an
uninterrupted one would (dropout, and anything else that draws).

Ranks draw alike, but how far a draw moves a generator can depend on its size, and each rank's
batches have their own sizes: every rank keeps its own CPU state (``torch_by_rank``) and its own
GPU's (``cuda_by_rank``, None on the CPU, where no CUDA state is touched).
"""

from __future__ import annotations

import random

import torch

from graphformer.training import distributed


def by_rank(ctx: distributed.Context, gather: bool = True) -> dict:
    """Each rank's own random states, in rank order. ``gather``: from every rank (a collective:
    every rank calls it); otherwise this process's alone."""
    gpu = torch.cuda.get_rng_state(ctx.device) if ctx.device.type == "cuda" else None
    mine = (torch.get_rng_state(), gpu)
    states = distributed.all_gather(mine, ctx) if gather else [mine]
    return {
        "torch_by_rank": [cpu for cpu, _ in states],
        "cuda_by_rank": [gpu for _, gpu in states] if gpu is not None else None,
    }


def restore(rng: dict, ctx: distributed.Context) -> None:
    """This rank's random states from a checkpoint's ``rng``: this rank's entries (rank 0's when
    the run had fewer processes). A checkpoint of an earlier graphformer holds rank 0's CPU state
    ("torch") and rank 0's view of every visible GPU ("cuda"): those, this rank's GPU's entry
    there if it has one (exact on one process)."""
    random.setstate(_tuplify(rng["python"]))
    cpu = _own(rng.get("torch_by_rank"), ctx.rank)
    torch.set_rng_state(rng["torch"] if cpu is None else cpu)
    if ctx.device.type != "cuda":
        return
    saved = _own(rng.get("cuda_by_rank"), ctx.rank)
    if saved is None:
        every = rng.get("cuda") or []
        saved = every[ctx.device.index] if ctx.device.index < len(every) else None
    if saved is not None:
        torch.cuda.set_rng_state(saved, ctx.device)


def _own(by_rank: list | None, rank: int):
    """A rank's entry of a list by rank; rank 0's for a rank past its end; None without a list."""
    if not by_rank:
        return None
    return by_rank[rank] if rank < len(by_rank) else by_rank[0]


def _tuplify(x):
    """JSON-like lists back into the nested tuples random.setstate wants."""
    return tuple(_tuplify(i) for i in x) if isinstance(x, (list, tuple)) else x
