"""`graphformer.config_io`: one `option` declaration gives a field its check, its command-line
flag, its saved form and the message of a bad value."""

from __future__ import annotations  # annotations as text, as in the package's configs

import argparse
from dataclasses import dataclass

import pytest

from graphformer.cli.parser import add_config_options
from graphformer.config_io import AT_LEAST_1, PROBABILITY, DictConfig, Range, option
from graphformer.errors import ConfigError


@dataclass
class Toy(DictConfig):
    steps: int = option(3, "how many steps", range=AT_LEAST_1)
    rate: float = option(0.1, "a rate", range=PROBABILITY)
    mode: str = option("fast", "fast or slow", choices=("fast", "slow"))
    verbose: bool = option(False, "say more")
    limit: int | None = option(None, "an optional bound", range=AT_LEAST_1)
    hidden: int = option(7, "filled in by the library", cli=False)


def parse(*argv):
    parser = argparse.ArgumentParser(prog="toy")
    add_config_options(parser, Toy)
    return vars(parser.parse_args(list(argv)))


@pytest.mark.parametrize(
    "values,name,needles",
    [
        ({"steps": 0}, "steps", ["at least 1", "0"]),
        ({"rate": 1.0}, "rate", ["[0, 1)", "1"]),
        ({"mode": "medium"}, "mode", ["fast", "slow", "'medium'"]),
        ({"verbose": "yes"}, "verbose", ["true or false", "'yes'"]),
        ({"steps": "2"}, "steps", ["whole number", "without quotes"]),
        ({"steps": 2.5}, "steps", ["whole number", "2.5"]),
        ({"rate": float("nan")}, "rate", ["finite"]),
    ],
)
def test_a_bad_value_is_refused_naming_the_option_and_the_value(values, name, needles):
    with pytest.raises(ConfigError) as info:
        Toy(**values)
    assert info.value.name == name
    assert all(needle in info.value.problem for needle in needles), info.value.problem


def test_values_of_the_declared_kind_in_substance_are_taken_as_it():
    toy = Toy(steps=2.0, verbose=1, limit=None)
    assert (toy.steps, type(toy.steps), toy.verbose) == (2, int, True)


def test_each_field_is_a_flag_with_its_help_choices_and_default_shown():
    parser = argparse.ArgumentParser(prog="toy")
    add_config_options(parser, Toy)
    text = " ".join(parser.format_help().split())
    assert "--steps N how many steps (default: 3)" in text
    assert "--mode NAME fast or slow (default: fast)" in text
    assert "--verbose, --no-verbose say more (default: off)" in text
    assert "--hidden" not in text  # cli=False keeps it off the command line


def test_only_the_flags_given_are_in_the_parsed_options():
    """Absent flags stay absent, so a config file or a resumed run can supply them."""
    assert parse() == {}
    assert parse("--steps", "5", "--no-verbose", "--mode", "slow") == {"steps": 5, "verbose": False, "mode": "slow"}
    with pytest.raises(SystemExit):
        parse("--mode", "medium")


def test_the_saved_form_reads_back_and_a_file_the_user_wrote_is_strict():
    toy = Toy(steps=4, mode="slow")
    saved = toy.to_dict()
    assert Toy.from_dict(saved) == toy
    assert Toy.from_dict({**saved, "from_a_newer_version": 1}) == toy  # dropped: an older or newer run
    with pytest.raises(ConfigError) as info:
        Toy.from_dict({"stpes": 4}, strict=True)
    assert info.value.name == "stpes" and "steps" in info.value.problem  # names what it could have meant
    assert Toy.defaults() == {"steps": 3, "rate": 0.1, "mode": "fast", "verbose": False, "limit": None, "hidden": 7}


def test_a_misspelt_choice_or_key_gets_the_closest_known_name_and_a_far_one_none():
    with pytest.raises(ConfigError) as info:
        Toy(mode="fsat")
    assert info.value.problem == "must be one of fast, slow, got 'fsat' (did you mean fast?)"
    with pytest.raises(ConfigError) as info:
        Toy(mode="medium")
    assert info.value.problem == "must be one of fast, slow, got 'medium'"
    with pytest.raises(ConfigError) as info:
        Toy.from_dict({"stpes": 4}, strict=True)
    assert info.value.problem.startswith("is not an option of Toy (did you mean steps?); known: ")
    with pytest.raises(ConfigError) as info:
        Toy.from_dict({"zzz": 4}, strict=True)
    assert "did you mean" not in info.value.problem


@pytest.mark.parametrize(
    "bounds,inside,outside,words",
    [
        (Range(low=1), [1, 10], [0.5], "at least 1"),
        (Range(low=0, open_low=True), [1e-9], [0, -1], "above 0"),
        (Range(high=5, open_high=True), [4.9], [5], "below 5"),
        (Range(low=0, high=1), [0, 1], [1.1], "in [0, 1]"),
    ],
)
def test_a_range_holds_its_bounds_and_says_them(bounds, inside, outside, words):
    assert all(bounds.holds(x) for x in inside) and not any(bounds.holds(x) for x in outside)
    assert bounds.describe() == words
