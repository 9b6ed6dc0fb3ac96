"""The graph model equals torch.nn.Transformer with the same weights, values and gradients."""

import pytest
import torch
from helpers import backends, random_pairs, why_not
from reference import dense_copy, dense_log_probs, gold_of

from graphformer import GraphPool, make_model
from graphformer.graphs import make_batch

VOCAB = 29


NAMES = ("auto", "dgl", "torch", "padded", "blocked", "flex")


def build(norm_first, dtype, tie="none", backend="auto"):
    model = make_model(
        VOCAB,
        layers=2,
        d_model=32,
        heads=4,
        d_ff=64,
        dropout=0.0,
        norm_first=norm_first,
        tie=tie,
        attention_backend=backend,
    ).to(dtype)
    return model, dense_copy(model)


@pytest.mark.parametrize("norm_first", [True, False])
def test_the_dense_twin_is_made_without_warnings(norm_first):
    """torch warns when a pre-norm encoder is allowed nested tensors it cannot use; the twin says so
    up front (a user calling to_torch_transformer saw that warning every time)."""
    import warnings

    from graphformer.model.dense import to_torch_transformer

    model = make_model(VOCAB, layers=2, d_model=32, heads=4, d_ff=64, dropout=0.0, norm_first=norm_first)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dense = to_torch_transformer(model)
    assert len(dense.encoder.layers) == len(dense.decoder.layers) == 2 and dense.encoder.norm is not None


@pytest.mark.parametrize("backend", backends(*NAMES))
@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-5), (torch.float32, 1e-4)])
def test_log_probs_match_dense_transformer(norm_first, dtype, tol, backend):
    if why_not(backend, float64=dtype == torch.float64):
        pytest.skip(why_not(backend, float64=True))
    model, dense = build(norm_first, dtype, backend=backend)
    src, tgt = random_pairs(12, VOCAB, max_len=40)
    with torch.no_grad():
        graph_out = model(make_batch(GraphPool(), src, tgt))
        dense_out = dense_log_probs(model, dense, src, tgt)
    assert graph_out.shape == dense_out.shape == (sum(len(y) + 1 for y in tgt), VOCAB)
    torch.testing.assert_close(graph_out, dense_out, atol=tol, rtol=0)


@pytest.mark.parametrize("backend", backends(*NAMES, grad=True))
@pytest.mark.parametrize("norm_first", [True, False])
def test_gradients_match_dense_transformer(norm_first, backend):
    model, dense = build(norm_first, torch.float64, tie="all", backend=backend)
    src, tgt = random_pairs(8, VOCAB, max_len=25, seed=1)
    gold = gold_of(tgt)

    def nll(logp):
        return -logp.gather(1, gold[:, None]).sum()

    nll(model(make_batch(GraphPool(), src, tgt))).backward()
    graph_grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    nll(dense_log_probs(model, dense, src, tgt)).backward()

    # Embeddings and generator are shared modules: their grads come straight from the dense run.
    for name, p in model.named_parameters():
        if name.startswith(("src_embed", "tgt_embed", "generator")):
            torch.testing.assert_close(graph_grads[name], p.grad, atol=1e-8, rtol=1e-6)
    pairs = [
        (model.encoder.layers[0].self_attn.in_proj.weight, dense.encoder.layers[0].self_attn.in_proj_weight),
        (model.encoder.layers[1].feed_forward.linear1.weight, dense.encoder.layers[1].linear1.weight),
        (model.decoder.layers[0].cross_attn.in_proj.weight, dense.decoder.layers[0].multihead_attn.in_proj_weight),
        (model.decoder.layers[1].self_attn.out_proj.bias, dense.decoder.layers[1].self_attn.out_proj.bias),
        (model.decoder.layers[1].ff_block.norm.weight, dense.decoder.layers[1].norm3.weight),
    ]
    names = {id(p): n for n, p in model.named_parameters()}
    for mine, theirs in pairs:
        assert theirs.grad is not None
        torch.testing.assert_close(graph_grads[names[id(mine)]], theirs.grad, atol=1e-8, rtol=1e-6)


def test_sample_alone_equals_sample_in_batch():
    model = make_model(VOCAB, layers=2, d_model=32, heads=4, d_ff=64, dropout=0.0).double().eval()
    src, tgt = random_pairs(6, VOCAB, max_len=20, seed=2)
    pool = GraphPool()
    with torch.no_grad():
        together = model(make_batch(pool, src, tgt))
        alone = torch.cat([model(make_batch(pool, [s], [t])) for s, t in zip(src, tgt)])
    torch.testing.assert_close(together, alone, atol=1e-10, rtol=0)


@pytest.mark.parametrize("backend", backends(*NAMES, grad=True, float64=True))
def test_per_sample_graphs_match_the_dense_transformer_with_each_samples_masks(backend):
    """Each sample's own edges in every relation: the graph model, batched, equals nn.Transformer
    run on each sample alone with that sample's edges as its masks (values and gradients)."""
    import random

    rng = random.Random(5)
    model, dense = build(True, torch.float64, backend=backend)
    model.cfg.enc_attention, model.cfg.dec_attention, model.cfg.cross_attention = "edges", "edges", "edges"
    src, tgt = random_pairs(5, VOCAB, max_len=12, seed=3)

    def pick(keys, queries, causal):
        return [(k, q) for q in range(queries) for k in (range(q + 1) if causal else range(keys)) if rng.random() < 0.5]

    edges = []
    for s, y in zip(src, tgt):
        n, m = len(s) + 1, len(y) + 1
        enc = pick(n, n, False) + [(i, i) for i in range(n)]
        cross = pick(n, m, False) + [(min(j, n - 1), j) for j in range(m)]
        edges.append({"enc": enc, "dec": pick(m, m, True) + [(j, j) for j in range(m)], "cross": cross})
    batch = make_batch(model.make_pool(), src, tgt, edges)
    graph_out = model(batch)
    graph_out.gather(1, gold_of(tgt)[:, None]).sum().backward()
    graph_grads = {id(p): p.grad.clone() for p in model.parameters()}
    model.zero_grad()
    dense_out = []
    for s, y, e in zip(src, tgt, edges):
        n, m = len(s) + 1, len(y) + 1
        masks = [torch.ones(q, k, dtype=torch.bool) for k, q in ((n, n), (m, m), (n, m))]
        for mask, name in zip(masks, ("enc", "dec", "cross")):
            for k, q in e[name]:
                mask[q, k] = False
        dense_out.append(dense_log_probs(model, dense, [s], [y], masks))
    torch.cat(dense_out).gather(1, gold_of(tgt)[:, None]).sum().backward()
    torch.testing.assert_close(graph_out, torch.cat(dense_out), atol=1e-10, rtol=0)
    pairs = [  # the twin's own copies of the attention weights of each relation, and shared modules
        (model.encoder.layers[1].self_attn.in_proj.weight, dense.encoder.layers[1].self_attn.in_proj_weight),
        (model.decoder.layers[0].self_attn.in_proj.weight, dense.decoder.layers[0].self_attn.in_proj_weight),
        (model.decoder.layers[0].cross_attn.in_proj.weight, dense.decoder.layers[0].multihead_attn.in_proj_weight),
        (model.src_embed.tokens.table.weight, model.src_embed.tokens.table.weight),
    ]
    for mine, theirs in pairs:
        torch.testing.assert_close(graph_grads[id(mine)], theirs.grad, atol=1e-9, rtol=0)
