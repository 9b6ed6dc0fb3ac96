"""docs/howto/edge-types.md is current: its tables name every registered edge type and use, every
``--*-edges`` value and ``*_edges=`` string in it parses, and its Python blocks run as written."""

import re
from pathlib import Path

from graphformer.catalog import EDGE_TYPES, EDGE_USES
from graphformer.model.edge_spec import parse_edges

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "edge-types.md"


def table_names(text: str, header: str) -> list[str]:
    """The first-column names (before any colon) of the Markdown table whose first row is ``header``."""
    rows = text[text.index(header) :].split("\n\n")[0].splitlines()[2:]
    return [re.match(r"\| `([^`:]+)", row).group(1) for row in rows]


def test_the_tables_name_every_edge_type_and_use_in_the_registries_order():
    text = PAGE.read_text(encoding="utf-8")
    assert table_names(text, "| types |") == list(EDGE_TYPES)
    assert table_names(text, "| use |") == list(EDGE_USES)
    for entry in EDGE_TYPES.entries():  # as --help writes the arguments
        shown = entry.name + (f":{entry.details['arguments']}" if entry.details.get("arguments") else "")
        assert f"| `{shown}` |" in text


def test_every_edges_spec_on_the_page_parses():
    text = PAGE.read_text(encoding="utf-8")
    specs = re.findall(r"--(enc|dec|cross)-edges (\S+)", text) + re.findall(r'(enc|dec|cross)_edges="([^"]+)"', text)
    assert len(specs) >= 10 and {r for r, _ in specs} == {"enc", "dec", "cross"}
    for relation, spec in specs:
        assert parse_edges(spec, relation), spec


def test_the_python_blocks_run_as_written():
    text = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"```py\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 2
    scope = {}
    for block in blocks:  # one after another, as a reader runs them
        exec(compile(block, str(PAGE), "exec"), scope)
    assert scope["loss"].requires_grad
