import random

import numpy as np
import pytest
import torch

import d2lhelpers as d2lh

F64 = torch.float64


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


MODULES = ["basics", "plotting", "attention", "positional", "transformer", "rnn", "data",
           "training", "decoding", "bleu", "decoder_only"]


def test_every_public_name_is_imported_by_name_into_the_package():
    import importlib

    for module_name in MODULES:
        module = importlib.import_module(f"d2lhelpers.{module_name}")
        for name in module.__all__:
            assert getattr(d2lh, name) is getattr(module, name), f"d2lh.{name} ({module_name})"
    assert callable(d2lh.exercises.check_loo_error)  # the checks, as notebooks call them


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


@pytest.mark.parametrize("tokens", [torch.zeros(2, 3, dtype=torch.long),
                                    torch.full((1, 2), 9, dtype=torch.int32),
                                    torch.zeros(4, 1, dtype=torch.uint8)])
def test_check_tokens_returns_integer_matrices(tokens):
    assert d2lh.check_tokens(tokens, "src") is tokens
    assert d2lh.check_tokens(tokens, "src", vocab_size=10) is tokens


@pytest.mark.parametrize("tokens, message", [
    ([[1, 2]], r"^src must be a tensor of token indices of shape \(B, T\), got list$"),
    (torch.zeros(2, 3), r"^src must hold integer token indices, got dtype torch.float32$"),
    (torch.zeros(2, 3, dtype=torch.bool), r"^src must hold integer token indices, got dtype torch.bool$"),
    (torch.zeros(2, 3, dtype=torch.complex64), r"got dtype torch.complex64$"),
    (torch.zeros(5, dtype=torch.long), r"^src must have shape \(B, T\), got \(5,\)$"),
    (torch.zeros(1, 2, 3, dtype=torch.long), r"^src must have shape \(B, T\), got \(1, 2, 3\)$"),
    (torch.zeros(1, 0, dtype=torch.int32),
     r"^src must hold at least one token per row, got shape \(1, 0\)$"),
    (torch.tensor([[3, 10, 4]]), r"^src must be token ids in \[0, vocab_size=10\), got 10$"),
    (torch.tensor([[3, -5, 12]]), r"^src must be token ids in \[0, vocab_size=10\), got -5$"),
])
def test_check_tokens_names_the_argument_and_what_it_saw(tokens, message):
    with pytest.raises(ValueError, match=message):
        d2lh.check_tokens(tokens, "src", vocab_size=10)


def test_memory_tracker_counts_what_is_held_at_once():
    before = torch.ones(1000)  # made before the block: not counted
    with d2lh.TensorMemoryTracker() as tracker:
        a = torch.zeros(256)  # 1,024 bytes
        view = a[10:20].view(2, 5)  # a view: no new memory
        b = a + 1  # 1,024 more: peak 2,048
        del a, view, b  # both freed
        c = torch.zeros(128, dtype=F64)  # 1,024 bytes again
        before.mul_(2)  # in place: nothing new
    assert tracker.peak_bytes == 2048
    assert tracker.current_bytes == 1024 and c.numel() == 128


def test_host_sync_counter_of_the_tests_sees_every_kind_of_read(host_syncs):
    """The ``host_syncs`` fixture (tests/conftest.py), which the model tests rely on."""
    x = torch.tensor([1.0, 2.0])
    assert host_syncs(lambda: x.sum().item()) == 1
    assert host_syncs(lambda: bool((x > 1).any())) == 1
    assert host_syncs(lambda: int(x[0])) == 1
    assert host_syncs(lambda: torch.equal(x, x)) == 1
    assert host_syncs(lambda: x.tolist()) == 1  # no operation is dispatched: seen all the same
    assert host_syncs(lambda: [x.tolist(), x.max().item()]) == 2
    assert host_syncs(lambda: x[x.argmax()]) == 1  # a tensor index is read to pick the element
    assert host_syncs(lambda: (x * 2 + 1).softmax(0).gather(0, x.argmax()[None])) == 0  # computing
    assert x.tolist() == [1.0, 2.0]  # tolist is itself again outside the counter
