"""Reading a run back: data preparation shared with training, and the trained model with
everything needed to feed it (for ``evaluate``, ``translate`` and the notebooks). The files are
described in `graphformer.training.run_dir`."""
from __future__ import annotations

from pathlib import Path

from graphformer.data import tasks
from graphformer.data.corpus import Split, build_vocabs, read_split
from graphformer.errors import UserError
from graphformer.model import ModelConfig
from graphformer.model import build_model as model_from_config
from graphformer.training import checkpoint
from graphformer.training.config import TrainConfig
from graphformer.training.distributed import resolve_device
from graphformer.training.run_dir import CONFIG, VOCAB, RunDir
from graphformer.vocab import Vocab


def data_dir_of(cfg: TrainConfig, run_dir: Path) -> Path:
    """Where the tokenized train/valid/test.{src,tgt} files of the run are."""
    if cfg.task == "multi30k" or not cfg.data_dir:
        return run_dir / "data"
    return Path(cfg.data_dir)


def prepare_data(cfg: TrainConfig, run_dir: Path) -> Path:
    """The data directory, with synthetic tasks generated and Multi30k fetched and tokenized."""
    data_dir = data_dir_of(cfg, run_dir)
    if cfg.task in tasks.TASKS:
        tasks.write_task(cfg.task, data_dir, seed=cfg.seed)
    elif cfg.task == "multi30k":
        from graphformer.data import multi30k
        multi30k.prepare(data_dir, mirror=cfg.data_dir)
    elif not data_dir.is_dir():
        raise UserError(f"data directory {data_dir} does not exist")
    return data_dir


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

    def __init__(self, run_dir: str | Path, which: str = "best", device="cpu"):
        self.run_dir = Path(run_dir)
        device = resolve_device(device)
        path = checkpoint.find(self.run_dir, which)
        state = checkpoint.load(path)
        check_matches_run(state, RunDir(self.run_dir), path)
        self.path = path
        self.train_cfg = TrainConfig.from_dict(state["train_config"])
        self.src_vocab, self.tgt_vocab = Vocab(state["vocab"]["src"]), Vocab(state["vocab"]["tgt"])
        self.model = build_model(state, path).to(device).eval()
        self.progress = state["progress"]

    def split(self, name: str) -> Split:
        data_dir = prepare_data(self.train_cfg, self.run_dir)
        return read_split(data_dir, name).encode(self.src_vocab, self.tgt_vocab)

    def references(self, name: str) -> list[str] | None:
        """Raw (untokenized) references of a translation task, for BLEU."""
        path = data_dir_of(self.train_cfg, self.run_dir) / f"{name}.ref"
        return path.read_text(encoding="utf-8").splitlines() if self.train_cfg.task == "multi30k" else None

    def pipelines(self):
        """(tokenize source line -> tokens, detokenize target tokens -> line) of the run's task."""
        if self.train_cfg.task == "multi30k":
            from graphformer.data.multi30k import SRC_LANG, TGT_LANG, MosesPipeline
            return MosesPipeline(SRC_LANG).tokenize, MosesPipeline(TGT_LANG).detokenize
        return str.split, " ".join


def build_model(state: dict, path: Path):
    model = model_from_config(ModelConfig.from_dict(state["model_config"]))
    try:
        model.load_state_dict(state["model"])
    except RuntimeError:
        raise UserError(f"{path} holds weights of another model shape than its config; retrain") from None
    return model
