"""The model's edge uses (--enc-edges, --dec-edges, --cross-edges) against dense references in float64.

The reference recomputes a layer's attention sample by sample as dense (H, queries, keys) matrices,
with each use's formula written here from its paper, scalar by scalar: T5's bucket rule (Raffel et
al., mesh-tensorflow's ``_relative_position_bucket``), ALiBi's slopes as the paper lists them
(Press et al., 2022), Shaw et al.'s eq. (3)-(4) with the distance j - i clipped at K. Only the
layer's projections, norms and feed-forward block are the layer's own (they are not under test).
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import backends
from reference import t5_bucket

from graphformer.catalog import BACKENDS
from graphformer.graphs import CROSS, DEC, ENC, GraphPool, make_batch
from graphformer.model.edge_encoding import alibi_slopes
from graphformer.model.edge_spec import parse_edges
from graphformer.model.layers import DecoderLayer, EncoderLayer

D_MODEL, HEADS = 16, 4
D_HEAD = D_MODEL // HEADS
SOURCES = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [7, 8, 9], [5, 9, 6, 8, 7, 10]]
TARGETS = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [9, 8], [6, 7, 8, 9, 10]]


def test_alibi_slopes_are_the_papers():
    # Press et al. (2022), section 3: for 8 heads the slopes are 1/2^1, 1/2^2, ..., 1/2^8; for 6
    # heads those of 4 heads (1/2^2, 1/2^4, 1/2^6, 1/2^8) then every other slope of 8 heads.
    assert alibi_slopes(8) == [1 / 2**i for i in range(1, 9)]
    assert alibi_slopes(6) == [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]
    assert alibi_slopes(4) == [1 / 4, 1 / 16, 1 / 64, 1 / 256]


def dense_reference(uses, q, k, v, allowed, scale_q=None):
    """One sample's attention output (queries, H, d) in float64 with each use's bias and values.

    uses: (use name, module) pairs; q (n_q, H, d), k, v (n_k, H, d); allowed (n_q, n_k) bool, with
    query i at position i and key j at position j (as a batch's nodes in their sample)."""
    n_q, n_k = allowed.shape
    scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(D_HEAD)
    value_terms = []
    for name, module, spec in uses:
        bias = torch.zeros(HEADS, n_q, n_k, dtype=torch.float64)
        for i in range(n_q):
            for j in range(n_k):
                bias[:, i, j] = _one_bias(name, module, spec, q[i], i, j)
        scores = scores + bias
        if name == "shaw":
            value_terms.append(module)
    scores = scores.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(scores, dim=-1)  # (H, n_q, n_k)
    out = torch.einsum("hij,jhd->ihd", w, v)
    for module in value_terms:  # Shaw eq. (3): z_i = sum_j a_ij (x_j W^V + a^V_ij)
        K = (module.keys.shape[0] - 1) // 2
        for i in range(n_q):
            for j in range(n_k):
                row = K - max(-K, min(K, j - i))  # Shaw's clip(j - i, K), as our table stores it
                out[i] += w[:, i, j, None] * module.vals[row]
    return out


def _one_bias(name, module, spec, q_i, i, j):
    """(H,) bias of query i attending key j under one use."""
    if name == "bias" and spec[0] == "t5":
        buckets, max_distance, bidirectional = spec[1:]
        return module.table[t5_bucket(i - j, buckets, max_distance, bidirectional)]
    if name == "bias":  # relative:K
        K = spec[1]
        return module.table[max(-K, min(K, i - j)) + K]
    if name == "alibi":
        return -torch.tensor(ALIBI_4, dtype=torch.float64) * abs(i - j)
    K = (module.keys.shape[0] - 1) // 2  # shaw: eq. (4), e_ij = x_i W^Q (x_j W^K + a^K_ij)^T / sqrt(d)
    row = K - max(-K, min(K, j - i))
    return (q_i * module.keys[row]).sum(-1) / math.sqrt(D_HEAD)


ALIBI_4 = [1 / 4, 1 / 16, 1 / 64, 1 / 256]  # the paper's slopes for 4 heads


def randomise(layer, seed):
    """Every parameter random (the edge tables start at zero, which would test nothing)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5)


def sample_slices(counts):
    starts = torch.cumsum(torch.tensor([0, *counts[:-1]]), 0)
    return [slice(int(s), int(s) + int(n)) for s, n in zip(starts, counts)]


def mask(kind, n_q, n_k):
    full = torch.ones(n_q, n_k, dtype=torch.bool)
    return full.tril() if kind == "causal" else full


def reference_attention(layer_uses, specs, attn, x_q, x_kv, q_counts, k_counts, kind):
    """The dense reference over every sample of a batch: attn's projections, the uses' formulas."""
    d = D_MODEL
    q_all = torch.nn.functional.linear(x_q, attn.in_proj.weight[:d], attn.in_proj.bias[:d]).view(-1, HEADS, D_HEAD)
    kv = torch.nn.functional.linear(x_kv, attn.in_proj.weight[d:], attn.in_proj.bias[d:])
    k_all, v_all = (t.reshape(-1, HEADS, D_HEAD) for t in kv.chunk(2, dim=-1))
    uses = [(term.use, module, spec) for term, module, spec in zip(layer_uses[0], layer_uses[1], specs)]
    outs = []
    for qs, ks in zip(sample_slices(q_counts), sample_slices(k_counts)):
        allowed = mask(kind, qs.stop - qs.start, ks.stop - ks.start)
        outs.append(dense_reference(uses, q_all[qs], k_all[ks], v_all[ks], allowed))
    return attn.out(torch.cat(outs))


# Every backend whose catalog entry says it adds position biases (adding the capability puts it here).
BIASED = backends(*(e.name for e in BACKENDS.entries() if e.can("position-bias")), grad=True, float64=True)
ENC_SPEC = "bias=t5:8,6+alibi+shaw=relative:2"
ENC_FORMULAS = [("t5", 8, 6, True), ("alibi",), ("shaw",)]
DEC_SPEC = "bias=t5:8,6"
DEC_FORMULAS = [("t5", 8, 6, False)]  # a causal decoder: one-sided buckets
CROSS_SPEC = "shaw=relative:3+bias=relative:2"
CROSS_FORMULAS = [("shaw",), ("relative", 2)]


@pytest.mark.parametrize("backend", BIASED)
def test_an_encoder_layer_with_t5_alibi_and_shaw_matches_the_dense_reference_in_values_and_gradients(backend):
    torch.manual_seed(0)
    terms = parse_edges(ENC_SPEC, "enc")
    layer = EncoderLayer(D_MODEL, HEADS, 32, 0.0, True, edges=terms).double()
    randomise(layer, 1)
    batch = make_batch(GraphPool("full"), SOURCES, TARGETS)
    x = torch.randn(len(batch.src_tokens), D_MODEL, dtype=torch.float64, requires_grad=True)

    ours = layer(batch.relation(ENC), x, backend)
    h = layer.attn_block.enter(x)
    attn = reference_attention(
        (terms, layer.edges.uses), ENC_FORMULAS, layer.self_attn, h, h, batch.src_nodes, batch.src_nodes, "full"
    )
    theirs = layer.ff_block(layer.attn_block.leave(x, attn), layer.feed_forward)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)
    _same_gradients(layer, x, ours, theirs)


@pytest.mark.parametrize("backend", BIASED)
def test_a_decoder_layer_with_edges_on_self_and_cross_attention_matches_the_dense_reference(backend):
    torch.manual_seed(0)
    self_terms, cross_terms = parse_edges(DEC_SPEC, "dec"), parse_edges(CROSS_SPEC, "cross")
    layer = DecoderLayer(D_MODEL, HEADS, 32, 0.0, True, self_edges=self_terms, cross_edges=cross_terms).double()
    randomise(layer, 2)
    batch = make_batch(GraphPool("full", "causal", "full"), SOURCES, TARGETS)
    x = torch.randn(len(batch.tgt_tokens), D_MODEL, dtype=torch.float64, requires_grad=True)
    memory = torch.randn(len(batch.src_tokens), D_MODEL, dtype=torch.float64, requires_grad=True)

    ours = layer(batch.relation(DEC), batch.relation(CROSS), x, layer.memory_kv(memory), backend)
    h = layer.self_block.enter(x)
    counts = batch.tgt_lengths
    attn = reference_attention(
        (self_terms, layer.self_edges.uses), DEC_FORMULAS, layer.self_attn, h, h, counts, counts, "causal"
    )
    y = layer.self_block.leave(x, attn)
    c = reference_attention(
        (cross_terms, layer.cross_edges.uses),
        CROSS_FORMULAS,
        layer.cross_attn,
        layer.cross_block.enter(y),
        memory,
        counts,
        batch.src_nodes,
        "full",
    )
    y = layer.cross_block.leave(y, c)
    theirs = layer.ff_block(y, layer.feed_forward)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)
    _same_gradients(layer, (x, memory), ours, theirs)


def _same_gradients(layer, inputs, ours, theirs):
    """Gradients of a random projection of both outputs agree for every edge table and the inputs."""
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(ours.shape, generator=g, dtype=torch.float64)
    tables = [p for name, p in layer.named_parameters() if "edges" in name]
    assert tables, "the layer has no edge parameters"
    wrt = [*tables, *inputs]
    ours_grads = torch.autograd.grad((ours * weight).sum(), wrt, retain_graph=True)
    theirs_grads = torch.autograd.grad((theirs * weight).sum(), wrt)
    for a, b in zip(ours_grads, theirs_grads):
        assert b.abs().sum() > 0
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("spec", ["bias=relative:1", "alibi", "shaw=relative:1"])
def test_each_use_alone_changes_the_output_once_its_table_is_not_zero(spec):
    """A use starts as no use (a model starts unbiased); with its parameters set it changes attention."""
    torch.manual_seed(0)
    batch = make_batch(GraphPool("full"), SOURCES[:2])
    plain = EncoderLayer(D_MODEL, HEADS, 32, 0.0, True).double()
    edged = EncoderLayer(D_MODEL, HEADS, 32, 0.0, True, edges=parse_edges(spec, "enc")).double()
    edged.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randn(len(batch.src_tokens), D_MODEL, dtype=torch.float64)
    relation = batch.relation(ENC)
    same = torch.allclose(plain(relation, x, "torch"), edged(relation, x, "torch"))
    assert same == (spec != "alibi")  # alibi's slopes are fixed, not learned from zero
    randomise(edged.edges, 4)
    assert not torch.allclose(plain(relation, x, "torch"), edged(relation, x, "torch"))


def test_the_universal_transformer_learns_edge_tables_on_its_shrinking_subgraphs():
    """ACT's steps attend on the active tokens' in-edges (restrict_to_destinations): each kept
    edge keeps its type, so a per-query Shaw table and a value term still line up with the edges."""
    from graphformer.model import make_model

    torch.manual_seed(0)
    specs = dict(enc_edges="shaw=relative:2", dec_edges="bias=t5:8,6", cross_edges="shaw=relative:3+alibi")
    model = make_model(20, model="universal", max_depth=4, act_threshold=0.9, d_model=16, heads=4, d_ff=32, **specs)
    for name, p in model.named_parameters():
        if "edges" in name:
            torch.nn.init.normal_(p, std=0.5)
        if "halt" in name and "proj.weight" in name:  # halting probabilities from near 0 to near 1: some go on
            torch.nn.init.normal_(p, std=3.0)
    batch = make_batch(model.make_pool(), SOURCES, TARGETS)
    out = model(batch, full_output=True)
    assert min(out.stats["src"].active_nodes) < len(batch.src_tokens)  # some tokens halted: subgraphs ran
    assert min(out.stats["tgt"].active_nodes) < len(batch.tgt_tokens)
    (out.log_probs.sum() + out.aux_loss).backward()
    tables = {name: p.grad for name, p in model.named_parameters() if "edges" in name}
    assert len(tables) == 5 and all(g is not None and g.abs().sum() > 0 for g in tables.values())


TYPED = [e.name for e in BACKENDS.entries() if e.can("edge-type-bias")]


def featured_relation(seed: int, width: int):
    """Two samples of 6 keys and 5 queries, random edges (every query keeps one), F features per edge."""
    from graphformer.graphs.relation import Relation

    g = torch.Generator().manual_seed(seed)
    keep = torch.rand(2, 5, 6, generator=g) < 0.5
    keep[:, torch.arange(5), torch.randint(6, (5,), generator=g)] = True
    sample, query, key = keep.nonzero(as_tuple=True)
    u, v = key + 6 * sample, query + 5 * sample
    features = torch.randn(len(u), width, generator=g, dtype=torch.float64)
    types = torch.zeros(len(u), dtype=torch.int64)
    return Relation.of_edges(
        u,
        v,
        12,
        10,
        torch.tensor([6, 6]),
        torch.tensor([5, 5]),
        verified=True,
        edge_types=types,
        edge_features=features,
    )


@pytest.mark.parametrize("backend", backends(*TYPED, grad=True, float64=True))
def test_edge_features_join_each_edges_key_and_value_as_a_dense_reference_does(backend):
    """PyG's edge_dim, query by query: s_e = q_v . (k_u + W^K f_e) / sqrt(d), w = softmax over v's
    edges, o_v = sum_e w_e (v_u + W^V f_e); values and gradients (q, k, v, W^K, W^V, f) in float64."""
    from graphformer.model.edge_encoding import EdgeEncoding

    relation = featured_relation(0, width=3)
    edges = EdgeEncoding(parse_edges("features=given:1,3", "enc"), HEADS, D_HEAD).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in edges.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    q, k, v = (torch.randn(n, HEADS, D_HEAD, generator=g, dtype=torch.float64) for n in (10, 12, 12))
    leaves = (q, k, v, relation.edge_features, *edges.parameters())
    for t in leaves:
        t.requires_grad_(True)
    ours = edges.attend(relation, q, k, v, backend, "enc")

    wk, wv = edges.uses[0].keys, edges.uses[0].vals  # (F, H, d)
    rows = []
    for query in range(10):
        into = (relation.v == query).nonzero()[:, 0].tolist()
        keys = torch.stack([k[relation.u[e]] + torch.einsum("f,fhd->hd", relation.edge_features[e], wk) for e in into])
        vals = torch.stack([v[relation.u[e]] + torch.einsum("f,fhd->hd", relation.edge_features[e], wv) for e in into])
        w = torch.softmax((keys * q[query]).sum(-1) / math.sqrt(D_HEAD), dim=0)  # (edges, H)
        rows.append((w[..., None] * vals).sum(0))
    theirs = torch.stack(rows)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)
    grad = torch.randn_like(ours)
    for got, want in zip(torch.autograd.grad(ours, leaves, grad), torch.autograd.grad(theirs, leaves, grad)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_a_features_use_refuses_features_of_another_width_in_one_line():
    from graphformer.errors import ConfigError
    from graphformer.model.edge_encoding import EdgeEncoding

    edges = EdgeEncoding(parse_edges("features=given:1,4", "enc"), HEADS, D_HEAD).double()
    q, kv = torch.zeros(10, HEADS, D_HEAD, dtype=torch.float64), torch.zeros(12, HEADS, D_HEAD, dtype=torch.float64)
    with pytest.raises(
        ValueError, match="carries edge features of width 3, but its features use maps 4 per edge"
    ) as err:
        edges.attend(featured_relation(0, width=3), q, kv, kv, "torch", "enc")
    assert "\n" not in str(err.value)
    for spec in ("features=given:3", "features=relative:2", "features"):
        with pytest.raises(ConfigError, match="features"):
            parse_edges(spec, "enc")


def test_features_given_from_python_reach_the_model():
    """given:2,3 from Python: the pool puts each listed edge's features on the relation (zeros for
    the window's unlisted edges), and both maps, zero at first, learn from them."""
    from graphformer.model import make_model

    model = make_model(20, enc_attention="window:1+edges", enc_edges="features=given:2,3", d_model=16, heads=4, d_ff=32)
    u, v = torch.tensor([0, 2, 3]), torch.tensor([2, 0, 1])
    features = torch.tensor([[1.0, 0, 0], [0, 2.0, 0], [0, 0, 3.0]])
    batch = make_batch(model.make_pool(), [[5, 6, 7, 8]], [[5, 6]], edges=[(u, v, torch.tensor([0, 1, 1]), features)])
    carried = batch.relation(ENC).edge_features
    assert carried.shape[1] == 3 and carried.abs().sum() == features.abs().sum()  # unlisted edges: zeros
    model(batch).sum().backward()  # from zero maps, both have a gradient
    use = model.encoder.layers[0].edges.uses[0]
    assert use.keys.grad.abs().sum() > 0 and use.vals.grad.abs().sum() > 0
