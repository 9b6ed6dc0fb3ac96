"""The long-range tasks: answers agree with evaluators written here from the task definitions,
lengths and vocabularies are as documented, the data is reproducible from the seed, the answers
are spread out, and bad options get a one-line error naming the option."""

import random
import statistics
from collections import Counter

import pytest

from graphformer.data import expressions, listops, recall
from graphformer.data.text import read_parallel
from graphformer.errors import ConfigError, UserError

DIGITS = [str(d) for d in range(10)]
LISTOPS_TOKENS = {"[MAX", "[MIN", "[MED", "[SM", "]", *DIGITS}
SMALL = {"train": 40, "valid": 10, "test": 10}


# ListOps --------------------------------------------------------------------------------------


def evaluate_listops(tokens: list[str]) -> tuple[int, int, int]:
    """(value, operators nested at most, arguments of an operator at most), with an explicit stack.

    [MED follows LRA's `int(np.median(args))`: statistics.median averages the two middle values
    of an even count, and int() drops the fraction (all values are non-negative).
    """
    operations = {"[MAX": max, "[MIN": min, "[MED": lambda a: int(statistics.median(a)), "[SM": lambda a: sum(a) % 10}
    stack: list[tuple[str, list[int]]] = [("root", [])]
    deepest = widest = 0
    for token in tokens:
        if token in operations:
            stack.append((token, []))
            deepest = max(deepest, len(stack) - 1)
        elif token == "]":
            name, args = stack.pop()
            assert name in operations and len(args) >= 2, f"bad closing bracket after {args}"
            widest = max(widest, len(args))
            stack[-1][1].append(operations[name](args))
        else:
            stack[-1][1].append(int(token))
    assert len(stack) == 1 and len(stack[0][1]) == 1, "the expression does not close into one value"
    return stack[0][1][0], deepest, widest


@pytest.mark.parametrize("seed", range(12))
def test_listops_answers_match_an_independent_evaluator(seed):
    pairs = listops.generate_listops(15, random.Random(seed))
    for source, target in pairs:
        tokens = source.split()
        value, deepest, widest = evaluate_listops(tokens)
        assert target == str(value)
        assert 500 <= len(tokens) <= 2000
        assert deepest <= 9 and widest <= 10  # LRA: depth 10 (digits only at depth 10), 10 arguments


def test_listops_median_rounds_the_mean_of_the_two_middle_values_down():
    assert listops.apply("[MED", [1, 2]) == 1 and listops.apply("[MED", [4, 1]) == 2
    assert listops.apply("[MED", [9, 0, 3]) == 3 and listops.apply("[MED", [7, 7, 0, 9]) == 7
    assert listops.apply("[SM", [9, 8, 7]) == 4


@pytest.mark.parametrize("max_depth,max_args", [(3, 4), (4, 5), (2, 10)])
def test_listops_every_length_up_to_the_longest_is_built_within_depth_and_arguments(max_depth, max_args):
    longest = expressions.longest(max_depth, max_args)
    assert longest == {(3, 4): 26, (4, 5): 187, (2, 10): 12}[(max_depth, max_args)]
    rng = random.Random(max_depth)
    for length in range(4, longest + 1):
        for source, target in listops.generate_listops(3, rng, length, length, max_depth, max_args):
            value, deepest, widest = evaluate_listops(source.split())
            assert len(source.split()) == length and target == str(value)
            assert deepest <= max_depth - 1 and widest <= max_args


def test_listops_long_expressions_nest_deeply():
    depths = [evaluate_listops(s.split())[1] for s, _ in listops.generate_listops(20, random.Random(3))]
    assert max(depths) == 9  # LRA's depth limit is reached
    assert min(depths) >= 3  # 2 nested levels of 10 arguments hold at most 122 tokens


def test_listops_is_reproducible_from_the_seed(tmp_path):
    options = dict(sizes=SMALL, min_length=50, max_length=120)
    a = listops.write_listops(tmp_path / "a", seed=3, **options)
    b = listops.write_listops(tmp_path / "b", seed=3, **options)
    c = listops.write_listops(tmp_path / "c", seed=4, **options)
    for name in ("train.src", "train.tgt", "valid.src", "test.src", "test.tgt"):
        assert (a / name).read_text() == (b / name).read_text()
    assert (a / "train.src").read_text() != (c / "train.src").read_text()
    assert (a / "valid.src").read_text() != (a / "test.src").read_text()
    src, tgt = read_parallel(a / "train.src", a / "train.tgt")
    assert len(src) == 40 and all(t[0] == str(evaluate_listops(s)[0]) for s, t in zip(src, tgt))


def test_listops_vocabulary_and_answers_cover_every_symbol():
    pairs = listops.generate_listops(500, random.Random(11))
    assert set(listops.VOCABULARY) == LISTOPS_TOKENS
    assert {token for source, _ in pairs for token in source.split()} == LISTOPS_TOKENS
    answers = Counter(target for _, target in pairs)
    assert set(answers) == set(DIGITS)
    assert max(answers.values()) < 0.4 * len(pairs)  # no answer a model could bet on


