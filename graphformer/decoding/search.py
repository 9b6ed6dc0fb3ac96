r"""Greedy and beam search over a stepper (see `graphformer.decoding.steppers`).

Beam search ranks hypotheses by the GNMT length-normalised score (Wu et al., 2016):

    score(Y) = log P(Y | X) / lp(Y),     lp(Y) = ((5 + |Y|) / 6) ** alpha

where |Y| counts the generated tokens including `</s>`. A hypothesis that has emitted `</s>` is
frozen: it keeps its tokens, log-probability and length, and competes with the live ones on its
final score. Live hypotheses may push it out of the k slots; the best ended hypothesis a sentence
has held is kept apart all the same, and is the answer (the live ones that pushed it out may end
worse). A sentence is done when all of its k hypotheses are frozen; at its length limit every
live hypothesis is made to end.

Search reads back from the device only to learn which hypotheses ended (to stop, and to drop
them from the stepper). It does so every ``check_every`` steps: on a CPU every step (reading is
free, and an ended row leaves at once), on an accelerator every few (each read waits for the
device; in between, the host queues the next steps). Hypotheses that end between two checks keep
being stepped until the next one and add nothing, so the result is the same for any interval.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from graphformer.choices import DEFAULT_ALPHA
from graphformer.vocab import EOS, NEVER_EMITTED, SOS


@dataclass
class Hypothesis:
    tokens: list[int]  # generated ids, without </s>
    log_prob: float  # log P(tokens + </s> | source)
    score: float  # the ranking score (log_prob / lp for beam search)


def length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    return ((5.0 + length) / 6.0) ** alpha


def _never_specials_(log_probs: torch.Tensor) -> torch.Tensor:
    """In place: never emit <pad> or <s> (search owns the stepper's fresh (L, V) output)."""
    for token in NEVER_EMITTED:  # column by column: no index tensor per step
        log_probs[:, token] = float("-inf")
    return log_probs


def check_alpha(alpha) -> None:
    """The length penalty's exponent: a finite number, at least 0 (0: no penalty)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha < float("inf"):
        raise ValueError(f"alpha (the length penalty) must be a finite number of at least 0, got {alpha!r}")


def reads_are_free(device: torch.device) -> bool:
    """Whether reading a tensor's values on the host costs nothing (a CPU), rather than waiting for
    the device (an accelerator): what decides how search and steppers read back."""
    return device.type == "cpu"


def steps_between_checks(device: torch.device) -> int:
    """How often search reads back which hypotheses ended: every step on a CPU, every 8th elsewhere."""
    return 1 if reads_are_free(device) else 8


def _limits(max_lengths, stepper) -> torch.Tensor:
    """(N,) int64 length limits, each at least 1 (a tensor or a list), where the stepper computes
    (its ``device``, if it says)."""
    limits = torch.as_tensor(max_lengths, device=getattr(stepper, "device", None))
    if (
        limits.dim() != 1
        or len(limits) == 0
        or limits.is_floating_point()
        or limits.dtype == torch.bool
        or bool((limits < 1).any())
    ):
        raise ValueError(
            f"max_lengths must hold one whole number of at least 1 per hypothesis or sentence, got {max_lengths!r}"
        )
    return limits.long()


def _check_rows(stepper, rows: int) -> None:
    """A stepper that says how many hypotheses it holds (``num_hyps``) must hold the search's."""
    held = getattr(stepper, "num_hyps", rows)
    if held != rows:
        raise ValueError(
            f"the stepper holds {held} hypotheses, the search needs {rows} (one per sentence for "
            "greedy search, beam per sentence for beam search): make it with that many"
        )


def _interval(check_every: int | None, device: torch.device) -> int:
    if check_every is None:
        return steps_between_checks(device)
    if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 1:
        raise ValueError(f"check_every must be a whole number of steps, at least 1; got {check_every!r}")
    return check_every


def greedy_search(
    stepper, max_lengths: torch.Tensor, drop_finished: bool = True, check_every: int | None = None
) -> list[Hypothesis]:
    """The most likely token at every step, for each of the (H,) hypotheses of the stepper.

    max_lengths: (H,) most tokens (including `</s>`) each hypothesis may generate.
    drop_finished: a hypothesis that has emitted `</s>` leaves the stepper (its work stops);
        without it every hypothesis is stepped until the last one ends (as a padded batch is).
    check_every: steps between reads of which hypotheses ended (default: `steps_between_checks`).
    """
    max_lengths = _limits(max_lengths, stepper)
    num = len(max_lengths)
    _check_rows(stepper, num)
    device = max_lengths.device
    check_every = _interval(check_every, device)
    live = torch.arange(num, device=device)  # the hypothesis of each stepper row
    limits = max_lengths
    tokens = torch.full((num,), SOS, dtype=torch.int64, device=device)
    finished = torch.zeros(num, dtype=torch.bool, device=device)
    total = torch.zeros(num, dtype=torch.float64, device=device)
    history = torch.full((num, int(max_lengths.max())), EOS, dtype=torch.int64, device=device)
    for t in range(history.shape[1]):
        log_probs = _never_specials_(stepper.step(tokens))
        best, nxt = log_probs.max(1)
        # At its limit a hypothesis must end: </s> (no need to mask the other tokens first).
        at_limit = t + 1 >= limits
        best, nxt = torch.where(at_limit, log_probs[:, EOS], best), torch.where(at_limit, EOS, nxt)
        done = finished[live]  # rows still stepped after their </s> add nothing
        best, nxt = torch.where(done, 0.0, best), torch.where(done, EOS, nxt)
        history[live, t] = nxt
        total[live] += best.double()
        done |= nxt == EOS
        finished[live] = done
        if (t + 1) % check_every == 0:  # the only read back from the device
            ended = int(done.sum())
            if ended == len(live):
                break
            if drop_finished and ended:  # those rows leave the stepper
                rows = survivors(~done)
                live, nxt, limits = live[rows], nxt[rows], limits[rows]
                stepper.reorder(rows)
        tokens = nxt
    out = history.tolist()
    return [Hypothesis(_until_eos(seq), float(lp), float(lp)) for seq, lp in zip(out, total.tolist())]


@dataclass
class BeamState:
    """The hypotheses of the S sentences still searched, k per sentence (t: the steps taken)."""

    sentence: torch.Tensor  # (S,) the input sentence of each block of k stepper rows
    log_p: torch.Tensor  # (S, k) float64 log-probability of each hypothesis so far
    length: torch.Tensor  # (S, k) float64 tokens generated (frozen at `</s>`)
    finished: torch.Tensor  # (S, k) bool: has emitted `</s>`
    history: torch.Tensor  # (S, k, t) int64 tokens generated
    # The best ended hypothesis each sentence has held: live ones can push an ended one out of the
    # k slots and end worse later, and it must not be lost with its slot.
    kept_score: torch.Tensor  # (S,) float64, -inf while none has ended
    kept_log_p: torch.Tensor  # (S,) float64
    kept_tokens: torch.Tensor  # (S, T) int64, `</s>`-padded to the longest limit T

    @classmethod
    def start(cls, sentences: int, k: int, longest: int, device: torch.device) -> BeamState:
        """k identical empty hypotheses per sentence; only the first is expanded at the first step."""

        def full(shape, value, dtype):
            return torch.full(shape, value, dtype=dtype, device=device)

        log_p = full((sentences, k), 0.0, torch.float64)
        log_p[:, 1:] = float("-inf")
        return cls(
            torch.arange(sentences, device=device),
            log_p,
            full((sentences, k), 0.0, torch.float64),
            full((sentences, k), False, torch.bool),
            full((sentences, k, 0), EOS, torch.int64),
            full((sentences,), float("-inf"), torch.float64),
            full((sentences,), 0.0, torch.float64),
            full((sentences, longest), EOS, torch.int64),
        )

    def select(self, keep: torch.Tensor) -> BeamState:
        """The sentences of rows ``keep`` (S',) only, in that order."""
        return BeamState(*(getattr(self, f.name)[keep] for f in fields(self)))

    def results(self, rows: torch.Tensor) -> list[tuple[int, Hypothesis]]:
        """(input sentence, its best ended hypothesis) of these rows."""
        return [
            (s, Hypothesis(_until_eos(tokens), lp, score))
            for s, tokens, lp, score in zip(
                self.sentence[rows].tolist(),
                self.kept_tokens[rows].tolist(),
                self.kept_log_p[rows].tolist(),
                self.kept_score[rows].tolist(),
            )
        ]


def score_candidates(step: torch.Tensor, beams: BeamState, t: int, max_lengths: torch.Tensor, alpha: float):
    """The candidate continuations of each hypothesis at step t, (S, k, c) each: token, log-probability,
    length and score (log_p / lp). ``step``: the stepper's (S * k, V) log-probabilities.

    Live hypotheses: extended by their best c tokens, all of length t + 1; at the length limit, by
    `</s>` alone. Frozen ones: a single `</s>` continuation at no cost, at their own length. (Masked
    fills of the few candidates, not of the (S * k, V) step: no host sync.)
    """
    S, k = beams.log_p.shape
    cand_token, cand_log_p = _best_tokens(step, S, k, beams.log_p)
    c = cand_token.shape[2]
    only_first = torch.where(torch.arange(c, device=step.device) == 0, 0.0, float("-inf"))  # (c,)
    must_end = (t + 1 >= max_lengths[beams.sentence])[:, None, None]
    eos = beams.log_p[:, :, None] + step[:, EOS].view(S, k, 1).double()
    cand_log_p = torch.where(must_end, eos + only_first, cand_log_p)
    frozen = beams.finished[:, :, None]
    cand_log_p = torch.where(frozen, beams.log_p[:, :, None] + only_first, cand_log_p)
    cand_token = torch.where(must_end | frozen, EOS, cand_token)
    cand_len = torch.where(frozen, beams.length[:, :, None], t + 1.0).expand(S, k, c)
    return cand_token, cand_log_p, cand_len, cand_log_p / length_penalty(cand_len, alpha)


def _advance(beams: BeamState, step: torch.Tensor, t: int, max_lengths: torch.Tensor, alpha: float):
    """The k best candidates of each sentence: the next state, and each new hypothesis's token and
    parent row within its sentence, (S, k) each."""
    S, k = beams.log_p.shape
    cand_token, cand_log_p, cand_len, scores = score_candidates(step, beams, t, max_lengths, alpha)
    c = cand_token.shape[2]
    top = scores.reshape(S, k * c).topk(k, dim=1).indices  # one beam: one candidate, its first best token
    parent, token = top // c, cand_token.reshape(S, k * c).gather(1, top)
    log_p = cand_log_p.reshape(S, k * c).gather(1, top)
    length = cand_len.reshape(S, k * c).gather(1, top)
    finished = beams.finished.gather(1, parent) | (token == EOS)
    rows = torch.arange(S, device=step.device)
    history = torch.cat([beams.history[rows[:, None], parent], token[:, :, None]], dim=2)
    ended = torch.where(finished, log_p / length_penalty(length, alpha), float("-inf"))
    best, j = ended.max(1)
    better = best > beams.kept_score
    kept_tokens = beams.kept_tokens.clone()
    kept_tokens[:, : t + 1] = torch.where(better[:, None], history[rows, j], kept_tokens[:, : t + 1])
    state = BeamState(
        beams.sentence,
        log_p,
        length,
        finished,
        history,
        torch.where(better, best, beams.kept_score),
        torch.where(better, log_p[rows, j], beams.kept_log_p),
        kept_tokens,
    )
    return state, token, parent


def beam_search(
    stepper,
    max_lengths: torch.Tensor,
    beam: int,
    alpha: float = DEFAULT_ALPHA,
    drop_finished: bool = True,
    check_every: int | None = None,
) -> list[Hypothesis]:
    """The best of ``beam`` hypotheses for each of the B sentences.

    The stepper must hold B * beam hypotheses (hypothesis h belongs to sentence h // beam).
    max_lengths: (B,) most tokens (including `</s>`) per sentence.
    drop_finished: a sentence whose hypotheses have all ended leaves the stepper; without it
        every sentence is stepped until the last one ends.
    check_every: steps between reads of which sentences are done (default: `steps_between_checks`).
    """
    if beam < 1:
        raise ValueError(f"beam size must be at least 1, got {beam}")
    check_alpha(alpha)
    max_lengths = _limits(max_lengths, stepper)
    B, k = len(max_lengths), beam
    _check_rows(stepper, B * k)
    device = max_lengths.device
    check_every = _interval(check_every, device)
    beams = BeamState.start(B, k, int(max_lengths.max()), device)
    tokens = torch.full((B * k,), SOS, dtype=torch.int64, device=device)
    results: list[Hypothesis | None] = [None] * B
    for t in range(int(max_lengths.max())):
        rows = torch.arange(len(beams.sentence), device=device)  # the stepper's blocks of k rows
        beams, token, parent = _advance(beams, _never_specials_(stepper.step(tokens)), t, max_lengths, alpha)
        if (t + 1) % check_every == 0:  # the only reads back from the device
            done = beams.finished.all(1)
            if bool(done.all()):
                break
            if drop_finished and bool(done.any()):
                for s, hyp in beams.results(done.nonzero().squeeze(1)):
                    results[s] = hyp
                keep = survivors(~done)
                beams, token, parent, rows = beams.select(keep), token[keep], parent[keep], keep
        stepper.reorder((rows[:, None] * k + parent).flatten())
        tokens = token.flatten()
    for s, hyp in beams.results(torch.arange(len(beams.sentence), device=device)):
        results[s] = hyp
    return results


def _best_tokens(log_probs: torch.Tensor, sentences: int, k: int, log_p: torch.Tensor):
    """Each hypothesis's c = min(k, V) best tokens, (S, k, c), and their candidates' log-probabilities
    log_p + log P(token), (S, k, c) float64. A hypothesis's candidates share its log_p and (live,
    all of one length) its length penalty, so they rank as its tokens do: its best k tokens hold all
    of its candidates that can enter the beam, and only those are scored. ``log_probs`` is the
    step's (S * k, V) output; ``log_p`` (S, k) the hypotheses' log-probabilities so far."""
    c = min(k, log_probs.shape[1])
    # One beam: the first of tied tokens, as greedy search takes it (topk breaks ties otherwise).
    best, token = log_probs.max(1, keepdim=True) if c == 1 else log_probs.topk(c, dim=1)
    return token.view(sentences, k, c), log_p[:, :, None] + best.view(sentences, k, c).double()


def survivors(keep: torch.Tensor) -> torch.Tensor:
    """Indices of the True entries of ``keep`` (n,), ordered to move few of them: an entry among
    the first L = keep.sum() stays where it is, and the ones past L fill the gaps.

    >>> survivors(torch.tensor([True, False, True, False, True])).tolist()
    [0, 4, 2]
    """
    n = int(keep.sum())
    order = torch.arange(n, device=keep.device)
    order[~keep[:n]] = keep[n:].nonzero().squeeze(1) + n
    return order


def _until_eos(seq: list[int]) -> list[int]:
    return seq[: seq.index(EOS)] if EOS in seq else seq
