"""Running a check: the learner's function against a reference, on every case, and a failure
message that teaches: the mistake by name when the check recognises it, the input that failed,
the learner's own result against the expected one, and hints that nudge before they tell (the
first step by default; ``hint=2`` on a check shows two; the last step, which gives the answer,
says so). A function that leaves its inputs changed (a tensor, a layer's parameters, buffers,
hooks or mode) fails, whatever its result, and the message says what it changed.

A failure fits on a screen: inputs and results are summarised (kinds, shapes; where and how many
values differ, the worst of them, and the values around it); ``verbose=True`` shows them in full,
and the raised error keeps the full version in ``details`` either way.

Mistakes are recognised by what the learner's function does, never guessed: each check passes a
catalogue of the classic mistakes of its exercise (``mistakes``), each a wrong reference (what the
function returns when it makes that mistake) or a :class:`Symptom` (a property its results show).
A mistake is named only when it explains the learner's results on every case of the check.

In Jupyter a failed check shows its message, and the frames of the learner's own code when that
code raised, but no line of the checking code: the checks hold the reference implementations.

This module imports nothing from d2lhelpers, so that it also runs on its own: the hidden tests
(in nbgrader's source notebooks, written by ``python -m exercise_authoring source``) load it with
``runpy`` and call :func:`check_afresh`, which grades with a private copy of the package that no
code in the notebook can have patched.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gettext
import importlib.util
import inspect
import io
import itertools
import math
import os
import pathlib
import re
import sys
import textwrap
import traceback
import unicodedata
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

__all__ = ["ExerciseCheckFailed", "LANGUAGES", "MODEL_ANSWER", "N_", "Symptom", "check_afresh",
           "exercise_check", "language", "run_check", "set_language"]

_CHECKS_DIR = pathlib.Path(__file__).resolve().parent  # d2lhelpers/exercises
_WIDTH = 100  # the width a message is wrapped to
_VALUES_WIDTH = 84  # the width of a summary of values, after its label ("  expected: ")


# The language of the feedback ---------------------------------------------------------------------
# The checks speak English unless a notebook says otherwise: the Chinese notebooks call
# set_language("zh_CN") in their setup cell. Messages are looked up in the gettext catalogue
# d2lhelpers/locale/<language>/LC_MESSAGES/d2lhelpers.mo (written by ``python -m
# exercise_authoring translate`` from locale/<language>/LC_MESSAGES/d2lhelpers/<module>.po), with
# their numbers and names filled in afterwards (``_("... {n} ...").format(n=n)``). The language is
# kept in an environment variable, so that the private copy of the package that grades the hidden
# tests (check_afresh) speaks it too.

LANGUAGES = ("en", "zh_CN")
_LANGUAGE_VARIABLE = "D2LHELPERS_LANGUAGE"
_LOCALE_DIR = _CHECKS_DIR.parent / "locale"


def set_language(language: str) -> None:
    """Make the exercise checks speak ``language``: "en" (the default) or "zh_CN" (简体中文)."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {', '.join(map(repr, LANGUAGES))}, "
                         f"got {language!r}")
    os.environ[_LANGUAGE_VARIABLE] = language


def language() -> str:
    """The language the checks speak now (see :func:`set_language`)."""
    chosen = os.environ.get(_LANGUAGE_VARIABLE, "en")
    return chosen if chosen in LANGUAGES else "en"


@functools.lru_cache(maxsize=None)
def _catalogue(language: str) -> gettext.NullTranslations:
    return gettext.translation("d2lhelpers", localedir=_LOCALE_DIR, languages=[language],
                               fallback=True)


def _(message: str) -> str:
    """``message`` in the language of the feedback (itself when it has no translation)."""
    chosen = language()
    return message if chosen == "en" or not message else _catalogue(chosen).gettext(message)


def N_(message: str) -> str:
    """``message`` as it is: marks a message for the catalogue where it is defined (a mistake's
    sentence, a hint, a case's description), translated where it is shown."""
    return message


# What a check prints, with model_answer=True, on the model answer of a teaching notebook: the
# learner has earned no verdict there (exercise_authoring writes the same line as the cell's
# stored output, so it holds no count of cases).
MODEL_ANSWER = N_("✓ the model answer passes {check}; try yours in the student copy")


