"""Authoring the course's exercises: student copies of the notebooks and nbgrader metadata.

In a source notebook, a coding exercise's solution sits between nbgrader's markers, and the
hidden tests of its check cell between the hidden-test markers::

    def multiplicative_scores(queries, keys, W):
        ### BEGIN SOLUTION
        ...
        ### END SOLUTION

    d2lh.exercises.check_multiplicative_scores(multiplicative_scores)
    ### BEGIN HIDDEN TESTS
    d2lh.exercises.check_multiplicative_scores(multiplicative_scores, seed=1)
    ### END HIDDEN TESTS

Student copies replace each solution by a stub (code) or "YOUR ANSWER HERE" (a model answer in
markdown), remove hidden tests and clear outputs; the nbgrader cell metadata is derived from the
same markers. Plain Python and JSON: this package imports neither torch nor ``d2lhelpers``, so the
command starts at once::

    python -m exercise_authoring notebooks/*.ipynb --out student/ --answer-key answers/
    python -m exercise_authoring notebooks/*.ipynb --nbgrader-metadata
"""

from __future__ import annotations

import argparse
import copy
import json
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "BEGIN_SOLUTION", "END_SOLUTION", "BEGIN_HIDDEN_TESTS", "END_HIDDEN_TESTS", "STUB",
    "ANSWER_STUB", "student_source", "student_notebook", "write_copies", "nbgrader_role",
    "with_nbgrader_metadata", "apply_nbgrader_metadata", "main",
]

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN_TESTS, END_HIDDEN_TESTS = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
ANSWER_STUB = "YOUR ANSWER HERE"

# ---------------------------------------------------------------------------------------------
# Student copies

_REGION = re.compile(r"^([ \t]*)### BEGIN SOLUTION[^\n]*\n.*?^[ \t]*### END SOLUTION[^\n]*$",
                     re.MULTILINE | re.DOTALL)
_HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?",
                     re.MULTILINE | re.DOTALL)


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


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
        if not keep_solutions and cell["cell_type"] in ("code", "markdown"):
            cell["source"] = student_source(_source(cell), cell["cell_type"])
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    return notebook


def write_copies(paths: Sequence[Path], out_dir: Path, answer_key_dir: Path | None = None) -> list[Path]:
    """Write a student copy (and optionally an answer key) of each notebook; return the paths."""
    written = []
    for path in map(Path, paths):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        if not any(BEGIN_SOLUTION in _source(c) for c in notebook["cells"] if c["cell_type"] == "code"):
            raise ValueError(f"{path} has no exercise solution ({BEGIN_SOLUTION!r}) to remove")
        targets = [(out_dir, False)] + ([(answer_key_dir, True)] if answer_key_dir else [])
        for directory, keep in targets:
            directory.mkdir(parents=True, exist_ok=True)
            target = directory / path.name
            target.write_text(json.dumps(student_notebook(notebook, keep), indent=1,
                                         ensure_ascii=False) + "\n", encoding="utf-8")
            written.append(target)
    return written


# ---------------------------------------------------------------------------------------------
# nbgrader cell metadata, derived from the markers (schema version 3, that of nbgrader 0.9)

NBGRADER_SCHEMA_VERSION = 3
_CHECK_CALL = re.compile(r"\bexercises\.(check_\w+)\(")
_DEFINITION = re.compile(r"^(?:def|class)\s+(\w+)", re.MULTILINE)


