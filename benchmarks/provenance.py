"""Where a benchmark's figures were measured: written into every result file, so a figure is never
read without the machine and versions that made it."""

from __future__ import annotations

import os
import platform


def machine(**extra) -> dict:
    """Cores, torch's threads and the platform (plus ``extra`` facts a benchmark adds)."""
    import torch

    return {"cores": os.cpu_count(), "threads": torch.get_num_threads(), "platform": platform.platform(), **extra}


def versions(**extra) -> dict:
    """torch's and Python's versions (plus ``extra``, e.g. CUDA's)."""
    import torch

    return {"torch": torch.__version__, "python": platform.python_version(), **extra}
