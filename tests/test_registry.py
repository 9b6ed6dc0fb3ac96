"""graphformer.registry: entries are never removed, an entry that lacks what the registry's
readers need is refused when it is registered, and a plugin's sample term is read by its
capability (``given`` or ``derived``), not by its name."""

import pytest
from helpers import TINY_MODEL, small_copy_data, snapshot

from graphformer.catalog import SAMPLE_TERMS
from graphformer.cli import main
from graphformer.errors import UserError
from graphformer.registry import Registry


def toy_registry() -> Registry:
    registry = Registry("toy", {"derived": "made here", "given": "read", "checked": "has a detail"})
    registry.register("a", "the first", 1, ["derived"])
    return registry


def test_an_entry_cannot_be_deleted_and_stays_whole():
    registry = toy_registry()
    for remove in (lambda r: r.__delitem__("a"), lambda r: r.pop("a"), lambda r: r.popitem(), lambda r: r.clear()):
        with pytest.raises(TypeError, match="cannot be removed; use register"):
            remove(registry)
        assert "a" in registry and registry["a"] == 1 and list(registry) == ["a"]


def test_an_entry_without_the_details_or_capability_its_readers_need_is_refused():
    registry = Registry(
        "toy", {"derived": "", "given": ""}, requires={"derived": ("serves", "fails")}, one_of=("derived", "given")
    )
    cases = [
        (dict(capabilities=["derived"], serves="enc"), "'t' is 'derived' but gives no fails; pass fails=..."),
        (dict(capabilities=["derived"]), "gives no serves, fails; pass serves=..., fails=..."),
        (dict(capabilities=[]), "must have exactly one of the capabilities derived, given; it has none"),
        (dict(capabilities=["derived", "given"], serves="enc", fails="x"), "it has derived, given"),
    ]
    for keywords, message in cases:
        with pytest.raises(UserError, match="^toy 't'") as info:
            registry.register("t", "a term", object(), **keywords)
        assert message in str(info.value) and "\n" not in str(info.value)
        assert "t" not in registry  # nothing half-registered
    registry.register("t", "a term", object(), ["given"])
    assert registry.entry("t").can("given")


@pytest.fixture
def given_term(monkeypatch):
    """A plugin's sample term ``deps``, read beside the data as ``edges`` is; gone after the test."""
    monkeypatch.setattr(SAMPLE_TERMS, "_entries", dict(SAMPLE_TERMS._entries))
    monkeypatch.setattr(SAMPLE_TERMS, "_loaded", dict(SAMPLE_TERMS._loaded))
    SAMPLE_TERMS.register("deps", "dependency arcs, given beside the data", None, ["given"])
    return "deps"


def test_a_plugins_given_term_is_read_as_given(given_term):
    from graphformer.graphs.pool import GraphPool
    from graphformer.graphs.sample_edges import edges_of_lines, is_given

    assert is_given(given_term) and is_given("edges") and not is_given("parse-tree")
    assert GraphPool(enc=given_term).decodable and not GraphPool(dec=f"causal+{given_term}").decodable
    with pytest.raises(UserError, match="reads each sample's edges \\('deps'\\): give --edges FILE"):
        edges_of_lines(GraphPool(enc=given_term), [["a", "b"]], None)


def test_a_run_with_a_plugins_given_term_asks_for_its_edges_file(given_term, tmp_path, capsys):
    data, out = small_copy_data(tmp_path / "data"), tmp_path / "run"
    before = snapshot(data)
    argv = ["train", "--task", "parallel", "--data-dir", str(data), "--out", str(out), "--enc-attention", given_term]
    code = main([*argv, *TINY_MODEL])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("graphformer: error: "), err
    assert "train.enc.edges" in err and not out.exists() and snapshot(data) == before


def test_a_plugin_registering_an_incomplete_term_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    (tmp_path / "bad_terms.py").write_text(
        "from graphformer.catalog import SAMPLE_TERMS\n"
        "SAMPLE_TERMS.register('mine', 'mine', lambda words: None, ['derived'], serves='enc')\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code = main(["train", "--plugin", "bad_terms", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "sample term 'mine' is 'derived' but gives no fails" in err and not (tmp_path / "run").exists()
    assert "mine" not in SAMPLE_TERMS


def test_a_config_files_plugin_that_fails_to_import_names_the_file(tmp_path, capsys):
    config = tmp_path / "cfg.yaml"
    config.write_text("train: {task: double, plugins: no_such_plugin_here}\n", encoding="utf-8")
    code = main(["train", "--config", str(config), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"graphformer: error: --config {config}: train.plugins no_such_plugin_here: cannot import")
    assert not (tmp_path / "run").exists()


def test_train_reads_its_config_file_once(tmp_path, monkeypatch, capsys):
    import graphformer.cli.train as train
    import graphformer.training.config_file as config_file

    calls, read = [], config_file.read_config_file
    for module in (train, config_file):  # wherever a reader finds it
        monkeypatch.setattr(module, "read_config_file", lambda path: calls.append(path) or read(path))
    config = tmp_path / "cfg.yaml"
    config.write_text("model: {max_len: 40}\ntrain: {max_steps: 1}\n", encoding="utf-8")
    data = small_copy_data(tmp_path / "data", n_train=16)
    argv = [
        "train",
        "--config",
        str(config),
        "--task",
        "parallel",
        "--data-dir",
        str(data),
        "--out",
        str(tmp_path / "run"),
    ]
    assert main([*argv, *TINY_MODEL]) == 0, capsys.readouterr().err
    assert calls == [str(config)]
