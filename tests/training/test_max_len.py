"""A new run's max_len: fitted to the data when nobody chose it, an error when the user's is too short."""

import json

from helpers import TINY_MODEL

from graphformer.cli import main
from graphformer.data import recall
from graphformer.model.config import ModelConfig
from graphformer.training.run_dir import CONFIG

LENGTH = 300  # longer than ModelConfig's default max_len


def _long_recall(path):
    assert LENGTH > ModelConfig.max_len
    return recall.write_recall(
        path, seed=3, sizes={"train": 4, "valid": 2, "test": 2}, min_length=LENGTH, max_length=LENGTH
    )


def train_args(data) -> list[str]:
    """One step of the encoder on ``data``, without --max-len."""
    return [
        "train",
        "--task",
        "recall",
        "--model",
        "encoder",
        "--data-dir",
        str(data),
        *TINY_MODEL,
        "--max-steps",
        "1",
        "--epochs",
        "1",
    ]


def test_a_new_run_without_max_len_fits_it_to_its_data(tmp_path, capsys):
    """--task recall --model encoder with no --max-len trains: max_len is the longest sample's
    positions (its tokens, `</s>` and the `<cls>` node), saved in the run's config."""
    args = train_args(_long_recall(tmp_path / "data"))
    assert main([*args, "--out", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    saved = json.loads((tmp_path / "run" / CONFIG).read_text())["model"]
    assert saved["max_len"] == LENGTH + 2


def test_a_given_max_len_too_short_for_the_data_stays_an_error(tmp_path, capsys):
    """The default is fitted; a value the user gave (on the command line or in --config) is not."""
    data = _long_recall(tmp_path / "data")
    args = train_args(data)
    assert main([*args, "--max-len", str(ModelConfig.max_len), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert f"--max-len ({ModelConfig.max_len}) is shorter than the data" in err and f"at least {LENGTH + 2}" in err
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model": {"max_len": LENGTH + 1}, "train": {}}))
    assert main([*args, "--config", str(config), "--out", str(tmp_path / "run2")]) == 2
    assert f"at least {LENGTH + 2}" in capsys.readouterr().err
