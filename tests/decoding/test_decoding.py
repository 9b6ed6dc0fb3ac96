"""Incremental graph decoding gives exactly what recomputing the whole prefix gives."""

import pytest
import torch
from helpers import backends, random_pairs, runnable

from graphformer import GraphPool, make_model
from graphformer.attention.padded import SHORT_SPAN
from graphformer.data.batching import decoding_batches
from graphformer.decoding import translate_ids
from graphformer.decoding.search import length_penalty

VOCAB = 23


def random_model(norm_first=True, seed=0, kind="transformer"):
    torch.manual_seed(seed)
    depth = {"model": "universal", "max_depth": 3} if kind == "universal" else {"layers": 2}
    model = make_model(VOCAB, d_model=32, heads=4, d_ff=64, dropout=0.0, norm_first=norm_first, **depth)
    return model.double().eval()


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize(
    "norm_first,backend", [(True, "auto"), (False, "auto"), *[(True, b) for b in runnable(["dgl", "torch"])]]
)
def test_incremental_equals_recompute(beam, norm_first, backend):
    model = random_model(norm_first)
    model.attention_backend = backend
    src, _ = random_pairs(9, VOCAB, max_len=12, seed=3)
    kw = dict(beam=beam, alpha=0.6, batch_tokens=30, extra_len=6, pool=GraphPool())  # a few batches
    fast = translate_ids(model, src, incremental=True, **kw)
    slow = translate_ids(model, src, incremental=False, **kw)
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    for f, s in zip(fast, slow):
        assert f.score == pytest.approx(s.score, abs=1e-9)
        assert f.log_prob == pytest.approx(s.log_prob, abs=1e-9)
    assert len({len(h.tokens) for h in fast}) > 1, "test should cover hypotheses of different lengths"


