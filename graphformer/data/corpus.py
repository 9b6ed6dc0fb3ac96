"""A corpus: train / valid / test splits of token ids, with the vocabularies that encode them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from graphformer.data.text import read_parallel
from graphformer.errors import UserError
from graphformer.vocab import Vocab


@dataclass
class Split:
    """Sentence pairs as words (token strings) and as token ids, and where the model's patterns
    take them, each sample's own attention edges (``edges[i]``, see
    `graphformer.graphs.sample_edges`)."""

    src_words: list[list[str]]
    tgt_words: list[list[str]]
    src: list[list[int]] = field(default_factory=list)
    tgt: list[list[int]] = field(default_factory=list)
    edges: Sequence | None = None

    def edges_of(self, idx: Sequence[int]) -> list | None:
        """The sample edges of the samples ``idx`` (None where the split has none)."""
        return None if self.edges is None else [self.edges[i] for i in idx]

    def __len__(self) -> int:
        return len(self.src_words)

    def encode(self, src_vocab: Vocab, tgt_vocab: Vocab) -> Split:
        self.src = [src_vocab.encode(s) for s in self.src_words]
        self.tgt = [tgt_vocab.encode(t) for t in self.tgt_words]
        return self


def read_split(data_dir: str | Path, name: str) -> Split:
    data_dir = Path(data_dir)
    src, tgt = read_parallel(data_dir / f"{name}.src", data_dir / f"{name}.tgt")
    empty = next((i for i, s in enumerate(src) if not s), None)
    if empty is not None:
        raise UserError(f"{data_dir / (name + '.src')}: line {empty + 1} is empty; every source sentence needs a token")
    return Split(src, tgt)


def build_vocabs(train: Split, min_count: int = 1, shared: bool = True) -> tuple[Vocab, Vocab]:
    """Vocabularies from the training split only (never from valid or test)."""
    if shared:
        vocab = Vocab.build(train.src_words + train.tgt_words, min_count)
        return vocab, vocab
    return Vocab.build(train.src_words, min_count), Vocab.build(train.tgt_words, min_count)
