"""Incremental graph decoding gives exactly what recomputing the whole prefix gives."""
import pytest
import torch

from graphformer import GraphPool, make_model
from graphformer.decoding import translate_ids
from graphformer.decoding.search import length_penalty
from helpers import random_pairs

VOCAB = 23


def random_model(norm_first=True, seed=0):
    torch.manual_seed(seed)
    model = make_model(VOCAB, layers=2, d_model=32, heads=4, d_ff=64, dropout=0.0, norm_first=norm_first)
    return model.double().eval()


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("norm_first", [True, False])
def test_incremental_equals_recompute(beam, norm_first):
    model = random_model(norm_first)
    src, _ = random_pairs(9, VOCAB, max_len=12, seed=3)
    kw = dict(beam=beam, alpha=0.6, batch_size=4, extra_len=6, pool=GraphPool())
    fast = translate_ids(model, src, incremental=True, **kw)
    slow = translate_ids(model, src, incremental=False, **kw)
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    for f, s in zip(fast, slow):
        assert f.score == pytest.approx(s.score, abs=1e-9)
        assert f.log_prob == pytest.approx(s.log_prob, abs=1e-9)
    assert len({len(h.tokens) for h in fast}) > 1, "test should cover hypotheses of different lengths"


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
