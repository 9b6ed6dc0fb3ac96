"""A ``--config`` file: a run's options written down, in YAML or JSON (a run's ``config.json`` is one)::

    model:              # ModelConfig's options, as the flags name them with _ for -
      layers: 2
      enc_attention: window:8+global:1
    train:              # TrainConfig's options
      task: copy
      epochs: 3

Either section may be left out. A file that is not such a mapping is a one-line error that
names where it goes wrong: the line of a YAML slip (a bad indentation, say), the section or
option that is not one, with the name it was likely meant to be.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from graphformer.errors import UserError, did_you_mean
from graphformer.invocation import invoked_as
from graphformer.model.config import ModelConfig
from graphformer.training.config import TrainConfig

SECTIONS = {"model": ModelConfig, "train": TrainConfig}


def read_config_file(path: str) -> tuple[dict, dict]:
    """The (model, train) options of the config file ``path``, checked against the configs' fields
    (their values are checked when the configs are made)."""
    config = _load(path) or {}
    if not isinstance(config, dict):
        raise UserError(f"--config {path} must hold a 'model' and/or a 'train' mapping, like a run's config.json")
    unknown = [str(name) for name in config if name not in SECTIONS]  # YAML keys need not be text
    if unknown:
        what = (
            f"{unknown[0]!r} is not a section{did_you_mean(unknown[0], SECTIONS)}"
            if len(unknown) == 1
            else f"{', '.join(map(repr, unknown))} are not sections"
        )
        raise UserError(
            f"--config {path}: {what}; the sections are 'model' and 'train' (either or both), like a run's config.json"
        )
    model, train = (config.get(name) or {} for name in SECTIONS)
    for name, section in (("model", model), ("train", train)):
        _check_section(path, name, section)
    model = {k: v for k, v in model.items() if k not in ("src_vocab", "tgt_vocab")}  # taken from the data
    return model, train


def _load(path: str):
    """The file's contents as YAML (JSON is YAML too); a slip names its line and column, 1-based
    as editors count them (PyYAML's marks count from 0)."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(
            f"--config {path}: cannot read it ({err.__class__.__name__}); give a YAML or JSON file"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(
            f"--config {path}{where} is not valid YAML or JSON ({problem}); check that line's indentation "
            "(spaces, the same for each option of a section) and the line above it"
        ) from None


def _check_section(path: str, name: str, section) -> None:
    """A config file's ``model`` or ``train`` section is a mapping of its config's options."""
    if not isinstance(section, dict):
        raise UserError(
            f"--config {path}: '{name}' must be a mapping of options (name: value), not "
            f"{type(section).__name__} {section!r}"
        )
    known = [f.name for f in fields(SECTIONS[name])]
    unknown = sorted(map(str, set(section) - set(known)))
    if unknown:
        raise UserError(
            f"--config {path}: {name}.{unknown[0]} is not an option{did_you_mean(unknown[0], known)}; "
            f"see {invoked_as()} train --help"
        )
