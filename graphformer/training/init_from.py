"""Starting a new run from another run's checkpoint (``--init-from``): its weights and
vocabularies, and what the new run may not change."""

from __future__ import annotations

from pathlib import Path

from graphformer.data.corpus import Split
from graphformer.errors import UserError
from graphformer.model import ModelConfig
from graphformer.training import checkpoint
from graphformer.training.run_dir import find_checkpoint
from graphformer.vocab import Vocab


def read_init(where: str) -> tuple[dict, Path]:
    """The checkpoint a new run starts from (``--init-from``): a run directory's best checkpoint,
    or a checkpoint file."""
    path = Path(where)
    if path.is_dir():
        path = find_checkpoint(path, "best")
    return checkpoint.load(path), path


def check_init_fits(state: dict, path: Path, cfg: ModelConfig) -> None:
    """What ``--init-from`` cannot change: the kind of model, and which weights are one (with
    ``tie``, loading weights held apart would keep only one of them)."""
    saved = state["model_config"]
    for name in ("model", "tie"):
        if saved.get(name, getattr(cfg, name)) != getattr(cfg, name):
            option = "--" + name
            raise UserError(
                f"--init-from {path}: it was trained with {option} {saved[name]}, this run has {option} "
                f"{getattr(cfg, name)}; start from a run of the same {option}, or give {option} "
                f"{saved[name]}"
            )


def check_init_vocab(train: Split, src_vocab: Vocab, tgt_vocab: Vocab, path: Path, classification: bool) -> str | None:
    """A run started ``--init-from`` a checkpoint keeps its vocabulary: a label it lacks is an
    error (the classifier could never answer it); unknown source tokens read as `<unk>`, as tokens
    below ``min_count`` do, and are worth a warning, which this returns."""
    if classification:
        label = next((t[0] for t in train.tgt_words if t and t[0] not in tgt_vocab.stoi), None)
        if label is not None:
            raise UserError(
                f"--init-from {path}: training label {label!r} is not among its labels; "
                "start from a model trained on the same labels"
            )
    tokens = [tok for words in train.src_words for tok in words]
    unknown = sum(tok not in src_vocab.stoi for tok in tokens)
    if unknown:
        return (
            f"warning: {unknown} of {len(tokens)} training source tokens are not in the vocabulary of "
            f"{path} and read as <unk>"
        )
    return None


def load_init_weights(model, state: dict, path: Path) -> None:
    """Copy the weights of ``state`` (a checkpoint) into ``model``, which must have the same
    shapes; a mismatch names the model options that differ."""
    try:
        model.load_state_dict(state["model"])
    except RuntimeError:  # missing, unexpected or differently shaped weights
        saved, wanted = state["model_config"], model.cfg.to_dict()
        differ = [name for name in wanted if name not in ("src_vocab", "tgt_vocab") and saved.get(name) != wanted[name]]
        which = ", ".join(f"{name} ({saved.get(name)!r} there, {wanted[name]!r} here)" for name in differ)
        raise UserError(
            f"--init-from {path}: its weights do not fit this model"
            + (f"; give the options it was trained with: {which}" if which else "")
        ) from None
