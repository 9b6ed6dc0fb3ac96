"""The ``torch`` backend and the device story: relations carry everything attention needs.

The torch backend is checked against the DGL kernels, the padded and blocked backends and a
dense softmax on every pattern family, with gradients. The CUDA-with-CPU-only-DGL situation is
simulated on the CPU: DGL's kernels are made to raise and DGL is told it cannot run on the
tensors' device, and training and decoding must still work (through ``torch``) and agree.
"""

import pytest
import torch
from helpers import backends, import_dgl, needs_dgl, random_pairs, reference_backend

from graphformer import GraphPool, make_model
from graphformer.attention import BACKENDS, dgl_ops, graph_attention
from graphformer.decoding import translate_ids
from graphformer.graphs import CROSS, DEC, ENC, make_batch, patterns
from graphformer.graphs.relation import Relation

FAMILIES = [
    "full",
    "window:2",
    "dilated:2,2",
    "global:1+window:1",
    "block:3",
    "random:3,5",
    "tree:1",
    "window:1+dilated:1,3+random:2",
]
CAUSAL = ["causal", "causal-window:2", "causal-block:3", "causal-random:2"]


def dense_attention(relation, q, k, v):
    """Masked softmax over the (queries, keys) matrix of the relation's edges."""
    mask = torch.zeros(relation.num_queries, relation.num_keys, dtype=torch.bool)
    mask[relation.v, relation.u] = True
    scores = torch.einsum("jhd,ihd->hji", q, k) / q.shape[-1] ** 0.5
    return torch.einsum("hji,ihd->jhd", torch.softmax(scores.masked_fill(~mask, float("-inf")), -1), v)


def run(attend, relation, q, k, v):
    """Output and the gradients of q, k, v for a fixed random-looking loss."""
    for t in (q, k, v):
        t.grad = None
    out = attend(relation, q, k, v)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    return [out.detach()] + [t.grad.clone() for t in (q, k, v)]


def batch_relations(enc, dec="causal", cross="full", samples=5, seed=0):
    src, tgt = random_pairs(samples, 30, max_len=14, seed=seed)
    batch = make_batch(GraphPool(enc, dec, cross), src, tgt)
    return [batch.relation(r) for r in (ENC, DEC, CROSS)]


def qkv(relation, seed):
    gen = torch.Generator().manual_seed(seed)
    shapes = (relation.num_queries, relation.num_keys, relation.num_keys)
    return [torch.randn(n, 3, 4, dtype=torch.float64, generator=gen).requires_grad_() for n in shapes]


@pytest.mark.parametrize("enc", FAMILIES)
def test_torch_backend_equals_every_backend_and_dense_softmax(enc):
    dec = CAUSAL[FAMILIES.index(enc) % len(CAUSAL)]
    cross = "full" if enc == "tree:1" else enc
    for i, relation in enumerate(batch_relations(enc, dec, cross)):
        q, k, v = qkv(relation, seed=i)
        mine = run(BACKENDS["torch"], relation, q, k, v)
        for name in backends_here("dgl", "padded", "blocked"):
            for a, b in zip(mine, run(BACKENDS[name], relation, q, k, v)):
                torch.testing.assert_close(a, b, atol=1e-12, rtol=0, msg=lambda m: f"{name}, {enc}: {m}")
        for a, b in zip(mine, run(dense_attention, relation, q, k, v)):
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


def backends_here(*names):
    return [p.values[0] for p in backends(*names) if not p.marks]


@needs_dgl
def test_torch_backend_weights_equal_dgl_and_stay_finite_at_extreme_scores():
    relation = batch_relations("window:2+global:1")[0]
    q, k, v = (t.detach() for t in qkv(relation, seed=3))
    k = 1e4 * torch.nn.functional.normalize(k, dim=-1)  # scores up to 1e4 / 2
    out, w = BACKENDS["torch"](relation, q, k, v, return_weights=True)
    ref, ref_w = BACKENDS["dgl"](relation, q, k, v, return_weights=True)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-10, rtol=0)
    sums = torch.zeros(relation.num_queries, 3, 1, dtype=w.dtype).index_add_(0, relation.v, w)
    torch.testing.assert_close(sums, torch.ones_like(sums))