@pytest.mark.parametrize(
    "beam,cross,kind",
    [(1, "operands", "transformer"), (3, "operands", "transformer"), (3, "window:1+operands", "transformer")]
    + [(1, "window:1+operands", "universal"), (3, "operands", "universal")],
)
def test_a_cross_structure_derived_from_each_source_decodes_as_recomputing_does(beam, cross, kind):
    """``operands`` gives each sample its own cross edges, made a query at a time by the
    incremental stepper and for the whole prefix by recomputing: the same hypotheses, with
    batches of several sentences that end at different steps (so sentences are dropped), for the
    Transformer and the Universal Transformer (ACT on the same edges)."""
    from graphformer.decoding import IncrementalStepper
    from graphformer.graphs import make_batch
    from graphformer.graphs.sample_edges import operands

    model = random_model(seed=4, kind=kind)
    src, _ = random_pairs(9, VOCAB, max_len=12, seed=6)
    src = [s + [5, 6] for s in src]  # at least two tokens besides the one read as '+'
    words = [[str(t) for t in s] for s in src]
    for w, s in zip(words, src):
        w[len(s) // 2] = "+"  # the pattern reads words; the ids stay as drawn
    edges = [{"cross": operands(w)} if beam > 1 else operands(w) for w in words]  # named, or the only term
    kw = dict(beam=beam, alpha=0.6, batch_tokens=40, extra_len=6, pool=GraphPool(cross=cross), edges=edges)
    fast = translate_ids(model, src, incremental=True, **kw)
    slow = translate_ids(model, src, incremental=False, **kw)
    assert [h.tokens for h in fast] == [h.tokens for h in slow]
    assert [h.score for h in fast] == pytest.approx([h.score for h in slow], abs=1e-9)
    assert len({len(h.tokens) for h in fast}) > 1, "test should cover hypotheses of different lengths"
    full = translate_ids(model, src, beam=beam, alpha=0.6, extra_len=6, pool=GraphPool())
    assert [h.tokens for h in fast] != [h.tokens for h in full], "the cross structure should change the outputs"
    with pytest.raises(ValueError, match="own_cross: give each sentence's own cross pattern"):
        IncrementalStepper(model, make_batch(GraphPool(cross=cross), src, edges=edges), beam, 8, GraphPool(cross=cross))


def test_progress_hears_of_every_sentence_batch_by_batch():
    model = random_model()
    src, _ = random_pairs(9, VOCAB, max_len=12, seed=3)
    done = []
    hyps = translate_ids(model, src, beam=2, batch_tokens=30, extra_len=3, progress=done.append)
    batches = decoding_batches([len(s) for s in src], 30)
    assert done == [len(b) for b in batches] and len(batches) > 2 and len(hyps) == 9


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


class ScriptedStepper:
    """Log-probabilities from ``script(t, rows)`` (rows: (L,) indices into the first step's
    hypotheses), following search's reorders: a model whose choices a test writes down."""

    def __init__(self, hyps, script):
        self.script, self.rows, self.t = script, torch.arange(hyps), 0

    def step(self, tokens):
        out = self.script(self.t, self.rows).double()
        self.t += 1
        return out

    def reorder(self, parents):
        self.rows = self.rows[parents]


def test_an_ended_hypothesis_pushed_out_of_the_beam_is_not_lost():
    """Step 0: ending now costs 0.5, "a" 0.3. Step 1: two continuations of "a" beat the ended
    hypothesis and push it out of a beam of 2. Then every token costs 3: both end far worse."""
    from graphformer.decoding import beam_search
    from graphformer.vocab import EOS

    A, B = 4, 5

    def script(t, rows):
        log_probs = torch.full((len(rows), 6), -3.0)
        if t == 0:
            log_probs[:, EOS], log_probs[:, A] = -0.5, -0.3
        elif t == 1:
            log_probs[:, A], log_probs[:, B], log_probs[:, EOS] = -0.05, -0.1, -9.0
        return log_probs

    for check_every in (1, 3):
        found = beam_search(ScriptedStepper(2, script), torch.tensor([6]), beam=2, alpha=0.0, check_every=check_every)
        assert (
            found[0].tokens == [] and found[0].score == pytest.approx(-0.5) and found[0].log_prob == pytest.approx(-0.5)
        )


def test_beam_of_one_takes_the_first_of_tied_tokens_as_greedy_does():
    from graphformer.decoding import beam_search, greedy_search
    from graphformer.vocab import EOS

    def script(t, rows):
        log_probs = torch.tensor([[-9.0, -9.0, -9.0, -1.0, -1.0, -1.0, -1.0, -2.0]]).repeat(len(rows), 1)
        log_probs[:, EOS] = -9.0 if t < 3 else 0.0
        return log_probs

    limits = torch.tensor([5])
    greedy = greedy_search(ScriptedStepper(1, script), limits)
    beamed = beam_search(ScriptedStepper(1, script), limits, beam=1, alpha=0.0)
    assert greedy[0].tokens == beamed[0].tokens == [3, 3, 3]


class PrefixStepper:
    """Next-token log-probabilities that are a fixed random function of each hypothesis's sentence
    and prefix, over 40 tokens: a model whose every continuation a test can enumerate."""

    VOCAB = 40

    def __init__(self, sentences, k):
        self.rows = [((s,), ()) for s in range(sentences) for _ in range(k)]  # (sentence, prefix)
        self.started = False

    @classmethod
    def log_probs(cls, sentence, prefix):
        generator = torch.Generator().manual_seed(hash(sentence + prefix) % 2**31)  # ints hash alike in every run
        return torch.log_softmax(3 * torch.randn(cls.VOCAB, generator=generator, dtype=torch.float64), 0)

    def step(self, tokens):
        if self.started:
            self.rows = [(s, prefix + (tok,)) for (s, prefix), tok in zip(self.rows, tokens.tolist())]
        self.started = True
        return torch.stack([self.log_probs(s, prefix) for s, prefix in self.rows])

    def reorder(self, parents):
        self.rows = [self.rows[p] for p in parents.tolist()]


class EarlyEndStepper(PrefixStepper):
    """Ending at once is likeliest (</s> at -0.1); every later token costs 0.001 and </s> 0.5. With a
    strong length penalty a long output scores best, so the beam must keep a live hypothesis
    beside the ended one: an ended hypothesis that took more than its one slot would push it out."""

    @classmethod
    def log_probs(cls, sentence, prefix):
        from graphformer.vocab import EOS

        out = torch.full((cls.VOCAB,), -5.0, dtype=torch.float64)
        out[EOS], out[4] = (-0.1, -1.0) if not prefix else (-0.5, -0.001)
        return out


def reference_beam_search(sentence, k, alpha, limit, model=PrefixStepper):
    """(score, tokens): beam search written out over lists. Every candidate of every hypothesis is
    scored (a live one by each token, an ended one as it is); the beam keeps the k best; the answer
    is the best ended hypothesis the beam ever held."""
    from graphformer.vocab import EOS, NEVER_EMITTED

    beam, best = [((), 0.0, None)], (float("-inf"), None)  # (tokens, log P, length if ended)
    for t in range(limit):
        candidates = []
        for tokens, log_p, ended in beam:
            if ended is not None:
                candidates.append((tokens, log_p, ended))
                continue
            step = model.log_probs((sentence,), tokens).tolist()
            for token, value in enumerate(step):
                if token in NEVER_EMITTED or (t + 1 == limit and token != EOS):
                    continue
                candidates.append(
                    (tokens, log_p + value, t + 1) if token == EOS else (tokens + (token,), log_p + value, None)
                )

        def score(candidate):  # GNMT: log P / ((5 + |Y|) / 6) ** alpha, |Y| counting </s>
            return candidate[1] / ((5.0 + (candidate[2] or t + 1)) / 6.0) ** alpha

        beam = sorted(candidates, key=score, reverse=True)[:k]
        for candidate in beam:
            if candidate[2] is not None and score(candidate) > best[0]:
                best = (score(candidate), list(candidate[0]))
        if all(candidate[2] is not None for candidate in beam):
            break
    return best


@pytest.mark.parametrize("k", [2, 5])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.4])
def test_beam_search_equals_scoring_every_candidate(k, alpha):
    """Search scores only each hypothesis's best k tokens (the others cannot enter the beam); the
    result must be that of scoring all of them, with 40 tokens and a beam of 2 or 5."""
    from graphformer.decoding import beam_search

    limits = [7, 4, 6]
    found = beam_search(PrefixStepper(len(limits), k), torch.tensor(limits), beam=k, alpha=alpha)
    for sentence, (hyp, limit) in enumerate(zip(found, limits)):
        score, tokens = reference_beam_search(sentence, k, alpha, limit)
        assert hyp.tokens == tokens and hyp.score == pytest.approx(score, abs=1e-9)
    assert len({len(h.tokens) for h in found}) > 1, "test should cover outputs of different lengths"


