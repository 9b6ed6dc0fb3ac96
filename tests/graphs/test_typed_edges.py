"""Typed edges files (key-query:type and a names file beside them): read back as written, old files
still valid, and every bad input refused in one line naming the file and line, through the reader
and through `train`, which reads edges files before it writes anything. The runs that use the
types (``--enc-edges bias=given:3``) are in tests/cli/test_edges_cli.py.
"""

import pytest
import torch
from helpers import TINY_MODEL, TYPE_NAMES, small_copy_data, snapshot, write_typed_edges

from graphformer.cli import main
from graphformer.errors import UserError
from graphformer.graphs import ENC, GraphPool, make_batch
from graphformer.graphs.sample_edges import read_edges_file

NAMES = TYPE_NAMES


def test_a_typed_file_reads_back_as_written_and_types_the_batch(tmp_path):
    (tmp_path / "enc.types").write_text(NAMES)
    path = tmp_path / "train.enc.edges"
    path.write_text("0-1:parent 1-0:next 2-2:0\n\n")
    pool = GraphPool("window:1+edges", edge_types={"enc": "given:3"})
    edges = read_edges_file(path, pool, ENC, [(3, 1), (2, 1)])
    assert [(e[0].tolist(), e[1].tolist(), e[2].tolist()) for e in edges] == [
        ([0, 1, 2], [1, 0, 2], [2, 1, 0]),
        ([], [], []),
    ]
    batch = make_batch(pool, [[5, 6], [7]], [[5], [6]], edges=edges)
    relation = batch.relation(ENC)
    types = dict(zip(zip(relation.u.tolist(), relation.v.tolist()), relation.edge_types.tolist()))
    assert types == {(0, 0): 3, (0, 1): 2, (1, 0): 1, (1, 1): 3, (1, 2): 3, (2, 1): 3, (2, 2): 0} | {
        (a + 3, b + 3): 3 for a in range(2) for b in range(2)
    }


def test_an_untyped_file_reads_as_before_and_is_refused_where_types_are_given(tmp_path):
    path = tmp_path / "train.enc.edges"
    path.write_text("0-1 1-0\n")
    (u, v), *_ = read_edges_file(path, GraphPool("window:1+edges"), ENC, [(2, 1)])
    assert (u.tolist(), v.tolist()) == ([0, 1], [1, 0])
    with pytest.raises(UserError, match="gives no types, but the run's enc edge types are given:3"):
        read_edges_file(path, GraphPool("window:1+edges", edge_types={"enc": "given:3"}), ENC, [(2, 1)])


@pytest.mark.parametrize(
    "names,edges,named",
    [
        (NAMES, "0-1:parent\n0-1:\n", "train.enc.edges: line 2: '0-1:' has a malformed type"),
        (NAMES, "0-1:parent\n0-1:a:b\n", "train.enc.edges: line 2: '0-1:a:b' has a malformed type"),
        (NAMES, "0-1:prent\n", "train.enc.edges: line 1: '0-1:prent': unknown type 'prent' (did you mean parent?)"),
        (NAMES, "0-1:3\n", "train.enc.edges: line 1: '0-1:3': type id 3 is outside the declared types 0..2"),
        (NAMES, "0-1:0\n1-0\n", "train.enc.edges: line 2: '1-0' has no type, but this file gives its pairs one"),
        (NAMES, "0-1:0\n0_1:0\n", "train.enc.edges: line 2: '0_1' is not a key-query pair"),
        (NAMES, "0-1:0\n0-5:0\n", "train.enc.edges: line 2: edge 0-5 is outside the sample"),
        (None, "0-1:0\n", "enc.types is missing: a typed edges file"),
        ("self\n7\n", "0-1:0\n", "enc.types: line 2: the type name '7' is digits alone"),
        ("self\nnext\nself\n", "0-1:0\n", "enc.types: line 3: the type name 'self' is listed twice"),
        ("self\n\n", "0-1:0\n", "enc.types: line 2: the type name '' is empty"),
        ("a b\n", "0-1:0\n", "enc.types: line 1: the type name 'a b' is not a name"),
    ],
)
def test_bad_typed_files_are_refused_naming_file_and_line(tmp_path, names, edges, named):
    if names is not None:
        (tmp_path / "enc.types").write_text(names)
    path = tmp_path / "train.enc.edges"
    path.write_text(edges)
    lengths = [(3, 1)] * len(edges.splitlines())
    with pytest.raises(UserError, match=None) as err:
        read_edges_file(path, GraphPool("window:1+edges"), ENC, lengths)
    assert named in str(err.value) and str(tmp_path) in str(err.value)


