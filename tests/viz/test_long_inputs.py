"""Attention at any length: ListOps at 2,000 tokens on its parse tree and recall at 4,096 on a
window, through ``attend`` (Python and the command line) and a ``--viz-every`` recording, kept as
edges and drawn in blocks of tokens (`graphformer.viz.binned`); the blocks and the top edges
checked against an independent computation on the dense map of a smaller case; the page and the
animation player at 2,000 tokens opened in the headless browser of test_player."""

import warnings

import numpy as np
import pytest
import torch
from helpers import long_listops_data, snapshot, train_tiny
from test_attend import page_maps
from test_player import browser  # noqa: F401  (a fixture: the headless Chromium)
from torch.profiler import ProfilerActivity, profile

import graphformer.viz
import graphformer.viz.recording
from graphformer.cli import main
from graphformer.data import recall
from graphformer.viz.attend_views import load_maps
from graphformer.viz.binned import MAX_BINS, MAX_TOKEN_ROWS, drawn
from graphformer.viz.edge_maps import EdgeMaps
from graphformer.viz.on_demand import Attended
from graphformer.viz.recording import load_records, recorded_maps

LISTOPS_ATTENTION = ["--enc-attention", "window:1+parse-tree", "--positions", "none", "--pooling", "last"]


def random_maps(n_queries, n_keys, share=0.2, layers=2, heads=3, seed=0) -> EdgeMaps:
    """Edges at random (each query keeps at least one key), with random weights, some NaN (a halted query)."""
    generator = torch.Generator().manual_seed(seed)
    linked = torch.rand(n_queries, n_keys, generator=generator) < share
    linked[torch.arange(n_queries), torch.arange(n_queries) % n_keys] = True
    queries, keys = linked.nonzero(as_tuple=True)
    weights = torch.rand(layers, heads, len(keys), generator=generator)
    weights[-1, :, queries == 1] = float("nan")  # query 1 halted before the last step
    return EdgeMaps("enc", n_queries, n_keys, keys, queries, weights)


def test_blocks_hold_the_strongest_weight_of_the_dense_maps_block():
    maps = random_maps(203, 171)
    view = drawn(maps, [f"q{i}" for i in range(203)], [f"k{j}" for j in range(171)], max_bins=8)
    size_q, size_k = 26, 22  # ceil(203 / 8), ceil(171 / 8)
    dense = maps.dense().numpy()
    expected = np.full((2, 3, 8, 8), np.nan)
    for i in range(8):
        for j in range(8):
            block = dense[:, :, i * size_q : (i + 1) * size_q, j * size_k : (j + 1) * size_k].reshape(2, 3, -1)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN block: no edge
                expected[:, :, i, j] = np.nanmax(block, axis=-1)
    np.testing.assert_array_equal(view.weights, expected)  # a maximum picks one of the weights: exact
    assert view.queries[:2] == ["0-25", "26-51"] and view.queries[-1] == "182-202" and view.keys[-1] == "154-170"
    assert view.note == "203 tokens in blocks of 26 and 171 tokens in blocks of 22, block max"


def test_a_short_side_keeps_its_tokens_and_a_short_map_is_drawn_whole():
    maps = random_maps(30, 400, share=0.05)
    view = drawn(maps, [f"q{i}" for i in range(30)], [f"k{j}" for j in range(400)])
    assert view.weights.shape == (2, 3, 30, 58) and view.queries == [f"q{i}" for i in range(30)]  # ceil(400 / 7)
    assert view.keys[0] == "0-6" and "400 tokens in blocks of 7" in view.note
    short = random_maps(MAX_TOKEN_ROWS, 12)
    whole = drawn(short, [str(i) for i in range(MAX_TOKEN_ROWS)], [str(j) for j in range(12)])
    assert not whole.binned
    np.testing.assert_array_equal(whole.weights, short.dense().numpy())


def test_the_top_edges_view_keeps_each_dense_rows_k_largest():
    maps = random_maps(40, 50, share=0.3)
    kept, dense = maps.keep_top(3).dense(), maps.dense()
    for layer in range(2):
        for head in range(3):
            for query in range(40):
                row = dense[layer, head, query]
                present = (~row.isnan()).nonzero()[:, 0]
                largest = present[torch.argsort(row[present], descending=True)[:3]]
                shown = (~kept[layer, head, query].isnan()).nonzero()[:, 0]
                assert sorted(shown.tolist()) == sorted(largest.tolist())
                assert torch.equal(kept[layer, head, query, shown], row[shown])
    assert kept[-1, :, 1].isnan().all()  # a halted query shows nothing


