"""The errors users see: one line that names the problem and what to do about it."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(ValueError):
    """Bad input or a bad state of files that the user can fix; the CLI prints it without a traceback."""


class ConfigError(UserError):
    """A config field with a bad value, reported in the library's own terms (``lr_factor must be
    above 0``); the command line names its flag instead (``--lr-factor must be above 0``)."""

    def __init__(self, name: str, problem: str):
        super().__init__(f"{name} {problem}")
        self.name, self.problem = name, problem


def did_you_mean(given: str, known: Iterable[str]) -> str:
    """`` (did you mean NAME?)`` for the known name closest to a misspelt one (``--epoch``, ``windw``,
    ``layer``), to put right after the name in an error; "" when none is close, or when ``given``
    is itself known (it failed for another reason). Close: difflib's ratio of matching characters
    of at least 0.6, its default, which takes ``cpy`` to ``copy`` but nothing to ``palindrome``."""
    known = [str(name) for name in known]
    if given in known:
        return ""
    closest = difflib.get_close_matches(given, known, n=1)
    return f" (did you mean {closest[0]}?)" if closest else ""