def test_relations_of_subgraphs_and_rows_keep_their_layouts():
    """restrict_to_destinations keeps sample counts (padded tiles) and key rows in edge order."""
    enc = batch_relations("window:2")[0]
    active = torch.rand(enc.num_queries, generator=torch.Generator().manual_seed(1)) < 0.5
    sub = enc.restrict_to_destinations(active)
    assert sub.num_queries == int(active.sum()) and int(sub.query_counts.sum()) == sub.num_queries
    rows = Relation.of_rows(torch.tensor([[0, 2, -1], [1, -1, -1], [0, 1, 2]]), num_keys=3)
    assert rows.u.tolist() == [0, 2, 1, 0, 1, 2] and rows.v.tolist() == [0, 0, 1, 2, 2, 2]
    rows_sub = rows.restrict_to_destinations(torch.tensor([True, False, True]))
    assert rows_sub.key_rows.tolist() == [[0, 2, -1], [0, 1, 2]] and rows_sub.v.tolist() == [0, 0, 1, 1, 1]
    for relation in (sub, rows_sub):
        q, k, v = qkv(relation, seed=2)
        ref = run(BACKENDS[reference_backend()], relation, q, k, v)
        for name in ("torch", "padded", "blocked"):
            for a, b in zip(ref, run(BACKENDS[name], relation, q, k, v)):
                torch.testing.assert_close(a, b, atol=1e-12, rtol=0)


@pytest.fixture
def dgl_cannot_run(monkeypatch):
    """What CUDA with PyPI's CPU-only DGL looks like to the attention code: the DGL kernels
    fail, and DGL reports that it cannot run on the tensors' device."""
    dgl = import_dgl()

    def refuse(*args, **kwargs):
        raise AssertionError("a DGL kernel was called")

    for name in (
        "u_dot_v",
        "copy_e_max",
        "e_sub_v",
        "u_mul_e_sum",
        "copy_e_sum",
        "e_div_v",
        "copy_u_mean",
        "gspmm",
        "gsddmm",
    ):
        monkeypatch.setattr(dgl.ops, name, refuse)
    monkeypatch.setattr(dgl_ops, "runs_on", lambda device: False)


def _train_step(model, batch):
    model.zero_grad()
    out = model(batch, full_output=True)
    loss = -out.log_probs.gather(1, batch.gold[:, None]).sum() + (out.aux_loss if out.aux_loss is not None else 0)
    loss.backward()
    return out.log_probs.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@needs_dgl
@pytest.mark.parametrize("kind", ["transformer", "universal"])
@pytest.mark.parametrize("backend", ["auto", "torch", "padded", "blocked"])
def test_training_and_decoding_never_call_dgl_kernels_when_dgl_cannot_run(kind, backend, request):
    extra = {"model": "universal", "max_depth": 3} if kind == "universal" else {"layers": 2}
    model = make_model(
        25,
        d_model=16,
        heads=2,
        d_ff=32,
        dropout=0.0,
        enc_attention="window:3+global:1",
        dec_attention="causal-window:4",
        cross_attention="window:4",
        **extra,
    ).double()
    src, tgt = random_pairs(6, 25, max_len=12, seed=5)
    pool = model.make_pool()
    model.attention_backend = "dgl"
    reference = _train_step(model, make_batch(pool, src, tgt))
    reference_hyps = translate_ids(model, src, beam=2, extra_len=3)

    request.getfixturevalue("dgl_cannot_run")
    model.attention_backend = backend
    with pytest.raises(AssertionError, match="DGL kernel"):  # the fixture does bite
        import_dgl().ops.u_dot_v(make_batch(pool, src[:1]).dgl_graph()[ENC], torch.ones(1), torch.ones(1))
    result = _train_step(model, make_batch(pool, src, tgt))
    torch.testing.assert_close(result[0], reference[0], atol=1e-10, rtol=0)
    for a, b in zip(result[1], reference[1]):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=0)
    hyps = translate_ids(model, src, beam=2, extra_len=3)
    assert [h.tokens for h in hyps] == [h.tokens for h in reference_hyps]
    assert [h.score for h in hyps] == pytest.approx([h.score for h in reference_hyps], abs=1e-9)


def test_the_dgl_backend_says_so_when_it_cannot_run(dgl_cannot_run):
    relation = batch_relations("full")[0]
    with pytest.raises(ValueError, match="torch attention backend"):
        BACKENDS["dgl"](relation, *qkv(relation, seed=0))


def spy_on_backends(monkeypatch, modules) -> list:
    """The names of the backend modules whose ``attend`` runs, in call order (they still run)."""
    calls = []
    for name in modules:
        module = __import__(f"graphformer.attention.{name}", fromlist=["attend"])
        real = module.attend
        monkeypatch.setattr(module, "attend", lambda *a, _n=name, _f=real, **kw: calls.append(_n) or _f(*a, **kw))
    return calls


