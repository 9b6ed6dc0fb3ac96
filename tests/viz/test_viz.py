"""Attention maps, recordings during training, animations and heatmaps."""

import json
import math
import re

import numpy as np
import pytest
import torch
from helpers import TINY_MODEL, random_pairs, recorded_dense, small_copy_data, small_recall_data
from PIL import Image

from graphformer import make_model
from graphformer.cli import main
from graphformer.graphs import make_batch
from graphformer.viz import attention_maps
from graphformer.viz.plots import SCALES, VIEWS, draw
from graphformer.viz.recording import load_records, picture, span_tokens


def model_and_batch(**kw):
    model = make_model(19, layers=2, d_model=16, heads=2, d_ff=32, dropout=0.0, **kw).double()
    src, tgt = random_pairs(4, 19, max_len=12, seed=2)
    return model, make_batch(model.make_pool(), src, tgt), src, tgt


def test_maps_sum_to_one_over_existing_edges_and_show_the_pattern():
    model, batch, src, tgt = model_and_batch(enc_attention="window:1", cross_attention="window:2+global:1")
    for sublayer in ("enc", "dec", "cross"):
        maps = attention_maps(model, batch, sublayer, sample=1)
        assert maps.shape[:2] == (2, 2)
        totals = torch.nansum(maps, dim=-1)
        torch.testing.assert_close(totals, torch.ones_like(totals))
    n, m = len(src[1]) + 1, len(tgt[1]) + 1
    dec = attention_maps(model, batch, "dec", sample=1)
    assert dec.shape[2:] == (m, m)
    future = torch.ones(m, m, dtype=torch.bool).triu(1)
    assert torch.isnan(dec[:, :, future]).all() and not torch.isnan(dec[:, :, ~future]).any()
    enc = attention_maps(model, batch, "enc", sample=1)
    far = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs() > 1
    assert torch.isnan(enc[:, :, far]).all()


def test_maps_equal_the_dense_softmax():
    model, batch, src, _ = model_and_batch()
    maps = attention_maps(model, batch, "enc", sample=2)
    layer = model.encoder.layers[0]
    with torch.no_grad():
        tokens = torch.tensor(src[2] + [2])
        x = model.src_embed(tokens, torch.arange(len(tokens)))
        q, k, _ = layer.pre(x)
        scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(q.shape[-1])
    torch.testing.assert_close(maps[0], torch.softmax(scores, -1), atol=1e-12, rtol=0)


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory):
    """A tiny run trained 2 epochs with --viz-every 1: records for epochs 0 (untrained), 1, 2."""
    tmp = tmp_path_factory.mktemp("viz")
    data = small_copy_data(tmp / "data", n_train=120)
    run = tmp / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "parallel",
                "--data-dir",
                str(data),
                "--out",
                str(run),
                "--epochs",
                "2",
                "--viz-every",
                "1",
                "--batch-size",
                "16",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    return run


def test_training_records_the_untrained_model_and_every_epoch(recorded_run):
    assert [r["epoch"] for r in load_records(recorded_run)] == [0, 1, 2]


def test_gif_has_one_frame_per_recorded_epoch(recorded_run, tmp_path):
    gif = tmp_path / "cross.gif"
    assert main(["animate", str(recorded_run), "--relation", "cross", "--head", "1", "-o", str(gif)]) == 0
    assert Image.open(gif).n_frames == 3