class ExerciseCheckFailed(AssertionError):
    """A learner's function gave a wrong answer, or raised (the message says on which input).

    An ``AssertionError``, so that nbgrader counts it as a failed test. In IPython it renders as
    its message, preceded by the traceback of ``learner_error`` (the learner's own exception, if
    any) without the frames of the checking code. ``diagnosis``: the sentence naming the mistake
    the check recognised (the message's first line), or None. ``details``: the message with the
    input and the results in full (the message itself when the check ran with ``verbose=True``).
    """

    def __init__(self, message: str, learner_error: BaseException | None = None, *,
                 diagnosis: str | None = None, details: str | None = None):
        super().__init__(message)
        self.learner_error = learner_error
        self.diagnosis = diagnosis
        self.details = message if details is None else details

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of the full traceback (IPython's protocol)."""
        lines = []
        if self.learner_error is not None:
            error = traceback.TracebackException.from_exception(self.learner_error)
            error.stack = traceback.StackSummary.from_list(
                [frame for frame in error.stack
                 if pathlib.Path(frame.filename).resolve().parent != _CHECKS_DIR])
            lines = [_("Where your function raised:") + "\n", *error.format(), "\n"]
        return [*"".join(lines).splitlines(), f"{type(self).__name__}: {self}"]


class Symptom:
    """A classic mistake recognised by a property of the learner's results, where no single wrong
    reference gives them (e.g. "each column of the weights sums to 1": the softmax over the wrong
    axis, whatever else the function does).

    ``predicate(result, *args)`` says whether ``result``, what the learner's function returned on
    the case ``args`` (or the exception it raised), shows the mistake; an exception inside the
    predicate counts as no. The symptom explains a failure when it holds on every case the
    function fails, and there is at least one.
    """

    def __init__(self, predicate: Callable[..., bool]):
        if not callable(predicate):
            raise ValueError(f"predicate must be a function, got {type(predicate).__name__}")
        self.predicate = predicate


# Summaries of values -----------------------------------------------------------------------------

def _number(x) -> str:
    """A number in at most 4 significant digits (whole numbers as they are)."""
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return f"{float(x):.4g}"


def _nested(values, width: int) -> str | None:
    """A small array of values as nested brackets, or None if it does not fit in ``width``."""
    if values.ndim == 0:
        return _number(values.item())
    if values.size > 64:
        return None
    text = "[" + ", ".join(_nested(v, width) or "..." for v in values) + "]"
    return text if len(text) <= width and "..." not in text else None


def _values_brief(array: np.ndarray, width: int) -> str:
    """The values of an array in at most about ``width`` characters: nested brackets when they fit,
    else its first values, flattened."""
    nested = _nested(array, width)
    if nested is not None:
        return nested
    shown, length = [], 0
    for value in array.flatten()[:64]:
        text = _number(value.item())
        if length + len(text) + 2 > width - 20:  # room for the end, ", ...] (flattened)"
            break
        shown.append(text)
        length += len(text) + 2
    return _("{values} (flattened)").format(values=f"[{', '.join(shown)}, ...]")


def _kind(value) -> str:
    """A value's kind, shape and dtype, e.g. "tensor (2, 3) float32"."""
    if isinstance(value, torch.Tensor):
        return f"tensor {tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, np.ndarray):
        return f"array {value.shape} {value.dtype}"
    if isinstance(value, torch.nn.Module):
        text = _("a {kind}").format(kind=type(value).__name__)
        return text + (f" (batch_first={value.batch_first})" if hasattr(value, "batch_first")
                       else "")
    if isinstance(value, (tuple, list)):
        return _("a {kind} of {count}").format(kind=type(value).__name__, count=len(value))
    return type(value).__name__


def _brief(value, width: int = _VALUES_WIDTH) -> str:
    """A one-line summary of an input or a result, in about ``width`` characters: kind, shape,
    dtype and, as far as they fit, values."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        array = value.detach().cpu() if isinstance(value, torch.Tensor) else value
        if isinstance(array, torch.Tensor):
            if array.dtype in (torch.bfloat16, torch.float16):
                array = array.float()
            array = array.numpy()
        kind = _kind(value)
        if array.size == 0:
            return _("{kind} (empty)").format(kind=kind)
        room = width - len(kind) - 2
        values = _nested(array, room) or (_values_brief(array, room) if room >= 40 else None)
        return kind if values is None else f"{kind}: {values}"
    if isinstance(value, (tuple, list)):
        brackets = "()" if isinstance(value, tuple) else "[]"
        return brackets[0] + _briefs(list(value), None, width - 2) + brackets[1]
    if isinstance(value, torch.nn.Module):
        return _kind(value)
    if isinstance(value, (float, np.floating, int, np.integer, bool)):
        return _number(value)
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _brief_kind(value) -> str:
    """A value's kind and shape only (its value too when it is a number or a short repr)."""
    if isinstance(value, (torch.Tensor, np.ndarray, torch.nn.Module, tuple, list)):
        return _kind(value)
    return _brief(value, 24)


def _briefs(values: list, names: list[str] | None, width: int) -> str:
    """Several values summarised side by side in about ``width`` characters (``name=`` before
    each, given names): kinds and shapes first, then values, argument by argument, while they
    fit."""
    labels = [f"{name}=" for name in names] if names else [""] * len(values)
    parts = [label + _brief(v, 0) for label, v in zip(labels, values)]
    for i, (label, value) in enumerate(zip(labels, values)):
        room = width - (sum(map(len, parts)) + 2 * len(parts) - len(parts[i]))
        fuller = label + _brief(value, min(room, 60) - len(label))
        if len(fuller) <= room:
            parts[i] = fuller
    return ", ".join(parts)


def _argument_names(reference: Callable, count: int) -> list[str] | None:
    """The names of the first ``count`` parameters of ``reference`` (None if it has no such
    plain signature): an input is shown as name=value."""
    try:
        parameters = list(inspect.signature(reference).parameters.values())[:count]
    except (TypeError, ValueError):
        return None
    if len(parameters) < count or any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                      for p in parameters):
        return None
    return [p.name for p in parameters]


def _differing_part(got, expected, atol: float, rtol: float, label: str = ""):
    """The part of a result where it first differs from the expected one (result i of a tuple),
    with its label, e.g. ("result 1 of 2: ", got[1], expected[1])."""
    if (isinstance(expected, tuple) and isinstance(got, (tuple, list))
            and len(got) == len(expected)):
        for i, (g, e) in enumerate(zip(got, expected)):
            if _compare(g, e, atol, rtol) is not None:
                return _differing_part(g, e, atol, rtol, label + _("result {i} of {count}: ")
                                       .format(i=i, count=len(expected)))
    return label, got, expected


def _around_worst(value, got, expected, width: int, most: int = 6) -> str | None:
    """``value`` (``got`` or ``expected``, arrays of one shape whose values do not all fit in
    ``width``) summarised around their largest difference: its kind, then the values of the last
    axis near that place (at most ``most`` of them), e.g. "tensor (2, 5, 16) float32, at
    [1, 4, 5:11]: [...]"; else None."""
    found = _window(value, got, expected, width, most)
    return None if found is None else found[0]


