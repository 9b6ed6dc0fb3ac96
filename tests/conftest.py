import os
import random
import signal

import pytest
import torch

os.environ.setdefault("DGLBACKEND", "pytorch")


@pytest.fixture(autouse=True, scope="session")
def _ctrl_c_raises():
    """Tests of Ctrl-C need it to reach the test process and the commands it starts. A shell runs
    a background job (``make test &``, a CI runner's) with SIGINT ignored, and every process after
    it inherits that; give the suite the disposition of a foreground run."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture(autouse=True)
def _seed():
    random.seed(0)
    torch.manual_seed(0)
