"""Running a check: the learner's function against a reference, on every case, and a failure
message that teaches: the input, the learner's own return value against the expected one, and
hints that nudge before they tell (the first step by default; ``hint=2`` on a check shows two).

In Jupyter a failed check shows its message, and the frames of the learner's own code when that
code raised, but no line of the checking code: the checks hold the reference implementations.

This module imports nothing from d2lhelpers, so that it also runs on its own: the hidden tests
(in nbgrader's source notebooks, written by ``python -m exercise_authoring source``) load it with
``runpy`` and call :func:`check_afresh`, which grades with a private copy of the package that no
code in the notebook can have patched.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import pathlib
import sys
import traceback
import uuid
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch

__all__ = ["ExerciseCheckFailed", "check_afresh", "run_check"]

_CHECKS_DIR = pathlib.Path(__file__).resolve().parent  # d2lhelpers/exercises


class ExerciseCheckFailed(AssertionError):
    """A learner's function gave a wrong answer, or raised (the message says on which input).

    An ``AssertionError``, so that nbgrader counts it as a failed test. In IPython it renders as
    its message, preceded by the traceback of ``learner_error`` (the learner's own exception, if
    any) without the frames of the checking code.
    """

    def __init__(self, message: str, learner_error: BaseException | None = None):
        super().__init__(message)
        self.learner_error = learner_error

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of the full traceback (IPython's protocol)."""
        lines = []
        if self.learner_error is not None:
            error = traceback.TracebackException.from_exception(self.learner_error)
            error.stack = traceback.StackSummary.from_list(
                [frame for frame in error.stack
                 if pathlib.Path(frame.filename).resolve().parent != _CHECKS_DIR])
            lines = ["Where your function raised:\n", *error.format(), "\n"]
        return [*"".join(lines).splitlines(), f"{type(self).__name__}: {self}"]


def _values_text(array: np.ndarray) -> str:
    """An array's values, rounded, its middle left out when it is large."""
    return np.array2string(array, precision=4, suppress_small=True, threshold=64, edgeitems=3)


def _describe(value) -> str:
    """A readable description of an input or a result: kind, shape, dtype and values."""
    if isinstance(value, torch.Tensor):
        text = f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
        shown = value.detach().cpu()
        if shown.dtype in (torch.bfloat16, torch.float16):
            shown = shown.float()
        if value.dim() == 0:
            return f"{text}: {shown.item():.6g}"
        return f"{text}:\n{_values_text(shown.numpy())}"
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape}, dtype {value.dtype}:\n{_values_text(value)}"
    if isinstance(value, torch.nn.Module):
        text = f"a {type(value).__name__}"
        if hasattr(value, "batch_first"):
            text += f" (batch_first={value.batch_first})"
        parameters = [f"{name} {tuple(p.shape)}" for name, p in value.named_parameters()]
        return text + (" with parameters " + ", ".join(parameters) if parameters else "")
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


def _hints_text(hints: Sequence[str], hint: int) -> str:
    """The first ``hint`` steps of ``hints``, and how to ask for the next one."""
    shown = [f"\nHint: {hints[0]}"] if hint >= 1 and hints else []
    shown += [f"\nHint {step + 1}: {text}" for step, text in enumerate(hints[1:hint], start=1)]
    if hint < len(hints):
        shown.append(f"\n(For {'a more specific' if shown else 'a'} hint, run the check again "
                     f"with hint={max(hint, 0) + 1}.)")
    return "".join(shown)


