"""Exercises: automatic checks with helpful messages, and student copies of the notebooks.

In a notebook, a coding exercise is a function the learner writes, with the solution between
nbgrader's markers, followed by a check cell::

    def masked_softmax_from_scratch(scores, valid_lens):
        ### BEGIN SOLUTION
        ...
        ### END SOLUTION

    d2lh.exercises.check_masked_softmax(masked_softmax_from_scratch)

A check runs the learner's function on several inputs (random shapes and edge cases), compares the
result with the package's reference, and on failure says which input failed, what was expected, what
came back, and gives a hint; on success it prints one line. It raises :class:`ExerciseCheckFailed`, an
``AssertionError``, so nbgrader counts a failed check as a failed test.

Student copies (solutions replaced by a stub, hidden tests removed, outputs cleared)::

    python -m d2lhelpers.exercises notebooks/03_attention_scoring.ipynb --out student/
    python -m d2lhelpers.exercises notebooks/*.ipynb --out student/ --answer-key answers/
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = [
    "ExerciseCheckFailed",
    "run_check",
    "BEGIN_SOLUTION", "END_SOLUTION", "BEGIN_HIDDEN_TESTS", "END_HIDDEN_TESTS",
    "student_source",
    "student_notebook",
    "write_copies",
]

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
ANSWER_STUB = "YOUR ANSWER HERE"


class ExerciseCheckFailed(AssertionError):
    """A learner's function gave a wrong answer (the message says where and why)."""


# ---------------------------------------------------------------------------------------------
# Checks


def _describe(value) -> str:
    """A short, readable description of an input or output, with shapes for tensors."""
    import torch

    if isinstance(value, torch.Tensor):
        text = f"tensor of shape {tuple(value.shape)}, dtype {value.dtype}"
        if value.numel() <= 24:
            text += f":\n{value.detach().cpu().numpy().round(4)}"
        return text
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_describe(v) for v in value) + ")"
    return repr(value)


def _compare_tensors(got, expected, atol: float, rtol: float) -> str | None:
    """None if ``got`` matches ``expected``; otherwise what differs."""
    import torch

    if not isinstance(got, torch.Tensor):
        return f"expected a tensor, got {type(got).__name__}"
    if got.shape != expected.shape:
        return f"expected shape {tuple(expected.shape)}, got shape {tuple(got.shape)}"
    if not torch.isfinite(got).all() and torch.isfinite(expected).all():
        return "the result holds NaN or infinite values"
    if not torch.allclose(got.to(expected.dtype), expected, atol=atol, rtol=rtol, equal_nan=True):
        worst = (got.to(expected.dtype) - expected).abs().flatten().argmax().item()
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), expected.shape))
        return (f"values differ: at index {index} expected {expected[index].item():.6g}, "
                f"got {got[index].item():.6g}")
    return None


def run_check(name: str, learner_fn: Callable, cases: Sequence[tuple[str, tuple]],
              reference: Callable, hint: str = "", atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Run ``learner_fn`` on every case and compare with ``reference`` (both called with the same
    arguments). ``cases``: (description, args) pairs. Raises :class:`ExerciseCheckFailed` with the
    failing input, the expected and the returned value and ``hint``; prints one line on success.
    Also fails if the learner's function modifies its inputs."""
    import torch

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
        problem = _compare_tensors(got, expected, atol, rtol)
        if problem is None:
            changed = [i for i, (a, b) in enumerate(zip(args, learner_args))
                       if isinstance(a, torch.Tensor) and not torch.equal(a, b)]
            if changed:
                problem = f"the function modified its input argument(s) {changed} in place"
        if problem is not None:
            raise ExerciseCheckFailed(
                f"{name} is not right yet on input {description}: {problem}.\n"
                f"  input:    {_describe(args)}\n  expected: {_describe(expected)}\n"
                f"  got:      {_describe(got)}\nHint: {hint}")
    print(f"Correct: {name} passed all {len(cases)} checks.")


# ---------------------------------------------------------------------------------------------
# Student copies

_REGION = re.compile(r"^([ \t]*)### BEGIN SOLUTION[^\n]*\n.*?^[ \t]*### END SOLUTION[^\n]*$",
                     re.MULTILINE | re.DOTALL)
_HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?",
                     re.MULTILINE | re.DOTALL)


def student_source(source: str, cell_type: str = "code") -> str:
    """A cell's source with each solution replaced by a stub and hidden tests removed.

    In a code cell the stub raises NotImplementedError, indented like the solution it replaces; in
    a markdown cell (a model answer to a question) it is the line "YOUR ANSWER HERE", as in nbgrader.
    """
    for marker, name in ((BEGIN_SOLUTION, END_SOLUTION), (BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS)):
        if source.count(marker) != source.count(name):
            raise ValueError(f"unbalanced markers: {source.count(marker)} {marker!r} but "
                             f"{source.count(name)} {name!r} in cell:\n{source}")
    stub = STUB if cell_type == "code" else ANSWER_STUB
    source = _REGION.sub(lambda m: "\n".join(m.group(1) + line for line in stub.splitlines()), source)
    return _HIDDEN.sub("", source).rstrip("\n")


def student_notebook(notebook: dict, keep_solutions: bool = False) -> dict:
    """A copy of a notebook (nbformat JSON as a dict) for students: outputs and execution counts
    cleared, and unless ``keep_solutions`` (an answer key), solutions (code, and model answers in
    markdown) stubbed and hidden tests removed."""
    notebook = copy.deepcopy(notebook)
    for cell in notebook["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if not keep_solutions and cell["cell_type"] in ("code", "markdown"):
            cell["source"] = student_source(source, cell["cell_type"])
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return notebook


def write_copies(paths: Sequence[Path], out_dir: Path, answer_key_dir: Path | None = None) -> list[Path]:
    """Write a student copy (and optionally an answer key) of each notebook; return the paths."""
    written = []
    for path in map(Path, paths):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        if not any(BEGIN_SOLUTION in "".join(c["source"]) for c in notebook["cells"]
                   if c["cell_type"] == "code"):
            raise ValueError(f"{path} has no exercise solution ({BEGIN_SOLUTION!r}) to remove")
        targets = [(out_dir, False)] + ([(answer_key_dir, True)] if answer_key_dir else [])
        for directory, keep in targets:
            directory.mkdir(parents=True, exist_ok=True)
            target = directory / path.name
            target.write_text(json.dumps(student_notebook(notebook, keep), indent=1,
                                         ensure_ascii=False) + "\n", encoding="utf-8")
            written.append(target)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m d2lhelpers.exercises",
        description="Write student copies of notebooks: solutions replaced by a stub that raises "
                    "NotImplementedError, hidden tests removed, outputs cleared.")
    parser.add_argument("notebooks", nargs="+", type=Path, help="source notebooks")
    parser.add_argument("--out", type=Path, default=Path("student"), help="folder for the copies")
    parser.add_argument("--answer-key", type=Path, default=None,
                        help="also write copies that keep the solutions (outputs cleared) here")
    args = parser.parse_args(argv)
    for path in write_copies(args.notebooks, args.out, args.answer_key):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