def _window(value, got, expected, width: int, most: int = 6) -> tuple[str, int] | None:
    """What :func:`_around_worst` shows, and how many values of the last axis it shows."""
    have, want = _as_tensor(got), _as_tensor(expected)
    if have is None or want is None or have.shape != want.shape or want.dim() == 0:
        return None
    if _nested(np.asarray(_as_tensor(value).cpu().double()),
               width - len(_kind(value)) - 2) is not None:
        return None  # it fits whole: show it whole
    have, want = have.cpu().double(), want.cpu().double()
    same = (have == want) | (have.isnan() & want.isnan())
    worst = (have - want).abs().masked_fill(same, 0).nan_to_num(math.inf).flatten().argmax()
    index = [int(i) for i in np.unravel_index(int(worst), tuple(want.shape))]
    length = want.shape[-1]
    for shown in range(min(length, most), 0, -1):  # as many values of the last axis as fit
        start = min(max(index[-1] - shown // 2, 0), length - shown)
        where = ", ".join([*map(str, index[:-1]),
                           ":" if shown == length else f"{start}:{start + shown}"])
        part = _as_tensor(value).cpu()[tuple(index[:-1])][start:start + shown]
        part = (part.float() if part.dtype in (torch.bfloat16, torch.float16) else part).numpy()
        text = _("{kind}, at [{where}]: {values}").format(kind=_kind(value), where=where,
                                                          values=_nested(part, width))
        if _columns(text) <= width or shown == 1:
            return text, shown
    return None


def _values_text(array: np.ndarray) -> str:
    """An array's values, rounded, its middle left out when it is large."""
    return np.array2string(array, precision=4, suppress_small=True, threshold=64, edgeitems=3)


def _describe(value) -> str:
    """A full description of an input or a result: kind, shape, dtype and values."""
    if isinstance(value, torch.Tensor):
        text = _("tensor of shape {shape}, dtype {dtype}").format(shape=tuple(value.shape),
                                                                  dtype=value.dtype)
        shown = value.detach().cpu()
        if shown.dtype in (torch.bfloat16, torch.float16):
            shown = shown.float()
        if value.dim() == 0:
            return f"{text}: {shown.item():.6g}"
        return f"{text}:\n{_values_text(shown.numpy())}"
    if isinstance(value, np.ndarray):
        return (_("array of shape {shape}, dtype {dtype}").format(shape=value.shape,
                                                                  dtype=value.dtype)
                + f":\n{_values_text(value)}")
    if isinstance(value, torch.nn.Module):
        text = _("a {kind}").format(kind=type(value).__name__)
        if hasattr(value, "batch_first"):
            text += f" (batch_first={value.batch_first})"
        parameters = [f"{name} {tuple(p.shape)}" for name, p in value.named_parameters()]
        return text + (_(" with parameters {parameters}").format(parameters=", ".join(parameters))
                       if parameters else "")
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    if isinstance(value, (float, np.floating)):
        return f"{value:.6g}"
    return repr(value)


# Comparing results -------------------------------------------------------------------------------

def _as_tensor(value) -> torch.Tensor | None:
    """A tensor, array or number as a tensor; None for anything else."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (np.ndarray, np.generic, int, float)) and not isinstance(value, bool):
        return torch.as_tensor(np.asarray(value))
    return None


class _ValuesDiffer(str):
    """What differs between two results of one shape: values (not a shape, a dtype or NaN)."""


def _differences(have: torch.Tensor, want: torch.Tensor, atol: float, rtol: float,
                 where: str = "") -> str:
    return _ValuesDiffer(_values_differ(have, want, atol, rtol, where))


def _values_differ(have: torch.Tensor, want: torch.Tensor, atol: float, rtol: float,
                   where: str = "") -> str:
    """Where two float64 tensors of the same shape differ: how many values, and the largest
    difference. ``where`` says what the indices point into, when that is not the result itself."""
    if want.dim() == 0:
        return _("expected {expected}, got {got}").format(expected=f"{want.item():.6g}",
                                                           got=f"{have.item():.6g}")
    # equal infinities (a -inf mask entry, say) and NaN where NaN is expected count as equal
    same = (have == want) | (have.isnan() & want.isnan())
    differences = (have - want).abs().masked_fill(same, 0).nan_to_num(math.inf)
    count = int((~torch.isclose(have, want, atol=atol, rtol=rtol, equal_nan=True)).sum())
    worst = differences.flatten().argmax().item()
    index = tuple(int(i) for i in np.unravel_index(worst, tuple(want.shape)))
    values = _("expected {expected}, got {got}").format(expected=f"{want[index].item():.6g}",
                                                         got=f"{have[index].item():.6g}")
    if want.numel() == 1:
        return _("its only value differs{where}: {values}").format(where=where, values=values)
    if count <= 1:
        return _("1 of {total} values differs{where}, at index {index}: {values}").format(
            total=want.numel(), where=where, index=index, values=values)
    return _("{count} of {total} values differ{where}; the largest difference at index {index}: "
             "{values}").format(count=count, total=want.numel(), where=where, index=index,
                                values=values)


def _compare(got, expected, atol: float, rtol: float, where: str = "") -> str | None:
    """None if ``got`` matches ``expected`` (a tensor, array, number or tuple of them);
    otherwise what differs. Values are compared in float64; a float64 expectation also requires
    a float64 result (the inputs' precision kept)."""
    if isinstance(expected, tuple):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return _("expected a tuple of {count} results, got {got}").format(
                count=len(expected), got=_brief_kind(got))
        for i, (g, e) in enumerate(zip(got, expected)):
            problem = _compare(g, e, atol, rtol, where)
            if problem is not None:
                return _("result {i} of the tuple: {problem}").format(i=i, problem=problem)
        return None
    want, have = _as_tensor(expected), _as_tensor(got)
    if have is None:
        wanted = (_("expected a tensor, got {got}") if isinstance(expected, torch.Tensor)
                  else _("expected an array or a number, got {got}"))
        return wanted.format(got=type(got).__name__)
    if have.shape != want.shape:
        return _("expected shape {expected}, got shape {got}").format(
            expected=tuple(want.shape), got=tuple(have.shape))
    if want.dtype == torch.float64 and have.is_floating_point() and have.dtype != torch.float64:
        return _("expected dtype float64 (the precision of the inputs), got {dtype}").format(
            dtype=have.dtype)
    have, want = have.cpu().double(), want.cpu().double()
    if torch.allclose(have, want, atol=atol, rtol=rtol, equal_nan=True):
        return None
    nan = have.isnan() & ~want.isnan()
    if nan.any():
        first = tuple(int(i) for i in nan.nonzero()[0])
        return _("the result holds NaN at {count} of {total} places (the first at index {index}, "
                 "where {expected} was expected)").format(
            count=int(nan.sum()), total=want.numel(), index=first,
            expected=f"{want[first].item():.6g}")
    return _differences(have, want, atol, rtol, where)


def _close(a, b, atol: float, rtol: float) -> bool:
    """Whether two results hold the same values (tuples element by element), whatever their
    dtypes: equal infinities and NaN where NaN count as equal."""
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list))
                and len(a) == len(b) and all(_close(x, y, atol, rtol) for x, y in zip(a, b)))
    if isinstance(a, torch.nn.Module) or isinstance(b, torch.nn.Module):
        return _same_module(a, b, atol, rtol)
    x, y = _as_tensor(a), _as_tensor(b)
    if x is None or y is None:
        return a is b
    if x.shape != y.shape:
        return False
    if x.dtype == torch.bool or y.dtype == torch.bool:
        x, y = x.to(torch.int64), y.to(torch.int64)
    return bool(torch.allclose(x.cpu().double(), y.cpu().double(), atol=atol, rtol=rtol,
                               equal_nan=True))


