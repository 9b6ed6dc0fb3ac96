"""Incremental graph decoding gives exactly what recomputing the whole prefix gives."""
import pytest
import torch

from graphformer import GraphPool, make_model
from graphformer.attention.padded import SHORT_SPAN
from graphformer.decoding import translate_ids
from graphformer.decoding.search import length_penalty
from helpers import random_pairs

VOCAB = 23


def random_model(norm_first=True, seed=0):
    torch.manual_seed(seed)
    model = make_model(VOCAB, layers=2, d_model=32, heads=4, d_ff=64, dropout=0.0, norm_first=norm_first)
    return model.double().eval()


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("norm_first,backend", [(True, "auto"), (False, "auto"), (True, "dgl"), (True, "torch")])
def test_incremental_equals_recompute(beam, norm_first, backend):
    model = random_model(norm_first)
    model.attention_backend = backend
    src, _ = random_pairs(9, VOCAB, max_len=12, seed=3)
    kw = dict(beam=beam, alpha=0.6, batch_size=4, extra_len=6, pool=GraphPool())
    fast = translate_ids(model, src, incremental=True, **kw)
    slow = translate_ids(model, src, incremental=False, **kw)
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    for f, s in zip(fast, slow):
        assert f.score == pytest.approx(s.score, abs=1e-9)
        assert f.log_prob == pytest.approx(s.log_prob, abs=1e-9)
    assert len({len(h.tokens) for h in fast}) > 1, "test should cover hypotheses of different lengths"


def test_progress_hears_of_every_sentence_batch_by_batch():
    model = random_model()
    src, _ = random_pairs(9, VOCAB, max_len=12, seed=3)
    done = []
    hyps = translate_ids(model, src, beam=2, batch_size=4, extra_len=3, progress=done.append)
    assert done == [4, 4, 1] and len(hyps) == 9


def test_greedy_score_is_the_sequence_log_probability():
    model = random_model()
    src, _ = random_pairs(5, VOCAB, max_len=10, seed=4)
    hyps = translate_ids(model, src, beam=1, extra_len=5)
    from graphformer.graphs import make_batch
    with torch.no_grad():
        for s, h in zip(src, hyps):
            batch = make_batch(GraphPool(), [s], [h.tokens])
            logp = model(batch)
            gold = batch.gold
            if len(h.tokens) == len(s) + 1 + 5:  # stopped by the length limit: no </s> was scored
                gold, logp = gold[:-1], logp[:-1]
            assert float(logp.gather(1, gold[:, None]).sum()) == pytest.approx(h.log_prob, abs=1e-9)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_wide_beam_finds_the_exhaustive_optimum(alpha):
    """With at most 2 output tokens, a beam of 21 holds every hypothesis: it must find the best."""
    from graphformer.decoding import IncrementalStepper, beam_search
    from graphformer.graphs import make_batch
    from graphformer.vocab import EOS, PAD, SOS
    model = random_model(seed=1)
    src, _ = random_pairs(3, VOCAB, max_len=8, seed=5)
    batch = make_batch(GraphPool(), src)
    limits = torch.full((3,), 2)
    with torch.no_grad():
        found = beam_search(IncrementalStepper(model, batch, 21, 2), limits, beam=21, alpha=alpha)
        for s, hyp in zip(src, found):
            outputs = [[]] + [[a] for a in range(VOCAB) if a not in (PAD, SOS, EOS)]
            scores = []
            for y in outputs:
                b = make_batch(GraphPool(), [s], [y])
                logp = float(model(b).gather(1, b.gold[:, None]).sum())
                scores.append(logp / ((5 + len(y) + 1) / 6) ** alpha)
            best = max(range(len(outputs)), key=scores.__getitem__)
            assert hyp.tokens == outputs[best]
            assert hyp.score == pytest.approx(scores[best], abs=1e-9)


def test_beam_of_one_is_greedy():
    model = random_model(seed=2)
    src, _ = random_pairs(6, VOCAB, max_len=10, seed=6)
    greedy = translate_ids(model, src, beam=1, extra_len=6)
    from graphformer.decoding import IncrementalStepper, beam_search
    from graphformer.graphs import make_batch
    batch = make_batch(GraphPool(), src)
    limits = batch.src_lengths + 6
    with torch.no_grad():
        beamed = beam_search(IncrementalStepper(model, batch, 1, int(limits.max())), limits, beam=1, alpha=0.0)
    assert [h.tokens for h in beamed] == [h.tokens for h in greedy]


