r"""The parse tree of a bracketed prefix expression, as ListOps and Boolean write it and as the
Long Range Arena's ListOps files write it, with grouping parentheses.

Operators. A token that starts with ``[`` opens an operator (``[MAX``); its arguments are the
tokens up to its ``]``, which belongs to the operator too. Every token is held by the innermost
operator whose brackets enclose it; a token outside every operator is held by the `</s>` node::

    [MAX 2 9 [MIN 4 7 ] 0 ]  </s>          </s>
     0   1 2 3    4 5 6 7 8   9              |
                                           [MAX --- 2, 9, 0, ]
                                             |
                                           [MIN --- 4, 7, ]

Parentheses. LRA's generator (``lra_benchmarks/data/listops.py``) builds an operator of k
arguments as a left-nested chain of pairs, ``((([MAX, 2), 9), ])``, and writes each pair as
``( left right )``, so its files hold

    ( ( ( [MAX 2 ) 9 ) ] )          for  [MAX 2 9 ]

A ``(`` opened before an operator may close inside it, so parentheses do not nest with the
brackets; they add no structure the brackets lack. Each ``(`` and ``)`` is a leaf, held like a
digit by the operator whose brackets enclose it: the tree of the other tokens is the tree of
the expression written without parentheses. They must balance among themselves, and one opened
inside an operator must close before the operator's ``]``.

Refused, with a ValueError naming the token (positions count from 0, as node positions do)
where the tokens stop parsing: a closer of the wrong kind or with nothing to close, an operator
never closed or closed with no argument, a ``(`` never closed, and tokens with no operator.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from graphformer.data.expressions import CLOSE
from graphformer.graphs.edges import EdgeList

OPEN = "["  # an operator's token starts with it: [MAX
GROUP, END_GROUP = "(", ")"


def holders(words: Sequence[str]) -> list[int]:
    """The node that holds each token: the position of its innermost open operator (for a
    ``]``, the operator it closes), or ``len(words)``, the `</s>` node, at top level. A
    ValueError names the token where ``words`` stop parsing (see the module's rules)."""
    held = []
    operators: list[int] = []  # positions of the open operators, innermost last
    arguments: list[int] = []  # how many arguments each open operator has read so far
    groups: list[int] = []  # positions of the open '('
    for i, word in enumerate(words):
        held.append(operators[-1] if operators else len(words))
        if word == CLOSE:
            close_operator(words, i, operators, arguments, groups)
        elif word == END_GROUP:
            if not groups:
                where = f" (the {words[operators[-1]]!r} at token {operators[-1]} closes with {CLOSE!r})"
                raise ValueError(f"token {i} {word!r} closes no {GROUP!r}" + (where if operators else ""))
            groups.pop()
        elif word == GROUP:
            groups.append(i)
        else:
            if arguments:
                arguments[-1] += 1
            if word.startswith(OPEN):
                operators.append(i)
                arguments.append(0)
    if operators:
        raise ValueError(f"the operator at token {operators[-1]} {words[operators[-1]]!r} is never closed")
    if groups:
        raise ValueError(f"the {GROUP!r} at token {groups[-1]} is never closed")
    if not any(word.startswith(OPEN) for word in words):
        raise ValueError(
            f"none of its {len(words)} tokens is an operator (one that starts with {OPEN!r}, as in '[MAX 2 9 ]'); "
            "parse-tree reads bracketed prefix expressions"
        )
    return held


def close_operator(words: Sequence[str], i: int, operators: list, arguments: list, groups: list) -> None:
    """Token ``i``, a ``]``, closes the innermost open operator: a ValueError where there is
    none, where a ``(`` opened inside it is still open, or where it has read no argument."""
    if not operators:
        where = f" (the {GROUP!r} at token {groups[-1]} closes with {END_GROUP!r})" if groups else ""
        raise ValueError(f"token {i} {CLOSE!r} closes no operator{where}")
    opener, name = operators[-1], words[operators[-1]]
    if groups and groups[-1] > opener:
        raise ValueError(
            f"token {i} {CLOSE!r} closes {name!r} (token {opener}) while the {GROUP!r} at token {groups[-1]} "
            f"inside it is open"
        )
    if arguments[-1] == 0:
        raise ValueError(f"token {i} {CLOSE!r} closes {name!r} (token {opener}), which has no argument")
    operators.pop()
    arguments.pop()


def parse_tree(words: Sequence[str]) -> EdgeList:
    """The parse tree of ``words`` as (u, v), (key, query) node positions: each token and the
    node that holds it (`holders`), in both directions, and every node, `</s>` (position
    ``len(words)``) included, to itself. `</s>` is joined to the top-level tokens, the root
    among them, so a pooling that reads `</s>` reads the root. A ValueError names the token
    where ``words`` stop parsing."""
    child = torch.arange(len(words) + 1)
    up = torch.tensor(holders(words), dtype=torch.int64)
    u = torch.cat([child, child[:-1], up])  # self-loops, child -> holder, holder -> child
    v = torch.cat([child, up, child[:-1]])
    return u, v


__all__ = ["parse_tree", "holders", "OPEN", "GROUP", "END_GROUP"]
