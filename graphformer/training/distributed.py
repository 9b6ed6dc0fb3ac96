"""Multi-process training with torch.distributed, started by ``graphformer train --processes N``
on one machine (`graphformer.training.launch`) or by torchrun across several.

Both set RANK, LOCAL_RANK, WORLD_SIZE and LOCAL_WORLD_SIZE; without them training runs in one process.
Gloo serves CPU processes, NCCL one GPU per process.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from graphformer.errors import ConfigError
from graphformer.training.config import check_device_name


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

    @property
    def per_node(self) -> int:
        """Processes on this machine."""
        return local_processes(self.world)


def local_processes(default: int = 1) -> int:
    """The run's processes on this machine (LOCAL_WORLD_SIZE), else ``default``."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", default))


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """The device that ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` names on this machine."""
    check_device_name(name)
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError("device", f"{name}: no CUDA device is visible here; use cpu")
        device = torch.device("cuda", local_rank) if name == "cuda" else torch.device(name)
        if device.index >= torch.cuda.device_count():
            raise ConfigError("device", f"{name}: only {torch.cuda.device_count()} CUDA devices are visible")
        return device
    return torch.device(name)


def check_devices_for(processes: int, device_name: str) -> None:
    """Several processes on this machine take one GPU each (the one of their local rank): a
    ConfigError before any of them starts when the device choice cannot give them that."""
    check_device_name(device_name)
    if processes == 1:
        return
    if device_name.startswith("cuda:"):
        raise ConfigError(
            "device",
            f"{device_name} names one GPU, and each of the {processes} processes takes its own: use --device cuda",
        )
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device_name == "cuda" and gpus == 0:
        raise ConfigError("device", "cuda: no CUDA device is visible here; use cpu")
    if device_name != "cpu" and gpus and gpus < processes:
        raise ConfigError(
            "device",
            f"{device_name}: {processes} processes take one GPU each, and "
            f"{gpus} {'is' if gpus == 1 else 'are'} visible; start fewer --processes, or use --device cpu",
        )


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


def any_rank(flags: tuple[bool, ...], ctx: Context) -> tuple[bool, ...]:
    """Each flag, true if it is true on any rank (one collective for all of them)."""
    if not ctx.distributed:
        return tuple(bool(f) for f in flags)
    t = torch.tensor([float(f) for f in flags], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t)
    return tuple(bool(x > 0) for x in t.tolist())


def all_gather(value, ctx: Context) -> list:
    """``value`` of every rank, in rank order, on every rank (any picklable value)."""
    if not ctx.distributed:
        return [value]
    gathered: list = [None] * ctx.world
    dist.all_gather_object(gathered, value)
    return gathered


def teardown(ctx: Context, together: bool = True) -> None:
    """Leave the process group together: a rank that exits while another still talks to it
    can leave that one waiting for ever. Not ``together`` (this rank failed, and the others may
    be waiting in another collective), the group is left as it is: the process exits with its
    error and its launcher stops the others.

    Gloo's worker threads release finished work (and the Python-owned tensors it holds, which
    needs the GIL) just after reporting it done. Destroying the group joins those threads while
    holding the GIL, so it must wait until they are idle, or both wait for ever (seen in CI with
    torch 2.2: the main thread in ~ProcessGroupGloo, a worker in ~AsyncBarrierWork).
    """
    if ctx.distributed and dist.is_initialized() and together:
        dist.barrier()
        time.sleep(0.5)  # releases the GIL: the workers drop their finished work
        dist.destroy_process_group()


def parameter_digests(model: torch.nn.Module, ctx: Context) -> list[str]:
    """SHA-256 of every rank's parameters, gathered on all ranks (all equal when in sync)."""
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    return all_gather(digest.hexdigest(), ctx)
