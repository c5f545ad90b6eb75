"""Shared test helpers: a counter of host synchronisations (the ``host_syncs`` fixture)."""

from __future__ import annotations

import os

# pyproject.toml's addopts run the suite on two workers (pytest-xdist, each notebook on one
# worker): each worker, and each notebook kernel it starts (which inherits this environment), then
# uses one thread, so that the workers do not slow each other down. The stored outputs are one-
# thread runs, and every assertion holds with one thread as with two (README, robustness).
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ["OMP_NUM_THREADS"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


class HostSyncCounter(TorchDispatchMode):
    """Count the reads of tensor values by the host made inside a ``with`` block.

    On a GPU each such read waits for every queued kernel (a host synchronisation); on the CPU they
    cost nothing, but they are the same calls, so counting them here tells what a GPU would wait
    for. Seen: the operations PyTorch reads a value with (``aten._local_scalar_dense``, behind
    ``.item()``, ``bool(t)``, ``int(t)`` and ``if t:``; ``aten.is_nonzero``; ``aten.equal``;
    ``aten.item``), and ``Tensor.tolist()``, which reads the values without dispatching an
    operation on the CPU (the ``host_syncs`` fixture wraps it). ``.calls`` lists what was seen.
    """

    SYNC_OPS = (aten._local_scalar_dense, aten.is_nonzero, aten.equal, aten.item)

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    @property
    def count(self) -> int:
        return len(self.calls)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in self.SYNC_OPS:
            self.calls.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def host_syncs(monkeypatch):
    """``host_syncs(fn, *args, **kwargs)`` runs ``fn`` and returns the number of host
    synchronisations it made (see :class:`HostSyncCounter`)."""
    active: list[HostSyncCounter] = []
    tolist = torch.Tensor.tolist

    def counted_tolist(tensor):
        for counter in active:
            counter.calls.append("Tensor.tolist")
        return tolist(tensor)

    monkeypatch.setattr(torch.Tensor, "tolist", counted_tolist)

    def count(fn, *args, **kwargs) -> int:
        counter = HostSyncCounter()
        active.append(counter)
        try:
            with counter:
                fn(*args, **kwargs)
        finally:
            active.remove(counter)
        return counter.count

    return count



@pytest.fixture
def chinese(monkeypatch):
    """The exercise checks speaking Chinese, as the Chinese notebooks set them (for this test
    only); gives the Chinese of an English message, from the package's catalogue."""
    from d2lhelpers.exercises import runner

    monkeypatch.setenv("D2LHELPERS_LANGUAGE", "zh_CN")
    return runner._