def test_an_ended_hypothesis_takes_one_slot_of_the_beam():
    from graphformer.decoding import beam_search

    found = beam_search(EarlyEndStepper(1, 2), torch.tensor([10]), beam=2, alpha=3.0)
    score, tokens = reference_beam_search(0, 2, 3.0, 10, EarlyEndStepper)
    assert len(tokens) > 0, "the long output should win: the test needs it"
    assert found[0].tokens == tokens and found[0].score == pytest.approx(score, abs=1e-9)


def test_length_penalty_formula():
    assert float(length_penalty(torch.tensor(1.0), 0.6)) == pytest.approx(1.0)
    assert float(length_penalty(torch.tensor(7.0), 1.0)) == pytest.approx(2.0)


@pytest.mark.parametrize("backend", backends("padded", "dgl", "torch", "blocked"))
@pytest.mark.parametrize("lengths", [[3, 1, 4], 2, SHORT_SPAN + 2])  # uneven; even, short and long
@pytest.mark.parametrize("queries", [1, 2])
def test_grouped_relation_is_its_edges(backend, lengths, queries):
    """A grouped relation (keys read in place from fixed-width blocks) attends exactly like the same
    edges listed row by row, on every backend, weights and restriction to some queries included."""
    from graphformer.attention import graph_attention
    from graphformer.graphs.relation import Relation

    torch.manual_seed(0)
    groups, width = 3, SHORT_SPAN + 3
    grouped = Relation.of_groups(groups, queries, width, lengths)
    counts = lengths if isinstance(lengths, list) else [lengths] * groups
    rows = torch.full((groups * queries, max(counts)), -1)
    for i in range(groups * queries):
        b = i // queries
        rows[i, : counts[b]] = b * width + torch.arange(counts[b])
    listed = Relation.of_rows(rows, groups * width)
    assert torch.equal(grouped.u, listed.u) and torch.equal(grouped.v, listed.v)
    assert grouped.num_edges == listed.num_edges == queries * sum(counts)
    q = torch.randn(groups * queries, 2, 4, dtype=torch.float64)
    k, v = (torch.randn(groups * width, 2, 4, dtype=torch.float64) for _ in range(2))
    out, weights = graph_attention(grouped, q, k, v, backend, return_weights=True)
    ref_out, ref_weights = graph_attention(listed, q, k, v, "torch", return_weights=True)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)
    active = torch.arange(groups * queries) % 3 != 1
    torch.testing.assert_close(
        graph_attention(grouped.restrict_to_destinations(active), q[active], k, v, backend), ref_out[active]
    )
    torch.testing.assert_close(graph_attention(grouped, q, k, v, backend), ref_out)  # without weights