def test_html_player_is_a_self_contained_page(recorded_run, tmp_path):
    page = tmp_path / "enc.html"
    assert main(["animate", str(recorded_run), "--relation", "enc", "--head", "all", "-o", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<html" in text and "</html>" in text
    assert re.search(r"<title>enc layer 1 of 1</title>", text)
    assert not re.search(r"https?://", text), "the page must not load anything from the network"
    frames = json.loads(re.search(r"const frames = (\[.*?\]);", text).group(1))
    captions = json.loads(re.search(r"const captions = (\[.*?\]);", text).group(1))
    assert len(frames) == 3 and all(f.startswith("data:image/png;base64,") for f in frames)
    assert captions[0].endswith("epoch 0 (untrained)") and captions[-1].endswith("epoch 2")


def test_unsupported_animation_format_is_a_one_line_error(recorded_run, tmp_path, capsys):
    movie = tmp_path / "a.mp4"
    assert main(["animate", str(recorded_run), "-o", str(movie)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ".mp4 is not a format written here; use .gif, .html" in err
    assert str(movie) in err and not movie.exists()  # the path as given, folder and all
    assert main(["animate", str(recorded_run), "-o", str(tmp_path / "movie")]) == 2
    assert "the name has no extension; use .gif, .html" in capsys.readouterr().err


def _panels(figure):
    return [ax for ax in figure.axes if ax.images and ax.get_label() != "<colorbar>"]


def test_all_heads_grid_has_one_panel_per_head_on_a_shared_or_own_scale(recorded_run):
    record = load_records(recorded_run)[-1]
    heads = recorded_dense(record)["cross"].shape[1]
    shared = draw(picture(record, "cross", -1, "all"), scale="shared")
    panels = _panels(shared)
    assert [ax.get_title() for ax in panels] == [f"head {h}" for h in range(heads)]
    assert all(ax.images[0].get_clim() == (0, 1) for ax in panels)
    assert len(shared.axes) == heads + 1  # one colour bar for all
    own = draw(picture(record, "cross", -1, "all"), scale="per-head")
    assert len(own.axes) == 2 * heads  # a colour bar each
    for h, ax in enumerate(_panels(own)):
        largest = float(np.nanmax(recorded_dense(record)["cross"][-1, h].numpy()))
        assert ax.images[0].get_clim() == pytest.approx((0, largest))


def test_heatmap_axes_name_keys_and_decoder_input_queries(recorded_run):
    record = load_records(recorded_run)[-1]
    (ax,) = _panels(draw(picture(record, "cross", -1, 0)))
    assert ax.get_xlabel() == "keys: source tokens"
    assert ax.get_ylabel() == "queries: decoder inputs <s>, y1, ..."
    assert [t.get_text() for t in ax.get_xticklabels()] == record["src_labels"]
    assert [t.get_text() for t in ax.get_yticklabels()] == record["tgt_labels"]
    assert record["tgt_labels"][0] == "<s>" and record["src_labels"][-1] == "</s>"


def test_graph_view_has_markers_row_names_and_labels_outside_the_edges(recorded_run):
    record = load_records(recorded_run)[-1]
    both = draw(picture(record, "cross", -1, 0), view="both")
    heatmap_ax, graph_ax = both.axes[:2]
    assert heatmap_ax.images and not graph_ax.images  # side by side: heatmap, then the graph
    markers = [c for c in graph_ax.collections if c.__class__.__name__ == "PathCollection"]
    assert [len(c.get_offsets()) for c in markers] == [len(record["src_labels"]), len(record["tgt_labels"])]
    texts = [(t.get_text(), t.get_position()[1]) for t in graph_ax.texts]
    assert any(name.startswith("keys") for name, _ in texts) and any(name.startswith("queries") for name, _ in texts)
    # edges run between the key row (y = 1) and the query row (y = 0); labels sit outside them
    assert [name for name, y in texts if y > 1] == record["src_labels"]
    assert [name for name, y in texts if y < 0] == record["tgt_labels"]
    assert all(y in (0, 1) for name, y in texts if name.startswith(("keys", "queries")))


def _copy_like_picture(heads, n=12, seed=0):
    """A picture the size of the quick start's copy sentences: n tokens a side, heads panels."""
    from graphformer.viz.plots import AttentionPicture

    weights = np.random.default_rng(seed).random((heads, n, n)) ** 8
    return AttentionPicture(
        weights / weights.sum(-1, keepdims=True),
        [f"w{i}" for i in range(n - 1)] + ["</s>"],
        ["<s>"] + [f"w{i}" for i in range(n - 1)],
        [f"head {h}" for h in range(heads)],
        "cross layer 2 of 2, epoch 8",
        "keys: source tokens",
        "queries: decoder inputs <s>, y1, ...",
    )


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("scale", SCALES)
def test_every_head_fits_a_screen_in_a_grid_with_labels_kept_readable(tmp_path, view, scale):
    from graphformer.viz.plots import save_figure

    png = tmp_path / "heads.png"
    figure = draw(_copy_like_picture(heads=4), view=view, scale=scale)
    save_figure(figure, png)
    width, height = Image.open(png).size
    assert 600 < width <= 2000 and height <= 2000, (width, height)  # one row of 4 was 2,800-4,000 px wide
    rows = {round(ax.get_position().y1, 2) for ax in figure.axes if ax.get_title().startswith("head")}
    assert len(rows) > 1 or view == "graph"  # the heads wrap onto more rows
    labels = [t for ax in figure.axes for t in (*ax.get_xticklabels(), *ax.texts)]
    assert labels and min(t.get_fontsize() for t in labels) >= 8


def test_a_grid_with_a_short_last_row_leaves_no_empty_panels():
    figure = draw(_copy_like_picture(heads=3))
    rows = [round(ax.get_position().y1, 2) for ax in _panels(figure)]
    assert len(figure.axes) == 3 + 1 and len(set(rows)) == 2  # the heads and one colour bar


def test_one_head_side_by_side_fits_a_screen(tmp_path):
    from graphformer.viz.plots import save_figure

    save_figure(draw(_copy_like_picture(heads=1), view="both"), tmp_path / "both.png")
    assert 1000 < Image.open(tmp_path / "both.png").size[0] <= 2000


def test_side_by_side_titles_stand_at_one_height(recorded_run):
    record = load_records(recorded_run)[-1]
    for head in (0, "all"):
        figure = draw(picture(record, "cross", -1, head), view="both")
        figure.canvas.draw()
        titled = [ax for ax in figure.axes if ax.get_title()]
        heatmaps, graphs = [ax for ax in titled if ax.images], [ax for ax in titled if not ax.images]
        assert len(heatmaps) == len(graphs) > 0
        for heatmap_ax, graph_ax in zip(heatmaps, graphs):
            assert heatmap_ax.title.get_window_extent().y0 == pytest.approx(
                graph_ax.title.get_window_extent().y0, abs=1
            )


def test_graph_texts_fill_the_panel_without_empty_margins_or_covering_the_title(recorded_run):
    record = load_records(recorded_run)[-1]
    for scale in SCALES:
        figure = draw(picture(record, "cross", -1, 0), view="graph", scale=scale)
        figure.canvas.draw()
        (ax,) = [ax for ax in figure.axes if ax.texts]
        box, dpi = ax.get_window_extent(), figure.dpi
        texts = [t.get_window_extent() for t in ax.texts]
        left, right = min(t.x0 for t in texts), max(t.x1 for t in texts)
        bottom, top = min(t.y0 for t in texts), max(t.y1 for t in texts)
        assert box.x0 - 1 <= left <= box.x0 + 0.1 * dpi and box.x1 - 0.3 * dpi <= right <= box.x1 + 1
        assert box.y0 - 1 <= bottom <= box.y0 + 0.1 * dpi and box.y1 - 0.1 * dpi <= top <= box.y1 + 1
        assert top < ax.title.get_window_extent().y0  # the key labels stay under the title


def _legend_entries(legend):
    return legend.get_title().get_text(), [t.get_text() for t in legend.get_texts()]


def test_graph_edges_have_a_legend_of_their_widths(recorded_run):
    record = load_records(recorded_run)[-1]
    shared = draw(picture(record, "cross", -1, "all"), view="graph")
    (legend,) = shared.legends  # one for the figure: every panel's widths mean the same
    assert _legend_entries(legend) == ("edge width: weight", ["1", "0.5", "0.1"])
    assert [line.get_linewidth() for line in legend.get_lines()] == sorted(
        (line.get_linewidth() for line in legend.get_lines()), reverse=True
    )
    own = draw(picture(record, "cross", -1, "all"), view="both", scale="per-head")
    graphs = [ax for ax in own.axes if ax.texts]
    assert not own.legends and len(graphs) == recorded_dense(record)["cross"].shape[1]
    for h, ax in enumerate(graphs):
        largest = float(np.nanmax(recorded_dense(record)["cross"][-1, h].numpy()))
        assert _legend_entries(ax.get_legend()) == (
            "edge width: weight",
            [f"{largest:.2g}", f"{largest / 2:.2g}", f"{largest / 10:.2g}"],
        )


def test_titles_number_layers_from_one_out_of_all():
    record = {
        "epoch": 3,
        "src_labels": ["a", "b", "</s>"],
        "tgt_labels": ["<s>", "a", "b"],
        "maps": {"cross": torch.rand(2, 4, 3, 3)},
    }
    assert picture(record, "cross", -1, 0).title == "cross layer 2 of 2, epoch 3"
    assert picture(record, "cross", 0, "all").title == "cross layer 1 of 2, epoch 3"


def test_heatmap_command_draws_any_recorded_epoch(recorded_run, tmp_path, capsys):
    png = tmp_path / "map.png"
    assert (
        main(["heatmap", str(recorded_run), "--epoch", "0", "--head", "all", "--scale", "per-head", "-o", str(png)])
        == 0
    )
    assert Image.open(png).size[0] > 300
    assert main(["heatmap", str(recorded_run), "--graph", "-o", str(tmp_path / "graph.png")]) == 0
    capsys.readouterr()
    assert main(["heatmap", str(recorded_run), "--head", "9", "-o", str(png)]) == 2
    assert "--head 9 is out of range" in capsys.readouterr().err


def test_heatmap_refuses_a_format_it_cannot_draw_before_reading_anything(recorded_run, tmp_path, capsys):
    out = tmp_path / "map.txt"
    assert main(["heatmap", str(recorded_run), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ".txt is not a format written here; use .png" in err and not out.exists()


def test_heatmap_refuses_two_views_at_once(recorded_run, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["heatmap", str(recorded_run), "--graph", "--view", "both", "-o", str(tmp_path / "map.png")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "not allowed with argument --graph" in err
    assert not (tmp_path / "map.png").exists()


def test_an_output_the_system_refuses_is_a_one_line_error(recorded_run, tmp_path, capsys, monkeypatch):
    (tmp_path / "plot.png").write_text("a file where a folder is meant\n")
    assert main(["heatmap", str(recorded_run), "-o", str(tmp_path / "plot.png" / "map.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "plot.png is a file, not a folder" in err
    # A folder that exists but refuses the file (read-only, no permission): the system's reason, one line.
    from matplotlib.figure import Figure

    def refused(self, file, **kw):
        raise PermissionError(13, "Permission denied", str(file))

    monkeypatch.setattr(Figure, "savefig", refused)
    assert main(["heatmap", str(recorded_run), "-o", str(tmp_path / "map.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot write {tmp_path / 'map.png'}: permission denied" in err, err
    assert not list(tmp_path.glob("*map*"))


def test_a_drawing_interrupted_midway_leaves_the_existing_file_whole(recorded_run, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    out = tmp_path / "map.png"
    assert main(["heatmap", str(recorded_run), "-o", str(out)]) == 0
    before = out.read_bytes()

    def interrupted(self, file, **kw):
        file.write(b"half a picture")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted)
    assert main(["heatmap", str(recorded_run), "--head", "all", "-o", str(out)]) == 130
    assert out.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["map.png"]


def _ctrl_c_inside_a_finaliser_at(at_frame, monkeypatch):
    """Make drawing frame ``at_frame`` deliver SIGINT inside a weak-reference callback (where
    Python prints and drops a KeyboardInterrupt); returns the list of frames drawn."""
    import os
    import signal
    import weakref

    import graphformer.viz.plots as plots

    drawn, real_draw = [], plots.draw

    class Dropped:
        pass

    def draw(*args, **kw):
        drawn.append(1)
        if len(drawn) == at_frame:
            obj = Dropped()
            keep = weakref.ref(obj, lambda _: os.kill(os.getpid(), signal.SIGINT))  # handled inside the callback
            del obj
            assert keep() is None
        return real_draw(*args, **kw)

    monkeypatch.setattr(plots, "draw", draw)
    return drawn


@pytest.mark.parametrize("command, output, at_frame", [("animate", "maps.gif", 2), ("heatmap", "map.png", 1)])
def test_ctrl_c_inside_a_finaliser_while_drawing_still_stops_the_command(
    recorded_run, tmp_path, monkeypatch, capsys, command, output, at_frame
):
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises KeyboardInterrupt
    try:
        drawn = _ctrl_c_inside_a_finaliser_at(at_frame, monkeypatch)
        out = tmp_path / output
        assert main([command, str(recorded_run), "-o", str(out)]) == 130
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "the handler is restored"
    finally:
        signal.signal(signal.SIGINT, previous)
    err = capsys.readouterr().err
    assert err.strip() == "graphformer: interrupted" and not out.exists()
    assert len(drawn) == at_frame, "drawing stops at the frame the Ctrl-C came in"


def test_drawing_leaves_an_ignored_ctrl_c_ignored(recorded_run, tmp_path, monkeypatch):
    """A process started with SIGINT ignored (a background job) keeps ignoring it."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        drawn = _ctrl_c_inside_a_finaliser_at(2, monkeypatch)
        out = tmp_path / "maps.gif"
        assert main(["animate", str(recorded_run), "-o", str(out)]) == 0
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert out.exists() and len(drawn) == 3


def test_tree_span_tokens_name_their_level():
    assert span_tokens(6) == ["L1[0:2)", "L1[2:4)", "L1[4:6)", "L2[0:4)", "L2[4:6)"]


@pytest.fixture(scope="module")
def recorded_classifier(tmp_path_factory):
    """An encoder classifier (recall, <cls> pooling, window:1) trained 1 epoch with --viz-every 1."""
    tmp = tmp_path_factory.mktemp("viz-classifier")
    data = small_recall_data(tmp / "data")
    run = tmp / "run"
    assert (
        main(
            [
                "train",
                "--task",
                "recall",
                "--model",
                "encoder",
                "--pooling",
                "cls",
                "--enc-attention",
                "window:1",
                "--data-dir",
                str(data),
                "--out",
                str(run),
                "--epochs",
                "1",
                "--viz-every",
                "1",
                "--batch-size",
                "16",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    return run, data


def test_an_encoder_classifier_records_its_encoder_maps_with_the_global_cls_node(recorded_classifier):
    run, data = recorded_classifier
    records = load_records(run)
    assert [r["epoch"] for r in records] == [0, 1]
    tokens = (data / "valid.src").read_text().splitlines()[0].split()
    label = (data / "valid.tgt").read_text().splitlines()[0]
    n = len(tokens) + 2
    for record in records:
        assert set(recorded_dense(record)) == {"enc"} and record["label"] == label
        assert record["src_labels"] == ["<cls>", *tokens, "</s>"]
        enc = recorded_dense(record)["enc"]
        assert enc.shape == (1, 4, n, n)
        totals = torch.nansum(enc, dim=-1)
        torch.testing.assert_close(totals, torch.ones_like(totals))
        # <cls> reads every token and every token reads it (its edges); the tokens see only their neighbours
        assert not torch.isnan(enc[..., 0, :]).any() and not torch.isnan(enc[..., :, 0]).any()
        far = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs() > 1
        far[0, :] = far[:, 0] = False
        assert torch.isnan(enc[..., far]).all() and not torch.isnan(enc[..., ~far]).any()
    assert not torch.equal(recorded_dense(records[0])["enc"], recorded_dense(records[1])["enc"])  # training moved them


def test_a_classifier_run_draws_enc_by_default_and_names_what_it_recorded(recorded_classifier, tmp_path, capsys):
    run, _ = recorded_classifier
    gif = tmp_path / "enc.gif"
    assert main(["animate", str(run), "--head", "all", "-o", str(gif)]) == 0
    assert Image.open(gif).n_frames == 2
    assert "label" in picture(load_records(run)[-1]).title
    capsys.readouterr()
    png = tmp_path / "cross.png"
    assert main(["heatmap", str(run), "--relation", "cross", "-o", str(png)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--relation cross was not recorded in this run" in err and "choose enc" in err
    assert not png.exists()


def test_viz_every_refuses_a_first_validation_sample_whose_maps_exceed_the_recording(tmp_path, capsys):
    """Full attention over <cls>, 2,050 tokens and </s> is 2,052^2 edges x 4 heads: past MAX_RECORDED_WEIGHTS."""
    from graphformer.data import recall
    from graphformer.viz.recording import MAX_RECORDED_WEIGHTS

    n = 2052
    assert 4 * n * n > MAX_RECORDED_WEIGHTS > 4 * 12 * n  # a window:4 pattern over as many fits
    data = recall.write_recall(
        tmp_path / "data",
        seed=1,
        sizes={"train": 4, "valid": 1, "test": 1},
        min_length=n - 2,
        max_length=n - 2,
        num_keys=1025,
        num_values=4,
    )
    run = tmp_path / "run"
    args = ["train", "--task", "recall", "--model", "encoder", "--data-dir", str(data), "--out", str(run)]
    args += ["--max-len", str(n + 1), "--positions", "none", *TINY_MODEL]
    assert main([*args, "--viz-every", "1"]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and f"would hold {4 * n * n:,} weights (edges x layers x heads: {n * n:,} x 1 x 4)" in err
    )
    assert f"more than the {MAX_RECORDED_WEIGHTS:,}" in err
    assert not run.exists()


def test_animate_without_recorded_maps_is_a_one_line_error(tmp_path, capsys):
    data = small_copy_data(tmp_path / "data", n_train=60)
    run = tmp_path / "run"
    assert (
        main(["train", "--task", "parallel", "--data-dir", str(data), "--out", str(run), "--epochs", "1", *TINY_MODEL])
        == 0
    )
    capsys.readouterr()
    assert main(["animate", str(run), "-o", str(tmp_path / "a.gif")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no attention maps recorded" in err and "--viz-every" in err
    assert main(["animate", str(tmp_path / "nowhere"), "-o", str(tmp_path / "a.gif")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{tmp_path / 'nowhere'} is not a folder" in err


def test_ponder_plots(tmp_path):
    from graphformer.viz.plots import ponder_distribution, ponder_map

    metrics = [
        {"valid_src_step_fraction": [1.0, 0.5, 0.0], "valid_tgt_step_fraction": [1.0, 0.9, 0.2 * e]} for e in range(4)
    ]
    ponder_distribution(metrics, tmp_path / "dist.png")
    ponder_map([1, 3, 2], ["a", "b", "</s>"], tmp_path / "map.png")
    assert Image.open(tmp_path / "dist.png").size[0] > 300 and Image.open(tmp_path / "map.png").size[0] > 100


def test_attention_maps_refuse_the_universal_transformer():
    """Its steps attend on subgraphs of the still-active nodes: no map per layer to draw."""
    model = make_model(20, model="universal", d_model=16, heads=2, d_ff=16, max_depth=4, act_threshold=0.5)
    batch = make_batch(model.make_pool(), [[5, 6, 7, 8, 9], [5, 6]], [[5, 6, 7], [8]])
    with pytest.raises(ValueError, match="step maps instead"):
        attention_maps(model, batch, "enc", sample=0)


def test_pattern_matrices_draw_a_trees_span_nodes_too(tmp_path):
    from graphformer.viz.plots import pattern_matrices

    figure = pattern_matrices(["window:2", "window:1+tree:2"], n=8, path=tmp_path / "patterns.png")
    titles = [ax.get_title() for ax in figure.axes]
    assert "span nodes after the 8 tokens" in titles[1] and "span" not in titles[0]
    assert figure.axes[1].images[0].get_array().shape[0] > 8 == figure.axes[0].images[0].get_array().shape[0]
