"""Scores of a model on a split: loss and token accuracy (teacher forcing), exact match (decoding).

For a classifier (``model='encoder'``) the same code scores one label per sample: the loss is the
mean cross-entropy per sample, "decoding" is the argmax label, and exact match is the accuracy
(also reported as ``accuracy``). Token accuracy (the argmax label under teacher forcing) and
character accuracy (of one position) count the same right labels: the scores keep all four keys
(``--select-by``, ``metrics.jsonl`` and the sweeps read them), and lines for people show
``accuracy`` alone (`for_console`).
"""

from __future__ import annotations

import torch

from graphformer.attention import flex_calls
from graphformer.data.batching import DECODE_BATCH_TOKENS, plan_batches
from graphformer.data.corpus import Split
from graphformer.decoding import DEFAULT_ALPHA, translate_ids
from graphformer.evaluation.bleu import bleu_scores
from graphformer.evaluation.loss import label_smoothed_nll, token_accuracy_counts
from graphformer.graphs import GraphPool, make_batch
from graphformer.model.classifier import NEVER_LABELS
from graphformer.model.modes import evaluating
from graphformer.vocab import NEVER_EMITTED

# A classifier's accuracy under the names it has as a sequence model's scores.
SAME_AS_ACCURACY = ("token_accuracy", "exact_match", "char_accuracy")
# What a one-line summary shows, in this order, where the scores have it.
HEADLINE = ("loss", "token_accuracy", "exact_match", "accuracy")


def for_console(scores: dict) -> dict:
    """The scores a line for people shows: all of them, but a classifier's (those with
    ``accuracy``) accuracy once rather than under four names of one number."""
    if "accuracy" not in scores:
        return scores
    return {name: value for name, value in scores.items() if name not in SAME_AS_ACCURACY}


def headline(scores: dict, sep: str = "=") -> str:
    """The loss and accuracies of ``scores`` that a one-line summary shows (`HEADLINE`, as
    `for_console` leaves them), each a name, ``sep`` and the value to 4 decimals. ``sep="="``
    keeps the names of ``evaluate --json`` (``loss=0.0850 token_accuracy=0.9998``); another
    ``sep`` writes them as words, comma-separated (``sep=" "``: ``loss 0.0850, token accuracy 0.9998``)."""
    shown = for_console(scores)
    names = [name for name in HEADLINE if name in shown]
    if sep == "=":
        return " ".join(f"{name}={shown[name]:.4f}" for name in names)
    return ", ".join(f"{name.replace('_', ' ')}{sep}{shown[name]:.4f}" for name in names)


@torch.no_grad()
def teacher_forced(model, split: Split, pool: GraphPool, batch_tokens: int = 4096) -> dict:
    """Mean per-token NLL (no smoothing) and token accuracy over the split."""
    device = next(model.parameters()).device
    total_loss, correct, total = 0.0, 0, 0
    ponder = PonderTally()
    never = NEVER_LABELS if model.cfg.classifies else NEVER_EMITTED  # as decoding: never predicted
    plan = plan_batches(
        [len(s) for s in split.src], [len(t) for t in split.tgt], batch_tokens=batch_tokens, shuffle=False
    )
    with evaluating(model):
        for idx in plan:
            src, tgt = [split.src[i] for i in idx], [split.tgt[i] for i in idx]
            batch = make_batch(pool, src, tgt, split.edges_of(idx)).to(device)
            output = model(batch, full_output=True)
            log_probs = output.log_probs
            total_loss += float(label_smoothed_nll(log_probs, batch.gold, 0.0))
            c, n = token_accuracy_counts(log_probs, batch.gold, never)
            correct, total = correct + c, total + n
            ponder.add(output.stats or {}, model.cfg.max_depth)
    return {"loss": total_loss / total, "token_accuracy": correct / total, **ponder.summary()}


class PonderTally:
    """Universal Transformer only: how many tokens enter each ACT step, and mean ponder steps."""

    def __init__(self):
        self.entering: dict[str, list[int]] = {}
        self.steps: dict[str, list[int]] = {}

    def add(self, stats: dict, max_depth: int) -> None:
        """``stats``: a forward pass's ACT statistics per side (`ModelOutput.stats`)."""
        for side, side_stats in stats.items():
            entering = self.entering.setdefault(side, [0] * max_depth)
            for s, n in enumerate(side_stats.active_nodes):
                entering[s] += n
            self.steps.setdefault(side, []).extend(side_stats.steps.tolist())

    def summary(self) -> dict:
        out = {}
        for side, entering in self.entering.items():
            out[f"{side}_step_fraction"] = [n / entering[0] for n in entering]
            out[f"{side}_mean_ponder"] = sum(self.steps[side]) / len(self.steps[side])
        return out


