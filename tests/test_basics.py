import random

import numpy as np
import pytest
import torch

import d2lhelpers as d2lh


def test_set_seed_makes_every_generator_repeat():
    d2lh.set_seed(3)
    first = (random.random(), np.random.rand(), torch.rand(2))
    d2lh.set_seed(3)
    second = (random.random(), np.random.rand(), torch.rand(2))
    assert first[0] == second[0] and first[1] == second[1]
    assert torch.equal(first[2], second[2])


@pytest.mark.parametrize("seed", [-1, 1.5, "0"])
def test_set_seed_rejects_bad_seeds(seed):
    with pytest.raises(ValueError, match="seed"):
        d2lh.set_seed(seed)


def test_choose_device_prefers_cuda_then_mps(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert d2lh.choose_device().type == "cuda"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert d2lh.choose_device().type == "mps"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert d2lh.choose_device() == torch.device("cpu")


def test_timer_records_runs():
    timer = d2lh.Timer()
    with pytest.raises(ValueError, match="no run"):
        timer.avg()
    first = timer.stop()
    timer.start()
    second = timer.stop()
    assert timer.times == [first, second] and first >= 0 and second >= 0
    assert timer.sum() == pytest.approx(first + second)
    assert timer.avg() == pytest.approx((first + second) / 2)
    assert timer.cumsum() == pytest.approx([first, first + second])


MODULES = ["basics", "plotting", "attention", "positional", "transformer", "data", "training",
           "decoding", "bleu"]


def test_every_public_name_is_imported_by_name_into_the_package():
    import importlib

    for module_name in MODULES:
        module = importlib.import_module(f"d2lhelpers.{module_name}")
        for name in module.__all__:
            assert getattr(d2lh, name) is getattr(module, name), f"d2lh.{name} ({module_name})"
    assert callable(d2lh.exercises.check_causal_lens)  # the checks, as notebooks call them


def test_heavy_optional_imports_wait_until_used_and_authoring_needs_no_torch():
    import subprocess
    import sys

    code = ("import sys, d2lhelpers; "
            "late = [m for m in ('sacrebleu', 'IPython', 'nbformat') if m in sys.modules]; "
            "assert not late, late")
    subprocess.run([sys.executable, "-c", code], check=True)
    code = ("import sys, exercise_authoring; "
            "assert 'torch' not in sys.modules and 'd2lhelpers' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_seed_offset_shifts_every_seed(monkeypatch):
    monkeypatch.setenv("D2LHELPERS_SEED_OFFSET", "3")
    assert d2lh.offset_seed(2) == 5 and d2lh.set_seed(2) == 5
    first = torch.rand(2)
    monkeypatch.delenv("D2LHELPERS_SEED_OFFSET")
    assert d2lh.set_seed(5) == 5
    assert torch.equal(torch.rand(2), first)
    monkeypatch.setenv("D2LHELPERS_SEED_OFFSET", "-1")
    with pytest.raises(ValueError, match="D2LHELPERS_SEED_OFFSET must be a non-negative whole"):
        d2lh.set_seed(0)


@pytest.mark.parametrize("value, minimum, message", [
    (0, 1, "n must be a positive int, got 0"), (-1, 0, "n must be a non-negative int, got -1"),
    (True, 1, "n must be a positive int, got True"), (2.0, 1, "got 2.0"),
    (1, 2, "n must be an int >= 2, got 1")])
def test_check_int_names_the_argument_and_the_value(value, minimum, message):
    with pytest.raises(ValueError, match=message):
        d2lh.check_int(value, "n", minimum)
    assert d2lh.check_int(7, "n") == 7
