"""A trained run read back: its model with everything needed to feed it (for ``evaluate``,
``translate`` and the notebooks), from the checkpoint a resumed run also starts from. The files
are described in `graphformer.training.run_dir`."""

from __future__ import annotations

from pathlib import Path

from graphformer.attention import DEFAULT_BACKEND
from graphformer.data.corpus import Split
from graphformer.data.tasks import get_task
from graphformer.errors import ConfigError, UserError
from graphformer.training import checkpoint
from graphformer.training.checkpoint import checkpoint_vocabs, load_model
from graphformer.training.checks import check_lengths, check_matches_run
from graphformer.training.config import TrainConfig, load_run_plugins
from graphformer.training.distributed import resolve_device
from graphformer.training.progress import Progress
from graphformer.training.run_data import read_run_split
from graphformer.training.run_dir import RunDir, find_checkpoint


class LoadedRun:
    """A trained model and everything needed to feed it, read from a run directory."""

    def __init__(
        self, run_dir: str | Path, which: str = "best", device="cpu", attention_backend: str = DEFAULT_BACKEND
    ):
        self.run_dir = Path(run_dir)
        device = resolve_device(device)
        path = find_checkpoint(self.run_dir, which)
        state = checkpoint.load(path)
        check_matches_run(state, RunDir(self.run_dir), path)
        self.path = path
        load_run_plugins(state["train_config"])  # a plugin's task or model kind is named in the configs
        self.train_cfg = TrainConfig.from_dict(state["train_config"])
        self.task = get_task(self.train_cfg.task)
        self.src_vocab, self.tgt_vocab = checkpoint_vocabs(state)
        self.device = device
        self.model = load_model(state, path, attention_backend).to(device).eval()
        self.progress = Progress.from_dict(state["progress"])

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
        where = self.data_dir() if folder is None else Path(folder)
        pool = self.model.make_pool()
        split = read_run_split(self.train_cfg, where, name, pool, own=folder is None)
        try:
            check_lengths({name: split}, pool, self.model.cfg.max_len)
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
