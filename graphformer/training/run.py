"""Reading a run back: data preparation shared with training, and the trained model with
everything needed to feed it (for ``evaluate``, ``translate`` and the notebooks). The files are
described in `graphformer.training.run_dir`."""
from __future__ import annotations

from pathlib import Path

from graphformer.data.tasks import get_task
from graphformer.data.corpus import Split, build_vocabs, read_split
from graphformer.errors import UserError
from graphformer.model import ModelConfig
from graphformer.model import build_model as model_from_config
from graphformer.training import checkpoint
from graphformer.training.config import TrainConfig
from graphformer.training.distributed import resolve_device
from graphformer.training.run_dir import CONFIG, VOCAB, RunDir
from graphformer.vocab import Vocab


def read_splits(data_dir: Path, names=("train", "valid")) -> dict[str, Split]:
    return {name: read_split(data_dir, name) for name in names}


def vocabs_for(train: Split, cfg: TrainConfig) -> tuple[Vocab, Vocab]:
    return build_vocabs(train, cfg.min_count, cfg.shared_vocab)


def check_matches_run(state: dict, run: RunDir, path: Path) -> None:
    """A checkpoint must belong to the run it sits in: same vocabulary, same model."""
    if (run / VOCAB).is_file() and run.read_json(VOCAB) != state["vocab"]:
        raise UserError(f"{path} was trained with another vocabulary than {run / VOCAB}; "
                        "use the checkpoint of this run or retrain")
    if (run / CONFIG).is_file() and run.read_config()[0] != state["model_config"]:
        raise UserError(f"{path} holds another model than {run / CONFIG} describes; "
                        "use the checkpoint of this run or retrain")


class LoadedRun:
    """A trained model and everything needed to feed it, read from a run directory."""

    def __init__(self, run_dir: str | Path, which: str = "best", device="cpu", attention_backend: str = "auto"):
        self.run_dir = Path(run_dir)
        device = resolve_device(device)
        path = checkpoint.find(self.run_dir, which)
        state = checkpoint.load(path)
        check_matches_run(state, RunDir(self.run_dir), path)
        self.path = path
        self.train_cfg = TrainConfig.from_dict(state["train_config"])
        self.task = get_task(self.train_cfg.task)
        self.src_vocab, self.tgt_vocab = Vocab(state["vocab"]["src"]), Vocab(state["vocab"]["tgt"])
        self.model = load_model(state, path, attention_backend).to(device).eval()
        self.progress = state["progress"]

    def data_dir(self) -> Path:
        return self.task.prepare(self.train_cfg, self.run_dir)

    def split(self, name: str) -> Split:
        return read_split(self.data_dir(), name).encode(self.src_vocab, self.tgt_vocab)

    def references(self, name: str) -> list[str] | None:
        """Raw (untokenized) references of a translation task, for BLEU."""
        self.data_dir()
        return self.task.references(self.train_cfg, self.run_dir, name)

    def pipelines(self):
        """(tokenize source line -> tokens, detokenize target tokens -> line) of the run's task."""
        return self.task.pipelines(self.train_cfg, self.run_dir)

    def bleu_tokenize(self):
        """The tokenizer of the tokenized BLEU score, where the model's tokens are not words."""
        return self.task.bleu_tokenize(self.train_cfg)


def load_model(state: dict, path: Path, attention_backend: str = "auto"):
    model = model_from_config(ModelConfig.from_dict(state["model_config"]), attention_backend)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError:
        raise UserError(f"{path} holds weights of another model shape than its config; retrain") from None
    return model
