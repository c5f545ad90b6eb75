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


def test_import_is_lazy_and_exports_resolve():
    import subprocess
    import sys

    code = ("import sys, d2lhelpers as d2lh; assert 'matplotlib' not in sys.modules; "
            "assert 'torch' not in sys.modules; [getattr(d2lh, n) for n in d2lh.__all__]")
    subprocess.run([sys.executable, "-c", code], check=True)
    with pytest.raises(AttributeError, match="no_such_name"):
        d2lh.no_such_name
