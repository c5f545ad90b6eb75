"""Seeds, devices and a timer: the small things every notebook needs first."""

from __future__ import annotations

import os
import random
import time

import numpy as np
import torch

__all__ = ["set_seed", "offset_seed", "choose_device", "Timer", "check_int"]


def check_int(value, name: str, minimum: int = 1) -> int:
    """Return ``value`` if it is an int (not a bool) of at least ``minimum``; otherwise raise a
    ``ValueError`` naming the argument and the value seen."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = {0: "a non-negative int", 1: "a positive int"}.get(minimum, f"an int >= {minimum}")
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return value


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


def choose_device() -> torch.device:
    """The fastest device available: CUDA, then Apple's MPS, then the CPU."""
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