def test_maps_read_back_from_edges_and_from_the_dense_arrays_older_files_hold():
    maps = random_maps(9, 7)
    for record in (maps.as_record(), maps.dense()):
        again = EdgeMaps.of_record("enc", record)
        torch.testing.assert_close(again.dense(), maps.dense(), equal_nan=True, rtol=0, atol=0)
    tokens = {"enc": ([str(i) for i in range(9)], [str(j) for j in range(7)])}
    given_dense = Attended("a line", {"enc": maps.dense()}, tokens, "output")  # as a rollout is kept
    assert torch.equal(given_dense.edges["enc"].keys, maps.keys)
    torch.testing.assert_close(given_dense.maps["enc"], maps.dense(), equal_nan=True, rtol=0, atol=0)


def tensors(value):
    """Every tensor in a nest of dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return [t for item in value for t in tensors(item)]
    return []


def assert_o_edges(saved, nodes: int):
    """Every tensor in ``saved`` (a recording or saved maps) holds O(edges) numbers, none nodes x nodes."""
    sizes = [t.numel() for t in tensors(saved)]
    # heads x layers x (edges < 12 n), under a quarter of one dense nodes x nodes map
    assert sizes and max(sizes) < 4 * 2 * 12 * nodes < nodes * nodes // 4


@pytest.fixture(scope="module")
def listops_run(tmp_path_factory):
    """A tiny tree encoder trained one epoch on short ListOps, whose first validation sample, the
    one ``--viz-every`` records, is an expression of about 2,000 tokens; and that expression."""
    root = tmp_path_factory.mktemp("long-listops")
    data, long = long_listops_data(root / "data")
    options = ["--task", "listops", "--model", "encoder", *LISTOPS_ATTENTION, "--epochs", "1", "--viz-every", "1"]
    return train_tiny(data, root / "run", *options), long


@pytest.fixture(scope="module")
def recall_run(tmp_path_factory):
    """A tiny encoder classifier on recall at 4,094 tokens (and <cls>, </s>: 4,096 nodes) over a
    window, trained one epoch with ``--viz-every``; and its first validation line."""
    root = tmp_path_factory.mktemp("long-recall")
    data = recall.write_recall(
        root / "data", seed=1, sizes={"train": 2, "valid": 1, "test": 1}, min_length=4094, max_length=4094
    )
    options = ["--task", "recall", "--model", "encoder", "--enc-attention", "window:4", "--positions", "none"]
    run = train_tiny(data, root / "run", *options, "--pooling", "cls", "--epochs", "1", "--viz-every", "1")
    return run, (data / "valid.src").read_text().splitlines()[0]


def test_a_listops_recording_at_2000_tokens_is_kept_as_edges_and_drawn_in_blocks(listops_run, tmp_path):
    run, long = listops_run
    nodes = len(long.split()) + 1  # and </s>
    records = load_records(run)
    assert [r["epoch"] for r in records] == [0, 1]
    for record in records:
        assert_o_edges(record, nodes)
        (enc,) = recorded_maps(record).values()
        assert (enc.n_queries, enc.n_keys) == (nodes, nodes) and enc.weights.shape[:2] == (1, 4)
    png = tmp_path / "enc.png"
    assert main(["heatmap", str(run), "--head", "all", "-o", str(png)]) == 0
    assert png.stat().st_size > 0
    graph = tmp_path / "graph.png"  # on its own tree, drawn from the edges (test_long_trees)
    assert main(["heatmap", str(run), "--view", "graph", "-o", str(graph)]) == 0 and graph.stat().st_size > 0


def test_attend_on_2000_listops_tokens_allocates_and_saves_no_dense_map(listops_run, tmp_path):
    run, long = listops_run
    nodes = len(long.split()) + 1
    out = tmp_path / "long.png"
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiled:
        (attended,) = graphformer.viz.attend(run, [long], out=out, top=2, beam=1)
    largest = max(event.cpu_memory_usage for event in profiled.events())
    assert 0 < largest < nodes * nodes  # bytes: float32 nodes x nodes would be 4 n^2
    assert out.stat().st_size > 0 and attended.edges["enc"].n_queries == nodes
    saved = tmp_path / "maps.pt"
    argv = ["attend", str(run), "--input", long, "--beam", "1", "--save-maps", str(saved)]
    assert main([*argv, "-o", str(tmp_path / "page.html")]) == 0
    assert_o_edges(torch.load(saved), nodes)
    (loaded,) = load_maps(saved)
    torch.testing.assert_close(loaded["maps"]["enc"].weights, attended.edges["enc"].weights, rtol=0, atol=1e-6)


def test_the_page_at_2000_tokens_opens_in_the_browser_with_its_blocks(listops_run, tmp_path, browser):  # noqa: F811
    run, long = listops_run
    nodes = len(long.split()) + 1
    size = -(-nodes // MAX_BINS)  # tokens a block
    bins = -(-nodes // size)
    page = tmp_path / "long.html"
    assert main(["attend", str(run), "--input", long, "--beam", "1", "-o", str(page)]) == 0
    shown, data = page_maps(page.read_text())
    (block,) = data["sublayers"]
    assert shown["enc"].shape == (1, 4, bins, bins) and bins <= MAX_BINS and block["queries"][0] == f"0-{size - 1}"
    browser.get(page.as_uri())
    drawn_page = browser.execute_script("""
        const thumbs = document.querySelectorAll(".thumb"), big = document.querySelector(".big");
        return [thumbs.length, thumbs[0].width, big.width, document.querySelector(".readout").textContent];""")
    assert drawn_page[:2] == [4, bins] and drawn_page[2] > bins
    assert f"{nodes:,} tokens in blocks of {size}" in drawn_page[3]
    assert not [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def test_the_animation_player_at_2000_tokens_opens_in_the_browser(listops_run, tmp_path, browser):  # noqa: F811
    run, _ = listops_run
    player = tmp_path / "player.html"
    assert main(["animate", str(run), "--top", "1", "-o", str(player)]) == 0
    browser.get(player.as_uri())
    shown = browser.execute_script("""
        const img = document.querySelector("img"), slider = document.querySelector("input");
        return [img.complete && img.naturalWidth > 0, slider.max, document.querySelector(".caption").textContent];""")
    assert shown[:2] == [True, "1"] and "top 1 keys per query" in shown[2] and "block max" in shown[2]
    assert not [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def test_recall_at_4096_records_and_attends_in_edges(recall_run, tmp_path, capsys):
    run, line = recall_run
    nodes = len(line.split()) + 2  # <cls>, the tokens, </s>
    assert nodes == 4096
    for record in load_records(run):
        assert_o_edges(record, nodes)
    saved, png = tmp_path / "maps.pt", tmp_path / "recall.png"
    assert main(["attend", str(run), "--input", line, "--save-maps", str(saved), "-o", str(png)]) == 0
    assert_o_edges(torch.load(saved), nodes)
    (attended,) = load_maps(saved)
    enc = attended["maps"]["enc"]
    # <cls> reads every node and every node reads it, beside the window's 9 keys per node.
    assert int((enc.queries == 0).sum()) == nodes and enc.weights.shape[:2] == (1, 4)
    heatmap = tmp_path / "heatmap.png"
    assert main(["heatmap", str(run), "--top", "3", "-o", str(heatmap)]) == 0
    assert heatmap.stat().st_size > 0
    graph = tmp_path / "graph.png"  # a window is no tree: a bipartite graph of 4,096 nodes a row would not read
    capsys.readouterr()  # what the commands above wrote
    assert main(["heatmap", str(run), "--view", "graph", "-o", str(graph)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{nodes:,} tokens in blocks of" in err and "use --view heatmap" in err
    assert not graph.exists()


def test_top_must_be_a_count_of_keys(listops_run, tmp_path, capsys):
    run, _ = listops_run
    before = snapshot(run)
    with pytest.raises(SystemExit) as exit_info:
        main(["heatmap", str(run), "--top", "0", "-o", str(tmp_path / "x.png")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "--top" in err and "at least 1, got '0'" in err
    assert snapshot(run) == before and not (tmp_path / "x.png").exists()


def test_a_universal_encoders_steps_at_600_tokens_record_as_edges_and_draw_in_blocks(tmp_path):
    data = recall.write_recall(
        tmp_path / "data", seed=1, sizes={"train": 2, "valid": 1, "test": 1}, min_length=598, max_length=598
    )
    options = ["--task", "recall", "--model", "universal-encoder", "--max-depth", "2", "--positions", "none"]
    options += ["--enc-attention", "window:2", "--epochs", "1", "--viz-every", "1"]
    run = train_tiny(data, tmp_path / "run", *options, layers=False)
    nodes = 600  # <cls>, 598 tokens, </s>
    (record, *_) = load_records(run)
    assert_o_edges(record, nodes)
    enc = recorded_maps(record)["enc"]
    assert enc.weights.shape[:2] == (2, 4) and len(record["ponder"]["enc"]) == nodes  # max_depth steps
    picture = graphformer.viz.recording.picture(record, head="all")
    assert picture.maps.shape == (2 * 4, 60, 60) and picture.queries[0] == "0-9"  # steps x heads panels
    png = tmp_path / "steps.png"
    assert main(["heatmap", str(run), "--head", "all", "-o", str(png)]) == 0 and png.stat().st_size > 0
