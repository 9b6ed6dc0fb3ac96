"""mkdocs hook: writes the page ``reference/cli.md`` from the `graphformer` parser at build time,
so the command reference is never typed by hand and never out of date.

    python docs/cli_reference.py      # print the page
"""

from __future__ import annotations

import argparse
import os

PAGE = "reference/cli.md"
WIDTH = "100"  # argparse wraps help to $COLUMNS; fix it so every build writes the same page


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def render() -> str:
    from graphformer.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        parts = [
            "# Command line\n",
            "Generated from `graphformer.cli.build_parser()` when the site is built; the same text as "
            "`graphformer COMMAND --help`.\n",
            f"```text\n{parser.format_help()}```\n",
        ]
        for name, sub in _subcommands(parser).items():
            parts.append(f"## graphformer {name}\n\n```text\n{sub.format_help()}```\n")
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    parts.append("## From Python\n\n::: graphformer.cli\n    options:\n      members: [build_parser, main]\n")
    for module in ("parser", "main", "train", "decode", "attend", "rollout", "average", "draw", "errors", "signals"):
        parts.append(f"::: graphformer.cli.{module}\n")
    return "\n".join(parts)


def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=render()))
    return files


if __name__ == "__main__":
    print(render())
