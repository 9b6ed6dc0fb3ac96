"""Attention maps, recordings during training, animations and heatmaps."""
import math

import torch
from PIL import Image

from graphformer import make_model
from graphformer.cli import main
from graphformer.graphs import make_batch
from graphformer.viz import attention_maps
from helpers import TINY_MODEL, random_pairs, small_copy_data


def model_and_batch(**kw):
    model = make_model(19, layers=2, d_model=16, heads=2, d_ff=32, dropout=0.0, **kw).double()
    src, tgt = random_pairs(4, 19, max_len=12, seed=2)
    return model, make_batch(model.make_pool(), src, tgt), src, tgt


def test_maps_sum_to_one_over_existing_edges_and_show_the_pattern():
    model, batch, src, tgt = model_and_batch(enc_attention="window:1", cross_attention="window:2+global:1")
    for relation in ("enc", "dec", "cross"):
        maps = attention_maps(model, batch, relation, sample=1)
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


def test_recorded_training_animates_one_frame_per_epoch(tmp_path, capsys):
    data = small_copy_data(tmp_path / "data", n_train=120)
    run = tmp_path / "run"
    assert main(["train", "--task", "parallel", "--data-dir", str(data), "--out", str(run), "--epochs", "3",
                 "--viz-every", "1", "--batch-size", "16", *TINY_MODEL]) == 0
    assert len(list((run / "attention").glob("epoch_*.pt"))) == 3
    gif = tmp_path / "cross.gif"
    assert main(["animate", str(run), "--relation", "cross", "--head", "1", "-o", str(gif)]) == 0
    assert Image.open(gif).n_frames == 3
    html = tmp_path / "enc.html"
    assert main(["animate", str(run), "--relation", "enc", "-o", str(html)]) == 0
    assert "<script" in html.read_text()
    png = tmp_path / "map.png"
    assert main(["heatmap", str(run), "--epoch", "2", "-o", str(png)]) == 0
    assert Image.open(png).size[0] > 100
    assert main(["heatmap", str(run), "--graph", "-o", str(tmp_path / "graph.png")]) == 0
    capsys.readouterr()
    assert main(["heatmap", str(run), "--head", "9", "-o", str(png)]) == 2
    assert "--head 9 is out of range" in capsys.readouterr().err


def test_animate_without_recorded_maps_is_a_one_line_error(tmp_path, capsys):
    data = small_copy_data(tmp_path / "data", n_train=60)
    run = tmp_path / "run"
    assert main(["train", "--task", "parallel", "--data-dir", str(data), "--out", str(run), "--epochs", "1",
                 *TINY_MODEL]) == 0
    capsys.readouterr()
    assert main(["animate", str(run), "-o", str(tmp_path / "a.gif")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no attention maps recorded" in err and "--viz-every" in err


def test_ponder_plots(tmp_path):
    from graphformer.viz.plots import ponder_distribution, ponder_map
    metrics = [{"valid_src_step_fraction": [1.0, 0.5, 0.0], "valid_tgt_step_fraction": [1.0, 0.9, 0.2 * e]}
               for e in range(4)]
    ponder_distribution(metrics, tmp_path / "dist.png")
    ponder_map([1, 3, 2], ["a", "b", "</s>"], tmp_path / "map.png")
    assert Image.open(tmp_path / "dist.png").size[0] > 300 and Image.open(tmp_path / "map.png").size[0] > 100