def test_a_names_file_of_another_count_than_declared_is_refused(tmp_path):
    (tmp_path / "enc.types").write_text(NAMES)
    path = tmp_path / "train.enc.edges"
    path.write_text("0-1:0\n")
    with pytest.raises(UserError, match="enc.types lists 3 types but the run declares given:4"):
        read_edges_file(path, GraphPool("window:1+edges", edge_types={"enc": "given:4"}), ENC, [(2, 1)])
    with pytest.raises(UserError, match="edges files carry no features, but the run's enc edge types are given:3,2"):
        read_edges_file(path, GraphPool("window:1+edges", edge_types={"enc": "given:3,2"}), ENC, [(2, 1)])


@pytest.fixture
def typed_data(tmp_path):
    return write_typed_edges(small_copy_data(tmp_path / "data", n_train=16))


def train(data, run):
    argv = ["train", "--task", "parallel", "--data-dir", str(data), "--out", str(run), "--epochs", "1"]
    return main([*argv, "--enc-attention", "window:1+edges", *TINY_MODEL])


def test_train_reads_a_typed_edges_file(typed_data, tmp_path):
    assert train(typed_data, tmp_path / "run") == 0
    assert (tmp_path / "run" / "checkpoint_last.pt").is_file()


@pytest.mark.parametrize(
    "split,change,named",
    [
        ("train", lambda line: line.replace(":self", ":", 1), "train.enc.edges: line 2: '0-0:' has a malformed type"),
        ("valid", lambda line: line.replace(":self", ":slef", 1), "unknown type 'slef' (did you mean self?)"),
        ("test", lambda line: line.replace(":1", ":9", 1), "test.enc.edges: line 2: '0-1:9': type id 9 is outside"),
        ("train", lambda line: line.replace(":self", "", 1), "train.enc.edges: line 2: '0-0' has no type"),
    ],
)
def test_train_refuses_a_bad_typed_file_in_one_line_and_writes_nothing(
    typed_data, tmp_path, capsys, split, change, named
):
    path = typed_data / f"{split}.enc.edges"
    lines = path.read_text().splitlines()
    lines[1] = change(lines[1])
    path.write_text("".join(line + "\n" for line in lines))
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("an --out folder that holds no run yet\n")
    before = snapshot(run)
    assert train(typed_data, run) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("graphformer: error: ") and named in err, err
    assert snapshot(run) == before


def test_train_refuses_a_typed_file_without_its_names_and_leaves_no_run(typed_data, tmp_path, capsys):
    (typed_data / "enc.types").unlink()
    assert train(typed_data, tmp_path / "run") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{typed_data / 'enc.types'} is missing" in err, err
    assert not (tmp_path / "run").exists()


def test_types_survive_a_batch_on_their_edges_in_order(tmp_path):
    """The relation's types line up with its edges however the union is sorted: every listed pair
    keeps its own type, and a pair listed twice takes its first listing's."""
    (tmp_path / "enc.types").write_text(NAMES)
    path = tmp_path / "train.enc.edges"
    path.write_text("2-0:2 0-2:1 1-1:0 0-2:2\n")
    pool = GraphPool("edges+window:1", edge_types={"enc": "given:3"})
    batch = make_batch(pool, [[5, 6]], [[5]], edges=read_edges_file(path, pool, ENC, [(3, 1)]))
    relation = batch.relation(ENC)
    order = torch.argsort(relation.v * 10 + relation.u)
    assert torch.equal(order, torch.arange(len(order)))  # sorted by query, then key
    types = dict(zip(zip(relation.u.tolist(), relation.v.tolist()), relation.edge_types.tolist()))
    assert types[(2, 0)] == 2 and types[(0, 2)] == 1 and types[(1, 1)] == 0 and types[(0, 0)] == 3
