"""Recorded maps and pictures with typed edges: the weights after the bias, each edge's type kept
beside the map with a name per type, and edges drawn in their type's colour."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import TINY_MODEL, random_pairs, recorded_dense
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgb
from PIL import Image

from graphformer import make_model
from graphformer.cli import main
from graphformer.data import listops
from graphformer.graphs import make_batch
from graphformer.graphs.edge_types import Relative, T5Buckets
from graphformer.graphs.sample_types import ROLES, given, role
from graphformer.training import checkpoint
from graphformer.viz.maps import maps_and_types
from graphformer.viz.plots import AttentionPicture, draw
from graphformer.viz.recording import given_names, load_records, picture
from graphformer.viz.type_colours import MAX_ENTRIES
from graphformer.viz.type_labels import describe

CLIP = 2


def biased_model_and_batch():
    """A one-layer model whose encoder reads relative:2 through a non-zero bias table, on window:3."""
    torch.manual_seed(0)
    model = make_model(
        19,
        layers=1,
        d_model=16,
        heads=2,
        d_ff=32,
        dropout=0.0,
        enc_attention="window:3",
        enc_edges=f"bias=relative:{CLIP}",
    ).double()
    table = model.encoder.layers[0].edges.uses[0].table
    with torch.no_grad():
        table.copy_(torch.randn(table.shape, dtype=torch.float64) * 2)
    src, tgt = random_pairs(3, 19, max_len=12, seed=4)
    return model, make_batch(model.make_pool(), src, tgt), src, table


def test_a_recorded_map_is_the_dense_softmax_with_the_bias():
    model, batch, src, table = biased_model_and_batch()
    maps, types = maps_and_types(model, batch, "enc", sample=1)
    layer = model.encoder.layers[0]
    with torch.no_grad():
        tokens = torch.tensor(src[1] + [2])
        q, k, _ = layer.pre(model.src_embed(tokens, torch.arange(len(tokens))))
        scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(q.shape[-1])
    n = len(tokens)
    offset = torch.arange(n)[:, None] - torch.arange(n)[None, :]  # query i minus key j
    window = offset.abs() <= 3
    bias = table[offset.clamp(-CLIP, CLIP) + CLIP].permute(2, 0, 1)  # (H, queries, keys)

    def dense(with_bias):
        return torch.softmax((scores + with_bias * bias).masked_fill(~window, -math.inf), -1)

    expected = dense(True).masked_fill(~window, math.nan)
    torch.testing.assert_close(maps[0], expected, atol=1e-12, rtol=0, equal_nan=True)
    assert (dense(True) - dense(False)).abs().max() > 0.05  # the bias matters here
    derivation, ids = types[f"relative:{CLIP}"]
    assert derivation == Relative(CLIP)
    assert torch.equal(ids, torch.where(window, offset.clamp(-CLIP, CLIP) + CLIP, -1))


def test_relative_and_t5_types_are_named_by_the_offsets_they_hold():
    ids = np.zeros((1, 1), dtype=np.int64)
    relative = describe(Relative(2), "relative:2", ids)
    assert relative.names == ["offset ≤-2", "offset -1", "offset 0", "offset 1", "offset ≥2"]
    # t5:8,16: 4 buckets a side, n = |offset| exact below 2, then 2 + floor(log(n / 2) / log(16 / 2) * 2):
    # n = 2..5 -> 2, n >= 6 -> 3; keys after the query (offset < 0) take 4 + the same, and 4 (n = 0) is unused.
    t5 = describe(T5Buckets(8, 16), "t5:8,16", ids)
    assert t5.names == [
        "offset 0",
        "offset 1",
        "offset 2..5",
        "offset ≥6",
        "bucket 4",
        "offset -1",
        "offset -5..-2",
        "offset ≤-6",
    ]
    causal = describe(T5Buckets(4, 16, bidirectional=False), "t5:4,16", ids)
    assert causal.names[0] == "offset ≤0"  # one-sided: every key after the query falls in bucket 0


def test_given_types_take_their_names_file(tmp_path):
    (tmp_path / "enc.types").write_text("parent\nchild\n")
    split = SimpleNamespace(edges=SimpleNamespace(source=tmp_path / "valid.src"))
    assert given_names(given(2), split, "enc") == ["parent", "child", "unlisted"]
    assert given_names(given(2), split, "dec") is None  # no dec.types: the derivation's own names
    assert describe(given(2), "given:2", np.zeros((1, 1), dtype=np.int64)).names == ["0", "1", "unlisted"]


def role_record(tmp_path, typed=True):
    """A recording of a made-up 4-node sample whose enc edges carry tree roles, saved and read back."""
    ids = np.array([[0, 1, -1, 4], [2, 0, 7, -1], [-1, 7, 0, 4], [3, -1, 3, 0]])
    weights = np.where(ids >= 0, 0.25, np.nan)
    weights[ids >= 0] += np.linspace(0, 0.2, int((ids >= 0).sum()))
    tokens = ["[MAX", "1", "2", "</s>"]
    record = {
        "epoch": 1,
        "src_labels": tokens,
        "enc_labels": tokens,
        "maps": {"enc": torch.tensor(weights)[None, None]},
    }
    if typed:
        record["edge_types"] = {"enc": [describe(role(), "role", ids).as_record()]}
    path = tmp_path / f"record{typed}.pt"
    checkpoint.save_atomic(record, path)
    return checkpoint.load(path), ids


def test_a_record_with_types_round_trips_and_one_without_draws_as_before(tmp_path):
    record, ids = role_record(tmp_path)
    types = picture(record, "enc").types
    assert types.spec == "role" and list(types.names) == list(ROLES) and types.ranges is None
    np.testing.assert_array_equal(types.ids, ids)
    relative = describe(Relative(2), "relative:2", ids).as_record()
    back = picture({**record, "edge_types": {"enc": [relative]}}, "enc").types
    assert back.ranges[0] == (-math.inf, -2.0) and back.quantity == "offset"
    old, _ = role_record(tmp_path, typed=False)
    assert "edge_types" not in old and picture(old, "enc").types is None
    for view in ("heatmap", "graph", "both"):
        figure = draw(picture(old, "enc"), view=view)
        assert all(legend.get_title().get_text() == "edge width: weight" for legend in figure.legends)


def _legend_names(figure):
    (legend,) = [lg for lg in figure.legends if lg.get_title().get_text().startswith("edge colour")]
    return [t.get_text() for t in legend.get_texts()], legend


def test_a_typed_graph_colours_each_edge_by_its_type_with_one_legend_entry_per_type(tmp_path):
    record, ids = role_record(tmp_path)
    pic = picture(record, "enc")
    figure = draw(pic, view="graph")
    names, legend = _legend_names(figure)
    present = sorted(set(ids[ids >= 0].tolist()))
    assert names == [ROLES[t] for t in present]
    legend_rgb = {name: to_rgb(line.get_color()) for name, line in zip(names, legend.get_lines())}
    assert len(set(legend_rgb.values())) == len(present)  # a colour per type
    (ax,) = [a for a in figure.axes if a.collections]
    edges = next(c for c in ax.collections if isinstance(c, LineCollection))
    drawn = 0
    for (key, _), (query, _), rgba in zip(*zip(*edges.get_segments()), edges.get_colors()):
        assert tuple(rgba[:3]) == pytest.approx(legend_rgb[ROLES[ids[round(query), round(key)]]])
        drawn += 1
    assert drawn == (ids >= 0).sum()


def test_a_typed_tree_colours_each_half_by_its_own_edges_type(tmp_path):
    record, ids = role_record(tmp_path)
    record["sample_graphs"] = ["enc"]
    figure = draw(picture(record, "enc"), view="graph")
    names, legend = _legend_names(figure)
    assert "self" not in names  # a node's weight on itself fills its marker: no edge of it is drawn
    legend_rgb = {name: to_rgb(line.get_color()) for name, line in zip(names, legend.get_lines())}
    (ax,) = [a for a in figure.axes if a.collections]
    halves = next(c for c in ax.collections if isinstance(c, LineCollection))
    colours = {tuple(np.round(rgba[:3], 6)) for rgba in halves.get_colors()}
    # parent-child (1) and child-parent (2) halves of the edge [MAX - 1 differ
    assert {tuple(np.round(legend_rgb[ROLES[t]], 6)) for t in (1, 2)} <= colours


def test_the_heatmap_view_adds_a_panel_of_the_types_in_the_legends_colours(tmp_path):
    record, ids = role_record(tmp_path)
    figure = draw(picture(record, "enc"), view="heatmap")
    (panel,) = [ax for ax in figure.axes if ax.get_title() == "edge types: role"]
    names, legend = _legend_names(figure)
    legend_rgb = {name: to_rgb(line.get_color()) for name, line in zip(names, legend.get_lines())}
    image = np.asarray(panel.images[0].get_array())
    for q, k in zip(*np.nonzero(ids >= 0)):
        assert tuple(image[q, k, :3]) == pytest.approx(legend_rgb[ROLES[ids[q, k]]])
    assert tuple(image[0, 2, :3]) == (1, 1, 1)  # no edge: blank


def test_many_ordered_types_join_into_at_most_eight_spans_in_offset_order():
    n = 24
    offset = np.arange(n)[:, None] - np.arange(n)[None, :]
    ids = np.clip(offset, -16, 16) + 16  # relative:16, full attention: all 33 types
    types = describe(Relative(16), "relative:16", ids)
    weights = np.full((1, n, n), 1.0 / n)
    tokens = [str(i) for i in range(n)]
    figure = draw(AttentionPicture(weights, tokens, tokens, ["head 0"], types=types), view="graph")
    names, legend = _legend_names(figure)
    # 33 types in 8 spans of 5, 4, ..., 4 ids; the clipped ends hold every offset beyond them
    assert names == [
        "offset ≤-12",
        "offset -11..-8",
        "offset -7..-4",
        "offset -3..0",
        "offset 1..4",
        "offset 5..8",
        "offset 9..12",
        "offset ≥13",
    ]
    assert len(names) == MAX_ENTRIES
    legend_rgb = [to_rgb(line.get_color()) for line in legend.get_lines()]
    spans = [(-math.inf, -12), (-11, -8), (-7, -4), (-3, 0), (1, 4), (5, 8), (9, 12), (13, math.inf)]
    (ax,) = [a for a in figure.axes if a.collections]
    edges = next(c for c in ax.collections if isinstance(c, LineCollection))
    for (key, _), (query, _), rgba in zip(*zip(*edges.get_segments()), edges.get_colors()):
        r = round(query) - round(key)
        (group,) = [g for g, (low, high) in enumerate(spans) if low <= r <= high]
        assert tuple(rgba[:3]) == pytest.approx(legend_rgb[group])


def test_training_with_tree_roles_records_them_and_draws_the_typed_tree(tmp_path, capsys):
    data = listops.write_listops(
        tmp_path / "data", seed=1, min_length=8, max_length=30, sizes={"train": 32, "valid": 4, "test": 4}
    )
    run = tmp_path / "run"
    argv = ["train", "--task", "listops", "--model", "encoder", "--positions", "none", "--pooling", "last"]
    argv += ["--enc-attention", "window:1+parse-tree", "--enc-edges", "bias=role", "--epochs", "1"]
    argv += ["--data-dir", str(data), "--out", str(run), "--batch-size", "16", "--viz-every", "1", *TINY_MODEL]
    assert main(argv) == 0
    record = load_records(run)[-1]
    (entry,) = record["edge_types"]["enc"]
    assert entry["spec"] == "role" and entry["names"] == list(ROLES)
    ids, maps = entry["ids"], recorded_dense(record)["enc"][0, 0]
    assert torch.equal(ids >= 0, ~torch.isnan(maps))  # a type on every edge, none elsewhere
    assert (ids.diagonal() == ROLES.index("self")).all()
    assert (ids == ROLES.index("other")).any() and (ids == ROLES.index("parent-child")).any()  # window and tree
    png = tmp_path / "tree.png"
    capsys.readouterr()
    assert main(["heatmap", str(run), "--view", "graph", "--head", "all", "--output", str(png)]) == 0
    assert Image.open(png).format == "PNG" and f"wrote {png}" in capsys.readouterr().out
    names, _ = _legend_names(draw(picture(record, "enc", head="all"), view="graph"))
    drawn = ids[~torch.eye(len(ids), dtype=torch.bool) & (ids >= 0)]
    assert names == [ROLES[t] for t in sorted(set(drawn.tolist()))]
