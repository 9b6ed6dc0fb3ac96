r"""The Noam learning-rate schedule (Vaswani et al., 2017, section 5.3):

    lr(step) = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

linear warm-up for ``warmup`` steps, then decay with the inverse square root of the step.
"""

from __future__ import annotations

import torch


def noam_rate(step: int, d_model: int, warmup: int, factor: float) -> float:
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def make_optimizer(params, d_model: int, warmup: int, factor: float):
    """Adam(beta=(0.9, 0.98), eps=1e-9) driven by the Noam schedule, as in the paper."""
    if warmup < 1:
        raise ValueError(f"warmup must be at least 1 step, got {warmup}")
    optimizer = torch.optim.Adam(params, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    # LambdaLR multiplies the base lr (1.0) by this factor; its step counter starts at 0.
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: noam_rate(s + 1, d_model, warmup, factor))
    return optimizer, schedule
