"""`evaluating`: eval mode for a block, the caller's mode back afterwards, even after an error."""

import pytest
import torch

from graphformer.model.modes import evaluating


@pytest.mark.parametrize("training", [True, False])
def test_evaluating_restores_the_mode(training):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)).train(training)
    with evaluating(model):
        assert not model.training and not model[1].training
    assert model.training == training and model[1].training == training


def test_evaluating_restores_the_mode_after_an_exception():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)).train()
    with pytest.raises(RuntimeError, match="inside"):
        with evaluating(model):
            raise RuntimeError("inside")
    assert model.training and model[1].training