def _same_module(a, b, atol: float, rtol: float) -> bool:
    """Whether two modules are alike: same class, same settings (their attributes that are plain
    numbers, strings or None) and the same parameters and buffers."""
    if type(a) is not type(b):
        return False
    plain = (bool, int, float, str, type(None))
    settings = [{k: v for k, v in vars(m).items() if isinstance(v, plain) and k != "training"}
                for m in (a, b)]
    states = [m.state_dict() for m in (a, b)]
    return (settings[0] == settings[1] and states[0].keys() == states[1].keys()
            and all(_close(states[0][k], states[1][k], atol, rtol) for k in states[0]))


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


def _hooks(module: torch.nn.Module) -> dict[str, int]:
    """How many hooks each submodule holds (forward, pre-forward and backward), by name."""
    kinds = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
             "_backward_pre_hooks")
    return {name: sum(len(getattr(m, kind, {})) for kind in kinds)
            for name, m in module.named_modules()}


def _change(before, after) -> str | None:
    """What a function changed in an input argument (a tensor, an array, a module's parameters,
    buffers, hooks or mode), in a few words; None if nothing."""
    if isinstance(before, torch.nn.Module) and isinstance(after, torch.nn.Module):
        was, now = before.state_dict(), after.state_dict()
        changed = [k for k in was if k not in now or not _same(was[k], now[k])]
        if changed or was.keys() != now.keys():
            return _("its {names}").format(
                names=", ".join((changed or sorted(set(now) - set(was)))[:3]))
        left = [name or _("itself") for name, n in _hooks(after).items()
                if n > _hooks(before).get(name, 0)]
        if left:
            return _("a hook left on {name}").format(name=left[0])
        if before.training != after.training:
            return (_("its mode (training now)") if after.training
                    else _("its mode (evaluation now)"))
        return None
    return None if _same(before, after) else _("its values")


def _changed_inputs(args, learner_args, names) -> str | None:
    """The inputs a function changed and how, e.g. "attention (its W_o.weight)"; None if none."""
    found = []
    for i, (before, after) in enumerate(zip(args, learner_args)):
        what = _change(before, after)
        if what is not None:
            name = names[i] if names else _("argument {i}").format(i=i)
            found.append(f"{name} ({what})")
    return ", ".join(found) or None


# Recognising a mistake ---------------------------------------------------------------------------

class _Outcome:
    """What a function did on one case: its result (or the exception it raised), and what the
    check compares (the result itself, or the result passed through ``compare_through``; or the
    exception that raised)."""

    def __init__(self, result=None, error=None, seen=None, seen_error=None):
        self.result, self.error, self.seen, self.seen_error = result, error, seen, seen_error

    @classmethod
    def of(cls, result, args, through) -> _Outcome:
        """The outcome of a function that returned ``result`` on the case ``args``."""
        if through is None:
            return cls(result, seen=result)
        try:
            return cls(result, seen=through(result, *copy.deepcopy(args)))
        except Exception as error:
            return cls(result, seen_error=error)

    @classmethod
    def run(cls, fn, args, through) -> _Outcome:
        """The outcome of ``fn`` on the case ``args``."""
        try:
            result = fn(*copy.deepcopy(args))
        except Exception as error:
            return cls(error=error)
        return cls.of(result, args, through)


