"""Subword vocabularies: SentencePiece BPE, learned on the training split only.

Word vocabularies leave rare words as `<unk>`; a subword vocabulary of a few thousand pieces
spells every word, rare ones as several pieces (``▁Fahr rad``). One model serves both languages
(learned on the English and German training sentences together), so source and target share
pieces. It is learned from the raw sentences, spaces included (``▁`` marks a word start), so
decoding pieces gives back plain text: BLEU is computed on that text against the raw references.

The model lives in the run directory (``RUN_DIR/subwords.model``): evaluation and translation
need it, and a run without it cannot read its own vocabulary.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from graphformer.errors import UserError

MODEL = "subwords.model"
RECORD = "subwords.json"  # the options the model was learned with (bpe, train_limit)
DATA_PREFIX = "data-bpe"  # RUN_DIR/data-bpeN: the splits in pieces of an N-piece model


def learn(lines: list[str], vocab_size: int, model_path: Path) -> Path:
    """Learn a BPE model of ``vocab_size`` pieces from ``lines`` (deterministic: every line is
    used, none sampled); written atomically to ``model_path``."""
    import sentencepiece

    model_path = Path(model_path)
    with tempfile.TemporaryDirectory(dir=model_path.parent) as scratch:
        prefix = Path(scratch) / "subwords"
        try:
            sentencepiece.SentencePieceTrainer.train(
                sentence_iterator=iter(lines),
                model_prefix=str(prefix),
                vocab_size=vocab_size,
                model_type="bpe",
                character_coverage=1.0,
                minloglevel=2,
                # graphformer's own specials (graphformer.vocab) wrap the pieces; SentencePiece needs only <unk>
                bos_id=-1,
                eos_id=-1,
                pad_id=-1,
                unk_piece="<unk>",
            )
        except RuntimeError as err:
            raise UserError(
                f"bpe {vocab_size}: SentencePiece could not learn it ({str(err).splitlines()[-1]}); "
                "a vocabulary larger than the text allows needs a smaller bpe"
            ) from None
        os.replace(prefix.with_suffix(".model"), model_path)
    return model_path


class SubwordPipeline:
    """Text to pieces and back with a learned model."""

    def __init__(self, model_path: Path):
        import sentencepiece

        if not Path(model_path).is_file():
            raise UserError(
                f"{model_path} is missing: this run was trained with a subword vocabulary (bpe) and "
                "cannot read text without it; restore the file or retrain"
            )
        try:
            self.model = sentencepiece.SentencePieceProcessor(model_file=str(model_path))
        except (RuntimeError, OSError) as err:
            raise UserError(
                f"{model_path} is damaged, not a SentencePiece model ({str(err).splitlines()[0]}); "
                "restore the file or retrain"
            ) from None

    def tokenize(self, line: str) -> list[str]:
        return self.model.encode(line, out_type=str)

    def detokenize(self, pieces: list[str]) -> str:
        return self.model.decode(pieces)
