"""Input text as source ids a model can decode: tokenized, looked up in the run's vocabulary, and
cut to the positions the model has.

    lines = ["h e l l o", "w o r l d"]
    source = encode_lines(lines, tokenize, run.src_vocab, source_limit(run.model, pool))
    hyps = translate_ids(run.model, source.ids, pool=pool)

A token the vocabulary never saw reads as `<unk>`, and a line longer than the model's positions
keeps its first tokens; neither is an error (a user translating a file wants every line back),
so `SourceLines` says what happened and the caller decides how to tell it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from graphformer.vocab import UNK


@dataclass
class SourceLines:
    """Lines encoded for decoding.

    ``ids[i]`` holds line i+1's ids (at most the limit; an empty line gives ``[]``), ``words[i]``
    its tokens (cut alike), ``truncated`` the (line number from 1, tokens it had) of each line that was cut, and
    ``unknown`` how often each token outside the vocabulary occurred.
    """

    ids: list[list[int]]
    words: list[list[str]] = field(default_factory=list)
    truncated: list[tuple[int, int]] = field(default_factory=list)
    unknown: Counter = field(default_factory=Counter)

    def most_unknown(self, count: int = 10) -> list[str]:
        """The ``count`` unknown tokens seen most often, ties in alphabetical order."""
        return sorted(self.unknown, key=lambda token: (-self.unknown[token], token))[:count]


def source_limit(model, pool) -> int:
    """How many source tokens a line may have: the model's ``max_len`` less the positions the
    graph adds to every source (``</s>``, and ``<cls>`` for a classifier)."""
    return model.cfg.max_len - pool.source_positions(0)


def encode_lines(lines: list[str], tokenize: Callable[[str], list[str]], vocab, limit: int) -> SourceLines:
    """Each line tokenized, encoded with ``vocab`` and cut to its first ``limit`` ids."""
    encoded = SourceLines(ids=[])
    for number, line in enumerate(lines, 1):
        tokens = tokenize(line)
        ids = vocab.encode(tokens)
        encoded.unknown.update(token for token, id_ in zip(tokens, ids) if id_ == UNK)
        if len(ids) > limit:
            encoded.truncated.append((number, len(ids)))
            ids, tokens = ids[:limit], tokens[:limit]
        encoded.ids.append(ids)
        encoded.words.append(tokens)
    return encoded
