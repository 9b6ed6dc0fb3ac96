"""Multi-process training with torch.distributed, started by ``torchrun``.

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; without them training runs in one process.
Gloo serves CPU processes, NCCL one GPU per process.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class Context:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            from graphformer.errors import UserError
            raise UserError("--device cuda but no CUDA device is visible; use --device cpu")
        return torch.device("cuda", local_rank) if name == "cuda" else torch.device(name)
    return torch.device(name)


def setup(device_name: str) -> Context:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Context(device=resolve_device(device_name))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(device_name, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Context(rank=dist.get_rank(), world=dist.get_world_size(), device=device)


def all_reduce_sum(value: float, ctx: Context) -> float:
    if not ctx.distributed:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t)
    return float(t)


def teardown(ctx: Context) -> None:
    """Leave the process group together: a rank that exits while another still talks to it
    can leave that one waiting for ever.

    Gloo's worker threads release finished work (and the Python-owned tensors it holds, which
    needs the GIL) just after reporting it done. Destroying the group joins those threads while
    holding the GIL, so it must wait until they are idle, or both wait for ever (seen in CI with
    torch 2.2: the main thread in ~ProcessGroupGloo, a worker in ~AsyncBarrierWork).
    """
    if ctx.distributed and dist.is_initialized():
        dist.barrier()
        time.sleep(0.5)  # releases the GIL: the workers drop their finished work
        dist.destroy_process_group()


def parameter_digests(model: torch.nn.Module, ctx: Context) -> list[str]:
    """SHA-256 of every rank's parameters, gathered on all ranks (all equal when in sync)."""
    import hashlib

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    if not ctx.distributed:
        return [digest.hexdigest()]
    gathered: list = [None] * ctx.world
    dist.all_gather_object(gathered, digest.hexdigest())
    return gathered
