"""The Adaptive Universal Transformer: ACT invariants, shrinking steps, decoding, bad input."""

import pytest
import torch
from helpers import TINY_MODEL, random_pairs, small_copy_data
from torch import nn

from graphformer import GraphPool, make_model
from graphformer.cli import main
from graphformer.decoding import translate_ids
from graphformer.evaluation.loss import label_smoothed_nll
from graphformer.graphs import ENC, make_batch
from graphformer.model.universal import timing_signal

VOCAB = 17


def universal(max_depth=4, threshold=0.99, **kw):
    torch.manual_seed(0)
    return make_model(
        VOCAB,
        model="universal",
        d_model=16,
        heads=2,
        d_ff=32,
        dropout=0.0,
        max_depth=max_depth,
        act_threshold=threshold,
        **kw,
    ).double()


def batch(n=7, seed=0, max_len=12):
    src, tgt = random_pairs(n, VOCAB, max_len=max_len, seed=seed)
    return make_batch(GraphPool(), src, tgt)


def set_halting_bias(model, value):
    with torch.no_grad():
        for unit in (model.encoder.halt, model.decoder_halt):
            unit.proj.weight.zero_()
            unit.proj.bias.fill_(value)


def test_halting_weights_sum_to_one_and_stop_at_the_halting_step():
    model = universal(max_depth=6)
    out = model(batch(), full_output=True)
    for side in ("src", "tgt"):
        stats = out.stats[side]
        torch.testing.assert_close(stats.weights.sum(1), torch.ones(len(stats.steps), dtype=torch.float64))
        after = torch.arange(6)[None, :] >= stats.steps[:, None]
        assert bool((stats.weights[after] == 0).all())
        assert len(set(stats.steps.tolist())) > 1, "tokens should halt at different steps"


