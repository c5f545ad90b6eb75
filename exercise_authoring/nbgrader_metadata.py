"""nbgrader's cell metadata (schema version 3, that of nbgrader 0.9), derived from the markers,
the check calls and the setup cell, so that nobody edits it by hand."""

from __future__ import annotations

import copy
import re

from .copies import BEGIN_HIDDEN_TESTS, has_solution, source_of

__all__ = [
    "NBGRADER_SCHEMA_VERSION",
    "SETUP_GRADE_ID",
    "SETUP_HEADER",
    "nbgrader_role",
    "with_nbgrader_metadata",
]

NBGRADER_SCHEMA_VERSION = 3
SETUP_HEADER = "# Setup:"  # the first line of a notebook's setup cell (see sources.setup_source)
SETUP_GRADE_ID = "setup"
CHECK_CALL = re.compile(r"\bexercises\.(check_\w+)\(")
_DEFINITION = re.compile(r"^(?:def|class)\s+(\w+)", re.MULTILINE)


def nbgrader_role(cell: dict) -> tuple[str, str] | None:
    """The nbgrader role of a cell and the name its grade id is made from, or None.

    ("setup", "setup"): the setup cell, which installs and imports d2lhelpers (a locked cell:
    nbgrader restores it before grading). ("solution", name): a code cell with a solution region,
    named after the function it defines ("autograded answer"). ("check", name): a code cell that
    calls ``d2lh.exercises.check_...`` or holds hidden tests, named after the check
    ("autograder tests"). ("answer", ""): a markdown cell with a model answer between the
    solution markers ("manually graded answer"; nbgrader requires markdown solution cells to be
    graded).
    """
    source = source_of(cell)
    solution, has_hidden = has_solution(source), BEGIN_HIDDEN_TESTS in source
    if cell["cell_type"] == "markdown":
        if has_hidden:
            raise ValueError(f"hidden tests belong in a code cell, found in markdown:\n{source}")
        return ("answer", "") if solution else None
    if cell["cell_type"] != "code":
        return None
    if source.startswith(SETUP_HEADER):
        return ("setup", SETUP_GRADE_ID)
    check = CHECK_CALL.search(source)
    if solution and (check or has_hidden):
        raise ValueError(f"a cell holds both a solution and a check; split it:\n{source}")
    if solution:
        definition = _DEFINITION.search(source)
        return ("solution", definition.group(1) if definition else "")
    if check or has_hidden:
        return ("check", check.group(1) if check else "")
    return None


def with_nbgrader_metadata(notebook: dict, points: float = 1) -> dict:
    """A copy of ``notebook`` whose exercise cells and setup cell carry nbgrader's cell metadata
    (see :func:`nbgrader_role`); other cells lose any stale ``nbgrader`` entry. Grade ids come
    from the functions' and checks' names (answers are numbered: answer_1, answer_2, ...);
    graded cells are worth ``points`` each. Raises ValueError if two cells would share a grade
    id."""
    notebook = copy.deepcopy(notebook)
    seen: dict[str, int] = {}
    counters = {"setup": 0, "solution": 0, "check": 0, "answer": 0}
    for index, cell in enumerate(notebook["cells"]):
        role = nbgrader_role(cell)
        if role is None:
            cell.get("metadata", {}).pop("nbgrader", None)
            continue
        kind, name = role
        counters[kind] += 1
        grade_id = name or f"{kind}_{counters[kind]}"
        if grade_id in seen:
            raise ValueError(f"two cells (indices {seen[grade_id]} and {index}) would share the "
                             f"nbgrader grade_id {grade_id!r}: rename one")
        seen[grade_id] = index
        graded, solution = kind in ("check", "answer"), kind in ("solution", "answer")
        meta = {"grade": graded, "grade_id": grade_id, "locked": kind in ("setup", "check"),
                "schema_version": NBGRADER_SCHEMA_VERSION, "solution": solution}
        if graded:
            meta["points"] = points
        cell.setdefault("metadata", {})["nbgrader"] = meta
    return notebook
