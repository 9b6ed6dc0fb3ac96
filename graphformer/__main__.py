import sys

from graphformer.cli import main

sys.exit(main())
