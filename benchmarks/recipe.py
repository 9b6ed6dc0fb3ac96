"""The Multi30k CPU recipe (``examples/multi30k/cpu.yaml``, what ``cpu.sh`` trains): the benchmarks
size their Multi30k models by it, so a change to the recipe changes them too."""

from __future__ import annotations

from benchmarks.harness import ROOT
from graphformer.cli import read_config_file

CPU_RECIPE = ROOT / "examples" / "multi30k" / "cpu.yaml"
# The recipe's (model, train) options, as ``graphformer train --config`` reads them (read once).
RECIPE_MODEL, RECIPE_TRAIN = read_config_file(str(CPU_RECIPE))
# The recipe model's layers, d_model, heads and d_ff.
MODEL_SIZES = {name: RECIPE_MODEL[name] for name in ("layers", "d_model", "heads", "d_ff")}