@pytest.mark.parametrize(
    "backend,dec",
    [(b, "causal") for b in runnable(["auto", "padded", "dgl", "torch", "blocked"])]
    + [(b, "causal-window:2") for b in ("auto", "padded", "blocked")],
)
@pytest.mark.parametrize("beam", [1, 3])
def test_cache_slots_past_the_step_are_never_read(backend, dec, beam):
    """The key/value cache is allocated unwritten, not zeroed: a slot past the current step must
    never reach a result. Filled with NaN before decoding, it decodes what recomputing every
    prefix does, with every backend (the blocked one's tiles span the unwritten slots) and with a
    decoder pattern other than causal attention (its keys are listed row by row)."""
    from graphformer.decoding import IncrementalStepper, RecomputeStepper, beam_search, greedy_search
    from graphformer.graphs import make_batch

    model = random_model(seed=5)
    model.attention_backend = backend
    src, _ = random_pairs(6, VOCAB, max_len=9, seed=2)
    limits = torch.tensor([len(s) for s in src]) + 4
    pool = GraphPool(dec=dec)
    incremental = IncrementalStepper(model, make_batch(pool, src), beam, int(limits.max()), pool)
    incremental.cache.store.fill_(float("nan"))
    found = []
    with torch.no_grad():
        for stepper in (incremental, RecomputeStepper(model, src, beam, pool)):
            found.append(greedy_search(stepper, limits) if beam == 1 else beam_search(stepper, limits, beam))
    assert [h.tokens for h in found[0]] == [h.tokens for h in found[1]]
    assert [h.score for h in found[0]] == pytest.approx([h.score for h in found[1]], abs=1e-9)
    assert len({len(h.tokens) for h in found[0]}) > 1, "hypotheses should end at different steps"


