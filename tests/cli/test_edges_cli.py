"""--enc-edges, --dec-edges, --cross-edges through the command line: every model trains with them,
resume keeps them, evaluate and translate read them back, recorded maps hold the weights after
the bias, and a bad spec is one line, exit 2, with nothing written."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import TINY_MODEL, read_jsonl, small_copy_data, small_recall_data, snapshot

from graphformer.cli import main
from graphformer.model.edge_spec import edges_help, parse_edges

FAST = ["--epochs", "2", "--batch-size", "16", "--warmup", "10", *TINY_MODEL]


def train(data, out, *extra, task="parallel"):
    return main(["train", "--task", task, "--data-dir", str(data), "--out", str(out), *FAST, *extra])


def loss_fell(run) -> bool:
    """The mean loss of the last five steps is below that of the first five."""
    losses = [row["loss"] for row in read_jsonl(run / "steps.jsonl")]
    return sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.1


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("graphformer: error: "), err
    return err


@pytest.fixture(scope="module")
def copy_data(tmp_path_factory):
    return small_copy_data(tmp_path_factory.mktemp("copy") / "data")


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--enc-edges", "biass=relative:4"], "--enc-edges term 'biass=relative:4': unknown use 'biass' (did you mean"),
        (["--cross-edges", "bias=relativ:4"], "--cross-edges term 'bias=relativ:4': unknown edge type 'relativ' (did"),
        (["--enc-edges", "bias=t5:32"], "t5 takes 2 integer argument(s): t5:B,D"),
        (["--enc-edges", "bias=t5:7,20"], "'bias=t5:7,20': t5:7,20: B must be even, half the buckets for keys on each"),
        (["--enc-edges", "bias=t5:2,20"], "t5:2,20: B must be at least 4 here: B/4 buckets hold one offset each"),
        (["--enc-edges", "bias=t5:16,4"], "t5:16,4: D must exceed B/4 = 4, the offsets with a bucket each"),
        (["--dec-edges", "bias=t5:16,8"], "--dec-edges term 'bias=t5:16,8': t5:16,8: D must exceed B/2 = 8"),
        (
            ["--enc-edges", "bias=hops:255"],
            "--enc-edges term 'bias=hops:255': hops:255: the clip K must be from 1 to 254",
        ),
        (["--enc-edges", "bias=relative:x"], "the arguments of relative must be integers"),
        (["--enc-edges", "bias=relative:0"], "must be positive integers"),
        (["--dec-edges", "alibi=relative:4"], "alibi multiplies the distance; write alibi"),
        (["--enc-edges", "bias=distance"], "distance has no bound"),
        (["--enc-edges", "shaw"], "shaw needs the edge types it reads, e.g. shaw=relative:16"),
        (["--enc-edges", "alibi+"], "empty term around '+'"),
        (["--model", "encoder", "--dec-edges", "alibi"], "--dec-edges applies to models with a decoder"),
    ],
)
def test_a_bad_edges_spec_is_one_line_and_writes_nothing(copy_data, tmp_path, capsys, flags, message):
    before, out = snapshot(copy_data), tmp_path / "run"
    assert train(copy_data, out, *flags) == 2
    assert message in one_line_error(capsys)
    assert not out.exists() and snapshot(copy_data) == before


def test_encoder_edges_train_resume_evaluate_and_translate(copy_data, tmp_path, capsys):
    """With --positions none, order comes only from the edges; the run's spec is read back by
    resume (a different one is refused), evaluate and translate."""
    spec, run = "bias=t5:8,16+alibi+shaw=relative:2", tmp_path / "run"
    assert train(copy_data, run, "--enc-edges", spec, "--positions", "none") == 0
    assert loss_fell(run)
    assert json.loads((run / "config.json").read_text())["model"]["enc_edges"] == spec
    weights = torch.load(run / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    assert weights["encoder.layers.0.edges.uses.0.table"].abs().sum() > 0  # learned from zero
    assert weights["encoder.layers.0.edges.uses.2.vals"].abs().sum() > 0

    before = snapshot(run)
    assert main(["train", "--resume", "--out", str(run), "--enc-edges", "alibi", "--quiet"]) == 2
    assert "--enc-edges" in one_line_error(capsys) and snapshot(run) == before
    assert main(["train", "--resume", "--out", str(run), "--epochs", "3", "--quiet"]) == 0
    assert len(read_jsonl(run / "metrics.jsonl")) == 3

    capsys.readouterr()
    assert main(["evaluate", str(run), "--split", "valid", "--json", "--beam", "1"]) == 0
    assert 0 <= json.loads(capsys.readouterr().out)["token_accuracy"] <= 1
    assert main(["translate", str(run), "--input", str(copy_data / "valid.src"), "--beam", "2", "--quiet"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len((copy_data / "valid.src").read_text().splitlines())
    # Every backend adds these biases: blocked, chosen by name, scores the run as auto does.
    capsys.readouterr()
    scores = {}
    for backend in ("auto", "blocked"):
        command = ["evaluate", str(run), "--split", "valid", "--json", "--beam", "1", "--attention-backend", backend]
        assert main(command) == 0
        scores[backend] = json.loads(capsys.readouterr().out)["token_accuracy"]
    assert scores["blocked"] == pytest.approx(scores["auto"], abs=0.02)


def test_the_universal_transformer_trains_with_edges(copy_data, tmp_path):
    run = tmp_path / "run"
    assert train(copy_data, run, "--model", "universal", "--max-depth", "3", "--enc-edges", "shaw=relative:2") == 0
    assert loss_fell(run)


@pytest.mark.parametrize("model", ["encoder", "universal-encoder"])
def test_the_classifiers_train_evaluate_and_classify_with_edges(tmp_path, capsys, model):
    data, run = small_recall_data(tmp_path / "data"), tmp_path / "run"
    depth = ["--max-depth", "3"] if model == "universal-encoder" else []
    assert train(data, run, "--model", model, *depth, "--enc-edges", "bias=t5:8,16+alibi", task="classify") == 0
    assert loss_fell(run)
    capsys.readouterr()
    assert main(["evaluate", str(run), "--split", "test", "--json"]) == 0
    assert 0 <= json.loads(capsys.readouterr().out)["accuracy"] <= 1
    assert main(["translate", str(run), "--input", str(data / "test.src"), "--quiet"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len((data / "test.src").read_text().splitlines())


def test_decoder_and_cross_edges_train_and_decode(copy_data, tmp_path, capsys):
    """Decoding reads the bias of each new query at its step (the step's relations carry
    positions): greedy and beam search translate every line."""
    run = tmp_path / "run"
    assert train(copy_data, run, "--dec-edges", "bias=t5:8,16", "--cross-edges", "shaw=relative:3+alibi") == 0
    assert loss_fell(run)
    lines = len((copy_data / "valid.src").read_text().splitlines())
    for beam in ("1", "3"):
        capsys.readouterr()
        assert main(["translate", str(run), "--input", str(copy_data / "valid.src"), "--beam", beam, "--quiet"]) == 0
        assert len(capsys.readouterr().out.splitlines()) == lines


def test_recorded_maps_hold_the_weights_after_the_bias():
    from graphformer.attention import record_attention
    from graphformer.graphs import make_batch
    from graphformer.model import make_model

    torch.manual_seed(0)
    model = make_model(20, enc_edges="bias=relative:2", d_model=16, heads=4, d_ff=32, dropout=0.0).eval()
    batch = make_batch(model.make_pool(), [[5, 6, 7, 8, 9], [9, 8, 7]], [[5, 6], [7]])
    table = model.encoder.layers[0].edges.uses[0].table

    def encoder_maps():
        with torch.no_grad(), record_attention() as records:
            model(batch)
        return [(relation, w) for name, relation, w in records if name == "enc"]

    unbiased = encoder_maps()
    with torch.no_grad():
        table.copy_(torch.linspace(-3, 3, table.numel()).view(table.shape))
    biased = encoder_maps()
    for (relation, w), (_, w0) in zip(biased, unbiased):
        sums = torch.zeros(relation.num_queries, w.shape[1]).index_add_(0, relation.v, w[..., 0])
        torch.testing.assert_close(sums, torch.ones_like(sums))
        assert (w - w0).abs().max() > 0.05


def test_a_plugins_use_is_offered_and_built(monkeypatch):
    """EDGE_USES is an extension point: a registered use is in --help and a spec may name it."""
    from graphformer.catalog import EDGE_USES
    from graphformer.model import make_model
    from graphformer.model.edge_encoding import ScoreBias

    monkeypatch.setattr(EDGE_USES, "_entries", dict(EDGE_USES._entries))
    monkeypatch.setattr(EDGE_USES, "_loaded", dict(EDGE_USES._loaded))
    EDGE_USES.register("scalar", "a learned scalar, again", ScoreBias, ["table"])
    assert "scalar: a learned scalar, again" in edges_help("enc")
    assert [t.use for t in parse_edges("scalar=relative:2+alibi", "enc")] == ["scalar", "alibi"]
    model = make_model(20, enc_edges="scalar=relative:2", d_model=16, heads=4, d_ff=32)
    assert isinstance(model.encoder.layers[0].edges.uses[0], ScoreBias)


def test_per_sample_types_go_to_the_pool_that_reads_them():
    """The model config names each relation's per-sample types to its graph pool, and a backend
    must then serve edge-type biases; one relation reads one kind of per-sample type."""
    from graphformer.errors import ConfigError
    from graphformer.graphs import ENC
    from graphformer.graphs.sample_types import Roles
    from graphformer.model import ModelConfig

    cfg = ModelConfig(
        src_vocab=10,
        tgt_vocab=10,
        enc_attention="window:1+parse-tree",
        enc_edges="bias=role+alibi",
        cross_edges="shaw=relative:2",
    )
    assert cfg.graph_pool().edge_types == {ENC: Roles()}
    assert cfg.backend_needs() == {"edge-type-bias", "position-bias"}
    with pytest.raises(ConfigError, match="reads hops:2 and role from each sample; one kind at a time$"):
        parse_edges("bias=role+shaw=hops:2", "enc")


@pytest.mark.parametrize("spec", ["role", "hops:1", "hops:3", "given:3", "given:2,4"])
def test_the_pools_ids_fit_the_models_tables(spec):
    """The model's table has a row for every id the pool gives: the spec's words are the ones the
    pool parses, and an edge of the length pattern that the sample does not list (given:T's id T),
    or a pair farther than K hops, has its row too."""
    from graphformer.graphs import ENC, make_batch
    from graphformer.graphs.sample_types import parse_derivation
    from graphformer.model import make_model

    (term,) = parse_edges(f"bias={spec}", "enc")
    assert parse_derivation(term.types_spec) == term.derivation()
    model = make_model(20, enc_attention="window:2+edges", enc_edges=f"bias={spec}", d_model=16, heads=4, d_ff=32)
    rows = model.encoder.layers[0].edges.uses[0].table.shape[0]
    u, v = torch.tensor([0, 1, 2, 3, 5, 6]), torch.tensor([1, 2, 3, 4, 6, 7])  # a path 0-4, and 5-7 apart
    width = int(spec.split(",")[1]) if "," in spec else None
    listed = (u, v, torch.tensor([0, 1, 0, 1, 1, 0])) + ((torch.randn(6, width),) if width else ())
    batch = make_batch(model.make_pool(), [list(range(4, 12))], [[5, 6]], edges=[listed])
    ids = batch.relation(ENC).edge_types
    assert int(ids.max()) == rows - 1  # the last row is used: "other", "> K hops" or "unlisted"
    assert int(ids.min()) == 0
    model(batch).sum().backward()
    assert model.encoder.layers[0].edges.uses[0].table.grad.abs().sum(1).gt(0).tolist() == [
        bool((ids == t).any()) for t in range(rows)
    ]  # rows of the ids that occur, and only those, are learned
