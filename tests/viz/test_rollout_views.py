"""``graphformer attend --show rollout|flow`` and `graphformer.viz.draw_rollout`: the shares drawn
(read back from ``--save-maps`` and from the figure itself) are `rollout`'s and `flow`'s on the
decoded output; on a parse tree the graph view colours each node by the chosen query's row; a
universal model composes its ACT steps; and bad input is one line that writes nothing."""

import numpy as np
import pytest
import torch
from helpers import TINY_MODEL, saved_dense, small_copy_data, train_tiny
from test_attend import mirrored, mirrored_data, refused
from test_attend_steps import halting
from test_rollout import within_hops
from test_step_rollout import dense_step_rollout

import graphformer.viz
from graphformer.cli import main
from graphformer.data import listops
from graphformer.decoding import translate_ids
from graphformer.graphs import make_batch
from graphformer.graphs.sample_edges import parse_tree
from graphformer.running.loaded import LoadedRun
from graphformer.viz import edge_maps, flow, rollout
from graphformer.viz.rollout_views import QUERY_RING, draw_rolled
from graphformer.viz.step_maps import sublayer_step_maps

FORMULA = "[SM [MAX 7 [MIN 4 7 0 ] ] 6 [MED 2 [MAX 1 3 ] ] ]"
LAYERS = 2


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """A tiny encoder-decoder trained 2 epochs on copy, and its data."""
    root = tmp_path_factory.mktemp("rollout-copy")
    data = small_copy_data(root / "data", n_train=120)
    return train_tiny(data, root / "run", "--task", "parallel", "--epochs", "2", "--layers", str(LAYERS)), data


@pytest.fixture(scope="module")
def tree_run(tmp_path_factory):
    """A ListOps classifier that attends along each formula's parse tree, read at </s> (last pooling)."""
    root = tmp_path_factory.mktemp("rollout-tree")
    data = listops.write_listops(root / "data", seed=1, min_length=8, max_length=30,
                                 sizes={"train": 64, "valid": 8, "test": 8})  # fmt: skip
    options = ["--task", "listops", "--model", "encoder", "--positions", "none", "--pooling", "last"]
    argv = ["train", *options, "--data-dir", str(data), "--out", str(root / "run"), "--enc-attention", "parse-tree"]
    assert main([*argv, "--epochs", "1", "--batch-size", "16", *TINY_MODEL, "--layers", str(LAYERS)]) == 0
    return root / "run"


@pytest.fixture(scope="module")
def universal_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("rollout-universal")
    data = small_copy_data(root / "data", n_train=64)
    options = ["--task", "parallel", "--model", "universal", "--max-depth", "3", "--epochs", "1"]
    return train_tiny(data, root / "run", *options, layers=False), data


@pytest.fixture(scope="module")
def edges_run(tmp_path_factory):
    """A copy run whose encoder attends along each sample's own edges (test_attend's `mirrored`)."""
    root = tmp_path_factory.mktemp("rollout-edges")
    data = mirrored_data(root / "data")
    options = ["--task", "parallel", "--epochs", "1", "--enc-attention", "edges", "--layers", str(LAYERS)]
    return train_tiny(data, root / "run", *options), data


def decoded_batch(run, line, checkpoint="best"):
    """The run's model and the batch of ``line`` teacher-forced on its beam-1 output, built here."""
    loaded = LoadedRun(run, checkpoint)
    ids = loaded.src_vocab.encode(line.split())
    (hyp,) = translate_ids(loaded.model, [ids], beam=1)
    return loaded.model, make_batch(loaded.model.make_pool(), [ids], [hyp.tokens])


def tree_batch(run, formula=FORMULA):
    loaded = LoadedRun(run)
    words = formula.split()
    batch = make_batch(loaded.model.make_pool(), [loaded.src_vocab.encode(words)], edges=[parse_tree(words)])
    return loaded.model, batch


