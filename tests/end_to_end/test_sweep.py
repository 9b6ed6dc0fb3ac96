"""The long-range pattern sweep (examples/long_range/sweep.py) on a tiny recall task."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import reference_backend

SWEEP = Path(__file__).resolve().parents[2] / "examples" / "long_range" / "sweep.py"


@pytest.mark.slow
def test_sweep_tabulates_every_pattern(tmp_path):
    out = tmp_path / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            str(SWEEP),
            "--task",
            "recall",
            "--length",
            "16",
            "--patterns",
            "full,narrow=window:1",
            "--steps",
            "4",
            "--minutes",
            "30",
            "--sizes",
            "48,16,16",
            "--batch-tokens",
            "256",
            "--train-options",
            "--layers 1 --d-model 32 --heads 4 --d-ff 64",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "sweep.json").read_text())
    rows = {r["name"]: r for r in result["rows"]}
    assert set(rows) == {"full", "narrow"} and result["length"] == 16
    n = 17  # 16 tokens and </s>
    assert rows["full"]["edges_per_query"] == n
    assert rows["narrow"]["edges_per_query"] == pytest.approx((n + 2 * (n - 1)) / n)  # itself and 2 neighbours
    # one layer of window:1: the query meets the 2 tokens before it, of 15; chance elsewhere (10 values)
    assert rows["narrow"]["reach"] == pytest.approx(2 / 15, abs=1e-6)
    assert rows["narrow"]["accuracy_bound"] == pytest.approx(2 / 15 + 13 / 15 / 10, abs=1e-6)
    assert rows["full"]["reach"] == rows["full"]["accuracy_bound"] == 1.0
    for row in rows.values():
        assert row["steps"] == 4 and 0.0 <= row["accuracy"] <= 1.0  # the step budget ended first
        assert 0 < row["training_minutes"] < 30
        assert row["seconds_per_step"] > 0 and row["peak_rss_bytes"] > result["baseline_rss_bytes"]
        assert row["step_bytes"] >= 0
    table = (out / "sweep.md").read_text()
    assert "| narrow | `window:1` |" in table and "| full | `full` |" in table
    assert "4 steps or 30 minutes, whichever ends first," in table and result["minutes"] == 30
    assert (out / "sweep.png").stat().st_size > 1000
    again = subprocess.run(
        [sys.executable, str(SWEEP), "--task", "recall", "--length", "16", "--patterns", "nothing", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode != 0 and "unknown pattern 'nothing'" in again.stderr
    longer = subprocess.run(
        [sys.executable, str(SWEEP), "--task", "recall", "--length", "32", "--patterns", "full", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert longer.returncode != 0 and "holds a sweep with other options (length: 16 there, 32 here" in longer.stderr
    assert json.loads((out / "sweep.json").read_text())["length"] == 16  # the finished sweep is kept


STEP_MEMORY = SWEEP.with_name("step_memory.py")


def test_step_memory_grows_with_the_patterns_edges(tmp_path):
    """With the edge-wise backend, full attention over 1024 tokens holds (heads x L x L) scores per
    layer; a window of one holds 3 per token: the full pattern's step must need several times the
    memory. (PyTorch's fused attention, which `padded` uses for full attention on equal lengths,
    holds no scores at all: the measure must not count on the backend.)"""
    from graphformer.model.config import ModelConfig
    from graphformer.training.config import TrainConfig
    from graphformer.training.run_dir import RunDir

    measured = {}
    for spec in ("full", "window:1"):
        run = RunDir(tmp_path / spec.replace(":", "-"))
        run.create()
        run.write_config(
            ModelConfig(
                src_vocab=40,
                tgt_vocab=14,
                model="encoder",
                pooling="mean",
                layers=1,
                d_model=32,
                heads=4,
                d_ff=64,
                max_len=1100,
                enc_attention=spec,
            ),
            TrainConfig(task="recall", threads=1, attention_backend=reference_backend()),
        )
        proc = subprocess.run(
            [sys.executable, str(STEP_MEMORY), str(run.path), "--length", "1024", "--batch-tokens", "2048"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(proc.stdout)
        assert result["samples"] == 2 and result["length"] == 1024
        measured[spec] = result["step_bytes"]
    scores = 2 * 4 * 1025 * 1025 * 4  # samples x heads x (L + </s>)^2 float32: one score tensor
    assert measured["full"] > scores
    assert measured["full"] > 4 * measured["window:1"]


def test_reach_is_read_where_the_pooling_reads_the_label(tmp_path):
    """One layer of window:1 over 16 tokens: the query meets the 2 tokens before it somewhere
    (mean pooling reads every node), but the closing </s> hears only the query itself (last
    pooling), while a <cls> node hears everything."""
    from graphformer.model.config import ModelConfig
    from graphformer.training.config import TrainConfig
    from graphformer.training.run_dir import RunDir

    sweep = _import_sweep()
    run = RunDir(tmp_path / "run")
    run.create()
    run.write_config(
        ModelConfig(
            src_vocab=40,
            tgt_vocab=14,
            model="encoder",
            pooling="mean",
            layers=1,
            d_model=32,
            heads=4,
            d_ff=64,
            max_len=20,
            enc_attention="window:1",
        ),
        TrainConfig(task="recall"),
    )
    assert sweep.reach("window:1", 16, "mean", run.path) == pytest.approx(2 / 15, abs=1e-6)
    assert sweep.reach("window:1", 16, "last", run.path) == 0.0
    assert sweep.reach("window:1", 16, "cls", run.path) == 1.0


def test_a_parse_tree_is_measured_on_the_test_samples_own_graphs(tmp_path):
    """Edges per query of the parse tree over the test split: each of a sample's n tokens joins
    its operator both ways, and its n + 1 nodes loop on themselves: 3n + 1 edges over n + 1 nodes."""
    from graphformer.data import listops

    sweep = _import_sweep()
    data = listops.write_listops(tmp_path, seed=1, min_length=8, max_length=40, sizes={"test": 12})
    lengths = [len(line.split()) for line in (data / "test.src").read_text().splitlines()]
    expected = sum(3 * n + 1 for n in lengths) / sum(n + 1 for n in lengths)
    assert sweep.edges_per_query("parse-tree", 40, "last", data) == pytest.approx(expected)
    with_window = sweep.edges_per_query("window:1+parse-tree", 40, "last", data)
    assert expected < with_window < expected + 2  # the window's neighbours, less those the tree has


def test_patterns_split_at_commas_but_not_inside_a_specs_numbers():
    sweep = _import_sweep()
    specs = sweep.pattern_specs("full,dilated=window:2+dilated:4,8,mine=block:8,tree")
    assert specs == {
        "full": "full",
        "dilated": "window:2+dilated:4,8",
        "mine": "block:8",
        "tree": sweep.PATTERNS["tree"],
    }


def _import_sweep():
    """The sweep script as a module (it is an example, not part of the package), importing its
    sibling modules as it does when run."""
    import importlib.util

    if str(SWEEP.parent) not in sys.path:
        sys.path.append(str(SWEEP.parent))
    spec = importlib.util.spec_from_file_location("sweep", SWEEP)
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    return sweep


def test_the_sweep_generates_boolean_formulas_of_the_lengths_asked(tmp_path):
    sweep = _import_sweep()
    data = sweep.make_data("boolean", 60, {"train": 5, "valid": 3, "test": 3}, 1, tmp_path / "data", 20)
    lengths = [len(line.split()) for line in (data / "train.src").read_text().splitlines()]
    assert len(lengths) == 5 and all(20 <= n <= 60 for n in lengths)
    assert set((data / "test.tgt").read_text().split()) <= {"0", "1"}
