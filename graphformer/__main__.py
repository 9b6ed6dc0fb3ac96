"""``python -m graphformer``: the ``graphformer`` command (see `graphformer.cli`)."""

import sys

from graphformer.cli import main

sys.exit(main())