def test_the_rollout_drawn_and_saved_is_rollouts_through_cross_attention(copy_run, tmp_path):
    run, data = copy_run
    line = (data / "test.src").read_text().splitlines()[0]
    out, saved = tmp_path / "r.png", tmp_path / "r.pt"
    argv = ["attend", str(run), "--input", line, "--show", "rollout", "--beam", "1", "-o", str(out)]
    assert main([*argv, "--save-maps", str(saved)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    (rolled,) = saved_dense(saved)
    model, batch = decoded_batch(run, line)
    expected = rollout(model, batch, "cross")
    assert set(rolled["maps"]) == {"cross"} and rolled["maps"]["cross"].shape == (1, 1, *expected.shape)
    torch.testing.assert_close(rolled["maps"]["cross"][0, 0], expected, rtol=0, atol=1e-6)
    queries, keys = rolled["tokens"]["cross"]
    assert queries[0] == "<s>" and keys == [*line.split(), "</s>"]
    # From Python, the same shares; the figure's heatmap holds them, ticked with the tokens.
    (again,) = graphformer.viz.draw_rollout(run, [line], beam=1)
    figure = draw_rolled(again)
    heatmap = figure.axes[0]
    np.testing.assert_array_equal(np.asarray(heatmap.images[0].get_array()), again.shares)
    np.testing.assert_allclose(again.shares, expected.numpy(), rtol=0, atol=1e-6)
    assert [t.get_text() for t in heatmap.get_xticklabels()] == keys
    assert heatmap.images[0].norm.vmax == pytest.approx(float(expected.max()))
    assert "rollout: the source tokens each output depends on" in figure.get_suptitle()
    assert f"{LAYERS} layers, heads averaged" == heatmap.get_title()


def test_a_parse_tree_colours_each_node_by_the_share_that_reaches_the_root(tree_run, tmp_path):
    (rolled,) = graphformer.viz.draw_rollout(tree_run, [FORMULA], tmp_path / "tree.svg")
    assert (tmp_path / "tree.svg").read_text().lstrip().startswith("<?xml")
    model, batch = tree_batch(tree_run)
    root = len(FORMULA.split())  # </s>, which the parse tree joins to the root operator
    assert rolled.query == root and rolled.sublayer == "enc"
    np.testing.assert_allclose(rolled.shares, rollout(model, batch, "enc").numpy(), rtol=0, atol=1e-6)
    figure = draw_rolled(rolled)
    tree = tree_panel(figure)
    nodes, ring = tree.collections[1], tree.collections[2]  # the edges come first
    row = rollout(model, batch, "enc", queries=[root])[0].numpy()
    np.testing.assert_allclose(np.asarray(nodes.get_array()), row, rtol=0, atol=1e-6)
    # The colour of each node is its share on the tree's scale: 0 to the largest share of another node.
    assert nodes.norm.vmin == 0 and nodes.norm.vmax == pytest.approx(float(np.delete(row, root).max()))
    expected_rgba = nodes.cmap(nodes.norm(row))
    np.testing.assert_allclose(nodes.get_facecolors(), expected_rgba, rtol=0, atol=1e-6)
    # The leaves that reach the root are those within LAYERS edges of it.
    reached = within_hops(edge_maps(model, batch, "enc"), root, LAYERS)
    assert set(np.nonzero(row > 0)[0].tolist()) == reached and len(reached) < root
    assert tuple(ring.get_offsets()[0]) == tuple(nodes.get_offsets()[root])
    np.testing.assert_allclose(ring.get_edgecolors()[0][:3], np.array(matplotlib_rgb(QUERY_RING)), atol=1e-6)
    assert [t.get_text() for t in tree.texts] == rolled.tokens["enc"][1]


def tree_panel(figure):
    (tree,) = [ax for ax in figure.axes if ax.get_title().startswith("on the sample's graph")]
    return tree


def matplotlib_rgb(name):
    from matplotlib.colors import to_rgb

    return to_rgb(name)


def test_flow_of_one_query_on_the_command_line_is_flows(tree_run, tmp_path):
    saved = tmp_path / "flow.pt"
    argv = ["attend", str(tree_run), "--input", FORMULA, "--show", "flow", "--query", "3", "--save-maps", str(saved)]
    assert main(argv) == 0
    (rolled,) = saved_dense(saved)
    model, batch = tree_batch(tree_run)
    expected = flow(model, batch, "enc", queries=[3])
    assert rolled["maps"]["enc"].shape == (1, 1, 1, len(FORMULA.split()) + 1)
    torch.testing.assert_close(rolled["maps"]["enc"][0, 0], expected, rtol=0, atol=1e-6)
    assert rolled["tokens"]["enc"][0] == [FORMULA.split()[3]]
    (drawn,) = graphformer.viz.draw_rollout(tree_run, [FORMULA], show="flow", query=3)
    nodes = tree_panel(draw_rolled(drawn)).collections[1]  # the tree colours the one row drawn
    np.testing.assert_allclose(np.asarray(nodes.get_array()), expected[0].numpy(), rtol=0, atol=1e-6)


def test_through_cross_attention_the_samples_graph_is_coloured_by_an_outputs_row(edges_run, tmp_path):
    run, data = edges_run
    line = (data / "test.src").read_text().splitlines()[0]
    edges = tmp_path / "in.enc.edges"
    edges.write_text((data / "test.enc.edges").read_text().splitlines()[0] + "\n")
    (rolled,) = graphformer.viz.draw_rollout(run, [line], edges=edges, query=1, beam=1)
    loaded = LoadedRun(run)
    ids = loaded.src_vocab.encode(line.split())
    given = [[(k, q) for k, q in mirrored(len(ids))]]
    (hyp,) = translate_ids(loaded.model, [ids], beam=1, edges=given)
    batch = make_batch(loaded.model.make_pool(), [ids], [hyp.tokens], given)
    expected = rollout(loaded.model, batch, "cross", queries=[1])
    np.testing.assert_allclose(rolled.shares, expected.numpy(), rtol=0, atol=1e-6)
    enc = edge_maps(loaded.model, batch, "enc")  # the graph is kept as its edges: (queries, keys)
    assert set(zip(*(a.tolist() for a in rolled.graph))) == set(zip(enc.queries.tolist(), enc.keys.tolist()))
    tree = tree_panel(draw_rolled(rolled))
    nodes = tree.collections[1]
    np.testing.assert_allclose(np.asarray(nodes.get_array()), expected[0].numpy(), rtol=0, atol=1e-6)
    assert nodes.norm.vmax == pytest.approx(float(expected.max()))  # no query node of its own to leave out
    assert len(tree.collections) == 2 and "reaching output 1" in tree.get_title()  # no ring: not a node here


def test_a_universal_model_composes_its_act_steps(universal_run, tmp_path):
    run, data = universal_run
    line = (data / "test.src").read_text().splitlines()[0]
    varied = halting(run, tmp_path / "varied.pt", weight_std=3.0, bias=0.0)
    saved = tmp_path / "steps.pt"
    argv = ["attend", str(run), "--input", line, "--show", "rollout", "--sublayer", "enc", "--beam", "1"]
    assert main([*argv, "--checkpoint", str(varied), "--save-maps", str(saved), "-o", str(tmp_path / "u.png")]) == 0
    (rolled,) = saved_dense(saved)
    model, batch = decoded_batch(run, line, str(varied))
    stepped = sublayer_step_maps(model, batch, ("enc",))
    assert len(set(stepped["enc"].ponder.tolist())) > 1, "the redrawn halting units should stop tokens apart"
    expected = dense_step_rollout(stepped, "enc")  # numpy, in float64 from the same maps, halted rows the identity
    np.testing.assert_allclose(rolled["maps"]["enc"][0, 0].numpy(), expected, rtol=0, atol=1e-5)
    assert rolled["ponder"]["enc"] == stepped["enc"].ponder.tolist()


def test_bad_input_is_one_line_and_writes_nothing(copy_run, tree_run, universal_run, tmp_path, capsys, monkeypatch):
    run, data = copy_run
    line = (data / "test.src").read_text().splitlines()[0]
    out = tmp_path / "out.png"
    roll = ["--input", line, "--show", "rollout", "--beam", "1"]
    refused(capsys, [*roll, "--query", "99"], run, out, "--query 99 is not a cross query of input line 1")
    refused(capsys, [*roll, "--head", "1"], run, out, "--head 1: rollout averages the heads")
    refused(capsys, [*roll, "--top", "2"], run, out, "--top 2: rollout draws each query's shares of every input")
    refused(capsys, [*roll, "--layer", str(LAYERS)], run, out, f"--layer {LAYERS} is out of range")
    refused(capsys, roll, run, tmp_path / "out.html", "cannot write a rollout or flow", ".html is not a format")
    refused(capsys, ["--input", line, "--query", "0"], run, out, "--query picks a row of rollout or flow")
    monkeypatch.setattr("graphformer.viz.attention_flow.FLOW_LIMIT", 1000)
    argv = ["--input", FORMULA, "--show", "flow"]
    refused(capsys, argv, tree_run, out, "input line 1: attention flow for", "over the limit of 1,000", "--query N")
    monkeypatch.undo()
    universal, data = universal_run
    at_once = halting(universal, tmp_path / "at-once.pt", weight_std=0.0, bias=20.0)  # every token halts at once
    argv = ["--input", line, "--show", "flow", "--sublayer", "enc", "--checkpoint", str(at_once), "--layer", "1"]
    refused(capsys, argv, universal, out, "every enc query of input line 1 halted within 1 ACT step", "from 0 to 0")
    refused(capsys, [*argv[:-1], "3"], universal, out, "--layer 3 is out of range")