@pytest.mark.parametrize("kind", ["transformer", "universal"])
@pytest.mark.parametrize("precision", ["autocast-bfloat16", "bfloat16"])
def test_decoding_in_lower_precision_stays_near_float32(kind, precision):
    """Under torch.autocast the projections give bfloat16 while the memory, out of a layer norm,
    stays float32: the decoding cache keeps the keys' dtype, so attention meets keys and queries of
    one dtype, as in a model converted to bfloat16. Teacher-forced and decoded step by step, the
    log-probabilities stay within bfloat16's error of float32's, far below how much they change
    from one target position to the next (so reading a wrong key would show)."""
    from helpers import low_precision_drift

    drift, step_change, cache_dtype = low_precision_drift(kind, precision)
    assert cache_dtype == torch.bfloat16
    assert drift < 0.1 < step_change / 2


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


def decode_with(model, src, beam, limits, **options):
    """The hypotheses of one batch, and the rows each step computed."""
    from graphformer.decoding import IncrementalStepper, beam_search, greedy_search
    from graphformer.graphs import make_batch

    batch = make_batch(GraphPool(), src)
    copy_moved_only = options.pop("copy_moved_only", None)
    stepper = RowCounter(IncrementalStepper(model, batch, beam, int(limits.max()), copy_moved_only=copy_moved_only))
    with torch.no_grad():
        if beam == 1:
            return greedy_search(stepper, limits, **options), stepper.rows
        return beam_search(stepper, limits, beam, alpha=0.6, **options), stepper.rows


@pytest.mark.parametrize("beam", [1, 3])
def test_reading_ended_hypotheses_every_few_steps_changes_the_work_not_the_result(beam):
    """Search learns which hypotheses ended every check_every steps (as on a GPU, where each read
    waits for the device); in between, ended rows are stepped and add nothing. Beam search's
    reorders gather every row (no read) or copy the moved ones (a read): the same result."""
    model = random_model(seed=4)
    src, _ = random_pairs(8, VOCAB, max_len=9, seed=8)
    limits = torch.tensor([len(s) for s in src]) + 4
    reference, every_step = decode_with(model, src, beam, limits, check_every=1, copy_moved_only=True)
    assert len({len(h.tokens) for h in reference}) > 1, "sentences should end at different steps"
    for check_every, copy_moved_only in ((3, True), (3, False), (1, False)):
        found, rows = decode_with(model, src, beam, limits, check_every=check_every, copy_moved_only=copy_moved_only)
        assert [h.tokens for h in found] == [h.tokens for h in reference]
        assert [h.score for h in found] == pytest.approx([h.score for h in reference], abs=1e-9)
        if check_every > 1:  # rows leave only at checks: later, so more row-steps in all
            assert all(rows[t] == rows[t - 1] for t in range(1, len(rows)) if t % check_every)
            assert sum(rows) > sum(every_step)
    with pytest.raises(ValueError, match="check_every"):
        decode_with(model, src, beam, limits, check_every=0)


@pytest.mark.parametrize("beam", [1, 3])
def test_between_checks_search_and_stepper_read_nothing_back_from_the_device(beam, monkeypatch):
    """Every read of a tensor's values on the host (a sync on a GPU) is counted: with checks every
    3 steps, steps in between read none, in search and in the stepper alike."""
    reads = []
    for name in ("__bool__", "__int__", "__float__", "item", "tolist", "nonzero"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda *a, _f=original, **kw: reads.append(1) or _f(*a, **kw))
    model = random_model(seed=4)
    src, _ = random_pairs(8, VOCAB, max_len=9, seed=8)
    limits = torch.tensor([len(s) for s in src]) + 4
    from graphformer.decoding import IncrementalStepper

    original_step = IncrementalStepper.step
    seen = []  # reads so far at each step
    monkeypatch.setattr(
        IncrementalStepper, "step", lambda self, tokens: seen.append(len(reads)) or original_step(self, tokens)
    )
    decode_with(model, src, beam, limits, check_every=3, copy_moved_only=False)
    between = [seen[t + 1] - seen[t] for t in range(len(seen) - 1)]  # step t and the search work after it
    assert all(n == 0 for t, n in enumerate(between) if (t + 1) % 3), between
    assert sum(between) > 0  # the checks do read (the counting works)
