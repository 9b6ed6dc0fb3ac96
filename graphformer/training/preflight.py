"""What a new run refuses, in the order it is checked: every refusal comes before the run writes
its records (configuration, vocabularies, logs), each a `graphformer.errors.UserError` naming
what to change.

The checks take two passes, since a run may make its data in its own folder (generated, or
fetched and tokenized) and the data's checks need the data:

1. `check_configs`, the model and train options, before the run directory is made or locked: no
   run is there already, the model suits the task and ``--viz-every``, an ``--init-from``
   checkpoint fits the model, and ``select_by`` can be measured;
2. `check_data`, once the folder is claimed (`RunClaim`) and the data is there: the splits read
   (`graphformer.training.run_data`), every sample fits the positional table, the vocabularies
   hold words and suit ``tie``, and an epoch has a step. It returns the checked `Plan`.

The options were checked as they were read (`TrainConfig.check`, the task's own in
`Task.check_options`); a resumed run is checked against its checkpoint instead (`resume_run`).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from graphformer.data.corpus import Split, build_vocabs
from graphformer.data.tasks import get_task
from graphformer.errors import ConfigError, UserError
from graphformer.model import ModelConfig
from graphformer.training.checkpoint import checkpoint_vocabs
from graphformer.training.checks import check_lengths, check_model_fits_task, fitted_max_len
from graphformer.training.config import TrainConfig
from graphformer.training.distributed import Context
from graphformer.training.init_from import check_init_fits, check_init_vocab, read_init
from graphformer.training.run_data import encode, load_splits, test_split
from graphformer.training.run_dir import RunDir
from graphformer.training.steps import check_epoch_has_steps, epoch_plan
from graphformer.vocab import SPECIALS, Vocab


@dataclass
class Plan:
    """A new run as its checks left it: its model configuration (max_len fitted where asked, the
    vocabulary sizes set), its train and valid splits encoded with its vocabularies."""

    model_cfg: ModelConfig
    splits: dict[str, Split]
    src_vocab: Vocab
    tgt_vocab: Vocab


def check_configs(
    files: RunDir, ctx: Context, cfg: TrainConfig, model_cfg: ModelConfig, recorder=None
) -> tuple[dict, Path] | None:
    """The checks that need no data, before anything is written; returns the ``--init-from``
    checkpoint and its path (None without one). ``recorder``: the attention recorder of
    ``cfg.viz_every``."""
    if ctx.is_main:
        check_holds_no_run(files)
    if cfg.viz_every:
        recorder.check_model(model_cfg.model, cfg.viz_every)
    check_model_fits_task(model_cfg, cfg.task)
    init = read_init(cfg.init_from) if cfg.init_from else None
    if init:
        check_init_fits(*init, model_cfg)
    if not model_cfg.graph_pool().decodable and cfg.select_by == "exact_match":
        raise ConfigError(
            "select_by",
            "exact_match needs decoding, which per-sample edges in the decoder or cross attention "
            "rule out (they need the whole target); select by loss or token_accuracy",
        )
    return init


def check_data(
    files: RunDir,
    ctx: Context,
    cfg: TrainConfig,
    model_cfg: ModelConfig,
    recorder,
    fit_max_len: bool,
    init: tuple[dict, Path] | None,
) -> Plan:
    """The checks of the run's data, in the claimed run directory (its data made there first);
    ``fit_max_len``: grow max_len to the longest sample (the user gave none)."""
    if ctx.is_main:
        check_holds_no_run(files)  # again, now that no other trainer can write here
    pool = model_cfg.graph_pool()
    splits = load_splits(cfg, files.path, ctx, pool)
    samples = {**splits, **test_split(cfg, files.path, pool)}  # test: evaluate must fit too
    if fit_max_len:
        model_cfg = dataclasses.replace(model_cfg, max_len=fitted_max_len(samples, pool, model_cfg.max_len))
    check_lengths(samples, pool, model_cfg.max_len)
    if cfg.viz_every:
        recorder.check_split(splits["valid"], pool, cfg.viz_every, model_cfg)
    src_vocab, tgt_vocab = choose_vocabs(splits, cfg, init, ctx.is_main)
    if model_cfg.tie == "all" and src_vocab != tgt_vocab:  # equal sizes are not enough
        raise ConfigError(
            "tie",
            "'all' shares one embedding between source and target tokens, and this run has "
            "one vocabulary per side; drop --no-shared-vocab, or tie decoder only",
        )
    encode(splits, src_vocab, tgt_vocab)
    check_epoch_has_steps(epoch_plan(splits["train"], cfg, ctx, 0)[0], cfg.accumulate, ctx.world)  # before a model
    model_cfg = dataclasses.replace(model_cfg, src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab))
    return Plan(model_cfg, splits, src_vocab, tgt_vocab)


def check_holds_no_run(files: RunDir) -> None:
    """A new run never replaces one with a checkpoint (one killed before its first may be replaced)."""
    if files.holds_run():
        raise UserError(f"{files.path} already holds a run; continue it with --resume or choose another --out")


def choose_vocabs(
    splits: dict[str, Split], cfg: TrainConfig, init: tuple[dict, Path] | None, is_main: bool
) -> tuple[Vocab, Vocab]:
    """A new run's vocabularies: built from its training split, or those of the checkpoint it
    starts from (``--init-from``), whose embeddings it takes over."""
    if init is None:
        src_vocab, tgt_vocab = vocabs_for(splits["train"], cfg)
        if len(src_vocab) == len(SPECIALS):  # every source token would read as <unk>
            raise ConfigError(
                "min_count",
                f"({cfg.min_count}) is more than any training source token is "
                "seen: the vocabulary would hold no word; lower it",
            )
        return src_vocab, tgt_vocab
    state, path = init
    src_vocab, tgt_vocab = checkpoint_vocabs(state)
    warning = check_init_vocab(splits["train"], src_vocab, tgt_vocab, path, get_task(cfg.task).classification)
    if warning and is_main:
        tqdm.write(warning, file=sys.stderr)
    return src_vocab, tgt_vocab


def vocabs_for(train: Split, cfg: TrainConfig) -> tuple[Vocab, Vocab]:
    """The source and target vocabularies of a new run. A classification task's target vocabulary
    is its labels (whatever ``shared_vocab`` says): the classifier's head scores only those, and
    every training label is one, however rare (``min_count`` thins the source words alone: a
    label read as `<unk>` would be a class the classifier never answers)."""
    if not get_task(cfg.task).classification:
        return build_vocabs(train, cfg.min_count, cfg.shared_vocab)
    return Vocab.build(train.src_words, cfg.min_count), Vocab.build(train.tgt_words, 1)
