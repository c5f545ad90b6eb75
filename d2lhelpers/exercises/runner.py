"""Running a check: the learner's function against a reference, on every case, with a helpful
message on failure (the input, what was expected, what came back, a hint)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

__all__ = ["ExerciseCheckFailed", "run_check"]


class ExerciseCheckFailed(AssertionError):
    """A learner's function gave a wrong answer (the message says where and why)."""



def _describe(value) -> str:
    """A short, readable description of an input or output, with shapes for arrays."""
    if isinstance(value, torch.Tensor):
        text = f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
        if value.dim() == 0:
            return f"{text}: {value.item():.6g}"
        if value.numel() <= 24:
            shown = value.detach().cpu().numpy()
            text += f":\n{shown.round(4) if value.is_floating_point() else shown}"
        return text
    if isinstance(value, np.ndarray):
        text = f"array of shape {value.shape}, dtype {value.dtype}"
        shown = value.round(4) if np.issubdtype(value.dtype, np.floating) else value
        return text + (f":\n{shown}" if value.size <= 24 else "")
    if isinstance(value, torch.nn.Module):
        return f"a {type(value).__name__}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    if isinstance(value, (float, np.floating)):
        return f"{value:.6g}"
    return repr(value)


def _as_tensor(value) -> torch.Tensor | None:
    """A tensor, array or number as a tensor; None for anything else."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (np.ndarray, np.generic, int, float)) and not isinstance(value, bool):
        return torch.as_tensor(np.asarray(value))
    return None


def _compare(got, expected, atol: float, rtol: float) -> str | None:
    """None if ``got`` matches ``expected`` (a tensor, array, number or tuple of them);
    otherwise what differs. Values are compared in float64; a float64 expectation also requires
    a float64 result (the inputs' precision kept)."""
    if isinstance(expected, tuple):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"expected a tuple of {len(expected)} results, got {_describe(got)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            problem = _compare(g, e, atol, rtol)
            if problem is not None:
                return f"result {i} of the tuple: {problem}"
        return None
    want, have = _as_tensor(expected), _as_tensor(got)
    if have is None:
        wanted = "a tensor" if isinstance(expected, torch.Tensor) else "an array or a number"
        return f"expected {wanted}, got {type(got).__name__}"
    if have.shape != want.shape:
        return f"expected shape {tuple(want.shape)}, got shape {tuple(have.shape)}"
    if want.dtype == torch.float64 and have.is_floating_point() and have.dtype != torch.float64:
        return f"expected dtype float64 (the precision of the inputs), got {have.dtype}"
    have, want = have.cpu().double(), want.cpu().double()
    if not torch.isfinite(have).all() and torch.isfinite(want).all():
        return "the result holds NaN or infinite values"
    if not torch.allclose(have, want, atol=atol, rtol=rtol, equal_nan=True):
        if want.dim() == 0:
            return f"expected {want.item():.6g}, got {have.item():.6g}"
        # equal infinities (a -inf mask entry, say) count as no difference
        differences = (have - want).abs().masked_fill(have == want, 0)
        worst = differences.nan_to_num(math.inf).flatten().argmax().item()
        index = tuple(int(i) for i in np.unravel_index(worst, tuple(want.shape)))
        return (f"values differ: at index {index} expected {want[index].item():.6g}, "
                f"got {have[index].item():.6g}")
    return None


def _same(a, b) -> bool:
    """Whether an input argument is unchanged (tensors and arrays; anything else counts as same)."""
    if isinstance(a, torch.Tensor):
        if torch.equal(a, b):
            return True
        return (a.is_floating_point() and a.shape == b.shape and a.dtype == b.dtype
                and bool(((a == b) | (a.isnan() & b.isnan())).all()))  # NaN inputs stay NaN
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b, equal_nan=True)
    return True


def run_check(name: str, learner_fn: Callable, cases: Sequence[tuple[str, tuple]],
              reference: Callable, hint: str = "", atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Run ``learner_fn`` on every case and compare with ``reference`` (both called with the same
    arguments). ``cases``: (description, args) pairs. Results may be tensors, NumPy arrays,
    numbers, or tuples of them. Raises :class:`ExerciseCheckFailed` with the failing input, the
    expected and the returned value and ``hint``; prints one line on success. Also fails if the
    learner's function modifies its inputs."""
    if not callable(learner_fn):
        raise ValueError(f"learner_fn must be a function, got {type(learner_fn).__name__}")
    with torch.random.fork_rng(devices=[]):  # the notebook's random stream stays as it was
        _run_cases(name, learner_fn, cases, reference, hint, atol, rtol)
    print(f"Correct: {name} passed all {len(cases)} checks.")


def _run_cases(name, learner_fn, cases, reference, hint, atol, rtol) -> None:
    for description, args in cases:
        expected = reference(*copy.deepcopy(args))
        learner_args = copy.deepcopy(args)
        try:
            got = learner_fn(*learner_args)
        except NotImplementedError:
            raise ExerciseCheckFailed(f"{name}: not implemented yet: write the function, then run "
                                      "this check again.") from None
        except Exception as error:  # the learner's code failed: say on which input
            raise ExerciseCheckFailed(
                f"{name} raised {type(error).__name__}: {error}\n  on input {description}: "
                f"{_describe(args)}\nHint: {hint}") from error
        problem = _compare(got, expected, atol, rtol)
        if problem is None:
            changed = [i for i, (a, b) in enumerate(zip(args, learner_args)) if not _same(a, b)]
            if changed:
                problem = f"the function modified its input argument(s) {changed} in place"
        if problem is not None:
            raise ExerciseCheckFailed(
                f"{name} is not right yet on input {description}: {problem}.\n"
                f"  input:    {_describe(args)}\n  expected: {_describe(expected)}\n"
                f"  got:      {_describe(got)}\nHint: {hint}")
