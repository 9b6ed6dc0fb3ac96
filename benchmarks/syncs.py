"""Host syncs per training step: how often the host waits for the device in `Trainer.train_step`.

On CUDA the count is PyTorch's own: ``torch.cuda.set_sync_debug_mode("warn")`` warns at every
synchronizing call (a value read back, a pageable copy, an op whose output size depends on the
data), and the warnings of one step are counted. A CPU has no device to wait for, so there the
count is of the calls that would sync on CUDA, caught by a `TorchFunctionMode`: reads of a
tensor's value (``item``, ``bool``, ``float``, ``int``, ``tolist``, ...) and ops whose output
shape depends on the values (``nonzero``, boolean indexing, ...). Batch building is left out on
the CPU (its tensors are host tensors on CUDA too); copies to the device are counted on CUDA only.

    python -m benchmarks.syncs [--device cpu] [--steps 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from benchmarks.harness import command, write_result

# Tensor methods and torch functions that make a CUDA host wait for the device.
READS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy", "cpu"}
DATA_SIZED = {"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "bincount"}


def _bool_index(args) -> bool:
    """Whether an indexing call's index holds a boolean tensor (which runs nonzero)."""
    index = args[1] if len(args) > 1 else None
    parts = index if isinstance(index, (tuple, list)) else (index,)
    return any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts)


def would_sync(func, args, kwargs) -> str | None:
    """The name under which a call counts as a sync on CUDA, or None."""
    name = getattr(func, "__name__", "")
    if name in READS or name in DATA_SIZED:
        return name
    if name in ("__getitem__", "__setitem__", "index_put", "index_put_") and _bool_index(args):
        return f"{name} (boolean index)"
    if (
        name == "repeat_interleave"
        and "output_size" not in (kwargs or {})
        and isinstance(args[1] if len(args) > 1 else kwargs.get("repeats"), torch.Tensor)
    ):
        return "repeat_interleave"
    return None


class SyncCounter(TorchFunctionMode):
    """Counts, by name, the calls that would sync on CUDA while it is active and not paused."""

    def __init__(self):
        super().__init__()
        self.counts, self.paused = Counter(), 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = None if self.paused else would_sync(func, args, kwargs or {})
        if name is not None:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))

    @contextmanager
    def pause(self):
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1


@contextmanager
def cuda_sync_warnings():
    """Yields a list that gets one entry per synchronizing CUDA call made inside."""
    found = []
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield found
        finally:
            torch.cuda.set_sync_debug_mode(previous)
            found.extend(str(w.message) for w in caught if "synchroniz" in str(w.message))


def count_step_syncs(trainer, batches, counts, steps: int = 1) -> dict:
    """Syncs per `Trainer.train_step` call, averaged over ``steps`` steps after one warm-up."""
    from graphformer.training import trainer as trainer_module

    trainer.train_step(batches, counts)  # warm-up: layouts, allocator, lazy initialisation
    if trainer.ctx.device.type == "cuda":
        torch.cuda.synchronize()
        with cuda_sync_warnings() as found:
            for _ in range(steps):
                trainer.train_step(batches, counts)
        torch.cuda.synchronize()
        return {
            "per_step": len(found) / steps,
            "method": "torch.cuda.set_sync_debug_mode",
            "kinds": dict(Counter(m.split("\n")[0][:80] for m in found)),
        }
    counter = SyncCounter()
    original = trainer_module.make_batch

    def unwatched_make_batch(*args, **kwargs):  # host work on CUDA too: not a sync there
        with counter.pause():
            return original(*args, **kwargs)

    step = trainer.optimizer.step

    def unwatched_step(*args, **kwargs):  # Adam's step counts are host tensors on CUDA too
        with counter.pause():
            return step(*args, **kwargs)

    trainer_module.make_batch, trainer.optimizer.step = unwatched_make_batch, unwatched_step
    try:
        with counter:
            for _ in range(steps):
                trainer.train_step(batches, counts)
    finally:
        trainer_module.make_batch, trainer.optimizer.step = original, step
    return {
        "per_step": sum(counter.counts.values()) / steps,
        "method": "TorchFunctionMode (CPU)",
        "kinds": {name: n / steps for name, n in sorted(counter.counts.items())},
    }


SETUPS = {  # (model options, attention backend) per row
    "transformer (padded)": (dict(layers=2), "padded"),
    "transformer (torch)": (dict(layers=2), "torch"),
    "transformer (blocked)": (dict(layers=2), "blocked"),
    "universal (padded)": (dict(model="universal", max_depth=4), "padded"),
}


def make_trainer(run_dir: Path, device: str, model: dict, backend: str, accumulate: int = 2):
    """A small copy-task Trainer on ``device``, steps of ``accumulate`` micro-batches."""
    from graphformer.data import synthetic
    from graphformer.model import ModelConfig
    from graphformer.training.config import TrainConfig
    from graphformer.training.trainer import Trainer

    data = synthetic.write_task("copy", run_dir / "data", seed=1, sizes={"train": 128, "valid": 16, "test": 16})
    model_cfg = ModelConfig(src_vocab=1, tgt_vocab=1, d_model=32, heads=4, d_ff=64, dropout=0.0, **model)
    train_cfg = TrainConfig(
        task="parallel",
        data_dir=str(data),
        batch_size=16,
        warmup=10,
        device=device,
        accumulate=accumulate,
        attention_backend=backend,
    )
    return Trainer(run_dir / "run", model_cfg, train_cfg, show_progress=False)


def measure(device: str, steps: int, setups: dict = SETUPS) -> list[dict]:
    rows = []
    for name, (model, backend) in setups.items():
        with tempfile.TemporaryDirectory() as scratch:
            trainer = make_trainer(Path(scratch), device, model, backend)
            plan, global_plan = trainer.epoch_plan(0)
            row = count_step_syncs(trainer, plan[0], trainer.step_counts(global_plan[0]), steps)
            rows.append({"system": name, "micro_batches": len(plan[0]), **row})
            print(f"syncs per step  {name:24s} {row['per_step']:6.1f}  {row['kinds']}", flush=True)
            trainer.close()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", help="where syncs.json goes (default: printed only)")
    args = parser.parse_args()
    rows = measure(args.device, args.steps)
    if args.out:
        write_result(args.out, "syncs.json", command("syncs", sys.argv[1:]), {"device": args.device, "rows": rows})


if __name__ == "__main__":
    main()
