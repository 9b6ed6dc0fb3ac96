"""The BP-Transformer tree pattern: span nodes, the edges' structure, and the model on them."""

import pytest
import torch
from helpers import random_pairs, recorded_dense
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import dense_copy

from graphformer import GraphPool, make_model
from graphformer.decoding import translate_ids
from graphformer.errors import UserError
from graphformer.graphs import make_batch, patterns, tree
from graphformer.viz.maps import attention_maps
from graphformer.vocab import EOS, SOS


def keys_of(u, v, query):
    return u[v == query].tolist()


def tokens_held(n, node):
    return list(range(*tree.span_range(n, node)))


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 150), k=st.integers(1, 4))
def test_each_token_sees_the_whole_sequence_once_through_few_keys(n, k):
    u, v = tree.edges(n, k)
    levels = len(tree.levels(n))
    for i in range(n):
        keys = keys_of(u, v, i)
        held = sorted(t for key in keys for t in tokens_held(n, key))
        assert held == list(range(n))  # the keys tile the sequence: nothing missed, nothing twice
        assert len(keys) <= 1 + 2 * k * (levels + 1)  # O(k log n) keys, not n
        assert all(j in keys for j in range(max(0, i - k), min(n, i + k + 1)))  # the k nearest tokens, as tokens


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 150))
def test_span_nodes_attend_to_exactly_the_tokens_they_hold(n):
    u, v = tree.edges(n, 2)
    spans = tree.span_count(n)
    counts = [-(-n // 2**level) for level in range(1, n.bit_length() + 1)]
    assert spans == sum(c for c in counts if c >= 2)  # every level up to, not including, the root
    for node in range(n, n + spans):
        assert sorted(keys_of(u, v, node)) == tokens_held(n, node)
    assert int(v.max()) < n + spans and int(u.max()) < n + spans


def test_pool_adds_span_nodes_and_their_membership():
    pool = GraphPool("tree:1")
    g = pool.graph(6, 3)
    assert g.num_nodes("src") == 6 + 3 + 2 and g.num_nodes("tgt") == 3
    assert g.pos["src"].tolist() == [0, 1, 2, 3, 4, 5, 0, 2, 4, 0, 4]
    cross_u, _ = g.edges(etype="cross")
    assert int(cross_u.max()) < 6  # the decoder reads tokens, never spans
    assert g.num_edges("span") == 6 * 2
    assert GraphPool("window:2").graph(6, 3).canonical_etypes == GraphPool().graph(6, 3).canonical_etypes


def test_tree_has_no_causal_form_from_python_either():
    with pytest.raises(UserError, match="no causal form"):
        patterns.make_causal(patterns.tree(2))


def test_tree_only_serves_the_encoder():
    with pytest.raises(UserError, match="serve the encoder.s self-attention .enc_attention. only"):
        GraphPool(cross="tree:2")
    with pytest.raises(UserError, match="serve the encoder.s self-attention .enc_attention. only"):
        make_model(10, enc_attention="full", dec_attention="tree:1")


def tree_model(**kw):
    return (
        make_model(21, layers=2, d_model=16, heads=2, d_ff=32, dropout=0.0, enc_attention="tree:1+window:1", **kw)
        .double()
        .eval()
    )


def test_tree_model_equals_dense_transformer_over_tokens_and_spans():
    """Reference: nn.Transformer over the n tokens followed by the span nodes (inputs: means of
    their tokens' inputs), masked to the tree's edges; cross-attention masks the spans out."""
    model = tree_model()
    dense = dense_copy(model)
    src, tgt = [5, 9, 6, 11, 7, 8, 12, 4, 10], [4, 13, 5, 6]
    n, m = len(src) + 1, len(tgt) + 1
    total = n + tree.span_count(n)
    tokens = model.src_embed(torch.tensor([*src, EOS]), torch.arange(n))
    hold = torch.zeros(total - n, n, dtype=tokens.dtype)
    for node in range(n, total):
        first, end = tree.span_range(n, node)
        hold[node - n, first:end] = 1.0 / (end - first)
    x = torch.cat([tokens, hold @ tokens])[None]
    y = model.tgt_embed(torch.tensor([SOS, *tgt]), torch.arange(m))[None]
    u, v = model.make_pool().enc(n, n)
    enc_mask = torch.ones(total, total, dtype=torch.bool)  # True: no edge
    enc_mask[v, u] = False
    memory_mask = torch.ones(m, total, dtype=torch.bool)
    memory_mask[:, :n] = False
    with torch.no_grad():
        memory = dense.encoder(x, mask=enc_mask)
        h = dense.decoder(y, memory, tgt_mask=torch.ones(m, m, dtype=torch.bool).triu(1), memory_mask=memory_mask)
        expected = model.generator(h[0])
        torch.testing.assert_close(model(make_batch(model.make_pool(), [src], [tgt])), expected, atol=1e-10, rtol=0)


def test_tree_batches_equal_single_samples_on_both_backends():
    model = tree_model()
    pool = model.make_pool()
    src, tgt = random_pairs(6, 21, max_len=17, seed=3)
    with torch.no_grad():
        together = model(make_batch(pool, src, tgt))
        alone = torch.cat([model(make_batch(pool, [s], [t])) for s, t in zip(src, tgt)])
        torch.testing.assert_close(together, alone, atol=1e-10, rtol=0)
        model.attention_backend = "blocked"
        blocked = model(make_batch(pool, src, tgt))
        torch.testing.assert_close(blocked, together, atol=1e-10, rtol=0)


@pytest.mark.parametrize("kind", ["transformer", "universal"])
def test_tree_encoder_decodes_incrementally_like_recompute(kind):
    extra = {"model": "universal", "max_depth": 3} if kind == "universal" else {"layers": 2}
    model = make_model(21, d_model=16, heads=2, d_ff=32, dropout=0.0, enc_attention="tree:2", **extra).double().eval()
    src, _ = random_pairs(5, 21, max_len=12, seed=4)
    kw = dict(beam=3, extra_len=4, batch_tokens=20)
    fast, slow = translate_ids(model, src, incremental=True, **kw), translate_ids(model, src, incremental=False, **kw)
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    assert [h.score for h in fast] == pytest.approx([h.score for h in slow], abs=1e-9)


def test_attention_maps_show_span_nodes_as_keys():
    model = tree_model()
    batch = make_batch(model.make_pool(), [[5, 6, 7, 8], [9, 10]], [[4], [5, 6]])
    maps = attention_maps(model, batch, "enc", sample=1)
    total = 3 + tree.span_count(3)
    assert maps.shape == (2, 2, total, total)
    rows = maps[0, 0].nan_to_num(0.0).sum(-1)
    torch.testing.assert_close(rows, torch.ones(total, dtype=rows.dtype))
    span_row = maps[0, 0, 3].isnan().logical_not().nonzero().squeeze(1).tolist()
    assert span_row == [0, 1]  # the first level-1 span attends to its two tokens


def test_tree_from_the_command_line_trains_records_and_plots(tmp_path, capsys):
    from helpers import TINY_MODEL, small_copy_data
    from PIL import Image

    from graphformer.cli import main

    data = small_copy_data(tmp_path / "data", n_train=80)
    run = tmp_path / "run"
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
                "1",
                "--viz-every",
                "1",
                "--batch-size",
                "16",
                "--enc-attention",
                "tree:1",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    record = torch.load(run / "attention" / "epoch_0001.pt", weights_only=True)
    n = len(record["src_labels"])
    assert len(record["enc_labels"]) == n + tree.span_count(n) and record["enc_labels"][n] == "L1[0:2)"
    assert record["enc_labels"][-1].startswith(f"L{len(tree.levels(n))}[")  # span labels say their level
    assert recorded_dense(record)["enc"].shape[-1] == len(record["enc_labels"])
    assert recorded_dense(record)["cross"].shape[-1] == n
    png = tmp_path / "enc.png"
    assert main(["heatmap", str(run), "--relation", "enc", "-o", str(png)]) == 0
    assert Image.open(png).size[0] > 100
    capsys.readouterr()
    assert main(["evaluate", str(run), "--split", "test", "--json"]) == 0
    assert "token_accuracy" in capsys.readouterr().out
