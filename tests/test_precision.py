"""`graphformer.precision`: the context a model computes in, and what a CPU without bfloat16
instructions is told."""

import contextlib

import pytest
import torch

from graphformer import precision
from graphformer.choices import PRECISIONS
from graphformer.errors import ConfigError


def test_float32_is_no_context_at_all():
    assert isinstance(precision.autocast("float32", "cpu"), contextlib.nullcontext)


def test_bfloat16_on_a_cpu_computes_matrix_products_in_bfloat16():
    a = torch.ones(2, 3)
    with precision.autocast("bfloat16", "cpu"):
        product = a @ a.T
    assert product.dtype == torch.bfloat16


@pytest.mark.parametrize(
    "name,needles", [("float64", ["float32", "bfloat16", "float16", "'float64'"]), ("float16", ["GPU", "bfloat16"])]
)
def test_a_precision_that_cannot_run_is_refused_naming_what_can(name, needles):
    with pytest.raises(ConfigError) as info:
        precision.autocast(name, "cpu")
    assert info.value.name == "precision" and all(n in info.value.problem for n in needles), info.value.problem


def test_every_precision_offered_is_one_autocast_knows():
    for name in PRECISIONS:
        device = "cuda" if name == "float16" else "cpu"
        if device == "cuda" and not torch.cuda.is_available():
            continue
        precision.autocast(name, device)


@pytest.mark.parametrize(
    "flags,found",
    [
        ("fpu avx2 avx512_bf16", ["avx512_bf16"]),
        ("fpu avx2", []),
        ("fpu amx_bf16 avx512_bf16", ["avx512_bf16", "amx_bf16"]),
    ],
)
def test_the_cpus_bfloat16_instructions_are_read_from_cpuinfo(tmp_path, flags, found):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    assert precision.cpu_bfloat16_instructions(str(cpuinfo)) == found


def test_without_cpuinfo_or_x86_flags_nothing_is_known(tmp_path):
    assert precision.cpu_bfloat16_instructions(str(tmp_path / "missing")) is None
    arm = tmp_path / "cpuinfo"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd\n")
    assert precision.cpu_bfloat16_instructions(str(arm)) is None


@pytest.mark.parametrize("flags,warned", [([], True), (["amx_bf16"], False), (None, False)])
def test_only_a_cpu_known_to_emulate_bfloat16_is_warned_of(monkeypatch, capsys, flags, warned):
    monkeypatch.setattr(precision, "cpu_bfloat16_instructions", lambda: flags)
    assert (precision.emulation_warning("bfloat16", "cpu") is not None) == warned
    assert precision.emulation_warning("float32", "cpu") is None
    precision.warn_if_emulated("bfloat16", "cpu")
    err = capsys.readouterr().err
    assert ("bfloat16" in err and "slower" in err) if warned else err == ""
