"""The ``graphformer`` command: train, evaluate, translate, average, animate, heatmap.

    graphformer train --task copy --out runs/copy
    graphformer evaluate runs/copy --split test --json
    echo "h e l l o" | graphformer translate runs/copy

`parser` builds the command line from the config dataclasses and `graphformer.choices`, one
module per command group runs it (`train`, `decode`, `average`, `draw`), `errors` turns what
stopped a command into one line and an exit status, and `main` ties them together. Commands
import their machinery when they run, so ``--help`` and argument errors need neither torch nor
DGL.
"""

from graphformer.cli.main import main
from graphformer.cli.parser import at_least_one, build_parser, command_parser, option_help
from graphformer.cli.train import train_configs
from graphformer.training.config_file import read_config_file

__all__ = ["main", "build_parser", "command_parser", "option_help", "at_least_one", "train_configs", "read_config_file"]
