"""BLEU with sacrebleu, two ways:

* ``bleu``: the standard score, detokenized output against the raw references (sacrebleu's own
  13a tokenization), reported with sacrebleu's signature;
* ``bleu_tokenized``: Moses-tokenized output against Moses-tokenized references with no further
  tokenization, cased: the number multi-bleu.perl gives, comparable to the DGL example's.
"""

from __future__ import annotations

import sacrebleu


def bleu_scores(
    hyp_tokens: list[list[str]], ref_tokens: list[list[str]], hyp_detok: list[str], ref_raw: list[str]
) -> dict:
    standard = sacrebleu.metrics.BLEU()
    score = standard.corpus_score(hyp_detok, [ref_raw])
    tokenized = sacrebleu.metrics.BLEU(tokenize="none", force=True).corpus_score(  # tokenized on purpose
        [" ".join(h) for h in hyp_tokens], [[" ".join(r) for r in ref_tokens]]
    )
    return {"bleu": score.score, "bleu_signature": str(standard.get_signature()), "bleu_tokenized": tokenized.score}
