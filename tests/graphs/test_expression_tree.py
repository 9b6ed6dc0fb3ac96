"""The parse tree of bracketed prefix expressions: Long Range Arena's parenthesised files give
the tree of the same expression written without parentheses, and what does not parse is refused
naming the token where it stops."""

import random
import re

import pytest
from helpers import lra_format

from graphformer.data import boolean, listops
from graphformer.graphs.expression_tree import holders, parse_tree

PARENTHESES = ("(", ")")


def pairs_of(u, v):
    return set(zip(u.tolist(), v.tolist()))


def enclosing_operator(words, i):
    """An independent reading: the position of the innermost operator whose brackets enclose
    token i (a ``]``'s is the operator it closes; None at top level), found by counting
    brackets backwards and skipping parentheses."""
    unmatched = 0
    for j in range(i - 1, -1, -1):
        if words[j] == "]":
            unmatched += 1
        elif words[j].startswith("["):
            if unmatched == 0:
                return j
            unmatched -= 1
    return None


def test_the_lra_writer_writes_what_lras_generator_writes():
    # LRA's to_string of ((([MAX, 2), 9), ']'), and of [MAX holding [MIN, worked by hand.
    assert lra_format("[MAX 2 9 ]") == "( ( ( [MAX 2 ) 9 ) ] )"
    assert lra_format("[MAX [MIN 4 7 ] 2 ]") == "( ( ( [MAX ( ( ( [MIN 4 ) 7 ) ] ) ) 2 ) ] )"


def test_parentheses_are_leaves_of_the_operator_whose_brackets_hold_them():
    words = "( ( ( [MAX 2 ) 9 ) ] )".split()
    eos = len(words)
    assert holders(words) == [eos, eos, eos, eos, 3, 3, 3, 3, 3, eos]


@pytest.mark.parametrize("task", [listops, boolean])
def test_an_lra_formatted_tree_without_its_parentheses_is_the_plain_tree(task):
    generate = listops.generate_listops if task is listops else boolean.generate_boolean
    for source, _ in generate(6, random.Random(2), min_length=10, max_length=80):
        plain, lra = source.split(), lra_format(source).split()
        kept = [i for i, word in enumerate(lra) if word not in PARENTHESES] + [len(lra)]  # and </s>
        assert [lra[i] for i in kept[:-1]] == plain
        renumber = {node: rank for rank, node in enumerate(kept)}
        tree = pairs_of(*parse_tree(lra))
        restricted = {(renumber[a], renumber[b]) for a, b in tree if a in renumber and b in renumber}
        assert restricted == pairs_of(*parse_tree(plain))
        for i in set(range(len(lra))) - set(kept):  # a parenthesis: itself and its operator only
            holder = enclosing_operator(lra, i)
            holder = len(lra) if holder is None else holder
            assert {pair for pair in tree if i in pair} == {(i, i), (i, holder), (holder, i)}


@pytest.mark.parametrize(
    "source,message",
    [
        ("[MAX 1 2 )", "token 3 ')' closes no '(' (the '[MAX' at token 0 closes with ']')"),
        ("( [MAX 1 ] ]", "token 4 ']' closes no operator (the '(' at token 0 closes with ')')"),
        ("[MAX ]", "token 1 ']' closes '[MAX' (token 0), which has no argument"),
        ("[MAX ( ) ]", "token 3 ']' closes '[MAX' (token 0), which has no argument"),
        ("[SM 1 [MIN ] ]", "token 3 ']' closes '[MIN' (token 2), which has no argument"),
        ("[MAX ( 1 ] )", "token 3 ']' closes '[MAX' (token 0) while the '(' at token 1 inside it is open"),
        ("( ( ( [MAX 2 ) 9 ) ]", "the '(' at token 0 is never closed"),
        ("[MIN 3 [SM 4 5 ]", "the operator at token 0 '[MIN' is never closed"),
        ("a b c", "none of its 3 tokens is an operator"),
    ],
)
def test_what_does_not_parse_is_refused_naming_the_token(source, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_tree(source.split())