@pytest.mark.parametrize(
    "options,name",
    [
        (dict(min_length=600, max_length=500), "min_length"),
        (dict(min_length=3, max_length=10), "min_length"),
        (dict(max_length=20000), "max_length"),
        (dict(min_length=10, max_length=100, max_depth=3, max_args=4), "max_length"),
        (dict(max_args=3), "max_args"),
        (dict(max_depth=1), "max_depth"),
        (dict(max_length=2000.5), "max_length"),
    ],
)
def test_listops_bad_options_name_the_option(options, name, tmp_path):
    with pytest.raises(ConfigError) as err:
        listops.write_listops(tmp_path / "data", **options)
    assert str(err.value).startswith(name) and "\n" not in str(err.value)
    assert not (tmp_path / "data").exists()


def test_bad_split_sizes_are_refused(tmp_path):
    with pytest.raises(UserError, match="^sizes"):
        listops.write_listops(tmp_path / "data", sizes={"train": 0}, min_length=10, max_length=20)


# Recall ---------------------------------------------------------------------------------------


def answer_recall(tokens: list[str]) -> tuple[str, int]:
    """(the queried key's value, its pair's distance back from the query), from a dict built here."""
    assert tokens[-2] == "?" and len(tokens) % 2 == 0
    context = tokens[:-2]
    keys, values = context[0::2], context[1::2]
    assert all(k.startswith("k") for k in keys) and all(v.startswith("v") for v in values)
    assert len(set(keys)) == len(keys), "keys repeat within a sample"
    table = dict(zip(keys, values))
    return table[tokens[-1]], len(keys) - keys.index(tokens[-1])


@pytest.mark.parametrize("seed", range(8))
def test_recall_answers_match_a_dict_lookup(seed):
    for source, target in recall.generate_recall(25, random.Random(seed), min_length=40, max_length=300):
        tokens = source.split()
        assert 40 <= len(tokens) <= 300
        assert target == answer_recall(tokens)[0]


def test_recall_reaches_the_longest_length():
    ((source, target),) = recall.generate_recall(1, random.Random(0), min_length=8192, max_length=8192)
    tokens = source.split()
    assert len(tokens) == 8192 and target == answer_recall(tokens)[0]
    assert len(set(tokens[0:-2:2])) == (8192 - 2) // 2


def test_recall_vocabulary_is_keys_values_and_the_query_marker():
    vocabulary = recall.vocabulary(num_keys=8, num_values=3)
    assert set(vocabulary) == {f"k{i}" for i in range(8)} | {"v0", "v1", "v2", "?"}
    pairs = recall.generate_recall(50, random.Random(1), min_length=18, max_length=18, num_keys=8, num_values=3)
    for source, target in pairs:
        assert sorted(source.split()[0:-2:2]) == sorted(f"k{i}" for i in range(8))  # 8 pairs: every key once
        assert target in {"v0", "v1", "v2"}
    assert {token for source, _ in pairs for token in source.split()} == set(vocabulary)


def test_recall_answers_are_uniform_and_the_queried_pair_anywhere():
    length = 202  # 100 pairs
    pairs = recall.generate_recall(2000, random.Random(5), min_length=length, max_length=length)
    answers = Counter(target for _, target in pairs)
    assert set(answers) == {f"v{i}" for i in range(10)}
    assert all(140 <= count <= 260 for count in answers.values())  # 200 expected, sd about 13
    distances = [answer_recall(source.split())[1] for source, _ in pairs]
    assert 45 <= statistics.mean(distances) <= 56  # uniform over 1..100 pairs back: 50.5
    assert sum(d > 75 for d in distances) > 300  # a quarter of the queries reach back 150+ tokens


def test_recall_is_reproducible_from_the_seed(tmp_path):
    options = dict(sizes=SMALL, min_length=64, max_length=128)
    a = recall.write_recall(tmp_path / "a", seed=3, **options)
    b = recall.write_recall(tmp_path / "b", seed=3, **options)
    c = recall.write_recall(tmp_path / "c", seed=4, **options)
    for name in ("train.src", "train.tgt", "valid.src", "test.src", "test.tgt"):
        assert (a / name).read_text() == (b / name).read_text()
    assert (a / "train.src").read_text() != (c / "train.src").read_text()
    src, tgt = read_parallel(a / "test.src", a / "test.tgt")
    assert len(src) == 10 and all(t == [answer_recall(s)[0]] for s, t in zip(src, tgt))


@pytest.mark.parametrize(
    "options,name",
    [
        (dict(min_length=2, max_length=2), "min_length"),
        (dict(min_length=101, max_length=200), "min_length"),
        (dict(min_length=100, max_length=201), "max_length"),
        (dict(min_length=300, max_length=200), "min_length"),
        (dict(min_length=1024, max_length=16384), "max_length"),
        (dict(min_length=100, max_length=100, num_keys=40), "num_keys"),
        (dict(num_values=1), "num_values"),
    ],
)
def test_recall_bad_options_name_the_option(options, name, tmp_path):
    with pytest.raises(ConfigError) as err:
        recall.write_recall(tmp_path / "data", **options)
    assert str(err.value).startswith(name) and "\n" not in str(err.value)
    assert not (tmp_path / "data").exists()


def test_recall_is_a_registered_training_task(tmp_path):
    from graphformer.data.tasks import get_task
    from graphformer.training.config import TrainConfig

    cfg = TrainConfig(task="recall")
    assert cfg.select_by == "exact_match"  # one answer token: exact match is accuracy
    folder = get_task("recall").prepare(cfg, tmp_path)
    sources = (folder / "valid.src").read_text().splitlines()
    assert len(sources) == 200 and {len(line.split()) for line in sources} == {1024}
