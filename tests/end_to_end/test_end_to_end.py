"""End to end from the command line, as a user runs it: train copy with the default model,
evaluate, translate (about a minute on 2 idle cores).

What a short training reliably learns is asserted with a margin (on one machine, 3 epochs gave
token accuracy 0.98 and exact match 0.83 on the in-distribution test split); decoded strings
are checked for structure only, since the exact output of a barely trained model depends on
the last bits of rounding, which differ between CPUs.
"""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_copy_task_learns_from_the_command_line(tmp_path):
    run = tmp_path / "copy"
    cmd = [sys.executable, "-m", "graphformer"]
    train = subprocess.run(
        [*cmd, "train", "--task", "copy", "--out", str(run), "--epochs", "3", "--quiet"],
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert train.returncode == 0, train.stderr[-2000:]
    assert "done (step" in train.stdout
    evaluate = subprocess.run(
        [*cmd, "evaluate", str(run), "--split", "test", "--beam", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    scores = json.loads(evaluate.stdout)
    assert scores["n"] == 1000
    assert scores["token_accuracy"] > 0.9 and scores["exact_match"] > 0.5, scores

    test_src = (run / "data" / "test.src").read_text().splitlines()[:20]
    test_tgt = (run / "data" / "test.tgt").read_text().splitlines()[:20]
    out = subprocess.run(
        [*cmd, "translate", str(run), "--beam", "3"],
        input="\n".join(test_src) + "\n",
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert out.returncode == 0, out.stderr
    decoded = out.stdout.splitlines()
    assert len(decoded) == len(test_src)
    vocabulary = set(json.loads((run / "vocab.json").read_text())["tgt"])
    assert all(token in vocabulary for line in decoded for token in line.split())
    assert sum(d == t for d, t in zip(decoded, test_tgt)) >= 5  # in-distribution: most are copied exactly