def exact_match(
    model,
    split: Split,
    pool: GraphPool,
    beam: int = 1,
    alpha: float = DEFAULT_ALPHA,
    *,
    batch_tokens: int = DECODE_BATCH_TOKENS,
    progress=None,
) -> tuple[float, list]:
    """Share of sentences decoded exactly as the reference, and the decoded hypotheses
    (``batch_tokens``, ``progress``: see `graphformer.decoding.translate_ids`)."""
    hyps = translate_ids(
        model,
        split.src,
        beam=beam,
        alpha=alpha,
        batch_tokens=batch_tokens,
        pool=pool,
        progress=progress,
        edges=split.edges,
    )
    hits = sum(h.tokens == ref for h, ref in zip(hyps, split.tgt))
    return hits / len(split), hyps


def char_accuracy(outputs: list[list], references: list[list]) -> float:
    """Share of positions decoded right, the character accuracy of the Universal Transformer
    paper for tasks whose tokens are characters: position i of a sentence counts as right where
    output and reference hold the same token there, and a sentence has as many positions as the
    longer of the two, so a missing or an extra token counts as wrong."""
    right = sum(sum(a == b for a, b in zip(out, ref)) for out, ref in zip(outputs, references))
    positions = sum(max(len(out), len(ref)) for out, ref in zip(outputs, references))
    return right / max(positions, 1)


def evaluate(
    model,
    split: Split,
    pool: GraphPool,
    beam: int = 1,
    alpha: float = DEFAULT_ALPHA,
    *,
    tgt_vocab=None,
    references: list[str] | None = None,
    detokenize=None,
    bleu_tokenize=None,
    batch_tokens: int = DECODE_BATCH_TOKENS,
    progress=None,
) -> dict:
    """Loss, token accuracy, exact match, character accuracy (`char_accuracy`) and n; with raw ``references`` (and the target vocabulary
    and detokenizer) also BLEU, standard and tokenized (see `graphformer.evaluation.bleu`).
    ``bleu_tokenize`` (text -> words) tokenizes output and references for the tokenized score
    where the model's tokens are not words (subwords); by default the model's tokens are scored.
    ``progress(n)`` hears of the sentences decoded, batch by batch; ``batch_tokens``: source tokens
    per decoding batch, as ``translate`` batches. Where the model's backend is ``flex``, or
    ``auto`` gave it calls, the scores say how flex served them (`flex_calls.FlexCalls.as_metrics`)."""
    before = flex_calls.snapshot()
    scores = teacher_forced(model, split, pool)
    scores["n"] = len(split)
    if not pool.decodable:  # target-side sample edges: teacher forcing is all there is to score
        return {**scores, **_flex_metrics(model, before)}
    scores["exact_match"], hyps = exact_match(
        model, split, pool, beam, alpha, batch_tokens=batch_tokens, progress=progress
    )
    scores["char_accuracy"] = char_accuracy([h.tokens for h in hyps], split.tgt)
    if model.cfg.classifies:
        scores["accuracy"] = scores["exact_match"]
    if references is not None:
        scores.update(bleu_of(hyps, split, tgt_vocab, references, detokenize, bleu_tokenize))
    return {**scores, **_flex_metrics(model, before)}


def _flex_metrics(model, before: flex_calls.FlexCalls) -> dict:
    """How flex served the calls since ``before``, where the model asked for it or auto used it."""
    calls = flex_calls.since(before)
    return calls.as_metrics() if flex_calls.worth_saying(model.attention_backend, calls) else {}


def bleu_of(hyps: list, split: Split, tgt_vocab, references: list[str], detokenize, bleu_tokenize=None) -> dict:
    """BLEU of the hypotheses of ``split`` (see `evaluate`): of their detokenized text against the
    raw references, and tokenized."""
    hyp_tokens = [tgt_vocab.decode(h.tokens) for h in hyps]
    hyp_text = [detokenize(h) for h in hyp_tokens]
    ref_tokens = split.tgt_words
    if bleu_tokenize is not None:
        hyp_tokens, ref_tokens = [bleu_tokenize(h) for h in hyp_text], [bleu_tokenize(r) for r in references]
    return bleu_scores(hyp_tokens, ref_tokens, hyp_text, references)