@needs_dgl
def test_auto_picks_torch_only_where_dgl_cannot_run(monkeypatch):
    """auto: padded for dense per-sample tiles; dgl for sparse ones, torch where DGL can't run."""
    calls = spy_on_backends(monkeypatch, ("padded", "dgl_ops", "torch_ops"))
    full, window = batch_relations("full")[0], batch_relations("window:1", samples=3)[0]
    window = Relation(window.u, window.v, window.num_keys, window.num_queries)  # no sample counts: one big tile
    for relation in (full, window):
        graph_attention(relation, *qkv(relation, seed=0))
    monkeypatch.setattr(dgl_ops, "runs_on", lambda device: False)
    graph_attention(window, *qkv(window, seed=0))
    assert calls == ["padded", "dgl_ops", "torch_ops"]


@pytest.mark.parametrize("backend", ["padded", "torch", "blocked"])
def test_a_chosen_backend_is_never_replaced_by_another(backend, monkeypatch):
    """Every relation a model makes (batch, subgraphs of active nodes, decoding rows) is computed
    by the chosen backend itself: the others are made to fail."""
    for name in BACKENDS:
        if name != backend:
            monkeypatch.setitem(BACKENDS, name, lambda *a, _n=name, **kw: pytest.fail(f"{_n} was called"))
    modules = {"padded": "padded", "torch": "torch_ops", "blocked": "blocked"}
    for name in set(modules.values()) | {"dgl_ops"}:
        if name != modules[backend]:
            module = __import__(f"graphformer.attention.{name}", fromlist=["attend"])
            monkeypatch.setattr(module, "attend", lambda *a, _n=name, **kw: pytest.fail(f"{_n}.attend was called"))
    for kind in ("transformer", "universal"):
        extra = {"model": "universal", "max_depth": 2} if kind == "universal" else {"layers": 1}
        model = make_model(
            21, d_model=16, heads=2, d_ff=32, dropout=0.0, attention_backend=backend, enc_attention="tree:1", **extra
        ).double()
        src, tgt = random_pairs(4, 21, max_len=9, seed=6)
        model(make_batch(model.make_pool(), src, tgt)).sum().backward()
        assert len(translate_ids(model, src, beam=2, extra_len=2)) == len(src)


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown attention backend 'cuda'; choose one of auto, blocked"):
        make_model(9, layers=1, d_model=8, heads=2, d_ff=8, attention_backend="cuda")


def test_batch_to_keeps_its_graph_on_the_cpu_and_moves_its_relations():
    batch = make_batch(GraphPool(), [[4, 5, 6]], [[7, 8]]).to("meta")  # any device
    assert all(t.device.type == "cpu" for etype in batch.graph.canonical_etypes for t in batch.graph.edges(etype))
    relation = batch.relation(CROSS)
    assert relation.u.device.type == relation.key_counts.device.type == "meta"
    assert (relation.num_keys, relation.num_queries) == (4, 3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_a_gpu_is_a_one_line_error(tmp_path, capsys):
    from graphformer.cli import main

    code = main(["train", "--task", "copy", "--out", str(tmp_path / "run"), "--device", "cuda", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--device cuda: no CUDA device is visible here; use cpu" in err
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_auto_takes_blocked_for_long_local_patterns_only(monkeypatch):
    """Long windows fill their tiles (blocked); random links over the same length do not (dgl, or
    torch without DGL)."""
    from graphformer.attention import blocked

    edgewise = "dgl_ops" if reference_backend() == "dgl" else "torch_ops"  # auto's choice for irregular edges
    calls = spy_on_backends(monkeypatch, ("padded", edgewise, "blocked"))
    n = 1100
    relations = {}
    for spec in ("window:32", "random:8"):
        u, v = patterns.parse(spec)(n, n)
        relations[spec] = Relation(u, v, n, n, torch.tensor([n]), torch.tensor([n]))
    window_fill = (
        relations["window:32"].num_edges / blocked.layout_of(relations["window:32"], blocked.BLOCK).mask.numel()
    )
    assert window_fill > 0.25
    for spec, relation in relations.items():
        q, k, v = qkv(relation, seed=1)
        out = graph_attention(relation, q, k, v)
        chosen = calls.pop()
        torch.testing.assert_close(out, BACKENDS[reference_backend()](relation, q, k, v), rtol=0, atol=1e-10)
        assert chosen == {"window:32": "blocked", "random:8": edgewise}[spec]
