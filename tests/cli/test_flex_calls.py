"""How the flex backend served a command, said at its end: ``evaluate`` and ``translate`` with
``--attention-backend flex`` end with one line of counts (``evaluate --json`` holds them too,
and training's metrics those of validation), and a command whose ``auto`` never used flex says
nothing of it.

The kernel is replaced where a test would otherwise compile (tens of seconds per kernel on a
CPU): by one that fails to build as torch's does (`flex._kernel`), or by FlexAttention uncompiled,
counted as compiled (`flex._compiled`); tests/attention/test_flex.py runs the real one.
"""

import json

import pytest
import torch
from helpers import TINY_MODEL, read_jsonl, small_copy_data

from graphformer.attention import flex, padded
from graphformer.cli import main

needs_flex = pytest.mark.skipif(
    flex.unavailable() is not None or not flex.cpu_kernel_runs(),
    reason=str(flex.unavailable() or "this CPU builds no FlexAttention kernel"),
)


def train(root, *extra):
    data = small_copy_data(root / "data", n_train=40)
    run = root / "run"
    argv = ["train", "--task", "parallel", "--data-dir", str(data), "--out", str(run), "--epochs", "1", *TINY_MODEL]
    assert main([*argv, "--batch-size", "16", *extra]) == 0
    return run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny copy model trained for one epoch (accuracy does not matter here)."""
    return train(tmp_path_factory.mktemp("flex-calls"))


def failing_build(monkeypatch):
    """The compiled kernel fails to build, as torch 2.11's did for a second layout size."""

    class InductorError(RuntimeError):  # the name torch._inductor.exc gives its error
        pass

    def fails(*args, **kwargs):
        raise InductorError("CppCompileError: C++ compile error")

    uncompiled = flex._kernel
    monkeypatch.setattr(
        flex, "_kernel", lambda compiled, device_type: fails if compiled else uncompiled(False, device_type)
    )
    monkeypatch.setattr(flex, "_FAILED", {})


def flex_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("flex attention:")]
    assert len(lines) == 1, stderr
    return lines[0]


@needs_flex
def test_evaluate_with_flex_says_its_calls_fell_back_and_scores_as_the_torch_backend(trained, capsys, monkeypatch):
    failing_build(monkeypatch)
    with pytest.warns(RuntimeWarning, match="now run on the blocked or torch backend"):
        assert main(["evaluate", str(trained), "--split", "valid", "--json", "--attention-backend", "flex"]) == 0
    out, err = capsys.readouterr()
    scores = json.loads(out)
    fallen = scores["flex_fallen_back"]
    assert scores["flex_compiled"] == 0 and fallen > 0 and "CppCompileError" in scores["flex_fallback_reason"]
    line = flex_line(err)
    assert line.startswith(f"flex attention: 0 of {fallen} calls ran compiled; {fallen} ran on blocked/torch"), line
    assert main(["evaluate", str(trained), "--split", "valid", "--json", "--attention-backend", "torch"]) == 0
    out, err = capsys.readouterr()
    reference = json.loads(out)
    assert "flex attention:" not in err and "flex_compiled" not in reference
    assert scores["loss"] == pytest.approx(reference["loss"], rel=1e-5)
    assert scores["token_accuracy"] == pytest.approx(reference["token_accuracy"], abs=0.03)  # an argmax may tie


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@needs_flex
def test_translate_with_flex_counts_the_calls_that_ran_compiled(trained, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(flex, "_FAILED", {})
    monkeypatch.setattr(flex, "_compiled", lambda threads: flex._kernel(False, "cpu"))
    source = tmp_path / "in.txt"
    source.write_text("a b c\nd e\n")
    assert main(["translate", str(trained), "--input", str(source), "--attention-backend", "flex", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2
    line = flex_line(err)
    calls = int(line.split(" of ")[1].split()[0])
    assert calls > 0 and line == f"flex attention: {calls} of {calls} calls ran compiled"


def test_a_command_whose_auto_never_used_flex_says_nothing_of_it(trained, tmp_path, capsys):
    """Short sentences: auto leaves them to padded and the others (on either stack)."""
    source = tmp_path / "in.txt"
    source.write_text("a b c\n")
    assert main(["translate", str(trained), "--input", str(source), "--quiet"]) == 0
    assert "flex" not in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@needs_flex
def test_training_metrics_and_last_line_count_the_calls_auto_gave_flex(tmp_path, capsys, monkeypatch):
    """auto hands flex validation's calls (here every call without gradients: padded and
    worth_it are told so); metrics.jsonl holds the epoch's counts and the command ends with the line."""
    monkeypatch.setattr(flex, "_FAILED", {})
    monkeypatch.setattr(flex, "_compiled", lambda threads: flex._kernel(False, "cpu"))
    monkeypatch.setattr(padded, "worth_it", lambda *args, **kwargs: False)
    monkeypatch.setattr(flex, "worth_it", lambda *args, **kwargs: not torch.is_grad_enabled())
    run = train(tmp_path)
    (metrics,) = read_jsonl(run / "metrics.jsonl")
    assert metrics["valid_flex_compiled"] > 0 and metrics["valid_flex_fallen_back"] == 0
    err = capsys.readouterr().err
    total = int(flex_line(err).split(" of ")[1].split()[0])
    assert total >= metrics["valid_flex_compiled"]  # validation's calls, and any of the run's before it
