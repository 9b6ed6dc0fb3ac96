"""End to end from the command line: train copy, evaluate, translate (about 2 minutes)."""
import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_copy_task_learns_from_the_command_line(tmp_path):
    run = tmp_path / "copy"
    cmd = [sys.executable, "-m", "graphformer"]
    train = subprocess.run([*cmd, "train", "--task", "copy", "--out", str(run), "--layers", "2", "--d-model", "128",
                            "--heads", "4", "--d-ff", "256", "--lr-factor", "0.5", "--batch-size", "64",
                            "--epochs", "6", "--quiet"], capture_output=True, text=True, timeout=1200)
    assert train.returncode == 0, train.stderr[-2000:]
    evaluate = subprocess.run([*cmd, "evaluate", str(run), "--split", "test", "--json"],
                              capture_output=True, text=True, timeout=600)
    scores = json.loads(evaluate.stdout)
    assert scores["n"] == 1000
    assert scores["token_accuracy"] > 0.99 and scores["exact_match"] > 0.9, scores
    out = subprocess.run([*cmd, "translate", str(run), "--beam", "3"], input="a b c d e f g\nz z y\n",
                         capture_output=True, text=True, timeout=600)
    assert out.stdout.splitlines() == ["a b c d e f g", "z z y"]
