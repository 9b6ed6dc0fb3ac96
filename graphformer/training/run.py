"""Reading a run back: data preparation shared with training, and the trained model with
everything needed to feed it (for ``evaluate``, ``translate`` and the notebooks). The files are
described in `graphformer.training.run_dir`."""

from __future__ import annotations

from pathlib import Path

from graphformer.attention import DEFAULT_BACKEND
from graphformer.data.corpus import Split, build_vocabs, read_split
from graphformer.data.tasks import classification_tasks, get_task
from graphformer.errors import ConfigError, UserError
from graphformer.model import ModelConfig
from graphformer.model import build_model as model_from_config
from graphformer.model.config import CLASSIFIERS
from graphformer.training import checkpoint
from graphformer.training.config import TrainConfig
from graphformer.training.distributed import resolve_device
from graphformer.training.run_dir import CONFIG, VOCAB, RunDir
from graphformer.vocab import Vocab


def read_splits(data_dir: Path, names=("train", "valid")) -> dict[str, Split]:
    return {name: read_split(data_dir, name) for name in names}


def vocabs_for(train: Split, cfg: TrainConfig) -> tuple[Vocab, Vocab]:
    """The source and target vocabularies of a new run. A classification task's target vocabulary
    is its labels (whatever ``shared_vocab`` says): the classifier's head scores only those, and
    every training label is one, however rare (``min_count`` thins the source words alone: a
    label read as `<unk>` would be a class the classifier never answers)."""
    if not get_task(cfg.task).classification:
        return build_vocabs(train, cfg.min_count, cfg.shared_vocab)
    return Vocab.build(train.src_words, cfg.min_count), Vocab.build(train.tgt_words, 1)


def check_model_fits_task(model_cfg: ModelConfig, task_name: str) -> None:
    """A classifier trains on classification tasks, a sequence model on the others."""
    task = get_task(task_name)
    if model_cfg.classifies and not task.classification:
        raise ConfigError(
            "model",
            f"{model_cfg.model!r} is a classifier (one label per sample) and task "
            f"{task_name!r} asks for sequences; use it with {' or '.join(classification_tasks())}, "
            "or choose model transformer or universal",
        )
    if task.classification and not model_cfg.classifies:
        raise ConfigError(
            "model",
            f"{model_cfg.model!r} generates sequences and task {task_name!r} is "
            f"classification (one label per sample); choose model {' or '.join(CLASSIFIERS)}",
        )


