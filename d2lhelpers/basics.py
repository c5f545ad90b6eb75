"""Seeds, devices and a timer: the small things every notebook needs first."""

from __future__ import annotations

import random
import time

import numpy as np
import torch

__all__ = ["set_seed", "choose_device", "Timer"]


def set_seed(seed: int = 0) -> None:
    """Seed Python's, NumPy's and PyTorch's random generators (all devices) with ``seed``."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


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