def test_halting_probabilities_keep_the_states_dtype_under_autocast():
    """Halting sums them and compares the sum with 1 - eps: the bfloat16 that autocast's
    projection gives would round them to about 3 digits and move halting steps."""
    from graphformer.model.act import HaltingUnit

    unit, h = HaltingUnit(16), torch.randn(5, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        p = unit(h)
    assert p.dtype == torch.float32
    torch.testing.assert_close(p, unit(h), atol=0.02, rtol=0)


def test_a_halted_token_never_changes_and_is_never_a_destination_again():
    model = universal(max_depth=6)
    model.record_states = True
    b = batch()
    out = model(b, full_output=True)
    for side, etype in (("src", ENC), ("tgt", ("tgt", "dec", "tgt"))):
        stats = out.stats[side]
        steps = stats.steps
        in_degree = b.graph.in_degrees(etype=etype)
        for s, state in enumerate(stats.states):
            running = steps > s
            assert stats.active_nodes[s] == int(running.sum())
            halted = steps <= s
            final = torch.stack([stats.states[k - 1][i] for i, k in enumerate(steps.tolist())])
            torch.testing.assert_close(state[halted], final[halted], atol=0, rtol=0)
            if side == "src":
                assert stats.active_edges[s] == int(in_degree[running].sum())


def test_threshold_reached_at_first_step_means_one_step():
    model = universal(max_depth=5)
    set_halting_bias(model, 1e4)  # p = 1 > 0.99 at once
    out = model(batch(), full_output=True)
    for side in ("src", "tgt"):
        assert out.stats[side].steps.tolist() == [1] * len(out.stats[side].steps)
        assert len(out.stats[side].active_nodes) == 1


def test_halting_disabled_is_a_fixed_depth_shared_weight_transformer():
    depth = 4
    model = universal(max_depth=depth).eval()
    set_halting_bias(model, -1e4)  # p = 0: the threshold is never reached
    b = batch()
    with torch.no_grad():
        out = model(b, full_output=True)
        # reference: the shared layers applied `depth` times on the full graphs, no ACT
        h = model.src_embed(b.src_tokens, b.src_pos)
        for s in range(depth):
            h = model.encoder.layer(
                b.relation(ENC), h + timing_signal(model.encoder.depth, model.src_embed, b.src_pos, s)
            )
        memory = model.encoder.norm(h)
        mem_kv = model.memory_kv(memory)
        x = model.tgt_embed(b.tgt_tokens, b.tgt_pos)
        for s in range(depth):
            x = model.decoder_layer(
                b.relation(("tgt", "dec", "tgt")),
                b.relation(("src", "cross", "tgt")),
                x + timing_signal(model.encoder.depth, model.tgt_embed, b.tgt_pos, s),
                mem_kv[0],
            )
        expected = model.generator(model.decoder_norm(x))
    assert out.stats["src"].steps.tolist() == [depth] * len(b.src_tokens)
    torch.testing.assert_close(out.log_probs, expected, atol=1e-12, rtol=0)


def test_gradients_reach_the_halting_units():
    model = universal()
    b = batch()
    out = model(b, full_output=True)
    (label_smoothed_nll(out.log_probs, b.gold) + out.aux_loss).backward()
    for unit in (model.encoder.halt, model.decoder_halt):
        assert unit.proj.weight.grad is not None and float(unit.proj.weight.grad.abs().sum()) > 0


class HaltEvenTokensFirst(nn.Module):
    """p = 1 for the even-numbered tokens at the first step, 0.3 everywhere else."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, h):
        p = torch.full((len(h),), 0.3, dtype=h.dtype)
        if self.calls == 0:
            p[0::2] = 1.0
        self.calls += 1
        return p


def test_steps_really_shrink():
    model = universal(max_depth=4)
    model.encoder.halt = HaltEvenTokensFirst()
    b = batch(n=5, seed=3)
    stats = model(b, full_output=True).stats["src"]
    n = len(b.src_tokens)
    odd = torch.arange(n) % 2 == 1
    assert stats.active_nodes[:2] == [n, int(odd.sum())]
    in_degree = b.graph.in_degrees(etype=ENC)
    assert stats.active_edges[:2] == [int(in_degree.sum()), int(in_degree[odd].sum())]


@pytest.mark.parametrize("beam", [1, 3])
def test_incremental_decoding_equals_recompute(beam):
    model = universal(max_depth=5).eval()
    with torch.no_grad():  # spread halting over steps
        model.decoder_halt.proj.bias.fill_(-1.0)
    src, _ = random_pairs(6, VOCAB, max_len=9, seed=4)
    kw = dict(beam=beam, extra_len=5, batch_tokens=20)
    fast, slow = translate_ids(model, src, incremental=True, **kw), translate_ids(model, src, incremental=False, **kw)
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    assert [h.score for h in fast] == pytest.approx([h.score for h in slow], abs=1e-9)


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"model": "universal", "max_depth": 0}, "max_depth must be at least 1"),
        ({"model": "universal", "act_threshold": 0.0}, r"act_threshold must be in \(0, 1\]"),
        ({"model": "universal", "act_threshold": 1.5}, r"act_threshold must be in \(0, 1\]"),
        ({"max_depth": 4}, "max_depth and the other adaptive computation time options apply only to the universal"),
        ({"act_threshold": 0.5}, "act_threshold and the other adaptive computation time options apply only"),
        ({"model": "universal", "layers": 4}, "layers does not apply to model 'universal'"),
        ({"model": "universal-encoder", "layers": 2, "tgt_vocab": 8}, "layers does not apply to model 'universal-enc"),
    ],
)
def test_bad_act_options(kw, msg):
    with pytest.raises(ValueError, match=msg):
        make_model(VOCAB, d_model=16, heads=2, **kw)


def test_cli_trains_a_universal_model_and_rejects_act_options_elsewhere(tmp_path, capsys):
    data = small_copy_data(tmp_path / "data")
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--model",
                "universal",
                "--max-depth",
                "3",
                "--task",
                "parallel",
                "--data-dir",
                str(data),
                "--out",
                str(run),
                "--epochs",
                "1",
                "--batch-size",
                "16",
                *TINY_MODEL,
            ]
        )
        == 0
    )
    from helpers import read_jsonl

    metrics = read_jsonl(run / "metrics.jsonl")[0]
    assert len(metrics["valid_src_step_fraction"]) == 3 and metrics["valid_src_step_fraction"][0] == 1.0
    assert 1.0 <= metrics["valid_tgt_mean_ponder"] <= 3.0
    assert main(["train", "--max-depth", "3", "--out", str(tmp_path / "r2"), *TINY_MODEL]) == 2
    assert (
        "--max-depth and the other adaptive computation time options apply only to the universal model"
        in capsys.readouterr().err
    )


def test_universal_transformer_with_a_sparse_pattern_decodes_like_recompute():
    model = universal(
        max_depth=4, enc_attention="window:2", dec_attention="causal-window:2", cross_attention="window:3+global:1"
    ).eval()
    src, _ = random_pairs(5, VOCAB, max_len=9, seed=8)
    kw = dict(beam=2, extra_len=4, batch_tokens=20)
    fast, slow = translate_ids(model, src, incremental=True, **kw), translate_ids(model, src, incremental=False, **kw)
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    b = make_batch(model.make_pool(), src, [[4, 5]] * 5)
    out = model(b, full_output=True)
    in_degree = b.graph.in_degrees(etype=ENC)
    assert out.stats["src"].active_edges[0] == int(in_degree.sum()) < len(b.src_tokens) ** 2


def test_weights_saved_with_the_first_releases_flat_encoder_names_still_load():
    model = universal().eval()
    flat = {
        key.replace("encoder.layer.", "encoder_layer.")
        .replace("encoder.halt.", "encoder_halt.")
        .replace("encoder.norm.", "encoder_norm."): value
        for key, value in model.state_dict().items()
    }
    assert "encoder_layer.self_attn.in_proj.weight" in flat
    again = universal().eval()
    with torch.no_grad():
        for p in again.parameters():
            p.add_(1.0)  # differ from the saved weights before loading
    again.load_state_dict(flat)
    b = batch()
    torch.testing.assert_close(again(b), model(b), atol=0, rtol=0)


def test_aux_loss_over_needs_every_side():
    model = universal()
    out = model(batch(), full_output=True)
    with pytest.raises(ValueError, match="node count of every side of the batch .src, tgt.; missing: tgt"):
        out.aux_loss_over({"src": 10})
    # The batch as its own whole step: its per-side node counts give its aux_loss.
    nodes = {side: stats.steps.numel() for side, stats in out.stats.items()}
    torch.testing.assert_close(out.aux_loss_over(nodes), out.aux_loss)


def test_act_on_each_samples_own_graph_is_the_same_on_every_backend():
    """The Universal Transformer's ACT runs on the subgraph of still-active nodes of each sample's
    own graph: every backend gives the same log-probabilities and halting steps, a sample's
    result does not depend on the batch it is in, and its steps differ from another graph's."""
    from helpers import runnable

    from graphformer.graphs.sample_edges import parse_tree

    torch.manual_seed(0)
    model = make_model(20, model="universal", max_depth=5, d_model=16, heads=2, d_ff=32, dropout=0.0)
    model.cfg.enc_attention = "parse-tree"
    model = model.double().eval()
    words = ["[MAX 1 [MIN 2 3 ] 4 ]".split(), "[SM 5 6 ]".split()]
    src = [[4 + i % 10 for i in range(len(s))] for s in words]
    tgt = [[5, 6], [7]]
    edges = [parse_tree(w) for w in words]
    pool = model.make_pool()
    results = []
    for backend in runnable(float64=True):
        model.attention_backend = backend
        with torch.no_grad():
            out = model(make_batch(pool, src, tgt, edges), full_output=True)
            alone = model(make_batch(pool, src[1:], tgt[1:], edges[1:]))
        results.append((out.log_probs, out.stats["src"].steps))
        torch.testing.assert_close(out.log_probs[3:], alone, atol=1e-12, rtol=0)
    for log_probs, steps in results[1:]:
        torch.testing.assert_close(log_probs, results[0][0], atol=1e-10, rtol=0)
        assert torch.equal(steps, results[0][1])
    model.cfg.enc_attention = "full"
    with torch.no_grad():
        full = model(make_batch(model.make_pool(), src, tgt))
    assert not torch.allclose(full, results[0][0])  # the tree changed what the encoder computed
