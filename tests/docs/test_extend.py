"""docs/howto/extend.md runs as written: its plugin module, its Python block and its commands
(in a fresh process each, so that its registrations stay out of this one), and the docs' tables
of backends, patterns and sample terms name exactly the registries' entries."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import snapshot

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "howto" / "extend.md").read_text(encoding="utf-8")
# ```py blocks, not ```python: tests/docs/test_readme.py runs those in its own process, where the
# plugin's entries would stay registered for every later test.
PY_BLOCKS = re.findall(r"```py\n(.*?)```", PAGE, re.S)
SH_LINES = [line for block in re.findall(r"```sh\n(.*?)```", PAGE, re.S) for line in block.splitlines()]


def run(args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(cwd)]), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def command(line: str) -> list[str]:
    """A line of the page, ``graphformer ...`` or ``python -c ...``, as the arguments of Python."""
    words = shlex.split(line)
    return ["-m", "graphformer", *words[1:]] if words[0] == "graphformer" else words[1:]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("extend")
    assert PY_BLOCKS[0].startswith("# my_plugin.py")
    (folder / "my_plugin.py").write_text(PY_BLOCKS[0], encoding="utf-8")
    return folder


def test_the_python_block_builds_and_runs_the_plugins_model(folder):
    (folder / "use.py").write_text(PY_BLOCKS[1], encoding="utf-8")
    proc = run(["use.py"], folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["MyTransformer", "(3,", "16)"]  # what the block's comment says


@pytest.fixture(scope="module")
def page_run(folder):
    """The page's commands, run once in ``folder``: the run ``runs/double`` and the last command's process."""
    for line in SH_LINES:
        proc = run(command(line), folder)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
    return folder / "runs" / "double", proc


def test_the_commands_train_and_evaluate_with_the_plugin_recorded(folder, page_run):
    _, proc = page_run
    config = json.loads((folder / "runs" / "double" / "config.json").read_text(encoding="utf-8"))
    assert config["train"]["plugins"] == "my_plugin" and config["model"]["model"] == "my-transformer"
    assert config["train"]["task"] == "double" and config["model"]["enc_attention"] == "stripes:2+to-first"
    assert re.search(r"test: n=30 .*exact_match=", proc.stdout)  # evaluate read the run without --plugin


def test_the_runs_config_json_repeats_the_plugin_run(folder, page_run):
    """A plugin run's config.json is a valid --config: its train.plugins are imported before its task is checked."""
    proc = run(["-m", "graphformer", "train", "--config", "runs/double/config.json", "--out", "runs/again"], folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.loads((folder / "runs" / "again" / "config.json").read_text(encoding="utf-8"))
    assert config["train"]["plugins"] == "my_plugin" and config["train"]["task"] == "double"


def test_a_saved_plugin_that_no_longer_imports_is_named_as_the_runs_not_a_flag(page_run, tmp_path):
    run_dir, _ = page_run
    before = snapshot(run_dir)
    proc = run(["-m", "graphformer", "evaluate", str(run_dir), "--beam", "1"], tmp_path)  # my_plugin not on the path
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert proc.stderr.startswith("graphformer: error: the run's plugins (") and "--plugin" not in proc.stderr
    assert "my_plugin: cannot import it" in proc.stderr and snapshot(run_dir) == before


def test_resuming_with_another_plugin_adds_it_to_the_runs_plugins(folder, page_run, tmp_path):
    run_dir = tmp_path / "double"
    shutil.copytree(page_run[0], run_dir)
    (folder / "extra_plugin.py").write_text("", encoding="utf-8")
    proc = run(
        ["-m", "graphformer", "train", "--resume", "--out", str(run_dir), "--plugin", "extra_plugin", "--epochs", "2"],
        folder,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    assert config["train"]["plugins"] == "my_plugin,extra_plugin" and config["train"]["epochs"] == 2


def test_the_table_of_a_registry_shows_the_plugins_entries(folder):
    code = "import my_plugin; from graphformer.catalog import PATTERNS, table; print(table(PATTERNS))"
    proc = run(["-c", code], folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| `stripes:S` | every S-th key |  |" in proc.stdout and "| `tree:K` |" in proc.stdout


def test_help_lists_the_plugins_names(folder):
    proc = run(["-m", "graphformer", "train", "--plugin", "my_plugin", "--help"], folder)
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = " ".join(proc.stdout.split())
    for name in ("stripes:S", "to-first", "double (generated: each token twice)", "float64:", "my-transformer:"):
        assert name in text


def test_a_plugin_that_fails_to_import_is_one_line_and_writes_nothing(folder):
    (folder / "broken_plugin.py").write_text("raise RuntimeError('boom')\n", encoding="utf-8")
    for module in ("broken_plugin", "no_such_plugin"):
        proc = run(["-m", "graphformer", "train", "--plugin", module, "--out", "never"], folder)
        assert proc.returncode == 2 and not (folder / "never").exists()
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"graphformer: error: --plugin {module}:")


def table_names(page: str, header: str) -> list[str]:
    """The first-column names of the Markdown table under ``header`` (its first row) in a docs page."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    rows = text[text.index(header) :].split("\n\n")[0].splitlines()[2:]
    return [re.match(r"\| `([^`:]+)", row).group(1) for row in rows]


def test_the_docs_tables_name_every_registered_choice():
    from graphformer.catalog import BACKENDS, PATTERNS, SAMPLE_TERMS

    assert sorted(table_names("howto/attention.md", "| backend |")) == sorted(BACKENDS)
    patterns = [n for n in table_names("howto/attention.md", "| spec |") if n not in ("causal-NAME", "A+B")]
    assert patterns == list(PATTERNS)
    assert table_names("howto/sample-graphs.md", "| term |") == list(SAMPLE_TERMS)


def test_the_edge_uses_table_names_every_use():
    from graphformer.catalog import EDGE_USES

    assert table_names("howto/edge-types.md", "| use |") == list(EDGE_USES)