def test_length_penalty_formula():
    assert float(length_penalty(torch.tensor(1.0), 0.6)) == pytest.approx(1.0)
    assert float(length_penalty(torch.tensor(7.0), 1.0)) == pytest.approx(2.0)


@pytest.mark.parametrize("backend", ["padded", "dgl", "torch", "blocked"])
@pytest.mark.parametrize("lengths", [[3, 1, 4], 2, SHORT_SPAN + 2])  # uneven; even, short and long
@pytest.mark.parametrize("queries", [1, 2])
def test_tiled_relation_is_its_edges(backend, lengths, queries):
    """A tiled relation (keys read in place from fixed-width blocks) attends exactly like the same
    edges listed row by row, on every backend, weights and restriction to some queries included."""
    from graphformer.attention import graph_attention
    from graphformer.graphs.relation import Relation
    torch.manual_seed(0)
    tiles, width = 3, SHORT_SPAN + 3
    tiled = Relation.of_tiles(tiles, queries, width, lengths)
    counts = lengths if isinstance(lengths, list) else [lengths] * tiles
    rows = torch.full((tiles * queries, max(counts)), -1)
    for i in range(tiles * queries):
        b = i // queries
        rows[i, :counts[b]] = b * width + torch.arange(counts[b])
    listed = Relation.of_rows(rows, tiles * width)
    assert torch.equal(tiled.u, listed.u) and torch.equal(tiled.v, listed.v)
    assert tiled.num_edges == listed.num_edges == queries * sum(counts)
    q = torch.randn(tiles * queries, 2, 4, dtype=torch.float64)
    k, v = (torch.randn(tiles * width, 2, 4, dtype=torch.float64) for _ in range(2))
    out, weights = graph_attention(tiled, q, k, v, backend, return_weights=True)
    ref_out, ref_weights = graph_attention(listed, q, k, v, "torch", return_weights=True)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)
    active = torch.arange(tiles * queries) % 3 != 1
    torch.testing.assert_close(graph_attention(tiled.restrict_to_destinations(active), q[active], k, v, backend),
                               ref_out[active])
    torch.testing.assert_close(graph_attention(tiled, q, k, v, backend), ref_out)  # without weights


class RowCounter:
    """A stepper wrapper that records how many hypotheses each step computes."""

    def __init__(self, stepper):
        self.stepper, self.rows = stepper, []

    def step(self, tokens):
        self.rows.append(len(tokens))
        return self.stepper.step(tokens)

    def reorder(self, parents):
        self.stepper.reorder(parents)


@pytest.mark.parametrize("beam", [1, 3])
def test_finished_hypotheses_leave_the_computation(beam):
    """Dropping finished hypotheses (greedy) and sentences (beam) changes the work, not the result."""
    from graphformer.decoding import IncrementalStepper, beam_search, greedy_search
    from graphformer.graphs import make_batch
    model = random_model(seed=4)
    src, _ = random_pairs(8, VOCAB, max_len=9, seed=8)
    batch = make_batch(GraphPool(), src)
    limits = batch.src_lengths + 3
    found, work = [], []
    with torch.no_grad():
        for drop in (True, False):
            stepper = RowCounter(IncrementalStepper(model, batch, beam, int(limits.max())))
            if beam == 1:
                found.append(greedy_search(stepper, limits, drop_finished=drop))
            else:
                found.append(beam_search(stepper, limits, beam, alpha=0.6, drop_finished=drop))
            work.append(stepper.rows)
    assert [h.tokens for h in found[0]] == [h.tokens for h in found[1]]
    assert [h.score for h in found[0]] == pytest.approx([h.score for h in found[1]], abs=1e-9)
    assert len({len(h.tokens) for h in found[0]}) > 1, "sentences should end at different steps"
    assert work[1] == [len(src) * beam] * len(work[1])
    assert work[0] == sorted(work[0], reverse=True) and work[0][-1] < len(src) * beam
    assert sum(work[0]) < sum(work[1])
