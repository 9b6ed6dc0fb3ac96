"""What a model computes in: float32, as its weights are, or bfloat16 / float16 under torch.autocast.

Under autocast the matrix products (projections, feed-forward layers, attention's products)
run in the lower dtype; what they add to stays in float32 (the residual stream, whose sums
promote), and the generator gives log-probabilities in float32 at least. The
decoding cache keeps keys and values in the dtype the projections give them, half of float32's
memory. Training (`train --precision bfloat16`) runs each step's forward pass in this context;
the backward pass follows its dtypes, and weights, gradients and Adam's moments stay float32.

On a CPU with bfloat16 instructions (AVX512-BF16, AMX) decoding in bfloat16 is faster; on one
without them PyTorch emulates them, many times slower than float32 (`benchmarks/precision.py`
measures both; its figures are in docs/results.md).
`cpu_bfloat16_instructions` says which the CPU has, where Linux tells. float16 is for GPUs: a
CPU emulates it too (and a model converted to float16 fails there: PyTorch 2.2 has no float16
layer norm on a CPU).
"""

from __future__ import annotations

import contextlib
import sys

import torch

from graphformer.choices import PRECISIONS
from graphformer.errors import ConfigError

# CPU flags (as Linux names them) of bfloat16 matrix products in hardware.
BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")


def autocast(precision: str, device: torch.device | str):
    """A context in which the model computes in ``precision`` (one of ``PRECISIONS``) on ``device``."""
    device = torch.device(device)
    if precision not in PRECISIONS:
        raise ConfigError("precision", f"must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "float32":
        return contextlib.nullcontext()
    if precision == "float16" and device.type == "cpu":
        raise ConfigError(
            "precision",
            "float16 needs a GPU (a CPU emulates its products, many times slower than "
            "float32); use bfloat16 on the CPU",
        )
    if precision == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError("precision", "bfloat16: this GPU has no bfloat16 support; use float16")
    return torch.autocast(device.type, dtype=getattr(torch, precision))


def emulation_warning(precision: str, device: torch.device | str) -> str | None:
    """What to tell a user who asks for bfloat16 on a CPU whose flags show no bfloat16
    instructions; None elsewhere."""
    if precision == "bfloat16" and torch.device(device).type == "cpu" and cpu_bfloat16_instructions() == []:
        return (
            f"this CPU has no bfloat16 instructions ({' or '.join(BFLOAT16_FLAGS)}): PyTorch emulates them, and "
            "bfloat16 is many times slower than float32 here (leave --precision out)"
        )
    return None


def warn_if_emulated(precision: str, device: torch.device | str) -> None:
    """Print `emulation_warning`'s warning, if there is one, on stderr."""
    if warning := emulation_warning(precision, device):
        print(f"graphformer: warning: {warning}", file=sys.stderr)


def cpu_bfloat16_instructions(cpuinfo: str = "/proc/cpuinfo") -> list[str] | None:
    """Which of ``BFLOAT16_FLAGS`` the CPU has, read from Linux's ``cpuinfo``; None where that
    cannot be read (another system) or lists no x86 ``flags`` (ARM's lists ``Features``)."""
    try:
        with open(cpuinfo) as lines:
            flags = next((line for line in lines if line.startswith("flags")), None)
    except OSError:
        return None
    return None if flags is None else [flag for flag in BFLOAT16_FLAGS if flag in flags.split()]
