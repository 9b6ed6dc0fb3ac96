"""Token vocabulary with four fixed special symbols.

Every vocabulary in graphformer starts with the same specials at the same ids, so the
graph code can add start/end symbols without knowing which vocabulary is in use:

    0 <pad>   the dense reference model pads with it, and the span nodes of tree patterns carry it
              (their inputs are pooled from their tokens); token nodes never do
    1 <s>     start of a target sequence (the first decoder input)
    2 </s>    end of a target sequence (the last gold output)
    3 <unk>   any token not seen often enough in the training data
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from graphformer.files import write_text_atomic

PAD, SOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
NEVER_EMITTED = (PAD, SOS)  # what a decoder never outputs (search masks them; token accuracy skips them)


class Vocab:
    """A bijection between tokens and ids, specials first."""

    def __init__(self, tokens: Sequence[str]):
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with the specials {SPECIALS}")
        self.itos = list(tokens)
        self.stoi = {tok: i for i, tok in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("a vocabulary must not list a token twice")
        # What text may map to: "<pad>", "<s>" or "</s>" written in a sentence are unknown words,
        # never the markers that pad, start and end it.
        self._word_ids = {tok: i for tok, i in self.stoi.items() if i not in (PAD, SOS, EOS)}

    @classmethod
    def build(cls, sentences: Iterable[Sequence[str]], min_count: int = 1) -> Vocab:
        """Vocabulary of every token seen at least ``min_count`` times, most frequent first."""
        if min_count < 1:
            raise ValueError(f"min_count must be at least 1, got {min_count}")
        counts = Counter(tok for sent in sentences for tok in sent)
        for special in SPECIALS:
            counts.pop(special, None)
        kept = sorted((t for t, c in counts.items() if c >= min_count), key=lambda t: (-counts[t], t))
        return cls(list(SPECIALS) + kept)

    def __len__(self) -> int:
        return len(self.itos)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self.itos == other.itos

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Ids of words; a token not in the vocabulary, or a written marker (``"</s>"``), is `<unk>`."""
        return [self._word_ids.get(tok, UNK) for tok in tokens]

    def decode(self, ids: Iterable[int], strip_specials: bool = True) -> list[str]:
        """Tokens for ``ids``, stopping at the first `</s>` when ``strip_specials``."""
        out = []
        for i in ids:
            i = int(i)
            if strip_specials:
                if i == EOS:
                    break
                if i in (PAD, SOS):
                    continue
            if not 0 <= i < len(self.itos):  # a negative id would read from the end
                raise IndexError(f"id {i} is not in this vocabulary of {len(self.itos)} tokens")
            out.append(self.itos[i])
        return out

    def save(self, path: str | Path) -> None:
        write_text_atomic(path, json.dumps(self.itos, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: str | Path, side: str | None = None) -> Vocab:
        """A vocabulary written by `save` (a list of tokens), or one ``side`` ("src" or "tgt") of a
        run's ``vocab.json`` ({"src": [...], "tgt": [...]})."""
        tokens = json.loads(Path(path).read_text(encoding="utf-8"))
        if isinstance(tokens, dict):
            if side not in tokens:
                raise ValueError(
                    f"{path} holds the vocabularies {sorted(tokens)}; choose one: "
                    f"Vocab.load(path, side={sorted(tokens)[0]!r})"
                )
            tokens = tokens[side]
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ValueError(f"{path} is not a vocabulary: expected a list of tokens")
        return cls(tokens)