def _quietly(run: Callable):
    """``run()`` with what it prints and warns left out (the learner saw it on the failing case)."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run()


class _Diagnosis:
    """Which mistake of a catalogue explains the learner's results, comparing them case by case
    with what each mistake gives, the failing case first (the learner's function and the
    reference are called at most once per case, and only as far as needed).

    A wrong reference explains the results when, on every case where both return something, the
    learner's function gives what it gives (compared as the check compares: through
    ``compare_through``, or as they are when that raises for both), and on at least one case that
    is not the expected result. Where only the learner's function raises, it does not make that
    mistake alone; where the wrong reference raises, the case neither confirms nor contradicts.
    """

    def __init__(self, learner_fn, cases, reference, compare_through, atol, rtol, failing,
                 known):
        self.learner_fn, self.cases, self.reference = learner_fn, cases, reference
        self.through = None if compare_through is None else compare_through[1]
        self.atol, self.rtol = atol, rtol
        # the failing case first: it rules out most mistakes at once
        self.order = [failing] + [j for j in range(len(cases)) if j != failing]
        self.learner = dict(known)  # case index -> _Outcome of the learner's function
        self.expected = {}

    def _learner(self, j) -> _Outcome:
        if j not in self.learner:
            self.learner[j] = _quietly(lambda: _Outcome.run(self.learner_fn, self.cases[j][1],
                                                            self.through))
        return self.learner[j]

    def _expected(self, j) -> _Outcome:
        if j not in self.expected:
            self.expected[j] = _Outcome.run(self.reference, self.cases[j][1], self.through)
        return self.expected[j]

    def _fails(self, j) -> bool:
        """Whether the learner's function fails case j (raises, or gives other values)."""
        have, want = self._learner(j), self._expected(j)
        if have.error is not None or have.seen_error is not None:
            return True
        return not _close(have.seen, want.seen, self.atol, self.rtol)

    def _agree(self, have: _Outcome, wrong: _Outcome) -> bool | None:
        """Whether the learner's function and a wrong reference gave the same on a case: not if
        only the learner's function raised (a function making that mistake returns there); None
        if the wrong reference raised (nothing to compare: a learner's code may be more general
        than the check's version of the mistake)."""
        if wrong.error is not None:
            return None
        if have.error is not None:
            return False
        if have.seen_error is None and wrong.seen_error is None:
            return _close(have.seen, wrong.seen, self.atol, self.rtol)
        if have.seen_error is not None and wrong.seen_error is not None:
            return _close(have.result, wrong.result, self.atol, self.rtol)  # compare as they are
        return False

    def explains(self, mistake) -> bool:
        if isinstance(mistake, Symptom):
            return self._shows(mistake)
        variants = mistake if isinstance(mistake, (tuple, list)) else (mistake,)
        return any(self._shows(v) if isinstance(v, Symptom) else self._gives(v) for v in variants)

    def _gives(self, wrong: Callable) -> bool:
        """Whether the learner's function gives what ``wrong`` gives on every case where both
        return something, and on at least one case where that is not the expected result."""
        evidence = False
        for j in self.order:
            agree = self._agree(self._learner(j), _quietly(
                lambda: _Outcome.run(wrong, self.cases[j][1], self.through)))
            if agree is False:
                return False
            evidence = evidence or (agree and self._fails(j))
        return evidence

    def _shows(self, symptom: Symptom) -> bool:
        """Whether the symptom holds on every case the learner's function fails (at least one)."""
        failed = False
        for j in self.order:
            if not self._fails(j):
                continue
            failed = True
            have = self._learner(j)
            result = have.result if have.error is None else have.error
            try:
                shown = bool(_quietly(lambda: symptom.predicate(result,
                                                                *copy.deepcopy(self.cases[j][1]))))
            except Exception:
                shown = False
            if not shown:
                return False
        return failed


    def generic(self) -> str | None:
        """A sentence for what the learner's results have in common with the expected ones, the
        same on every failing case (see :data:`_GENERIC`), or None."""
        for recognise in _GENERIC:
            found = []
            for j in self.order:
                if not self._fails(j):
                    continue
                have = self._learner(j)
                text = None if have.error is not None else _generic_on(
                    recognise, have.result, self._expected(j).result, self.atol, self.rtol)
                if text is None:
                    found = []
                    break
                found.append(text)
            strong = [f for f in found if not isinstance(f, _Alike)]
            if strong and all(f.fits(strong[0]) for f in found if isinstance(f, _Alike)):
                text = strong[0]
                return text if isinstance(found[0], _Alike) else found[0]  # the failing case's
        return None


class _Measured(str):
    """A sentence about a result, with the number it measured (a factor, an offset)."""

    def __new__(cls, text: str, value: float):
        measured = super().__new__(cls, text)
        measured.value = value
        return measured


class _Alike(str):
    """What one number (a result of a single value) shares with the expected one, e.g. a factor:
    it says something only when the same holds where the result has several values."""

    def __new__(cls, text: str, value: float):
        alike = super().__new__(cls, text)
        alike.value = value
        return alike

    def fits(self, strong: str) -> bool:
        return math.isclose(self.value, getattr(strong, "value", math.nan), rel_tol=1e-3)


# What a result shares with the expected one: mistakes of any exercise ----------------------------

def _tensors(got, expected):
    """got and expected as float64 tensors (None if either is no tensor, array or number)."""
    have, want = _as_tensor(got), _as_tensor(expected)
    if have is None or want is None or have.dtype == torch.bool or want.dtype == torch.bool:
        return None
    return have.cpu().double(), want.cpu().double()


def _reshaped(got, expected, atol, rtol) -> str | None:
    pair = _tensors(got, expected)
    if pair is None or pair[0].shape == pair[1].shape or pair[0].numel() != pair[1].numel():
        return None
    have, want = pair
    if not torch.allclose(have.reshape(want.shape), want, atol=atol, rtol=rtol, equal_nan=True):
        return None
    return _("Your result holds the expected values, in the shape {got} instead of {expected}: an "
             "axis too many, too few, or flattened?").format(got=tuple(have.shape),
                                                             expected=tuple(want.shape))


def _swapped(got, expected, atol, rtol) -> str | None:
    pair = _tensors(got, expected)
    if pair is None or pair[1].dim() < 2 or pair[1].shape[-1] == pair[1].shape[-2] == 1:
        return None
    have, want = pair
    if have.shape != want.transpose(-2, -1).shape or (
            have.shape == want.shape and torch.allclose(have, want, atol=atol, rtol=rtol,
                                                        equal_nan=True)):
        return None
    if not torch.allclose(have, want.transpose(-2, -1), atol=atol, rtol=rtol, equal_nan=True):
        return None
    return _("Your result is the expected one with its last two axes swapped (transposed).")


def _contained(got, expected, atol, rtol) -> str | None:
    if isinstance(got, (torch.Tensor, np.ndarray)) or not isinstance(got, (list, tuple)):
        return None
    try:
        values = torch.as_tensor(got)
    except Exception:
        return None
    if not _close(values, expected, atol, rtol):
        return None
    text = (_("Your result holds the expected values, as a {kind}: return a tensor.")
            if isinstance(expected, torch.Tensor)
            else _("Your result holds the expected values, as a {kind}: return an array."))
    return text.format(kind=type(got).__name__)


