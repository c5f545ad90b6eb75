"""Seeds, devices, input checks and the measuring tools (a timer, a tensor-memory tracker): the
small things every notebook needs first."""

from __future__ import annotations

import os
import random
import time
import weakref

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = ["set_seed", "offset_seed", "choose_device", "Timer", "TensorMemoryTracker", "check_int",
           "check_tokens"]


def check_int(value, name: str, minimum: int = 1) -> int:
    """Return ``value`` if it is an int (not a bool) of at least ``minimum``; otherwise raise a
    ``ValueError`` naming the argument and the value seen."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = {0: "a non-negative int", 1: "a positive int"}.get(minimum, f"an int >= {minimum}")
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return value


def check_tokens(tokens, name: str = "tokens", vocab_size: int | None = None) -> torch.Tensor:
    """Return ``tokens`` if it is a tensor of integer token ids of shape (B, T) with at least one
    token, each in ``[0, vocab_size)`` when ``vocab_size`` is given; otherwise raise a
    ``ValueError`` naming the argument (``name``) and the shape, dtype or id seen.

    The range check reads the smallest and largest id (one host synchronisation, which stalls a
    GPU): models call it where tokens enter (``nn.Embedding`` would otherwise fail with an
    ``IndexError`` that names neither the argument nor the id, or a device-side assert on a GPU).
    """
    if not isinstance(tokens, torch.Tensor):
        raise ValueError(f"{name} must be a tensor of token indices of shape (B, T), got "
                         f"{type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token indices, got dtype {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"{name} must have shape (B, T), got {tuple(tokens.shape)}")
    if tokens.numel() == 0:
        raise ValueError(f"{name} must hold at least one token per row, got shape "
                         f"{tuple(tokens.shape)}")
    if vocab_size is not None:
        low, high = torch.stack([tokens.min(), tokens.max()]).tolist()  # the one read
        if low < 0 or high >= vocab_size:
            raise ValueError(f"{name} must be token ids in [0, vocab_size={vocab_size}), got "
                             f"{low if low < 0 else high}")
    return tokens


SEED_OFFSET_VARIABLE = "D2LHELPERS_SEED_OFFSET"


def offset_seed(seed: int) -> int:
    """``seed`` plus the environment variable ``D2LHELPERS_SEED_OFFSET`` (0 when it is not set).

    Every seed of the course goes through it (:func:`set_seed`, the order of training batches), so
    that ``benchmarks/robustness.py`` can rerun a whole notebook with other random draws and check
    that its claims do not hold for one lucky seed only.
    """
    check_int(seed, "seed", minimum=0)
    offset = os.environ.get(SEED_OFFSET_VARIABLE, "0")
    if not offset.isdigit():
        raise ValueError(f"${SEED_OFFSET_VARIABLE} must be a non-negative whole number, got {offset!r}")
    return seed + int(offset)


def set_seed(seed: int = 0) -> int:
    """Seed Python's, NumPy's and PyTorch's random generators (all devices) with
    :func:`offset_seed` ``(seed)``, which is ``seed`` unless a robustness run sets an offset;
    return the seed used."""
    seed = offset_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed


DEVICE_VARIABLE = "D2LHELPERS_DEVICE"


def choose_device() -> torch.device:
    """The fastest device available: CUDA, then Apple's MPS, then the CPU; or the device named by
    the environment variable ``D2LHELPERS_DEVICE`` (e.g. ``cpu``), with which
    ``benchmarks/on_device.py`` runs every notebook on the device it is asked for."""
    named = os.environ.get(DEVICE_VARIABLE)
    if named:
        try:
            device = torch.device(named)
            torch.empty(0, device=device)  # fails at once if the device is not there
        except (RuntimeError, AssertionError) as error:
            raise ValueError(f"${DEVICE_VARIABLE}={named!r} is not a device here: {error}") from None
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


class Timer:
    """Record the durations of several runs.

    >>> timer = Timer()          # starts at once
    >>> elapsed = timer.stop()   # seconds since start; also appended to timer.times
    """

    def __init__(self) -> None:
        self.times: list[float] = []
        self.start()

    def start(self) -> None:
        self._start = time.perf_counter()

    def stop(self) -> float:
        self.times.append(time.perf_counter() - self._start)
        return self.times[-1]

    def sum(self) -> float:
        return sum(self.times)

    def avg(self) -> float:
        if not self.times:
            raise ValueError("Timer.avg: no run has been stopped yet")
        return self.sum() / len(self.times)

    def cumsum(self) -> list[float]:
        return np.cumsum(self.times).tolist()


class TensorMemoryTracker(TorchDispatchMode):
    """Measure the memory of the tensors created inside a ``with`` block, and their peak.

    >>> with TensorMemoryTracker() as tracker:
    ...     scores = queries @ keys.transpose(-2, -1)
    >>> tracker.peak_bytes   # the most bytes held at once by tensors created in the block

    Every PyTorch operation run in the block is seen (a ``TorchDispatchMode``); each new storage it
    returns counts from its creation until it is freed. Views share their base's storage and count
    once; tensors that existed before the block do not count; buffers that a kernel allocates and
    frees internally are not seen. The count depends on the algorithm, not on the machine or the
    number of threads, and works on any device.
    """

    def __init__(self) -> None:
        super().__init__()
        self.current_bytes = self.peak_bytes = 0
        self._live: dict[int, int] = {}  # data pointer -> bytes of a storage created in the block

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(result)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            pointer, size = storage.data_ptr(), storage.nbytes()
            if size == 0 or pointer in self._live or any(
                    isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == pointer
                    for a in tree_flatten((args, kwargs))[0]):
                continue  # empty, already counted, or a view or in-place result of an input
            self._live[pointer] = size
            self.current_bytes += size
            self.peak_bytes = max(self.peak_bytes, self.current_bytes)
            weakref.finalize(storage, self._freed, pointer)
        return result

    def _freed(self, pointer: int) -> None:
        size = self._live.pop(pointer, None)
        if size is not None:
            self.current_bytes -= size