def check_labels(splits: dict[str, Split]) -> None:
    """A classification task's target line is one label token: fail before training or scoring,
    naming the first line that is not."""
    for name, split in splits.items():
        for i, label in enumerate(split.tgt_words):
            if len(label) != 1:
                raise UserError(
                    f"{name}.tgt line {i + 1} holds {len(label)} tokens; a classification task "
                    "needs exactly one label per line"
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


def longest_sample(splits: dict[str, Split], pool) -> tuple[int, str, str, int, int] | None:
    """(positions, split, side, line, tokens) of the sample that takes the most positions (source
    positions count `</s>` and a `<cls>` node, target positions `<s>`); None without samples."""
    longest = None
    for name, split in splits.items():
        for side, seqs, positions in (
            ("src", split.src_words, pool.source_positions),
            ("tgt", split.tgt_words, pool.target_nodes),
        ):
            for i, seq in enumerate(seqs):
                if longest is None or positions(len(seq)) > longest[0]:
                    longest = (positions(len(seq)), name, side, i + 1, len(seq))
    return longest


def fitted_max_len(splits: dict[str, Split], pool, max_len: int) -> int:
    """The max_len of a new run whose user did not choose one: the default, or the positions of
    the longest sample where that is more (a task's own data must fit its defaults)."""
    longest = longest_sample(splits, pool)
    return max(max_len, longest[0]) if longest else max_len


def check_lengths(splits: dict[str, Split], pool, max_len: int) -> None:
    """Every sample must fit the positional table: fail before training, naming max_len and the
    value that would fit (see `longest_sample`)."""
    longest = longest_sample(splits, pool)
    if longest is not None and longest[0] > max_len:
        needed, name, side, line, tokens = longest
        raise ConfigError(
            "max_len",
            f"({max_len}) is shorter than the data: {name}.{side} line {line} has {tokens} "
            f"tokens, which take {needed} positions with the model's special nodes; it must be "
            f"at least {needed}",
        )


def check_matches_run(state: dict, run: RunDir, path: Path) -> None:
    """A checkpoint must belong to the run it sits in: same vocabulary, same model."""
    if (run / VOCAB).is_file() and run.read_json(VOCAB) != state["vocab"]:
        raise UserError(
            f"{path} was trained with another vocabulary than {run / VOCAB}; use the checkpoint of this run or retrain"
        )
    if (run / CONFIG).is_file() and run.read_config()[0] != state["model_config"]:
        raise UserError(
            f"{path} holds another model than {run / CONFIG} describes; use the checkpoint of this run or retrain"
        )


class LoadedRun:
    """A trained model and everything needed to feed it, read from a run directory."""

    def __init__(
        self, run_dir: str | Path, which: str = "best", device="cpu", attention_backend: str = DEFAULT_BACKEND
    ):
        self.run_dir = Path(run_dir)
        device = resolve_device(device)
        path = checkpoint.find(self.run_dir, which)
        state = checkpoint.load(path)
        check_matches_run(state, RunDir(self.run_dir), path)
        self.path = path
        self.train_cfg = TrainConfig.from_dict(state["train_config"])
        self.task = get_task(self.train_cfg.task)
        self.src_vocab, self.tgt_vocab = checkpoint_vocabs(state)
        self.device = device
        self.model = load_model(state, path, attention_backend).to(device).eval()
        self.progress = state["progress"]

    def data_dir(self) -> Path:
        return self.task.prepare(self.train_cfg, self.run_dir)

    def split(self, name: str, folder: str | Path | None = None) -> Split:
        """A split of the run's data, or of ``folder`` (the same file layout: e.g. longer samples
        of the same task), encoded with the run's vocabularies."""
        if folder is not None:
            if not Path(folder).is_dir():
                raise UserError(f"data directory {folder} does not exist; give a folder with {name}.src and {name}.tgt")
            if not all((Path(folder) / f"{name}.{side}").is_file() for side in ("src", "tgt")):
                own = self.task.data_dir(self.train_cfg, self.run_dir)
                raise UserError(
                    f"{folder} has no {name}.src and {name}.tgt; --data-dir takes a folder laid out as the "
                    f"run's own data ({own}: one tokenized sample per line), not raw corpus files"
                )
        if folder is None:
            name = self.task.split_file(name)
        split = read_split(self.data_dir() if folder is None else Path(folder), name)
        if folder is None:
            split.src_words, split.tgt_words = (
                self.train_cfg.used(name, side) for side in (split.src_words, split.tgt_words)
            )
        if self.task.classification:
            check_labels({name: split})
        try:
            check_lengths({name: split}, self.model.make_pool(), self.model.cfg.max_len)
        except ConfigError as err:  # max_len is the trained model's: the samples must fit it
            where = self.task.data_dir(self.train_cfg, self.run_dir) if folder is None else folder  # prepared above
            raise UserError(f"{where}: the model's max_len {err.problem}; score samples that fit it") from None
        return split.encode(self.src_vocab, self.tgt_vocab)

    def references(self, name: str) -> list[str] | None:
        """Raw (untokenized) references of a translation task, for BLEU."""
        name = self.task.split_file(name)
        self.data_dir()
        references = self.task.references(self.train_cfg, self.run_dir, name)
        return None if references is None else self.train_cfg.used(name, references)

    def pipelines(self):
        """(tokenize source line -> tokens, detokenize target tokens -> line) of the run's task."""
        return self.task.pipelines(self.train_cfg, self.run_dir)

    def bleu_tokenize(self):
        """The tokenizer of the tokenized BLEU score, where the model's tokens are not words."""
        return self.task.bleu_tokenize(self.train_cfg)


def checkpoint_vocabs(state: dict) -> tuple[Vocab, Vocab]:
    """The source and target vocabularies a checkpoint was trained with."""
    return Vocab(state["vocab"]["src"]), Vocab(state["vocab"]["tgt"])


def read_init(where: str) -> tuple[dict, Path]:
    """The checkpoint a new run starts from (``--init-from``): a run directory's best checkpoint,
    or a checkpoint file."""
    path = Path(where)
    if path.is_dir():
        path = checkpoint.find(path, "best")
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


def init_weights(model, state: dict, path: Path) -> None:
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


def load_model(state: dict, path: Path, attention_backend: str = DEFAULT_BACKEND):
    model = model_from_config(ModelConfig.from_dict(state["model_config"]), attention_backend)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError:
        raise UserError(f"{path} holds weights of another model shape than its config; retrain") from None
    return model
