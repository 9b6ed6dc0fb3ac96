"""reverse and addition, and lengths chosen per split (train short, test long), against checkers
written here from the tasks' definitions."""

import json
import random

import pytest
from helpers import TINY_MODEL

from graphformer.cli import main
from graphformer.data import synthetic
from graphformer.data.corpus import read_split
from graphformer.errors import ConfigError, UserError

SMALL = {"train": 50, "valid": 10, "test": 10}


def number(lower_endian: list[str]) -> int:
    return sum(int(d) * 10**i for i, d in enumerate(lower_endian))


def test_reverse_targets_read_the_source_backwards(tmp_path):
    for src, tgt in synthetic.generate_pairs("reverse", 200, random.Random(3)):
        s, t = src.split(), tgt.split()
        assert t == [s[len(s) - 1 - i] for i in range(len(s))]


def test_addition_targets_are_the_sums_of_the_two_lower_endian_numbers():
    for src, tgt in synthetic.generate_pairs("addition", 500, random.Random(4)):
        tokens = src.split()
        assert tokens.count("+") == 1 and tokens[0] != "+" and tokens[-1] != "+"
        plus = tokens.index("+")
        a, b, total = tokens[:plus], tokens[plus + 1 :], tgt.split()
        assert number(total) == number(a) + number(b)
        assert total == ["0"] or total[-1] != "0"  # no leading zeros (the last digit is the most significant)


@pytest.mark.parametrize("task", ["copy", "reverse", "addition"])
def test_each_split_gets_the_lengths_it_is_given(task, tmp_path):
    lengths = {"train": (3, 40), "valid": (400, 400), "test": (120, 130)}
    data = synthetic.write_task(task, tmp_path, seed=2, sizes=SMALL, lengths=lengths)
    for split, (low, high) in lengths.items():
        seen = {len(line.split()) for line in (data / f"{split}.src").read_text().splitlines()}
        assert low <= min(seen) and max(seen) <= high
    train = {len(line.split()) for line in (data / "train.src").read_text().splitlines()}
    assert len(train) > 10  # drawn across the range, not one length


def test_the_default_lengths_are_unchanged_and_a_split_left_out_keeps_them(tmp_path):
    plain = synthetic.write_task("copy", tmp_path / "a", seed=5, sizes=SMALL)
    split = synthetic.write_task("copy", tmp_path / "b", seed=5, sizes=SMALL, lengths={"test": (400, 400)})
    assert (plain / "train.src").read_text() == (split / "train.src").read_text()
    assert {len(x.split()) for x in (split / "test.src").read_text().splitlines()} == {400}


def test_a_folder_generated_with_other_lengths_is_refused(tmp_path):
    synthetic.write_task("reverse", tmp_path, seed=1, sizes=SMALL, lengths={"test": (400, 400)})
    with pytest.raises(UserError, match="lengths"):
        synthetic.write_task("reverse", tmp_path, seed=1, sizes=SMALL, lengths={"test": (200, 200)})
    with pytest.raises(UserError, match="lengths"):
        synthetic.write_task("reverse", tmp_path, seed=1, sizes=SMALL)


@pytest.mark.parametrize("text, expected", [("1-40", (1, 40)), ("400", (400, 400)), (" 3 - 7", (3, 7))])
def test_lengths_parse(text, expected):
    assert synthetic.parse_lengths(text, "copy", "train_lengths") == expected


@pytest.mark.parametrize(
    "text, task",
    [("40-1", "copy"), ("0-5", "copy"), ("2", "addition"), ("a-b", "copy"), ("1-2-3", "copy"), ("", "copy")],
)
def test_bad_lengths_name_the_option(text, task):
    with pytest.raises(ConfigError, match="test_lengths"):
        synthetic.parse_lengths(text, task, "test_lengths")


def test_the_tasks_read_as_parallel_data(tmp_path):
    split = read_split(synthetic.write_task("addition", tmp_path, sizes=SMALL), "train")
    assert len(split) == SMALL["train"]


def test_train_takes_the_lengths_of_each_split_from_the_command_line(tmp_path):
    run = tmp_path / "run"
    argv = ["train", "--task", "reverse", "--out", str(run), "--train-lengths", "2-6", "--test-lengths", "12"]
    assert main([*argv, "--epochs", "1", "--max-steps", "2", *TINY_MODEL]) == 0
    lengths = {
        split: {len(x.split()) for x in (run / "data" / f"{split}.src").read_text().splitlines()}
        for split in ("train", "valid", "test")
    }
    assert max(lengths["train"]) <= 6 and min(lengths["train"]) >= 2 and lengths["valid"] == lengths["test"] == {12}
    config = json.loads((run / "config.json").read_text())
    assert config["train"]["train_lengths"] == "2-6" and config["train"]["test_lengths"] == "12"


@pytest.mark.parametrize(
    "argv, option",
    [
        (["--task", "multi30k", "--train-lengths", "1-40"], "train-lengths"),
        (["--task", "copy", "--test-lengths", "40-4"], "test-lengths"),
        (["--task", "addition", "--train-lengths", "1-9"], "train-lengths"),
    ],
)
def test_lengths_a_task_cannot_take_are_one_line_naming_the_option(argv, option, tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "run"), *argv, "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert option in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()
