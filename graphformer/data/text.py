"""Aligned parallel text: line i of the source file translates to line i of the target file.

Files are read strictly: UTF-8 only, equal line counts, no empty file. Tokens are separated by
white space (tasks that need a real tokenizer, such as Multi30k, tokenize before this point).
"""

from __future__ import annotations

import codecs
from pathlib import Path

from graphformer.errors import UserError
from graphformer.files import write_text_atomic


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` as files count them (``wc -l``): split at newlines only, a ``\\r``
    before one dropped. (``str.splitlines`` also splits at form feeds, U+2028 and other characters
    that can sit inside a sentence: one of them would misalign a parallel corpus.)

    >>> split_lines("a b\\x0cc\\r\\nd\\n")
    ['a b\\x0cc', 'd']
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line opens none
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def decode_utf8(raw: bytes, name: str, what: str = "the file") -> str:
    """The text of UTF-8 bytes, without a leading byte-order mark (which editors on Windows write,
    and which would otherwise become part of the first word); a UserError naming ``name`` and the
    line if the bytes are not UTF-8."""
    raw = raw.removeprefix(codecs.BOM_UTF8)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise UserError(f"{name}: line {line} is not valid UTF-8; convert {what} to UTF-8") from None


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file, without line endings."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file; check the path or the --data-dir layout")
    return split_lines(decode_utf8(path.read_bytes(), str(path)))


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> tuple[list[list[str]], list[list[str]]]:
    """Whitespace-tokenized sentence pairs from two aligned files."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    for path, lines in ((src_path, src), (tgt_path, tgt)):
        if not lines:
            raise UserError(f"{path}: the file is empty; give at least one sentence")
    if len(src) != len(tgt):
        raise UserError(
            f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; the files must be aligned line by line"
        )
    return [line.split() for line in src], [line.split() for line in tgt]


def write_lines_atomic(path: Path, lines: list[str]) -> None:
    """Write lines so that the file is either complete or absent, never half-written."""
    write_text_atomic(path, "".join(line + "\n" for line in lines))
