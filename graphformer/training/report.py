"""What a training run tells its user while it runs: the console (a progress bar on a terminal,
plain lines in a log file, rounded metrics) and, optionally, TensorBoard.

The logs in the run directory (``steps.jsonl``, ``metrics.jsonl``) keep every number in full;
these are views for people.
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from graphformer.errors import UserError
from graphformer.evaluation.scores import for_console


def format_metrics(metrics: dict) -> str:
    """One console line, numbers rounded (metrics.jsonl keeps them in full); a classifier's
    accuracy once (`for_console`)."""
    shown = for_console({k.removeprefix("valid_"): v for k, v in metrics.items() if k not in ("epoch", "step")})
    parts = [f"{k.replace('_', ' ')} {_rounded(v)}" for k, v in shown.items()]
    return f"epoch {metrics['epoch']} (step {metrics['step']}): valid " + ", ".join(parts)


def _rounded(value) -> str:
    """A number to 4 significant digits; a list (the ACT step fractions), each of its numbers."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return "[" + ", ".join(_rounded(v) for v in value) + "]"
    return str(value)


class ConsoleReport:
    """Training progress on stderr: a tqdm bar on a terminal, else a plain line every 30 seconds,
    at the epoch's last step and at a stop before it (log files get no carriage-return clutter).

    Its tokens/s is the rate since the last line (an interval of at most ``every_s``), not since
    the epoch began: an average over the whole epoch hides a slowdown for long and, on a shared
    machine, swings with whatever ran before. ``clock`` is injectable so a test can set the time."""

    def __init__(
        self,
        total: int,
        done: int,
        desc: str,
        enabled: bool,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.total, self.done, self.desc, self.every_s, self.clock = total, done, desc, every_s, clock
        self.enabled, self.tty = enabled, sys.stderr.isatty()
        self.last_line = clock()
        self.tokens = 0  # since the last line
        self.unprinted = None  # the latest step's line, if the plain output has not shown it
        self.bar = tqdm(
            total=total, initial=done, desc=desc, dynamic_ncols=True, leave=False, disable=not (enabled and self.tty)
        )

    def step(self, tokens: int, loss: float, lr: float) -> float:
        """Count one optimizer step of ``tokens`` tokens (the target tokens of a sequence model, the
        source nodes of a classifier, whose target is one label); returns tokens/s over the
        interval since the last line."""
        self.done += 1
        self.tokens += tokens
        now = self.clock()
        rate = self.tokens / max(now - self.last_line, 1e-9)
        self.bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:.0f}", lr=f"{lr:.2e}", refresh=False)
        self.bar.update()
        self.unprinted = f"{self.desc} step {self.done}/{self.total}: loss {loss:.3f}, {rate:.0f} tokens/s, lr {lr:.2e}"
        if now - self.last_line >= self.every_s or self.done == self.total:
            self._print_line()
            self.last_line, self.tokens = now, 0
        return rate

    def _print_line(self) -> None:
        if self.enabled and not self.tty and self.unprinted:
            print(self.unprinted, file=sys.stderr, flush=True)
        self.unprinted = None

    def close(self, show_last: bool = True) -> None:
        """End the bar; plain output shows the last step if it has not (a run stopped mid-epoch),
        unless an error that ends the run is to be its only line."""
        if show_last:
            self._print_line()
        self.bar.close()


class TensorBoardLog:
    """Loss, learning rate and tokens/s per step, validation metrics per epoch, and recorded
    attention maps as images, in ``folder`` (``tensorboard --logdir RUN_DIR/tensorboard``)."""

    def __init__(self, folder: Path, after_step: int = 0):
        """``after_step``: a resumed run's checkpoint step; what was logged after it is dropped."""
        try:
            from torch.utils.tensorboard import SummaryWriter  # needs the optional tensorboard package
        except ImportError:
            raise UserError(
                "tensorboard logging needs the tensorboard package: pip install -e .[tensorboard]"
            ) from None
        self.writer = SummaryWriter(str(folder), purge_step=after_step + 1 if after_step else None)

    def step(self, step: int, loss: float, lr: float, tokens_per_s: float) -> None:
        self.writer.add_scalar("train/loss", loss, step)
        self.writer.add_scalar("train/lr", lr, step)
        self.writer.add_scalar("train/tokens_per_s", tokens_per_s, step)

    def epoch(self, metrics: dict) -> None:
        for name, value in metrics.items():
            if name.startswith("valid_") and isinstance(value, (int, float)):
                self.writer.add_scalar(f"valid/{name.removeprefix('valid_')}", value, metrics["step"])

    def attention(self, name: str, png: bytes, step: int) -> None:
        from PIL import Image

        image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
        self.writer.add_image(name, image, step, dataformats="HWC")

    def close(self) -> None:
        self.writer.close()
