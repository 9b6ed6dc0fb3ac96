"""The Multi30k CPU recipe (``examples/multi30k/cpu.yaml``, what ``cpu.sh`` trains): the benchmarks
size their Multi30k models by it, so a change to the recipe changes them too."""
from __future__ import annotations

from pathlib import Path

from graphformer.cli import read_config_file

CPU_RECIPE = Path(__file__).resolve().parents[1] / "examples" / "multi30k" / "cpu.yaml"
SIZES = ("layers", "d_model", "heads", "d_ff")


def cpu_recipe() -> tuple[dict, dict]:
    """The recipe's (model, train) options, as ``graphformer train --config`` reads them."""
    return read_config_file(str(CPU_RECIPE))


def model_sizes() -> dict:
    """The recipe model's layers, d_model, heads and d_ff."""
    model, _ = cpu_recipe()
    return {name: model[name] for name in SIZES}
