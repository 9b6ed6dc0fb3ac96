"""Character accuracy: positions decoded right over the longer of output and reference, against
counts written out by hand."""

import pytest

from graphformer.evaluation.scores import char_accuracy


@pytest.mark.parametrize(
    "outputs,references,expected",
    [
        ([[1, 2, 3]], [[1, 2, 3]], 1.0),
        ([[1, 9, 3]], [[1, 2, 3]], 2 / 3),
        ([[1, 2]], [[1, 2, 3]], 2 / 3),  # a missing token is a wrong position
        ([[1, 2, 3, 4]], [[1, 2, 3]], 3 / 4),  # and so is an extra one
        ([[3, 2, 1]], [[1, 2, 3]], 1 / 3),  # by position, not by content
        ([[1], [5, 6, 7]], [[2], [5, 6, 7]], 3 / 4),  # pooled over sentences, not averaged
        ([[]], [[]], 0.0),
    ],
)
def test_char_accuracy_counts_positions(outputs, references, expected):
    assert char_accuracy(outputs, references) == pytest.approx(expected)
