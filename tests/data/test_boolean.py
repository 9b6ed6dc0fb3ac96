"""The Boolean task: answers agree with an evaluator written here from the gates' truth tables,
shapes are as documented, no gate gives its value away, the data is reproducible from the seed,
and bad options get a one-line error naming the option."""

import random
from collections import Counter, defaultdict

import pytest

from graphformer.data import boolean
from graphformer.errors import ConfigError
from graphformer.graphs.sample_edges import parse_tree

TRUTH = {
    "[AND": lambda bits: 0 if 0 in bits else 1,
    "[OR": lambda bits: 1 if 1 in bits else 0,
    "[NAND": lambda bits: 1 if 0 in bits else 0,
    "[NOR": lambda bits: 0 if 1 in bits else 1,
}


def gate_values(tokens: list[str]) -> tuple[int, list[tuple[str, int, int, int]]]:
    """(the formula's value, (gate, depth, inputs, value) for every gate), with an explicit stack."""
    stack: list[tuple[str, list[int]]] = [("root", [])]
    gates = []
    for token in tokens:
        if token in TRUTH:
            stack.append((token, []))
        elif token == "]":
            name, bits = stack.pop()
            assert name in TRUTH and len(bits) >= 2, f"bad closing bracket after {bits}"
            gates.append((name, len(stack), len(bits), TRUTH[name](bits)))
            stack[-1][1].append(gates[-1][3])
        else:
            stack[-1][1].append({"0": 0, "1": 1}[token])
    assert len(stack) == 1 and len(stack[0][1]) == 1, "the formula does not close into one value"
    return stack[0][1][0], gates


@pytest.mark.parametrize("seed", range(6))
def test_answers_match_the_truth_tables_and_the_shapes_the_defaults_promise(seed):
    for source, target in boolean.generate_boolean(10, random.Random(seed)):
        tokens = source.split()
        value, gates = gate_values(tokens)
        assert target == str(value)
        assert 100 <= len(tokens) <= 500
        assert max(depth for _, depth, _, _ in gates) <= 9  # depth 10: leaves only at the bottom
        assert max(width for _, _, width, _ in gates) <= 5
        assert parse_tree(tokens)[0].numel() == 3 * len(tokens) + 1  # --enc-attention parse-tree reads it


def test_no_gate_gives_its_value_away():
    """Every gate is 1 about half the time, whatever its name, width or depth (drawn bottom-up,
    a 5-input AND would be 1 for 1 in 32)."""
    ones, counts = defaultdict(int), Counter()
    roots = Counter()
    for source, target in boolean.generate_boolean(300, random.Random(7), min_length=20, max_length=120):
        _, gates = gate_values(source.split())
        roots[(source.split()[0], target)] += 1
        for name, depth, width, value in gates:
            for key in (name, ("width", width), ("depth", min(depth, 5))):
                counts[key] += 1
                ones[key] += value
    for key, n in counts.items():
        if n >= 100:
            assert 0.4 < ones[key] / n < 0.6, (key, ones[key], n)
    for gate in TRUTH:  # the root's gate does not tell the answer either
        share = roots[(gate, "1")] / (roots[(gate, "1")] + roots[(gate, "0")])
        assert 0.3 < share < 0.7, (gate, share)


@pytest.mark.parametrize("gate", sorted(TRUTH))
@pytest.mark.parametrize("wanted", [0, 1])
def test_a_gates_inputs_are_drawn_uniformly_among_those_that_give_its_value(gate, wanted):
    rng = random.Random(0)
    drawn = Counter(tuple(boolean.inputs_giving(gate, 2, wanted, rng)) for _ in range(3000))
    allowed = {bits for bits in [(0, 0), (0, 1), (1, 0), (1, 1)] if TRUTH[gate](list(bits)) == wanted}
    assert set(drawn) == allowed
    for bits in allowed:
        assert abs(drawn[bits] / 3000 - 1 / len(allowed)) < 0.04


def test_vocabulary_is_the_gates_the_closer_and_the_bits():
    pairs = boolean.generate_boolean(50, random.Random(3))
    assert set(boolean.VOCABULARY) == {*TRUTH, "]", "0", "1"}
    assert {token for source, _ in pairs for token in source.split()} == set(boolean.VOCABULARY)
    assert {target for _, target in pairs} == {"0", "1"}


def test_is_reproducible_from_the_seed_and_a_registered_training_task(tmp_path):
    from graphformer.data.tasks import get_task
    from graphformer.training.config import TrainConfig

    options = dict(sizes={"train": 30, "valid": 5, "test": 5}, min_length=10, max_length=40)
    a = boolean.write_boolean(tmp_path / "a", seed=3, **options)
    b = boolean.write_boolean(tmp_path / "b", seed=3, **options)
    c = boolean.write_boolean(tmp_path / "c", seed=4, **options)
    assert (a / "train.src").read_text() == (b / "train.src").read_text()
    assert (a / "train.src").read_text() != (c / "train.src").read_text()
    task = get_task("boolean")
    assert task.classification and TrainConfig(task="boolean").select_by == "exact_match"
    targets = task.prepare(TrainConfig(task="boolean", data_dir=str(a)), tmp_path).joinpath("test.tgt")
    assert targets.read_text().split() == (b / "test.tgt").read_text().split()


@pytest.mark.parametrize(
    "options,name",
    [
        (dict(min_length=600, max_length=500), "min_length"),
        (dict(max_length=100, max_depth=3, max_args=4), "max_length"),
        (dict(max_args=2), "max_args"),
    ],
)
def test_bad_options_name_the_option(options, name, tmp_path):
    with pytest.raises(ConfigError) as err:
        boolean.write_boolean(tmp_path / "data", **options)
    assert str(err.value).startswith(name) and "\n" not in str(err.value)
    assert not (tmp_path / "data").exists()
