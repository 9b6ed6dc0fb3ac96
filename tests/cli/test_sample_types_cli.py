"""Edge types that come with each sample, through the command line: a parse tree's roles and hop
distances on ListOps, types given in a typed edges file, and the runs they cannot serve refused
in one line, exit 2, before anything is written."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import TINY_MODEL, read_jsonl, small_copy_data, snapshot, write_typed_edges

from graphformer.attention import unavailable
from graphformer.catalog import BACKENDS
from graphformer.cli import main
from graphformer.data import listops
from graphformer.graphs.sample_types import CLS_TOKEN, TOKEN_CLS

# Mean pooling: the label reads every node, so every edge's type has a gradient even in one layer.
LISTOPS = ["--task", "listops", "--model", "encoder", "--positions", "none", "--pooling", "mean"]
TREE = ["--enc-attention", "window:1+parse-tree"]
FAST = ["--batch-size", "16", "--warmup", "4", "--lr-factor", "2", *TINY_MODEL]
TYPED = ["--task", "parallel", "--enc-attention", "window:1+edges", "--epochs", "1", *TINY_MODEL]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("graphformer: error: "), err
    return err


def learned_rows(run) -> list[bool]:
    """Which rows of the first encoder layer's bias table moved from zero."""
    weights = torch.load(run / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    return weights["encoder.layers.0.edges.uses.0.table"].abs().sum(1).gt(0).tolist()


@pytest.fixture(scope="module")
def listops_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("listops") / "data"
    return listops.write_listops(
        folder, seed=1, min_length=8, max_length=30, sizes={"train": 96, "valid": 16, "test": 16}
    )


@pytest.mark.parametrize("spec", ["role", "hops:3"])
def test_listops_trains_and_evaluates_with_the_trees_edge_types(listops_data, tmp_path, capsys, spec):
    """Without positions, the tree's roles (or hop distances) are what tells the edges apart: the
    loss falls, evaluate reads the run back, and the rows of the ids the trees give are learned."""
    run = tmp_path / "run"
    argv = ["train", *LISTOPS, *TREE, "--data-dir", str(listops_data), "--out", str(run), "--epochs", "3"]
    assert main([*argv, "--enc-edges", f"bias={spec}", *FAST]) == 0
    losses = [row["loss"] for row in read_jsonl(run / "steps.jsonl")]
    assert sum(losses[-4:]) / 4 < sum(losses[:4]) / 4 - 0.1
    capsys.readouterr()
    assert main(["evaluate", str(run), "--split", "test", "--json"]) == 0
    assert 0 <= json.loads(capsys.readouterr().out)["accuracy"] <= 1
    rows = learned_rows(run)
    if spec == "role":  # every role but the <cls> links (pooling mean: no <cls> node) occurs
        assert rows == [t not in (CLS_TOKEN, TOKEN_CLS) for t in range(len(rows))]
    else:  # 0..3 hops and farther: window:1 and the tree's own edges are 1 hop apart, a node 0
        assert len(rows) == 5 and rows[:2] == [True, True]


@pytest.fixture(scope="module")
def typed_data(tmp_path_factory):
    return write_typed_edges(small_copy_data(tmp_path_factory.mktemp("typed") / "data", n_train=48))


def test_given_types_from_a_typed_edges_file_train_and_evaluate(typed_data, tmp_path, capsys):
    """given:3 reads enc.types' three names; the window's edges the file does not list get id 3."""
    run = tmp_path / "run"
    argv = ["train", *TYPED, "--data-dir", str(typed_data), "--out", str(run), "--epochs", "2", "--warmup", "4"]
    assert main([*argv, "--enc-edges", "bias=given:3"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--split", "valid", "--json", "--beam", "1"]) == 0
    assert 0 <= json.loads(capsys.readouterr().out)["token_accuracy"] <= 1
    assert learned_rows(run) == [True, True, False, True]  # self, next, parent (never listed), unlisted


def untyped(data):
    for split in ("train", "valid", "test"):
        path = data / f"{split}.enc.edges"
        path.write_text("".join(" ".join(p.split(":")[0] for p in line.split()) + "\n" for line in path.open()))


def two_names(data):
    (data / "enc.types").write_text("self\nnext\n")


REFUSED = [
    (untyped, ["--enc-edges", "bias=given:3"], "gives no types, but the run's enc edge types are given:3"),
    (two_names, ["--enc-edges", "bias=given:3"], "enc.types lists 2 types but the run declares given:3"),
    (None, ["--enc-edges", "bias=given:3,2"], "edges files carry no features"),
    (None, ["--enc-attention", "window:1", "--enc-edges", "bias=given:3"], "--enc-edges 'given:3': given types come"),
    (None, ["--enc-attention", "window:1", "--enc-edges", "bias=hops:2"], "--enc-edges 'hops:2': hops count steps"),
    (None, ["--dec-edges", "bias=role"], "--dec-edges 'role': tree roles type the encoder's edges (enc) only"),
    (None, ["--cross-edges", "shaw=role"], "--cross-edges 'role': tree roles type the encoder's edges (enc) only"),
]


@pytest.mark.parametrize("change, flags, message", REFUSED)
def test_what_per_sample_types_cannot_serve_is_refused_before_anything_is_written(
    typed_data, tmp_path, capsys, change, flags, message
):
    data = tmp_path / "data"
    data.mkdir()
    for path in typed_data.iterdir():
        (data / path.name).write_bytes(path.read_bytes())
    if change:
        change(data)
    before, run = snapshot(data), tmp_path / "run"
    assert main(["train", *TYPED, "--data-dir", str(data), "--out", str(run), *flags]) == 2
    assert message in one_line_error(capsys)
    assert not run.exists() and snapshot(data) == before


@pytest.mark.parametrize("backend", [e.name for e in BACKENDS.entries() if not e.can("edge-type-bias")])
def test_a_backend_that_cannot_read_edge_types_is_refused_with_roles(listops_data, tmp_path, capsys, backend):
    run = tmp_path / "run"
    argv = ["train", *LISTOPS, *TREE, "--data-dir", str(listops_data), "--out", str(run), *FAST]
    assert main([*argv, "--enc-edges", "bias=role", "--attention-backend", backend]) == 2
    err = one_line_error(capsys)
    if unavailable(backend) is None:  # else the stack's lack of it is what the line says
        assert f"--attention-backend {backend} cannot add the edge biases" in err and "edge-type-bias" in err
    assert not run.exists()