def nbgrader_role(cell: dict) -> tuple[str, str] | None:
    """The nbgrader role of a cell and the name its grade id is made from, or None.

    ("solution", name): a code cell with a solution region, named after the function it defines
    ("autograded answer"). ("check", name): a code cell that calls ``d2lh.exercises.check_...`` or
    holds hidden tests, named after the check ("autograder tests"). ("answer", ""): a markdown
    cell with a model answer between the solution markers ("manually graded answer"; nbgrader
    requires markdown solution cells to be graded).
    """
    source = _source(cell)
    has_solution, has_hidden = BEGIN_SOLUTION in source, BEGIN_HIDDEN_TESTS in source
    if cell["cell_type"] == "markdown":
        if has_hidden:
            raise ValueError(f"hidden tests belong in a code cell, found in markdown:\n{source}")
        return ("answer", "") if has_solution else None
    if cell["cell_type"] != "code":
        return None
    check = _CHECK_CALL.search(source)
    if has_solution and (check or has_hidden):
        raise ValueError(f"a cell holds both a solution and a check; split it:\n{source}")
    if has_solution:
        definition = _DEFINITION.search(source)
        return ("solution", definition.group(1) if definition else "")
    if check or has_hidden:
        return ("check", check.group(1) if check else "")
    return None


def with_nbgrader_metadata(notebook: dict, points: float = 1) -> dict:
    """A copy of ``notebook`` whose exercise cells carry nbgrader's cell metadata, derived from
    the markers and check calls (see :func:`nbgrader_role`); other cells lose any stale
    ``nbgrader`` entry. Grade ids come from the functions' and checks' names (answers are
    numbered: answer_1, answer_2, ...); graded cells are worth ``points`` each. Raises ValueError
    if two cells would share a grade id."""
    notebook = copy.deepcopy(notebook)
    seen: dict[str, int] = {}
    counters = {"solution": 0, "check": 0, "answer": 0}
    for index, cell in enumerate(notebook["cells"]):
        role = nbgrader_role(cell)
        if role is None:
            cell.get("metadata", {}).pop("nbgrader", None)
            continue
        kind, name = role
        counters[kind] += 1
        grade_id = name or f"{kind}_{counters[kind]}"
        if grade_id in seen:
            raise ValueError(f"two exercise cells (indices {seen[grade_id]} and {index}) would "
                             f"share the nbgrader grade_id {grade_id!r}: rename one")
        seen[grade_id] = index
        meta = {"grade": kind != "solution", "grade_id": grade_id, "locked": kind == "check",
                "schema_version": NBGRADER_SCHEMA_VERSION, "solution": kind != "check"}
        if meta["grade"]:
            meta["points"] = points
        cell.setdefault("metadata", {})["nbgrader"] = meta
    return notebook


def apply_nbgrader_metadata(paths: Sequence[Path]) -> list[tuple[Path, bool]]:
    """Write nbgrader metadata into source notebooks in place (with nbformat, so the files keep
    their layout); return (path, changed) pairs."""
    import nbformat  # installed wherever notebooks run; only this command needs it

    results = []
    for path in map(Path, paths):
        notebook = nbformat.read(path, as_version=4)
        updated = nbformat.from_dict(with_nbgrader_metadata(notebook))
        changed = updated != notebook
        if changed:
            nbformat.write(updated, path)
        results.append((path, changed))
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m exercise_authoring",
        description="Write student copies of notebooks: solutions replaced by a stub that raises "
                    "NotImplementedError, hidden tests removed, outputs cleared. With "
                    "--nbgrader-metadata, write nbgrader's cell metadata into the notebooks "
                    "instead.")
    parser.add_argument("notebooks", nargs="+", type=Path, help="source notebooks")
    parser.add_argument("--out", type=Path, default=Path("student"), help="folder for the copies")
    parser.add_argument("--answer-key", type=Path, default=None,
                        help="also write copies that keep the solutions (outputs cleared) here")
    parser.add_argument("--nbgrader-metadata", action="store_true",
                        help="derive nbgrader cell metadata from the markers and write it into "
                             "the given notebooks in place (no copies are written)")
    args = parser.parse_args(argv)
    if args.nbgrader_metadata:
        for path, changed in apply_nbgrader_metadata(args.notebooks):
            print(f"{'updated' if changed else 'unchanged'} {path}")
        return 0
    for path in write_copies(args.notebooks, args.out, args.answer_key):
        print(f"wrote {path}")
    return 0