def _scaled(got, expected, atol, rtol) -> str | None:
    pair = _tensors(got, expected)
    if pair is None or pair[0].shape != pair[1].shape:
        return None
    have, want = pair
    finite = torch.isfinite(want) & torch.isfinite(have)
    if not torch.equal(finite, torch.isfinite(want)) or not bool((want[finite] != 0).any()):
        return None
    factor = float((have[finite] * want[finite]).sum() / (want[finite] ** 2).sum())
    if not math.isfinite(factor) or abs(factor) < 1e-6 or math.isclose(factor, 1, rel_tol=1e-3):
        return None
    if not torch.allclose(have[finite], factor * want[finite], atol=atol, rtol=rtol):
        return None
    text = _("Your result is the expected one times a constant ({factor} here): a factor too many "
             "or too few, or a sum where a mean is expected (or the reverse)?").format(
        factor=f"{factor:.4g}")
    # one number is always some factor times another: that says something only with more values
    return _Alike(text, factor) if want.numel() == 1 else _Measured(text, factor)


def _shifted(got, expected, atol, rtol) -> str | None:
    pair = _tensors(got, expected)
    if pair is None or pair[0].shape != pair[1].shape:
        return None
    have, want = pair
    finite = torch.isfinite(want) & torch.isfinite(have)
    if not torch.equal(finite, torch.isfinite(want)) or not bool(finite.any()):
        return None
    offset = float((have[finite] - want[finite]).mean())
    if abs(offset) <= atol or not torch.allclose(have[finite], want[finite] + offset, atol=atol,
                                                 rtol=rtol):
        return None
    text = _("Your result is the expected one plus a constant ({offset} here): a term too many or "
             "too few?").format(offset=f"{offset:.4g}")
    return _Alike(text, offset) if want.numel() == 1 else _Measured(text, offset)


def _permuted(got, expected, atol, rtol) -> str | None:
    if (not isinstance(expected, tuple) or not isinstance(got, (tuple, list))
            or len(got) != len(expected) or len(got) > 6):
        return None
    for order in itertools.permutations(range(len(got))):
        if list(order) != list(range(len(got))) and all(
                _close(got[i], expected[j], atol, rtol) for j, i in enumerate(order)):
            places = ", ".join(_("result {j} at place {i}").format(j=j, i=i)
                               for j, i in enumerate(order) if i != j)
            return _("Your results are the expected ones in another order ({places}).").format(
                places=places)
    return None


_GENERIC = (_permuted, _contained, _reshaped, _swapped, _scaled, _shifted)  # in this order


def _generic_on(recognise, got, expected, atol, rtol) -> str | None:
    """``recognise`` applied to a result, or to the one part of a tuple that differs."""
    try:
        return _generic_or_part(recognise, got, expected, atol, rtol)
    except Exception:  # a result too odd to compare: nothing in common
        return None


def _generic_or_part(recognise, got, expected, atol, rtol) -> str | None:
    text = recognise(got, expected, atol, rtol)
    if text is not None or recognise is _permuted or not isinstance(expected, tuple):
        return text
    if not isinstance(got, (tuple, list)) or len(got) != len(expected):
        return None
    differing = [i for i, (g, e) in enumerate(zip(got, expected)) if not _close(g, e, atol, rtol)]
    if len(differing) != 1:
        return None
    text = recognise(got[differing[0]], expected[differing[0]], atol, rtol)
    if text is None:
        return None
    part = _("Result {i}: ").format(i=differing[0]) + text[0].lower() + text[1:]
    return type(text)(part, text.value) if hasattr(text, "value") else part


def _diagnose(mistakes, learner_fn, cases, reference, compare_through, atol, rtol, failing,
              known) -> str | None:
    """The first sentence of ``mistakes`` whose mistake explains the learner's results; else what
    its results have in common with the expected ones, if anything (see :data:`_GENERIC`); else
    None."""
    diagnosis = _Diagnosis(learner_fn, cases, reference, compare_through, atol, rtol, failing,
                           known)
    for sentence, mistake in (mistakes or {}).items():
        if diagnosis.explains(mistake):
            return sentence
    return diagnosis.generic()


# Messages ----------------------------------------------------------------------------------------

def _wrap(text: str, indent: str = "") -> str:
    """Each line of ``text`` wrapped to the width of a message (continuations indented), never
    inside a short parenthesis such as an index or a shape, (0, 1) or (B, h, T, d_k). Chinese
    lines break between characters too, and count each character as two columns."""
    glued = re.sub(r"\([^()\s][^()]{0,22}\)|\[[^\[\]\s][^\[\]]{0,22}\]",
                   lambda m: m[0].replace(" ", "\0"), text)
    return "\n".join((_fill_wide(line, indent) if _WIDE.search(line) else
                      textwrap.fill(line, _WIDTH, subsequent_indent=indent,
                                    break_long_words=False, break_on_hyphens=False)) or line
                     for line in glued.split("\n")).replace("\0", " ")


_WIDE = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]")
_PIECES = re.compile(r"\s+|[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]|"
                     r"[^\s\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]+")
_NO_BREAK_BEFORE = set("，。、；：！？）》」』】”’")
_NO_BREAK_AFTER = set("（《「『【“‘")


