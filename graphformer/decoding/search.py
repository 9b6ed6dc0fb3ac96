r"""Greedy and beam search over a stepper (see `graphformer.decoding.steppers`).

Beam search ranks hypotheses by the GNMT length-normalised score (Wu et al., 2016):

    score(Y) = log P(Y | X) / lp(Y),     lp(Y) = ((5 + |Y|) / 6) ** alpha

where |Y| counts the generated tokens including `</s>`. A hypothesis that has emitted `</s>` is
frozen: it keeps its tokens, log-probability and length, and competes with the live ones on its
final score. A sentence is done when all of its k hypotheses are frozen; at its length limit
every live hypothesis is made to end.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from graphformer.vocab import EOS, PAD, SOS


@dataclass
class Hypothesis:
    tokens: list[int]       # generated ids, without </s>
    log_prob: float         # log P(tokens + </s> | source)
    score: float            # the ranking score (log_prob / lp for beam search)


def length_penalty(length: torch.Tensor, alpha: float) -> torch.Tensor:
    return ((5.0 + length) / 6.0) ** alpha


def _mask_step(log_probs: torch.Tensor, at_limit: torch.Tensor) -> torch.Tensor:
    """Never emit <pad> or <s>; emit only </s> where the length limit is reached."""
    log_probs = log_probs.clone()
    log_probs[:, [PAD, SOS]] = float("-inf")
    eos = log_probs[:, EOS].clone()
    log_probs[at_limit] = float("-inf")
    log_probs[:, EOS] = eos
    return log_probs


def greedy_search(stepper, max_lengths: torch.Tensor) -> list[Hypothesis]:
    """The most likely token at every step, for each of the (H,) hypotheses of the stepper.

    max_lengths: (H,) most tokens (including `</s>`) each hypothesis may generate.
    """
    num = len(max_lengths)
    device = max_lengths.device
    tokens = torch.full((num,), SOS, dtype=torch.int64, device=device)
    finished = torch.zeros(num, dtype=torch.bool, device=device)
    total = torch.zeros(num, dtype=torch.float64, device=device)
    history = []
    for t in range(int(max_lengths.max())):
        log_probs = _mask_step(stepper.step(tokens), t + 1 >= max_lengths)
        best, nxt = log_probs.max(1)
        nxt = torch.where(finished, torch.full_like(nxt, EOS), nxt)
        total += torch.where(finished, torch.zeros_like(best), best).double()
        history.append(nxt)
        finished |= nxt == EOS
        if bool(finished.all()):
            break
        tokens = nxt
    out = torch.stack(history, 1).tolist()
    return [Hypothesis(_until_eos(seq), float(lp), float(lp)) for seq, lp in zip(out, total.tolist())]


def beam_search(stepper, max_lengths: torch.Tensor, beam: int, alpha: float = 0.6) -> list[Hypothesis]:
    """The best of ``beam`` hypotheses for each of the B sentences.

    The stepper must hold B * beam hypotheses (hypothesis h belongs to sentence h // beam).
    max_lengths: (B,) most tokens (including `</s>`) per sentence.
    """
    if beam < 1:
        raise ValueError(f"beam size must be at least 1, got {beam}")
    B, k = len(max_lengths), beam
    device = max_lengths.device
    log_p = torch.zeros(B, k, dtype=torch.float64, device=device)
    log_p[:, 1:] = float("-inf")  # all beams start identical: expand only the first
    finished = torch.zeros(B, k, dtype=torch.bool, device=device)
    length = torch.zeros(B, k, dtype=torch.float64, device=device)
    history = torch.zeros(B, k, 0, dtype=torch.int64, device=device)
    tokens = torch.full((B * k,), SOS, dtype=torch.int64, device=device)
    rows = torch.arange(B, device=device)[:, None]

    for t in range(int(max_lengths.max())):
        at_limit = (t + 1 >= max_lengths).repeat_interleave(k)
        step = _mask_step(stepper.step(tokens), at_limit).double()
        V = step.shape[1]
        step = step.view(B, k, V)
        # Live hypotheses: extend by every token. Frozen ones: a single </s> continuation at no cost.
        cand_log_p = log_p[:, :, None] + step
        cand_len = torch.full_like(cand_log_p, t + 1.0)
        frozen = torch.full_like(cand_log_p, float("-inf"))
        frozen[:, :, EOS] = log_p
        cand_log_p = torch.where(finished[:, :, None], frozen, cand_log_p)
        cand_len = torch.where(finished[:, :, None], length[:, :, None], cand_len)
        scores = cand_log_p / length_penalty(cand_len, alpha)

        top = scores.view(B, k * V).topk(k, dim=1).indices
        parent, token = top // V, top % V
        log_p = cand_log_p.view(B, k * V).gather(1, top)
        length = cand_len.view(B, k * V).gather(1, top)
        was_finished = finished.gather(1, parent)
        finished = was_finished | (token == EOS)
        history = torch.cat([history[rows, parent], token[:, :, None]], dim=2)
        stepper.reorder((rows * k + parent).flatten())
        tokens = token.flatten()
        if bool(finished.all()):
            break

    final = log_p / length_penalty(length, alpha)
    best = final.argmax(1)
    out = []
    for b in range(B):
        j = int(best[b])
        out.append(Hypothesis(_until_eos(history[b, j].tolist()), float(log_p[b, j]), float(final[b, j])))
    return out


def _until_eos(seq: list[int]) -> list[int]:
    return seq[: seq.index(EOS)] if EOS in seq else seq