def run_check(name: str, learner_fn: Callable, cases: Sequence[tuple[str, tuple]],
              reference: Callable, hints: str | Sequence[str] = (), hint: int = 1,
              compare_through: tuple[str, Callable] | None = None,
              atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Run ``learner_fn`` on every case and compare with ``reference`` (both called with the same
    arguments); print one line on success.

    cases: (description, args) pairs. Results may be tensors, NumPy arrays, numbers, or tuples
    of them. hints: the steps of the hint, from a nudge to the full explanation (a string is
    one step); a failure shows the first ``hint`` of them (0: none) and says how to see more.
    compare_through: (what, fn) for results judged by what they do (valid lengths by the
    weights they give, a layer by its outputs): ``fn(result, *args)`` is compared instead of
    the results themselves, and ``what`` (e.g. "applied to the inputs") says how the result
    was used; the message still shows the results themselves.

    Raises :class:`ExerciseCheckFailed` naming the failing input, showing the learner's own
    result against the expected one, and the hints; also when the learner's function modifies
    its inputs. Warnings raised by the learner's function are printed (to standard output, so
    that nbgrader, which counts any standard-error output as a failure, still gives the point).
    """
    if not callable(learner_fn):
        raise ValueError(f"learner_fn must be a function, got {type(learner_fn).__name__}")
    if isinstance(hint, bool) or not isinstance(hint, int) or hint < 0:
        raise ValueError("hint must be a whole number >= 0 (how many steps of hints to show; their "
                         f"texts go in hints), got {hint!r}")
    hints = (hints,) if isinstance(hints, str) else tuple(hints)
    with torch.random.fork_rng(devices=[]):  # the notebook's random stream stays as it was
        _run_cases(name, learner_fn, cases, reference, _hints_text(hints, hint), compare_through,
                   atol, rtol)
    print(f"Correct: {name} passed all {len(cases)} checks.")


def _run_cases(name, learner_fn, cases, reference, hints_text, compare_through, atol, rtol):
    warned = {}  # (category, message) -> text, each warning shown once
    try:
        for description, args in cases:
            expected = reference(*copy.deepcopy(args))
            learner_args = copy.deepcopy(args)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    got = learner_fn(*learner_args)
                except Exception as error:
                    if type(error) is NotImplementedError and not error.args:  # the stub
                        raise ExerciseCheckFailed(f"{name}: not implemented yet: write the "
                                                  "function, then run this check again.") from None
                    raise ExerciseCheckFailed(
                        f"{name} raised {type(error).__name__}: {error}\n  on input {description}: "
                        f"{_describe(args)}{hints_text}", learner_error=error) from error
            for warning in caught:
                key = (warning.category.__name__, str(warning.message))
                warned.setdefault(key, f"{key[0]}: {key[1]}")
            problem = _problem(got, expected, args, compare_through, atol, rtol)
            if problem is None:
                changed = [i for i, (a, b) in enumerate(zip(args, learner_args)) if not _same(a, b)]
                if changed:
                    problem = f"the function modified its input argument(s) {changed} in place"
            if problem is not None:
                raise ExerciseCheckFailed(
                    f"{name} is not right yet on input {description}: {problem}.\n"
                    f"  input:    {_describe(args)}\n  expected: {_describe(expected)}\n"
                    f"  got:      {_describe(got)}{hints_text}")
    finally:
        for text in warned.values():
            print(f"Your function warned: {text}")


def _problem(got, expected, args, compare_through, atol, rtol) -> str | None:
    """What is wrong with the learner's result ``got``, or None."""
    if compare_through is None:
        return _compare(got, expected, atol, rtol)
    what, through = compare_through
    try:
        have = through(got, *copy.deepcopy(args))
    except Exception as error:
        return f"what it returned raised {type(error).__name__} when {what}: {error}"
    problem = _compare(have, through(expected, *copy.deepcopy(args)), atol, rtol)
    if problem is not None:
        return f"what it returned, {what}, does not give the expected result: {problem}"
    return None


def check_afresh(check: str, learner_fn: Callable, seed: int = 1) -> None:
    """Run the check named ``check`` (e.g. "check_causal_lens") on ``learner_fn`` with a private
    copy of d2lhelpers, loaded afresh from the files of the package this module belongs to.

    This is how the hidden tests of nbgrader's source notebooks grade: they load this file with
    ``runpy`` and call this function, so that nothing the notebook's code can replace
    (``d2lh.exercises``, its checks, its ``run_check``, the ``d2lhelpers`` modules in
    ``sys.modules``) takes part. Code that patches Python itself, PyTorch or IPython is beyond
    what any test running in the same kernel can guard against.
    """
    package_dir = _CHECKS_DIR.parent
    name = f"_d2lhelpers_afresh_{uuid.uuid4().hex}"
    spec = importlib.util.spec_from_file_location(name, package_dir / "__init__.py",
                                                  submodule_search_locations=[str(package_dir)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package  # relative imports inside the copy need it, while it loads
    try:
        spec.loader.exec_module(package)
        checks = package.exercises
        if not check.startswith("check_") or check not in checks.__all__:
            raise ValueError(f"check must name a check of d2lhelpers.exercises, got {check!r}")
        getattr(checks, check)(learner_fn, seed=seed)
    finally:
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]