def _columns(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _fill_wide(line: str, indent: str) -> str:
    """One line of Chinese (with English words, numbers and code in it) filled to the width of a
    message: a break falls between two characters or at a space, never before closing
    punctuation (the character before it goes to the next line with it), never inside a word."""
    lines, current, space, starts = [], "", "", []  # starts: where each piece of current begins
    for piece in _PIECES.findall(line):
        if piece.isspace():
            space = piece if current.strip() else ""
            if not current:  # the line's own indentation
                current = piece
            continue
        if current.strip() and _columns(current + space + piece) > _WIDTH:
            if piece not in _NO_BREAK_BEFORE:
                if current.rstrip()[-1:] in _NO_BREAK_AFTER and len(starts) > 1:
                    # an opening bracket goes down with what it opens
                    lines.append(current[:starts[-1]].rstrip())
                    current, starts = indent + current[starts[-1]:].rstrip(), [len(indent)]
                    space = " " if not _WIDE.search(piece) and not _WIDE.search(current[-1:]) else ""
                else:
                    lines.append(current)
                    current, space, starts = indent, "", []
            else:  # the last piece that is no closing punctuation goes down with it
                carried = len(starts) - 1
                while carried > 0 and current[starts[carried]:].lstrip()[:1] in _NO_BREAK_BEFORE:
                    carried -= 1
                if carried > 0:
                    lines.append(current[:starts[carried]].rstrip())
                    current, space = indent + current[starts[carried]:], ""
                    starts = [len(indent) + s - starts[carried] for s in starts[carried:]]
        starts.append(len(current + space))
        current, space = current + space + piece, ""
    lines.append(current)
    return "\n".join(lines)


def _hints_text(hints: Sequence[str], hint: int, verbose: bool = True) -> str:
    """The first ``hint`` steps of ``hints`` (the last of several, the answer, says so), how to ask
    for the next one and, unless ``verbose``, how to see the values in full; each on lines of its
    own."""
    last = len(hints) - 1 if len(hints) > 1 else None  # the step that may give the answer
    shown = [_("Hint: {text}").format(text=_(hints[0]))] if hint >= 1 and hints else []
    shown += [(_("Hint {step} (the answer): {text}") if step == last else
               _("Hint {step}: {text}")).format(step=step + 1, text=_(text))
              for step, text in enumerate(hints[1:hint], start=1)]
    if hint < len(hints):
        wanted = (_("(For the answer, run the check again with hint={hint}") if hint == last else
                  _("(For a more specific hint, run the check again with hint={hint}") if shown
                  else _("(For a hint, run the check again with hint={hint}"))
        shown.append(wanted.format(hint=max(hint, 0) + 1)
                     + (_(".)") if verbose else _("; for the values in full, verbose=True.)")))
    elif not verbose:
        shown.append(_("(For the values in full, run the check again with verbose=True.)"))
    return "".join("\n" + _wrap(part) for part in shown)


def _message(diagnosis, head, args, names, expected, got, hints, hint, verbose,
             tolerance=(0.0, 0.0)) -> str:
    """A failure's message: the diagnosis, what failed, the input, the results, the hints."""
    lines = [_wrap(diagnosis)] if diagnosis else []
    lines.append(_wrap(head))
    labels = _labels()
    if verbose:
        lines.append(f"{labels['input']}{_describe(args)}")
        if expected is not None:
            lines += [f"{labels['expected']}{_describe(expected)}",
                      f"{labels['got']}{_describe(got)}"]
    else:
        lines.append(_wrap(labels["input"] + _briefs(list(args), names, 2 * _VALUES_WIDTH),
                           " " * _columns(labels["input"])))
        if expected is not None:
            label, got, expected = _differing_part(got, expected, *tolerance)
            room = _VALUES_WIDTH - _columns(label)
            # where they differ most, the same positions on both lines
            windows = [_window(value, got, expected, room) for value in (expected, got)]
            most = min([w[1] for w in windows if w is not None], default=6)
            for what, value in (("expected", expected), ("got", got)):
                shown = _around_worst(value, got, expected, room, most) or _brief(value, room)
                lines.append(f"{labels[what]}{label}{shown}")
    return "\n".join(lines) + _hints_text(hints, hint, verbose)


def _labels() -> dict[str, str]:
    """The labels of a failure's input and results, "  input:    " and so on, padded alike."""
    words = {"input": _("input:"), "expected": _("expected:"), "got": _("got:")}
    # a full-width colon carries its own space (输入：tensor), an ASCII one needs one (input: tensor)
    width = max(map(_columns, words.values())) + (
        0 if all(word.endswith("：") for word in words.values()) else 1)
    return {key: "  " + word + " " * (width - _columns(word)) for key, word in words.items()}


# Running a check ---------------------------------------------------------------------------------

def run_check(name: str, learner_fn: Callable, cases: Sequence[tuple[str, tuple]],
              reference: Callable, hints: str | Sequence[str] = (), hint: int = 1,
              compare_through: tuple[str, Callable] | None = None,
              atol: float = 1e-5, rtol: float = 1e-4,
              mistakes: Mapping[str, Callable | Symptom | Sequence] | None = None,
              verbose: bool = False) -> None:
    """Run ``learner_fn`` on every case and compare with ``reference`` (both called with the same
    arguments); print one line on success.

    cases: (description, args) pairs. Results may be tensors, NumPy arrays, numbers, or tuples
    of them. hints: the steps of the hint, from a nudge to the full explanation (a string is
    one step); a failure shows the first ``hint`` of them (0: none) and says how to see more.
    compare_through: (what, fn) for results judged by what they do (valid lengths by the
    weights they give, a layer by its outputs): ``fn(result, *args)`` is compared instead of
    the results themselves, and ``what`` (e.g. "applied to the inputs") says how the result
    was used; the message still shows the results themselves.

    mistakes: the classic mistakes of the exercise, each a sentence that names it (in plain
    words, without the solution's code) mapped to what recognises it: a wrong reference (a
    function called like ``reference`` that returns what a function making that mistake
    returns), a :class:`Symptom`, or a tuple of them (variants of one mistake). When the
    learner's function fails, the first mistake that explains its results on every case (see
    :class:`_Diagnosis`) leads the message, in its own sentence; when none does, the message
    starts with what failed.

    verbose: show the input and the results in full instead of summarised.

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
        _run_cases(name, learner_fn, cases, reference, hints, hint, compare_through, atol, rtol,
                   dict(mistakes or {}), bool(verbose))
    print(_("Correct: {name} passed all {count} checks.").format(name=name, count=len(cases)))


def _run_cases(name, learner_fn, cases, reference, hints, hint, compare_through, atol, rtol,
               mistakes, verbose):
    warned = {}  # (category, message) -> text, each warning shown once
    known = {}  # case index -> the learner's _Outcome, for the diagnosis

    def fail(head, args, expected, got, index, learner_error=None, diagnosis=None):
        try:
            diagnosis = diagnosis or _quietly(lambda: _diagnose(
                mistakes, learner_fn, cases, reference, compare_through, atol, rtol, index, known))
        except Exception:  # recognising a mistake must never hide the failure itself
            diagnosis = None
        diagnosis = _(diagnosis) if diagnosis else diagnosis  # a mistake's sentence, translated
        names = _argument_names(reference, len(args))
        message = _message(diagnosis, head, args, names, expected, got, hints, hint, verbose,
                           (atol, rtol))
        details = _message(diagnosis, head, args, names, expected, got, hints, hint, True)
        error = ExerciseCheckFailed(message, learner_error, diagnosis=diagnosis, details=details)
        if learner_error is not None:
            raise error from learner_error
        raise error

    try:
        for index, (description, args) in enumerate(cases):
            description = _(description)
            expected = reference(*copy.deepcopy(args))
            learner_args = copy.deepcopy(args)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    got = learner_fn(*learner_args)
                except Exception as error:
                    if _is_stub(error):
                        raise ExerciseCheckFailed(_(
                            "{name}: not implemented yet: write the function, then run this check "
                            "again.").format(name=name)) from None
                    text = f"{type(error).__name__}: {error}"
                    if not verbose and (text.count("\n") or len(text) > 3 * _WIDTH):
                        text = text.split("\n")[0][:3 * _WIDTH - 5] + " ..."
                    known[index] = _Outcome(error=error)
                    fail(_("{name} raised {error}\n  on input {description}").format(
                        name=name, error=text, description=description), args, None, None,
                         index, learner_error=error)
            for warning in caught:
                key = (warning.category.__name__, str(warning.message))
                warned.setdefault(key, f"{key[0]}: {key[1]}")
            changed = _changed_inputs(args, learner_args, _argument_names(reference, len(args)))
            problem = _problem(got, expected, args, compare_through, atol, rtol)
            if changed is not None:  # whatever its result, it is told so, and nothing else
                right = _("; its result itself is right") if problem is None else ""
                fail(_("{name} changed its input in place on input {description}: {changed}"
                       "{right}.").format(name=name, description=description, changed=changed,
                                          right=right),
                     args, None if right else expected, got, index,
                     diagnosis=_(_CHANGED).format(changed=changed))
            if problem is not None:
                known[index] = _Outcome.of(got, args, None if compare_through is None
                                           else compare_through[1])
                fail(_("{name} is not right yet on input {description}: {problem}.").format(
                    name=name, description=description, problem=problem), args, expected, got,
                     index)
    finally:
        for text in warned.values():
            print(_("Your function warned: {warning}").format(warning=text))


_CHANGED = N_("Your function changed what it was given, {changed}, and left it changed: leave its "
              "inputs as they were (undo each change, e.g. restore a weight and remove a hook, or "
              "work on a copy).")


def _is_stub(error: BaseException) -> bool:
    """Whether ``error`` is the stub of a student copy speaking: ``NotWrittenYet`` (recognised by
    its mark, since the private copy of d2lhelpers of :func:`check_afresh` has a class of its own),
    or nbgrader's usual ``raise NotImplementedError()``, without a message."""
    return isinstance(error, NotImplementedError) and (
        getattr(type(error), "exercise_stub", False) is True
        or (type(error) is NotImplementedError and not error.args))


def _problem(got, expected, args, compare_through, atol, rtol) -> str | None:
    """What is wrong with the learner's result ``got``, or None."""
    if compare_through is None:
        return _compare(got, expected, atol, rtol)
    what, through = compare_through
    what = _(what)
    try:
        have = through(got, *copy.deepcopy(args))
    except Exception as error:
        return _("what it returned raised {error} when {what}: {message}").format(
            error=type(error).__name__, what=what, message=error)
    want = through(expected, *copy.deepcopy(args))
    if _compare(have, want, atol, rtol) is None:
        return None
    # where the results themselves differ, when they can be compared (lengths, a mask): the
    # indices then point into what the message shows as expected and got
    direct = _compare(got, expected, atol, rtol)
    if (direct is not None and _as_tensor(got) is not None and _as_tensor(expected) is not None
            and isinstance(direct, _ValuesDiffer)):
        return _("{problem} (and {what}, it gives other results)").format(problem=direct,
                                                                           what=what)
    problem = _compare(have, want, atol, rtol, where=_(" in what it gives"))
    return _("what it returned, {what}, does not give the expected result: {problem}").format(
        what=what, problem=problem)


def exercise_check(check: Callable) -> Callable:
    """A check, ``check(fn, seed=0, hint=1, *, verbose=False)``, that also takes
    ``model_answer=True``: the teaching notebook's model answer is checked as usual (a failure
    raises as usual), but what the check prints is replaced by the one line :data:`MODEL_ANSWER`,
    which says that the model answer passes, not that the reader did."""
    @functools.wraps(check)
    def checked(fn, seed: int = 0, hint: int = 1, *, verbose: bool = False,
                model_answer: bool = False) -> None:
        if not model_answer:
            return check(fn, seed, hint, verbose=verbose)
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                check(fn, seed, hint, verbose=verbose)
        except BaseException:
            sys.stdout.write(printed.getvalue())
            raise
        print(_(MODEL_ANSWER).format(check=check.__name__))

    checked.__signature__ = inspect.signature(checked, follow_wrapped=False)  # model_answer too
    return checked


def check_afresh(check: str, learner_fn: Callable, seed: int = 1, quiet: bool = True) -> None:
    """Run the check named ``check`` (e.g. "check_loo_error") on ``learner_fn`` with a private
    copy of d2lhelpers, loaded afresh from the files of the package this module belongs to.

    quiet: print nothing when the function passes, since the visible check of the same cell has
    printed its "Correct" line already (and any warnings of the learner's function); on a failure,
    what the check printed comes out before its error.

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
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed if quiet else sys.stdout):
                getattr(checks, check)(learner_fn, seed=seed)
        except BaseException:
            sys.stdout.write(printed.getvalue())
            raise
    finally:
        for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[module]
