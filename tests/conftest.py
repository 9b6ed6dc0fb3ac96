import os
import random

import pytest
import torch

os.environ.setdefault("DGLBACKEND", "pytorch")


@pytest.fixture(autouse=True)
def _seed():
    random.seed(0)
    torch.manual_seed(0)
